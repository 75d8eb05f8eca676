"""A deterministic embedder for tests: words and character trigrams hashed into a fixed space.

Texts that share words come out close, texts that share none come out near orthogonal, and the
same text always gives the same vector, in any process: enough to test that vectors are stored,
compared, fused and scoped, without a model. The fake server (``steward.testing.fake_llm``)
serves these vectors on ``/v1/embeddings`` so the real HTTP client is tested over a socket. It
knows no meaning: ``car`` and ``automobile`` are strangers to it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import numpy as np

from steward.embed.base import Vectors, normalise

_WORD = re.compile(r"\w+", re.UNICODE)


def hash_vectors(texts: Sequence[str], dim: int = 256) -> Vectors:
    out = np.zeros((len(texts), dim), dtype=np.float32)
    for row, text in enumerate(texts):
        for word in _WORD.findall(text.casefold()):
            stem = word[:-1] if len(word) > 3 and word.endswith("s") else word
            _add(out[row], "w:" + stem, 1.0, dim)
            padded = f"#{stem}#"
            for i in range(len(padded) - 2):
                _add(out[row], "t:" + padded[i : i + 3], 0.25, dim)
    return normalise(out) if len(texts) else out


def _add(row: np.ndarray, feature: str, weight: float, dim: int) -> None:
    digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
    index = int.from_bytes(digest[:4], "little") % dim
    sign = 1.0 if digest[4] & 1 else -1.0
    row[index] += sign * weight


class HashEmbedder:
    """``Embedder`` over ``hash_vectors``, in process (the fake server serves the same vectors)."""

    def __init__(self, dim: int = 256) -> None:
        self._dim = dim
        self.calls = 0  # requests made, for tests that count them
        self.texts = 0  # texts embedded

    @property
    def name(self) -> str:
        return f"hash:{self._dim}"

    async def embed(self, texts: Sequence[str], *, query: bool = False) -> Vectors:
        self.calls += 1
        self.texts += len(texts)
        return hash_vectors(texts, self._dim)

    async def aclose(self) -> None:
        return None
