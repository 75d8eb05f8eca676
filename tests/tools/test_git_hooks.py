"""The repository's hooks and configured programs run inside the sandbox, never on the host;
skipping hooks (no_verify) runs only when a policy rule names it."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.tools.test_git_helpers import call, git, make_repo, sandbox_for_tests

from steward.safety.policy.guard import Guard
from steward.safety.policy.rules import Policy
from steward.safety.policy.wrapper import GuardedToolset
from steward.safety.sandbox.bubblewrap import BubblewrapSandbox
from steward.tools.base import ToolContext
from steward.tools.git import git_commit, git_status, git_toolset


@pytest.fixture(scope="module")
def sandbox() -> BubblewrapSandbox:
    return sandbox_for_tests()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo")


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A host directory beside the workspace: nothing git runs may write here."""
    folder = tmp_path / "outside"
    folder.mkdir()
    return folder


def plant_hook(repo: Path, name: str, body: str) -> None:
    hook = repo / ".git" / "hooks" / name
    hook.write_text(f"#!/bin/sh\n{body}\n")
    hook.chmod(0o755)


async def test_a_pre_commit_hook_runs_inside_the_sandbox_and_cannot_write_outside(
    repo: Path, outside: Path, sandbox: BubblewrapSandbox
) -> None:
    plant_hook(
        repo,
        "pre-commit",
        f'echo "home=$HOME user=$(id -un)" > hook-ran.txt\n'
        f"echo escaped > {outside}/escaped.txt\n"
        "echo planted > .git/hooks/post-commit\n"
        "chmod +x .git/hooks/post-commit\n"
        "exit 0",
    )
    (repo / "x.txt").write_text("x\n")
    result = await call(
        git_commit, ToolContext(workspace=repo, sandbox=sandbox), message="Hooked", paths=["x.txt"]
    )
    assert not result.is_error, result.content
    assert (repo / "hook-ran.txt").read_text() == "home=/home/steward user=steward\n"
    assert not (outside / "escaped.txt").exists()
    assert not (repo / ".git" / "hooks" / "post-commit").exists()
    assert git(repo, "log", "-1", "--format=%s").strip() == "Hooked"


async def test_a_commit_msg_hook_may_edit_the_message(repo: Path, sandbox: BubblewrapSandbox) -> None:
    plant_hook(repo, "commit-msg", 'printf "\\nReviewed-by: hook\\n" >> "$1"')
    (repo / "x.txt").write_text("x\n")
    await call(git_commit, ToolContext(workspace=repo, sandbox=sandbox), message="Subject", all=True)
    assert git(repo, "log", "-1", "--format=%B").strip() == "Subject\n\nReviewed-by: hook"


async def test_a_failing_hook_refuses_the_commit_and_its_output_comes_back(
    repo: Path, sandbox: BubblewrapSandbox
) -> None:
    plant_hook(repo, "pre-commit", "echo 'lint: trailing space in x.txt'\nexit 1")
    (repo / "x.txt").write_text("x \n")
    before = git(repo, "rev-parse", "HEAD")
    result = await call(git_commit, ToolContext(workspace=repo, sandbox=sandbox), message="Refused", all=True)
    assert result.is_error
    assert "lint: trailing space in x.txt" in result.content and "hook" in result.content
    assert git(repo, "rev-parse", "HEAD") == before


async def test_the_repositorys_fsmonitor_never_runs_on_the_host(
    repo: Path, outside: Path, sandbox: BubblewrapSandbox
) -> None:
    monitor = outside / "fsmonitor.sh"
    monitor.write_text(f"#!/bin/sh\ntouch {outside}/fsmonitor-ran\n")
    monitor.chmod(0o755)
    git(repo, "config", "core.fsmonitor", str(monitor))
    (repo / "x.txt").write_text("x\n")
    for ctx in (ToolContext(workspace=repo, sandbox=sandbox), ToolContext(workspace=repo, sandbox=None)):
        assert not (await call(git_status, ctx)).is_error
    assert not (
        await call(git_commit, ToolContext(workspace=repo, sandbox=sandbox), message="m", all=True)
    ).is_error
    assert not (outside / "fsmonitor-ran").exists()


async def test_hooks_in_a_configured_hooks_path_on_the_host_do_not_run(
    repo: Path, outside: Path, sandbox: BubblewrapSandbox
) -> None:
    hooks = outside / "hooks"
    hooks.mkdir()
    (hooks / "pre-commit").write_text(f"#!/bin/sh\ntouch {outside}/hooks-path-ran\n")
    (hooks / "pre-commit").chmod(0o755)
    git(repo, "config", "core.hooksPath", str(hooks))
    (repo / "x.txt").write_text("x\n")
    result = await call(git_commit, ToolContext(workspace=repo, sandbox=sandbox), message="m", all=True)
    assert not result.is_error, result.content
    assert not (outside / "hooks-path-ran").exists()


def guarded(policy: Policy) -> GuardedToolset:
    return GuardedToolset(git_toolset(), guard=Guard(), policy=policy)


async def test_no_verify_is_refused_without_a_rule_naming_it(repo: Path, sandbox: BubblewrapSandbox) -> None:
    plant_hook(repo, "pre-commit", "exit 1")
    (repo / "x.txt").write_text("x\n")
    before = git(repo, "rev-parse", "HEAD")
    arguments = {"message": "Skip hooks", "all": True, "no_verify": True}
    ctx = ToolContext(workspace=repo, sandbox=sandbox)
    for policy in (Policy(), Policy.from_lists(allow=["git_commit"]), Policy.from_lists(mode="autonomous")):
        result = await guarded(policy).call_tool("git_commit", arguments, ctx)
        assert result.is_error
        assert 'allow = ["git_commit(no_verify)"]' in result.content
    assert git(repo, "rev-parse", "HEAD") == before


async def test_no_verify_skips_the_hooks_when_a_rule_allows_it(
    repo: Path, sandbox: BubblewrapSandbox
) -> None:
    plant_hook(repo, "pre-commit", "exit 1")
    (repo / "x.txt").write_text("x\n")
    arguments = {"message": "Skip hooks", "all": True, "no_verify": True}
    policy = Policy.from_lists(allow=["git_commit(no_verify)"])
    result = await guarded(policy).call_tool(
        "git_commit", arguments, ToolContext(workspace=repo, sandbox=sandbox)
    )
    assert not result.is_error, result.content
    assert git(repo, "log", "-1", "--format=%s").strip() == "Skip hooks"
