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
class GuardVerdict:
    findings: tuple[Finding, ...] = ()
    #: The action talks to the network (curl, git push, pip install, ...): the sandbox keeps
    #: the network off unless the policy allows it for this call.
    network: bool = False
    #: Each simple command of a shell action, normalised (quotes removed, wrappers such as
    #: ``sudo``/``env``/``timeout`` and inner ``bash -c`` scripts unwrapped): the policy
    #: matches its ``bash(...)`` rules against every one of them.
    commands: tuple[str, ...] = field(default=())

    @property
    def blocked(self) -> bool:
        return any(f.severity == "block" for f in self.findings)

    @property
    def flagged(self) -> bool:
        return any(f.severity == "flag" for f in self.findings)

    def reason(self) -> str:
        return "; ".join(f"{f.category}: {f.message}" for f in self.findings)
