"""Approvals: a pending approval is bound to one exact call and has a deadline.

The binding is a hash of the tool name and its canonical JSON arguments: approving one call
never approves a different one. An approval that is not answered by its deadline takes its
default action (deny unless configured otherwise).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from steward.atomic import write_atomic
from steward.errors import ConfigError

Verdict = Literal["approved", "denied", "expired"]


def call_hash(tool: str, arguments: Mapping[str, Any], fingerprint: str = "") -> str:
    """Binds an approval to one tool, these exact arguments, and (for tools that can change
    under us, such as an MCP server's) what the tool said it does when it was approved."""
    subject: dict[str, Any] = {"tool": tool, "arguments": arguments}
    if fingerprint:
        subject["fingerprint"] = fingerprint
    canonical = json.dumps(subject, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(slots=True, frozen=True)
class ApprovalSettings:
    timeout_s: float = 600.0
    on_timeout: Literal["deny", "allow"] = "deny"


def deadline_after(settings: ApprovalSettings, now: float | None = None) -> float:
    return (time.time() if now is None else now) + settings.timeout_s


def remember_rule(config_file: Path, rule: str) -> None:
    """Add ``rule`` to ``[policy] allow`` of the project's config, keeping its comments."""
    import tomlkit

    try:
        document = (
            tomlkit.parse(config_file.read_text(encoding="utf-8"))
            if config_file.exists()
            else tomlkit.document()
        )
    except (OSError, UnicodeDecodeError, tomlkit.exceptions.ParseError) as exc:
        raise ConfigError(f"{config_file}: cannot remember the rule {rule!r}: {exc}") from None
    policy = document.get("policy")
    if policy is None:
        policy = tomlkit.table()
        document["policy"] = policy
    allow = policy.get("allow")
    if allow is None:
        allow = tomlkit.array()
        policy["allow"] = allow
    if rule not in allow:
        allow.append(rule)
    try:
        # Renamed into place: a run starting meanwhile reads the old file or the new, never half.
        write_atomic(config_file, tomlkit.dumps(document))
    except OSError as exc:
        raise ConfigError(f"{config_file}: cannot remember the rule {rule!r}: {exc.strerror}") from None
