"""`.steward/` stays out of `git status`, whichever part of Steward creates it (real git)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

# The model says hi and that it is done.
SAID_HI = {"agent_step": {"phase": "end", "summary": "hi", "end_status": "solved", "end_message": "hi"}}


def _git(workspace: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=workspace, capture_output=True, text=True, check=True)
    return done.stdout


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    _git(workspace, "init", "-q")
    (workspace / "README.md").write_text("hello\n")
    return workspace


def _script(tmp_path: Path, replies: list[dict[str, Any]]) -> Path:
    script = tmp_path / "s.yaml"
    script.write_text(yaml.safe_dump(replies))
    return script


def test_a_recorded_run_leaves_git_status_showing_only_the_users_files(
    cli: Any, tmp_path: Path, repository: Path
) -> None:
    proc = cli("run", "say hi", "--model", f"scripted:{_script(tmp_path, [SAID_HI])}", cwd=repository)
    assert proc.returncode == 0, proc.stderr
    assert (repository / ".steward" / "steward.db").is_file()
    assert _git(repository, "status", "--porcelain", "--untracked-files=all") == "?? README.md\n"
    _git(repository, "add", ".")
    assert _git(repository, "diff", "--cached", "--name-only") == "README.md\n"  # no database committed


def test_a_gitignore_the_user_changed_is_kept(cli: Any, tmp_path: Path, repository: Path) -> None:
    (repository / ".steward" / "skills" / "x").mkdir(parents=True)
    (repository / ".steward" / "skills" / "x" / "SKILL.md").write_text("---\nname: x\n---\n")
    (repository / ".steward" / ".gitignore").write_text("*\n!/skills/\n!/skills/**\n")
    proc = cli("run", "say hi", "--model", f"scripted:{_script(tmp_path, [SAID_HI])}", cwd=repository)
    assert proc.returncode == 0, proc.stderr
    assert (repository / ".steward" / ".gitignore").read_text() == "*\n!/skills/\n!/skills/**\n"
    untracked = _git(repository, "status", "--porcelain", "--untracked-files=all").splitlines()
    assert untracked == ["?? .steward/skills/x/SKILL.md", "?? README.md"]


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap: apt-get install bubblewrap")
def test_the_sandbox_making_steward_folder_also_writes_the_gitignore(
    cli: Any, tmp_path: Path, repository: Path
) -> None:
    # The store lives elsewhere, so the first to make .steward/ is the sandbox (it mounts it read-only).
    script = _script(tmp_path, [{"tool": "bash", "args": {"command": "true"}}, SAID_HI])
    store = f"sqlite:///{tmp_path / 'elsewhere' / 'steward.db'}"
    proc = cli("run", "run true", "--model", f"scripted:{script}", cwd=repository, STEWARD_DB=store)
    assert proc.returncode == 0, proc.stderr
    assert (repository / ".steward").is_dir()
    assert _git(repository, "status", "--porcelain", "--untracked-files=all") == "?? README.md\n"
