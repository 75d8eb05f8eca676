"""The always-on guard: judges every proposed action before it runs.

A shell command line is parsed (:mod:`steward.safety.policy.shell_parse`) and every simple command in
it is judged — inner ``$(…)``, ``bash -c`` scripts, ``eval`` text and wrapped commands
(``sudo``/``env``/``timeout`` …) included, not just the first word. The verdict also says
whether the line touches the network and lists every command for the policy's rules.

Severities (``block`` is refused whatever the mode or policy; ``flag`` makes the policy ask):

================  ========  ===================================================================
category          severity  what
================  ========  ===================================================================
destruction       block     recursive ``rm`` of ``/``, ``~``, ``$HOME``, the workspace or any
                            directory above it, or any path outside the workspace (paths
                            strictly inside ``/tmp`` and ``/var/tmp`` excepted);
                            ``--no-preserve-root``; ``find <outside> -delete``/``-exec rm``;
                            ``chmod``/``chown``/``chgrp -R`` outside; ``shutil.rmtree`` or
                            ``os.system`` of the above in ``python -c``; ``rmtree``/``rm_rf``,
                            ``system()``, backticks, ``subprocess.run([…])`` in inline code and
                            ``awk`` programs; ``xargs rm -r`` fed by a producer naming such a
                            path (``ls / | xargs rm -rf``); ``mv`` of such a path (a move
                            away deletes it); ``rsync --delete`` into one; ``truncate`` of, or
                            a ``>`` redirect onto, an absolute path outside (not ``/dev/…``)
destruction       flag      non-recursive ``rm`` outside the workspace; recursive ``rm`` of a
                            path known only at run time (``rm -rf "$DIR"``), or of a relative
                            path after ``cd -``/``cd "$X"``; ``xargs rm -r`` fed by unknown
                            input (anything but ``find``/``ls``/``echo``/``git`` … naming
                            workspace paths)
disk              block     ``dd of=/dev/…``, ``mkfs*``, ``fdisk``/``parted``/``wipefs`` …,
                            ``shred /dev/…``, writing to a block device (redirect, ``cp``,
                            ``tee``)
remote_code       block     a downloader (``curl``, ``wget`` …) or decoder (``base64``, ``xxd``,
                            ``openssl``) piped into an interpreter reading its program from
                            stdin; an interpreter, ``source`` or ``eval`` given ``<(curl …)`` or
                            ``$(curl …)``
privilege         block     ``sudo``, ``su``, ``doas``, ``pkexec``; setuid/setgid ``chmod``;
                            ``visudo`` or writing ``/etc/sudoers*``, ``/etc/passwd``, ``/etc/shadow``;
                            ``setcap``
persistence       block     ``crontab`` (except ``-l``), ``at``, ``batch``; writing (also
                            ``perl -pi``) or deleting ``/etc/cron*``, systemd units, launchd
                            agents, shell rc files or ``~/.ssh/authorized_keys``;
                            ``systemctl enable``
exfiltration      block     a command line that reads a credential file (``~/.ssh``, cloud
                            credentials, ``~/.netrc``, ``.env`` …) and uses the network
reverse_shell     block     ``/dev/tcp`` redirects of a shell, ``nc -e``, ``socat exec:``,
                            ``mkfifo`` + ``nc``, a shell fed by ``nc``, socket one-liners in
                            ``python -c``/``perl -e``/``php -r``/``ruby -e``/``node -e``
obfuscation       block     a command name that is quoted, escaped or built from expansions
                            (``\\rm``, ``'r'm``, ``$CMD``, ``$(echo rm)``)
eval_dynamic      flag      ``eval`` (or ``bash -c``) of text built at run time, e.g.
                            ``eval "$(ssh-agent -s)"``
credentials       flag      reading a credential file without using the network
destructive_git   flag      ``reset --hard``, forced push, ``clean -f`` with ``-d``/``-x``,
                            ``branch -D``, ``checkout .``, ``restore .``, ``stash drop|clear``,
                            ``reflog expire``, ``gc --prune=now``, ``filter-branch``
git_push          flag      any ``git push`` (also sets ``network``)
git_config        flag      writing ``.git/hooks/*`` or ``.git/config`` (also via
                            ``write_file``/``edit_file``; those tools writing a shell rc file
                            are flagged ``persistence`` rather than blocked); ``git config``
                            or ``git -c`` setting a key that runs a program (``core.hooksPath``,
                            ``core.fsmonitor``, ``core.sshCommand``, ``core.pager``,
                            ``filter.*.clean``, ``alias.*='!…'`` …)
unparsable        flag      the command line could not be read completely (syntax error, over
                            100,000 characters, nesting deeper than 8 levels)
host_code         flag      ``write_file``/``edit_file`` of a file the host runs later, by what it
                            is (``steward.safety.sealed``: a ``.pth`` or ``sitecustomize.py``,
                            ``.vscode/tasks.json``, ``.envrc``, a home's dotfiles ...); never
                            approved unattended (autonomous mode refuses it)
================  ========  ===================================================================

``network`` is set when any command talks to the network: downloaders, ``ssh``/``scp``/``nc``,
remote ``rsync``, ``git clone|fetch|pull|push|ls-remote``, package installs (pip, uv, poetry,
npm/yarn/pnpm, apt, gem, cargo, go, docker pull/run …), ``/dev/tcp`` redirects, and inline
Python importing ``urllib``/``requests``/``socket``. Network use alone is no finding.

Arguments of the wrong type (a ``command`` given as a list of words) are not judged at all: the
verdict's ``invalid`` names the fix and the call goes back to the model as invalid arguments
(reading ``['rm', '-rf', '/']`` as a command line would only find a quoted command name).

Besides findings, the verdict carries what the policy's rules are matched against: every
command (the shell commands inline code hands to ``system()``/``subprocess`` included); the
porcelain spelling of git plumbing (``equivalents``: ``send-pack``/``http-push`` → ``push``,
``update-ref -d`` → ``branch -D``, ``read-tree -u --reset`` → ``reset --hard``,
``checkout-index`` → ``checkout``, ``commit-tree`` → ``commit``, ``update-index
--force-remove`` → ``rm`` …, flagged as the porcelain command would be); and the ``opaque``
commands, part of which is decided only at run time, for the policy to fail closed on:

* a word the shell expands (``git $SUB``, ``git p*``, ``git p{u,}sh``): what precedes it is known;
* the words ``xargs``, ``parallel`` and ``find -exec`` put in, and those an ``alias`` or a
  ``hash -p`` name is used with;
* a program unknown altogether: ``eval "$X"``, ``bash -c "$S"``, ``bash <(…)``, ``source
  <(…)``, ``parallel`` reading command lines, a computed ``trap`` body, inline code calling
  ``system()``/``subprocess``/``exec`` with an argument that is not written out, a shell reading
  what another program pipes into it (``python gen.py | sh``; a heredoc through ``cat`` or
  ``/dev/stdin`` is read as a script), a script the same line writes and then runs;
* git: setting an alias (``-c alias.*``, ``--config-env``, ``git config alias.* …``,
  ``include.path``, ``git config --edit``), or a subcommand that is none of git's own commands
  (git ignores aliases named like its commands, so any other name may be an alias);
* plumbing, as its porcelain command with options the rules cannot read.

Trade-offs, chosen on purpose:

* ``cd`` is followed through the line: ``cd / && rm -rf *`` deletes ``/*``. Subshell scoping is
  ignored (``(cd /); rm -rf *`` is judged as if the ``cd`` held), which errs towards blocking.
* A credential file plus any network use in the same line counts as exfiltration even when the
  two are unrelated (``cat .env; git push``). ``source .env`` and ``--env-file .env`` load
  configuration and are not treated as reads; ``ssh -i ~/.ssh/key`` uses a key, not sends it.
* ``"$VENV/bin/python"`` is judged as ``python``: a name whose last path part is literal is not
  obfuscated. A whole-expansion name (``$EDITOR file``) is blocked with a message to spell it out.
* A command built at run time inside ``eval``/``bash -c`` (``eval "$(ssh-agent -s)"``) is
  flagged, not blocked as obfuscation: the idiom is common and the text is shown to the human.
* ``echo '…' | sh`` and heredocs fed to a shell or ``python -`` are read as scripts; shell
  commands inside inline code (``os.system('…')``, ``system(q{…})``) are judged too.
* Recursive deletion of ``"$DIR"`` is only flagged: the path may be fine, but an empty variable
  turns ``rm -rf "$DIR"/`` into ``rm -rf /``. ``~user`` is taken to be ``/home/user``.
* The verdict keeps one finding per category and severity, so the reason stays short.
* ``alias NAME='…'`` bodies, ``trap '…' SIG`` bodies and ``hash -p PATH NAME`` targets are
  judged as commands wherever they appear, whether or not they ever run; a harmless one costs
  nothing. A ``cd`` in them does not move the rest of the line. A command name computed at run
  time in a trap body is flagged like one in ``eval``.
* ``mv`` out of the workspace is judged like ``rm -r`` (``/tmp``/``/var/tmp`` contents excepted),
  so moving ``~/Downloads/x`` in is refused: copy it instead.
* Paths are compared as text after ``~``/``$HOME``/``cd`` resolution; symlinks are not followed
  (the guard does no I/O). The OS sandbox, not this module, is the security boundary.
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from steward.safety.policy.shell_parse import ParsedShell, SimpleCommand, basename, normalized, parse_shell
from steward.safety.protected import RC_FILES
from steward.safety.sealed import HOME_REASON, reason_by_name
from steward.safety.types import Finding, GuardVerdict, Opaque, Severity

__all__ = ["Guard"]

#: Deepest re-check of shell commands found in inline code (``python -c "os.system('…')"``).
_MAX_RECHECK = 2

_DOWNLOADERS = frozenset({"curl", "wget", "fetch", "aria2c", "http", "https", "xh", "lwp-download"})
_DECODERS = frozenset({"base64", "base32", "xxd", "openssl", "uudecode", "gunzip", "zcat", "rev"})
_SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh", "ash", "mksh", "fish", "csh", "tcsh"})
_INTERPRETERS = _SHELLS | {"python", "python2", "python3", "perl", "ruby", "node", "php", "lua", "pwsh"}
_NETCATS = frozenset({"nc", "ncat", "netcat", "nc.traditional", "nc.openbsd", "telnet"})
_NETWORK_PROGRAMS = _DOWNLOADERS | _NETCATS | {"ssh", "scp", "sftp", "ftp", "lftp", "socat", "mosh", "ping"}
_NETWORK_CLIENTS = frozenset({"gh", "aws", "gcloud", "az", "kubectl", "npx", "bunx", "uvx"})
#: Interpreters and the options that take inline code.
_CODE_FLAGS = {"perl": ("-e", "-E"), "ruby": ("-e",), "node": ("-e", "--eval"), "php": ("-r",)}
_PRIVILEGE_PROGRAMS = frozenset({"sudo", "su", "doas", "pkexec", "visudo", "sudoedit"})
_DISK_PROGRAMS = frozenset(
    {"fdisk", "sfdisk", "cfdisk", "gdisk", "sgdisk", "parted", "wipefs", "mkswap", "mke2fs", "blkdiscard"}
)
_BLOCK_DEVICE = re.compile(r"/dev/(sd|hd|vd|xvd|nvme|mmcblk|disk|md|dm-|mapper/|loop)")
_WRITE_OPERATORS = frozenset({">", ">>", ">|", "&>", "&>>", "<>", ">&"})
_CRED_NAMES_UNDER_HOME = (
    ".ssh",
    ".aws",
    ".config/gcloud",
    ".azure",
    ".kube/config",
    ".docker/config.json",
    ".netrc",
    ".git-credentials",
    ".npmrc",
    ".pypirc",
    ".gnupg",
)
# The shell start-up files are the ones the sandbox protects in a workspace (direnv's .envrc
# only runs where it lies, so at home it is no persistence).
_RC_NAMES_UNDER_HOME = (
    *sorted(RC_FILES - {".envrc"}),
    ".config/fish/config.fish",
    ".ssh/authorized_keys",
    ".ssh/authorized_keys2",
)
_RC_SYSTEM = ("/etc/profile", "/etc/bash.bashrc", "/etc/profile.d", "/etc/zsh", "/etc/environment")
# Named so that their contents may be deleted, never used as temporary files here.
_SCRATCH = (Path("/tmp"), Path("/var/tmp"))  # noqa: S108


def _finding(category: str, severity: Severity, message: str, cmd: SimpleCommand | None = None) -> Finding:
    return Finding(category, severity, message, normalized(cmd) if cmd is not None else "")


class Guard:
    """Judges proposed tool calls; see the module docstring for what it blocks and flags."""

    def __init__(self, *, scratch_dirs: tuple[Path, ...] = _SCRATCH) -> None:
        #: Directories whose contents (not the directories themselves) may be deleted freely.
        self.scratch_dirs = scratch_dirs

    def check(self, tool: str, arguments: Mapping[str, Any], *, workspace: Path) -> GuardVerdict:
        """Judge one tool call: ``bash`` commands are parsed; file writes are checked by path."""
        if tool == "bash":
            command = arguments.get("command", "")
            if not isinstance(command, str):
                return GuardVerdict(invalid=_not_a_string("command", command))
            return self.check_command(command, workspace=workspace)
        if tool in ("write_file", "edit_file"):
            path = arguments.get("path", "")
            if not isinstance(path, str):
                return GuardVerdict(invalid=_not_a_string("path", path))
            return GuardVerdict(findings=tuple(_file_write_findings(path, workspace)))
        return GuardVerdict()

    def check_command(self, command: str, *, workspace: Path, home: Path | None = None) -> GuardVerdict:
        """Judge one shell command line, every inner command included."""
        scope = _Scope(
            workspace=_norm(str(workspace.absolute())),
            home=_norm(str(home if home is not None else Path.home())),
            scratch=tuple(_norm(str(d)) for d in self.scratch_dirs),
        )
        parsed = parse_shell(command)
        # One finding per category and severity keeps the reason short for the model.
        findings: dict[tuple[str, str], Finding] = {}
        for finding in _judge(parsed, scope, depth=0):
            findings.setdefault((finding.category, finding.severity), finding)
        # The shell commands inline code hands to system() and friends are commands too.
        everything = parsed.commands + tuple(
            inner for cmd in parsed.commands if cmd.argv for inner in _inline_shell_commands(cmd)
        )
        computed = _runs_what_it_writes(parsed.commands, scope)
        return GuardVerdict(
            findings=tuple(findings.values()),
            network=any(_uses_network(c) for c in parsed.commands),
            commands=tuple(dict.fromkeys(normalized(c) for c in everything if c.argv)),
            opaque=tuple(dict.fromkeys([*(o for c in everything for o in _opaque(c)), *computed])),
            equivalents=tuple(dict.fromkeys(e for c in everything if c.argv for e in _equivalents(c))),
        )


# --- paths ---------------------------------------------------------------------------------


def _norm(path: str) -> str:
    normal = posixpath.normpath(path)
    return "/" + normal.lstrip("/") if normal.startswith("/") else normal


def _within(path: str, parent: str) -> bool:
    """``path`` is ``parent`` or lies below it."""
    return path == parent or path.startswith(parent.rstrip("/") + "/")


@dataclass(slots=True)
class _Scope:
    workspace: str
    home: str
    scratch: tuple[str, ...]
    #: The directory relative paths resolve against, following ``cd``; None when unknown.
    cwd: str | None = None

    def __post_init__(self) -> None:
        self.cwd = self.workspace

    def resolve(self, word: str, dynamic: bool = False) -> tuple[str, bool] | None:
        """``(absolute path, globbed)`` for a path word, or None when it is known only at run time."""
        text = _expand_home(word, self.home)
        if text is None or (dynamic and text[:1] in ("$", "`")):
            return None
        if not text.startswith("/"):
            if self.cwd is None:
                return None
            text = f"{self.cwd}/{text}"
        parts = text.split("/")
        globbed = next((i for i, part in enumerate(parts) if any(ch in part for ch in "*?[")), None)
        if globbed is not None:
            parts = parts[:globbed]
        return _norm("/".join(parts) or "/"), globbed is not None

    def danger(self, path: str, globbed: bool, *, allow_workspace: bool = False) -> str | None:
        """Why changing ``path`` recursively is destructive, or None when it is fine."""
        if _within(self.workspace, path):
            if path == self.workspace and (globbed or allow_workspace):
                return None
            return "the root directory" if path == "/" else "the whole workspace or a directory above it"
        if _within(path, self.workspace) or any(_within(path, d) and path != d for d in self.scratch):
            return None
        return "the home directory" if _within(self.home, path) else f"{path}, outside the workspace"

    def follow_cd(self, cmd: SimpleCommand) -> None:
        args = [a for a in cmd.argv[1:] if not a.startswith("-") or a == "-"]
        if not args or args[0] == "~":
            self.cwd = self.home
        elif args[0] == "-":
            self.cwd = None
        else:
            resolved = self.resolve(args[0], cmd.dynamic[cmd.argv.index(args[0])])
            self.cwd = resolved[0] if resolved is not None else None


def _expand_home(word: str, home: str) -> str | None:
    for prefix in ("~", "$HOME", "${HOME}"):
        if word == prefix or word.startswith(prefix + "/"):
            return home + word[len(prefix) :]
    if word.startswith("~"):
        # ``~user``: someone else's home; its real location is unknown without I/O.
        return "/home/" + word[1:]
    return word


# --- judging a parsed line -----------------------------------------------------------------

_Rule = Callable[[SimpleCommand, "_Scope"], Iterator[Finding]]


def _judge(parsed: ParsedShell, scope: _Scope, depth: int) -> Iterator[Finding]:
    if parsed.error is not None:
        yield _finding(
            "unparsable",
            "flag",
            f"the command line could not be read completely ({parsed.error}); simplify it or split it up",
        )
    for index, cmd in enumerate(parsed.commands):
        if not cmd.argv:
            yield from _writes(cmd, scope)
            yield from _device_redirects(cmd, scope)
            yield from _truncating_redirects(cmd, scope)
            continue
        name = basename(cmd.argv[0])
        if name in ("cd", "pushd") and cmd.origin not in ("substitution", "backticks", "alias", "trap"):
            scope.follow_cd(cmd)
        if name == "rm" and "xargs" in cmd.wrappers:
            yield from _xargs_rm(cmd, _producers(parsed.commands[:index], cmd), scope)
        for rule in (*_NAMED_RULES.get(name, ()), *_GENERAL_RULES):
            yield from rule(cmd, scope)
        if cmd.origin == "python_c":
            yield from _python_code(cmd, scope)
        elif name in _CODE_FLAGS:
            yield from _inline_rmtree(cmd, scope)
        if depth < _MAX_RECHECK:
            yield from _inline_shell_calls(cmd, scope, depth)
    yield from _line_rules(parsed.commands, scope)


def _line_rules(commands: tuple[SimpleCommand, ...], scope: _Scope) -> Iterator[Finding]:
    names = {basename(c.argv[0]) for c in commands if c.argv}
    reads = [c for c in commands if c.argv and _reads_credentials(c, scope)]
    if reads and any(_uses_network(c) for c in commands):
        yield _finding(
            "exfiltration",
            "block",
            "this sends a credential file over the network; never transmit keys, tokens or .env files",
            reads[0],
        )
    else:
        for cmd in reads:
            yield _finding(
                "credentials",
                "flag",
                "this reads a credential file; ask the user before touching secrets",
                cmd,
            )
    if "mkfifo" in names and names & (_NETCATS | {"socat", "openssl"}):
        yield _finding(
            "reverse_shell",
            "block",
            "a named pipe wired to a network connection is a reverse shell; this is not allowed",
        )


# --- rules by command name -----------------------------------------------------------------


def _split_options(argv: tuple[str, ...]) -> tuple[list[str], list[int]]:
    """Options and the indices of operands (everything after ``--`` is an operand)."""
    options: list[str] = []
    operands: list[int] = []
    done = False
    for i, arg in enumerate(argv[1:], start=1):
        if not done and arg == "--":
            done = True
        elif not done and arg.startswith("-") and arg != "-":
            options.append(arg)
        else:
            operands.append(i)
    return options, operands


def _has_short(options: list[str], letters: str) -> bool:
    return any(o[1:2] != "-" and any(ch in o[1:] for ch in letters) for o in options)


#: Producers whose output is made of the paths they are given (or paths below them).
_LISTERS = frozenset({"find", "fd", "fdfind", "ls", "echo", "printf", "git", "grep", "rg"})


def _producers(earlier: tuple[SimpleCommand, ...], cmd: SimpleCommand) -> list[SimpleCommand]:
    """The commands earlier in ``cmd``'s pipeline (the wrapping ``xargs`` excluded)."""
    found: list[SimpleCommand] = []
    for prev in reversed(earlier):
        if not prev.argv or prev.origin in ("substitution", "backticks", "process_substitution"):
            continue
        if len(prev.pipe_from) < len(cmd.pipe_from) and prev.argv[0] in cmd.pipe_from:
            found.append(prev)
            if not prev.pipe_from:
                break
    return found


def _reads_input(cmd: SimpleCommand) -> bool:
    return any(op.startswith("<") for op, _ in cmd.redirects)


def _xargs_rm(cmd: SimpleCommand, producers: list[SimpleCommand], scope: _Scope) -> Iterator[Finding]:
    options, _ = _split_options(cmd.argv)
    if not ("--recursive" in options or _has_short(options, "rR")):
        return
    for prev in producers:
        _, operands = _split_options(prev.argv)
        for i in operands:
            resolved = scope.resolve(prev.argv[i], prev.dynamic[i])
            # The producer lists what is in or below the path it names.
            reason = scope.danger(resolved[0], True) if resolved is not None else None
            if reason is not None:
                yield _finding(
                    "destruction",
                    "block",
                    f"xargs would delete {reason}; only change paths inside the workspace",
                    cmd,
                )
                return
    known = producers and all(
        basename(p.argv[0]) in _LISTERS and not any(p.dynamic) and not _reads_input(p) for p in producers
    )
    if not known:
        yield _finding(
            "destruction",
            "flag",
            "xargs feeds rm -r paths known only at run time; list them and delete them explicitly",
            cmd,
        )


def _rm(cmd: SimpleCommand, scope: _Scope) -> Iterator[Finding]:
    options, operands = _split_options(cmd.argv)
    recursive = "--recursive" in options or _has_short(options, "rR")
    if "--no-preserve-root" in options:
        yield _finding(
            "destruction", "block", "--no-preserve-root deletes the whole system; never use it", cmd
        )
    for i in operands:
        yield from _judge_target(cmd, i, scope, recursive=recursive, verb="delete")
        resolved = scope.resolve(cmd.argv[i], cmd.dynamic[i])
        judged = _judge_written_path(resolved[0], scope) if resolved is not None else None
        if judged is not None and judged[1] == "block":
            # Deleting a startup file, sudoers or a cron job tampers with it as much as writing it.
            yield _finding(judged[0], "block", judged[2], cmd)


def _mv(cmd: SimpleCommand, scope: _Scope) -> Iterator[Finding]:
    options, operands = _split_options(cmd.argv)
    if any(o in ("-t", "--target-directory") or o.startswith("--target-directory=") for o in options):
        sources = operands[1:] if "-t" in options or "--target-directory" in options else operands
    else:
        sources = operands[:-1]
    for i in sources:
        resolved = scope.resolve(cmd.argv[i], cmd.dynamic[i])
        reason = scope.danger(*resolved) if resolved is not None else None
        if reason is not None:
            yield _finding(
                "destruction",
                "block",
                f"moving {reason} away is as destructive as deleting it; only move paths in the workspace",
                cmd,
            )
            return


def _rsync(cmd: SimpleCommand, scope: _Scope) -> Iterator[Finding]:
    options, operands = _split_options(cmd.argv)
    if len(operands) < 2 or not any(o.startswith("--del") for o in options):
        return
    dest = operands[-1]
    if re.match(r"([\w.-]+@)?[\w.-]+::?|rsync://", cmd.argv[dest]):
        return  # a remote destination: not this host's files
    yield from _judge_target(
        cmd, dest, scope, recursive=True, verb="rsync --delete into", allow_workspace=True
    )


def _truncate(cmd: SimpleCommand, scope: _Scope) -> Iterator[Finding]:
    argv = cmd.argv
    _, operands = _split_options(argv)
    for i in operands:
        if argv[i - 1] in ("-s", "--size", "-r", "--reference", "-o"):
            continue
        resolved = scope.resolve(argv[i], cmd.dynamic[i])
        reason = scope.danger(*resolved) if resolved is not None else None
        if reason is not None:
            yield _finding("destruction", "block", f"this would empty {reason}; not allowed", cmd)
            return


def _judge_target(
    cmd: SimpleCommand,
    index: int,
    scope: _Scope,
    *,
    recursive: bool,
    verb: str,
    allow_workspace: bool = False,
) -> Iterator[Finding]:
    word = cmd.argv[index]
    resolved = scope.resolve(word, cmd.dynamic[index])
    if resolved is None:
        if recursive and cmd.dynamic[index]:
            yield _finding(
                "destruction",
                "flag",
                f"{verb}s {word!r} recursively, a path known only at run time; spell the path out",
                cmd,
            )
        elif recursive and scope.cwd is None:
            yield _finding(
                "destruction",
                "flag",
                f"{verb}s {word!r} recursively after cd to a directory known only at run time; "
                "use an absolute path",
                cmd,
            )
        return
    reason = scope.danger(*resolved, allow_workspace=allow_workspace)
    if reason is None:
        return
    if recursive:
        yield _finding(
            "destruction",
            "block",
            f"this would {verb} {reason}; only change paths inside the workspace",
            cmd,
        )
    elif verb == "delete":
        yield _finding("destruction", "flag", f"deletes {reason}; confirm this is intended", cmd)


def _find(cmd: SimpleCommand, scope: _Scope) -> Iterator[Finding]:
    argv = cmd.argv
    deletes = "-delete" in argv or any(
        a in ("-exec", "-execdir", "-ok", "-okdir")
        and i + 1 < len(argv)
        and basename(argv[i + 1]) in ("rm", "shred")
        for i, a in enumerate(argv)
    )
    if not deletes:
        return
    first_expr = next((i for i, a in enumerate(argv[1:], 1) if a[:1] in ("-", "(", "!")), len(argv))
    roots = list(range(1, first_expr))
    if not roots:
        return
    for i in roots:
        yield from _judge_target(cmd, i, scope, recursive=True, verb="delete", allow_workspace=True)


def _chmod(cmd: SimpleCommand, scope: _Scope) -> Iterator[Finding]:
    options, operands = _split_options(cmd.argv)
    name = basename(cmd.argv[0])
    if name == "chmod" and operands and _is_setuid_mode(cmd.argv[operands[0]]):
        yield _finding(
            "privilege", "block", "setuid/setgid bits grant privilege; use plain permissions such as +x", cmd
        )
    if "--recursive" in options or _has_short(options, "R"):
        # The first operand is the mode or owner, the rest are paths.
        for i in operands[1:]:
            yield from _judge_target(cmd, i, scope, recursive=True, verb=f"{name} -R", allow_workspace=True)


def _is_setuid_mode(mode: str) -> bool:
    if re.fullmatch(r"[0-7]{4,5}", mode):
        return int(mode[-4]) & 6 != 0
    return any(re.fullmatch(r"[ugoa]*[+=][rwxXst]*s[rwxXst]*", part) for part in mode.split(","))


def _dd(cmd: SimpleCommand, scope: _Scope) -> Iterator[Finding]:
    for arg in cmd.argv[1:]:
        if arg.startswith("of=/dev/") and not _harmless_device(arg[3:]):
            yield _finding(
                "disk", "block", "dd onto a device destroys its data; write to a file instead", cmd
            )


def _harmless_device(path: str) -> bool:
    return path in ("/dev/null", "/dev/stdout", "/dev/stderr", "/dev/zero") or path.startswith("/dev/fd/")


def _disk_tool(cmd: SimpleCommand, scope: _Scope) -> Iterator[Finding]:
    if any(a in ("-l", "--list") for a in cmd.argv[1:]):
        return
    yield _finding("disk", "block", "partitioning or formatting disks is not allowed here", cmd)


def _shred(cmd: SimpleCommand, scope: _Scope) -> Iterator[Finding]:
    if any(a.startswith("/dev/") and not _harmless_device(a) for a in cmd.argv[1:]):
        yield _finding("disk", "block", "shredding a device destroys it; this is not allowed", cmd)


def _privilege(cmd: SimpleCommand, scope: _Scope) -> Iterator[Finding]:
    yield _finding(
        "privilege",
        "block",
        f"{basename(cmd.argv[0])} raises privileges; run without it, or ask the user to do this step",
        cmd,
    )


def _crontab(cmd: SimpleCommand, scope: _Scope) -> Iterator[Finding]:
    if cmd.argv[1:] != ("-l",):
        yield _finding(
            "persistence", "block", "changing crontab installs persistent jobs; this is not allowed", cmd
        )


def _at(cmd: SimpleCommand, scope: _Scope) -> Iterator[Finding]:
    if basename(cmd.argv[0]) == "at" and any(a in ("-l", "-c", "-r", "-d") for a in cmd.argv[1:]):
        return  # listing, showing or removing jobs schedules nothing
    yield _finding(
        "persistence", "block", "at/batch schedules jobs that run after this task; not allowed", cmd
    )


def _setcap(cmd: SimpleCommand, scope: _Scope) -> Iterator[Finding]:
    if any(a in ("-v", "--verify") for a in cmd.argv[1:]):
        return
    yield _finding("privilege", "block", "file capabilities grant privilege like setuid; not allowed", cmd)


def _systemctl(cmd: SimpleCommand, scope: _Scope) -> Iterator[Finding]:
    if any(a in ("enable", "link", "preset", "reenable") for a in cmd.argv[1:]):
        yield _finding(
            "persistence", "block", "enabling services makes them start on every boot; not allowed", cmd
        )


def _launchctl(cmd: SimpleCommand, scope: _Scope) -> Iterator[Finding]:
    if any(a in ("load", "bootstrap", "enable", "submit") for a in cmd.argv[1:]):
        yield _finding("persistence", "block", "loading launchd jobs installs persistence; not allowed", cmd)


def _netcat(cmd: SimpleCommand, scope: _Scope) -> Iterator[Finding]:
    options, _ = _split_options(cmd.argv)
    if any(o.split("=")[0] in ("--exec", "--sh-exec", "--lua-exec") for o in options) or _has_short(
        options, "ec"
    ):
        yield _finding(
            "reverse_shell", "block", "netcat running a program on a connection is a reverse shell", cmd
        )


def _socat(cmd: SimpleCommand, scope: _Scope) -> Iterator[Finding]:
    if any(re.search(r"(^|[,!])\s*(exec|system):", a, re.IGNORECASE) for a in cmd.argv[1:]):
        yield _finding(
            "reverse_shell", "block", "socat running a program on a connection is a reverse shell", cmd
        )


_SOCKET_CODE = re.compile(
    r"socket|fsockopen|TCPSocket|net\.connect|net\.Socket|require\(['\"]net['\"]\)", re.I
)
_SHELL_CODE = re.compile(r"exec|system|spawn|popen|passthru|/bin/(ba)?sh|child_process|STDIN|pty", re.I)
_SOCKET_MODULES = ("-rsocket", "-MIO::Socket", "-MSocket")


def _inline_socket(cmd: SimpleCommand, scope: _Scope) -> Iterator[Finding]:
    if basename(cmd.argv[0]) in ("awk", "gawk"):
        hit = any("/inet/" in a for a in cmd.argv[1:])
    else:
        code = " ".join(_inline_code(cmd))
        opens_socket = _SOCKET_CODE.search(code) or any(a.startswith(_SOCKET_MODULES) for a in cmd.argv)
        hit = bool(opens_socket and _SHELL_CODE.search(code))
    if hit:
        yield _finding(
            "reverse_shell",
            "block",
            "inline code wiring a socket to a shell is a reverse shell; not allowed",
            cmd,
        )


def _eval(cmd: SimpleCommand, scope: _Scope) -> Iterator[Finding]:
    if any(cmd.dynamic[1:]):
        yield _finding(
            "eval_dynamic", "flag", "eval runs text built at run time; run the intended command directly", cmd
        )


def _git(cmd: SimpleCommand, scope: _Scope) -> Iterator[Finding]:
    sub, args = _git_subcommand(cmd.argv)
    if sub == "push":
        yield _finding("git_push", "flag", "git push publishes commits; the user approves pushes", cmd)
    yield from _git_config(cmd, sub, args)
    why = _destructive_git(sub, args)
    if why:
        yield _finding("destructive_git", "flag", f"git {sub} {why}; make sure nothing is lost", cmd)
    for porcelain in _porcelain(sub, args):
        # Plumbing that does a porcelain command's work is judged as that command.
        psub, *pargs = porcelain.split()
        if psub == "push":
            yield _finding(
                "git_push", "flag", f"git {sub} pushes like git push; the user approves pushes", cmd
            )
        if _destructive_git(psub, [*pargs, *args]):
            yield _finding(
                "destructive_git",
                "flag",
                f"git {sub} does what git {porcelain} does, which discards work or history; "
                "make sure nothing is lost",
                cmd,
            )


_GIT_PROGRAM_KEY = re.compile(
    r"core\.(hookspath|fsmonitor|sshcommand|pager|editor|askpass|gitproxy)|sequence\.editor|"
    r"credential\..*helper|gpg\.(.+\.)?program|diff\.external|pager\..+|"
    r"filter\..+\.(clean|smudge|process)|diff\..+\.(textconv|command)|merge\..+\.driver|"
    r"(difftool|mergetool|man|browser)\..+\.(cmd|path)|web\.browser|interactive\.difffilter|"
    r"uploadpack\.packobjectshook|remote\..+\.(uploadpack|receivepack)|include\.path|includeif\..+\.path",
    re.IGNORECASE,
)
#: Keys through which git learns aliases: ``alias.*`` and the files that ``include`` pulls in.
_GIT_ALIAS_KEY = re.compile(r"alias\..+|include\.path|includeif\..+\.path|\*", re.IGNORECASE)


def _git_runs_program(key: str, value: str) -> bool:
    """Setting ``key`` to ``value`` makes later git commands run a program on the host."""
    if key.lower().startswith("alias."):
        return value.lstrip().startswith("!")
    return _GIT_PROGRAM_KEY.fullmatch(key) is not None


def _git_settings(cmd: SimpleCommand, sub: str, args: list[str]) -> list[tuple[str, str]]:
    """The configuration ``(key, value)`` pairs a git command sets: ``-c``, ``git config …``.

    ``git config --edit`` may set anything: it is reported as the key ``*``.
    """
    settings: list[tuple[str, str]] = []
    argv = cmd.argv
    for i, arg in enumerate(argv[1:], 1):
        if arg == sub:
            break
        if argv[i - 1] == "-c" and "=" in arg:
            key, value = arg.split("=", 1)
            settings.append((key, value))
        elif arg.startswith("--config-env="):
            settings.append((arg.split("=", 2)[1], "!"))
    if sub == "config":
        value_options = ("-f", "--file", "--blob", "--type", "--default", "--comment", "--value")
        words = [
            a
            for i, a in enumerate(args)
            if not a.startswith("-") and not (i > 0 and args[i - 1] in value_options)
        ]
        reading = any(
            a.startswith(("--get", "--unset", "--list", "--remove", "--rename")) or a == "-l" for a in args
        )
        if words[:1] == ["set"]:
            words = words[1:]
        elif words[:1] and words[0] in ("get", "list", "unset", "rename-section", "remove-section", "edit"):
            reading = True
        if not reading and len(words) >= 2:
            settings.append((words[0], words[1]))
        if words[:1] == ["edit"] or any(a in ("-e", "--edit") for a in args):
            settings.append(("*", ""))
    return settings


def _git_config(cmd: SimpleCommand, sub: str, args: list[str]) -> Iterator[Finding]:
    for key, value in _git_settings(cmd, sub, args):
        if _git_runs_program(key, value):
            yield _finding(
                "git_config",
                "flag",
                f"git would run this program on the host ({key}); confirm this setting",
                cmd,
            )
            return


def _git_subcommand(argv: tuple[str, ...]) -> tuple[str, list[str]]:
    i = 1
    while i < len(argv) and argv[i].startswith("-"):
        i += 2 if argv[i] in ("-C", "-c", "--git-dir", "--work-tree", "--namespace") else 1
    return (argv[i], list(argv[i + 1 :])) if i < len(argv) else ("", [])


def _destructive_git(sub: str, args: list[str]) -> str:
    options = [a for a in args if a.startswith("-")]
    checks: dict[str, Callable[[], bool]] = {
        "reset": lambda: "--hard" in args,
        "push": lambda: _forced_push(args),
        "clean": lambda: (_has_short(options, "f") or "--force" in args) and _has_short(options, "dxX"),
        "branch": lambda: "-D" in args or ("--force" in args and bool({"-d", "--delete"} & set(args))),
        "checkout": lambda: "." in args or "-f" in args or "--force" in args,
        "restore": lambda: "." in args and not ({"--staged", "-S"} & set(args) and "--worktree" not in args),
        "stash": lambda: bool(args) and args[0] in ("drop", "clear"),
        "reflog": lambda: bool(args) and args[0] in ("expire", "delete"),
        "gc": lambda: any(a in ("--prune=now", "--prune=all") for a in args),
        "filter-branch": lambda: True,
        "filter-repo": lambda: True,
    }
    check = checks.get(sub)
    return "discards work or history" if check is not None and check() else ""


def _forced_push(args: list[str]) -> bool:
    forced = {"--force", "-f", "--force-with-lease", "--force-if-includes", "--mirror", "--delete", "-d"}
    return any(a in forced or a.startswith(("--force-with-lease=", "+", ":")) for a in args)


#: Plumbing whose work is always that of a porcelain command (the rest depend on options; see
#: :func:`_porcelain`). Rules written for the porcelain command apply to the plumbing one.
_PLUMBING: dict[str, tuple[str, ...]] = {
    "send-pack": ("push",),
    "http-push": ("push",),
    "receive-pack": ("push",),
    **dict.fromkeys(
        ("remote-http", "remote-https", "remote-ftp", "remote-ftps", "remote-ext", "remote-fd"),
        ("push", "fetch"),
    ),
    "fetch-pack": ("fetch",),
    "http-fetch": ("fetch",),
    "checkout-index": ("checkout", "restore"),
    "commit-tree": ("commit",),
    "fast-import": ("commit", "branch -f"),
    "prune": ("gc --prune=now",),
    "merge-file": ("merge",),
    "merge-index": ("merge",),
    "merge-one-file": ("merge",),
}


def _update_ref(args: list[str]) -> tuple[str, ...]:
    if {"-d", "--delete"} & set(args):
        return ("branch -D", "tag -d")
    moves = ("branch -f", "reset --soft", "commit")
    return ("branch -D", *moves) if "--stdin" in args else moves


def _read_tree(args: list[str]) -> tuple[str, ...]:
    if "-u" not in args:
        return ("reset",)  # the index only, like a mixed reset
    return ("reset --hard", "checkout") if "--reset" in args else ("checkout",)


def _update_index(args: list[str]) -> tuple[str, ...]:
    if {"--remove", "--force-remove"} & set(args):
        return ("rm",)
    return ("add",) if {"--add", "--cacheinfo", "--index-info"} & set(args) else ()


def _symbolic_ref(args: list[str]) -> tuple[str, ...]:
    operands = [a for a in args if not a.startswith("-")]
    return ("checkout", "switch") if len(operands) >= 2 else ()  # one operand only reads


_PLUMBING_BY_OPTIONS: dict[str, Callable[[list[str]], tuple[str, ...]]] = {
    "update-ref": _update_ref,
    "read-tree": _read_tree,
    "update-index": _update_index,
    "symbolic-ref": _symbolic_ref,
}


def _porcelain(sub: str, args: list[str]) -> tuple[str, ...]:
    """The porcelain commands (subcommand and options) that ``git SUB ARGS`` does the work of."""
    by_options = _PLUMBING_BY_OPTIONS.get(sub)
    return by_options(args) if by_options is not None else _PLUMBING.get(sub, ())


#: git's own commands (``git --list-cmds=main,nohelpers``). git ignores an alias named like one
#: of them, so any other subcommand may be an alias from a config file the guard cannot read.
_GIT_COMMAND_NAMES = """add am annotate apply archive bisect blame branch bugreport bundle cat-file check-attr
    check-ignore check-mailmap check-ref-format checkout checkout-index cherry cherry-pick clean
    clone column commit commit-graph commit-tree config count-objects credential credential-cache
    credential-store daemon describe diagnose diff diff-files diff-index diff-tree difftool
    fast-export fast-import fetch fetch-pack filter-branch fmt-merge-msg for-each-ref for-each-repo
    format-patch fsck fsck-objects gc get-tar-commit-id grep hash-object help hook http-backend
    http-fetch http-push imap-send index-pack init init-db instaweb interpret-trailers log
    ls-files ls-remote ls-tree mailinfo mailsplit maintenance merge merge-base merge-file
    merge-index merge-octopus merge-one-file merge-ours merge-recursive merge-recursive-ours
    merge-recursive-theirs merge-resolve merge-subtree merge-tree mergetool mktag mktree
    multi-pack-index mv name-rev notes pack-objects pack-redundant pack-refs patch-id pickaxe
    prune prune-packed pull push quiltimport range-diff read-tree rebase receive-pack reflog
    remote remote-ext remote-fd remote-ftp remote-ftps remote-http remote-https repack replace
    request-pull rerere reset restore rev-list rev-parse revert rm send-pack shell shortlog show
    show-branch show-index show-ref sparse-checkout stage stash status stripspace submodule
    subtree switch symbolic-ref tag unpack-file unpack-objects update-index update-ref
    update-server-info upload-archive upload-pack var verify-commit verify-pack verify-tag
    version whatchanged worktree"""
_GIT_COMMANDS = frozenset(_GIT_COMMAND_NAMES.split())


_NAMED_RULES: dict[str, tuple[_Rule, ...]] = {
    "rm": (_rm,),
    "unlink": (_rm,),
    "mv": (_mv,),
    "rsync": (_rsync,),
    "truncate": (_truncate,),
    "find": (_find,),
    "chmod": (_chmod,),
    "chown": (_chmod,),
    "chgrp": (_chmod,),
    "dd": (_dd,),
    "shred": (_shred,),
    "crontab": (_crontab,),
    "at": (_at,),
    "batch": (_at,),
    "setcap": (_setcap,),
    "systemctl": (_systemctl,),
    "launchctl": (_launchctl,),
    "socat": (_socat,),
    "eval": (_eval,),
    "git": (_git,),
    **dict.fromkeys(_PRIVILEGE_PROGRAMS, (_privilege,)),
    **dict.fromkeys(_DISK_PROGRAMS, (_disk_tool,)),
    **dict.fromkeys(_NETCATS - {"telnet"}, (_netcat,)),
    **dict.fromkeys((*_CODE_FLAGS, "awk", "gawk"), (_inline_socket,)),
}


# --- rules for every command ---------------------------------------------------------------


def _obfuscation(cmd: SimpleCommand, scope: _Scope) -> Iterator[Finding]:
    if not cmd.obfuscated:
        return
    if cmd.dynamic[0] and cmd.origin in ("eval", "bash_c", "trap"):
        yield _finding(
            "eval_dynamic", "flag", "runs a command built at run time; run it directly instead", cmd
        )
    else:
        yield _finding(
            "obfuscation",
            "block",
            "the command name is quoted, escaped or computed; write the program name plainly",
            cmd,
        )


def _mkfs(cmd: SimpleCommand, scope: _Scope) -> Iterator[Finding]:
    if basename(cmd.argv[0]).startswith("mkfs"):
        yield _finding("disk", "block", "creating a filesystem erases the device; this is not allowed", cmd)


def _remote_code(cmd: SimpleCommand, scope: _Scope) -> Iterator[Finding]:
    name = basename(cmd.argv[0])
    interpreter = name in _INTERPRETERS or _PYTHON_NAME.fullmatch(name) is not None
    if not interpreter and name not in ("source", ".", "eval"):
        return
    feeders = {basename(p) for p in cmd.pipe_from}
    if interpreter and _reads_program_from_stdin(name, cmd.argv[1:]):
        if feeders & _DOWNLOADERS:
            yield _finding(
                "remote_code", "block", "piping a download into an interpreter runs unreviewed code", cmd
            )
        elif feeders & _DECODERS:
            yield _finding(
                "remote_code", "block", "piping decoded data into an interpreter hides the code", cmd
            )
        elif feeders & _NETCATS:
            yield _finding(
                "reverse_shell", "block", "a shell fed from a network connection is a reverse shell", cmd
            )
    if any(_downloads(word) for word, dyn in zip(cmd.argv[1:], cmd.dynamic[1:], strict=True) if dyn):
        yield _finding(
            "remote_code",
            "block",
            "running downloaded code unseen is not allowed; download to a file, read it, then run it",
            cmd,
        )


def _reads_program_from_stdin(name: str, args: tuple[str, ...]) -> bool:
    if name in _SHELLS and "-s" in args:
        return True
    if any(a in ("-c", "-m", "-e", "-E", "-r") for a in args):
        return False
    return all(a.startswith("-") for a in args)


def _downloads(word: str) -> bool:
    inner = parse_shell(f"echo {word}").commands
    return any(c.argv and basename(c.argv[0]) in _DOWNLOADERS for c in inner[1:])


def _device_redirects(cmd: SimpleCommand, scope: _Scope) -> Iterator[Finding]:
    # Redirects, and the files cp/tee/install/dd write.
    for target in _write_targets(cmd):
        if _BLOCK_DEVICE.match(target):
            yield _finding("disk", "block", f"writing to {target} destroys the disk's data; not allowed", cmd)
            break
    for _, target in cmd.redirects:
        if re.match(r"/dev/(tcp|udp)/", target) and cmd.argv and basename(cmd.argv[0]) in (*_SHELLS, "exec"):
            yield _finding(
                "reverse_shell",
                "block",
                "a shell wired to /dev/tcp is a reverse shell; this is not allowed",
                cmd,
            )


def _truncating_redirects(cmd: SimpleCommand, scope: _Scope) -> Iterator[Finding]:
    for op, target in cmd.redirects:
        if op not in (">", ">|", "&>") or not target.startswith("/") or target.startswith("/dev/"):
            continue
        resolved = scope.resolve(target)
        if resolved is None or _judge_written_path(resolved[0], scope) is not None:
            continue  # judged more precisely by _writes
        path = resolved[0]
        if _within(path, scope.workspace) or any(_within(path, d) and path != d for d in scope.scratch):
            continue
        yield _finding(
            "destruction", "block", f"this empties {path}, outside the workspace; not allowed", cmd
        )


def _writes(cmd: SimpleCommand, scope: _Scope) -> Iterator[Finding]:
    for target in _write_targets(cmd):
        resolved = scope.resolve(target)
        if resolved is None:
            continue
        path = resolved[0]
        judged = _judge_written_path(path, scope)
        if judged is not None:
            category, severity, message = judged
            yield _finding(category, severity, message, cmd)


def _judge_written_path(path: str, scope: _Scope) -> tuple[str, Severity, str] | None:
    home = scope.home
    if any(path == f"{home}/{rc}" for rc in _RC_NAMES_UNDER_HOME) or any(
        _within(path, p) for p in _RC_SYSTEM
    ):
        return (
            "persistence",
            "block",
            "changing shell startup files or authorized_keys persists access; not allowed",
        )
    persistent_dirs = ("/etc/cron", "/var/spool/cron", "/etc/systemd", "/lib/systemd", "/usr/lib/systemd")
    if path.startswith(persistent_dirs) or _within(path, f"{home}/.config/systemd"):
        return "persistence", "block", "installing scheduled jobs or services persists beyond this task"
    if "/Library/Launch" in path:
        return "persistence", "block", "installing launchd jobs persists beyond this task"
    if path.startswith("/etc/sudoers") or path in ("/etc/passwd", "/etc/shadow", "/etc/group"):
        return "privilege", "block", "changing sudoers or account files grants privilege; not allowed"
    if _within(path, f"{scope.workspace}/.git/hooks") or path == f"{scope.workspace}/.git/config":
        return (
            "git_config",
            "flag",
            "git hooks and config run code on later git commands; confirm this change",
        )
    return None


def _write_targets(cmd: SimpleCommand) -> list[str]:
    targets = [t for op, t in cmd.redirects if op in _WRITE_OPERATORS and not t.isdigit() and t != "-"]
    if not cmd.argv:
        return targets
    name = basename(cmd.argv[0])
    options, operands = _split_options(cmd.argv)
    if name == "tee":
        targets.extend(cmd.argv[i] for i in operands)
    elif name in ("cp", "mv", "install", "ln", "rsync") and len(operands) >= 2:
        dest = cmd.argv[operands[-1]]
        targets.append(dest)
        if dest.endswith("/") or dest in ("~", "$HOME", "${HOME}"):
            # Copying into a directory writes a file of the source's name there.
            targets.extend(f"{dest.rstrip('/')}/{basename(cmd.argv[i])}" for i in operands[:-1])
    elif name == "dd":
        targets.extend(a[3:] for a in cmd.argv if a.startswith("of="))
    elif name == "sed" and any(o.startswith(("-i", "--in-place")) for o in options):
        targets.extend(cmd.argv[i] for i in operands[1:])
    elif name in ("perl", "ruby") and any(re.match(r"-[a-zA-Z]*i", o) for o in options):
        # ``perl -pi -e CODE FILE…`` edits the files in place; the word after ``-e`` is code.
        code_flag = re.compile(r"-[a-zA-Z]*[eE]$")
        targets.extend(cmd.argv[i] for i in operands if not code_flag.match(cmd.argv[i - 1]))
    return targets


_GENERAL_RULES: tuple[_Rule, ...] = (
    _obfuscation,
    _mkfs,
    _remote_code,
    _device_redirects,
    _truncating_redirects,
    _writes,
)


# --- network and credentials ---------------------------------------------------------------

_PACKAGE_INSTALLS = {
    "pip": {"install", "download", "wheel", "index"},
    "pip3": {"install", "download", "wheel", "index"},
    "pipx": {"install", "run", "upgrade", "inject"},
    "poetry": {"install", "add", "update", "lock", "publish"},
    "pdm": {"install", "add", "update", "sync"},
    "npm": {"install", "i", "add", "ci", "publish", "update", "upgrade", "exec"},
    "yarn": {"install", "add", "publish", "upgrade", "dlx"},
    "pnpm": {"install", "i", "add", "publish", "update", "dlx"},
    "bun": {"install", "i", "add", "x"},
    "apt": {"install", "update", "upgrade", "full-upgrade", "dist-upgrade", "download"},
    "apt-get": {"install", "update", "upgrade", "dist-upgrade", "download", "source"},
    "brew": {"install", "update", "upgrade", "tap"},
    "gem": {"install", "update", "push"},
    "cargo": {"install", "fetch", "update", "publish", "search"},
    "go": {"get", "install", "mod"},
    "docker": {"pull", "push", "run", "login", "search", "build", "compose"},
    "podman": {"pull", "push", "run", "login"},
    "uv": {"add", "sync", "lock", "tool", "pip", "run"},
    "conda": {"install", "create", "update"},
}
_PYTHON_NETWORK = re.compile(r"\b(urllib|requests|socket|http\.client|httpx|aiohttp|ftplib|smtplib)\b")
_PYTHON_NAME = re.compile(r"python[0-9.]*|pypy[0-9.]*")


def _uses_network(cmd: SimpleCommand) -> bool:
    if not cmd.argv:
        return False
    if any(re.match(r"/dev/(tcp|udp)/", target) for _, target in cmd.redirects):
        return True
    if cmd.origin == "python_c" and _PYTHON_NETWORK.search(cmd.argv[2]):
        return True
    if any(_uses_network(inner) for inner in _inline_shell_commands(cmd)):
        return True
    return cmd.origin != "python_c" and _network_by_name(basename(cmd.argv[0]), cmd.argv[1:])


def _network_by_name(name: str, args: tuple[str, ...]) -> bool:
    if name in _NETWORK_PROGRAMS or name in _NETWORK_CLIENTS or (name == "yarn" and not args):
        return True
    if name == "rsync":
        return any(re.match(r"([\w.-]+@)?[\w.-]+::?|rsync://", a) for a in args if not a.startswith("-"))
    if _PYTHON_NAME.fullmatch(name):
        return args[:3] in (("-m", "pip", "install"), ("-m", "pip", "download"))
    if name == "git":
        sub, rest = _git_subcommand(("git", *args))
        remote = ("clone", "fetch", "pull", "push", "ls-remote", "submodule")
        return sub in remote or any(p.split()[0] in remote for p in _porcelain(sub, rest))
    verbs = _PACKAGE_INSTALLS.get(name)
    sub = next((a for a in args if not a.startswith("-")), "")
    return verbs is not None and sub in verbs


_NOT_A_READ = frozenset(
    {
        "ls",
        "stat",
        "test",
        "[",
        "touch",
        "mkdir",
        "chmod",
        "chown",
        "rm",
        "ssh-add",
        "ssh-keygen",
        "ssh-copy-id",
    }
)
_LOADS_CONFIG = frozenset({"source", "."})
_SSH_PROGRAMS = frozenset({"ssh", "scp", "sftp", "rsync", "git"})
_CRED_TEXT = re.compile(
    r"\.ssh/id_|\.aws/credentials|\.config/gcloud|\.azure/|\.kube/config|\.docker/config\.json|"
    r"\.netrc|\.git-credentials|\.npmrc|\.pypirc|/etc/shadow|['\"/]\.env['\"]"
)


def _reads_credentials(cmd: SimpleCommand, scope: _Scope) -> bool:
    name = basename(cmd.argv[0])
    if name in _NOT_A_READ or name in _LOADS_CONFIG:
        return False
    if cmd.origin == "python_c":
        return _CRED_TEXT.search(cmd.argv[2]) is not None
    inputs = [t for op, t in cmd.redirects if op in ("<", "<>")]
    written = set(_write_targets(cmd))
    skip_after = ("-i", "-F", "--identity") if name in _SSH_PROGRAMS else ()
    for i, arg in enumerate(cmd.argv[1:], 1):
        if cmd.argv[i - 1] in (*skip_after, "--env-file") or arg.startswith("--env-file="):
            continue  # ssh using its key or docker loading an env file is use, not a read
        if arg not in written:
            inputs.extend(re.split(r"[@=]", arg))
    return any(_is_credential(candidate, scope) for candidate in inputs if candidate)


def _is_credential(word: str, scope: _Scope) -> bool:
    resolved = scope.resolve(word)
    if resolved is None:
        return False
    path = resolved[0]
    base = path.rsplit("/", 1)[-1]
    if base == ".env" or (base.startswith(".env.") and not re.search(r"example|sample|template|dist", base)):
        return True
    if path in ("/etc/shadow", "/etc/gshadow"):
        return True
    if base.endswith(".pub") or (base in ("known_hosts", "config") and "/.ssh/" in path):
        return False
    return any(_within(path, f"{scope.home}/{name}") for name in _CRED_NAMES_UNDER_HOME)


# --- inline code: python -c, perl -e, ruby -e, node -e, php -r ---------------------------

_SHELL_CALL = re.compile(
    r"(?:system|popen|exec|execSync|spawnSync|shell_exec|passthru|check_output|check_call|run|call|Popen)"
    r"\(\s*(?:q\{(?P<q>[^}]+)\}|%q\{(?P<rq>[^}]+)\}|(?P<quote>['\"])(?P<s>.+?)(?P=quote))"
)


#: perl and ruby call functions without parentheses: ``system "rm -rf /"``.
_BARE_CALL = re.compile(r"\b(?:system|exec)\s+(?P<quote>['\"])(?P<s>.+?)(?P=quote)")

#: ``subprocess.run(['rm', '-rf', '/'])``: a program and its arguments as a list.
_LIST_CALL = re.compile(
    r"(?:run|call|Popen|check_output|check_call|exec[lv]p?e?|spawn[lv]p?e?|execFileSync|spawnSync|spawn)"
    r"\(\s*(?:['\"][^'\"]*['\"]\s*,\s*)?[\[(](?P<items>[^\])]*)[\])]"
)
_LIST_ITEM = re.compile(r"(['\"])(.*?)\1")
#: Backticks and ``qx{…}``/``%x{…}`` run a shell command in perl, ruby and php.
_BACKTICKS = re.compile(r"`(?P<bt>[^`]+)`|(?:qx|%x)\{(?P<qx>[^}]+)\}")
_AWKS = ("awk", "gawk", "mawk", "nawk")


def _inline_code(cmd: SimpleCommand) -> list[str]:
    if cmd.origin == "python_c":
        return [cmd.argv[2]]
    name = basename(cmd.argv[0])
    if name in _AWKS:
        i = 1
        while i < len(cmd.argv) and cmd.argv[i].startswith("-") and cmd.argv[i] != "--":
            if cmd.argv[i] in ("-f", "--file"):
                return []
            i += 2 if cmd.argv[i] in ("-v", "-F", "--assign", "--field-separator") else 1
        i += 1 if i < len(cmd.argv) and cmd.argv[i] == "--" else 0
        return [cmd.argv[i]] if i < len(cmd.argv) else []
    flags = _CODE_FLAGS.get(name)
    if flags is None:
        return []
    return [a for i, a in enumerate(cmd.argv[1:], 1) if cmd.argv[i - 1] in flags]


def _inline_scripts(cmd: SimpleCommand) -> Iterator[str]:
    """The shell commands that inline code hands to ``system()`` and friends."""
    backticks = basename(cmd.argv[0]) in ("perl", "ruby", "php") and cmd.origin != "python_c"
    for code in _inline_code(cmd):
        for match in _SHELL_CALL.finditer(code):
            yield match.group("q") or match.group("rq") or match.group("s")
        if backticks:
            yield from (m.group("s") for m in _BARE_CALL.finditer(code))
        for match in _LIST_CALL.finditer(code):
            items = [m.group(2) for m in _LIST_ITEM.finditer(match.group("items"))]
            if items:
                yield " ".join(items)
        if backticks:
            for match in _BACKTICKS.finditer(code):
                yield match.group("bt") or match.group("qx")


def _inline_shell_commands(cmd: SimpleCommand) -> Iterator[SimpleCommand]:
    if cmd.origin == "python_c" or basename(cmd.argv[0]) in (*_CODE_FLAGS, *_AWKS):
        for script in _inline_scripts(cmd):
            # One level only: the inner commands are plain shell commands, not inline code again.
            yield from (c for c in parse_shell(script).commands if c.origin != "python_c")


def _inline_shell_calls(cmd: SimpleCommand, scope: _Scope, depth: int) -> Iterator[Finding]:
    for script in _inline_scripts(cmd):
        yield from _judge(parse_shell(script), scope, depth + 1)


# --- python -c -----------------------------------------------------------------------------

_PY_RMTREE = re.compile(
    r"(?:\brmtree|\bremove_tree|\brm_rf|\brm_r|\bremove_dir|\brmSync)\(\s*(?:(['\"])(.*?)\1|([^)]*))"
)
_PY_HOME = re.compile(
    r"expanduser\(\s*['\"]~['\"]|Path\.home\(|environ\[['\"]HOME|getenv\(['\"]HOME|"
    r"\$ENV\{\s*['\"]?HOME|ENV\[['\"]HOME|Dir\.home|homedir\(|\$_SERVER\[['\"]HOME"
)


def _python_code(cmd: SimpleCommand, scope: _Scope) -> Iterator[Finding]:
    code = cmd.argv[2]
    if re.search(r"\bsocket\b", code) and re.search(r"subprocess|pty|dup2|os\.exec|/bin/(ba)?sh", code):
        yield _finding("reverse_shell", "block", "python wiring a socket to a shell is a reverse shell", cmd)
    yield from _inline_rmtree(cmd, scope)


def _inline_rmtree(cmd: SimpleCommand, scope: _Scope) -> Iterator[Finding]:
    """``shutil.rmtree``, perl ``rmtree``/``remove_tree``, ruby ``rm_rf`` … of a dangerous path."""
    code = " ".join(_inline_code(cmd))
    for match in _PY_RMTREE.finditer(code):
        literal, expression = match.group(2), match.group(3) or ""
        target = literal if literal is not None else ("~" if _PY_HOME.search(expression) else None)
        resolved = scope.resolve(target) if target is not None else None
        reason = scope.danger(*resolved) if resolved is not None else None
        if reason is not None:
            yield _finding(
                "destruction",
                "block",
                f"this would delete {reason}; only change paths inside the workspace",
                cmd,
            )


# --- what the rules cannot see -------------------------------------------------------------

#: A call in inline code that runs a program: ``os.system(``, ``subprocess.run(``, perl
#: ``system "…"``, node ``execSync(``, php ``shell_exec(`` … (up to where its argument starts).
_PROCESS_CALL = re.compile(
    r"(?:\bos\.(?:system|popen|exec\w*|spawn\w*|posix_spawnp?)|\bsubprocess\.\w+|\bpty\.spawn|"
    r"\b(?:system|exec|popen|shell_exec|passthru|proc_open|pcntl_exec|execSync|execFileSync|execFile|"
    r"spawnSync|spawn|IO\.popen|Open3\.\w+)\b)\s*\(?\s*"
)
#: An argument that is text written out in full: a string, ``q{…}``, or a list of strings.
_LITERAL_ARGUMENT = re.compile(
    r"""(?:(?P<q>['"`])(?:(?!(?P=q)).)*(?P=q)|%?q\{[^}]*\}|"""
    r"""[\[(]\s*(?:(?P<i>['"])(?:(?!(?P=i)).)*(?P=i)\s*,?\s*)*[\])])\s*(?:[,);]|$)""",
    re.DOTALL,
)


def _opaque(cmd: SimpleCommand) -> Iterator[Opaque]:
    """What of ``cmd`` is decided only at run time, for the policy to fail closed on."""
    shown = normalized(cmd) if cmd.argv else cmd.text
    if cmd.open_from is not None:
        known = (basename(cmd.argv[0]), *cmd.argv[1 : cmd.open_from]) if cmd.open_from else ()
        yield Opaque(" ".join(known), cmd.open_why, shown)
    if not cmd.argv or cmd.open_from == 0:
        return
    if basename(cmd.argv[0]) == "git":
        yield from _git_opaque(cmd)
    for code in _inline_code(cmd):
        for match in _PROCESS_CALL.finditer(code):
            literal = _LITERAL_ARGUMENT.match(code[match.end() :])
            if literal is None or "#{" in literal.group(0):  # ruby interpolates #{…} into strings
                call = code[match.start() : match.end() + 20].strip()
                yield Opaque("", f"inline code runs a program chosen at run time ({call}…)", shown)
                return


def _runs_what_it_writes(commands: tuple[SimpleCommand, ...], scope: _Scope) -> Iterator[Opaque]:
    """A script this very command line writes and then runs (``echo 'git push' > s.sh; sh s.sh``):
    its content is decided at run time, like a computed word (a file that was there before is a
    program like any other)."""
    scope = _Scope(workspace=scope.workspace, home=scope.home, scratch=scope.scratch)  # cd not followed
    written: set[str] = set()
    for cmd in commands:
        for target in _write_targets(cmd):
            resolved = scope.resolve(target)
            if resolved is not None:
                # By name too: a ``cd`` between the write and the run must not hide it.
                written.update((resolved[0], basename(resolved[0])))
    if not written:
        return
    for cmd in commands:
        if not cmd.argv:
            continue
        name = basename(cmd.argv[0])
        if name in _INTERPRETERS or name in ("source", "."):
            script = next((a for a in cmd.argv[1:] if not a.startswith(("-", "+"))), None)
        else:
            script = cmd.argv[0] if "/" in cmd.argv[0] else None
        resolved = scope.resolve(script) if script else None
        if resolved is not None and (resolved[0] in written or basename(resolved[0]) in written):
            why = f"{script} is written by this same command line, so what it runs is decided at run time"
            yield Opaque("", why, normalized(cmd))


def _git_opaque(cmd: SimpleCommand) -> Iterator[Opaque]:
    sub, args = _git_subcommand(cmd.argv)
    shown = normalized(cmd)
    alias = next((k for k, _ in _git_settings(cmd, sub, args) if _GIT_ALIAS_KEY.fullmatch(k)), None)
    sub_index = len(cmd.argv) - len(args) - 1
    if alias is not None:
        yield Opaque(
            "git", f"it sets {alias}, so a git command may run another subcommand than it names", shown
        )
    elif sub and sub not in _GIT_COMMANDS and (cmd.open_from is None or sub_index < cmd.open_from):
        yield Opaque(
            "git",
            f"git {sub} is not a git command: git runs an alias of that name from its configuration "
            f"or a git-{sub} program, either of which may do anything",
            shown,
        )
    for porcelain in _porcelain(sub, args):
        yield Opaque(f"git {porcelain}", f"git {sub} does what git {porcelain} does", shown)


def _equivalents(cmd: SimpleCommand) -> Iterator[str]:
    """``git send-pack origin main`` → ``git push origin main``: plumbing in porcelain words."""
    if basename(cmd.argv[0]) != "git":
        return
    sub, args = _git_subcommand(cmd.argv)
    for porcelain in _porcelain(sub, args):
        yield " ".join(["git", porcelain, *args])


# --- file tools ----------------------------------------------------------------------------


def _not_a_string(name: str, value: object) -> str:
    """The fix for an argument that must be a string: a list is not judged word by word, since
    the tool would refuse it anyway and the words' meaning as one line is not known."""
    kind = {list: "a list", dict: "an object", bool: "a boolean", int: "a number", float: "a number"}
    got = kind.get(type(value), "null" if value is None else type(value).__name__)
    if name == "command":
        words = value if isinstance(value, list) and all(isinstance(w, str) for w in value) else None
        example = shlex.join(words) if words else "ls -la"
        fix = f'pass the whole command line as one string, e.g. {{"command": {json.dumps(example)}}}'
    else:
        fix = "pass one path as a string, relative to the workspace"
    return f"{name} must be a string, not {got}; {fix}"


def _file_write_findings(path: str, workspace: Path) -> Iterator[Finding]:
    if not path:
        return
    scope = _Scope(workspace=_norm(str(workspace)), home=_norm(str(Path.home())), scratch=())
    resolved = scope.resolve(path)
    if resolved is None:
        return
    judged = _judge_written_path(resolved[0], scope)
    if judged is not None:
        category, _, message = judged
        # The file tools stay inside the workspace, so these are asked about rather than refused.
        yield Finding(category, "flag", message, path)
    sealed = _sealed_reason(resolved[0], scope)
    if sealed is not None:
        yield Finding("host_code", "flag", f"{sealed}; a person reviews it before it is written", path)


def _sealed_reason(path: str, scope: _Scope) -> str | None:
    """Why a file the host runs later is sealed (``steward.safety.sealed``), by its names alone."""
    if not _within(path, scope.workspace) or path == scope.workspace:
        return None
    reason = reason_by_name(tuple(PurePosixPath(path).relative_to(scope.workspace).parts))
    in_home = _within(path, scope.home) and path != scope.home and _within(scope.home, scope.workspace)
    if reason is None and in_home and PurePosixPath(path).relative_to(scope.home).parts[0].startswith("."):
        reason = HOME_REASON
    return reason
