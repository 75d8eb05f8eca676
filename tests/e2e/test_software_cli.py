"""At the terminal: ``steward run`` asks before a push, listing what would leave, and ``y`` pushes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml
from tests.tools.test_forge_repo import git, make_repo

END = {"agent_step": {"phase": "end", "summary": "pushed", "end_status": "solved", "end_message": "pushed"}}


def test_the_terminal_prompt_lists_what_leaves_and_y_pushes(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    git(repo.workspace, "switch", "-q", "-c", "fix")
    sha = repo.commit("fix.py", "x = 1\n", "Fix the widget count")
    script = tmp_path / "s.yaml"
    script.write_text(yaml.safe_dump([{"tool": "git_push", "args": {}}, END]))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STEWARD_", "OPENAI_", "ANTHROPIC_"))}
    env |= {"XDG_CONFIG_HOME": str(tmp_path / "config"), "XDG_STATE_HOME": str(tmp_path / "state")}
    done = subprocess.run(
        [sys.executable, "-m", "steward", "run", "push the fix", "--model", f"scripted:{script}"],
        cwd=repo.workspace, env=env, input="y\n", capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    prompt = done.stderr[done.stderr.index("? approve git_push") :]
    assert f"  Leaves the machine: push commit {sha[:12]} to branch 'fix' of origin ({repo.remote})" in prompt
    assert "    " + sha[:7] + " Fix the widget count" in prompt and "fix.py" in prompt
    assert "[a] always: allow git_push" in prompt
    assert repo.remote_sha("fix") == sha
