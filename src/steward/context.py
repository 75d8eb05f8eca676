"""Building one model request within its token budget.

The request is: the static prompt and the working-memory view in the system message (the view
travels as the request's ``context``, so the static prompt stays one shared, cacheable string), then
the transcript (goal, assistant turns, tool results; kept in ``steward.memory.transcript``). A
tool output travels once, as its tool result; the view only points at it. When the request
would exceed its budget:

1. tool outputs beyond the newest ``keep_recent_observations`` are kept only while they fit
   in ``observation_share`` of the budget; older ones are elided, for good, with a pointer
   that ``recall_output`` resolves;
2. when the run's turns outgrow ``history_share`` of the budget (or the request would not
   fit), the oldest whole turns are folded into a summary that joins the goal's message
   (the view keeps their plan, facts and errors); this happens as the run goes, so a run of
   any length sends requests of bounded size, built in bounded time;
3. if still too large, the view folds more of its step entries, then the newest outputs
   are cut in the middle with a pointer.

Token counts are estimated from characters (``steward.memory.budget``); the ratio is
calibrated from the provider's reported usage as the run goes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from steward.errors import ConfigError
from steward.memory.budget import DEFAULT_CHARS_PER_TOKEN, budget_chars, fold_summary_limit
from steward.memory.transcript import Transcript
from steward.memory.working import Step, WorkingMemory
from steward.models.base import Message, ModelRequest, ToolResultMessage, ToolSpec, schema_chars


def _cut(result: ToolResultMessage, keep: int) -> ToolResultMessage:
    head, tail = result.content[: keep // 2], result.content[-(keep // 2) :] if keep > 1 else ""
    cut = len(result.content) - len(head) - len(tail)
    pointer = f'recall_output(call_id="{result.call_id}")'
    note = f"\n[... {cut:,} chars cut to fit the request budget; {pointer} returns all of it ...]\n"
    return ToolResultMessage(result.call_id, result.name, head + note + tail, result.is_error)


@dataclass(slots=True)
class BudgetSettings:
    request_tokens: int = 32_000
    observation_share: float = 0.2
    keep_recent: int = 3
    #: When the run's turns outgrow this share of the budget, the oldest are folded into a
    #: summary, down to half of it: the transcript stays bounded however long the run.
    history_share: float = 0.5
    keep_turns: int = 2


@dataclass(slots=True)
class BuiltRequest:
    request: ModelRequest
    chars: int
    estimated_tokens: int
    elided: int
    #: Entries after the goal to fold into a summary before this request is sent (0: none).
    fold: int = 0


class ContextBuilder:
    """Builds budgeted requests for one run and learns its chars-per-token ratio."""

    def __init__(self, settings: BudgetSettings) -> None:
        self.settings = settings
        self.chars_per_token = DEFAULT_CHARS_PER_TOKEN
        # The schemas' size, keyed by the identity of the tool specs (the toolsets hand out the
        # same spec objects step after step; the list around them is new each time).
        self._tools_key: tuple[int, ...] = ()
        self._tools_chars = 0

    def calibrate(self, chars_sent: int, input_tokens: int) -> None:
        if input_tokens <= 0 or chars_sent <= 0:
            return
        observed = min(6.0, max(2.0, chars_sent / input_tokens))
        self.chars_per_token = 0.5 * self.chars_per_token + 0.5 * observed

    @property
    def budget_chars(self) -> int:
        return budget_chars(self.settings.request_tokens, chars_per_token=self.chars_per_token)

    def build(
        self,
        static_prompt: str,
        memory: WorkingMemory,
        signals: str,
        transcript: Transcript,
        tools: Sequence[ToolSpec],
        *,
        may_fold: bool = True,
    ) -> BuiltRequest:
        """The request for the next step.

        With ``may_fold``, a transcript that outgrew its share (or the budget) is not trimmed
        here: the request says how many old entries to fold, and the caller folds them (into a
        summary it records) and builds again. Otherwise the request is made to fit, or a
        ``ConfigError`` names the fix.
        """
        s = self.settings
        budget = self.budget_chars
        key = tuple(map(id, tools))
        if key != self._tools_key:
            self._tools_key, self._tools_chars = key, schema_chars(tools)
        # The static prompt is one shared string; the view travels apart as the request's context.
        fixed = self._tools_chars + len(static_prompt) + 2
        view = memory.render_view(signals, output=_reference) if memory.steps or memory.plan else ""
        transcript.elide(int(budget * s.observation_share), s.keep_recent)
        total = fixed + len(view) + transcript.total
        if may_fold:
            history_cap = int(budget * s.history_share)
            if transcript.history_chars() > history_cap or total > budget:
                room = budget - (total - transcript.history_chars()) - 2 * fold_summary_limit(budget)
                fold = transcript.fold_count(max(0, min(history_cap // 2, room)), s.keep_turns)
                if fold:
                    request = ModelRequest(system=static_prompt, messages=[], tools=tools, context=view)
                    return BuiltRequest(request, total, int(total / self.chars_per_token), 0, fold)

        messages = transcript.messages()
        if total > budget and memory.steps:
            view, total = self._fold_view(memory, signals, fixed, transcript.total, budget)
        if total > budget:
            total = self._cut_newest(messages, transcript, total, budget)
        if total > budget:
            fixed_tokens = int((fixed + len(view)) / self.chars_per_token)
            rest_tokens = int(transcript.total / self.chars_per_token)
            raise ConfigError(
                f"The request budget of {s.request_tokens:,} tokens is too small: the system prompt and "
                f"tool schemas take ~{fixed_tokens:,} tokens and the goal and conversation that cannot be "
                f"left out ~{rest_tokens:,}. Raise limits.request_token_budget in steward.toml, or shorten "
                "the goal."
            )
        request = ModelRequest(system=static_prompt, messages=messages, tools=tools, context=view)
        return BuiltRequest(request, total, int(total / self.chars_per_token), transcript.elided)

    def _fold_view(
        self, memory: WorkingMemory, signals: str, fixed: int, history: int, budget: int
    ) -> tuple[str, int]:
        rest = fixed + history
        view = ""
        first = 0
        for _ in range(32):  # halve the shown steps until the view fits (bounded)
            first = len(memory.steps) - max(1, (len(memory.steps) - first) // 2)
            view = memory.render_view(signals, output=_reference, first_step_shown=first)
            if rest + len(view) <= budget or first >= len(memory.steps) - 1:
                break
        return view, rest + len(view)

    def _cut_newest(self, messages: list[Message], transcript: Transcript, total: int, budget: int) -> int:
        """Cut the observations still sent in full in the middle, oldest first, until it fits."""
        for i in transcript.verbatim():
            message = messages[i]
            if total <= budget:
                break
            if not isinstance(message, ToolResultMessage):
                continue
            size = len(message.content)
            keep = max(200, size - (total - budget) - 200)
            if keep >= size:
                continue
            cut = _cut(message, keep)
            total += len(cut.content) - size
            messages[i] = cut
        return total


def _reference(step: Step) -> str:
    size = len(step.tool_output or "")
    return f"{size:,} chars in the tool result of call {step.call_id}"
