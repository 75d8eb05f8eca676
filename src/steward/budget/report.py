"""What a recorded run spent, per phase and per tool: tokens, money and time, read from its events.

``runs show``, the web page and batch reports read it. A step's tokens are the replies of that
step (and the summaries made in it); its phase is the ``agent_step`` phase it chose (``act``
for a direct tool call, ``end`` for a plain reply, as the chat export labels it); a tool gets an
equal share of the tokens of the steps that called it, and its own running time. Time is wall
time between events, without the waits for a person.

Money is what each reply and summary cost when it was made, as its event recorded it: prices
changed since do not change a run's past. Events recorded before they carried their cost are
priced at the prices given (the ``[prices]`` entries and the table, as they are now).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from steward import events as ev
from steward.budget.prices import PriceEntry, Rates, rates_for
from steward.models.base import Usage


@dataclass(slots=True)
class Line:
    """One phase or tool: how many steps or calls, their tokens, money (None: no price) and time."""

    name: str
    count: int = 0
    tokens: int = 0
    cost_usd: float | None = 0.0
    time_s: float = 0.0

    def add(self, tokens: float, cost: float | None, seconds: float, count: int = 0) -> None:
        self.count += count
        self.tokens += round(tokens)
        self.cost_usd = None if cost is None or self.cost_usd is None else self.cost_usd + cost
        self.time_s += seconds

    def as_dict(self) -> dict[str, object]:
        return {"name": self.name, "count": self.count, "tokens": self.tokens, "cost_usd": self.cost_usd,
                "time_s": round(self.time_s, 3)}  # fmt: skip


@dataclass(slots=True)
class RunCost:
    model: str = ""
    usage: Usage = field(default_factory=Usage)
    cost_usd: float | None = 0.0
    #: Some call had no price when it was made (a price added since does not change that).
    unpriced_then: bool = False
    time_s: float = 0.0
    tool_calls: int = 0
    phases: dict[str, Line] = field(default_factory=dict)
    tools: dict[str, Line] = field(default_factory=dict)

    @property
    def tokens(self) -> int:
        return self.usage.input_tokens + self.usage.output_tokens

    def as_dict(self) -> dict[str, object]:
        return {
            "model": self.model, "tokens": self.tokens, "usage": self.usage.as_dict(),
            "cost_usd": self.cost_usd, "time_s": round(self.time_s, 3), "tool_calls": self.tool_calls,
            "phases": [line.as_dict() for line in self.phases.values()],
            "tools": [line.as_dict() for line in self.tools.values()],
        }  # fmt: skip


@dataclass(slots=True)
class _Step:
    usage: Usage = field(default_factory=Usage)
    cost: float | None = 0.0  # what its calls cost (None: one had no price)
    phase: str = ""
    tools: list[str] = field(default_factory=list)
    seconds: float = 0.0
    replied: bool = False  # the model answered in it (a cached reply uses no tokens)
    called: bool = False  # ... with tool calls (acting, even before their results: a run waiting)


def run_cost(events: Sequence[ev.Event], prices: Mapping[str, PriceEntry] | None = None) -> RunCost:
    """What the run recorded in ``events`` spent (``prices``: the ``[prices]`` entries, for
    events recorded before they carried their cost)."""
    out = RunCost()
    steps: dict[int, _Step] = {0: _Step(phase="start")}
    current = 0
    now = _PricesNow(prices or {})
    for n, event in enumerate(events):
        match event:
            case ev.RunStart(model=model):
                out.model = model
            case ev.StepStart(step=step):
                current = step
                steps.setdefault(step, _Step())
            case ev.ModelReplyEvent(tool_calls=calls):
                _spend(out, steps.setdefault(current, _Step()), event, now)
                steps[current].replied = True
                steps[current].called = steps[current].called or bool(calls)
            case ev.CompactionEvent():
                _spend(out, steps.setdefault(current, _Step()), event, now)
            case ev.PhaseEvent(phase=phase) if not steps.setdefault(current, _Step()).phase:
                steps[current].phase = phase
            case ev.ToolResultEvent(tool=tool, duration_ms=ms):
                steps.setdefault(current, _Step()).tools.append(tool)
                out.tools.setdefault(tool, Line(tool)).add(0, 0.0, ms / 1000, count=1)
            case _:
                pass
        # The time up to the next event is this step's, unless the run waited for a person then.
        if n + 1 < len(events) and not isinstance(event, ev.WaitingEvent):
            steps.setdefault(current, _Step()).seconds += max(0.0, events[n + 1].ts - event.ts)
    for recorded in steps.values():
        _count(out, recorded)
    out.tool_calls = sum(line.count for line in out.tools.values())
    out.phases = {k: v for k, v in out.phases.items() if v.count or v.tokens or k != "start"}
    return out


@dataclass(slots=True)
class _PricesNow:
    """The prices an event recorded without its cost is read at: the model's rates, looked up
    at the first such event."""

    entries: Mapping[str, PriceEntry]
    looked_up: bool = False
    rates: Rates | None = None

    def cost(self, model: str, usage: Usage) -> float | None:
        if not self.looked_up:
            self.looked_up = True
            self.rates = rates_for(model, self.entries) if model else None
        return None if self.rates is None else self.rates.cost(usage)


def _spend(
    out: RunCost, step: _Step, event: ev.ModelReplyEvent | ev.CompactionEvent, now: _PricesNow
) -> None:
    """Add a call's usage and cost to its step's: the cost its event recorded, if it did."""
    used = Usage.from_dict(event.usage)
    step.usage.add(used)
    if event.priced:
        cost = event.cost_usd
        out.unpriced_then = out.unpriced_then or cost is None
    else:
        cost = now.cost(out.model, used)
    step.cost = None if cost is None or step.cost is None else step.cost + cost


def _count(out: RunCost, step: _Step) -> None:
    cost = step.cost
    tokens = step.usage.input_tokens + step.usage.output_tokens
    out.usage.add(step.usage)
    out.cost_usd = None if cost is None or out.cost_usd is None else out.cost_usd + cost
    out.time_s += step.seconds
    phase = step.phase or (
        "act" if step.tools or step.called else "end" if tokens or step.replied else "start"
    )
    out.phases.setdefault(phase, Line(phase)).add(
        tokens, cost, step.seconds, count=1 if phase != "start" else 0
    )
    for tool in step.tools:  # the step's tokens shared by the tools it called
        share = 1 / len(step.tools)
        out.tools[tool].add(tokens * share, None if cost is None else cost * share, 0.0)


def lines(cost: RunCost) -> list[str]:
    """The run's spending as ``runs show`` prints it."""

    def money(value: float | None) -> str:
        return "cost unknown" if value is None else f"${value:.4f}"

    u = cost.usage
    cached = f", {u.cache_read_tokens:,} of them cached" if u.cache_read_tokens else ""
    head = (
        f"spent: {cost.tokens:,} tokens ({u.input_tokens:,} in{cached}, {u.output_tokens:,} out), "
        f"{money(cost.cost_usd)}, {cost.time_s:.1f} s, {_counted(cost.tool_calls, 'tool call')}"
    )
    if cost.cost_usd is None and cost.unpriced_then:
        head += (
            f' (no price was known for {cost.model} when it ran; [prices."{cost.model}"] prices later runs)'
        )
    elif cost.cost_usd is None and cost.model:
        head += f' (no price for {cost.model}: add [prices."{cost.model}"])'
    out = [head]
    for title, table, unit in (("per phase", cost.phases, "step"), ("per tool", cost.tools, "call")):
        if table:
            out.append(f"  {title}:")
            out += [
                f"    {line.name:<14} {line.count:>4} {unit + ('' if line.count == 1 else 's'):<5} "
                f"{line.tokens:>9,} tokens  "
                f"{money(line.cost_usd):>12}  {line.time_s:>7.1f} s"
                for line in table.values()
            ]
    return out


def _counted(count: int, noun: str) -> str:
    """``1 tool call``, ``2 tool calls``."""
    return f"{count:,} {noun}" if count == 1 else f"{count:,} {noun}s"
