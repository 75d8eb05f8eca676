"""Working memory of one run (seed 000): plan, steps, errors and key facts.

It is rebuilt into the system message before every model call as the
``--- Agent Working Memory ---`` block, and never carried into the next run.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from steward.events import Event, KeyFactEvent, PlanEvent
from steward.memory.tasks import TaskList

if TYPE_CHECKING:
    from steward.phases import AgentStep

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


#: How many of the newest step entries the view lists; older ones are folded into one line.
VIEW_STEPS = 20
#: How many key facts and errors the view lists (the newest); older ones are counted.
VIEW_FACTS = 40
VIEW_OPEN_ERRORS = 20
VIEW_RESOLVED_ERRORS = 5


@dataclass(slots=True)
class Folded:
    """A running tally of the step entries no longer listed in the view (grows in O(1) per step)."""

    count: int = 0
    first: int = 0
    last: int = 0
    acts: int = 0
    failed: int = 0
    tools: Counter[str] = field(default_factory=Counter)

    def add(self, s: Step) -> None:
        if not self.count:
            self.first = s.step
        self.count, self.last = self.count + 1, s.step
        if s.tool_name:
            self.acts += 1
            self.tools[s.tool_name] += 1
        self.failed += s.tool_status == "failed"

    def line(self) -> str:
        tools = ", ".join(f"{name} ×{n}" for name, n in self.tools.most_common(5))
        more = f", {len(self.tools) - 5} other tools" if len(self.tools) > 5 else ""
        used = f", tools: {tools}{more}" if tools else ""
        return (
            f"  [Steps {self.first}-{self.last}] {self.count} older entries folded ({self.acts} tool calls, "
            f"{self.failed} failed){used}; plan, key facts and errors above keep what matters."
        )


class NotesSection(Protocol):
    """Notes left by earlier runs on what this run touches (``steward.memory.notes``)."""

    def render(self, memory: WorkingMemory) -> str:
        """The view's ``[Notes]`` section ("" when nothing touched has a note)."""


@dataclass(slots=True)
class WorkingMemory:
    run_id: str
    plan: Plan | None = None
    steps: list[Step] = field(default_factory=list)
    errors: list[ErrorEntry] = field(default_factory=list)
    facts: list[Fact] = field(default_factory=list)
    #: The agent's own checklist (the ``tasks`` tool), beside the plan.
    tasks: TaskList = field(default_factory=TaskList)
    #: Notes on the files, jobs and runs this run touches; None: no store to read them from.
    notes: NotesSection | None = None
    #: The newest step entries listed in the view; the rest are folded as the run goes.
    view_steps: int = VIEW_STEPS
    _folded: Folded = field(default_factory=Folded, repr=False, compare=False)
    _open: list[ErrorEntry] = field(default_factory=list, repr=False, compare=False)
    _by_call: dict[str, Step] = field(default_factory=dict, repr=False, compare=False)

    # --- updates (seed 000's AgentWorkingMemory) ---

    def add_step(self, entry: Step) -> None:
        self.steps.append(entry)
        if entry.call_id:
            self._by_call[entry.call_id] = entry
        # Fold as the run goes, so the view (and its cost) stays the same size at any length.
        while len(self.steps) - self._folded.count > self.view_steps:
            old = self.steps[self._folded.count]
            self._folded.add(old)
            old.rendered = None

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
        if not entry.resolved:
            self._open.append(entry)

    def resolve_error(self, step: int, resolution_summary: str) -> None:
        for entry in self._open:
            if entry.step == step:
                entry.resolved = True
                entry.resolution_summary = resolution_summary
        self._open = [e for e in self._open if not e.resolved]

    def failed_current_sub_task(self) -> int | None:
        plan = self.plan
        if plan is None or plan.current_sub_task is None:
            return None
        task = plan.get(plan.current_sub_task)
        return task.id if task is not None and task.status == "failed" else None

    def last_unresolved_error(self) -> ErrorEntry | None:
        return self._open[-1] if self._open else None

    def unresolved(self) -> int:
        return len(self._open)

    def add_key_facts(self, facts: Iterable[Fact]) -> None:
        known = {f.fact for f in self.facts[-VIEW_FACTS:]}
        self.facts.extend(f for f in facts if f.fact not in known)  # a fact said again adds nothing

    def find_output(self, call_id: str) -> Step | None:
        return self._by_call.get(call_id)

    # --- the view ---

    def render_view(
        self,
        signals: str = "",
        *,
        output: OutputRenderer = inline_output,
        first_step_shown: int = 0,
    ) -> str:
        """Render seed 000's ``--- Agent Working Memory ---`` block.

        Only the newest ``view_steps`` step entries are listed; older ones are folded into one
        line as the run goes, so the view has the same size at step 50 and at step 10,000.
        ``first_step_shown`` folds more of them when the view itself would crowd the budget.
        """
        parts = ["--- Agent Working Memory ---"]
        if self.plan is not None:
            parts.append(_render_plan(self.plan))
        if self.tasks.items:
            parts.append(self.tasks.render())
        if self.facts:
            parts.append(_render_facts(self.facts))
        if self.notes is not None and (notes := self.notes.render(self)):
            parts.append(notes)
        if self.steps:
            parts.append(self._render_steps(output, first_step_shown))
        parts.append(_render_errors(self.errors, self._open))
        if signals:
            parts.append("[Context Signals]\n" + "\n".join(f"  {line}" for line in signals.splitlines()))
        parts.append("--- End Agent Working Memory ---")
        return "\n\n".join(parts)

    def _render_steps(self, output: OutputRenderer, first_shown: int) -> str:
        lines = ["[Steps]"]
        folded, steps = self._folded, self.steps
        first = max(first_shown, folded.count)
        if first > folded.count:  # an emergency fold beyond the running one: tally a copy
            folded = Folded(folded.count, folded.first, folded.last, folded.acts, folded.failed,
                            Counter(folded.tools))  # fmt: skip
            for s in steps[folded.count : first]:
                folded.add(s)
        if folded.count:
            lines.append(folded.line())
        for s in steps[first:]:
            cached = s.rendered
            if cached is None or cached[0] is not output:
                cached = (output, _render_step(s, output))
                s.rendered = cached
            lines.append(cached[1])
        return "\n".join(lines)


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


def _render_facts(facts: Sequence[Fact]) -> str:
    lines = ["[Key Facts]"]
    if len(facts) > VIEW_FACTS:
        lines.append(f"  ({len(facts) - VIEW_FACTS} earlier facts are in the run's log)")
    lines.extend(f"  • {f.fact}  [step {f.source_step}]" for f in facts[-VIEW_FACTS:])
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


def _render_errors(errors: Sequence[ErrorEntry], unresolved: Sequence[ErrorEntry]) -> str:
    """Every unresolved error (the newest ``VIEW_OPEN_ERRORS``) and the newest resolved ones."""
    if not errors:
        return "[Errors]\n  (none)"
    lines = ["[Errors]"]
    resolved: list[ErrorEntry] = []
    for e in reversed(errors[-(VIEW_RESOLVED_ERRORS + VIEW_OPEN_ERRORS) :]):
        if e.resolved and len(resolved) < VIEW_RESOLVED_ERRORS:
            resolved.append(e)
    shown = sorted([*resolved, *unresolved[-VIEW_OPEN_ERRORS:]], key=lambda e: e.step)
    if len(shown) < len(errors):
        lines.append(f"  ({len(errors) - len(shown)} other errors are in the run's log)")
    for e in shown:
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


# --- what the phases that only think do to the working memory --------------------------


def record_phase(mem: WorkingMemory, step: AgentStep, n: int) -> tuple[dict[str, Any], list[Event]]:
    """Apply a ``plan``, ``reason``, ``verify`` or ``reflect`` step; return its ack and events."""
    match step.phase:
        case "plan":
            assert step.plan is not None
            plan = mem.set_plan(step.plan.goal, step.plan.sub_tasks)
            ack = {
                "acknowledged": True,
                "plan_version": plan.version,
                "current_sub_task": plan.current_sub_task,
            }
            return ack, [PlanEvent(**plan_event_payload(plan))]
        case "verify":
            known = len(mem.facts)
            ack = _verify(mem, step, n)
            events: list[Event] = [
                KeyFactEvent(f.fact, f.source_step, f.source_tool) for f in mem.facts[known:]
            ]
            if step.sub_task_outcome and mem.plan is not None:
                events.append(PlanEvent(**plan_event_payload(mem.plan)))
            return ack, events
        case "reflect":
            error = mem.last_unresolved_error()
            if error is not None:
                mem.resolve_error(error.step, step.summary)
            return {"acknowledged": True, "resolved_error_step": error.step if error else None}, []
        case _:
            return {"acknowledged": True, "step": n}, []


def _verify(mem: WorkingMemory, step: AgentStep, n: int) -> dict[str, Any]:
    if step.key_facts:
        last_tool = next((s.tool_name for s in reversed(mem.steps[-50:]) if s.tool_name), None)
        mem.add_key_facts(Fact(f, n, last_tool) for f in step.key_facts)
    current = mem.plan.current_sub_task if mem.plan else None
    if step.sub_task_outcome and current is not None:
        mem.update_sub_task_status(current, step.sub_task_outcome)
        if step.sub_task_outcome == "done":
            current = mem.advance_to_next_sub_task()
    return {
        "acknowledged": True,
        "facts_recorded": len(step.key_facts),
        "sub_task_outcome": step.sub_task_outcome,
        "current_sub_task": current,
    }


def attempt_failed(mem: WorkingMemory) -> bool:
    """Whether a new plan replaces one whose attempt failed (an open error or a failed sub-task)."""
    if mem.plan is None:
        return False
    return mem.last_unresolved_error() is not None or any(t.status == "failed" for t in mem.plan.sub_tasks)
