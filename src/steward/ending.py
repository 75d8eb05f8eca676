"""When a reply without a tool call may end a run, and what the agent is told when it may not.

The agent says a run is done with ``agent_step`` phase ``end`` (solved, partial or stuck). A
plain-text reply says less: it ends the run ``answered`` (the agent answered, without saying
the goal was reached), unless something says the work is not done:

- the plan has open sub-tasks (anything not ``done`` in the current plan; a failed sub-task
  stays open until a new plan replaces it), or
- no tool call has succeeded in the run and the goal asks for a change, not a question.

Then the reply is answered once with a nudge (what is open, how to go on or how to end), and a
second plain reply while it still holds ends the run ``partial``. The nudge is built from the
run's state only, so a run rebuilt from its log says it again word for word.

A run that does end with an answer (``solved`` or ``answered``) may still be asked once more
whether it is done: open tasks, open sub-tasks of an ``end`` in autonomous mode, or a failing
``[limits] verify`` (``steward.continuation``).

``asks_for_change`` is a judgement for that nudge, not a safety rule: a goal is a question when
it ends with "?" or starts with an asking word; anything else asks for a change. A question
mistaken for a change costs one nudge; a change mistaken for a question loses only the nudge.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

#: The code of the signal recorded when a plain-text reply is sent back (``SignalEvent``).
UNFINISHED_ANSWER = "unfinished_answer"

#: Plain-text replies in a row (no successful tool call between them) while the work is not done
#: before the run ends partial: the first is answered with a nudge, the next one ends it.
MAX_UNFINISHED_ANSWERS = 2

# Words a question, a request for an explanation or small talk starts with (lower case).
_ASKING = frozenset({
    "what", "whats", "what's", "why", "how", "which", "who", "whom", "whose", "when", "where", "whether",
    "is", "are", "am", "was", "were", "does", "do", "did", "can", "could", "should", "would", "will",
    "shall", "may", "might", "has", "have", "had",
    "explain", "describe", "summarize", "summarise", "list", "show", "tell", "compare", "count", "check",
    "review", "analyze", "analyse", "evaluate", "assess", "identify",
    "say", "hi", "hello", "hey", "thanks", "thank",  # words or small talk (a chat's turn): no change
})  # fmt: skip
_FIRST_WORD = re.compile(r"[A-Za-z']+")


def asks_for_change(goal: str) -> bool:
    """Whether ``goal`` reads as asking for a change (rather than a question to answer)."""
    text = goal.strip()
    if not text or text.rstrip("\"')]. ").endswith("?"):
        return False
    first = _FIRST_WORD.search(text)
    if first is None:
        return True
    word = first.group().lower()
    if word == "please":  # "please explain ..." asks as much as "explain ..."
        rest = _FIRST_WORD.search(text, first.end())
        word = rest.group().lower() if rest is not None else word
    return word not in _ASKING


def unfinished(open_tasks: Sequence[tuple[int, str]], *, acted: bool, goal: str, typed: bool) -> str | None:
    """What the agent is told when its plain-text reply cannot end the run; None when it can.

    ``open_tasks``: the current plan's sub-tasks that are not done, as (id, title), in order;
    ``acted``: a tool call has succeeded in the run; ``typed``: the run has an output schema
    (its answer is data by definition: the goal is not judged as a change then).
    """
    if open_tasks:
        first_id, title = open_tasks[0]
        more = f" (and {len(open_tasks) - 1} more)" if len(open_tasks) > 1 else ""
        return (
            f"Your plan says sub-task {first_id} {title!r} is open{more}: go on with it, or end with "
            "agent_step phase end and end_status partial or stuck and say why."
        )
    if not acted and not typed and asks_for_change(goal):
        return (
            "You have not run any tool and the goal asks for a change: make it with the tools, or, "
            "if nothing needs doing, end with agent_step phase end and say why."
        )
    return None
