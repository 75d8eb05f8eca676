"""Typed git tools: status, diff, log, branch and commit, run in the sandbox.

The policy sees what each call does (``git_commit`` with its message and paths, not an opaque
``bash`` line), so rules such as ``allow = ["git_commit"]`` or ``deny = ["git_branch"]`` work,
and skipping the repository's hooks (``no_verify``) runs only when a rule names it:
``allow = ["git_commit(no_verify)"]`` (see ``steward.safety.policy.rules.FLAGS``).

Git runs like ``bash``: inside the sandbox (``ctx.sandbox``), where the repository's hooks and
its configured programs run too, never on the host. Status, diff, log and listing branches see
the workspace read-only; commit and branch changes write it. Every value the model gives is
checked (branch names by git's rules, paths confined to the workspace) and passed where git
cannot take it for an option (``steward.tools._git_run``).
"""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Sequence
from typing import Literal

from steward.errors import ToolError
from steward.models.base import ToolSpec
from steward.tools._git_parse import (
    BRANCH_FORMAT,
    LOG_FORMAT,
    parse_log,
    parse_status,
    render_branches,
    render_log,
)
from steward.tools._git_run import (
    NOT_A_REPOSITORY,
    GitOutput,
    check_ref_name,
    check_revision,
    git_argv,
    in_repository,
    relative_paths,
    run_git,
)
from steward.tools.base import FunctionToolset, Tool, ToolContext, ToolResult, tool

__all__ = [
    "COMMITS",
    "GIT_TOOLS",
    "NOT_A_REPOSITORY",
    "GitOutput",
    "GitToolset",
    "check_ref_name",
    "check_revision",
    "git_argv",
    "git_toolset",
    "in_repository",
    "relative_paths",
    "run_git",
]

GIT_TOOLS = frozenset({"git_status", "git_diff", "git_log", "git_branch", "git_commit"})
CHANGING = frozenset({"git_commit", "git_branch"})
"""Git tools that can change the workspace (``git_branch`` when it creates or switches)."""

COMMITS = frozenset({"git_commit"})
"""Tools that exist only where writing is on (``write = false`` removes them, like write_file)."""

MAX_LOG = 500
_PARSE_CAP = 2_000_000  # characters of status/log/branch output read before parsing


@tool
async def git_status(ctx: ToolContext) -> str:
    """Show the current branch, how far it is ahead of or behind its upstream, and the staged,
    unstaged, untracked and conflicting files of the git repository."""
    result = await run_git(
        ctx, git_argv("status", "--porcelain=v2", "--branch", "-z"), writable=False, cap_chars=_PARSE_CAP
    )
    _raise_unless_ok(result, "git status")
    return parse_status(result.output).render()


@tool
async def git_diff(
    ctx: ToolContext,
    staged: bool = False,
    ref: str | None = None,
    paths: list[str] | None = None,
    stat: bool = False,
) -> str:
    """Show changes as a unified diff: the working tree against the staged files by default.

    Args:
        staged: Show what is staged (what git_commit without paths or all would commit).
        ref: Compare against this branch, tag or commit instead, e.g. 'main' or 'HEAD~1';
            'main...HEAD' shows what the current branch changed since it left main.
        paths: Only these files or folders (relative to the workspace).
        stat: Only the list of changed files with line counts, not the diff itself.
    """
    arguments = ["diff", "--no-ext-diff", "--no-textconv", "--no-color"]
    if staged:
        arguments.append("--cached")
    if stat:
        arguments.append("--stat")
    arguments.append("--end-of-options")
    if ref is not None:
        arguments.append(check_revision(ref))
    arguments += ["--", *relative_paths(ctx, paths)]
    result = await run_git(ctx, git_argv(*arguments), writable=False)
    _raise_unless_ok(result, "git diff")
    if not result.output.strip():
        what = "staged" if staged else "unstaged"
        return (
            f"no {what} changes" + (f" against {ref}" if ref else "") + (" in those paths" if paths else "")
        )
    return result.output


@tool
async def git_log(
    ctx: ToolContext, ref: str | None = None, max_count: int = 20, paths: list[str] | None = None
) -> str:
    """List commits, newest first: hash, date, author and subject, one per line.

    Args:
        ref: Start from this branch, tag or commit (default: the current one), or a range such as
            'main..HEAD' (the commits of this branch that main lacks).
        max_count: How many commits at most (1 to 500).
        paths: Only commits that touched these files or folders.
    """
    if not 1 <= max_count <= MAX_LOG:
        raise ToolError(f"max_count must be from 1 to {MAX_LOG} (got {max_count}).")
    arguments = ["log", f"--max-count={max_count}", f"--format={LOG_FORMAT}", "--date=format:%Y-%m-%d %H:%M"]
    arguments.append("--end-of-options")
    if ref is not None:
        arguments.append(check_revision(ref))
    arguments += ["--", *relative_paths(ctx, paths)]
    result = await run_git(ctx, git_argv(*arguments), writable=False, cap_chars=_PARSE_CAP)
    if not result.ok and "does not have any commits yet" in result.output:
        return "no commits yet"
    _raise_unless_ok(result, "git log")
    commits, _other = parse_log(result.output)
    return render_log(commits) if commits else "no commits match"


@tool
async def git_branch(
    ctx: ToolContext,
    action: Literal["list", "create", "switch"] = "list",
    name: str | None = None,
    start: str | None = None,
) -> str:
    """List local branches, create a branch and switch to it, or switch to an existing branch.

    Uncommitted changes are carried over to the branch switched to; git refuses a switch that
    would overwrite them (commit them first).

    Args:
        action: 'list', 'create' (make the branch and switch to it) or 'switch'.
        name: The branch to create or switch to, e.g. 'fix/login-timeout'.
        start: For 'create': the branch, tag or commit to start from (default: the current commit).
    """
    if action == "list":
        if name is not None or start is not None:
            raise ToolError("action 'list' takes no name or start; leave them out.")
        result = await run_git(
            ctx,
            git_argv("branch", "--list", f"--format={BRANCH_FORMAT}"),
            writable=False,
            cap_chars=_PARSE_CAP,
        )
        _raise_unless_ok(result, "git branch")
        return render_branches(result.output)
    if name is None:
        raise ToolError(f"action {action!r} needs the branch name: pass name, e.g. 'fix/login-timeout'.")
    _need_writable(ctx, f"git_branch {action}")
    branch = check_ref_name(name)
    if action == "switch":
        if start is not None:
            raise ToolError("start is only for action 'create'; to switch, pass only the name.")
        arguments = ["switch", "--end-of-options", branch]
    else:
        arguments = ["switch", "--create", branch, "--end-of-options"]
        if start is not None:
            arguments.append(check_revision(start, "start"))
    # No upstream is recorded: .git/config is read-only in the sandbox (git would say it tracks one).
    result = await run_git(ctx, git_argv("-c", "branch.autoSetupMerge=false", *arguments), writable=True)
    _raise_unless_ok(result, f"git_branch {action}", hint=_switch_hint(result.output, branch))
    return result.output.strip() or f"on branch {branch}"


def _switch_hint(output: str, branch: str) -> str:
    if "already exists" in output:
        return "The branch exists already: use action 'switch' to go to it, or pick another name."
    if "invalid reference" in output or "not a commit" in output:
        return f"No branch {branch!r} here: git_branch(action='list') shows the branches; 'create' makes one."
    if "would be overwritten" in output:
        return "Commit (git_commit) or undo those changes first, then switch."
    return ""


_COMMIT_SCRIPT = """\
name=$1 email=$2 mode=$3 verify=$4 message=$5
shift 5
g() {
  env LC_ALL=C.UTF-8 LANGUAGE= GIT_EDITOR=true git --no-pager --literal-pathspecs \\
    -c core.fsmonitor=false -c core.checkStat=minimal -c color.ui=false "$@"
}
g config user.name >/dev/null || {
  [ -n "$name" ] && export GIT_AUTHOR_NAME="$name" GIT_COMMITTER_NAME="$name"
}
g config user.email >/dev/null || {
  [ -n "$email" ] && export GIT_AUTHOR_EMAIL="$email" GIT_COMMITTER_EMAIL="$email"
}
g symbolic-ref -q HEAD >/dev/null || { echo "steward: detached HEAD"; exit 90; }
case $mode in
  all) g add --all || exit $? ;;
  paths) g add --all -- "$@" || exit $? ;;
esac
if [ "$mode" = paths ]; then
  g commit $verify "--message=$message" --only -- "$@"
else
  g commit $verify "--message=$message"
fi
"""
"""Stages and commits in one sandboxed command. Every value arrives as a positional parameter:
the shell never reads a value as code. The identity of the host's user stands in only where the
repository has none (inside the sandbox there is no home and so no global git configuration)."""


@tool
async def git_commit(
    ctx: ToolContext,
    message: str,
    paths: list[str] | None = None,
    all: bool = False,
    no_verify: bool = False,
) -> ToolResult:
    """Commit to the current branch. The repository's hooks (pre-commit, commit-msg) run.

    Without paths or all, commits what is staged. Returns the new commit's id and summary.

    Args:
        message: The commit message: a short subject line, then optionally a blank line and a body.
        paths: Commit exactly these files or folders as they are now (new files included), and
            nothing else that may be staged.
        all: Commit every change of the working tree, new and deleted files included (like
            `git add --all`; ignored files stay out).
        no_verify: Skip the hooks. Refused unless a policy rule allows git_commit(no_verify).
    """
    if not message.strip():
        raise ToolError("The commit message is empty; write a subject line saying what the change does.")
    if paths and all:
        raise ToolError("Pass either paths or all=true, not both.")
    _need_writable(ctx, "git_commit")
    chosen = relative_paths(ctx, paths)
    mode = "paths" if chosen else "all" if all else "staged"
    name, email = await _host_identity()
    script = ["sh", "-c", _COMMIT_SCRIPT, "steward-commit", name, email, mode]
    script += ["--no-verify" if no_verify else "", message.replace("\0", ""), *chosen]
    result = await run_git(ctx, script, writable=True)
    if result.ok:
        return ToolResult(result.output.strip())
    raise ToolError(_commit_failure(result, mode))


def _commit_failure(result: GitOutput, mode: str) -> str:
    output = result.output.strip()
    if result.returncode == 90 and "steward: detached HEAD" in output:
        return (
            "HEAD is detached (not on a branch), so a commit would belong to no branch and be easy to lose. "
            "Create a branch first: git_branch(action='create', name='...'), then commit."
        )
    if "nothing to commit" in output or "no changes added to commit" in output:
        fixes = {
            "staged": "stage files first or pass paths=[...] or all=true",
            "all": "the working tree has no changes (git_status shows what changed)",
            "paths": "the files named have no changes (git_status shows what changed)",
        }
        fix = fixes[mode]
        return f"Nothing to commit: {fix}.\n{output}"
    if "Please tell me who you are" in output or "empty ident" in output:
        return (
            "git does not know who commits: set an identity, e.g. `git config user.name 'Your Name'` and "
            f"`git config user.email you@example.com` in the repository (or globally).\n{output}"
        )
    if "did not match any file" in output:
        return f"A path names no file known to git or present in the workspace; check the paths.\n{output}"
    return (
        f"The commit failed (exit code {result.returncode}). If a hook refused it, its output is below: "
        f"fix what it reports and commit again.\n{output}"
    )


async def _host_identity() -> tuple[str, str]:
    """The host user's global git identity ("" where unset), read without touching the workspace."""

    def read(key: str) -> str:
        try:
            done = subprocess.run(
                ["git", "config", "--global", "--get", key],
                cwd="/",
                capture_output=True,
                text=True,
                timeout=10,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            return ""
        return done.stdout.strip() if done.returncode == 0 else ""

    return await asyncio.to_thread(read, "user.name"), await asyncio.to_thread(read, "user.email")


def _need_writable(ctx: ToolContext, what: str) -> None:
    if not ctx.writable:
        raise ToolError(
            f"{what} changes the workspace, and writing is turned off for this agent (write = false)."
        )


def _raise_unless_ok(result: GitOutput, what: str, *, hint: str = "") -> None:
    if result.ok:
        return
    message = f"{what} failed (exit code {result.returncode}):\n{result.output.strip()}"
    if (
        "unknown revision" in result.output
        or "bad revision" in result.output
        or "ambiguous argument" in result.output
    ):
        hint = (
            hint or "That branch, tag or commit does not exist here; git_branch and git_log show what does."
        )
    raise ToolError(f"{message}\n{hint}" if hint else message)


class GitToolset(FunctionToolset):
    """The git tools, offered only when the workspace is in a git repository (elsewhere they
    could only fail, and their schemas would cost tokens on every request)."""

    async def get_tools(self, ctx: ToolContext) -> Sequence[ToolSpec]:
        if not await asyncio.to_thread(in_repository, ctx.workspace):
            return []
        return await super().get_tools(ctx)


def git_tools() -> list[Tool]:
    return [git_status, git_diff, git_log, git_branch, git_commit]


def git_toolset() -> FunctionToolset:
    """git_status, git_diff, git_log, git_branch and git_commit, as one toolset."""
    return GitToolset(git_tools())
