"""The OS sandbox (bubblewrap) around every command-running tool.

``BubblewrapSandbox.command(argv, ...)`` yields the argv that runs ``argv`` inside a fresh
sandbox; the tool starts that instead, in a new session. Killing that process group (timeout,
cancel) kills bwrap, whose namespace init dies with it (``--die-with-parent``), and with the
init the kernel kills every process of the PID namespace, ``setsid`` children included.

Inside the sandbox:

* **Files.** A minimal root: ``/usr`` (and ``/bin``, ``/lib*``, ``/sbin`` as the host has them)
  read-only; ``/etc`` a read-only copy of an allowlist of the host's (loader cache, name
  service, certificates without ``ssl/private``, time zone, alternatives) with a ``passwd`` and
  ``group`` naming only the sandbox user, recopied when the host's entries change;
  ``resolv.conf`` leads somewhere only with network. Private ``/proc``, ``/dev``, ``/tmp``,
  ``/var/tmp``; ``HOME`` an empty tmpfs, never the real home. ``/root``, ``/home`` and credential
  paths are not there at all. The Python running Steward (its prefixes, e.g. a venv and a
  pyenv install under /root) is visible read-only so ``python`` works. The workspace is bound
  read-write (read-only when ``writable=False``) at its own path.
* **Protected paths** (``steward.safety.protected``) are mounted read-only on top of the
  workspace; git directories are bound onto themselves so they cannot be renamed away from
  that protection. A protected path that does not exist yet gets a read-only *placeholder*:
  an empty file or directory made in the workspace on the host as the mount point (bwrap would
  make it too, more slowly), removed after the command if it is still empty and no other
  sandbox of this process (counted per path) or of another live process (noted in the
  workspace's ledger) uses it, through fds beneath the workspace, never following a link
  (:mod:`steward.safety.sandbox.placeholders`). ``.git/hooks`` (when ``.git`` exists)
  and ``.steward/`` are created for real instead. A ``.git/commondir`` cannot have a
  placeholder (an empty one breaks git), so one that appears during a command is removed
  afterwards and the call fails, saying so.
* **Environment** cleared, then an allowlist (``PATH``, ``LANG``, ``LC_*``, ``TERM``, ``TZ`` and
  configured names); a name that looks like a secret (``*KEY*``, ``*TOKEN*``, ``*SECRET*``,
  ``*PASSWORD*``, ``*CREDENTIAL*``) passes only when configured by its exact name. bwrap itself
  starts with that environment (``env -i``): its init is visible inside as ``/proc/1``.
* **Network** off (a private network namespace with only loopback) unless allowed for the call.
* **Limits** through ``prlimit`` inside the sandbox: CPU seconds, address space (memory), file
  size, and for an unprivileged host user the number of processes (counted per sandbox: the
  user namespace is new). The kernel does not apply the process limit to root, so under root
  each command runs in its own pids cgroup (v2 when usable, else v1; joining a v1 cgroup waits
  for an RCU grace period, ~10 ms); where neither works ``probe()`` says process limits are not
  enforced here and why.

``probe()`` starts one real sandbox and reports what works and why not (``steward doctor``);
``checked()`` says whether it works from the outcome remembered for this machine
(:mod:`steward.safety.sandbox.selfcheck`), so that commands start without a sandbox; ``command()``
probes before the first command whatever was remembered, and refuses with ``ToolError``
naming the fix when the sandbox cannot start. Nothing runs unsandboxed unless the user
turned the sandbox off (``enabled=False``, ``--no-sandbox``).

Hard links: a command cannot make a new name for a file outside its writable mounts (links
across mounts fail), so none for a system or protected file; a hard link that already exists in
the workspace shares its file's content, as on the host.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import fnmatch
import itertools
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from steward.errors import ToolError
from steward.safety.checkpoints.scan import scanner_for
from steward.safety.protected import Protection, find_protected
from steward.safety.sandbox.placeholders import Claimed, Placeholders, make_dirs
from steward.secret_paths import DEFAULT_SECRET_FILES

if TYPE_CHECKING:
    from steward.config import Config, SandboxConfig
    from steward.safety.policy.programs import MaskPlan
    from steward.safety.policy.rules import Policy
    from steward.safety.sandbox.egress import EgressConnection, EgressProxy

INSTALL_FIX = "Install bubblewrap: apt-get install bubblewrap — or run with --no-sandbox to accept the risk"
USERNS_FIX = (
    "Allow unprivileged user namespaces (sysctl -w kernel.unprivileged_userns_clone=1; on Ubuntu "
    "sysctl -w kernel.apparmor_restrict_unprivileged_userns=0; in a container start it with "
    "--security-opt seccomp=unconfined or as privileged) — or run with --no-sandbox to accept the risk"
)

ENV_ALLOWED = ("PATH", "LANG", "LANGUAGE", "LC_*", "TERM", "TZ", "COLORTERM", "NO_COLOR")
"""Environment names passed into the sandbox by default (patterns allowed)."""

ENV_SECRET_PATTERNS = ("*KEY*", "*TOKEN*", "*SECRET*", "*PASSWORD*", "*PASSWD*", "*CREDENTIAL*")
"""Names that never pass unless configured by their exact name."""

SANDBOX_USER = "steward"
SANDBOX_HOME = "/home/steward"
_PRIVATE_DIRS = ("/tmp", "/var/tmp", SANDBOX_HOME)  # noqa: S108 - fresh tmpfs mounts inside the sandbox

_ETC_ENTRIES = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "nsswitch.conf",
    "host.conf",
    "hosts",
    "gai.conf",
    "localtime",
    "timezone",
    "ssl",
    "ca-certificates",
    "ca-certificates.conf",
    "pki",
    "crypto-policies",
    "alternatives",
    "protocols",
    "services",
    "mime.types",
    "os-release",
    "debian_version",
    "gitconfig",
    "inputrc",
    "locale.alias",
    "terminfo",
    "magic",
    "magic.mime",
    f"python{sys.version_info.major}",
    f"python{sys.version_info.major}.{sys.version_info.minor}",
)
"""What of the host's ``/etc`` the sandbox sees (a copy, when present): no shadow, ssh, sudoers,
ssl/private, pip or npm configuration."""

_ETC_WATCHED = ("ssl/certs", "pki/tls/certs", "pki/ca-trust/extracted")
"""Besides the entries themselves: directories whose change means the copy of /etc is stale."""

_RESOLV_MOUNT = "/run/steward/resolv.conf"

_CREDENTIALS = (
    ".ssh",
    ".gnupg",
    ".aws",
    ".azure",
    ".kube",
    ".docker",
    ".netrc",
    ".pgpass",
    ".git-credentials",
)
"""Hidden inside a workspace that is itself a home directory."""

_PROBE_TIMEOUT_S = 10.0
_DRAIN_S = 2.0
_POLL_S = 0.02


@dataclass(slots=True, frozen=True)
class SandboxSettings:
    """How commands are sandboxed; the ``[sandbox]`` section of the configuration."""

    #: Sandbox command-running tools. False only when the user accepts the risk (--no-sandbox).
    enabled: bool = True
    #: Allow the network for every command (otherwise only where the policy allows it per call).
    network: bool = False
    #: Extra host paths visible read-only (e.g. a toolchain in /opt).
    readable: tuple[Path, ...] = ()
    #: Extra host paths visible read-write (e.g. a shared cache); protected paths do not apply there.
    writable: tuple[Path, ...] = ()
    #: CPU seconds per process (RLIMIT_CPU); None for no limit.
    cpu_s: int | None = 600
    #: Address space per process in MB (RLIMIT_AS); None for no limit.
    memory_mb: int | None = 4096
    #: Largest file a command may write, in MB (RLIMIT_FSIZE); None for no limit.
    file_size_mb: int | None = 1024
    #: Processes (and threads) per command; None for no limit.
    max_processes: int | None = 256
    #: Size of each private tmpfs (/tmp, /var/tmp, HOME) in MB.
    tmpfs_mb: int = 1024
    #: Extra environment names (or patterns such as ``PIP_*``) to pass in. An exact name passes
    #: even when it looks like a secret; a pattern never lets a secret-looking name through.
    env: tuple[str, ...] = ()
    #: The unprivileged user and group the command runs as inside.
    uid: int = 1000
    gid: int = 1000
    #: The bwrap executable; None finds ``bwrap`` on PATH.
    bwrap: str | None = None
    #: Programs a deny rule forbids with any arguments: an empty file is mounted over each.
    masked_programs: tuple[Path, ...] = ()
    #: Domains the egress proxy lets commands granted the network reach.
    allowed_domains: tuple[str, ...] = ()
    #: Names of secret files (globs), masked inside the sandbox.
    secret_files: tuple[str, ...] = DEFAULT_SECRET_FILES
    #: Host paths never visible inside, even within the workspace (the checkpoints' state
    #: directory when the workspace is a home directory).
    hidden: tuple[Path, ...] = ()


@dataclass(slots=True, frozen=True)
class SandboxStatus:
    """Whether the sandbox works here, why not, and how each limit is enforced."""

    ok: bool
    reason: str
    fix: str = ""
    details: dict[str, str] = field(default_factory=dict)
    #: Things that work only in part (a limit that cannot be enforced here).
    warnings: tuple[str, ...] = ()

    def render(self) -> str:
        """Lines for ``steward doctor``."""
        lines = [f"sandbox: {'ok' if self.ok else 'NOT WORKING'} — {self.reason}"]
        if self.fix:
            lines.append(f"  fix: {self.fix}")
        lines.extend(f"  {key}: {value}" for key, value in self.details.items())
        lines.extend(f"  warning: {warning}" for warning in self.warnings)
        return "\n".join(lines)


def sandbox_from_config(config: SandboxConfig, masked: Sequence[Path] = ()) -> BubblewrapSandbox:
    """The sandbox the ``[sandbox]`` section of the configuration describes; ``masked``: the
    programs deny rules forbid (``steward.safety.policy.programs``)."""
    return BubblewrapSandbox(settings_from_config(config, masked))


def mask_plan(config: SandboxConfig, policy: Policy) -> MaskPlan:
    """The programs the policy's deny rules forbid, as found on the PATH the sandbox sees."""
    from steward.safety.policy.programs import plan_masks

    return plan_masks(policy, _environment(settings_from_config(config))["PATH"])


def agent_sandbox(config: Config, policy: Policy) -> tuple[BubblewrapSandbox, MaskPlan]:
    """The sandbox an agent's commands run in: the configured one, with the policy's programs
    masked and the checkpoints' state directory out of sight."""
    from steward.safety.checkpoints.around_calls import settings_from_config as checkpoint_settings
    from steward.safety.checkpoints.shadow import default_state_dir

    plan = mask_plan(config.sandbox, policy)
    state = checkpoint_settings(config).state_dir or default_state_dir()
    masked = [Path(f) for f in plan.files]
    return BubblewrapSandbox(settings_from_config(config.sandbox, masked, (state,))), plan


def settings_from_config(
    config: SandboxConfig, masked: Sequence[Path] = (), hidden: tuple[Path, ...] = ()
) -> SandboxSettings:
    return SandboxSettings(
        enabled=config.enabled,
        network=config.network,
        tmpfs_mb=config.tmpfs_mb,
        readable=tuple(Path(p).expanduser() for p in config.readable),
        writable=tuple(Path(p).expanduser() for p in config.writable),
        cpu_s=config.cpu_s,
        memory_mb=config.memory_mb,
        file_size_mb=config.file_size_mb,
        max_processes=config.max_processes,
        env=tuple(config.env),
        masked_programs=tuple(masked),
        allowed_domains=tuple(config.allowed_domains),
        secret_files=tuple(config.secret_files),
        hidden=hidden,
    )


# --- placeholders for protected paths that do not exist yet ---------------------------------
# Made, noted, swept and removed through fds beneath the workspace (placeholders.py).

_PLACEHOLDERS = Placeholders()


def sweep_placeholders(root: Path) -> None:
    """Remove the read-only placeholders that a killed process left in the workspace ``root``."""
    _PLACEHOLDERS.sweep(root)


# --- process limits: a pids cgroup under root -----------------------------------------------


@dataclass(slots=True, frozen=True)
class _CgroupParent:
    version: int
    path: Path


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _cgroup_mounts() -> list[tuple[str, Path, str]]:
    """(fstype, mount point, super options) of the cgroup file systems, from mountinfo."""
    mounts = []
    for line in _read(Path("/proc/self/mountinfo")).splitlines():
        fields = line.split(" - ", 1)
        if len(fields) != 2:
            continue
        before, after = fields[0].split(), fields[1].split()
        if len(before) > 4 and len(after) > 2 and after[0] in ("cgroup", "cgroup2"):
            mounts.append((after[0], Path(before[4]), after[2]))
    return mounts


def _own_cgroups() -> dict[str, str]:
    """Controller (``""`` for cgroup2) -> this process's cgroup path, from /proc/self/cgroup."""
    own: dict[str, str] = {}
    for line in _read(Path("/proc/self/cgroup")).splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            for controller in parts[1].split(",") if parts[1] else [""]:
                own[controller] = parts[2]
    return own


def _usable(parent: Path) -> str | None:
    """None if a child cgroup with a pids.max can be made under ``parent``, else why not."""
    child = parent / f"steward-probe-{os.getpid()}"
    try:
        child.mkdir()
    except OSError as exc:
        return f"cannot create a cgroup in {parent} ({exc.strerror})"
    try:
        if not (child / "pids.max").exists():
            return f"the pids controller is not enabled for cgroups under {parent}"
        return None
    finally:
        with contextlib.suppress(OSError):
            child.rmdir()


def find_pids_cgroup() -> tuple[_CgroupParent | None, str]:
    """Where per-command pids cgroups can be made (v2 preferred), or None and why not."""
    own = _own_cgroups()
    problems = []
    mounts = _cgroup_mounts()
    for fstype, mount, options in sorted(mounts, key=lambda m: m[0] != "cgroup2"):
        if fstype == "cgroup2":
            parent = mount / own.get("", "/").lstrip("/")
            if "pids" not in _read(mount / "cgroup.controllers").split():
                problems.append(f"cgroup2 at {mount} has no pids controller")
                continue
            version = 2
        elif "pids" in options.split(","):
            parent, version = mount / own.get("pids", "/").lstrip("/"), 1
        else:
            continue
        why = _usable(parent)
        if why is None:
            return _CgroupParent(version, parent), f"pids cgroup v{version} under {parent}"
        problems.append(f"cgroup v{version}: {why}")
    if not mounts:
        problems.append("no cgroup file system is mounted")
    return None, "; ".join(problems) or "no pids cgroup controller is mounted"


_cgroup_names = itertools.count(1)


def _open_cgroup(parent: _CgroupParent, max_processes: int) -> Path:
    """A fresh cgroup per command: a used one still counts its exited processes for a while."""
    path = parent.path / f"steward-{os.getpid()}-{next(_cgroup_names)}"
    path.mkdir()
    # The outer bwrap and the namespace's init are in the cgroup too.
    (path / "pids.max").write_text(f"{max_processes + 2}\n")
    return path


def _close_cgroup(path: Path) -> None:
    """Kill whatever is left in the cgroup (setsid'd children included), then remove it."""
    _drain(path)
    with contextlib.suppress(OSError):
        path.rmdir()


def _drain(path: Path) -> bool:
    """SIGKILL every process in the cgroup until it is empty (bounded); True when it is."""
    deadline = time.monotonic() + _DRAIN_S
    attempt = 0
    while time.monotonic() < deadline:
        pids = [int(p) for p in _read(path / "cgroup.procs").split()]
        if not pids:
            return True
        if (path / "cgroup.kill").exists():
            with contextlib.suppress(OSError):
                (path / "cgroup.kill").write_text("1\n")
        else:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
        # Usually the namespace's last process is just exiting: look again soon, then less often.
        time.sleep(min(_POLL_S, 0.001 * 2**attempt))
        attempt += 1
    return False


def _remove_stale_cgroups(parent: _CgroupParent) -> None:
    """Remove empty per-command cgroups left by Steward processes that died."""
    with contextlib.suppress(OSError):
        for child in parent.path.glob("steward-*"):
            owner = child.name.split("-")[1]
            if owner.isdigit() and not Path(f"/proc/{owner}").exists():
                with contextlib.suppress(OSError):
                    child.rmdir()


# --- the sandbox ----------------------------------------------------------------------------


@dataclass(slots=True)
class _Host:
    """What the probe learned about this machine (found once per sandbox)."""

    bwrap: str
    env: str
    prlimit: str | None
    cgroup: _CgroupParent | None
    nproc_by_rlimit: bool
    features: frozenset[str]


@dataclass(slots=True)
class _Prepared:
    """One command's mounts, and what to undo after it."""

    argv: list[str]
    placeholders: list[Path]
    cgroup: Path | None
    #: What was protected before the command (None when the workspace was read-only).
    protection: Protection | None = None


class BubblewrapSandbox:
    """Runs commands in bubblewrap; see the module docstring for what the sandbox holds."""

    def __init__(self, settings: SandboxSettings | None = None, *, egress: EgressProxy | None = None) -> None:
        """``egress``: the proxy to use (tests give one whose resolver they control); by default
        one over ``settings.allowed_domains``, made when a command is first granted the network."""
        self.settings = settings or SandboxSettings()
        self._lock = threading.Lock()
        self._status: SandboxStatus | None = None
        self._host: _Host | None = None
        self._proxy: EgressProxy | None = egress

    # --- probe ------------------------------------------------------------------------------

    def probe(self) -> SandboxStatus:
        """Start one real sandbox (once; the result is kept) and report what works here.

        The outcome is also remembered for this machine, for :meth:`checked` in later processes."""
        with self._lock:
            if self._status is None:
                self._status = self._probe()
                bwrap = self._bwrap()
                if bwrap is not None:
                    from steward.safety.sandbox import selfcheck as sandbox_check

                    status = self._status
                    sandbox_check.remember(bwrap, ok=status.ok, reason=status.reason, fix=status.fix)
            return self._status

    def checked(self) -> SandboxStatus:
        """Whether the sandbox works here, as cheaply as can be trusted: this process's probe if
        there was one, else the outcome remembered for this machine while nothing it depends on
        has changed (:mod:`steward.safety.sandbox.selfcheck`), else a probe.

        For what to tell the user at start: :meth:`command` probes before the first command
        whatever was remembered. A remembered status has no details; :meth:`probe` has them."""
        bwrap = self._bwrap()
        if self._status is not None or not self.settings.enabled or bwrap is None:
            return self.probe()
        from steward.safety.sandbox import selfcheck as sandbox_check

        remembered = sandbox_check.recall(bwrap)
        if remembered is None:
            return self.probe()
        ok, reason, fix = remembered
        return SandboxStatus(ok, reason, fix)

    def _bwrap(self) -> str | None:
        """The bwrap executable this sandbox runs, if there is one."""
        bwrap = self.settings.bwrap or shutil.which("bwrap")
        return bwrap if bwrap is not None and os.access(bwrap, os.X_OK) else None

    def _probe(self) -> SandboxStatus:
        if not self.settings.enabled:
            return SandboxStatus(False, "turned off by the configuration (--no-sandbox)", "")
        bwrap = self._bwrap()
        if bwrap is None:
            where = self.settings.bwrap or "bwrap"
            return SandboxStatus(False, f"bubblewrap is not installed ({where} not found)", INSTALL_FIX)
        host, details, warnings = _inspect_host(bwrap, self.settings)
        self._host = host
        started = _try_start(self, host)
        if started is not None:
            fix = USERNS_FIX if "namespace" in started or "permitted" in started else INSTALL_FIX
            return SandboxStatus(
                False, f"bubblewrap cannot start a sandbox here: {started}", fix, details, warnings
            )
        return SandboxStatus(True, f"bubblewrap works ({details['bwrap']})", "", details, warnings)

    # --- command ----------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def command(
        self,
        argv: Sequence[str],
        *,
        workspace: Path,
        network: bool,
        writable: bool,
        env: Mapping[str, str] | None = None,
        on_connection: Callable[[EgressConnection], None] | None = None,
        binds: Sequence[tuple[Path, str]] = (),
    ) -> AsyncIterator[list[str]]:
        """Yield the argv that runs ``argv`` in a sandbox over ``workspace``; undo it afterwards.

        ``env``: the command's whole environment (an MCP server's own), instead of the allowlist
        taken from ours. ``network``: the command may reach the allowed domains through the
        egress proxy (never anything else); ``on_connection`` hears of each connection.
        ``binds``: host paths shown read-only at the given places under /run/steward (e.g. the
        private directory of ``execute_code``'s channel to the host)."""
        for _host_path, inside in binds:
            if not inside.startswith("/run/steward/") or ".." in inside:
                raise ValueError(f"binds are shown under /run/steward/ only (got {inside!r})")
        if not self.settings.enabled:  # the user's explicit choice (--no-sandbox)
            yield list(argv)
            return
        status = self._status if self._status is not None else await asyncio.to_thread(self.probe)
        if not status.ok or self._host is None:
            raise ToolError(
                f"Commands cannot run: the sandbox does not work here ({status.reason}). {status.fix}."
            )
        async with contextlib.AsyncExitStack() as stack:
            socket = None
            if network or self.settings.network:
                socket = await stack.enter_async_context(self._egress(on_connection))
            preparing = asyncio.ensure_future(
                asyncio.to_thread(
                    self._prepare, self._host, list(argv), workspace, socket, writable, env, binds
                )  # binds: steward-code
            )
            try:
                prepared = await asyncio.shield(preparing)
            except asyncio.CancelledError:
                # Cancelled while setting up: the set-up still finishes in its thread; undo it then.
                await asyncio.shield(_undo_when_prepared(preparing, workspace))
                raise
            try:
                yield prepared.argv
            finally:
                # Shielded: a second cancellation must not leave placeholders or a cgroup behind.
                await asyncio.shield(asyncio.to_thread(_finish, prepared, workspace))

    @contextlib.asynccontextmanager
    async def _egress(self, on_connection: Callable[[EgressConnection], None] | None) -> AsyncIterator[Path]:
        """A listener of the egress proxy for one command, on a socket in a private directory."""
        from steward.safety.sandbox.egress import EgressProxy

        if self._proxy is None:
            self._proxy = EgressProxy(self.settings.allowed_domains)
        directory = Path(tempfile.mkdtemp(prefix="steward-egress-"))
        try:
            socket = directory / "egress.sock"
            async with self._proxy.listen(socket, on_connection or (lambda _connection: None)):
                yield socket
        finally:
            shutil.rmtree(directory, ignore_errors=True)

    # --- building the bwrap command ---------------------------------------------------------

    def _prepare(
        self,
        host: _Host,
        argv: list[str],
        workspace: Path,
        egress: Path | None,
        writable: bool,
        env: Mapping[str, str] | None = None,
        binds: Sequence[tuple[Path, str]] = (),
    ) -> _Prepared:
        root = workspace.resolve(strict=False)
        if root == Path("/") or not root.is_dir():
            raise ToolError(f"The workspace {str(root)!r} is not a directory that can be sandboxed.")
        scratch = _SCRATCH.files(self.settings.uid, self.settings.gid)
        _PLACEHOLDERS.sweep(root)  # before looking: a stale empty .git would pass for a repository
        protection, placeholders = _protect(root) if writable else (None, [])
        cgroup = None
        try:
            if host.cgroup is not None and self.settings.max_processes is not None:
                cgroup = _open_cgroup(host.cgroup, self.settings.max_processes)
            secrets = scanner_for(root, self.settings.secret_files).scan().secrets
            args = self._bwrap_args(host, scratch, root, writable, protection)
            args[-2:-2] = _mask_args(root, secrets, self.settings.masked_programs, scratch)
            args[-2:-2] = _git_exclude_args(scratch, root, placeholders)
            for source, inside in binds:  # after everything else: nothing can cover them
                args[-2:-2] = ["--ro-bind", str(source), inside]
            if egress is not None:
                args[-2:-2] = _egress_args(egress)
                argv = _through_forwarder(argv)
            command = [*args, "--", *self._limits(host), *argv]
        except BaseException:
            _PLACEHOLDERS.release(placeholders)
            if cgroup is not None:
                _close_cgroup(cgroup)
            raise
        if cgroup is not None:
            # Join the cgroup before bwrap exists, so every process of the command is counted.
            command = ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', str(cgroup / "cgroup.procs"), *command]
        # bwrap itself gets only the allowlisted environment (not --clearenv/--setenv): the namespace's
        # init is a bwrap process whose /proc/1/environ the command can read, and values given as
        # arguments would show in the host's process list.
        chosen = _environment(self.settings) if env is None else {**env, **_sandboxed_basics()}
        if egress is not None:
            from steward.safety.sandbox.egress import SANDBOX_PROXY_PORT, proxy_env

            chosen.update(proxy_env(SANDBOX_PROXY_PORT))
        environment = [f"{name}={value}" for name, value in chosen.items()]
        command = [host.env, "-i", *environment, *command]
        return _Prepared(command, placeholders, cgroup, protection if writable else None)

    def _bwrap_args(
        self,
        host: _Host,
        scratch: _Scratch,
        root: Path,
        writable: bool,
        protection: Protection | None,
    ) -> list[str]:
        settings = self.settings
        size = ["--size", str(settings.tmpfs_mb * 1024 * 1024)] if "size" in host.features else []
        # Every namespace but the cgroup one: unsharing that costs ~7 ms in a child cgroup, and
        # with /sys not mounted it would only hide the cgroup's name.
        # The network namespace is always a new one (loopback only): the outside is reached, when
        # granted, only through the egress proxy's socket; never the host's loopback or its
        # abstract sockets (those belong to a network namespace).
        args = [
            host.bwrap,
            "--unshare-user",
            "--unshare-ipc",
            "--unshare-pid",
            "--unshare-uts",
            "--unshare-net",
        ]
        args += ["--die-with-parent", "--new-session"]
        if "disable-userns" in host.features:
            args.append("--disable-userns")
        args += ["--uid", str(settings.uid), "--gid", str(settings.gid), "--cap-drop", "ALL"]
        args += _system_args(scratch)
        args += ["--proc", "/proc", "--dev", "/dev"]
        for private in _PRIVATE_DIRS:
            args += [*size, "--tmpfs", private]
        pythons = _python_roots()
        # A Python whose prefix holds the workspace is shown first, under it; every other one
        # is bound after the workspace, so a venv inside the workspace stays read-only too.
        for path in [p for p in pythons if root.is_relative_to(p)]:
            args += ["--ro-bind", str(path), str(path)]
        for path in settings.readable:
            args += ["--ro-bind-try", str(path), str(path)]
        for path in settings.writable:
            args += ["--bind-try", str(path), str(path)]
        args += ["--ro-bind" if not writable else "--bind", str(root), str(root)]
        if protection is not None:
            args += _protection_args(protection, scratch)
        args += _credential_args(root, scratch)
        for path in settings.hidden:
            real = path.resolve(strict=False)
            if real.is_dir() and real.is_relative_to(root):
                args += ["--tmpfs", str(real)]  # checkpoints out of reach, even in the workspace
        args += _sealed_args(root, settings.writable, [p for p in pythons if not root.is_relative_to(p)])
        args += ["--chdir", str(root)]
        # Last: nothing may be created at the sandbox's root from inside.
        return [*args, "--remount-ro", "/"]

    def _limits(self, host: _Host) -> list[str]:
        settings = self.settings
        if host.prlimit is None:
            return []
        limits = []
        if settings.cpu_s is not None:
            # SIGXCPU at the soft limit, SIGKILL a second later if it is ignored.
            limits.append(f"--cpu={settings.cpu_s}:{settings.cpu_s + 1}")
        if settings.memory_mb is not None:
            limits.append(f"--as={settings.memory_mb * 1024 * 1024}")
        if settings.file_size_mb is not None:
            limits.append(f"--fsize={settings.file_size_mb * 1024 * 1024}")
        if settings.max_processes is not None and host.nproc_by_rlimit:
            limits.append(f"--nproc={settings.max_processes}")
        return [host.prlimit, *limits, "--"] if limits else []


_PROTECT_ATTEMPTS = 3


def _protect(root: Path) -> tuple[Protection, list[Path]]:
    """The workspace's protected paths and the placeholders claimed for them. Another worker
    may remove its placeholder between the scan and the claim; the scan is then stale (its
    mount would name a source that is gone: bwrap's "Can't find source path"), so it is done
    again, a bounded number of times (after the last, bwrap makes the missing mount points)."""
    for _retry in range(_PROTECT_ATTEMPTS - 1):
        protection, claimed = _scan_and_claim(root)
        if not claimed.vanished:
            return protection, claimed.paths
        _PLACEHOLDERS.release(claimed.paths)
    protection, claimed = _scan_and_claim(root)
    return protection, claimed.paths


def _scan_and_claim(root: Path) -> tuple[Protection, Claimed]:
    protection = find_protected(root, home_like=_is_home_like(root))
    _create_harmless(protection)
    claimed = _PLACEHOLDERS.acquire(
        protection.missing_dirs,
        protection.missing_files,
        protection.existing,
        root,
        commondirs=protection.missing_commondirs,
    )
    return protection, claimed


async def _undo_when_prepared(preparing: asyncio.Future[_Prepared], workspace: Path) -> None:
    with contextlib.suppress(Exception):
        await asyncio.to_thread(_finish, await preparing, workspace)


def _finish(prepared: _Prepared, workspace: Path) -> None:
    """Undo one command's set-up: its cgroup and its placeholders.

    What the command changed is judged by the checkpoint comparison that follows every call
    that can change files (``steward.safety.checkpoints.around_calls``), not here."""
    del workspace
    if prepared.cgroup is not None:
        _close_cgroup(prepared.cgroup)
    _PLACEHOLDERS.release(prepared.placeholders)


# --- pieces of the bwrap command ------------------------------------------------------------


def _system_args(scratch: _Scratch) -> list[str]:
    args = ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = Path("/", name)
        if path.is_symlink():
            args += ["--symlink", str(path.readlink()), str(path)]
        elif path.is_dir():
            args += ["--ro-bind", str(path), str(path)]
    # One mount for /etc (a mount per entry costs ~0.2 ms each). resolv.conf leads nowhere:
    # names are resolved by the egress proxy, on the host, after the domain check.
    args += ["--ro-bind", str(scratch.etc), "/etc"]
    return args


_EGRESS_MOUNT = "/run/steward/egress.sock"
_FORWARDER_MOUNT = "/run/steward/forward.py"


def _egress_args(socket: Path) -> list[str]:
    """The proxy's socket and the forwarder script (it may live outside what the sandbox sees)."""
    from steward.safety.sandbox.egress import FORWARDER_SCRIPT

    return ["--ro-bind", str(socket), _EGRESS_MOUNT, "--ro-bind", str(FORWARDER_SCRIPT), _FORWARDER_MOUNT]


def _through_forwarder(argv: list[str]) -> list[str]:
    """``argv`` preceded by the forwarder (127.0.0.1:PORT inside -> the proxy's socket): it
    binds, then backgrounds itself, so the command starts with the port already open."""
    import shlex

    from steward.safety.sandbox.egress import forwarder_argv

    forwarder = shlex.join(forwarder_argv(_EGRESS_MOUNT, script=Path(_FORWARDER_MOUNT)))
    return ["/bin/sh", "-c", f'{forwarder} && exec "$@"', "sh", *argv]


@dataclass(slots=True, frozen=True)
class _Scratch:
    """Host-side files the sandboxes mount: placeholder sources and the copy of /etc."""

    root: Path
    etc: Path

    @property
    def empty_dir(self) -> Path:
        return self.root / "empty-dir"

    @property
    def empty_file(self) -> Path:
        return self.root / "empty-file"

    def file(self, name: str, content: str) -> Path:
        """A small read-only file of the scratch directory with this content (made once; a new
        name is used whenever the content differs, so a file a running command has mounted is
        never changed under it)."""
        import hashlib

        digest = hashlib.sha256(content.encode()).hexdigest()[:12]
        path = self.root / f"{name}-{digest}"
        if not path.exists():
            from steward.atomic import write_atomic

            # Jobs of one process may set up their first sandbox together: a name of its own each.
            write_atomic(path, content)
        return path


class _ScratchFiles:
    """The scratch files, made once per process (copying /etc takes from 20 to a few hundred ms
    here), recopied when the host's /etc changes, removed at exit."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._root: Path | None = None
        self._etc: dict[tuple[int, int], tuple[Path, tuple[tuple[str, int, int], ...]]] = {}
        self._copies = itertools.count()

    def files(self, uid: int, gid: int) -> _Scratch:
        signature = _etc_signature()
        with self._lock:
            if self._root is None:
                self._root = Path(tempfile.mkdtemp(prefix="steward-sandbox-"))
                atexit.register(shutil.rmtree, self._root, ignore_errors=True)
                _write_placeholder_sources(self._root)
            known = self._etc.get((uid, gid))
            if known is None or known[1] != signature:
                # An older copy stays until exit: a running command may still have it mounted.
                etc = self._root / f"etc-{next(self._copies)}"
                _copy_etc(etc, uid, gid)
                known = self._etc[(uid, gid)] = (etc, signature)
            return _Scratch(self._root, known[0])


_SCRATCH = _ScratchFiles()


def _write_placeholder_sources(root: Path) -> None:
    (root / "empty-dir").mkdir(mode=0o555)
    (root / "empty-file").touch(mode=0o444)


def _etc_signature() -> tuple[tuple[str, int, int], ...]:
    """What tells that the host's /etc entries the sandbox copies have changed."""
    marks = []
    for name in (*_ETC_ENTRIES, *_ETC_WATCHED):
        try:
            info = Path("/etc", name).stat()
        except OSError:
            continue
        marks.append((name, info.st_mtime_ns, info.st_size))
    return tuple(marks)


def _skip_private(directory: str, names: list[str]) -> list[str]:
    """Key directories (``/etc/ssl/private``) and what cannot be read stay behind."""
    base = Path(directory)
    return [n for n in names if n == "private" or not os.access(base / n, os.R_OK, follow_symlinks=False)]


def _copy_etc(target: Path, uid: int, gid: int) -> None:
    """A copy of the allowlisted entries of the host's /etc, plus passwd and group for the sandbox."""
    target.mkdir()
    for name in _ETC_ENTRIES:
        source = Path("/etc", name)
        real = source.resolve()
        try:
            if source.is_symlink() and real.is_relative_to("/usr"):
                (target / name).symlink_to(real)  # e.g. localtime -> /usr/share/zoneinfo/...
            elif real.is_dir():
                shutil.copytree(real, target / name, symlinks=True, ignore=_skip_private)
            elif real.is_file() and os.access(real, os.R_OK):
                shutil.copy2(real, target / name)
        except OSError:
            continue  # a partial copy of a directory is kept; a missing entry is just absent
    (target / "passwd").write_text(
        "root:x:0:0:root:/root:/usr/sbin/nologin\n"
        f"{SANDBOX_USER}:x:{uid}:{gid}:Steward sandbox:{SANDBOX_HOME}:/bin/bash\n"
        "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
    )
    (target / "group").write_text(f"root:x:0:\n{SANDBOX_USER}:x:{gid}:\nnogroup:x:65534:\n")
    (target / "mtab").symlink_to("/proc/self/mounts")
    (target / "resolv.conf").symlink_to(_RESOLV_MOUNT)


def _create_harmless(protection: Protection) -> None:
    """Create the protected directories that are harmless to have (``.git/hooks``, ``.steward``),
    so they are mounted read-only as they are; one that cannot be made gets a placeholder. Made
    beneath the workspace's fd: a folder on the way swapped for a link leads nowhere."""
    made = make_dirs(protection.root, protection.to_create)  # .steward gets its .gitignore
    for directory, there in zip(protection.to_create, made, strict=True):
        (protection.existing if there else protection.missing_dirs).append(directory)
    protection.to_create.clear()


def _protection_args(protection: Protection, scratch: _Scratch) -> list[str]:
    """Pin git directories (writable, but a mount point cannot be renamed), then mount every
    protected path read-only, parents before children."""
    read_only = sorted(
        [*protection.existing, *protection.missing_dirs, *protection.missing_files],
        key=lambda p: len(p.parts),
    )
    missing_dirs = set(protection.missing_dirs)
    args: list[str] = []
    for gitdir in sorted(protection.pinned, key=lambda p: len(p.parts)):
        if not any(gitdir.is_relative_to(p) for p in read_only):
            args += ["--bind", str(gitdir), str(gitdir)]
    for path in read_only:
        if os.path.lexists(path):
            source = path
        else:
            source = scratch.empty_dir if path in missing_dirs else scratch.empty_file
        args += ["--ro-bind", str(source), str(path)]
    return args


def _sealed_args(root: Path, writable: Sequence[Path], pythons: Sequence[Path]) -> list[str]:
    """The Python running Steward and the host's programs, read-only even where they lie in a
    writable place (the README's own ``.venv`` inside the workspace): a ``.pth`` file or a
    changed script there would run on the host at Steward's next start."""
    import steward

    args: list[str] = []
    for path in pythons:
        args += ["--ro-bind", str(path), str(path)]
    open_places = [root, *(w.resolve(strict=False) for w in writable)]
    # Steward's own code, when it is not in a prefix (an editable install from a checkout).
    package = Path(steward.__file__).resolve().parent
    if any(package.is_relative_to(place) for place in open_places) and not any(
        package.is_relative_to(p) for p in pythons
    ):
        args += ["--ro-bind", str(package), str(package)]
    for entry in os.environ.get("PATH", "").split(os.pathsep):
        if not entry or not Path(entry).is_absolute():
            continue
        real = Path(entry).resolve(strict=False)
        exposed = real.is_dir() and any(real.is_relative_to(place) for place in open_places)
        if exposed and not any(real.is_relative_to(p) for p in pythons):
            args += ["--ro-bind", str(real), str(real)]
    return args


def _mask_args(root: Path, secrets: Sequence[str], programs: Sequence[Path], scratch: _Scratch) -> list[str]:
    """Secret files of the workspace and programs a deny rule forbids: an empty, read-only,
    non-executable file in their place (reading gives nothing, running is refused)."""
    args: list[str] = []
    masked: set[Path] = set()
    for relative in secrets:
        # A symlinked secret is masked at its target (a link cannot be a mount point, and a
        # mount on it lands on the target); one leading out of the workspace is not visible.
        path = (root / relative).resolve(strict=False)
        if path.is_file() and path.is_relative_to(root) and path not in masked:
            masked.add(path)
            args += ["--ro-bind", str(scratch.empty_file), str(path)]
    for program in programs:
        if program.is_file():
            args += ["--ro-bind", str(scratch.empty_file), str(program)]
    return args


_GIT_CONFIG_MOUNT = "/run/steward/gitconfig"
_GIT_EXCLUDE_MOUNT = "/run/steward/gitignore"


_GIT_CONFIG = f"[core]\n\texcludesFile = {_GIT_EXCLUDE_MOUNT}\n\tcheckStat = minimal\n"
"""The sandbox's global git config. ``checkStat = minimal``: inside, the workspace's files show
other owners (the sandbox's user) than the host's git wrote into the index, and git would read
every file again to tell whether it changed (10,000 files: 0.3 s a command); it compares only
their size, mode and time of change then, as the git tools do. A repository's own config (or a
command's ``-c``) still wins; hooks are untouched (they run in the sandbox, where bash does)."""


def _git_exclude_args(scratch: _Scratch, root: Path, placeholders: Sequence[Path]) -> list[str]:
    """Git inside the sandbox ignores this command's placeholders (an empty ``steward.toml``
    must not end up in the agent's commits): a global git config (``_GIT_CONFIG``) naming an
    excludes file."""
    patterns = sorted(
        "/" + p.relative_to(root).as_posix()
        for p in placeholders
        if p.is_relative_to(root) and ".git" not in p.relative_to(root).parts
    )
    exclude = scratch.file(f"gitignore-{len(patterns)}", "".join(f"{p}\n" for p in patterns))
    config = scratch.file("gitconfig", _GIT_CONFIG)
    return ["--ro-bind", str(config), _GIT_CONFIG_MOUNT, "--ro-bind", str(exclude), _GIT_EXCLUDE_MOUNT]


def _is_home_like(root: Path) -> bool:
    homes = {Path("/root"), Path.home().resolve(strict=False)}
    return root in homes or root.parent == Path("/home")


def _credential_args(root: Path, scratch: _Scratch) -> list[str]:
    """A workspace that is or holds a home directory keeps its credentials out of sight."""
    from steward.safety.sealed import homes_within

    homes = [*([root] if _is_home_like(root) else []), *(h for h in homes_within(root) if h != root)]
    args: list[str] = []
    for home in homes:
        for name in _CREDENTIALS:
            path = home / name
            if path.is_dir() and not path.is_symlink():
                args += ["--tmpfs", str(path)]
            elif path.exists() or path.is_symlink():
                args += ["--ro-bind", str(scratch.empty_file), str(path)]
    return args


def _unsafe_to_show(path: Path) -> bool:
    """Never bind a home directory (or / itself) to make Python visible."""
    home = Path.home().resolve(strict=False)
    return path in (Path("/"), Path("/root"), Path("/home")) or path.parent == Path("/home") or home == path


def _python_roots() -> list[Path]:
    """The prefixes of the Python running Steward that the system mounts do not already show."""
    candidates = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    candidates.add(str(Path(os.path.realpath(sys.executable)).parent.parent))
    roots: list[Path] = []
    for candidate in sorted(candidates):
        path = Path(candidate).resolve(strict=False)
        if path.is_dir() and not path.is_relative_to("/usr") and not _unsafe_to_show(path):
            roots.append(path)
    # Nested prefixes are shown by their parent.
    return [p for p in roots if not any(p != q and p.is_relative_to(q) for q in roots)]


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _looks_secret(name: str) -> bool:
    upper = name.upper()
    return any(fnmatch.fnmatchcase(upper, pattern) for pattern in ENV_SECRET_PATTERNS)


def _sandboxed_basics() -> dict[str, str]:
    """What a given environment needs to be right inside: the sandbox's HOME and user."""
    return {
        "HOME": SANDBOX_HOME,
        "USER": SANDBOX_USER,
        "LOGNAME": SANDBOX_USER,
        "GIT_CONFIG_GLOBAL": _GIT_CONFIG_MOUNT,
    }


def _environment(settings: SandboxSettings) -> dict[str, str]:
    patterns = (*ENV_ALLOWED, *settings.env)
    env = {
        name: value
        for name, value in os.environ.items()
        if _ENV_NAME.fullmatch(name)
        and (
            name in settings.env
            or (not _looks_secret(name) and any(fnmatch.fnmatchcase(name, p) for p in patterns))
        )
    }
    path = env.get("PATH") or "/usr/local/bin:/usr/bin:/bin"
    python_bin = str(Path(sys.executable).parent)
    if python_bin not in path.split(":"):
        path = f"{path}:{python_bin}"  # last: `python` works, the user's PATH order still wins
    env.update(PATH=path, **_sandboxed_basics())
    # Python trusts cached bytecode whose source has the same size and the same whole second: an
    # agent's one-character fix ("a - b" -> "a + b") re-run within the second would test the old
    # code. Commands in the sandbox write no bytecode, so none can be that fresh (a user who
    # names the variable in [sandbox] env keeps their own value).
    env.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    return env


# --- probing the host -----------------------------------------------------------------------


def _inspect_host(bwrap: str, settings: SandboxSettings) -> tuple[_Host, dict[str, str], tuple[str, ...]]:
    details: dict[str, str] = {}
    warnings: list[str] = []
    version = _run_quietly([bwrap, "--version"]).strip() or "version unknown"
    help_text = _run_quietly([bwrap, "--help"])
    features = frozenset(f for f in ("disable-userns", "size") if f"--{f}" in help_text)
    details["bwrap"] = f"{bwrap}, {version}"
    prlimit = shutil.which("prlimit")
    if prlimit is not None and not Path(prlimit).resolve().is_relative_to("/usr"):
        prlimit = None  # it must be visible inside the sandbox
    root = os.geteuid() == 0
    cgroup, cgroup_note = (None, "")
    if root and settings.max_processes is not None:
        cgroup, cgroup_note = find_pids_cgroup()
        if cgroup is not None:
            _remove_stale_cgroups(cgroup)
    env = shutil.which("env") or "/usr/bin/env"
    host = _Host(bwrap, env, prlimit, cgroup, nproc_by_rlimit=not root, features=features)
    details["network"] = (
        "always a private network namespace; a call the policy grants the network reaches the allowed "
        "domains through the egress proxy, nothing else"
    )
    if prlimit is None:
        warnings.append(
            "CPU, memory, file-size and process limits are not enforced: prlimit (util-linux) was not "
            "found under /usr; install it with apt-get install util-linux"
        )
    else:
        details["cpu"] = _limit(settings.cpu_s, "s of CPU per process (RLIMIT_CPU)")
        details["memory"] = _limit(settings.memory_mb, "MB of address space per process (RLIMIT_AS)")
        details["file size"] = _limit(settings.file_size_mb, "MB per file (RLIMIT_FSIZE)")
    details["processes"], process_warning = _process_detail(settings, host, cgroup_note)
    if process_warning:
        warnings.append(process_warning)
    details["python"] = ", ".join(str(p) for p in _python_roots()) or "system Python only"
    return host, details, tuple(warnings)


def _limit(value: int | None, unit: str) -> str:
    return "no limit (configured)" if value is None else f"{value} {unit}"


def _process_detail(settings: SandboxSettings, host: _Host, cgroup_note: str) -> tuple[str, str]:
    if settings.max_processes is None:
        return "no limit (configured)", ""
    if host.cgroup is not None:
        return f"{settings.max_processes} per command, {cgroup_note}", ""
    if host.nproc_by_rlimit and host.prlimit is not None:
        return f"{settings.max_processes} per command (RLIMIT_NPROC inside the sandbox)", ""
    if host.nproc_by_rlimit:
        return "not enforced (prlimit missing)", ""
    return "not enforced", (
        "process limits cannot be enforced: Steward runs as root, the kernel does not apply "
        f"RLIMIT_NPROC to root, and no pids cgroup is usable ({cgroup_note}); run Steward as an "
        "unprivileged user, or give it a writable pids cgroup"
    )


def _run_quietly(argv: list[str]) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=_PROBE_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout + done.stderr


def _try_start(sandbox: BubblewrapSandbox, host: _Host) -> str | None:
    """Run ``true`` in a real sandbox over a scratch workspace; None if it worked, else why not."""
    with tempfile.TemporaryDirectory(prefix="steward-probe-") as workspace:
        try:
            prepared = sandbox._prepare(host, ["true"], Path(workspace), None, True)
        except (OSError, ToolError) as exc:
            return f"setting up failed: {exc}"
        try:
            done = subprocess.run(
                prepared.argv,
                cwd=workspace,
                capture_output=True,
                text=True,
                timeout=_PROBE_TIMEOUT_S,
                check=False,
                start_new_session=True,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"{type(exc).__name__}: {exc}"
        finally:
            _finish(prepared, Path(workspace))
    if done.returncode != 0:
        message = (done.stderr or done.stdout).strip().splitlines()
        return message[-1] if message else f"exit status {done.returncode}"
    return None
