"""Who runs a run: the process recorded as its owner in the store, and whether it still lives.

A run recorded as running by a live process is not taken over; one whose owner is gone (the
process crashed, the machine restarted) is resumed by whoever asks.
"""

from __future__ import annotations

import os


def host_id() -> str:
    """This machine's name in the store: ``STEWARD_HOST_ID`` if set (containers that share a
    host name, several workers' hosts on one database), else the host name."""
    import socket

    return os.environ.get("STEWARD_HOST_ID", "").strip() or socket.gethostname()


def process_owner() -> str:
    """Who runs a run, as recorded in the store: ``host:pid:start`` (start tells reused pids apart)."""
    from steward._proc import process_start

    return f"{host_id()}:{os.getpid()}:{process_start(os.getpid()) or ''}"


def owner_alive(owner: str) -> bool:
    """Whether the recorded owner of a run is a live process other than this one.

    Only processes on this host can be checked; one elsewhere is taken to be alive. A zombie,
    or another process that got the same pid later, is not the owner.
    """
    from steward._proc import pid_alive

    host, _, rest = owner.partition(":")
    if host != host_id():
        return True
    pid_text, _, start = rest.partition(":")
    try:
        pid = int(pid_text)
    except ValueError:
        return False
    if pid == os.getpid():
        return False
    return pid_alive(pid, start or None)
