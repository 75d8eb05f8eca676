"""Git that Steward runs on the host with the workspace's repository as input.

The sandbox keeps the agent from writing ``.git/config`` and ``.git/hooks`` while its commands
run, but the repository came from somewhere: whatever its config or hooks say must not run on
the host when Steward pushes. So every host git here:

* runs with ``-c core.hooksPath=/dev/null -c core.fsmonitor=false`` (no hook, no fsmonitor
  daemon), ``protocol.ext.allow=never`` and ``GIT_ALLOW_PROTOCOL`` (no ``ext::`` or remote
  helper URL runs a command), ``log.showSignature=false`` (no gpg), ``core.sshCommand`` and
  ``credential.helper`` as the *user's* global config sets them (the repository's are
  replaced), no askpass, ``--no-ext-diff --no-textconv`` on diffs;
* gets a clean environment (``PATH``, ``HOME``, the ssh agent, ``GIT_CONFIG_NOSYSTEM``, no
  terminal prompt), not Steward's;
* pushes from a **throw-away git directory** that shares only the workspace's object store
  (``GIT_OBJECT_DIRECTORY``): the repository's config is not read at all by the push, so no
  ``remote.<name>.receivepack``, ``url.*.insteadOf``, ``http.proxy`` or ``core.askPass`` it
  holds can apply, and ``--receive-pack=git-receive-pack`` is given explicitly;
* refuses a push URL that is a path inside the workspace (a repository the agent could have made).

The token (``steward.tools.forge.Credential``) reaches git through ``GIT_CONFIG_*`` variables
(``http.<url>.extraHeader``, scoped to the remote's URL): never on the command line, where other
processes could read it, and never in a file.
"""

from __future__ import annotations

import asyncio
import base64
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from steward.errors import ToolError
from steward.tools.forge import MAX_SHOWN_COMMITS, Credential, Head, PushPlan, strip_credentials

GIT_TIMEOUT_S = 120.0
MAX_OUTPUT_BYTES = 1_000_000
#: Transports a host git may use: no ``ext::``, no ``fd::``, no remote helpers.
ALLOWED_PROTOCOLS = "file:git:http:https:ssh"
_EMPTY_TREES = {
    40: "4b825dc642cb6eb9a060e54bf8d69288fbee4904",
    64: "6ef19b41225c5369f1c104d45d8d85efa9b057b53b14b4b9b939dd74decc5321",
}
#: Variables of Steward's environment a host git keeps (the user's ssh agent and git identity).
_KEPT = ("PATH", "HOME", "USER", "LOGNAME", "SSH_AUTH_SOCK", "XDG_CONFIG_HOME", "GIT_SSH_COMMAND", "TMPDIR")


@dataclass(frozen=True, slots=True)
class GitOutput:
    returncode: int
    stdout: str
    stderr: str


def hardening(ssh_command: str, helpers: tuple[str, ...]) -> list[str]:
    """The ``-c`` options that keep the repository's config from running anything on the host."""
    options = [
        "core.hooksPath=/dev/null",
        "core.fsmonitor=false",
        "protocol.ext.allow=never",
        "log.showSignature=false",
        "core.askPass=",
        f"core.sshCommand={ssh_command}",
        "credential.helper=",  # an empty value drops every helper configured before it
        *(f"credential.helper={helper}" for helper in helpers),
    ]
    return [word for option in options for word in ("-c", option)]


def clean_environment(workspace: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {name: os.environ[name] for name in _KEPT if name in os.environ}
    env.setdefault("PATH", os.defpath)
    env.update(
        LC_ALL="C",
        GIT_CONFIG_NOSYSTEM="1",
        GIT_TERMINAL_PROMPT="0",
        GIT_ASKPASS="",
        SSH_ASKPASS="",
        GIT_ALLOW_PROTOCOL=ALLOWED_PROTOCOLS,
        # Only the workspace's own repository, never one of a directory above it.
        GIT_CEILING_DIRECTORIES=str(workspace.parent),
    )
    env.update(extra or {})
    return env


async def run_git(
    args: list[str], *, cwd: Path, env: dict[str, str], limit_s: float = GIT_TIMEOUT_S
) -> GitOutput:
    """Run ``git ARGS`` (no shell, stdin closed), bounded in time and output."""
    git = shutil.which("git", path=env.get("PATH"))
    if git is None:
        raise ToolError("git is not installed on this machine; ask the user to install it.")
    process = await asyncio.create_subprocess_exec(
        git, "--no-pager", *args, cwd=cwd, env=env,
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        async with asyncio.timeout(limit_s):
            out, err = await process.communicate()
    except TimeoutError:
        process.kill()
        await process.wait()
        raise ToolError(
            f"git {args[0] if args else ''} took longer than {limit_s:.0f} s and was stopped."
        ) from None
    return GitOutput(process.returncode or 0, _text(out), _text(err))


def _text(data: bytes) -> str:
    return data[:MAX_OUTPUT_BYTES].decode("utf-8", "replace")


class HostGit:
    """``steward.tools.forge.GitHost`` on this machine, hardened as the module says."""

    def __init__(self, timeout_s: float = GIT_TIMEOUT_S) -> None:
        self.timeout_s = timeout_s
        self._user: tuple[str, tuple[str, ...]] | None = None

    # --- reading the workspace's repository ---------------------------------------------

    async def _user_settings(self, workspace: Path) -> tuple[str, tuple[str, ...]]:
        """The ssh command and credential helpers of the user's global config (not the repo's)."""
        if self._user is None:
            env = clean_environment(workspace)
            ssh = await run_git(["config", "--global", "--get", "core.sshCommand"], cwd=workspace, env=env)
            helpers = await run_git(
                ["config", "--global", "--get-all", "credential.helper"], cwd=workspace, env=env
            )
            self._user = (
                ssh.stdout.strip() or "ssh",
                tuple(line for line in helpers.stdout.splitlines() if line.strip()),
            )
        return self._user

    async def _git(self, workspace: Path, args: list[str], *, check: bool = True) -> GitOutput:
        ssh, helpers = await self._user_settings(workspace)
        result = await run_git(
            [*hardening(ssh, helpers), *args],
            cwd=workspace,
            env=clean_environment(workspace),
            limit_s=self.timeout_s,
        )
        if check and result.returncode != 0:
            raise ToolError(f"git {args[0]} failed: {_last_lines(result.stderr)}")
        return result

    async def _one(self, workspace: Path, args: list[str]) -> str | None:
        result = await self._git(workspace, args, check=False)
        return result.stdout.strip() or None if result.returncode == 0 else None

    async def _branch(self, workspace: Path) -> tuple[str, str]:
        if await self._one(workspace, ["rev-parse", "--is-inside-work-tree"]) != "true":
            raise ToolError("The workspace is not a git repository: there is nothing to push.")
        branch = await self._one(workspace, ["symbolic-ref", "--quiet", "--short", "HEAD"])
        if branch is None:
            raise ToolError("HEAD is detached: switch to a branch (git_branch) before pushing.")
        sha = await self._one(workspace, ["rev-parse", "--verify", "--quiet", "HEAD^{commit}"])
        if sha is None:
            raise ToolError(f"Branch {branch!r} has no commit yet: commit first (git_commit).")
        return branch, sha

    async def _urls(self, workspace: Path, remote: str) -> tuple[str, str]:
        url = await self._one(workspace, ["config", "--get", f"remote.{remote}.url"])
        if url is None:
            raise ToolError(
                f"The repository has no remote {remote!r}: ask the user to add it (git remote add {remote} "
                "URL) or to set [git] remote to the one to push to."
            )
        return url, await self._one(workspace, ["config", "--get", f"remote.{remote}.pushurl"]) or url

    async def head(self, workspace: Path, remote: str) -> Head:
        branch, sha = await self._branch(workspace)
        url, push_url = await self._urls(workspace, remote)
        pushed = await self._one(
            workspace, ["rev-parse", "--verify", "--quiet", f"refs/remotes/{remote}/{branch}"]
        )
        return Head(branch, sha, pushed, url, push_url)

    async def plan_push(self, workspace: Path, remote: str, *, force: bool) -> PushPlan:
        branch, sha = await self._branch(workspace)
        _, url = await self._urls(workspace, remote)
        _refuse_local_inside(url, workspace)
        shown_at_most = f"--max-count={MAX_SHOWN_COMMITS + 1}"
        listed = await self._git(
            workspace,
            [
                "rev-list",
                shown_at_most,
                "--format=%h %s",
                "--no-commit-header",
                sha,
                "--not",
                f"--remotes={remote}",
            ],
        )
        commits = [line for line in listed.stdout.splitlines() if line.strip()]
        count = await self._git(workspace, ["rev-list", "--count", sha, "--not", f"--remotes={remote}"])
        total = int(count.stdout.strip() or 0)
        stat = ""
        if commits:
            base = await self._base(workspace, sha, remote, len(sha))
            diff = await self._git(workspace, ["diff", "--stat", "--no-ext-diff", "--no-textconv", base, sha])
            stat = diff.stdout.rstrip()
        shown = tuple(commits[:MAX_SHOWN_COMMITS])
        return PushPlan(
            remote, url, strip_credentials(url), branch, sha, shown, total - len(shown), stat, force
        )

    async def _base(self, workspace: Path, sha: str, remote: str, width: int) -> str:
        """What the remote has below ``sha``: the parent of the oldest commit that leaves."""
        oldest = await self._git(workspace, ["rev-list", "--reverse", sha, "--not", f"--remotes={remote}"])
        first = oldest.stdout.split("\n", 1)[0].strip()
        parent = await self._one(workspace, ["rev-parse", "--verify", "--quiet", f"{first}^"])
        return parent or _EMPTY_TREES.get(width, _EMPTY_TREES[40])

    # --- pushing ------------------------------------------------------------------------

    async def push(self, workspace: Path, plan: PushPlan, credential: Credential | None) -> str:
        _refuse_local_inside(plan.url, workspace)
        common = await self._one(workspace, ["rev-parse", "--path-format=absolute", "--git-common-dir"])
        objects = await self._one(workspace, ["rev-parse", "--path-format=absolute", "--git-path", "objects"])
        if common is None or objects is None:
            raise ToolError("Cannot find the repository's objects to push from.")
        ssh, helpers = await self._user_settings(workspace)
        with tempfile.TemporaryDirectory(prefix="steward-push-") as scratch:
            git_dir = Path(scratch) / "push.git"
            extra = {"GIT_DIR": str(git_dir), "GIT_OBJECT_DIRECTORY": objects}
            env = clean_environment(workspace, extra)
            fmt = await self._one(workspace, ["rev-parse", "--show-object-format"]) or "sha1"
            init = ["init", "--quiet", "--bare", "--template=", f"--object-format={fmt}", str(git_dir)]
            made = await run_git(
                init, cwd=Path(scratch), env=clean_environment(workspace), limit_s=self.timeout_s
            )
            if made.returncode != 0:
                raise ToolError(f"Cannot prepare the push: {_last_lines(made.stderr)}")
            shallow = Path(common) / "shallow"
            if shallow.is_file():  # a shallow clone's boundary, so the push does not look below it
                shutil.copyfile(shallow, git_dir / "shallow")
            if credential is not None and plan.url.startswith(("https://", "http://")):
                env.update(_token_config(plan.url, credential))
                helpers = ()  # the token is the credential: no helper of anyone's runs
            refspec = f"{'+' if plan.force else ''}{plan.sha}:refs/heads/{plan.branch}"
            options = ["--porcelain", "--receive-pack=git-receive-pack", "--no-verify"]
            args = [*hardening(ssh, helpers), "push", *options, plan.url, refspec]
            result = await run_git(args, cwd=Path(scratch), env=env, limit_s=self.timeout_s)
        if result.returncode != 0:
            raise ToolError(_push_failure(result, plan, credential))
        # The remote-tracking ref, so the next push shows only what is new and a pull request
        # knows the branch is there (hooks off: update-ref would run reference-transaction).
        await self._git(
            workspace, ["update-ref", f"refs/remotes/{plan.remote}/{plan.branch}", plan.sha], check=False
        )
        return _porcelain_summary(result.stdout)


def _token_config(url: str, credential: Credential) -> dict[str, str]:
    """The token as an ``Authorization`` header for this remote's URL only, through the
    environment (``GIT_CONFIG_COUNT``): not on the command line, not in any file."""
    parts = urlsplit(url)
    user = parts.username or "x-access-token"
    basic = base64.b64encode(f"{user}:{credential.token}".encode()).decode()
    scope = f"{parts.scheme}://{parts.netloc.rsplit('@', 1)[-1]}{parts.path}"
    return {
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": f"http.{scope}.extraHeader",
        "GIT_CONFIG_VALUE_0": f"Authorization: Basic {basic}",
    }


def _refuse_local_inside(url: str, workspace: Path) -> None:
    """A remote that is a path inside the workspace is a repository the agent could have made
    (with hooks ``git-receive-pack`` would run on the host): never pushed to."""
    if "://" in url and not url.startswith("file://"):
        return
    if "://" not in url and ":" in url.split("/", 1)[0]:
        return  # scp-like ssh: host:path
    raw = urlsplit(url).path if url.startswith("file://") else url
    target = (workspace / raw).resolve()  # an absolute path replaces the workspace's
    if target == workspace.resolve() or workspace.resolve() in target.parents:
        raise ToolError(
            f"The remote's push URL {url!r} is inside the workspace: Steward does not push there. Ask the "
            "user to point the remote elsewhere."
        )


def _push_failure(result: GitOutput, plan: PushPlan, credential: Credential | None) -> str:
    said = _last_lines(result.stderr + "\n" + result.stdout)
    if "non-fast-forward" in said or "fetch first" in said or "[rejected]" in said:
        return (
            f"The push was rejected: {plan.remote}/{plan.branch} has commits this branch lacks ({said}). "
            "Bring them in first (fetch and rebase or merge), or ask the user for a force push."
        )
    if "Authentication failed" in said or "could not read Username" in said or " 403" in said:
        named = f"the token in {credential.variable}" if credential else "git's credentials"
        return (
            f"The remote refused {named} ({said}). Tell the user to export a token that may push "
            "(GITHUB_TOKEN or GITEA_TOKEN, or the variable [git] token_env names) or to set up git's "
            "credential helper; do not retry."
        )
    return f"git push failed: {said}"


def _porcelain_summary(stdout: str) -> str:
    lines = [line for line in stdout.splitlines() if line and line[0] in "*+- !=" and "\t" in line]
    return "\n".join(line.split("\t", 1)[1].replace("\t", " ") for line in lines[:5])


def _last_lines(text: str, count: int = 4) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return " | ".join(lines[-count:])[:600] or "no message"
