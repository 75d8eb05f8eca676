"""Host git for a push never runs what the workspace's repository plants: hooks, fsmonitor, a
hooks directory, a receive-pack command, URL rewrites, an ssh command, credential helpers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.tools.test_forge_repo import Repo, git, make_repo

from steward import Agent, ScriptedModel
from steward.config import Config, GitSettings, PolicySettings
from steward.events import ToolResultEvent
from steward.safety.policy.rules import Policy

END = {"agent_step": {"phase": "end", "summary": "pushed", "end_status": "solved", "end_message": "done"}}
PUSH: dict[str, Any] = {"tool": "git_push", "args": {}}


def marker_script(root: Path, name: str, then: str = "exit 0") -> Path:
    """A program that leaves ``root/MARK-name`` behind when anything runs it."""
    script = root / f"{name}.sh"
    script.write_text(f'#!/bin/sh\ntouch "{root}/MARK-{name}"\n{then}\n')
    script.chmod(0o755)
    return script


def markers(root: Path) -> list[str]:
    return sorted(p.name for p in root.glob("MARK-*"))


def plant(repo: Repo, root: Path) -> Path:
    """Everything a repository's own config and hooks can make git run; returns a decoy remote."""
    hooks = repo.workspace / ".git" / "hooks"
    hooks.mkdir(exist_ok=True)
    for hook in ("pre-push", "reference-transaction", "post-update"):
        (hooks / hook).write_text(marker_script(root, f"hook-{hook}").read_text())
        (hooks / hook).chmod(0o755)
    elsewhere = root / "planted-hooks"
    elsewhere.mkdir()
    for hook in ("pre-push", "reference-transaction"):
        (elsewhere / hook).write_text(marker_script(root, f"hookspath-{hook}").read_text())
        (elsewhere / hook).chmod(0o755)
    decoy = root / "decoy.git"
    git(root, "init", "-q", "--bare", str(decoy))
    ws = repo.workspace
    git(ws, "config", "core.hooksPath", str(elsewhere))
    git(ws, "config", "core.fsmonitor", str(marker_script(root, "fsmonitor")))
    receive = marker_script(root, "receivepack", 'exec git-receive-pack "$@"')
    git(ws, "config", "remote.origin.receivepack", str(receive))
    git(ws, "config", f"url.{decoy}.insteadOf", str(repo.remote))
    git(ws, "config", "core.sshCommand", str(marker_script(root, "ssh")))
    git(ws, "config", "credential.helper", f"!{marker_script(root, 'credential')}")
    git(ws, "config", "core.askPass", str(marker_script(root, "askpass")))
    git(ws, "config", "log.showSignature", "true")
    git(ws, "config", "gpg.program", str(marker_script(root, "gpg")))
    git(ws, "config", "diff.external", str(marker_script(root, "extdiff")))
    return decoy


def agent(replies: list[dict[str, Any]], allow: tuple[str, ...] = ()) -> Agent:
    return Agent(
        ScriptedModel.from_data(replies),
        config=Config(git=GitSettings(), policy=PolicySettings(allow=list(allow))),
        policy=Policy.from_lists(allow=allow),
    )


def test_the_plants_do_run_under_plain_git(tmp_path: Path) -> None:
    """The control: ordinary git in this repository runs them, so their absence below means something."""
    repo = make_repo(tmp_path)
    decoy = plant(repo, tmp_path)
    git(repo.workspace, "status", "--short")
    git(repo.workspace, "update-ref", "refs/heads/probe", "HEAD")
    git(repo.workspace, "push", "-q", "origin", "HEAD:refs/heads/probe")
    assert {
        "MARK-fsmonitor",
        "MARK-hookspath-reference-transaction",
        "MARK-hookspath-pre-push",
        "MARK-receivepack",
    } <= set(markers(tmp_path))
    assert "refs/heads/probe" in git(decoy, "for-each-ref")  # the rewrite sends plain git elsewhere


@pytest.mark.parametrize("approved", [True, False], ids=["asked-and-approved", "allowed-by-rule"])
async def test_a_push_runs_none_of_what_the_repository_plants(tmp_path: Path, approved: bool) -> None:
    repo = make_repo(tmp_path)
    git(repo.workspace, "switch", "-q", "-c", "fix")
    sha = repo.commit("fix.py", "x = 1\n", "Fix it")
    decoy = plant(repo, tmp_path)
    run = agent([PUSH, END], allow=() if approved else ("git_push",)).start("push", workspace=repo.workspace)
    events = [e async for e in run.stream()]
    if approved:
        events = [e async for e in run.approve_stream()]
    result = next(e for e in events if isinstance(e, ToolResultEvent))
    assert result.output.startswith(f"Pushed {sha[:12]}"), result.output
    assert repo.remote_sha("fix") == sha  # the remote the config names, not the rewrite's decoy
    assert git(decoy, "for-each-ref") == ""
    assert markers(tmp_path) == []


async def test_a_push_url_inside_the_workspace_is_refused(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    inside = repo.workspace / "sneaky.git"
    git(repo.workspace, "init", "-q", "--bare", str(inside))
    git(repo.workspace, "config", "remote.origin.pushurl", str(inside))
    run = agent([PUSH, END], allow=("git_push",)).start("push", workspace=repo.workspace)
    events = [e async for e in run.stream()]
    result = next(e for e in events if isinstance(e, ToolResultEvent))
    assert "is inside the workspace" in result.output
    assert git(inside, "for-each-ref") == ""
