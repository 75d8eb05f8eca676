"""Two processes on one workspace: a sweep of one process's stale ledger line never removes the
placeholder another live process has made since under the same name (it was mounted a moment
later: bwrap failed with "Can't find source path .../steward.toml", and the job's append was lost)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from steward.safety.sandbox.bubblewrap import _PLACEHOLDERS, sweep_placeholders

HOLDER = """
import sys
from pathlib import Path
from steward.safety.sandbox.bubblewrap import _PLACEHOLDERS

root = Path(sys.argv[1])
claimed = _PLACEHOLDERS.acquire([], [root / "steward.toml"], [], root)
print("held" if claimed else "none", flush=True)
sys.stdin.readline()  # held until the test says
_PLACEHOLDERS.release(claimed)
print("released", flush=True)
"""


def test_a_stale_line_of_this_process_does_not_sweep_another_process_s_placeholder(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    placeholder = workspace / "steward.toml"
    # This process made and removed one: its ledger line stays until a sweep.
    mine = _PLACEHOLDERS.acquire([], [placeholder], [], workspace)
    _PLACEHOLDERS.release(mine)
    assert mine == [placeholder] and not placeholder.exists()
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(workspace)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdin is not None
        assert holder.stdout.readline().strip() == "held"
        assert placeholder.exists()
        sweep_placeholders(workspace)  # this process's line is stale, the other's is live
        assert placeholder.exists(), "the live placeholder of another process was swept"
        holder.stdin.write("\n")
        holder.stdin.flush()
        assert holder.stdout.readline().strip() == "released"
    finally:
        holder.communicate(timeout=60)
    assert not placeholder.exists()
    sweep_placeholders(workspace)
    assert (workspace / ".steward" / "placeholders").read_text() == ""  # both lines gone now
