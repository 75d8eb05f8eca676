"""Loop signals (seed 000) and error categories.

Counters are updated after every routed step; ``compute`` turns them into the lines shown
in the working-memory view and into ``signal`` events when a warning first appears.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

ERROR_CATEGORIES = ("not_found", "permission", "timeout", "invalid_input", "runtime")

_CATEGORY_WORDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("not_found", ("not found", "no such", "does not exist", "unknown tool")),
    ("permission", ("permission", "denied", "not allowed", "outside the workspace", "refused")),
    ("timeout", ("timeout", "timed out")),
    ("invalid_input", ("invalid", "validation", "must be", "needs ", "requires ")),
)


def categorize_error(message: str) -> str:
    """Put a tool error in one of ``ERROR_CATEGORIES`` (first match wins)."""
    text = message.lower()
    for category, words in _CATEGORY_WORDS:
        if any(word in text for word in words):
            return category
    return "runtime"


@dataclass(slots=True, frozen=True)
class Signal:
    code: str
    level: str  # "info" | "warning"
    message: str


@dataclass(slots=True)
class LoopCounters:
    """Seed 000's RunState counters (the parts the signals need)."""

    step: int = 0
    max_steps: int = 50
    tool_calls: int = 0
    failed_tool_calls: int = 0
    consecutive_non_act: int = 0
    last_action: str | None = None
    consecutive_repeats: int = 0
    same_action_failures: int = 0
    errors_by_category: Counter[str] = field(default_factory=Counter)
    phase_history: list[str] = field(default_factory=list)

    def record_non_act(self, phase: str) -> None:
        self.phase_history.append(phase)
        self.consecutive_non_act += 1

    def record_act(self, signature: str, failed: bool, category: str | None) -> None:
        self.phase_history.append("act")
        self.tool_calls += 1
        self.consecutive_non_act = 0
        if signature == self.last_action:
            self.consecutive_repeats += 1
        else:
            self.last_action = signature
            self.consecutive_repeats = 1
            self.same_action_failures = 0
        if failed:
            self.failed_tool_calls += 1
            self.same_action_failures += 1
            self.errors_by_category[category or "runtime"] += 1
        else:
            self.same_action_failures = 0


def compute(
    counters: LoopCounters, *, repeat_threshold: int = 3, failed_sub_task: int | None = None
) -> list[Signal]:
    """The signals for the next model call, info first."""
    c = counters
    signals = [Signal("steps_used", "info", f"ℹ {c.step} of {c.max_steps} steps used")]
    left = c.max_steps - c.step
    if 0 < left <= 2:
        signals.append(
            Signal("step_budget_low", "warning", f"⚠ Only {left} step(s) left. Finish or end with a report.")
        )
    if c.errors_by_category:
        counts = ", ".join(f"{n} {cat}" for cat, n in sorted(c.errors_by_category.items()))
        signals.append(Signal("error_categories", "info", f"ℹ Tool errors so far: {counts}"))
    if c.same_action_failures >= 2:
        signals.append(
            Signal(
                "same_action_failed", "warning", "⚠ Same action failed twice. Reflect before acting again."
            )
        )
    if c.consecutive_repeats >= repeat_threshold:
        signals.append(
            Signal(
                "repeated_action",
                "warning",
                f"⚠ Identical action repeated {c.consecutive_repeats} times. Its result will not change: "
                "do something different.",
            )
        )
    if c.consecutive_non_act >= 3:
        signals.append(Signal("no_action", "warning", "⚠ 3 steps without action. Act, reflect, or ask."))
    if failed_sub_task is not None:
        signals.append(
            Signal(
                "sub_task_failed",
                "warning",
                f"⚠ Sub-task {failed_sub_task} failed; what depends on it cannot start. Reflect, then retry "
                "it another way or re-plan.",
            )
        )
    if c.errors_by_category["permission"] >= 2:
        signals.append(
            Signal(
                "permission_errors",
                "warning",
                "⚠ Multiple permission errors. Try a different approach.",
            )
        )
    return signals


def render(signals: list[Signal]) -> str:
    return "\n".join(s.message for s in signals)
