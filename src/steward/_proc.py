"""Is a process alive? Zombies and reused process ids count as gone (Linux ``/proc``)."""

from __future__ import annotations

import os
from pathlib import Path


def _stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after its last ")".
    return text[text.rfind(")") + 2 :].split()


def process_start(pid: int) -> str | None:
    """The process's start time (clock ticks since boot), which tells a reused pid apart."""
    fields = _stat(pid)
    return fields[19] if fields and len(fields) > 19 else None


def pid_alive(pid: int, start: str | None = None) -> bool:
    """Whether ``pid`` runs (not a zombie), and is the process that started at ``start`` if given."""
    if pid <= 0:
        return False
    fields = _stat(pid)
    if fields is None:  # no /proc entry (or no /proc at all): ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    if fields[0] in ("Z", "X"):  # exited; only its exit status is left
        return False
    return start is None or len(fields) <= 19 or fields[19] == start
