"""Writing a file that another process (or thread) may be writing at the same moment.

Every such file (caches, pins, the token file, a config Steward edits) is written under a
name of its own in the same directory and renamed over the target: readers see the old file
or the new one, never half of either, and two writers never share a temporary file. A fixed
temporary name (``NAME.tmp``) is not enough: the second writer truncates the first one's file,
and whichever renames second finds nothing to rename.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def write_atomic(path: Path, data: str | bytes, *, mode: int = 0o644) -> None:
    """Replace ``path`` with ``data`` in one step. ``mode`` is the new file's permission bits,
    set before the first byte is written (a secret file is never readable by others).

    Raises ``OSError`` as ``open`` would; no temporary file is left behind either way."""
    content = data.encode("utf-8") if isinstance(data, str) else data
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    temporary = Path(name)
    try:
        with os.fdopen(fd, "wb") as out:
            os.fchmod(out.fileno(), mode)
            out.write(content)
        temporary.replace(path)
    except BaseException:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise
