"""Shared by the git tool tests: a real repository in a temp dir, a sandbox, and calling a tool."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

from steward.safety.sandbox.bubblewrap import BubblewrapSandbox, SandboxSettings
from steward.tools.base import Tool, ToolContext, ToolResult

IDENTITY = ("-c", "user.name=Test Author", "-c", "user.email=author@example.com")


def git(repo: Path, *args: str) -> str:
    """Run git on the host in ``repo`` (set-up and checks only), failing the test on an error."""
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}
    done = subprocess.run(
        ["git", "-C", str(repo), *IDENTITY, *args], capture_output=True, text=True, check=True, env=env
    )
    return done.stdout


def make_repo(root: Path, *, identity: bool = True) -> Path:
    """A repository on branch main with one commit (README.md), its identity in its own config."""
    root.mkdir(parents=True, exist_ok=True)
    git(root, "init", "-q", "-b", "main")
    if identity:
        git(root, "config", "user.name", "Test Author")
        git(root, "config", "user.email", "author@example.com")
    (root / "README.md").write_text("hello\n")
    git(root, "add", "README.md")
    git(root, "commit", "-q", "-m", "First commit")
    return root


def sandbox_for_tests() -> BubblewrapSandbox:
    return BubblewrapSandbox(SandboxSettings(cpu_s=30, max_processes=128, tmpfs_mb=64))


async def call(tool: Tool, ctx: ToolContext, **arguments: Any) -> ToolResult:
    return await tool.call(arguments, ctx)


def test_the_helper_repository_has_one_commit_on_main(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    assert git(repo, "rev-parse", "--abbrev-ref", "HEAD").strip() == "main"
    assert git(repo, "log", "--format=%s").strip() == "First commit"
