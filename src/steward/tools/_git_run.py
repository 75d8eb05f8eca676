"""Running git for the git tools: in the sandbox, with every value out of reach of option parsing.

Public helpers (also used by the host-side forge tools):

* ``check_ref_name`` — a branch name by ``git check-ref-format``'s rules, and never one that
  starts with ``-`` (git would read it as an option);
* ``check_revision`` — a revision expression (``HEAD~2``, ``main..topic``, a commit id): no
  leading ``-``, no white space or control characters; it is passed after ``--end-of-options``;
* ``git_argv`` — the argv of one git command with the settings every call gets (no pager, no
  fsmonitor, literal pathspecs, messages in English so failures can be recognised);
* ``run_git`` — run such an argv in the workspace, through ``ctx.sandbox`` when there is one
  (the repository's hooks then run inside the sandbox, never on the host), directly when the
  user turned the sandbox off (as ``bash`` does).

Argument injection is impossible by construction, not by a list of bad words: values go after
``--end-of-options`` or ``--`` or inside ``--option=value``, never where git looks for options.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path

from steward.errors import ToolError
from steward.tools._paths import check_path, workspace_root
from steward.tools.base import ToolContext
from steward.tools.shell import run_command

__all__ = [
    "CHECK_STAT",
    "NOT_A_REPOSITORY",
    "GitOutput",
    "check_ref_name",
    "check_revision",
    "git_argv",
    "in_repository",
    "relative_paths",
    "run_git",
]

NOT_A_REPOSITORY = (
    "The workspace is not in a git repository. Run `git init` (with bash) to make one, or open the "
    "repository's folder as the workspace."
)

MAX_REF_CHARS = 200
"""Longer branch names and revisions are refused: no real one comes near."""

MAX_PATHS = 200
"""Paths one call may name (each is checked against the workspace)."""

_ENV = (
    "LC_ALL=C.UTF-8",
    "LANGUAGE=",
    "GIT_PAGER=cat",
    "GIT_TERMINAL_PROMPT=0",
    "GIT_EDITOR=true",
    "GIT_OPTIONAL_LOCKS=0",
)
"""Messages in English (they are recognised below), nothing that could wait for a human, and no
index refresh written by a command that only reads (the workspace is read-only for those)."""

CHECK_STAT = "core.checkStat=minimal"
"""Inside the sandbox files belong to another user (and the index was written by the host's):
with git's full stat check every file would look touched and be hashed again on every call
(1.5 s instead of 0.1 s for a diff of 10,000 files). Size and mtime still tell changes apart, and
git's racy-entry check covers writes within the same second."""

_SETTINGS = (
    "--no-pager",
    "--literal-pathspecs",
    "-c",
    "core.fsmonitor=false",
    "-c",
    CHECK_STAT,
    "-c",
    "color.ui=false",
)
"""Global options before every subcommand: a path is a path (``:(glob)`` magic off), and the
repository's fsmonitor program is never started (it would run on every status)."""

_BAD_REF_CHARS = frozenset(" ~^:?*[\\\x7f")


def check_ref_name(name: str, what: str = "branch name") -> str:
    """``name`` if it is a valid branch name by ``git check-ref-format``'s rules, else ToolError.

    A name starting with ``-`` is refused too: git would take it for an option.
    """
    problem = _ref_problem(name)
    if problem:
        raise ToolError(f"{what} {name!r} is not valid: {problem}. Use a name like 'fix/login-timeout'.")
    return name


_REF_RULES: tuple[tuple[Callable[[str], bool], str], ...] = (
    (lambda n: not n, "it is empty"),
    (lambda n: len(n) > MAX_REF_CHARS, f"it is longer than {MAX_REF_CHARS} characters"),
    (lambda n: n.startswith("-"), "it starts with '-', which git would read as an option"),
    (
        lambda n: any(ord(c) < 0x20 or c in _BAD_REF_CHARS for c in n),
        "it contains a space, a control character or one of ~ ^ : ? * [ \\",
    ),
    (lambda n: n == "@" or "@{" in n, "it is '@' or contains '@{'"),
    (lambda n: ".." in n, "it contains '..'"),
    (
        lambda n: n.startswith("/") or n.endswith("/") or "//" in n,
        "it starts or ends with '/' or contains '//'",
    ),
    (lambda n: n.endswith("."), "it ends with '.'"),
    (
        lambda n: any(p.startswith(".") or p.endswith(".lock") for p in n.split("/")),
        "a part of it starts with '.' or ends with '.lock'",
    ),
    (lambda n: n == "HEAD", "HEAD names the current commit, not a branch"),
)
"""``git check-ref-format``'s rules, in the order its documentation lists them."""


def _ref_problem(name: str) -> str:
    return next((why for broken, why in _REF_RULES if broken(name)), "")


def check_revision(revision: str, what: str = "ref") -> str:
    """``revision`` if it can be handed to git as a revision (after ``--end-of-options``)."""
    if not revision or len(revision) > MAX_REF_CHARS:
        raise ToolError(
            f"{what} must be 1 to {MAX_REF_CHARS} characters, e.g. 'main', 'HEAD~3' or a commit id."
        )
    if revision.startswith("-"):
        raise ToolError(f"{what} {revision!r} starts with '-', which git would read as an option; name a "
                        "branch, a tag or a commit id, e.g. 'main' or 'HEAD~1'.")  # fmt: skip
    if any(ord(c) < 0x21 or c == "\x7f" for c in revision):
        raise ToolError(f"{what} {revision!r} contains white space or a control character; name one "
                        "branch, tag or commit, e.g. 'main' or 'HEAD~1'.")  # fmt: skip
    return revision


def relative_paths(ctx: ToolContext, paths: Sequence[str] | None) -> list[str]:
    """``paths`` confined to the workspace, relative to its root ('.' for the root itself)."""
    if not paths:
        return []
    if len(paths) > MAX_PATHS:
        raise ToolError(f"At most {MAX_PATHS} paths per call (got {len(paths)}); name a folder instead.")
    return [check_path(ctx.workspace, path).relative for path in paths]


def git_argv(*arguments: str) -> list[str]:
    """The argv running ``git ARGUMENTS`` with the settings every git tool call gets."""
    return ["env", *_ENV, "git", *_SETTINGS, *arguments]


def in_repository(workspace: Path) -> bool:
    """Whether the workspace or a folder above it holds a ``.git`` (a directory or a file)."""
    folder = workspace_root(workspace)
    for _ in range(len(folder.parts)):  # bounded by the depth of the path
        if (folder / ".git").exists():
            return True
        if folder.parent == folder:
            break
        folder = folder.parent
    return False


@dataclass(slots=True, frozen=True)
class GitOutput:
    """What one git command printed (stdout and stderr merged) and how it ended."""

    output: str
    returncode: int | None
    timed_out: bool

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out


async def run_git(
    ctx: ToolContext, argv: Sequence[str], *, writable: bool, cap_chars: int | None = None
) -> GitOutput:
    """Run ``argv`` (from ``git_argv``) in the workspace: in ``ctx.sandbox`` when there is one.

    ``writable``: the workspace is writable inside the sandbox (commit, branch); otherwise it is
    read-only there. Raises ToolError with the fix when git is not in a repository, or timed out.
    """
    cwd = workspace_root(ctx.workspace)
    limit = ctx.settings.bash_timeout_s
    cap = cap_chars if cap_chars is not None else ctx.settings.output_cap_chars
    async with _sandboxed(ctx, list(argv), cwd, writable=writable and ctx.writable) as command:
        outcome = await run_command(command, cwd, timeout_s=limit, cap_chars=cap)
    if outcome.timed_out:
        raise ToolError(
            f"git did not finish within {limit:g} s and was stopped; output so far:\n{outcome.output}"
        )
    if outcome.returncode != 0 and "not a git repository" in outcome.output.lower():
        raise ToolError(NOT_A_REPOSITORY)
    return GitOutput(outcome.output, outcome.returncode, outcome.timed_out)


def _sandboxed(
    ctx: ToolContext, argv: list[str], cwd: Path, *, writable: bool
) -> AbstractAsyncContextManager[list[str]]:
    if ctx.sandbox is None:  # the user turned the sandbox off: git runs as bash would
        return contextlib.nullcontext(argv)
    return ctx.sandbox.command(argv, workspace=cwd, network=False, writable=writable)
