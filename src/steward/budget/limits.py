"""What a budget bounds, what has been spent against it, and how near its end it is."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from steward.models.base import Usage

Dimension = Literal["tokens", "cost_usd", "time_s", "tool_calls"]
DIMENSIONS: tuple[Dimension, ...] = ("tokens", "cost_usd", "time_s", "tool_calls")
LEASE_SHARE = 0.25  # a lease in the store's scopes takes at most this share of what is left ...
LEASE_CALLS = 16  # ... and at most this many calls' worth (``steward.budget.ledger``)
_UNITS = {"tokens": "tokens", "cost_usd": "USD", "time_s": "s of running", "tool_calls": "tool calls"}


@dataclass(frozen=True, slots=True)
class BudgetLimits:
    """Limits of one scope (a run, a job tree, a session); 0 means no limit on that dimension."""

    tokens: int = 0
    cost_usd: float = 0.0
    time_s: float = 0.0
    tool_calls: int = 0

    def __bool__(self) -> bool:
        return self.tokens > 0 or self.cost_usd > 0 or self.time_s > 0 or self.tool_calls > 0

    @classmethod
    def of(cls, settings: Any, prefix: str = "") -> BudgetLimits:
        """The limits ``[budget]`` gives one scope: ``tokens``… for a run, ``tree_tokens``… for a tree."""
        return cls(*(getattr(settings, prefix + d) for d in DIMENSIONS))

    def used(self, spent: Spent) -> tuple[Dimension, float] | None:
        """The dimension nearest its limit and the share of it used (1.0: all); None: no limit."""
        best: tuple[Dimension, float] | None = None
        # Each dimension by name, not getattr over DIMENSIONS: this runs for every budget every step.
        pairs: tuple[tuple[Dimension, float, float], ...] = (
            ("tokens", self.tokens, spent.tokens),
            ("cost_usd", self.cost_usd, spent.cost_usd),
            ("time_s", self.time_s, spent.time_s),
            ("tool_calls", self.tool_calls, spent.tool_calls),
        )
        for d, limit, value in pairs:
            if limit > 0 and (best is None or value / limit > best[1]):
                best = (d, value / limit)
        return best

    def describe(self, dimension: Dimension) -> str:
        value = getattr(self, dimension)
        unit = "tool call" if dimension == "tool_calls" and value == 1 else _UNITS[dimension]
        return f"{value:g} {unit}"


@dataclass(slots=True)
class Spent:
    """What a scope has used. ``cost_usd`` counts only priced calls; ``unpriced`` says some were not."""

    tokens: int = 0
    cost_usd: float = 0.0
    time_s: float = 0.0
    tool_calls: int = 0
    unpriced: bool = False

    def add_usage(self, usage: Usage, cost: float | None) -> None:
        self.tokens += usage.input_tokens + usage.output_tokens
        if cost is None:
            self.unpriced = True
        else:
            self.cost_usd += cost

    def add(self, other: Spent) -> None:
        self.tokens += other.tokens
        self.cost_usd += other.cost_usd
        self.time_s += other.time_s
        self.tool_calls += other.tool_calls
        self.unpriced = self.unpriced or other.unpriced

    def describe(self) -> str:
        cost = "unknown" if self.unpriced and not self.cost_usd else f"${self.cost_usd:.4f}"
        calls = "1 tool call" if self.tool_calls == 1 else f"{self.tool_calls:,} tool calls"
        return f"{self.tokens:,} tokens, {cost}, {self.time_s:.1f} s, {calls}"


@dataclass(slots=True)
class Spending:
    """What a run spent since it last recorded, and the tool calls it leased but did not make."""

    usage: Usage = field(default_factory=Usage)
    cost: float | None = 0.0
    time_s: float = 0.0
    calls: int = 0  # tool calls it made (its own row counts them)
    untaken: int = 0  # of those, the ones no lease counted in the scopes (none bounds tool calls)
    unused_calls: int = 0  # leased tool calls given back


@dataclass(frozen=True, slots=True)
class Need:
    """What the next call needs: a model call's tokens and money (``model``), or one tool call
    (``calls``); a tool call's renewal leases tokens and money for model calls of ``tokens`` and
    ``cost`` too, where they fit (it is not refused for them)."""

    tokens: int = 0
    cost: float = 0.0
    model: bool = False
    calls: int = 0
