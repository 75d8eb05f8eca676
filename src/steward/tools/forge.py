"""``git_push`` and ``create_pull_request``: what leaves the machine, approved, credential-free.

Both run on the host, never in the sandbox: the forge token (``[git] token_env``, default
``GITHUB_TOKEN`` or ``GITEA_TOKEN``) is read from Steward's own environment when the call runs,
handed to git or to the forge's API, and never shown to the model or written anywhere.

A push is planned when it is proposed: the current branch, the commit it points to, the commits
and the diff stat that would leave, and the remote's URL (credentials stripped). The approval
shows that plan and is bound to its commit: if the branch moves before the push runs, the call
is asked about again. The push sends that very commit (``git push URL SHA:refs/heads/BRANCH``),
not whatever the branch points to later. Force pushes are refused unless a policy rule names
``git_push(force)`` (``steward.safety.policy.rules``).

The host's git is not run from here: ``GitHost`` is what the runtime hands in
(``steward.safety.hostgit.HostGit``), with the hardening that keeps the workspace's hooks,
fsmonitor and config-defined commands from running on the host.
"""

from __future__ import annotations

import os
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol
from urllib.parse import urlsplit

from steward.config import GitSettings
from steward.errors import ToolError
from steward.models.base import ToolSpec
from steward.tools.base import FunctionToolset, Tool, ToolContext

Forge = Literal["github", "gitea"]
PUSH, PULL_REQUEST = "git_push", "create_pull_request"
FORGE_TOOLS = frozenset({PUSH, PULL_REQUEST})
MAX_SHOWN_COMMITS = 50

#: (the text a human approves, what the approval is bound to) for one proposed call.
Preview = tuple[str, str]
Previewer = Callable[[str, Mapping[str, Any], ToolContext], Awaitable[Preview | None]]


@dataclass(frozen=True, slots=True)
class Credential:
    """A token and the variable it came from (named in errors; the value never is)."""

    variable: str
    token: str


@dataclass(frozen=True, slots=True)
class PushPlan:
    """What one push sends, fixed when the push is proposed."""

    remote: str
    url: str
    shown_url: str
    branch: str
    sha: str
    #: ``short-sha subject`` of the commits the remote does not have yet, newest first.
    commits: tuple[str, ...]
    #: Commits leaving beyond those listed.
    more: int
    stat: str
    force: bool

    def describe(self) -> str:
        """The approval's text: everything that leaves the machine."""
        verb = "FORCE-push (rewrites the remote branch)" if self.force else "push"
        lines = [
            f"Leaves the machine: {verb} commit {self.sha[:12]} to branch {self.branch!r} of "
            f"{self.remote} ({self.shown_url})",
        ]
        if self.commits:
            lines.append(f"Commits ({len(self.commits) + self.more}):")
            lines += [f"  {c}" for c in self.commits]
            if self.more:
                lines.append(f"  ... and {self.more} more")
        else:
            lines.append("Commits: none the remote lacks (the branch is created or moved only)")
        if self.stat:
            lines += ["Diff stat:", *(f"  {line}" for line in self.stat.splitlines())]
        return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class Head:
    """The workspace repository's current branch, as a pull request needs it."""

    branch: str
    sha: str
    #: Where the remote-tracking ref of the branch points (None: never pushed or fetched).
    pushed: str | None
    #: The remote's fetch URL and push URL (credentials stripped by nobody: never shown).
    url: str
    push_url: str


class GitHost(Protocol):
    """Git on the host, hardened (``steward.safety.hostgit.HostGit`` implements it)."""

    async def plan_push(self, workspace: Path, remote: str, *, force: bool) -> PushPlan: ...

    async def push(self, workspace: Path, plan: PushPlan, credential: Credential | None) -> str: ...

    async def head(self, workspace: Path, remote: str) -> Head: ...


# --- remotes and forges -------------------------------------------------------------------

_SCP = re.compile(r"^(?:[^@/\s]+@)?(?P<host>[^:/\s]+):(?P<path>[^/].*)$")


@dataclass(frozen=True, slots=True)
class Repository:
    host: str
    owner: str
    name: str

    @property
    def slug(self) -> str:
        return f"{self.owner}/{self.name}"


def parse_remote(url: str) -> Repository | None:
    """host, owner and repository of a remote URL: ``https://host/owner/repo(.git)``,
    ``ssh://git@host:22/owner/repo.git``, ``git@host:owner/repo.git``; None for a path."""
    url = url.strip()
    if "://" in url:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https", "ssh", "git") or not parts.hostname:
            return None
        host, path = parts.hostname, parts.path
    else:
        match = _SCP.match(url)
        if match is None or url.startswith(("/", ".")):
            return None
        host, path = match.group("host"), match.group("path")
    pieces = [p for p in path.strip("/").split("/") if p]
    if len(pieces) < 2:
        return None
    name = pieces[-1].removesuffix(".git")
    return Repository(host.lower(), pieces[-2], name) if name else None


def strip_credentials(url: str) -> str:
    """The URL as it may be shown: no user name, password or token."""
    if "://" not in url:
        return url
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]).geturl()


def forge_of(settings: GitSettings, host: str) -> Forge:
    """Whose API opens pull requests for ``host`` (``[git] forge``, or guessed when "auto")."""
    if settings.forge == "github":
        return "github"
    if settings.forge == "gitea":
        return "gitea"
    if settings.forge == "none":
        raise ToolError('Pull requests are turned off ([git] forge = "none"); say so to the user.')
    api = settings.api_url.lower()
    if "/api/v1" in api or host == "codeberg.org" or "gitea" in host or "forgejo" in host:
        return "gitea"
    if "/api/v3" in api or host == "github.com" or "api.github.com" in api:
        return "github"
    raise ToolError(
        f'Cannot tell which forge {host} runs. Ask the user to set [git] forge = "github" or "gitea" '
        "(and api_url) in steward.toml."
    )


def api_root(settings: GitSettings, forge: Forge, host: str) -> str:
    if settings.api_url:
        return settings.api_url.rstrip("/")
    if forge == "github":
        return "https://api.github.com" if host == "github.com" else f"https://{host}/api/v3"
    return f"https://{host}/api/v1"


def token_variable(settings: GitSettings, forge: Forge | None) -> str:
    return settings.token_env or ("GITEA_TOKEN" if forge == "gitea" else "GITHUB_TOKEN")


def token_variables(settings: GitSettings) -> tuple[str, ...]:
    """Every variable a forge token may be read from (their values are redacted everywhere)."""
    return (settings.token_env,) if settings.token_env else ("GITHUB_TOKEN", "GITEA_TOKEN")


def credential(settings: GitSettings, forge: Forge | None, environ: Mapping[str, str]) -> Credential | None:
    variable = token_variable(settings, forge)
    token = environ.get(variable, "").strip()
    return Credential(variable, token) if token else None


# --- the tools ----------------------------------------------------------------------------


class ForgeToolset(FunctionToolset):
    """``git_push`` and ``create_pull_request``, offered when the workspace is a git repository
    (``create_pull_request`` unless ``[git] forge = "none"``)."""

    def __init__(
        self,
        settings: GitSettings,
        host: GitHost,
        environ: Callable[[], Mapping[str, str]] = lambda: os.environ,
    ) -> None:
        self.settings, self.host, self._environ = settings, host, environ
        super().__init__([Tool(self._push_tool, name=PUSH), Tool(self._pull_request_tool, name=PULL_REQUEST)])

    async def get_tools(self, ctx: ToolContext) -> Sequence[ToolSpec]:
        if not (ctx.workspace / ".git").exists():
            return ()
        tools = await super().get_tools(ctx)
        return [t for t in tools if t.name != PULL_REQUEST] if self.settings.forge == "none" else tools

    @property
    def previews(self) -> dict[str, Previewer]:
        """What the policy wrapper shows a human before these tools run (and binds approval to)."""
        return {PUSH: self.preview, PULL_REQUEST: self.preview}

    async def preview(self, name: str, arguments: Mapping[str, Any], ctx: ToolContext) -> Preview | None:
        if name == PUSH:
            plan = await self.host.plan_push(
                ctx.workspace, self.settings.remote, force=arguments.get("force") is True
            )
            self._plans(ctx)[_key(arguments)] = (ctx.step, plan)
            return plan.describe(), f"{plan.url}\n{plan.branch}\n{plan.sha}\n{plan.force}"
        if name == PULL_REQUEST:
            head = await self.host.head(ctx.workspace, self.settings.remote)
            repo, forge, api = self._where(head)
            base = arguments.get("base") or "(the repository's default branch)"
            draft = " as a draft" if arguments.get("draft") else ""
            text = (
                f"Leaves the machine: a pull request{draft} on {repo.slug} ({forge}, {api}) from branch "
                f"{head.branch!r} (commit {head.sha[:12]}) into {base}, titled "
                f"{str(arguments.get('title', ''))!r}; its body is in the arguments."
            )
            return text, f"{api}\n{repo.slug}\n{head.branch}\n{head.sha}"
        return None

    def _plans(self, ctx: ToolContext) -> dict[str, tuple[int, PushPlan]]:
        """The plans shown for approval in this run, by kind of push, with the step shown in."""
        return ctx.scope(self, dict)

    async def _push_tool(self, ctx: ToolContext, force: bool = False) -> str:
        """Push the current branch to the configured remote, as the user (their credentials stay
        on the host). A human sees the commits and approves first.

        Args:
            force: Overwrite the remote branch even when it has commits this one lacks. Refused
                unless the user's policy allows it.
        """
        # The plan the human approved (the policy wrapper made it just before this call).
        # Only the one made for this very call: a plan shown for a call that was denied is stale.
        shown = self._plans(ctx).pop(_key({"force": force}), None)
        plan = shown[1] if shown is not None and shown[0] == ctx.step else None
        if plan is None:  # allowed by a rule, so nobody was shown a plan: make it now
            plan = await self.host.plan_push(ctx.workspace, self.settings.remote, force=force)
        repo = parse_remote(plan.url)
        forge = _maybe_forge(self.settings, repo.host) if repo is not None else None
        output = await self.host.push(ctx.workspace, plan, credential(self.settings, forge, self._environ()))
        leaving = f"{len(plan.commits) + plan.more} commit(s)" if plan.commits else "no new commits"
        said = f"\n{output.strip()}" if output.strip() else ""
        return f"Pushed {plan.sha[:12]} to {plan.remote}/{plan.branch} ({leaving}; {plan.shown_url}).{said}"

    async def _pull_request_tool(
        self, ctx: ToolContext, title: str, body: str, base: str | None = None, draft: bool = False
    ) -> str:
        """Open a pull request from the current branch (push it first with git_push).

        Args:
            title: The pull request's title.
            body: Its description: what changed and why, how it was tested.
            base: The branch to merge into; default: the repository's default branch.
            draft: Open it as a draft.
        """
        if not title.strip():
            raise ToolError("The pull request needs a title: call again with a short title.")
        head = await self.host.head(ctx.workspace, self.settings.remote)
        _check_pushed(head, self.settings.remote)
        repo, forge, api = self._where(head)
        found = credential(self.settings, forge, self._environ())
        if found is None:
            variable = token_variable(self.settings, forge)
            raise ToolError(
                f"No forge token: {variable} is not set in Steward's environment. Tell the user to export "
                f"{variable}=<a token that may open pull requests on {repo.slug}> (or to set [git] "
                "token_env) and restart Steward; do not ask for the token itself."
            )
        from steward.tools._forge_api import open_pull_request

        number, url = await open_pull_request(
            forge, api, repo.owner, repo.name, found,
            title=title, body=body, head=head.branch, base=base, draft=draft,
        )  # fmt: skip
        return f"Opened pull request #{number} on {repo.slug}: {url}"

    def _where(self, head: Head) -> tuple[Repository, Forge, str]:
        repo = parse_remote(head.url) or parse_remote(head.push_url)
        if repo is None:
            raise ToolError(
                f"The remote {self.settings.remote!r} is not on a forge ({strip_credentials(head.url)}): "
                "pull requests need an https or ssh remote of GitHub or Gitea. Ask the user to set "
                "remote.<name>.url to the forge's URL (a local pushurl may stay)."
            )
        forge = forge_of(self.settings, repo.host)
        return repo, forge, api_root(self.settings, forge, repo.host)


def _maybe_forge(settings: GitSettings, host: str) -> Forge | None:
    try:
        return forge_of(settings, host)
    except ToolError:
        return None  # a push does not need to know the forge: the token variable's default then


def _check_pushed(head: Head, remote: str) -> None:
    if head.pushed is None:
        raise ToolError(
            f"Branch {head.branch!r} has not been pushed to {remote}: call git_push first, then "
            "create_pull_request."
        )
    if head.pushed != head.sha:
        raise ToolError(
            f"Branch {head.branch!r} has commits not pushed yet (it is at {head.sha[:12]}, {remote} has "
            f"{head.pushed[:12]}): call git_push first so the pull request shows them."
        )


def _key(arguments: Mapping[str, Any]) -> str:
    return "force" if arguments.get("force") is True else "push"


def forge_toolset(settings: GitSettings, host: GitHost) -> ForgeToolset:
    """The forge tools over ``host`` (the runtime's hardened host git)."""
    return ForgeToolset(settings, host)


__all__ = [
    "FORGE_TOOLS",
    "Credential",
    "ForgeToolset",
    "GitHost",
    "Head",
    "PushPlan",
    "Repository",
    "api_root",
    "credential",
    "forge_of",
    "forge_toolset",
    "parse_remote",
    "strip_credentials",
    "token_variables",
]
