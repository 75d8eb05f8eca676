"""Trying a model again: a wrapper that retries retryable failures with backoff.

A retryable failure that the provider's own bounded retries did not cover (a stream broken,
stalled or timed out after it started) is tried again up to ``retries`` times, waiting
``backoff_s`` doubled each time (or what the failure asked for). A failure the provider
already retried (``RetriesSpentError``: a rate limit, an overload) is not: two layers of retries
would multiply each other's requests. Each retry is announced in the stream as a
``Retrying`` item, so that whoever shows the reply can say so. The waits are part of the
stream: a deadline on reading it bounds them too.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from steward.errors import ModelError
from steward.models._errors import RetriesSpentError
from steward.models.base import Model, ModelRequest, Retrying, StreamItem


class RetryingModel(Model):
    def __init__(self, model: Model, *, retries: int, backoff_s: float) -> None:
        self.model, self.retries, self.backoff_s = model, retries, backoff_s
        self.name = model.name

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        import asyncio

        attempts = self.retries + 1
        for attempt in range(1, attempts + 1):
            stream = self.model.stream(request)
            try:
                async for piece in stream:
                    yield piece
            except ModelError as exc:
                if not exc.retryable or isinstance(exc, RetriesSpentError) or attempt == attempts:
                    raise
                delay = self.backoff_s * 2 ** (attempt - 1) if exc.retry_after is None else exc.retry_after
                yield Retrying(f"{exc} (attempt {attempt} of {attempts}; retrying in {delay:g} s)")
                await asyncio.sleep(delay)
            else:
                return
            finally:
                close = getattr(stream, "aclose", None)
                if close is not None:
                    await close()

    async def aclose(self) -> None:
        await self.model.aclose()
