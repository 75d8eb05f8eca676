"""Vector search backends of long-term memory (filled in next: NumPy, pgvector, sqlite-vec probe)."""

from __future__ import annotations

from typing import Protocol


class VectorIndex(Protocol):
    """Searches one scope's vectors of one embedding model."""

    @property
    def name(self) -> str: ...
