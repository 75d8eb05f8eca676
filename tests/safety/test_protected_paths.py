"""Which workspace paths are protected, and the file tools refusing them (no sandbox needed)."""

from __future__ import annotations

import os
from functools import partial
from pathlib import Path

import pytest

from steward.safety.protected import find_protected, protected_reason
from steward.tools.base import ToolContext
from steward.tools.files import edit_file, write_file

CONFIG = "[core]\n\tbare = false\n"


def make_repo(gitdir: Path, config: str = CONFIG) -> Path:
    (gitdir / "hooks").mkdir(parents=True)
    (gitdir / "hooks" / "pre-commit.sample").write_text("#!/bin/sh\n")
    (gitdir / "HEAD").write_text("ref: refs/heads/main\n")
    (gitdir / "config").write_text(config)
    return gitdir


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root.resolve()


@pytest.mark.parametrize(
    ("path", "why"),
    [
        (".git/hooks/pre-commit", "git hooks"),
        (".git/config", "git configuration"),
        (".git/commondir", "git configuration"),
        (".git", ".git file"),
        ("vendor/lib/.git/hooks/post-merge", "git hooks"),
        (".git/modules/sub/hooks/pre-push", "git hooks"),
        (".steward/steward.db", "runtime's own state"),
        (".bashrc", "shell start-up file"),
        (".envrc", "shell start-up file"),
    ],
)
def test_protected_paths_are_named_with_the_reason(workspace: Path, path: str, why: str) -> None:
    reason = protected_reason(workspace, workspace / path)
    assert reason is not None
    assert reason.startswith(f"{path!r} is a protected path: ")
    assert why in reason


@pytest.mark.parametrize(
    "path",
    ["src/app.py", ".gitignore", ".github/workflows/ci.yml", "docs/.bashrc", "hooks/pre-commit", "notes.git"],
)
def test_ordinary_paths_are_not_protected(workspace: Path, path: str) -> None:
    assert protected_reason(workspace, workspace / path) is None


def test_a_relative_path_is_taken_from_the_workspace(workspace: Path) -> None:
    assert protected_reason(workspace, Path(".git/config")) is not None


def test_a_symlinked_git_directory_is_protected_at_its_target(workspace: Path) -> None:
    make_repo(workspace / "store")
    (workspace / ".git").symlink_to("store")
    assert protected_reason(workspace, workspace / "store" / "hooks" / "pre-commit") is not None
    assert protected_reason(workspace, workspace / "store" / "config") is not None
    assert protected_reason(workspace, workspace / "store" / "objects" / "ab") is None


def test_the_directory_a_git_file_names_is_protected(workspace: Path) -> None:
    make_repo(workspace / "gitdirs" / "main")
    (workspace / ".git").write_text("gitdir: gitdirs/main\n")
    reason = protected_reason(workspace, workspace / "gitdirs" / "main" / "hooks" / "x")
    assert reason is not None
    assert "git hooks" in reason


def test_a_configured_hooks_path_is_protected(workspace: Path) -> None:
    make_repo(workspace / ".git", config="[core]\n\thooksPath = .husky/_\n[alias]\n\thooksPath = ignored\n")
    assert protected_reason(workspace, workspace / ".husky" / "_" / "pre-commit") is not None
    assert protected_reason(workspace, workspace / "ignored" / "x") is None


def test_included_config_files_in_the_workspace_are_protected_even_before_they_exist(workspace: Path) -> None:
    make_repo(workspace / ".git", config=CONFIG + "[include]\n\tpath = ../.gitconfig.shared\n")
    reason = protected_reason(workspace, workspace / ".gitconfig.shared")
    assert reason is not None
    assert "git configuration" in reason
    assert workspace / ".gitconfig.shared" in find_protected(workspace).missing_files


def test_a_program_the_git_config_runs_from_the_workspace_is_protected(workspace: Path) -> None:
    make_repo(
        workspace / ".git",
        config=CONFIG + "\tfsmonitor = tools/fsmonitor.sh\n[alias]\n\tup = !tools/up.sh --all\n",
    )
    (workspace / "tools").mkdir()
    (workspace / "tools" / "fsmonitor.sh").write_text("#!/bin/sh\n")
    (workspace / "tools" / "up.sh").write_text("#!/bin/sh\n")
    (workspace / "tools" / "other.sh").write_text("#!/bin/sh\n")
    for name in ("fsmonitor.sh", "up.sh"):
        reason = protected_reason(workspace, workspace / "tools" / name)
        assert reason is not None, name
        assert "program to run" in reason
    assert protected_reason(workspace, workspace / "tools" / "other.sh") is None


def test_a_hard_link_to_a_protected_file_is_protected(workspace: Path) -> None:
    make_repo(workspace / ".git")
    os.link(workspace / ".git" / "config", workspace / "innocent.txt")
    reason = protected_reason(workspace, workspace / "innocent.txt")
    assert reason is not None
    assert "hard link" in reason


def test_the_scan_sorts_existing_missing_and_creatable_paths(workspace: Path) -> None:
    make_repo(workspace / ".git")
    (workspace / ".bashrc").write_text("")
    found = find_protected(workspace)
    git = workspace / ".git"
    assert {git / "hooks", git / "config", workspace / ".bashrc"} <= set(found.existing)
    # Outside a home directory a missing start-up file gets no placeholder (nothing for `git add
    # -A` to pick up); a new one is undone by the checkpoint comparison after the command.
    assert workspace / ".profile" not in found.missing_files
    assert workspace / "steward.toml" in found.missing_files  # no window for another Steward
    assert workspace / ".steward" in found.to_create
    assert found.pinned == [git]
    assert git / "commondir" in found.missing_commondirs
    assert found.missing_dirs == [workspace / "personas"]  # persona files: no window either


def test_in_a_home_directory_start_up_files_get_placeholders(workspace: Path) -> None:
    found = find_protected(workspace, home_like=True)
    assert {workspace / ".profile", workspace / ".bashrc"} <= set(found.missing_files)


def test_without_a_repository_the_git_directory_needs_a_placeholder(workspace: Path) -> None:
    found = find_protected(workspace)
    assert found.missing_dirs == [workspace / "personas"]
    assert workspace / ".git" in found.missing_files
    assert found.pinned == []


def test_protection_never_reaches_outside_the_workspace(workspace: Path, tmp_path: Path) -> None:
    make_repo(tmp_path / "elsewhere")
    (workspace / ".git").symlink_to(tmp_path / "elsewhere")
    (workspace / ".bashrc").symlink_to(tmp_path / "rc")
    found = find_protected(workspace)
    everything = [*found.existing, *found.missing_dirs, *found.missing_files, *found.to_create, *found.pinned]
    assert all(path.is_relative_to(workspace) for path in everything)


def test_nested_repositories_are_found_at_any_depth_in_any_directory(workspace: Path) -> None:
    # No skipped directory, no depth limit: a repository in node_modules, deep down, or past a
    # flood of files is protected like any other.
    make_repo(workspace / "node_modules" / "pkg" / ".git")
    deep = workspace.joinpath(*[f"d{i}" for i in range(12)])
    make_repo(deep / ".git")
    flood = workspace / "flood"
    flood.mkdir()
    for index in range(3000):
        (flood / f"f{index}").write_text("")
    make_repo(workspace / "zzz" / ".git")
    found = find_protected(workspace)
    assert {
        workspace / "node_modules" / "pkg" / ".git",
        deep / ".git",
        workspace / "zzz" / ".git",
    } <= set(found.pinned)


# --- the file tools -------------------------------------------------------------------------


def context(workspace: Path, *, writable: bool = True) -> ToolContext:
    return ToolContext(workspace=workspace, writable=writable, protected=partial(protected_reason, workspace))


async def test_write_file_refuses_a_hook_and_writes_nothing(workspace: Path) -> None:
    make_repo(workspace / ".git")
    result = await write_file.call({"path": ".git/hooks/pre-commit", "content": "evil"}, context(workspace))
    assert result.is_error
    assert "protected path" in result.content
    assert "git hooks run on the host" in result.content
    assert not (workspace / ".git" / "hooks" / "pre-commit").exists()


async def test_write_file_refuses_a_hook_reached_through_a_symlink(workspace: Path) -> None:
    make_repo(workspace / ".git")
    (workspace / "shortcut").symlink_to(".git/hooks")
    result = await write_file.call({"path": "shortcut/post-checkout", "content": "evil"}, context(workspace))
    assert result.is_error
    assert not (workspace / ".git" / "hooks" / "post-checkout").exists()


async def test_write_file_refuses_a_start_up_file_that_does_not_exist_yet(workspace: Path) -> None:
    result = await write_file.call({"path": ".bashrc", "content": "evil"}, context(workspace))
    assert result.is_error
    assert "shell start-up file" in result.content
    assert not (workspace / ".bashrc").exists()


async def test_edit_file_refuses_the_git_config_and_leaves_it_unchanged(workspace: Path) -> None:
    make_repo(workspace / ".git")
    arguments = {"path": ".git/config", "old_text": "bare = false", "new_text": "hooksPath = /tmp/evil"}
    result = await edit_file.call(arguments, context(workspace))
    assert result.is_error
    assert "git configuration" in result.content
    assert (workspace / ".git" / "config").read_text() == CONFIG


async def test_edit_file_refuses_a_hard_link_to_the_git_config(workspace: Path) -> None:
    make_repo(workspace / ".git")
    os.link(workspace / ".git" / "config", workspace / "cfg")
    arguments = {"path": "cfg", "old_text": "bare = false", "new_text": "hooksPath = /tmp/evil"}
    result = await edit_file.call(arguments, context(workspace))
    assert result.is_error
    assert (workspace / ".git" / "config").read_text() == CONFIG


async def test_write_tools_refuse_when_writing_is_switched_off(workspace: Path) -> None:
    (workspace / "a.txt").write_text("old\n")
    ctx = context(workspace, writable=False)
    written = await write_file.call({"path": "new.txt", "content": "x"}, ctx)
    edited = await edit_file.call({"path": "a.txt", "old_text": "old", "new_text": "new"}, ctx)
    for result in (written, edited):
        assert result.is_error
        assert "read-only mode" in result.content
    assert not (workspace / "new.txt").exists()
    assert (workspace / "a.txt").read_text() == "old\n"


async def test_ordinary_files_are_still_written(workspace: Path) -> None:
    make_repo(workspace / ".git")
    result = await write_file.call({"path": "src/app.py", "content": "print(1)\n"}, context(workspace))
    assert not result.is_error
    assert (workspace / "src" / "app.py").read_text() == "print(1)\n"
