"""Verdicts shared by the guard, the policy and the sandbox."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Severity = Literal["block", "flag"]


@dataclass(slots=True, frozen=True)
class Finding:
    """One thing the guard noticed about an action.

    ``block`` findings are refused whatever the mode or policy; ``flag`` findings make the
    policy ask a human (autonomous mode approves them automatically).
    """

    category: str
    severity: Severity
    message: str
    command: str = ""


@dataclass(slots=True, frozen=True)
class Opaque:
    """A command the guard cannot fully read before it runs: part of it is decided at run time.

    ``known`` is what is known for sure, normalised like :attr:`GuardVerdict.commands`, and the
    command may continue with anything: ``""`` (the program itself is unknown, e.g. ``eval
    "$X"``), ``"git"`` (a git subcommand computed at run time or hidden behind an alias),
    ``"git push"`` (a plumbing command that does what ``git push`` does). The policy treats such
    a command as matching every deny or ask rule that some command starting with ``known``
    could match.
    """

    known: str
    #: What could not be known, and why, in words for the human and the model.
    why: str
    #: The command as the guard read it.
    command: str = ""


@dataclass(slots=True, frozen=True)
class GuardVerdict:
    findings: tuple[Finding, ...] = ()
    #: The action talks to the network (curl, git push, pip install, ...): the sandbox keeps
    #: the network off unless the policy allows it for this call.
    network: bool = False
    #: Each simple command of a shell action, normalised (quotes removed, wrappers such as
    #: ``sudo``/``env``/``timeout`` and inner ``bash -c`` scripts unwrapped): the policy
    #: matches its ``bash(...)`` rules against every one of them.
    commands: tuple[str, ...] = field(default=())
    #: Commands whose program, subcommand or arguments are decided at run time.
    opaque: tuple[Opaque, ...] = ()
    #: The porcelain spelling of plumbing commands (``git send-pack o main`` → ``git push o
    #: main``): deny and ask rules are matched against them too; allow rules are not needed.
    equivalents: tuple[str, ...] = ()
    #: Why the call's arguments cannot be judged (``command`` is a list, not a string), naming
    #: the fix: the call is not run and the model is told, as for any invalid arguments.
    invalid: str = ""

    @property
    def blocked(self) -> bool:
        return any(f.severity == "block" for f in self.findings)

    @property
    def flagged(self) -> bool:
        return any(f.severity == "flag" for f in self.findings)

    def reason(self) -> str:
        return "; ".join(f"{f.category}: {f.message}" for f in self.findings)
