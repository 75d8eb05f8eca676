"""The git tools on a real repository, with git running in the real sandbox."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from tests.tools.test_git_helpers import call, git, make_repo, sandbox_for_tests

from steward.safety.checkpoints.wrapper import changes_files
from steward.safety.sandbox.bubblewrap import BubblewrapSandbox
from steward.tools.base import ToolContext, ToolSettings
from steward.tools.git import (
    NOT_A_REPOSITORY,
    git_branch,
    git_commit,
    git_diff,
    git_log,
    git_status,
    git_toolset,
)


@pytest.fixture(scope="module")
def sandbox() -> BubblewrapSandbox:
    return sandbox_for_tests()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo")


@pytest.fixture
def ctx(repo: Path, sandbox: BubblewrapSandbox) -> ToolContext:
    return ToolContext(workspace=repo, sandbox=sandbox)


# --- git_status -----------------------------------------------------------------------------


async def test_status_of_a_clean_repository_names_the_branch_and_commit(ctx: ToolContext, repo: Path) -> None:
    result = await call(git_status, ctx)
    head = git(repo, "rev-parse", "HEAD").strip()
    assert not result.is_error
    assert result.content == f"branch: main (no upstream)\ncommit: {head[:12]}\nworking tree clean"


async def test_status_sorts_staged_unstaged_and_untracked_files(ctx: ToolContext, repo: Path) -> None:
    (repo / "staged.txt").write_text("s\n")
    git(repo, "add", "staged.txt")
    (repo / "README.md").write_text("changed\n")
    (repo / "new.txt").write_text("n\n")
    git(repo, "mv", "README.md", "READ.md")
    (repo / "READ.md").write_text("changed again\n")
    content = (await call(git_status, ctx)).content
    assert "staged (2):\n  renamed: README.md -> READ.md\n  added: staged.txt" in content
    assert "unstaged (1):\n  modified: READ.md" in content
    assert "untracked (1):\n  new.txt" in content


async def test_status_counts_commits_ahead_of_and_behind_the_upstream(tmp_path: Path, repo: Path) -> None:
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(repo), str(clone))
    (repo / "theirs.txt").write_text("t\n")
    git(repo, "add", "theirs.txt")
    git(repo, "commit", "-q", "-m", "Theirs")
    git(clone, "fetch", "-q")
    (clone / "mine.txt").write_text("m\n")
    git(clone, "add", "mine.txt")
    git(clone, "commit", "-q", "-m", "Mine one")
    git(clone, "commit", "-q", "--allow-empty", "-m", "Mine two")
    content = (await call(git_status, ToolContext(workspace=clone, sandbox=sandbox_for_tests()))).content
    assert content.startswith("branch: main (upstream origin/main: ahead 2, behind 1)")


async def test_status_says_when_head_is_detached(ctx: ToolContext, repo: Path) -> None:
    git(repo, "checkout", "-q", "--detach")
    content = (await call(git_status, ctx)).content
    assert content.startswith("branch: none (detached HEAD)")


async def test_outside_a_repository_every_tool_says_how_to_get_one(
    tmp_path: Path, sandbox: BubblewrapSandbox
) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    ctx = ToolContext(workspace=plain, sandbox=sandbox)
    for tool in (git_status, git_log, git_diff, git_branch):
        result = await call(tool, ctx)
        assert result.is_error
        assert result.content == NOT_A_REPOSITORY
        assert "git init" in result.content


# --- git_diff -------------------------------------------------------------------------------


async def test_diff_shows_unstaged_changes_and_staged_ones_on_request(ctx: ToolContext, repo: Path) -> None:
    (repo / "README.md").write_text("hello\nworld\n")
    unstaged = (await call(git_diff, ctx)).content
    assert "+world" in unstaged and "diff --git a/README.md b/README.md" in unstaged
    assert (await call(git_diff, ctx, staged=True)).content == "no staged changes"
    git(repo, "add", "README.md")
    assert "+world" in (await call(git_diff, ctx, staged=True)).content
    assert (await call(git_diff, ctx)).content == "no unstaged changes"


async def test_diff_stat_against_a_ref_limited_to_paths(ctx: ToolContext, repo: Path) -> None:
    (repo / "a.txt").write_text("a\n")
    (repo / "b.txt").write_text("b\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "Two files")
    stat = (await call(git_diff, ctx, ref="HEAD~1", stat=True)).content
    assert "a.txt | 1 +" in stat and "b.txt | 1 +" in stat and "2 files changed" in stat
    only_a = (await call(git_diff, ctx, ref="HEAD~1", stat=True, paths=["a.txt"])).content
    assert "a.txt" in only_a and "b.txt" not in only_a


async def test_a_long_diff_is_cut_like_bash_output(repo: Path, sandbox: BubblewrapSandbox) -> None:
    (repo / "README.md").write_text("".join(f"line {i}\n" for i in range(5000)))
    ctx = ToolContext(workspace=repo, sandbox=sandbox, settings=ToolSettings(output_cap_chars=4000))
    content = (await call(git_diff, ctx)).content
    assert len(content) < 4500
    assert "chars cut" in content
    assert content.rstrip().endswith("+line 4999")


async def test_diff_against_an_unknown_ref_says_what_exists(ctx: ToolContext) -> None:
    result = await call(git_diff, ctx, ref="no-such-branch")
    assert result.is_error
    assert "does not exist here" in result.content


# --- git_log --------------------------------------------------------------------------------


async def test_log_lists_hash_date_author_and_subject_newest_first(ctx: ToolContext, repo: Path) -> None:
    git(repo, "commit", "-q", "--allow-empty", "-m", "Second commit")
    lines = (await call(git_log, ctx)).content.splitlines()
    hashes = git(repo, "log", "--format=%H").split()
    assert [line.split("  ")[0] for line in lines] == [h[:12] for h in hashes]
    assert lines[0].endswith("  Test Author  Second commit")
    assert lines[1].endswith("  Test Author  First commit")


async def test_log_takes_a_count_a_range_and_paths(ctx: ToolContext, repo: Path) -> None:
    git(repo, "switch", "-q", "-c", "topic")
    for name in ("x", "y"):
        (repo / f"{name}.txt").write_text(name)
        git(repo, "add", ".")
        git(repo, "commit", "-q", "-m", f"Add {name}")
    assert len((await call(git_log, ctx, max_count=1)).content.splitlines()) == 1
    in_range = (await call(git_log, ctx, ref="main..topic")).content
    assert "Add x" in in_range and "Add y" in in_range and "First commit" not in in_range
    touched = (await call(git_log, ctx, paths=["x.txt"])).content
    assert "Add x" in touched and "Add y" not in touched


async def test_log_of_a_repository_without_commits(tmp_path: Path, sandbox: BubblewrapSandbox) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    git(empty, "init", "-q")
    result = await call(git_log, ToolContext(workspace=empty, sandbox=sandbox))
    assert not result.is_error
    assert result.content == "no commits yet"


async def test_log_refuses_a_count_out_of_bounds(ctx: ToolContext) -> None:
    result = await call(git_log, ctx, max_count=0)
    assert result.is_error and "max_count" in result.content


# --- git_branch -----------------------------------------------------------------------------


async def test_branch_create_switches_to_the_new_branch_and_list_stars_it(
    ctx: ToolContext, repo: Path
) -> None:
    created = await call(git_branch, ctx, action="create", name="fix/login")
    assert not created.is_error, created.content
    assert git(repo, "branch", "--show-current").strip() == "fix/login"
    listing = (await call(git_branch, ctx)).content.splitlines()
    assert listing[0].startswith("* fix/login") and listing[1].startswith("  main")


async def test_branch_create_from_a_start_point(ctx: ToolContext, repo: Path) -> None:
    first = git(repo, "rev-parse", "HEAD").strip()
    git(repo, "commit", "-q", "--allow-empty", "-m", "Later")
    await call(git_branch, ctx, action="create", name="old", start="HEAD~1")
    assert git(repo, "rev-parse", "old").strip() == first


async def test_branch_switch_goes_to_an_existing_branch(ctx: ToolContext, repo: Path) -> None:
    git(repo, "branch", "other")
    result = await call(git_branch, ctx, action="switch", name="other")
    assert not result.is_error, result.content
    assert git(repo, "branch", "--show-current").strip() == "other"


async def test_branch_errors_say_what_to_do(ctx: ToolContext, repo: Path) -> None:
    missing = await call(git_branch, ctx, action="switch", name="nowhere")
    assert missing.is_error and "git_branch(action='list')" in missing.content
    git(repo, "branch", "taken")
    taken = await call(git_branch, ctx, action="create", name="taken")
    assert taken.is_error and "use action 'switch'" in taken.content
    nameless = await call(git_branch, ctx, action="create")
    assert nameless.is_error and "pass name" in nameless.content


# --- git_commit -----------------------------------------------------------------------------


async def test_commit_of_what_is_staged(ctx: ToolContext, repo: Path) -> None:
    (repo / "a.txt").write_text("a\n")
    (repo / "b.txt").write_text("b\n")
    git(repo, "add", "a.txt")
    result = await call(git_commit, ctx, message="Add a")
    assert not result.is_error, result.content
    assert result.content.startswith("[main ")
    assert git(repo, "show", "--name-only", "--format=%s", "HEAD").split() == ["Add", "a", "a.txt"]
    assert git(repo, "status", "--porcelain").strip() == "?? b.txt"


async def test_commit_with_paths_takes_exactly_those_new_files_included(ctx: ToolContext, repo: Path) -> None:
    (repo / "new.txt").write_text("n\n")
    (repo / "README.md").write_text("changed\n")
    (repo / "other.txt").write_text("o\n")
    git(repo, "add", "other.txt")
    result = await call(git_commit, ctx, message="New and readme", paths=["new.txt", "README.md"])
    assert not result.is_error, result.content
    assert sorted(git(repo, "show", "--name-only", "--format=", "HEAD").split()) == ["README.md", "new.txt"]
    assert git(repo, "status", "--porcelain").strip() == "A  other.txt"


async def test_commit_all_takes_new_and_deleted_files(ctx: ToolContext, repo: Path) -> None:
    (repo / "README.md").unlink()
    (repo / "new.txt").write_text("n\n")
    result = await call(git_commit, ctx, message="Replace readme", all=True)
    assert not result.is_error, result.content
    assert git(repo, "ls-files").split() == ["new.txt"]
    assert git(repo, "status", "--porcelain") == ""


async def test_commit_message_keeps_its_body(ctx: ToolContext, repo: Path) -> None:
    (repo / "x").write_text("x")
    await call(git_commit, ctx, message="Subject\n\nBody line one.\nBody line two.", all=True)
    assert git(repo, "log", "-1", "--format=%B").strip() == "Subject\n\nBody line one.\nBody line two."


async def test_nothing_to_commit_names_the_fix(ctx: ToolContext) -> None:
    result = await call(git_commit, ctx, message="Nothing")
    assert result.is_error
    assert result.content.startswith("Nothing to commit: stage files first or pass paths=[...] or all=true")


async def test_commit_refuses_bad_arguments_before_running_git(ctx: ToolContext) -> None:
    empty = await call(git_commit, ctx, message="  ")
    assert empty.is_error and "message is empty" in empty.content
    both = await call(git_commit, ctx, message="m", paths=["README.md"], all=True)
    assert both.is_error and "either paths or all" in both.content


async def test_commit_on_a_detached_head_is_refused_and_says_so(ctx: ToolContext, repo: Path) -> None:
    git(repo, "checkout", "-q", "--detach")
    (repo / "x.txt").write_text("x")
    before = git(repo, "rev-parse", "HEAD")
    result = await call(git_commit, ctx, message="Lost", all=True)
    assert result.is_error
    assert "HEAD is detached" in result.content and "git_branch(action='create'" in result.content
    assert git(repo, "rev-parse", "HEAD") == before
    assert git(repo, "status", "--porcelain").strip() == "?? x.txt"  # nothing was staged either


async def test_commit_uses_the_host_users_identity_when_the_repository_has_none(
    tmp_path: Path, sandbox: BubblewrapSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = make_repo(tmp_path / "anonymous", identity=False)
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text("[user]\n\tname = Host User\n\temail = host@example.com\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.delenv("GIT_CONFIG_GLOBAL", raising=False)
    (repo / "x.txt").write_text("x")
    result = await call(git_commit, ToolContext(workspace=repo, sandbox=sandbox), message="By host", all=True)
    assert not result.is_error, result.content
    assert (
        git(repo, "log", "-1", "--format=%an <%ae> / %cn").strip()
        == "Host User <host@example.com> / Host User"
    )


async def test_the_repositorys_own_identity_wins_over_the_hosts(
    ctx: ToolContext, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text("[user]\n\tname = Host User\n\temail = host@example.com\n")
    monkeypatch.setenv("HOME", str(home))
    (repo / "x.txt").write_text("x")
    await call(git_commit, ctx, message="By repo", all=True)
    assert git(repo, "log", "-1", "--format=%an <%ae>").strip() == "Test Author <author@example.com>"


# --- write switch, no sandbox, offering -----------------------------------------------------


async def test_with_writing_off_commit_and_branch_changes_are_refused_but_reads_work(
    repo: Path, sandbox: BubblewrapSandbox
) -> None:
    ctx = ToolContext(workspace=repo, sandbox=sandbox, writable=False)
    (repo / "x.txt").write_text("x")
    commit = await call(git_commit, ctx, message="No", all=True)
    assert commit.is_error and "write = false" in commit.content
    create = await call(git_branch, ctx, action="create", name="no")
    assert create.is_error and "write = false" in create.content
    assert not (await call(git_branch, ctx)).is_error
    assert not (await call(git_status, ctx)).is_error
    assert git(repo, "rev-list", "--count", "HEAD").strip() == "1"


async def test_without_a_sandbox_git_runs_directly(repo: Path) -> None:
    ctx = ToolContext(workspace=repo, sandbox=None)
    await call(git_branch, ctx, action="create", name="direct")
    (repo / "d.txt").write_text("d")
    result = await call(git_commit, ctx, message="Direct", paths=["d.txt"])
    assert not result.is_error, result.content
    assert git(repo, "log", "-1", "--format=%s %D").strip() == "Direct HEAD -> direct"


async def test_the_toolset_is_offered_only_in_a_git_repository(tmp_path: Path, repo: Path) -> None:
    toolset = git_toolset()
    inside = await toolset.get_tools(ToolContext(workspace=repo))
    assert sorted(spec.name for spec in inside) == [
        "git_branch",
        "git_commit",
        "git_diff",
        "git_log",
        "git_status",
    ]
    (repo / "sub").mkdir()
    assert len(await toolset.get_tools(ToolContext(workspace=repo / "sub"))) == 5
    plain = tmp_path / "plain"
    plain.mkdir()
    assert await toolset.get_tools(ToolContext(workspace=plain)) == []


async def test_switch_to_a_branch_only_the_remote_has_makes_it_from_the_remote_one(
    tmp_path: Path, repo: Path, sandbox: BubblewrapSandbox
) -> None:
    git(repo, "branch", "feature")
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(repo), str(clone))
    result = await call(
        git_branch, ToolContext(workspace=clone, sandbox=sandbox), action="switch", name="feature"
    )
    assert not result.is_error, result.content
    assert git(clone, "branch", "--show-current").strip() == "feature"
    assert git(clone, "rev-parse", "feature") == git(clone, "rev-parse", "origin/feature")


def test_only_branch_changes_are_checkpointed() -> None:
    assert changes_files("git_branch", None, {"action": "create", "name": "x"})
    assert changes_files("git_branch", None, {"action": "switch", "name": "x"})
    assert not changes_files("git_branch", None, {"action": "list"})
    assert not changes_files("git_branch", None, {})
    assert changes_files("git_commit", None, {"message": "m"})
    assert not changes_files("git_status", None, {})


async def test_status_lists_conflicts_after_a_failed_merge(ctx: ToolContext, repo: Path) -> None:
    git(repo, "switch", "-q", "-c", "theirs")
    (repo / "README.md").write_text("theirs\n")
    git(repo, "commit", "-q", "-am", "Theirs")
    git(repo, "switch", "-q", "main")
    (repo / "README.md").write_text("ours\n")
    git(repo, "commit", "-q", "-am", "Ours")
    subprocess.run(["git", "-C", str(repo), "merge", "-q", "theirs"], capture_output=True, check=False)
    content = (await call(git_status, ctx)).content
    assert "conflicts (1):\n  both modified: README.md" in content


async def test_status_escapes_control_characters_in_file_names(ctx: ToolContext, repo: Path) -> None:
    (repo / "evil\x1b[2Jname.txt").write_text("x")
    (repo / "café.txt").write_text("x")
    content = (await call(git_status, ctx)).content
    assert "\x1b" not in content
    assert "evil\\x1b[2Jname.txt" in content
    assert "café.txt" in content
