"""Working memory of one run (seed 000): plan, steps, errors and key facts.

It is rebuilt into the system message before every model call as the
``--- Agent Working Memory ---`` block, and never carried into the next run.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

SubTaskStatus = Literal["pending", "in_progress", "done", "failed"]
ToolStatus = Literal["success", "failed"]

_MARK = {"done": "✓", "failed": "✗", "in_progress": "→", "pending": "○"}


@dataclass(slots=True)
class SubTask:
    id: int
    title: str
    status: SubTaskStatus = "pending"
    depends_on: tuple[int, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "title": self.title,
            "status": self.status,
            "depends_on": list(self.depends_on),
        }


@dataclass(slots=True)
class Plan:
    goal: str
    sub_tasks: list[SubTask]
    current_sub_task: int | None
    version: int = 1

    def get(self, sub_task_id: int) -> SubTask | None:
        return next((t for t in self.sub_tasks if t.id == sub_task_id), None)


@dataclass(slots=True)
class Step:
    """One routed action or phase. ``tool_output`` is the full output, never truncated."""

    step: int
    phase: str
    thinking: str
    summary: str
    tool_name: str | None = None
    tool_input: dict[str, Any] | None = None
    tool_output: str | None = None
    tool_status: ToolStatus | None = None
    duration_ms: float | None = None
    call_id: str | None = None
    #: The entry as last rendered, with the renderer that made it: a step never changes once
    #: recorded, so the view need not format it again before every model call.
    rendered: tuple[OutputRenderer, str] | None = field(default=None, repr=False, compare=False)


@dataclass(slots=True)
class ErrorEntry:
    step: int
    error_message: str
    tool_name: str | None = None
    category: str = "runtime"
    resolved: bool = False
    resolution_summary: str | None = None


@dataclass(slots=True)
class Fact:
    fact: str
    source_step: int
    source_tool: str | None = None


# How a step's tool output appears in the view: the full text (seed 000), or a short
# reference when the output already travels in the transcript (no text is sent twice).
OutputRenderer = Callable[[Step], str]


def inline_output(step: Step) -> str:
    return step.tool_output or ""


@dataclass(slots=True)
class WorkingMemory:
    run_id: str
    plan: Plan | None = None
    steps: list[Step] = field(default_factory=list)
    errors: list[ErrorEntry] = field(default_factory=list)
    facts: list[Fact] = field(default_factory=list)

    # --- updates (seed 000's AgentWorkingMemory) ---

    def add_step(self, entry: Step) -> None:
        self.steps.append(entry)

    def set_plan(self, goal: str, sub_tasks: Iterable[tuple[int, str, Sequence[int]]]) -> Plan:
        """Install a new plan version; the first sub-task whose dependencies are met is current."""
        version = self.plan.version + 1 if self.plan else 1
        tasks = [SubTask(id=i, title=t, depends_on=tuple(d)) for i, t, d in sub_tasks]
        self.plan = Plan(goal=goal, sub_tasks=tasks, current_sub_task=None, version=version)
        self.advance_to_next_sub_task()
        return self.plan

    def update_sub_task_status(self, sub_task_id: int, status: SubTaskStatus) -> None:
        task = self.plan.get(sub_task_id) if self.plan else None
        if task is not None:
            task.status = status

    def advance_to_next_sub_task(self) -> int | None:
        """Make the next pending sub-task whose dependencies are all done current."""
        plan = self.plan
        if plan is None:
            return None
        done = {t.id for t in plan.sub_tasks if t.status == "done"}
        for task in plan.sub_tasks:
            if task.status == "pending" and all(d in done for d in task.depends_on):
                task.status = "in_progress"
                plan.current_sub_task = task.id
                return task.id
        plan.current_sub_task = None
        return None

    def add_error(self, entry: ErrorEntry) -> None:
        self.errors.append(entry)

    def resolve_error(self, step: int, resolution_summary: str) -> None:
        for entry in self.errors:
            if entry.step == step and not entry.resolved:
                entry.resolved = True
                entry.resolution_summary = resolution_summary

    def failed_current_sub_task(self) -> int | None:
        plan = self.plan
        if plan is None or plan.current_sub_task is None:
            return None
        task = plan.get(plan.current_sub_task)
        return task.id if task is not None and task.status == "failed" else None

    def last_unresolved_error(self) -> ErrorEntry | None:
        return next((e for e in reversed(self.errors) if not e.resolved), None)

    def add_key_facts(self, facts: Iterable[Fact]) -> None:
        self.facts.extend(facts)

    def find_output(self, call_id: str) -> Step | None:
        return next((s for s in reversed(self.steps) if s.call_id == call_id), None)

    # --- the view ---

    def render_view(
        self,
        signals: str = "",
        *,
        output: OutputRenderer = inline_output,
        first_step_shown: int = 0,
    ) -> str:
        """Render seed 000's ``--- Agent Working Memory ---`` block.

        ``first_step_shown`` lets the context builder fold the oldest step entries into one
        line when the view itself would crowd the request budget.
        """
        parts = ["--- Agent Working Memory ---"]
        if self.plan is not None:
            parts.append(_render_plan(self.plan))
        if self.facts:
            lines = ["[Key Facts]"]
            lines.extend(f"  • {f.fact}  [step {f.source_step}]" for f in self.facts)
            parts.append("\n".join(lines))
        if self.steps:
            parts.append(_render_steps(self.steps, output, first_step_shown))
        parts.append(_render_errors(self.errors))
        if signals:
            parts.append("[Context Signals]\n" + "\n".join(f"  {line}" for line in signals.splitlines()))
        parts.append("--- End Agent Working Memory ---")
        return "\n\n".join(parts)


def _render_plan(plan: Plan) -> str:
    width = max(len(f"Sub-task {t.id}: {t.title}") for t in plan.sub_tasks) + 2 if plan.sub_tasks else 0
    lines = [f"[PLAN v{plan.version}]  Goal: {plan.goal}"]
    for task in plan.sub_tasks:
        label = f"Sub-task {task.id}: {task.title}"
        current = task.id == plan.current_sub_task
        mark = "→" if current and task.status != "failed" else _MARK[task.status]
        if current:
            suffix = "← CURRENT (failed)" if task.status == "failed" else "← CURRENT"
        elif task.status == "pending" and task.depends_on:
            suffix = "(needs: " + ", ".join(str(d) for d in task.depends_on) + ")"
        elif task.status == "failed":
            suffix = "(failed)"
        else:
            suffix = ""
        lines.append(f"  {mark} {label.ljust(width)}{suffix}".rstrip() if suffix else f"  {mark} {label}")
    return "\n".join(lines)


def _render_steps(steps: Sequence[Step], output: OutputRenderer, first_shown: int) -> str:
    lines = ["[Steps]"]
    hidden = [s for s in steps[:first_shown]]
    if hidden:
        acts = sum(1 for s in hidden if s.tool_name)
        failed = sum(1 for s in hidden if s.tool_status == "failed")
        lines.append(
            f"  [Steps {hidden[0].step}-{hidden[-1].step}] {len(hidden)} older entries folded "
            f"({acts} tool calls, {failed} failed); plan, key facts and errors above keep what matters."
        )
    for s in steps[first_shown:]:
        cached = s.rendered
        if cached is None or cached[0] is not output:
            cached = (output, _render_step(s, output))
            s.rendered = cached
        lines.append(cached[1])
    return "\n".join(lines)


def _render_step(s: Step, output: OutputRenderer) -> str:
    head = f"  [Step {s.step}] {s.phase.upper()}: {s.summary}".rstrip()
    if s.tool_name is None:
        return head
    text = output(s)
    if s.tool_status == "failed":
        text = f"FAILED: {text}"
    lines = [head, f"    Tool: {s.tool_name}", "    Result: " + text.replace("\n", "\n    ")]
    if s.duration_ms is not None:
        lines.append(f"    Duration: {round(s.duration_ms)}ms")
    return "\n".join(lines)


def _render_errors(errors: Sequence[ErrorEntry]) -> str:
    if not errors:
        return "[Errors]\n  (none)"
    lines = ["[Errors]"]
    for e in errors:
        where = f"[step {e.step}] {e.tool_name}: " if e.tool_name else f"[step {e.step}] "
        first_line = error_summary(e.error_message)
        if e.resolved:
            lines.append(f"  ✓ {where}{first_line} ({e.category}) → resolved: {e.resolution_summary}")
        else:
            lines.append(f"  ✗ {where}{first_line} ({e.category}) — unresolved")
    return "\n".join(lines)


def error_summary(message: str, limit: int = 200) -> str:
    """One line for the error register; the full text is in the transcript.

    Command output usually ends with its verdict (``FAILED (errors=1)``, ``exit code: 1``),
    so the closing lines say more than the first one.
    """
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    if not lines:
        return "(no message)"
    summary = lines[0]
    if len(lines) > 1 and lines[-1].startswith("exit code"):
        verdict = next(
            (
                line
                for line in reversed(lines[:-1])
                if any(w in line.lower() for w in ("error", "fail", "denied"))
            ),
            None,
        )
        summary = f"{verdict} · {lines[-1]}" if verdict else lines[-1]
    return summary if len(summary) <= limit else summary[: limit - 1] + "…"


def plan_event_payload(plan: Plan) -> dict[str, Any]:
    return {
        "version": plan.version,
        "goal": plan.goal,
        "sub_tasks": [t.as_dict() for t in plan.sub_tasks],
        "current": plan.current_sub_task,
    }


def compact_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
