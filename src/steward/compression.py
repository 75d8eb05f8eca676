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

from dataclasses import dataclass

from steward.models.base import Model, ModelRequest, Usage, UserMessage

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


def excerpt(text: str, limit: int) -> str:
    """The head and tail of ``text`` within ``limit`` characters (the fallback, and the fakes')."""
    if len(text) <= limit:
        return text
    head = max(1, limit * 3 // 5)
    tail = max(1, limit - head - 40)
    return f"{text[:head]}\n[... {len(text) - head - tail:,} chars omitted ...]\n{text[-tail:]}"
