"""The rules a run started under, recorded with it and held for its whole life.

A run's ``run_start`` event carries its policy: the allow/ask/deny rules, the write switch, the
mode and the secret files it began with, whatever made them (flags on the command line, a
persona, a job, the configuration files of that moment). Whoever continues the run later (an
answer, an approval or a resume from the command line, the server, a worker, the Python API)
goes on under those rules joined with its own: a rule recorded at the start is never dropped,
writing stays off if it was off, and the mode is the recorded one (a later switch is an event
of its own in the log). Nothing a later configuration says can widen what the run began with.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from steward.safety.policy.rules import Action, Policy, Rule

_ACTIONS: tuple[Action, ...] = ("allow", "ask", "deny")


def record(policy: Policy) -> dict[str, Any]:
    """What ``run_start`` keeps of ``policy`` (plain JSON)."""
    return {
        "mode": policy.mode,
        "write": policy.write,
        **{action: [str(r) for r in policy.rules if r.action == action] for action in _ACTIONS},
        "secret_files": list(policy.secret_files),
    }


def held(current: Policy, recorded: Mapping[str, Any]) -> Policy:
    """The policy a continued run goes on under: ``current`` joined with what its start recorded.

    Deny wins over ask over allow, so adding the recorded rules to the current ones keeps every
    recorded refusal and question. Programs the current sandbox masks stay masked.
    """
    rules = list(current.rules)
    known = {(r.action, str(r)) for r in rules}
    for action in _ACTIONS:
        for text in recorded.get(action) or ():
            if (action, str(text)) not in known:
                rules.append(Rule.parse(str(text), action, "the run's start"))
                known.add((action, str(text)))
    secret = tuple(dict.fromkeys([*current.secret_files, *map(str, recorded.get("secret_files") or ())]))
    mode = recorded.get("mode")
    return Policy(
        rules,
        mode="autonomous" if mode == "autonomous" else "structured" if mode else current.mode,
        write=current.write and recorded.get("write") is not False,
        secret_files=secret,
        masked=current.masked,
    )
