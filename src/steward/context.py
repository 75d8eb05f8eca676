"""Building one model request within its token budget.

The request is: the static prompt and the working-memory view in the system message (the view
travels as the request's ``context``, so the static prompt stays one shared, cacheable string), then
the transcript (goal, assistant turns, tool results). A tool output travels once, as its
tool result; the view only points at it. When the request would exceed its budget:

1. tool outputs beyond the newest ``keep_recent_observations`` are kept only while they fit
   in ``observation_share`` of the budget; older ones are elided with a pointer that
   ``recall_output`` resolves;
2. if still too large, the oldest whole turns are left out (the view keeps their plan,
   facts and errors), then the view folds its oldest step entries;
3. if the newest outputs alone are too large, they are cut in the middle with a pointer.

Token counts are estimated from characters; the ratio is calibrated from the provider's
reported usage as the run goes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from steward.errors import ConfigError
from steward.models.base import (
    AssistantMessage,
    Message,
    ModelRequest,
    ToolCall,
    ToolResultMessage,
    ToolSpec,
    UserMessage,
)
from steward.phases import AGENT_STEP
from steward.working_memory import Step, WorkingMemory, compact_json

RECALL_TOOL = "recall_output"
DEFAULT_CHARS_PER_TOKEN = 3.5


@dataclass(slots=True)
class Entry:
    message: Message
    chars: int
    turn: int
    # Older assistant turns are sent in a compact form: the plan, facts and thinking they
    # carried are in the view already, so only phase, summary and action travel again.
    compact: Message | None = None
    compact_chars: int = 0
    observation: bool = False
    elided: Message | None = None


def _message_chars(message: Message) -> int:
    match message:
        case AssistantMessage():
            return (
                len(message.text)
                + sum(len(c.name) + len(c.arguments_json()) for c in message.tool_calls)
                + sum(len(t.text) for t in message.thinking)
            )
        case _:
            return len(message.content)


def _compact(message: AssistantMessage) -> AssistantMessage | None:
    if not message.thinking and all(c.name != AGENT_STEP for c in message.tool_calls):
        return None
    calls = tuple(
        ToolCall(
            c.id,
            c.name,
            {k: v for k, v in c.arguments.items() if k in ("phase", "summary", "action")},
            c.arguments_error,
        )
        if c.name == AGENT_STEP
        else c
        for c in message.tool_calls
    )
    return AssistantMessage(text=message.text, tool_calls=calls)


@dataclass(slots=True)
class Transcript:
    """The conversation of one run, with what the budgeter needs to know per message."""

    entries: list[Entry] = field(default_factory=list)
    turn: int = 0
    #: Index of this run's goal (earlier entries are a session's previous turns).
    start: int = 0
    goal: str = ""

    def add_user(self, text: str) -> None:
        self.turn += 1
        self.entries.append(Entry(UserMessage(text), len(text), self.turn))

    def add_goal(self, text: str) -> None:
        """This run's goal, after any earlier turns of its session."""
        self.start, self.goal = len(self.entries), text
        self.add_user(text)

    def replace_result(self, call_id: str, content: str) -> int:
        """Send ``content`` instead of a tool result from now on; return the chars it had."""
        for e in reversed(self.entries):
            message = e.message
            if isinstance(message, ToolResultMessage) and message.call_id == call_id:
                e.message = ToolResultMessage(call_id, message.name, content, message.is_error)
                before, e.chars, e.elided = e.chars, len(content), None
                return before
        return 0

    def foldable(self, keep_turns: int) -> int:
        """How many entries after the goal could be folded, keeping the last ``keep_turns`` turns."""
        if len(self.entries) <= self.start + 1:
            return 0
        keep_from = self.entries[-1].turn - keep_turns + 1
        n = 0
        for e in self.entries[self.start + 1 :]:
            if e.turn >= keep_from:
                break
            n += 1
        return n

    def fold(self, count: int, summary: str) -> None:
        """Replace ``count`` entries after the goal by ``summary``, which joins the goal message.

        The summary rides in the goal's own message so that user and assistant turns still
        alternate; a later fold's summary covers the earlier one, which it replaces.
        """
        goal_entry = self.entries[self.start]
        text = f"{self.goal}\n\n{summary}"
        goal_entry.message, goal_entry.chars = UserMessage(text), len(text)
        del self.entries[self.start + 1 : self.start + 1 + count]

    def render(self, first: int, count: int, cap: int = 2_000) -> str:
        """Entries as plain text for a summary, each long one cut to ``cap`` chars."""
        lines = []
        goal_entry = self.entries[self.start]
        if goal_entry.chars > len(self.goal) and isinstance(goal_entry.message, UserMessage):
            lines.append("Earlier summary: " + goal_entry.message.content[len(self.goal) :].strip())
        for e in self.entries[first : first + count]:
            match e.message:
                case AssistantMessage(text=text, tool_calls=calls):
                    said = [text] if text else []
                    said += [f"call {c.name} {c.arguments_json()[:cap]}" for c in calls]
                    lines.append("assistant: " + " | ".join(said))
                case ToolResultMessage(name=name, content=content, is_error=is_error):
                    mark = "error" if is_error else "result"
                    lines.append(f"{name} {mark}: {content[:cap]}")
                case UserMessage(content=content):
                    lines.append(f"user: {content[:cap]}")
                case _:
                    pass
        return "\n".join(lines)

    def add_assistant(self, message: AssistantMessage) -> None:
        self.turn += 1
        compact = _compact(message)
        self.entries.append(
            Entry(
                message,
                _message_chars(message),
                self.turn,
                compact=compact,
                compact_chars=_message_chars(compact) if compact else 0,
            )
        )

    def add_tool_result(self, result: ToolResultMessage, *, observation: bool) -> None:
        self.entries.append(Entry(result, len(result.content), self.turn, observation=observation))

    def messages(self) -> list[Message]:
        return [e.message for e in self.entries]


def _pointer(result: ToolResultMessage) -> ToolResultMessage:
    from steward.rules.marks import split_rules

    _, rules = split_rules(result.content)  # rules given once per run must stay in sight
    text = (
        f"[output elided to save context: {len(result.content):,} chars from {result.name}; "
        f'recall_output(call_id="{result.call_id}") returns it]{rules}'
    )
    return ToolResultMessage(result.call_id, result.name, text, result.is_error)


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


@dataclass(slots=True)
class BuiltRequest:
    request: ModelRequest
    chars: int
    estimated_tokens: int
    elided: int
    dropped_turns: int


def _schema_chars(tools: Sequence[ToolSpec]) -> int:
    return sum(len(t.name) + len(t.description) + len(compact_json(t.parameters)) for t in tools)


class ContextBuilder:
    """Builds budgeted requests for one run and learns its chars-per-token ratio."""

    def __init__(self, settings: BudgetSettings) -> None:
        self.settings = settings
        self.chars_per_token = DEFAULT_CHARS_PER_TOKEN
        self._elided_upto = 0  # entries before this index stay elided (keeps prefixes stable)
        # The schemas' size, keyed by the identity of the tool specs (the toolsets hand out the
        # same spec objects step after step; the list around them is new each time).
        self._tools_key: tuple[int, ...] = ()
        self._tools_chars = 0

    def calibrate(self, chars_sent: int, input_tokens: int) -> None:
        if input_tokens <= 0 or chars_sent <= 0:
            return
        observed = min(6.0, max(2.0, chars_sent / input_tokens))
        self.chars_per_token = 0.5 * self.chars_per_token + 0.5 * observed

    def build(
        self,
        static_prompt: str,
        memory: WorkingMemory,
        signals: str,
        transcript: Transcript,
        tools: Sequence[ToolSpec],
    ) -> BuiltRequest:
        s = self.settings
        budget = int(s.request_tokens * self.chars_per_token)
        key = tuple(map(id, tools))
        if key != self._tools_key:
            self._tools_key, self._tools_chars = key, _schema_chars(tools)
        fixed = self._tools_chars
        entries = transcript.entries
        last_assistant = max(
            (i for i, e in enumerate(entries) if isinstance(e.message, AssistantMessage)), default=-1
        )

        chosen: list[Message] = []
        sizes: list[int] = []
        obs_index: list[int] = []
        for i, e in enumerate(entries):
            if e.compact is not None and i != last_assistant:
                chosen.append(e.compact)
                sizes.append(e.compact_chars)
            else:
                chosen.append(e.message)
                sizes.append(e.chars)
                if e.observation:
                    obs_index.append(i)

        # The static prompt is one shared string; the view travels apart as the request's context.
        fixed += len(static_prompt) + 2
        view = memory.render_view(signals, output=_reference) if memory.steps or memory.plan else ""
        total = fixed + len(view) + sum(sizes)
        elided = self._elide(entries, chosen, sizes, obs_index, total, budget)
        total = fixed + len(view) + sum(sizes)

        dropped = 0
        if total > budget:
            dropped, total = self._drop_turns(entries, chosen, sizes, total, budget)
        if total > budget and memory.steps:
            view, total = self._fold_view(memory, signals, dropped, fixed, sizes, budget)
        elif dropped:
            view += _dropped_note(dropped)
            total += len(_dropped_note(dropped))
        if total > budget:
            total = self._cut_newest(chosen, sizes, obs_index, total, budget) + 0
        if total > budget:
            fixed_tokens = int((fixed + len(view)) / self.chars_per_token)
            rest_tokens = int(sum(sizes) / self.chars_per_token)
            raise ConfigError(
                f"The request budget of {s.request_tokens:,} tokens is too small: the system prompt and "
                f"tool schemas take ~{fixed_tokens:,} tokens and the goal and conversation that cannot be "
                f"left out ~{rest_tokens:,}. Raise limits.request_token_budget in steward.toml, or shorten "
                "the goal."
            )
        request = ModelRequest(
            system=static_prompt, messages=[m for m in chosen if m is not None], tools=tools, context=view
        )
        return BuiltRequest(request, total, int(total / self.chars_per_token), elided, dropped)

    def _elide(
        self,
        entries: list[Entry],
        chosen: list[Message],
        sizes: list[int],
        obs_index: list[int],
        total: int,
        budget: int,
    ) -> int:
        s = self.settings
        share = int(budget * s.observation_share)
        kept = 0
        elided = 0
        cutoff = -1
        for rank, i in enumerate(reversed(obs_index)):
            size = sizes[i]
            if rank < s.keep_recent or (kept + size <= share and i >= self._elided_upto):
                kept += size
                continue
            cutoff = i
            break
        if cutoff < 0:
            return 0
        for i in obs_index:
            if i > cutoff:
                break
            e = entries[i]
            if e.elided is None:
                assert isinstance(e.message, ToolResultMessage)
                e.elided = _pointer(e.message)
            chosen[i] = e.elided
            sizes[i] = len(e.elided.content)  # type: ignore[union-attr]
            elided += 1
        self._elided_upto = max(self._elided_upto, cutoff + 1)
        return elided

    def _drop_turns(
        self, entries: list[Entry], chosen: list[Message], sizes: list[int], total: int, budget: int
    ) -> tuple[int, int]:
        # Whole turns only (an assistant message with its tool results), never the goal
        # (first message) nor the last two turns.
        last_turn = entries[-1].turn if entries else 0
        dropped_turns: set[int] = set()
        for i, e in enumerate(entries):
            if total <= budget or e.turn >= last_turn - 1:
                break
            if i == 0 or isinstance(e.message, UserMessage):
                continue
            total -= sizes[i]
            sizes[i] = 0
            chosen[i] = None  # type: ignore[call-overload]
            dropped_turns.add(e.turn)
        return len(dropped_turns), total

    def _fold_view(
        self, memory: WorkingMemory, signals: str, dropped: int, fixed: int, sizes: list[int], budget: int
    ) -> tuple[str, int]:
        note = _dropped_note(dropped) if dropped else ""
        rest = fixed + sum(sizes)
        view = ""
        first = 0
        for _ in range(32):  # halve the shown steps until the view fits (bounded)
            first = len(memory.steps) - max(1, (len(memory.steps) - first) // 2)
            view = memory.render_view(signals, output=_reference, first_step_shown=first) + note
            if rest + len(view) <= budget or first >= len(memory.steps) - 1:
                break
        return view, rest + len(view)

    def _cut_newest(
        self, chosen: list[Message], sizes: list[int], obs_index: list[int], total: int, budget: int
    ) -> int:
        for i in obs_index:
            message = chosen[i]
            if total <= budget:
                break
            if not isinstance(message, ToolResultMessage) or message.content.startswith("[output elided"):
                continue
            excess = total - budget
            keep = max(200, sizes[i] - excess - 200)
            if keep >= sizes[i]:
                continue
            cut = _cut(message, keep)
            total += len(cut.content) - sizes[i]
            chosen[i] = cut
            sizes[i] = len(cut.content)
        return total


def _dropped_note(dropped: int) -> str:
    return (
        f"\n\n({dropped} earlier turns of this run are left out of the transcript to fit the request "
        "budget; the working memory above keeps their plan, key facts and errors.)"
    )


def _reference(step: Step) -> str:
    size = len(step.tool_output or "")
    return f"{size:,} chars in the tool result of call {step.call_id}"
