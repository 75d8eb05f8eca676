"""Careful reading of rule files, and a cache that notices when they change.

Rule files come from the repository, so they may be huge, binary, unreadable or symlinks to
anywhere. ``read_text`` never raises for any of that: a file that cannot be used is None.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, TypeVar

_SNIFF_BYTES = 8192

V = TypeVar("V")


@dataclass(slots=True, frozen=True)
class Text:
    """The head of a text file: at most the asked-for characters, and whether more followed."""

    text: str
    truncated: bool


def inside(path: Path, root: Path) -> bool:
    """Whether ``path`` is ``root`` or below it (components compared, not string prefixes)."""
    return path == root or path.is_relative_to(root)


def real_file(path: Path, root: Path) -> Path | None:
    """The real path of the regular file ``path`` when it lies inside ``root`` (a real path)."""
    try:
        real = path.resolve(strict=True)
        if not inside(real, root) or not real.is_file():
            return None
    except (OSError, RuntimeError):  # RuntimeError: a symlink loop on older Pythons
        return None
    return real


def read_text(path: Path, root: Path, max_chars: int) -> Text | None:
    """The first ``max_chars`` characters of the text file ``path``, confined to ``root``.

    None when the file is missing, outside ``root`` (also through a symlink), not a regular
    file, unreadable or binary (a NUL byte near its start).
    """
    real = real_file(path, root)
    if real is None:
        return None
    # A UTF-8 character is at most 4 bytes: this many bytes always hold max_chars characters.
    limit = max_chars * 4 + 4
    try:
        with real.open("rb") as handle:
            data = handle.read(limit)
            more = bool(handle.read(1))
    except OSError:
        return None
    if b"\x00" in data[:_SNIFF_BYTES]:
        return None
    text = data.decode("utf-8-sig", errors="replace").replace("\r\n", "\n")
    truncated = more or len(text) > max_chars
    return Text(text[:max_chars], truncated)


def cut_at_line(text: str) -> str:
    """``text`` without its last, possibly cut, line (kept when it is the only one)."""
    head, newline, _ = text.rpartition("\n")
    return head + newline if newline and head else text


# --- a cache invalidated by file stamps ---------------------------------------------------

Stamp = tuple[int, int, int] | None


def stamp(path: Path) -> Stamp:
    """What changes when ``path`` (followed through symlinks) is created, edited or removed."""
    try:
        st = path.stat()
    except (OSError, ValueError):
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


@dataclass(slots=True)
class Watch:
    """The paths a cached value was built from, each stamped just before it was read."""

    stamps: list[tuple[Path, Stamp]] = field(default_factory=list)

    def add(self, path: Path) -> None:
        self.stamps.append((path, stamp(path)))

    def fresh(self) -> bool:
        return all(stamp(path) == seen for path, seen in self.stamps)


class StampedCache(Generic[V]):
    """A few values by key, each rebuilt when one of the files it was built from changed.

    Checking costs one ``stat`` per watched path, so asking every step is cheap. Tools run in
    worker threads, hence the lock.
    """

    def __init__(self, size: int = 16) -> None:
        self._size = size
        self._entries: OrderedDict[Hashable, tuple[V, Watch]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable, build: Callable[[Watch], V]) -> V:
        with self._lock:
            entry = self._entries.get(key)
        if entry is not None and entry[1].fresh():
            return entry[0]
        watch = Watch()
        value = build(watch)
        with self._lock:
            self._entries[key] = (value, watch)
            self._entries.move_to_end(key)
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)
        return value
