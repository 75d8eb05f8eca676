"""Ranking short texts by meaning: tool descriptions, skills, rule documents.

Searches over what ships with the agent (tools, skills, linked documents) embed the same texts
again and again; their vectors are kept in process by embedder name and content hash, so each
text is embedded once per process however many runs search it. Only the query is embedded per
search. Keyword ranking stays the caller's; the two lists meet in ``steward.embed.fusion.fuse``.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from steward.embed.base import Embedder

EMBED_CHARS = 2_000  # of each text: embedding models read a few hundred tokens at most
VECTOR_LIMIT = 20  # entries the vector list holds: enough to fuse, few enough to stay relevant
_CACHE_SIZE = 20_000


class VectorCache:
    """Vectors by (embedder name, content hash), bounded, shared by every search in the process."""

    def __init__(self, size: int = _CACHE_SIZE) -> None:
        self._size = size
        self._vectors: OrderedDict[tuple[str, str], npt.NDArray[np.float32]] = OrderedDict()
        self._lock = threading.Lock()

    async def vectors(self, embedder: Embedder, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """One unit row per text, embedded as documents; only texts not seen before are sent."""
        import numpy as np

        from steward.embed.base import content_hash

        keys = [(embedder.name, content_hash(t[:EMBED_CHARS])) for t in texts]
        with self._lock:
            known = {k: self._vectors[k] for k in keys if k in self._vectors}
        missing = list(dict.fromkeys(k for k in keys if k not in known))
        if missing:
            first = {k: t[:EMBED_CHARS] for k, t in zip(keys, texts, strict=True)}
            made = await embedder.embed([first[k] for k in missing])
            with self._lock:
                for key, row in zip(missing, made, strict=True):
                    known[key] = row
                    self._vectors[key] = row
                    self._vectors.move_to_end(key)
                while len(self._vectors) > self._size:
                    self._vectors.popitem(last=False)
        if not keys:
            return np.zeros((0, 0), dtype=np.float32)
        return np.stack([known[k] for k in keys]).astype(np.float32, copy=False)


SHARED = VectorCache()


async def by_meaning(
    embedder: Embedder,
    query: str,
    texts: Sequence[str],
    *,
    limit: int = VECTOR_LIMIT,
    cache: VectorCache = SHARED,
) -> list[int]:
    """Indices of ``texts`` closest in meaning to ``query``, best first, at most ``limit``."""
    if not texts or not query.strip():
        return []
    import numpy as np

    documents = await cache.vectors(embedder, texts)
    asked = await embedder.embed([query[:EMBED_CHARS]], query=True)
    similarity = documents @ asked[0]
    # Stable on ties: the earlier text first, as in the keyword list.
    order = np.argsort(-similarity, kind="stable")[:limit]
    return [int(i) for i in order]
