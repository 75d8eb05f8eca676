"""``delegate(role, goal)``: an agent hands a sub-goal to another persona, as a child job.

The tool exists only in runs a worker drives for a job (their run id is the job's id). A call
queues the child job (once: a second call at the same step with the same words finds it again)
and, until the child ends, pauses the run the way an approval does: the run waits, the
worker gives its slot back, and the job is put back in the queue when the child ends (by the
child's worker, or by the parent's own worker if the child was quicker). The rebuilt run then
calls ``delegate`` again and this time gets the child's answer, or its failure, as the result.

Bounds: a child is at most ``max_depth`` levels below the job a person submitted, and one job
has at most ``max_children`` children. A child gets no more than its ancestors had: the tools
it may use are what its persona allows *and* each ancestor's persona allows, and their deny and
ask rules, a structured mode and a write switch that is off apply to it as well.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from steward.errors import ApprovalRequired, ConfigError, StewardError
from steward.jobs.store import Job, JobStore
from steward.models.base import ToolSpec
from steward.personas import Persona, find_persona, list_personas
from steward.safety.policy.approvals import call_hash
from steward.text import excerpt
from steward.tools.base import ToolContext, ToolResult, Toolset

DELEGATE = "delegate"
_WAIT_S = 30 * 24 * 3600.0  # a child job has no deadline a person must meet; this only bounds the record


@dataclass(frozen=True, slots=True)
class DelegationLimits:
    max_depth: int = 2  # a person's job is depth 0; its children 1; theirs 2
    max_children: int = 4  # children one job may start


_SPEC = ToolSpec(
    name=DELEGATE,
    description=(
        "Hand a sub-goal to another agent persona. It runs as its own job while this run waits "
        "(without holding a worker); its final answer, or why it failed, comes back as this "
        "call's result. Use it for self-contained work another role does better (research, a "
        "review). The other agent does not see this conversation: say everything it needs."
    ),
    parameters={
        "type": "object",
        "properties": {
            "role": {
                "type": "string",
                "description": "The persona to hand it to, e.g. researcher or reviewer.",
            },
            "goal": {
                "type": "string",
                "description": "What the other agent must achieve, with the context it needs.",
            },
        },
        "required": ["role", "goal"],
        "additionalProperties": False,
    },
    idempotent=True,  # a second call at the same step with the same words finds the same child
)


class DelegateToolset(Toolset):
    """The ``delegate`` tool, for runs that are jobs of ``jobs``."""

    def __init__(self, jobs: JobStore, limits: DelegationLimits | None = None) -> None:
        self.jobs = jobs
        self.limits = limits or DelegationLimits()

    async def get_tools(self, ctx: ToolContext) -> Sequence[ToolSpec]:
        return [_SPEC]

    async def call_tool(self, name: str, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        role, goal = arguments.get("role"), arguments.get("goal")
        if not isinstance(role, str) or not role.strip() or not isinstance(goal, str) or not goal.strip():
            return _error('delegate needs "role" (a persona name) and "goal" (non-empty text).')
        try:
            child = await self._child(role.strip(), goal, ctx)
        except _Refused as refused:
            return _error(str(refused))
        if child.ended:
            if child.status == "done":
                return ToolResult(
                    f"Job {child.id} ({child.role}) finished. Its answer:\n{child.result or ''}"
                )
            why = child.error or child.result or "no reason was recorded"
            return _error(f"Job {child.id} ({child.role}) ended {child.status}: {why}")
        args = {"role": role, "goal": goal}
        raise ApprovalRequired(
            tool=DELEGATE, arguments=args, call_hash=call_hash(DELEGATE, args),
            reason=f"waiting for job {child.id} ({child.role}): {excerpt(goal, 160)}", suggestion=None,
            deadline=time.time() + _WAIT_S, waits_for=child.id,
        )  # fmt: skip

    async def _child(self, role: str, goal: str, ctx: ToolContext) -> Job:
        jobs, limits = self.jobs, self.limits
        try:
            parent = await jobs.get(ctx.run_id)
        except StewardError:
            raise _Refused("delegate works only in a job run by a worker (steward submit)") from None
        if parent.id != ctx.run_id:  # found by a prefix of its id (even ""): this run is not that job
            raise _Refused("delegate works only in a job run by a worker (steward submit)")
        digest = hashlib.sha256(f"{role}\0{goal}".encode()).hexdigest()[:16]
        key = f"delegate:{parent.id}:{ctx.step}:{digest}"
        found = await jobs.by_key(key)
        if found is not None:
            return found
        depth = len(await ancestors(jobs, parent, limits.max_depth + 1)) + 1
        if depth > limits.max_depth:
            raise _Refused(
                f"delegation is limited to {limits.max_depth} levels and this job is already "
                f"{depth - 1} deep; do this part yourself"
            )
        children = await jobs.list(parent_id=parent.id, limit=limits.max_children + 1)
        if len(children) >= limits.max_children:
            raise _Refused(
                f"this job has started {len(children)} jobs already (the limit is {limits.max_children}); "
                "do the rest yourself"
            )
        try:
            find_persona(role, Path(parent.workspace))
        except ConfigError as exc:
            known = ", ".join(sorted(list_personas(Path(parent.workspace)))) or "none"
            raise _Refused(f"{exc} (personas here: {known})") from None
        child, _ = await jobs.submit(
            role, goal, workspace=parent.workspace, priority=parent.priority, parent_id=parent.id,
            idempotency_key=key, max_attempts=parent.max_attempts,
        )  # fmt: skip
        return child


class _Refused(Exception):  # noqa: N818 - a refusal the model reads, not a failure
    pass


def _error(text: str) -> ToolResult:
    return ToolResult(text, is_error=True, category="invalid")


async def ancestors(jobs: JobStore, job: Job, limit: int) -> list[Job]:
    """The jobs above ``job``, nearest first (at most ``limit``: the chain is bounded)."""
    chain: list[Job] = []
    current = job
    while current.parent_id is not None and len(chain) < limit:
        current = await jobs.get(current.parent_id)
        chain.append(current)
    return chain


def inherited_layer(child: Persona, above: Sequence[tuple[Persona, Any]]) -> dict[str, Any]:
    """The child persona's configuration layer, no wider than what its ancestors had.

    ``above`` pairs each ancestor's persona with its effective configuration (``Config``).
    Their deny and ask rules are added to the child's (deny and ask win over allow), the
    child's allow rules are kept only where every ancestor's persona has them too, and a
    structured mode, a write switch that is off, and denying at an approval's deadline carry down.
    """
    layer = child.layer()
    policy: dict[str, Any] = dict(layer.get("policy", {}))
    # The child's own allow rules would lift what makes its ancestors ask (network use, a
    # secret file): only a rule every ancestor's persona allows too is kept.
    allowed = [
        rule for rule in policy.get("allow", []) if all(rule in p.policy.get("allow", []) for p, _ in above)
    ]
    if "allow" in policy:
        policy["allow"] = allowed
    for persona, config in above:
        for action in ("deny", "ask"):
            policy[action] = [*policy.get(action, []), *persona.policy.get(action, [])]
        if config.policy.mode == "structured":
            policy["mode"] = "structured"
        if not config.policy.write:
            policy["write"] = False
        if config.policy.on_timeout == "deny":
            policy["on_timeout"] = "deny"
    if policy:
        layer["policy"] = policy
    return layer


def narrowed(child: Persona, above: Sequence[Persona]) -> Persona:
    """``child`` whose tools are also limited to what every ancestor's persona allows."""
    return replace(child, within=tuple(p.tools for p in above if p.tools is not None))
