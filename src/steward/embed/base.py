"""The ``Embedder`` protocol and the vector helpers shared by the store, search and cache."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

Vectors = npt.NDArray[np.float32]  # shape (n, dim), each row L2-normalised


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into unit vectors of one fixed space.

    ``name`` names that space (``"local:multilingual-e5-small-q4"``, ``"openai:text-embedding-3-small"``):
    it is stored beside every vector, so that a vector is only ever compared with vectors of the
    same name. ``query`` marks the texts as search queries (models such as E5 embed a query and
    a passage differently); documents are embedded with ``query=False``.
    """

    @property
    def name(self) -> str: ...

    async def embed(self, texts: Sequence[str], *, query: bool = False) -> Vectors: ...

    async def aclose(self) -> None: ...


def normalise(vectors: npt.ArrayLike) -> Vectors:
    """Rows scaled to unit length (a zero row stays zero), as float32."""
    array = np.asarray(vectors, dtype=np.float32)
    if array.ndim == 1:
        array = array.reshape(1, -1)
    norms = np.linalg.norm(array, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    scaled: Vectors = (array / norms).astype(np.float32, copy=False)
    return scaled


def to_bytes(vector: npt.NDArray[np.float32]) -> bytes:
    """One vector as stored: float32, little-endian."""
    return np.asarray(vector, dtype="<f4").tobytes()


def from_bytes(blob: bytes, dim: int) -> npt.NDArray[np.float32]:
    vector = np.frombuffer(blob, dtype="<f4")
    if vector.shape[0] != dim:
        raise ValueError(f"stored vector has {vector.shape[0]} values, its row says {dim}")
    return vector.astype(np.float32, copy=False)


def content_hash(text: str) -> str:
    """The key of a text's vector and of near-duplicate detection: sha256 of its words,
    case-folded, whitespace collapsed."""
    return hashlib.sha256(" ".join(text.casefold().split()).encode()).hexdigest()
