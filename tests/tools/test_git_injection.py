"""Values the model gives the git tools never reach git's option parsing or a shell."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.tools.test_git_helpers import call, git, make_repo, sandbox_for_tests

from steward.errors import ToolError
from steward.safety.sandbox.bubblewrap import BubblewrapSandbox
from steward.tools.base import ToolContext
from steward.tools.git import check_ref_name, check_revision, git_branch, git_commit, git_diff, git_log


@pytest.fixture(scope="module")
def sandbox() -> BubblewrapSandbox:
    return sandbox_for_tests()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo")


@pytest.fixture(params=["sandbox", "direct"])
def ctx(request: pytest.FixtureRequest, repo: Path, sandbox: BubblewrapSandbox) -> ToolContext:
    """Both ways git runs: in the sandbox, and directly when the user turned the sandbox off."""
    return ToolContext(workspace=repo, sandbox=sandbox if request.param == "sandbox" else None)


@pytest.mark.parametrize(
    "name",
    ["-x", "--force", "a..b", "a b", "a~1", "a^", "a:b", "a?", "a*", "a[b", "a\\b", "/a", "a/", "a//b",
     "a.", ".a", "a/.b", "a.lock", "@", "a@{1}", "HEAD", "", "a\tb", "a\x7fb", "x" * 201],
)  # fmt: skip
def test_bad_branch_names_are_refused(name: str) -> None:
    with pytest.raises(ToolError, match="is not valid"):
        check_ref_name(name)


@pytest.mark.parametrize("name", ["fix/login-timeout", "feature_1", "v1.2", "user/x/y", "$(id)", "a;b"])
def test_good_branch_names_pass(name: str) -> None:
    assert check_ref_name(name) == name


@pytest.mark.parametrize("revision", ["-x", "--upload-pack=touch pwned", "a b", "a\nb", ""])
def test_revisions_that_git_could_read_as_options_or_words_are_refused(revision: str) -> None:
    with pytest.raises(ToolError):
        check_revision(revision)


async def test_option_like_refs_are_refused_and_run_nothing(ctx: ToolContext, repo: Path) -> None:
    marker = repo / "pwned"
    attempts = [
        (git_log, {"ref": f"--upload-pack=touch {marker}"}),
        (git_log, {"ref": "-c"}),
        (git_diff, {"ref": f"--output={marker}"}),
        (git_branch, {"action": "create", "name": "-D"}),
        (git_branch, {"action": "create", "name": "x", "start": "--orphan"}),
        (git_branch, {"action": "switch", "name": "--detach"}),
    ]
    for tool, arguments in attempts:
        result = await call(tool, ctx, **arguments)
        assert result.is_error, (tool.name, arguments)
        assert "'-'" in result.content
    assert not marker.exists()
    assert git(repo, "branch", "--show-current").strip() == "main"


async def test_option_like_paths_are_only_paths(ctx: ToolContext, repo: Path) -> None:
    (repo / "README.md").write_text("changed\n")
    result = await call(git_diff, ctx, paths=["--output=out.txt", "-c"])
    assert not result.is_error, result.content
    assert result.content == "no unstaged changes in those paths"
    assert not (repo / "out.txt").exists()


async def test_paths_outside_the_workspace_are_refused(ctx: ToolContext, repo: Path) -> None:
    for paths in (["../outside"], ["/etc/passwd"], ["src/../../x"]):
        result = await call(git_diff, ctx, paths=paths)
        assert result.is_error and "outside the workspace" in result.content
    committed = await call(git_commit, ctx, message="m", paths=["../repo2/x"])
    assert committed.is_error and "outside the workspace" in committed.content


async def test_pathspec_magic_is_taken_literally(ctx: ToolContext, repo: Path) -> None:
    (repo / "a.txt").write_text("a\n")
    (repo / "b.txt").write_text("b\n")
    before = git(repo, "rev-parse", "HEAD")
    result = await call(git_commit, ctx, message="Everything?", paths=[":(glob)*"])
    assert result.is_error
    assert git(repo, "rev-parse", "HEAD") == before
    assert git(repo, "status", "--porcelain").split() == ["??", "a.txt", "??", "b.txt"]


async def test_a_message_is_only_a_message(ctx: ToolContext, repo: Path) -> None:
    first = git(repo, "rev-parse", "HEAD").strip()
    marker = repo / "pwned"
    (repo / "x.txt").write_text("x\n")
    await call(git_commit, ctx, message="--amend", all=True)
    (repo / "y.txt").write_text("y\n")
    message = f'$(touch {marker})"; touch {marker}; "`touch {marker}`'
    result = await call(git_commit, ctx, message=message, all=True)
    assert not result.is_error, result.content
    assert git(repo, "log", "--format=%s", "-2").splitlines() == [message, "--amend"]
    assert git(repo, "rev-parse", "HEAD~2").strip() == first  # a new commit each time, nothing amended
    assert not marker.exists()


async def test_a_branch_name_with_shell_words_is_only_a_name(ctx: ToolContext, repo: Path) -> None:
    result = await call(git_branch, ctx, action="create", name="$(touch pwned)x;id")
    assert result.is_error  # it holds a space
    created = await call(git_branch, ctx, action="create", name="$(id)")
    assert not created.is_error, created.content
    assert git(repo, "branch", "--show-current").strip() == "$(id)"
    assert not (repo / "pwned").exists()
