"""The ``agent_step`` tool (seed 000): its schema, the phase guide (full and compact), and parsing.

The model drives its own cycle by calling ``agent_step`` with a phase — ``plan``,
``reason``, ``act``, ``verify``, ``reflect``, ``feedback`` or ``end`` — and the fields that
phase needs. Parsing never raises into the loop: a malformed step becomes a message the
model can fix.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

from steward.models.base import ToolSpec
from steward.tools.compact import without_descriptions

AGENT_STEP = "agent_step"

Phase = Literal["plan", "reason", "act", "verify", "reflect", "feedback", "end"]
EndStatus = Literal["solved", "partial", "stuck"]
PHASES: tuple[str, ...] = get_args(Phase)
END_STATUSES: tuple[str, ...] = get_args(EndStatus)
_PHASE_BY_NAME: dict[str, Phase] = {p: p for p in get_args(Phase)}

PHASE_GUIDE = """\
How to work: call the agent_step tool once per step with a phase.
PLAN     — for multi-part tasks, early: a plan of sub-tasks (ids, titles, depends_on). Call again to re-plan.
REASON   — think through uncertainty before acting; only when the way forward is unclear.
ACT      — run one tool: action.tool_name and action.tool_input. (You may also call tools directly.)
VERIFY   — after an act that matters: did it work? Record key_facts; set sub_task_outcome done|failed.
REFLECT  — when something failed: why? Choose a genuinely different approach; never repeat a failed action.
FEEDBACK — ask the user (feedback_message) only for information no tool can find. Rare.
END      — when the goal is achieved or no progress is possible: end_status solved|partial|stuck, end_message.
           Only END solved says the goal is done; a reply with no tool call is taken as an answer.
Your plan, steps, key facts, errors and loop signals are shown in the Agent Working Memory block of \
this system message, updated before every step. Tool outputs appear once, as tool results; old ones \
may be elided — recall_output(call_id) shows one again."""

AGENT_STEP_SPEC = ToolSpec(
    name=AGENT_STEP,
    description="Record one step of your work cycle (see the phase guide). For phase 'act', the tool in "
    "action is run and its output is returned.",
    parameters={
        "type": "object",
        "properties": {
            "phase": {"type": "string", "enum": list(PHASES)},
            "thinking": {"type": "string", "description": "Your reasoning for this step (brief)."},
            "summary": {"type": "string", "description": "One line saying what this step does or found."},
            "action": {
                "type": "object",
                "description": "Required when phase is 'act': the tool to run.",
                "properties": {
                    "tool_name": {"type": "string"},
                    "tool_input": {"type": "object", "description": "Arguments for the tool."},
                },
                "required": ["tool_name"],
            },
            "plan": {
                "type": "object",
                "description": "Required when phase is 'plan'. Structured plan for this task.",
                "properties": {
                    "goal": {"type": "string"},
                    "sub_tasks": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "id": {"type": "number"},
                                "title": {"type": "string"},
                                "depends_on": {"type": "array", "items": {"type": "number"}},
                            },
                            "required": ["id", "title"],
                        },
                    },
                },
                "required": ["goal", "sub_tasks"],
            },
            "key_facts": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Optional. Facts learned from the last action. Only use in verify phase.",
            },
            "sub_task_outcome": {
                "type": "string",
                "enum": ["done", "failed"],
                "description": "Optional. Mark the current plan sub-task as done or failed.",
            },
            "feedback_message": {
                "type": "string",
                "description": "Required when phase is 'feedback': the question for the user.",
            },
            "end_status": {
                "type": "string",
                "enum": list(END_STATUSES),
                "description": "Required when phase is 'end'.",
            },
            "end_message": {
                "type": "string",
                "description": "Required when phase is 'end': the final report for the user.",
            },
        },
        "required": ["phase", "summary"],
    },
)


COMPACT_PHASE_GUIDE = """\
Work in steps: call agent_step once per step with a phase.
plan: sub_tasks (id, title, depends_on), early for multi-part tasks. act: action.tool_name and \
action.tool_input (or call a tool directly). verify: key_facts, sub_task_outcome done|failed. \
reflect: after a failure, try something different. reason: think when unsure. feedback: \
feedback_message, only for what no tool can find. end: end_status solved|partial|stuck, end_message \
(only end solved says the goal is done).
Your plan and progress are in the Agent Working Memory below; recall_output(call_id) shows an \
elided tool output again."""

COMPACT_AGENT_STEP_SPEC = ToolSpec(
    name=AGENT_STEP,
    description="Record one step of your work; phase 'act' runs action's tool.",
    # The same fields, types, enums and required lists: parsing does not depend on the prompt.
    parameters=without_descriptions(AGENT_STEP_SPEC.parameters),
)


def agent_step_spec(prompt: str) -> ToolSpec:
    """The agent_step tool as the ``prompt`` style offers it ("full" or "compact")."""
    return COMPACT_AGENT_STEP_SPEC if prompt == "compact" else AGENT_STEP_SPEC


def phase_guide(prompt: str) -> str:
    """The phase guide for the ``prompt`` style ("full" or "compact")."""
    return COMPACT_PHASE_GUIDE if prompt == "compact" else PHASE_GUIDE


@dataclass(slots=True, frozen=True)
class PlanInput:
    goal: str
    sub_tasks: tuple[tuple[int, str, tuple[int, ...]], ...]


@dataclass(slots=True, frozen=True)
class ActionInput:
    tool_name: str
    tool_input: dict[str, Any]


@dataclass(slots=True, frozen=True)
class AgentStep:
    phase: Phase
    thinking: str = ""
    summary: str = ""
    action: ActionInput | None = None
    plan: PlanInput | None = None
    key_facts: tuple[str, ...] = ()
    sub_task_outcome: Literal["done", "failed"] | None = None
    feedback_message: str = ""
    end_status: EndStatus | None = None
    end_message: str = ""


class StepInputError(ValueError):
    """A malformed agent_step; the message goes back to the model."""


def _text(raw: Mapping[str, Any], key: str) -> str:
    value = raw.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise StepInputError(f"{key} must be a string")
    return value


def _object(value: Any) -> Any:
    # Weaker models often send a nested object as a JSON string; accept it when it parses.
    if isinstance(value, str) and value.strip().startswith(("{", "[")):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


def parse_agent_step(raw: Mapping[str, Any]) -> AgentStep:
    """Check an agent_step call; raise ``StepInputError`` with a fixable message."""
    given = raw.get("phase")
    phase = _PHASE_BY_NAME.get(given.strip().lower()) if isinstance(given, str) else None
    if phase is None:
        raise StepInputError(f"phase must be one of {', '.join(PHASES)}; got {given!r}")
    summary = _text(raw, "summary")
    step = AgentStep(phase=phase, thinking=_text(raw, "thinking"), summary=summary)
    match phase:
        case "plan":
            return _with(step, plan=_parse_plan(_object(raw.get("plan"))))
        case "act":
            return _with(step, action=_parse_action(_object(raw.get("action"))))
        case "verify":
            return _parse_verify(step, raw)
        case "feedback":
            question = _text(raw, "feedback_message").strip() or summary.strip()
            if not question:
                raise StepInputError("phase 'feedback' needs feedback_message: the question for the user")
            return _with(step, feedback_message=question)
        case "end":
            given = raw.get("end_status")
            status = given.strip().lower() if isinstance(given, str) else given
            if status not in END_STATUSES:
                raise StepInputError(
                    f"phase 'end' needs end_status: one of {', '.join(END_STATUSES)}; got {given!r}"
                )
            message = _text(raw, "end_message").strip() or summary.strip()
            if not message:
                raise StepInputError("phase 'end' needs end_message: the final report for the user")
            return _with(step, end_status=status, end_message=message)
        case _:
            return step


def _parse_verify(step: AgentStep, raw: Mapping[str, Any]) -> AgentStep:
    facts = _object(raw.get("key_facts")) or []
    if not isinstance(facts, list) or not all(isinstance(f, str) for f in facts):
        raise StepInputError("key_facts must be a list of strings")
    outcome = raw.get("sub_task_outcome")
    if outcome not in (None, "done", "failed"):
        raise StepInputError("sub_task_outcome must be 'done' or 'failed'")
    return _with(step, key_facts=tuple(f for f in facts if f.strip()), sub_task_outcome=outcome)


def _with(step: AgentStep, **changes: Any) -> AgentStep:
    fields = {name: getattr(step, name) for name in AgentStep.__slots__}
    fields.update(changes)
    return AgentStep(**fields)


def _parse_action(raw: Any) -> ActionInput:
    if not isinstance(raw, Mapping) or not isinstance(raw.get("tool_name"), str) or not raw["tool_name"]:
        raise StepInputError("phase 'act' needs action: {tool_name: ..., tool_input: {...}}")
    tool_input = _object(raw.get("tool_input"))
    if tool_input is None:
        tool_input = {}
    if not isinstance(tool_input, Mapping):
        raise StepInputError("action.tool_input must be an object of the tool's arguments")
    return ActionInput(tool_name=raw["tool_name"], tool_input=dict(tool_input))


def _parse_plan(raw: Any) -> PlanInput:
    if not isinstance(raw, Mapping):
        raise StepInputError("phase 'plan' requires a plan object: {goal: ..., sub_tasks: [{id, title}]}")
    goal = raw.get("goal")
    tasks = raw.get("sub_tasks")
    if not isinstance(goal, str) or not goal.strip():
        raise StepInputError("plan.goal must be a non-empty string")
    if not isinstance(tasks, list) or not tasks:
        raise StepInputError("plan.sub_tasks must be a non-empty list of {id, title, depends_on}")
    parsed: list[tuple[int, str, tuple[int, ...]]] = []
    for n, task in enumerate(tasks, start=1):
        if not isinstance(task, Mapping):
            raise StepInputError(f"plan.sub_tasks[{n - 1}] must be an object with id and title")
        task_id, title, deps = task.get("id", n), task.get("title"), task.get("depends_on") or []
        if isinstance(task_id, float) and task_id.is_integer():
            task_id = int(task_id)
        if not isinstance(task_id, int) or isinstance(task_id, bool):
            raise StepInputError(f"plan.sub_tasks[{n - 1}].id must be a whole number")
        if not isinstance(title, str) or not title.strip():
            raise StepInputError(f"plan.sub_tasks[{n - 1}].title must be a non-empty string")
        if not isinstance(deps, list) or not all(isinstance(d, int | float) for d in deps):
            raise StepInputError(f"plan.sub_tasks[{n - 1}].depends_on must be a list of sub-task ids")
        parsed.append((task_id, title.strip(), tuple(int(d) for d in deps)))
    _check_graph(parsed)
    return PlanInput(goal=goal.strip(), sub_tasks=tuple(parsed))


def _check_graph(tasks: list[tuple[int, str, tuple[int, ...]]]) -> None:
    ids = [t[0] for t in tasks]
    if len(set(ids)) != len(ids):
        raise StepInputError("plan.sub_tasks ids must be unique")
    deps = {t[0]: t[2] for t in tasks}
    for task_id, needs in deps.items():
        for d in needs:
            if d not in deps:
                raise StepInputError(f"sub-task {task_id} depends on {d}, which is not in the plan")
    # Kahn's algorithm: a cycle would leave sub-tasks that can never start.
    remaining = {k: set(v) for k, v in deps.items()}
    for _ in range(len(remaining) + 1):
        ready = [k for k, v in remaining.items() if not v]
        if not ready:
            break
        for k in ready:
            del remaining[k]
        for v in remaining.values():
            v.difference_update(ready)
    if remaining:
        raise StepInputError(f"plan has a dependency cycle among sub-tasks {sorted(remaining)}")
