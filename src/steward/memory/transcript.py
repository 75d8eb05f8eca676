"""The transcript of one run: its messages in the form they are sent, with running totals.

Older assistant turns travel compacted (their plan, facts and thinking are in the working
memory view); older observations are elided, for good, to a pointer that ``recall_output``
resolves; the oldest turns can be folded into a summary that joins the goal's message. The
request builder (``steward.context``) decides when; this module keeps the result.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from steward.models.base import AssistantMessage, Message, ToolCall, ToolResultMessage, UserMessage
from steward.phases import AGENT_STEP


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
    #: What requests carry for this entry now (the message, its compact form or its pointer).
    sent: Message | None = None
    sent_chars: int = 0
    #: An observation still sent in full (older ones are elided to a pointer, for good).
    verbatim: bool = False


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
    """The conversation of one run, kept in the form it is sent, with running totals.

    Every change is O(1) (a fold, which happens once in many steps, re-indexes), so building a
    request costs the same at step 10,000 as at step 50.
    """

    entries: list[Entry] = field(default_factory=list)
    turn: int = 0
    #: Index of this run's goal (earlier entries are a session's previous turns).
    start: int = 0
    goal: str = ""
    #: Characters of every entry as sent now.
    total: int = 0
    #: How many observations are elided to a pointer.
    elided: int = 0
    _sent: list[Message] = field(default_factory=list, repr=False, compare=False)
    _last_assistant: int = field(default=-1, repr=False, compare=False)
    _verbatim: deque[int] = field(default_factory=deque, repr=False, compare=False)
    _verbatim_chars: int = field(default=0, repr=False, compare=False)

    def _append(self, entry: Entry) -> None:
        entry.sent, entry.sent_chars = entry.message, entry.chars
        self.entries.append(entry)
        self._sent.append(entry.message)
        self.total += entry.chars

    def _send(self, index: int, message: Message, chars: int) -> None:
        entry = self.entries[index]
        self.total += chars - entry.sent_chars
        entry.sent, entry.sent_chars = message, chars
        self._sent[index] = message

    def add_user(self, text: str) -> None:
        self.turn += 1
        self._append(Entry(UserMessage(text), len(text), self.turn))

    def add_goal(self, text: str) -> None:
        """This run's goal, after any earlier turns of its session."""
        self.start, self.goal = len(self.entries), text
        self.add_user(text)

    def add_assistant(self, message: AssistantMessage) -> None:
        last = self._last_assistant
        if last >= 0 and (older := self.entries[last]).compact is not None:
            self._send(last, older.compact, older.compact_chars)
        self.turn += 1
        compact = _compact(message)
        self._last_assistant = len(self.entries)
        self._append(
            Entry(
                message,
                _message_chars(message),
                self.turn,
                compact=compact,
                compact_chars=_message_chars(compact) if compact else 0,
            )
        )

    def add_tool_result(self, result: ToolResultMessage, *, observation: bool) -> None:
        entry = Entry(result, len(result.content), self.turn, observation=observation, verbatim=observation)
        if observation:
            self._verbatim.append(len(self.entries))
            self._verbatim_chars += entry.chars
        self._append(entry)

    def replace_result(self, call_id: str, content: str) -> int:
        """Send ``content`` instead of a tool result from now on; return the chars it had."""
        for i in range(len(self.entries) - 1, -1, -1):
            e = self.entries[i]
            message = e.message
            if isinstance(message, ToolResultMessage) and message.call_id == call_id:
                e.message = ToolResultMessage(call_id, message.name, content, message.is_error)
                before, e.chars = e.chars, len(content)
                if e.verbatim:
                    self._verbatim_chars += e.chars - before
                if e.elided is not None:
                    e.elided = _pointer(e.message)
                    self._send(i, e.elided, _message_chars(e.elided))
                else:
                    self._send(i, e.message, e.chars)
                return before
        return 0

    def elide(self, share: int, keep_recent: int) -> None:
        """Elide the oldest observations sent in full until the rest fit in ``share`` chars.

        The newest ``keep_recent`` always stay. Elision is for good, so the start of the
        transcript stays the same from request to request (providers cache it).
        """
        while self._verbatim_chars > share and len(self._verbatim) > keep_recent:
            i = self._verbatim.popleft()
            e = self.entries[i]
            assert isinstance(e.message, ToolResultMessage)
            e.verbatim, e.elided = False, _pointer(e.message)
            self._verbatim_chars -= e.chars
            self._send(i, e.elided, _message_chars(e.elided))
            self.elided += 1

    def verbatim(self) -> Sequence[int]:
        """Indices of the observations sent in full, oldest first."""
        return self._verbatim

    def history_chars(self) -> int:
        """Characters of this run's turns after its goal (what a fold can shrink)."""
        return self.total - sum(e.sent_chars for e in self.entries[: self.start + 1])

    def fold_count(self, target: int, keep_turns: int) -> int:
        """How many entries after the goal to fold so that the rest fit in ``target`` chars.

        Folds end at a turn boundary and never take the newest ``keep_turns`` turns.
        """
        limit = self.foldable(keep_turns)
        rest = self.history_chars()
        n = 0
        first = self.start + 1
        while n < limit and rest > target:
            rest -= self.entries[first + n].sent_chars
            n += 1
        while n < limit and self.entries[first + n].turn == self.entries[first + n - 1].turn:
            n += 1  # the tool results of the last folded assistant turn go with it
        return n

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
        goal_entry.sent, goal_entry.sent_chars = goal_entry.message, goal_entry.chars
        del self.entries[self.start + 1 : self.start + 1 + count]
        self._reindex()

    def _reindex(self) -> None:
        entries = self.entries
        self._sent = [e.sent if e.sent is not None else e.message for e in entries]
        self.total = sum(e.sent_chars for e in entries)
        self._last_assistant = max(
            (i for i, e in enumerate(entries) if isinstance(e.message, AssistantMessage)), default=-1
        )
        self._verbatim = deque(i for i, e in enumerate(entries) if e.verbatim)
        self._verbatim_chars = sum(entries[i].chars for i in self._verbatim)
        self.elided = sum(1 for e in entries if e.elided is not None)

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

    def messages(self) -> list[Message]:
        """The messages as sent now (a new list; the caller may change it)."""
        return list(self._sent)


def _pointer(result: ToolResultMessage) -> ToolResultMessage:
    from steward.rules.marks import split_rules

    _, rules = split_rules(result.content)  # rules given once per run must stay in sight
    text = (
        f"[output elided to save context: {len(result.content):,} chars from {result.name}; "
        f'recall_output(call_id="{result.call_id}") returns it]{rules}'
    )
    return ToolResultMessage(result.call_id, result.name, text, result.is_error)
