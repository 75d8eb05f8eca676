"""Two processes on one workspace: a sweep of one process's stale ledger line never removes the
placeholder another live process has made since under the same name (it was mounted a moment
later: bwrap failed with "Can't find source path .../steward.toml", and the job's append was lost)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from steward.safety.sandbox.bubblewrap import _PLACEHOLDERS, sweep_placeholders

HOLDER = """
import sys
from pathlib import Path
from steward.safety.sandbox.bubblewrap import _PLACEHOLDERS

root = Path(sys.argv[1])
claimed = _PLACEHOLDERS.acquire([], [root / "steward.toml"], [], root).paths
print("held" if claimed else "none", flush=True)
sys.stdin.readline()  # held until the test says
_PLACEHOLDERS.release(claimed)
print("released", flush=True)
"""


@contextmanager
def another_process_holding(workspace: Path) -> Iterator[Callable[[], None]]:
    """A second process that has made the workspace's steward.toml placeholder; the function
    yielded makes it release the placeholder (and waits until it has)."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(workspace)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert holder.stdout is not None and holder.stdin is not None
    stdin, stdout = holder.stdin, holder.stdout

    def release() -> None:
        stdin.write("\n")
        stdin.flush()
        assert stdout.readline().strip() == "released"

    try:
        assert stdout.readline().strip() == "held"
        yield release
    finally:
        holder.communicate(timeout=60)


def test_a_stale_line_of_this_process_does_not_sweep_another_process_s_placeholder(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    placeholder = workspace / "steward.toml"
    # This process made and removed one: its ledger line stays until a sweep.
    mine = _PLACEHOLDERS.acquire([], [placeholder], [], workspace).paths
    _PLACEHOLDERS.release(mine)
    assert mine == [placeholder] and not placeholder.exists()
    with another_process_holding(workspace) as release:
        assert placeholder.exists()
        sweep_placeholders(workspace)  # this process's line is stale, the other's is live
        assert placeholder.exists(), "the live placeholder of another process was swept"
        release()
    assert not placeholder.exists()
    sweep_placeholders(workspace)
    assert (workspace / ".steward" / "placeholders").read_text() == ""  # both lines gone now


def test_a_placeholder_another_process_made_stays_while_this_one_relies_on_it(tmp_path: Path) -> None:
    """This process found the other's placeholder in its scan and mounts it: the other's release
    must not remove it under this process's command (bwrap: "Can't find source path")."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    placeholder = workspace / "steward.toml"
    with another_process_holding(workspace) as release:
        claimed = _PLACEHOLDERS.acquire([], [], [placeholder], workspace)  # found existing by the scan
        assert claimed.paths == [placeholder] and claimed.vanished == []
        release()
        assert placeholder.exists(), "the other process removed a placeholder this one still holds"
    _PLACEHOLDERS.release(claimed.paths)
    assert not placeholder.exists()
    assert (workspace / ".steward" / "placeholders").read_text() == ""


def test_an_existing_path_gone_since_the_scan_is_reported(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    claimed = _PLACEHOLDERS.acquire([], [], [workspace / "steward.toml"], workspace)
    assert claimed.paths == [] and claimed.vanished == [workspace / "steward.toml"]


WORKER = """
import sys
from pathlib import Path
from steward.safety.sandbox.placeholders import Placeholders

root, rounds = Path(sys.argv[1]), int(sys.argv[2])
path = root / "steward.toml"
places = Placeholders()
lost = 0
sys.stdin.readline()  # both start together
for n in range(rounds):
    # As a command sets up: sweep, scan (the placeholder exists or not), claim.
    places.sweep(root)
    existing = path.exists()
    claimed = places.acquire([], [] if existing else [path], [path] if existing else [], root)
    if claimed.vanished:  # gone since the scan: scanned again
        claimed = places.acquire([], [path], [], root)
    if not path.is_file():  # bwrap would mount it now
        lost += 1
    places.release(claimed.paths)
print(lost, flush=True)
"""


def test_two_workers_never_lose_a_placeholder_they_hold(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(workspace), "3000"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    for worker in workers:
        assert worker.stdin is not None
        worker.stdin.write("go\n")
        worker.stdin.flush()
    lost = [int(worker.communicate(timeout=600)[0]) for worker in workers]
    assert [worker.returncode for worker in workers] == [0, 0]
    assert lost == [0, 0], "a placeholder went while a worker held it"
    assert not (workspace / "steward.toml").exists()
    assert (workspace / ".steward" / "placeholders").read_text() == ""
