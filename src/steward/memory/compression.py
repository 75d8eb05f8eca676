"""Context compression by the model: large tool outputs, old turns, a failed attempt.

Three cases, each written by the model into what matters for the goal:

* a tool output longer than ``compact_output_chars`` is replaced in the transcript by its
  digest; the full output stays in working memory (``recall_output`` returns it) and in the
  run's log;
* when the transcript outgrows ``history_share`` of the request budget, its oldest turns
  are replaced by a summary (the originals stay in the log);
* when the agent re-plans after failures, the transcript restarts from a summary of the
  failed attempt and the new plan.

Working memory (plan, key facts, error register) is never compressed: the view is rebuilt
from it for every request. A summary that cannot be written (the model fails) falls back to
a mechanical excerpt, so compression never stops a run.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from steward.events import CompactionEvent
from steward.memory.budget import fold_summary_limit
from steward.models.base import Model, ModelRequest, Usage, UserMessage
from steward.text import compact_json, excerpt

if TYPE_CHECKING:
    from steward.clock import Clock
    from steward.memory.transcript import Transcript
    from steward.memory.working import WorkingMemory
    from steward.tools.base import ToolResult

SUMMARY = "summary"  # the purpose of a summarising request (``ModelRequest.purpose``)

_SYSTEM = (
    "You compress context for an autonomous agent. Write only the compressed text: no preamble. "
    "Keep exact values the agent may need (paths, names, numbers, error messages, commands and "
    "their results); drop repetition and noise. Never invent anything."
)

_TASKS = {
    "tool_output": (
        "The agent's goal: {goal}\nIts current sub-task: {task}\n\n"
        "Compress this output of {what} to what matters for the goal, in at most {limit} characters. "
        "Keep failures, errors and their locations verbatim.\n\n{text}"
    ),
    "turns": (
        "The agent's goal: {goal}\n\nSummarise these earlier turns of its work in at most {limit} "
        "characters: what it did, what it found, what failed and why, and what is still open.\n\n{text}"
    ),
    "session": (
        "Summarise this conversation session ({goal}) for the next session, in at most {limit} "
        "characters: what the user wanted, what was done and decided, and what is still open.\n\n{text}"
    ),
    "attempt": (
        "The agent's goal: {goal}\n\nIts previous attempt failed and it is re-planning. Summarise the "
        "attempt in at most {limit} characters: what was tried, what failed and why, and what was "
        "learned that the new plan must take into account.\n\n{text}"
    ),
}


@dataclass(slots=True, frozen=True)
class Summary:
    text: str
    usage: Usage
    by_model: bool  # False: the model failed and this is a mechanical excerpt


async def summarize(
    model: Model, kind: str, text: str, *, goal: str, limit: int, task: str = "", what: str = ""
) -> Summary:
    """Ask ``model`` to compress ``text``; never raises (falls back to an excerpt)."""
    prompt = _TASKS[kind].format(goal=goal, task=task or "(none)", what=what, limit=limit, text=text)
    request = ModelRequest(
        system=_SYSTEM,
        messages=[UserMessage(prompt)],
        max_tokens=max(256, limit // 3),
        purpose=SUMMARY,
    )
    try:
        response = await model.request(request)
    except Exception:  # a summary is an optimisation; the run must not fail for it
        return Summary(excerpt(text, limit), Usage(), by_model=False)
    written = response.message.text.strip()
    if not written:
        return Summary(excerpt(text, limit), response.usage, by_model=False)
    return Summary(written[: limit * 2], response.usage, by_model=True)


class RunMemory(Protocol):
    """What compression reads and changes of a run (``steward.run_state.RunState`` is one)."""

    goal: str
    memory: WorkingMemory
    transcript: Transcript
    usage: Usage
    price: Callable[[Usage], float | None] | None  # what a summary cost, for its event (None: not priced)


class Budget(Protocol):
    """Where the request budget comes from (``steward.context.ContextBuilder`` is one)."""

    @property
    def budget_chars(self) -> int: ...


class Compressor:
    """Compression inside one run: large outputs, old turns, a failed attempt.

    Each returns the ``compaction`` event to record (the caller stamps and emits it), or None
    when nothing was compressed (no time was left to ask the model). Summaries are asked of the
    run's model within the run's time; a rebuilt run's model answers from the log.
    """

    #: Also keeps the summary of folded turns (their range, the text) in long-term memory, when
    #: the run has it (``steward.memory.archival``); the agent sets it.
    archive: Callable[[str, str], Awaitable[None]] | None = None

    def __init__(
        self,
        model: Model,
        state: RunMemory,
        context: Budget,
        clock: Clock,
        *,
        output_chars: int,
        skip_tools: frozenset[str],
        summarize_turns: bool,
    ) -> None:
        self.model, self.state, self.context, self.clock = model, state, context, clock
        self.output_chars, self.skip_tools, self.summarize_turns = output_chars, skip_tools, summarize_turns

    def compactable(self, tool: str, result: ToolResult) -> bool:
        from steward.rules.marks import split_rules

        limit = self.output_chars
        if not limit or len(result.content) <= limit or tool in self.skip_tools:
            return False
        return len(split_rules(result.content)[0]) > limit  # the rules appended do not count

    async def output(
        self, call_id: str, tool: str, arguments: Mapping[str, Any], result: ToolResult
    ) -> CompactionEvent | None:
        """Replace a large output in the transcript by the model's digest of it."""
        from steward.rules.marks import split_rules

        size, mem = len(result.content), self.state.memory
        current = mem.plan.get(mem.plan.current_sub_task) if mem.plan and mem.plan.current_sub_task else None
        body, rules = split_rules(result.content)  # nested rules are given once: kept verbatim
        compacted = await self._summary(
            "tool_output", call_id, body, limit=self.output_chars // 2,
            task=current.title if current else "", what=f"{tool} {compact_json(dict(arguments))[:300]}",
        )  # fmt: skip
        if compacted is None:
            return None
        pointer = f'recall_output(call_id="{call_id}")'
        heading = f"[{tool} output of {size:,} chars, compacted by the model; {pointer} returns all of it]"
        self.state.transcript.replace_result(call_id, f"{heading}\n{compacted.text}{rules}")
        return compacted

    async def fold(self, kind: str, count: int) -> CompactionEvent | None:
        """Fold ``count`` transcript entries after the goal into a summary (``turns``/``attempt``)."""
        tr = self.state.transcript
        if count <= 0:
            return None
        first = tr.start + 1
        turns = f"turns {tr.entries[first].turn}-{tr.entries[first + count - 1].turn}"
        budget = self.context.budget_chars
        # The summariser's own request must fit the budget too: long entries are cut shorter.
        cap = max(100, min(2_000, budget // 2 // count))
        compacted = await self._summary(
            kind, turns, tr.render(first, count, cap), limit=fold_summary_limit(budget),
            by_model=kind != "turns" or self.summarize_turns,
        )  # fmt: skip
        if compacted is None:
            return None
        heading = (
            "[The previous attempt, summarised before re-planning; the plan, key facts and errors are in "
            "the working memory]"
            if kind == "attempt"
            else f"[Summary of earlier {turns} of this run, written to save context]"
        )
        tr.fold(count, f"{heading}\n{compacted.text}")
        if kind == "turns" and self.archive is not None:
            await self.archive(turns, compacted.text)
        return compacted

    async def _summary(
        self, kind: str, ref: str, text: str, *, limit: int, task: str = "", what: str = "",
        by_model: bool = True,
    ) -> CompactionEvent | None:  # fmt: skip
        """The model's summary (a mechanical excerpt without ``by_model``), as its event."""
        from steward.clock import OutOfTime, within

        if by_model:
            goal = self.state.goal
            try:
                summary = await within(
                    self.clock,
                    lambda: summarize(self.model, kind, text, goal=goal, limit=limit, task=task, what=what),
                )
            except OutOfTime:
                return None  # no time left to summarise: the text stays; the run ends at the next check
        else:
            summary = Summary(excerpt(text, limit), Usage(), by_model=False)
        self.state.usage.add(summary.usage)
        price = self.state.price
        return CompactionEvent(
            kind=kind, ref=ref, chars_before=len(text), text=summary.text, by_model=summary.by_model,
            usage=summary.usage.as_dict(), cost_usd=None if price is None else price(summary.usage),
            priced=price is not None,
        )  # fmt: skip
