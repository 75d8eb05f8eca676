"""When a request that failed before its reply started is sent again: one schedule for every provider.

A provider sends a request again itself (its SDK's retries are off) so that one rule decides
for all of them, the rule of ``_errors``: a failure worth another try waits (what the server
asked for in ``retry-after-ms``/``retry-after``, else a doubling backoff) and is sent again, up
to ``retries`` times and never past the call's deadline; the same 5xx twice for the same
request is not sent a third time; what is left is ``spent``, which the loop's ``RetryingModel``
does not multiply.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping

from steward.errors import ModelError

from ._errors import spent

__all__ = ["Attempts", "retry_after"]

BACKOFF_S, BACKOFF_MOST_S = 0.5, 8.0
RETRY_AFTER_MOST_S = 60.0  # a server asking for longer is not waited for within one call
_BUSY = frozenset({502, 503, 504, 529})


def retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds the server asked to wait (``retry-after-ms`` or ``retry-after``), if sensible."""
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        try:
            seconds = float(headers.get(name, "")) / scale
        except ValueError:
            continue
        if 0 <= seconds <= RETRY_AFTER_MOST_S:
            return seconds
    return None


class Attempts:
    """The tries of one request: ``for attempt in attempts`` sends, ``after`` decides what next."""

    def __init__(self, retries: int, deadline: float | None) -> None:
        self.retries, self.deadline = retries, deadline
        self._previous: tuple[int, str] | None = None

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.retries + 1))

    def repeated(self, status: int, detail: str) -> bool:
        """Note a server error; True when it is a 5xx the previous try got word for word.

        Not for the statuses that say "busy, try later" (a gateway, an overload): those read
        the same every time and still pass.
        """
        seen, previous = (status, detail), self._previous
        self._previous = seen
        return status >= 500 and status not in _BUSY and seen == previous

    async def after(
        self,
        error: ModelError,
        attempt: int,
        headers: Mapping[str, str] | None = None,
        *,
        worth_it: bool | None = None,
    ) -> None:
        """Wait before the next try, or raise ``error`` (spent) when there is none worth making.

        ``worth_it`` overrides ``error.retryable`` (a refused connection is worth another try
        within the call: a server starting up answers a moment later).
        """
        if not (error.retryable if worth_it is None else worth_it) or attempt >= self.retries:
            raise spent(error, attempt)
        asked = retry_after(headers) if headers is not None else None
        pause = min(BACKOFF_S * 2**attempt, BACKOFF_MOST_S) if asked is None else asked
        loop = asyncio.get_running_loop()
        if self.deadline is not None and loop.time() + pause >= self.deadline:
            raise spent(error, attempt)
        await asyncio.sleep(pause)
