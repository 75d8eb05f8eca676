"""A deny rule on a subcommand holds however the command is spelled or computed.

Under ``deny = ["bash(git push*)"]`` in autonomous mode, a real agent run tries to push to a
real bare repository on disk with words computed at run time (substitutions, variables, quotes,
escapes, eval, scripts fed through stdin or written on the spot); the remote must receive nothing.
The same push written plainly with no rule does reach it (the test can fail).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from steward import Agent, ScriptedModel
from steward.config import load_config

pytestmark = [
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap: apt-get install bubblewrap"),
    pytest.mark.skipif(shutil.which("git") is None, reason="needs git"),
]

END: dict[str, Any] = {
    "agent_step": {"phase": "end", "summary": "done", "end_status": "solved", "end_message": "Done."}
}
SPELLINGS = [
    "git $(printf push) REMOTE main",
    'git "p"ush REMOTE main',
    "git ${X:-push} REMOTE main",
    "g=git; $g push REMOTE main",
    "git \\push REMOTE main",
    'eval "git push REMOTE main"',
    "x=push; git $x REMOTE main",
    "git `printf push` REMOTE main",
    "git p?sh REMOTE main",
    'bash -c "git \\$(printf push) REMOTE main"',
    "printf 'git push REMOTE main' | sh",
    "cat <<EOF | bash\ngit push REMOTE main\nEOF",
    ". /dev/stdin <<< 'git push REMOTE main'",
    "echo 'git push REMOTE main' > s.sh; sh s.sh",
    "printf 'git push REMOTE main' > p.sh && chmod +x p.sh && ./p.sh",
    "mkdir -p t && cd t && printf 'git push ../REMOTE main' > x && cd - && bash t/x",
]


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=u", "-c", "user.email=u@example.com", *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return done.stdout


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    git(ws, "init", "-q", "-b", "main")
    (ws / "a.txt").write_text("a\n")
    git(ws, "add", "a.txt")
    git(ws, "commit", "-q", "-m", "first")
    git(tmp_path, "init", "-q", "--bare", str(ws / "remote.git"))  # reachable from the sandbox
    return ws


def run(workspace: Path, commands: list[str], deny: list[str]) -> None:
    (workspace / "steward.toml").write_text(
        f'[policy]\nmode = "autonomous"\ndeny = {deny!r}\n'.replace("'", '"')
    )
    script = [{"tool": "bash", "args": {"command": c.replace("REMOTE", "remote.git")}} for c in commands]
    agent = Agent(ScriptedModel.from_data([*script, END]), config=load_config(workspace))
    agent.run_sync("publish", workspace=workspace)


def test_no_spelling_of_a_denied_push_reaches_the_remote(workspace: Path) -> None:
    run(workspace, SPELLINGS, ["bash(git push*)"])
    assert git(workspace / "remote.git", "for-each-ref") == ""


def test_without_the_rule_the_push_does_reach_it(workspace: Path) -> None:
    run(workspace, ["git push remote.git main"], [])
    assert "refs/heads/main" in git(workspace / "remote.git", "for-each-ref")
