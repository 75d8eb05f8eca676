"""The sandbox's self-check, remembered per machine so that commands start fast.

Starting a real sandbox to see whether bubblewrap works here costs from a few tens of ms to
seconds (it copies part of ``/etc``). Its outcome depends on the machine, not on the command,
so it is kept in ``sandbox-check.json`` in the user's state directory (``$XDG_STATE_HOME/steward``,
else ``~/.local/state/steward``) with what it depends on: the bwrap executable (path and
modification time), the kernel release, the user namespace switches of ``/proc/sys``, the user
id and Steward's version. When any of them differs the outcome is not trusted and the check
runs again. ``steward doctor`` always runs it again and refreshes the file.

The remembered outcome only decides what a command says at start. The first command a
sandbox runs is preceded by a real check in that process, whatever the file says.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from steward.atomic import write_atomic

FILE_NAME = "sandbox-check.json"

#: The kernel's switches for unprivileged user namespaces, which bubblewrap needs; an
#: administrator may flip them without a new kernel.
_USERNS_SWITCHES = (
    "/proc/sys/kernel/unprivileged_userns_clone",
    "/proc/sys/user/max_user_namespaces",
    "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
)


def cache_path() -> Path:
    from steward.safety.checkpoints.shadow import default_state_dir

    return default_state_dir() / FILE_NAME


def machine_key(bwrap: str) -> dict[str, Any] | None:
    """What the self-check's outcome depends on; None when bwrap cannot be looked at."""
    from steward import __version__

    try:
        info = Path(bwrap).stat()
    except OSError:
        return None
    return {
        "bwrap": bwrap,
        "bwrap_mtime_ns": info.st_mtime_ns,
        "kernel": os.uname().release,
        "userns": {Path(p).name: _read_switch(p) for p in _USERNS_SWITCHES},
        "uid": os.geteuid(),
        "steward": __version__,
    }


def _read_switch(path: str) -> str | None:
    try:
        return Path(path).read_text(encoding="ascii").strip()
    except (OSError, ValueError):
        return None  # not on this kernel


def recall(bwrap: str) -> tuple[bool, str, str] | None:
    """The remembered outcome ``(ok, reason, fix)`` if it was found with this very ``bwrap``
    on this machine as it is now; None when there is none or it no longer holds."""
    key = machine_key(bwrap)
    try:
        data = json.loads(cache_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # none yet, or unreadable: checked again and rewritten
    if key is None or not isinstance(data, dict) or data.get("key") != key:
        return None
    ok, reason, fix = data.get("ok"), data.get("reason"), data.get("fix")
    if not isinstance(ok, bool) or not isinstance(reason, str) or not isinstance(fix, str):
        return None
    return ok, reason, fix


def remember(bwrap: str, *, ok: bool, reason: str, fix: str) -> None:
    """Keep the outcome of a check for later commands; best effort (a read-only home keeps none)."""
    key = machine_key(bwrap)
    if key is None:
        return
    path = cache_path()
    record = {"key": key, "ok": ok, "reason": reason, "fix": fix, "checked_at": time.time()}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # Written aside and renamed: a command starting meanwhile reads the old file or the new,
        # and jobs checking at the same moment (threads of one process too) never share a name.
        write_atomic(path, json.dumps(record, indent=1, sort_keys=True))
    except OSError:
        pass
