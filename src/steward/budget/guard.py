"""One run's budgets, kept by wrappers around its model and its toolset and by the loop's step
hooks.

``BudgetedModel`` checks that a model call fits before it is made (when the run shares a budget
in the store, it holds what the call may cost there); ``BudgetedToolset`` counts tool calls;
the step hooks (``Budget.before`` and ``Budget.after``, the loop's ``guard``) count what each
step used from the run's own usage (what the loop and compaction record: no layer around each
streamed piece) and what its calls cost (each priced once, for its event: ``Budget.price``),
record it, tell the agent once when a budget is 80 % used, and end the run
``partial`` with its progress when one is used up. The loop itself knows nothing of budgets.

While a run is rebuilt from its log the wrappers are not called (the recorded replies and
results stand in for the model and the tools) and what the log's replies used is not counted
again; the hooks then only repeat the budget signals the log has where it has them. Live
again, the run goes on from what its row in the store says it spent.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from steward import events as ev
from steward import run_state as rs
from steward.budget.limits import LEASE_SHARE, BudgetLimits, Dimension, Need, Spending, Spent
from steward.budget.prices import Rates
from steward.errors import ApprovalRequired, ModelError, StoreError
from steward.models.base import (
    AssistantMessage,
    Model,
    ModelRequest,
    ModelResponse,
    StreamItem,
    ToolSpec,
    Usage,
)
from steward.tools.base import ToolContext, ToolResult, Toolset, WrapperToolset

if TYPE_CHECKING:
    from steward.budget.ledger import Ledger, ScopeState
    from steward.loop import Loop
    from steward.recovery import Replay

Items = AsyncIterator[ev.Event | rs.Outcome]
Standing = tuple[str, BudgetLimits, Spent, "tuple[Dimension, float] | None"]
"""A budget that applies: its label, limits, what is spent against it and the share used."""
After = tuple[Sequence[ev.Event], rs.Outcome]
"""What follows a step (``Budget.after``): its budget signals and its outcome."""

BUDGET_WARNING = "budget_warning"
"""The code of the signal a run gets when one of its budgets is ``warn_at`` (80 %) used."""
BUDGET_EXHAUSTED = "budget_exhausted"
"""The code of the signal a run gets when a budget ends it."""
_TOOL_CHARS = 600  # a tool's name, description and schema, about
_OUTPUT_GUESS = 1_024  # tokens a reply is expected to hold before the run has shown longer ones


class BudgetExceededError(ModelError):
    """A model call was not made: a shared budget has no room for it (the run ends partial)."""


@dataclass(slots=True)
class Budget:
    """The budgets of one run and what it has spent (see the module's docstring)."""

    run_id: str
    model: str
    rates: Rates | None
    limits: BudgetLimits  # this run's own
    shared: dict[str, BudgetLimits]  # the store's scopes this run makes if missing: own, tree, session
    warn_at: float = 0.8
    ledger: Ledger | None = None
    session_id: str | None = None
    spent: Spent = field(default_factory=Spent)
    scopes: list[str] = field(default_factory=list)  # the store's scopes it charges (once opened)
    states: dict[str, ScopeState] = field(default_factory=dict)
    raised: set[str] = field(default_factory=set)
    refused: str | None = None  # why a model call was not made
    longest_output: int = 0  # the longest reply so far, in tokens
    last_input: int = 0  # the last prompt's tokens, as the provider counted them
    last_output: int = 0
    last_estimate: int = 0  # the last prompt as estimated here
    opened: bool = False
    _usage: Usage = field(default_factory=Usage)  # since the last settle
    _cost: float | None = 0.0
    _priced: float = 0.0  # what the calls ``price`` priced since the last count cost in all
    _calls: int = 0
    _untaken: int = 0  # tool calls the shared scopes count when the run settles (none bounds them)
    _seconds: float = 0.0
    _due: bool = True  # the budgets are checked before the next step
    # Below these (tokens, USD, seconds, tool calls) no budget the run keeps alone is near a
    # signal: a step then skips working out each budget's share (None: not worked out yet).
    _quiet: tuple[int, float, float, int] | None = None
    # The same for the store's scopes: how much more the run may spend before one of them, as
    # last read, would warn or end it (None: not worked out since they were read).
    _shared_quiet: tuple[float, float, float, float] | None = None
    _caps: tuple[int, float] | None = None  # ``_local_caps``, once worked out
    # The step under way: when it started, the log it is rebuilt from (None: live), whether the
    # check before it ended the run.
    _started: float = 0.0
    _replay: Replay | None = None
    _stopped: bool = False
    _free_call: bool = False  # the next tool call is not counted (a delegated job's answer, taken at a stop)
    run_usage: Usage = field(default_factory=Usage)  # the run's state's, as the loop and compaction add to it
    _seen: Usage = field(default_factory=Usage)  # ``run_usage`` when last counted
    _aside: Usage | None = None  # this step's calls for summaries (not what the next prompt holds)
    _went_live: bool = False  # a step rebuilt from the log made a live model call (the log ended)
    # The lease held in the store's scopes (``Ledger.renew``): what is left of it to use without
    # a write (inf: no scope bounds that dimension), and the unrecorded seconds after which the
    # scopes' time limits are looked at again.
    _room_tokens: float = 0.0
    _room_cost: float = 0.0
    _room_calls: float = 0.0
    _room_time: float = 0.0
    _asked: tuple[int, float] = (0, 0.0)  # the tokens and money of the call ``leased`` looked at
    _renewing: asyncio.Lock = field(default_factory=asyncio.Lock)  # one renewal at a time

    # --- counting (the wrappers) -------------------------------------------------------

    def price(self, usage: Usage) -> float | None:
        """What a model call the run just took cost (None: no price is known): the loop and
        compaction record it on the call's event (``RunState.price``), and the step counts it
        from there rather than pricing its usage again."""
        if self.rates is None:
            return None
        cost = self.rates.cost(usage)
        self._priced += cost
        return cost

    def count(self, now: Usage) -> None:
        """Count what the run used since the last count: ``now`` is its usage (the loop's and
        compaction's calls, as the run's state adds them up), priced as ``price`` priced them."""
        seen = self._seen
        same = now.requests == seen.requests and now.input_tokens == seen.input_tokens
        if same and now.output_tokens == seen.output_tokens:
            return  # no model call since (a step that carried out an approved call)
        self._seen = _copy(now)
        cost, self._priced = (None if self.rates is None else self._priced), 0.0
        usage = Usage(
            now.input_tokens - seen.input_tokens, now.output_tokens - seen.output_tokens,
            now.cache_read_tokens - seen.cache_read_tokens, now.cache_write_tokens - seen.cache_write_tokens,
            now.requests - seen.requests,
        )  # fmt: skip
        step_input, step_output = usage.input_tokens, usage.output_tokens
        if (aside := self._aside) is not None:  # what the next prompt estimate starts from: the step's reply
            self._aside = None
            step_input, step_output = step_input - aside.input_tokens, step_output - aside.output_tokens
        if step_input > 0 or step_output > 0:
            self.longest_output = max(self.longest_output, step_output)
            self.last_input, self.last_output = step_input, step_output
        self.used(usage, cost)

    def used(self, usage: Usage, cost: float | None) -> None:
        self.spent.add_usage(usage, cost)
        if self.ledger is not None:  # what the next settle records in the store
            self._usage.add(usage)
            self._cost = None if cost is None or self._cost is None else self._cost + cost
            self._room_tokens -= usage.input_tokens + usage.output_tokens  # (used from the lease)
            self._room_cost -= cost or 0.0

    def holds(self) -> bool:
        """Whether a model call holds its share first (some budget bounds tokens or money)."""
        return bool(self.limits.tokens or self.limits.cost_usd or self.scopes or any(self.shared.values()))

    async def before_call(self, request: ModelRequest) -> None:
        """Hold what the call may cost; ``BudgetExceededError`` if a budget has no room for it."""
        if self.ledger is None or not self.scopes:
            self.hold_local(request)
            return
        if not self.leased(request):
            await self.renew_for_call()

    def leased(self, request: ModelRequest) -> bool:
        """Whether the run's lease in the store's scopes covers the call (no write, no
        coroutine: the common case); if not, ``renew_for_call`` before it."""
        self.count(self.run_usage)  # a call within a step (a summary) comes after the step's reply
        tokens, cost = self._asked = self._call_size(request)
        return tokens <= self._room_tokens and cost <= self._room_cost and self._seconds < self._room_time

    async def renew_for_call(self) -> None:
        """A new lease for the call ``leased`` looked at; ``BudgetExceededError`` if a scope
        has no room for it."""
        tokens, cost = self._asked
        self._refuse(await self._renew(Need(tokens, cost, model=True)), tokens, cost)

    def hold_local(self, request: ModelRequest) -> None:
        """``before_call`` for a run whose budgets are all its own (none shared in the store):
        not a coroutine, as most runs call it every step."""
        self.count(self.run_usage)  # a call within a step (a summary) comes after the step's reply
        caps = self._caps
        if caps is None:
            caps = self._caps = self._local_caps()
        if caps[0] or caps[1]:  # some budget bounds tokens or money
            prompt, reply = self._call_parts(request)
            tokens = prompt + reply
            # The least token and money limits first: each budget is looked at only near one.
            if self.spent.tokens + tokens > caps[0] or caps[1] < float("inf"):
                cost = self._hold_cost(prompt, reply)
                self._refuse(self._no_room(tokens, cost), tokens, cost)

    def _local_caps(self) -> tuple[int, float]:
        """The least token limit (0: none) and the least money limit (0: none) of the budgets a
        run keeps alone, ``inf`` in place of a limit the other is set without."""
        budgets = (self.limits, *self.shared.values())  # as `_no_room` looks at them
        tokens = min((b.tokens for b in budgets if b.tokens), default=0)
        cost = min((b.cost_usd for b in budgets if b.cost_usd), default=0.0)
        if tokens or cost:
            return tokens or 2**62, cost or float("inf")
        return 0, 0.0

    def _call_size(self, request: ModelRequest) -> tuple[int, float]:
        prompt, reply = self._call_parts(request)
        return prompt + reply, self._hold_cost(prompt, reply)

    def _call_parts(self, request: ModelRequest) -> tuple[int, int]:
        # What the call may take: its prompt (no less than the last one's, as the provider
        # counted it) and a reply at most the request's cap, expected near the longest so far.
        expected = min(request.max_tokens or _OUTPUT_GUESS, max(_OUTPUT_GUESS, 2 * self.longest_output))
        return self._prompt_tokens(request), expected

    def _hold_cost(self, prompt: int, reply: int) -> float:
        """What a call of ``prompt`` tokens in and ``reply`` out may cost: the reply at the output
        price (several times the input's), so that a money budget is not overrun by replies."""
        return 0.0 if self.rates is None else self.rates.cost(Usage(input_tokens=prompt, output_tokens=reply))

    def _refuse(self, refused: str | None, tokens: int, cost: float) -> None:
        if refused is not None:
            label = _label(refused, self.run_id)
            size = f"{tokens:,} tokens" + (f", ${cost:.4f}" if self.rates is not None and cost > 0 else "")
            self.refused = f"{label} budget has no room for another model call (of about {size})"
            raise BudgetExceededError(self.refused)

    def _prompt_tokens(self, request: ModelRequest) -> int:
        """An upper estimate of the prompt, cheap enough for every call (3 characters a token;
        English runs near 4): the last prompt as the provider counted it, the reply it got and
        what came back since; the whole request only for the first call."""
        if base := self.last_input or self.last_estimate:  # (a model that reports no usage: ours)
            self.last_estimate = base + self.last_output + _new_chars(request) // 3
        else:
            self.last_estimate = _all_chars(request) // 3
        return self.last_estimate

    def _no_room(self, tokens: int, cost: float) -> str | None:
        """The local budget (no store to share one in) that ``tokens`` and ``cost`` would overrun."""
        spent = self.spent
        for n, limits in enumerate((self.limits, *self.shared.values())):
            over_tokens = limits.tokens and spent.tokens + tokens > limits.tokens
            if over_tokens or (limits.cost_usd and spent.cost_usd + cost > limits.cost_usd):
                return f"run:{self.run_id}" if n == 0 else list(self.shared)[n - 1]
        return None

    def take_local_call(self) -> str | None:
        """Count a tool call against this run's own budget (no store to share one in); why it
        may not run, or None. Not a coroutine: most runs count their calls here, every step."""
        limit = self.limits.tool_calls
        if limit and self.spent.tool_calls >= limit:
            return f"this run's budget of {limit} tool call{'' if limit == 1 else 's'} is used up"
        self.spent.tool_calls += 1
        self._calls += 1
        return None

    async def take_call(self) -> str | None:
        """Count a tool call; why it may not run, or None."""
        if self.ledger is None or not self.scopes:
            return self.take_local_call()
        if not any(s.limits.tool_calls for s in self.states.values()):
            # No shared scope bounds tool calls: they count the call when the run settles, in the
            # same write (one transaction a step fewer); nothing any run may do hangs on it.
            refused = self.take_local_call()
            self._untaken += refused is None
            return refused
        limit = self.limits.tool_calls
        if limit and self.spent.tool_calls >= limit:
            return f"this run's budget of {limit} tool call{'' if limit == 1 else 's'} is used up"
        if self._room_calls < 1:
            # A new lease: this call, and more while the scopes have room (and tokens for the
            # next model calls, where they fit).
            reply = max(_OUTPUT_GUESS, 2 * self.longest_output)
            tokens, cost = self.last_estimate + reply, self._hold_cost(self.last_estimate, reply)
            if scope := await self._renew(Need(tokens, cost, calls=1)):
                return f"{_label(scope, self.run_id)} budget of tool calls is used up"
        self._room_calls -= 1
        self.spent.tool_calls += 1
        self._calls += 1
        return None

    def take_leased_call(self) -> str | None:
        """``take_call`` when the lease has a call left, or no shared scope bounds tool calls
        (then they count the call when the run records what it spent): no write, no coroutine."""
        refused = self.take_local_call()
        if refused is None:
            self._room_calls -= 1
            self._untaken += self._room_calls == float("inf")
        return refused

    async def give_back_call(self) -> None:
        self.spent.tool_calls -= 1
        self._calls -= 1
        if self._untaken:  # (a call is given back before its step settles: the same scopes' state)
            self._untaken -= 1
        elif self.ledger is not None and self.scopes:
            self._room_calls += 1  # back to the lease it came from

    # --- the steps ----------------------------------------------------------------------

    def before(self, loop: Loop, steps: Items) -> Items:
        """The loop's hook before a step: ``steps`` as they are, unless this is the first live
        step or the first after a wait, which first checks that the budgets have room."""
        self._replay = None if loop.stamp is None else _replaying(loop)
        self._started = time.monotonic()
        if self._due and self._replay is None:
            return self._checked_first(loop, steps)
        return steps

    async def _checked_first(self, loop: Loop, steps: Items) -> Items:
        self._due = False
        failed = await self._open()
        why = failed or self._exhausted()
        if why is not None:
            self._stopped = True
            if failed is None and _answered_delegation(loop):
                # The job it delegated to ran and ended: its answer (or why it failed) goes in
                # the log as the delegate call's result before the run stops, uncounted (the
                # child's work was counted as it was done; nothing more runs).
                self._free_call = True
                try:
                    async for item in steps:
                        if isinstance(item, ev.Event):
                            yield item
                finally:
                    self._free_call = False
            else:
                await steps.aclose()  # type: ignore[attr-defined]  # never started: nothing runs
            events, end = await self._stop(loop, why, failed is not None)
            for event in events:
                yield event
            yield end
            return
        self._cap_time(loop)
        self._started = time.monotonic()  # (the store's reading is not the step's time)
        async for item in steps:
            yield item

    def _cap_time(self, loop: Loop) -> None:
        """A store scope's time limit cuts a tool short as the run's own does (``attach``): the
        run's clock ends no later than the least time its scopes have left as this stretch of it
        starts (a child's, what is left of its parent's and its tree's)."""
        from steward.clock import RunClock

        left = [s.limits.time_s - s.spent.time_s for s in self.states.values() if s.limits.time_s]
        clock = getattr(loop.clock, "clock", loop.clock)  # a rebuilt run's clock wraps the live one
        if not left or not isinstance(clock, RunClock):
            return
        limit = clock.cap(max(min(left), 0.0))
        if limit is not None:  # what the run's time-limit messages name
            loop.settings.run_timeout_s = round(limit, 1)

    def after(self, loop: Loop, outcome: rs.Outcome) -> Coroutine[Any, Any, After]:
        """The loop's hook after a step: what it used counted and recorded; its warnings and its
        outcome (or the budget's end)."""
        if (replay := self._replay) is not None:  # rebuilt from the log: counted when it was live
            if self._went_live:  # the log ended within the step: what it used live counts
                self._went_live = False
                self.count(self.run_usage)
            else:
                self._seen, self._priced = _copy(self.run_usage), 0.0
            return _ready((self._recorded_warnings(loop, replay), outcome))
        if self._stopped:  # the check before the step ended the run: nothing ran
            self._stopped = False
            return _ready(((), outcome))
        self.count(self.run_usage)
        return self._after(loop, outcome, time.monotonic() - self._started)

    async def _after(self, loop: Loop, outcome: rs.Outcome, seconds: float) -> After:
        """A live step's spending recorded; its warnings, then its outcome (or the budget's end)."""
        final = not isinstance(outcome, rs.Continue)
        self._due = final  # a step that goes on is checked here; one that waits, when it goes on
        if self.ledger is None or not final:  # nothing to write (a lease covers the step): no coroutine
            self.spent.time_s += seconds
            self._seconds += seconds
            why = failed = None
        else:
            why = failed = await self._settle(seconds, final=final)
        if failed is None and isinstance(outcome, rs.Fail) and self.refused is not None:
            why = self.refused  # the model call was not made: the budget ends the run, not a failure
        if why is None and self._below_signals():  # the common step: nothing near any signal
            return (), outcome
        standing = self._standing()  # each budget's share used, worked out once for both checks
        warnings = self._warnings(loop, standing)
        if why is None and isinstance(outcome, rs.Continue):
            why = self._exhausted(standing)
        if why is not None and not isinstance(outcome, rs.Finish | rs.Pause):
            if not final and self.ledger is not None:  # the run ends here: what it spent is recorded
                failed = await self._settle(0.0, final=True) or failed
            events, end = await self._stop(loop, why, failed is not None)
            return [*warnings, *events], end
        return warnings, outcome

    def _below_signals(self) -> bool:
        """Whether what the run spent is below every amount at which one of its budgets would
        warn or end it: a few comparisons a step instead of each budget's share. Only for
        budgets compared with this run's own spending (none shared in the store)."""
        if self.ledger is not None and self.scopes:  # the scopes as last read, and what it spent since
            shared = self._shared_quiet
            if shared is None:
                shared = self._shared_quiet = self._shared_thresholds()
            u = self._usage
            if not (u.input_tokens + u.output_tokens < shared[0] and (self._cost or 0.0) < shared[1]
                    and self._seconds < shared[2] and self._calls < shared[3]):  # fmt: skip
                return False
        quiet = self._quiet
        if quiet is None:
            quiet = self._quiet = self._thresholds()
        s = self.spent
        return (
            s.tokens < quiet[0] and s.cost_usd < quiet[1] and s.time_s < quiet[2] and s.tool_calls < quiet[3]
        )

    def _thresholds(self) -> tuple[int, float, float, int]:
        """The least amount, per dimension, at which a budget warns (or, warned, ends the run);
        a hair low, so that a share rounded up to ``warn_at`` is still worked out in full."""
        found: list[float] = [float("inf")] * 4
        budgets = [("this run's", self.limits)]
        if self.ledger is None:  # no store: the run is its own tree and session
            budgets += [(_label(key, self.run_id), limits) for key, limits in self.shared.items()]
        for label, limits in budgets:
            share = 1.0 if label in self.raised else min(self.warn_at, 1.0)
            for n, limit in enumerate((limits.tokens, limits.cost_usd, limits.time_s, limits.tool_calls)):
                if limit > 0:
                    found[n] = min(found[n], share * limit * (1 - 1e-9))
        return int(min(found[0], 2**62)), found[1], found[2], int(min(found[3], 2**62))

    def _shared_thresholds(self) -> tuple[float, float, float, float]:
        """``_thresholds`` for the store's scopes as last read: what more may be spent, per
        dimension, before one of them warns (or, warned, ends the run)."""
        found = [float("inf")] * 4
        for state in self.states.values():
            share = 1.0 if _label(state.id, self.run_id) in self.raised else min(self.warn_at, 1.0)
            limits, spent = state.limits, state.spent
            pairs = ((limits.tokens, spent.tokens), (limits.cost_usd, spent.cost_usd),
                     (limits.time_s, spent.time_s), (limits.tool_calls, spent.tool_calls))  # fmt: skip
            for n, (limit, used) in enumerate(pairs):
                if limit > 0:
                    found[n] = min(found[n], share * limit * (1 - 1e-9) - used)
        return found[0], found[1], found[2], found[3]

    def _exhausted(self, standing: list[Standing] | None = None) -> str | None:
        for label, limits, spent, used in self._standing() if standing is None else standing:
            if used is not None and used[1] >= 1.0:
                return f"{label} budget of {limits.describe(used[0])} is used up ({spent.describe()})"
        return None

    def _standing(self) -> list[Standing]:
        """Each budget that applies, with what is spent against it and the share of it used."""
        if self.ledger is None:  # no store: the run is its own tree and session
            scopes = [(_label(key, self.run_id), limits, self.spent) for key, limits in self.shared.items()]
        else:  # as the scopes stood when last read, with what this run spent since
            usage, since = self._usage, self._calls
            tokens, cost = usage.input_tokens + usage.output_tokens, self._cost or 0.0
            scopes = [
                (_label(s.id, self.run_id), s.limits, Spent(s.spent.tokens + tokens, s.spent.cost_usd + cost,
                 s.spent.time_s + self._seconds, s.spent.tool_calls + since, s.spent.unpriced))
                for s in self.states.values()
            ]  # fmt: skip
        own = ("this run's", self.limits, self.spent, self.limits.used(self.spent))
        return [own, *((label, limits, spent, limits.used(spent)) for label, limits, spent in scopes)]

    def _warnings(self, loop: Loop, standing: list[Standing]) -> list[ev.Event]:
        out: list[ev.Event] = []
        for label, limits, spent, used in standing:
            if used is None or used[1] < self.warn_at or used[1] >= 1.0 or label in self.raised:
                continue
            self.raised.add(label)
            self._quiet = self._shared_quiet = None  # this budget now matters again only at its end
            message = (
                f"{label.capitalize()} budget is {used[1]:.0%} used (spent {spent.describe()}; the limit "
                f"is {limits.describe(used[0])}). Finish the most important part now and end the run with "
                "what you have; it stops when the budget is used up."
            )
            loop.state.transcript.add_user(message)
            out.append(loop.emit(ev.SignalEvent(code=BUDGET_WARNING, level="warning", message=message)))
        return out

    def _recorded_warnings(self, loop: Loop, replay: Replay) -> list[ev.Event]:
        """While rebuilding: the budget signals the log has here, as they were."""
        out: list[ev.Event] = []
        for _ in range(8):  # a step raises at most one per budget
            recorded = replay.peek()
            if not isinstance(recorded, ev.SignalEvent) or recorded.code != BUDGET_WARNING:
                break
            loop.state.transcript.add_user(recorded.message)
            signal = ev.SignalEvent(code=BUDGET_WARNING, level="warning", message=recorded.message)
            out.append(loop.emit(signal))
        return out

    async def _stop(self, loop: Loop, why: str, failed: bool) -> After:
        st = loop.state
        if failed:
            return (), rs.Fail("store_error", why)
        message = f"Stopped: {why}. " + rs.progress_report(st)
        signal = loop.emit(ev.SignalEvent(code=BUDGET_EXHAUSTED, level="warning", message=why))
        return (signal,), rs.Finish("partial", message)

    # --- the store ----------------------------------------------------------------------

    async def _open(self) -> str | None:
        """Once live: the run's row and scopes, and what it spent before (a resumed run)."""
        if self.opened or self.ledger is None:
            return None
        self.opened = True
        ledger = self.ledger
        try:
            above, tree = await ledger.scopes_of(self.run_id, self.session_id)
            wanted = dict(self.shared)
            if "tree" in wanted:
                wanted[tree] = wanted.pop("tree")
            self.scopes = sorted({*wanted, *await ledger.existing(above)})
            totals = await ledger.open(self.run_id, self.model, wanted, self.scopes)
            self.states = {s.id: s for s in await ledger.states(self.scopes)}
        except (StoreError, OSError, _DatabaseError) as exc:
            return f"the budget could not be read from the store ({exc})"
        # What it spent in earlier processes (a resumed run); this process counts from here.
        earlier = Spent(totals.tokens, totals.cost_usd, totals.time_s, totals.tool_calls, totals.unpriced)
        self.spent.add(earlier)
        return None

    async def _settle(self, seconds: float, *, final: bool) -> str | None:
        """Record what was spent when the run waits or ends (a write per run, not per step),
        giving back what is left of its lease; while it runs, a lease's renewal records it."""
        self.spent.time_s += seconds
        self._seconds += seconds
        if self.ledger is None or not final:
            return None
        try:
            await self._renew(None)
        except (StoreError, OSError, _DatabaseError) as exc:
            # Only a run that shares a budget must stop: the others merely record what they spent.
            return f"the budget could not be recorded in the store ({exc})" if self.scopes else None
        return None

    async def _renew(self, need: Need | None) -> str | None:
        """Record what the run spent since it last did, give back its lease and, for ``need``,
        take a new one (one transaction); the scope that has no room for ``need``, or None."""
        assert self.ledger is not None
        async with self._renewing:  # what it records is taken under the lock: counted once
            return await self._renew_now(need)

    async def _renew_now(self, need: Need | None) -> str | None:
        assert self.ledger is not None
        bounds = [s.limits for s in self.states.values()]
        calls_bound = any(b.tool_calls for b in bounds)
        spending = Spending(
            self._usage, self._cost, self._seconds, self._calls, self._untaken,
            int(self._room_calls) if calls_bound and self._room_calls > 0 else 0,
        )  # fmt: skip
        renewed = await self.ledger.renew(self.run_id, self.scopes, spending, need)
        self._usage, self._cost, self._calls, self._seconds, self._untaken = Usage(), 0.0, 0, 0.0, 0
        if renewed.states:
            self.states = {s.id: s for s in renewed.states}
            self._shared_quiet = None
        inf = float("inf")
        self._room_tokens = renewed.tokens if any(b.tokens for b in bounds) else inf
        self._room_cost = renewed.cost if any(b.cost_usd for b in bounds) else inf
        self._room_calls = renewed.calls if calls_bound else inf
        times = [s.limits.time_s - s.spent.time_s for s in self.states.values() if s.limits.time_s]
        self._room_time = min(times) * LEASE_SHARE if times and need is not None else (0.0 if times else inf)
        return renewed.refused

    # --- wrapping ----------------------------------------------------------------------

    def attach(self, loop: Loop) -> None:
        """Put the budget around ``loop``'s model, toolset and steps."""
        from steward.clock import RunClock

        self.run_usage = loop.state.usage
        loop.state.price = self.price  # each call priced once, on its event; a step counts what they cost
        loop.model = BudgetedModel(loop.model, self)
        loop.toolset = BudgetedToolset(loop.toolset, self)
        loop.guard = self
        if (limit := self.limits.time_s) and isinstance(loop.clock, RunClock):
            # The clock cuts a model call or a tool (and its processes) short at the limit.
            current = loop.settings.run_timeout_s
            loop.settings.run_timeout_s = min(current, limit) if current else limit
            loop.clock.limit_s = loop.settings.run_timeout_s


try:  # the store's own errors, where SQLAlchemy is installed (it always is with a store)
    from sqlalchemy.exc import SQLAlchemyError as _DatabaseError
except ImportError:  # pragma: no cover
    _DatabaseError = StoreError  # type: ignore[misc,assignment]


_SESSION = "the session's"


def stopped_by_session_budget(output: str) -> bool:
    """Whether a run's ending (its output) says the session's budget stopped it: spent, or no room
    for another model call, which the session's next run would not find either."""
    return output.startswith(f"Stopped: {_SESSION} budget ")


def _label(scope: str, run_id: str) -> str:
    kind, _, ident = scope.partition(":")
    match kind:
        case "run" if ident == run_id:
            return "this run's"
        case "run":
            return f"the delegating job {ident}'s"
        case "tree":
            return "the job tree's"
        case "session":
            return _SESSION
        case _:
            return f"the {scope} scope's"


def _copy(usage: Usage) -> Usage:
    return Usage(usage.input_tokens, usage.output_tokens, usage.cache_read_tokens, usage.cache_write_tokens,
                 usage.requests)  # fmt: skip


async def _ready(after: After) -> After:
    return after


def _new_chars(request: ModelRequest) -> int:
    """Characters added to the prompt since the model's last reply (what came back since)."""
    chars = 0
    for message in reversed(request.messages):
        if isinstance(message, AssistantMessage):
            break
        chars += len(getattr(message, "content", "") or "") + 16
    return chars


def _all_chars(request: ModelRequest) -> int:
    chars = len(request.system) + len(request.context) + _TOOL_CHARS * len(request.tools)
    for message in request.messages:
        chars += len(getattr(message, "content", "") or getattr(message, "text", "") or "") + 16
    return chars


def _replaying(loop: Loop) -> Replay | None:
    """The log ``loop`` is being rebuilt from, while it is (None: the run is live)."""
    if loop.stamp is None:  # live from the start: the common case, kept cheap
        return None
    replay = getattr(loop.stamp, "__self__", None)
    from steward.recovery import Replay

    return replay if isinstance(replay, Replay) and not replay.ended() else None


class BudgetedModel(Model):
    """``model`` whose calls are checked against the run's budgets before they are made. What
    a call used is counted after the step, from the run's usage (``Budget.count``): its stream
    is handed on as it is, not through one more layer per streamed piece."""

    def __init__(self, model: Model, budget: Budget) -> None:
        self.model, self.budget, self.name = model, budget, model.name

    def replayed(self) -> None:
        self.model.replayed()

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        budget = self.budget
        if budget._replay is not None and not budget._went_live:
            # The log ended within a step being rebuilt: from here on what the run uses is live.
            budget._went_live = True
            budget._seen, budget._priced = _copy(budget.run_usage), 0.0
        if budget.ledger is not None and budget.scopes:
            if not budget.leased(request):
                return self._held(request)
        else:
            try:
                budget.hold_local(request)  # (not a coroutine: the common case)
            except BudgetExceededError as exc:
                # Raised where a stream's failures are, when it is read: a wrapper's span still ends.
                return _failing(exc)
        if request.purpose != "step":
            return self._aside(self.model.stream(request))
        return self.model.stream(request)

    async def _held(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        """A call that first renews the run's lease in the store's scopes (``Budget.leased``
        found it short)."""
        await self.budget.renew_for_call()
        stream = (
            self.model.stream(request)
            if request.purpose == "step"
            else self._aside(self.model.stream(request))
        )
        try:
            async for item in stream:
                yield item
        finally:
            await _close(stream)

    async def _aside(self, stream: AsyncIterator[StreamItem]) -> AsyncIterator[StreamItem]:
        """A call for a summary (compaction): counted with the step, but kept out of what the
        next prompt is estimated from."""
        budget = self.budget
        try:
            async for item in stream:
                if isinstance(item, ModelResponse):
                    if budget._aside is None:
                        budget._aside = Usage()
                    budget._aside.add(item.usage)
                yield item
        finally:
            await _close(stream)


def _answered_delegation(loop: Loop) -> bool:
    """Whether the run goes on from a ``delegate`` call whose job has ended (a worker queued
    it again for that): the call's result is the child's answer, nothing new to run."""
    resume = loop.state.resume
    return resume is not None and resume.approved and bool(resume.approval.waits_for)


async def _failing(exc: BudgetExceededError) -> AsyncIterator[StreamItem]:
    """A stream that fails with ``exc`` when first read."""
    none: tuple[StreamItem, ...] = ()
    for item in none:  # (an async generator: nothing runs before it is read)
        yield item
    raise exc


async def _close(stream: AsyncIterator[StreamItem]) -> None:
    close = getattr(stream, "aclose", None)
    if close is not None:
        await close()


class BudgetedToolset(WrapperToolset):
    """Tool calls counted against the run's budgets; past a limit a call is refused, not run."""

    def __init__(self, wrapped: Toolset, budget: Budget) -> None:
        super().__init__(wrapped)
        self.budget = budget

    def get_tools(self, ctx: ToolContext) -> Coroutine[Any, Any, Sequence[ToolSpec]]:
        return self.wrapped.get_tools(ctx)  # handed on as it is: no coroutine of its own each step

    async def call_tool(self, name: str, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        budget = self.budget
        if budget._free_call:  # a delegated job's answer, taken as the run stops
            budget._free_call = False
            return await self.wrapped.call_tool(name, arguments, ctx)
        # Counted here without a coroutine unless the store must take the call (a shared budget).
        if budget.ledger is None or not budget.scopes:
            refused = budget.take_local_call()
        elif budget._room_calls >= 1:  # the lease has a call left (or no scope bounds calls)
            refused = budget.take_leased_call()
        else:
            refused = await budget.take_call()
        if refused is not None:
            return ToolResult(
                f"Not run: {refused}. End the run now with what you have (agent_step end).",
                is_error=True, category="permission",
            )  # fmt: skip
        try:
            return await self.wrapped.call_tool(name, arguments, ctx)
        except ApprovalRequired:
            await self.budget.give_back_call()  # not run yet: it counts when it runs, once approved
            raise
