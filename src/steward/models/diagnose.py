"""Trying a model for real with three tiny requests (``steward doctor --model``).

``steward doctor`` alone only asks a server for its model list, which bills nothing. This asks
the model itself, through the ``Model`` interface every provider implements (so OpenAI, local
OpenAI-compatible servers, Ollama, Anthropic and scripted models are tried the same way):

1. a short text (no tools): is it reachable, and does its text stream in several pieces;
2. one tool, ``get_time``, and the instruction to call it: does a tool call come back, and was
   it streamed or only sent as a whole reply (``streams_tools`` / ``fell_back``, which the
   OpenAI-compatible provider keeps; other providers say nothing, and then it is not asked);
3. a long text with ``max_tokens = 16``: does the server stop there;

and, from all three replies, whether the server reports usage or Steward has to estimate it.
Each request is bounded by ``timeout_s``. A failure becomes a finding naming the fix, never an
exception. The model cannot be used for runs when it cannot be reached or never calls a tool.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from steward.errors import StewardError
from steward.models.base import (
    Model,
    ModelRequest,
    ModelResponse,
    Notice,
    TextDelta,
    ToolSpec,
    Usage,
    UserMessage,
)

__all__ = ["Diagnosis", "Finding", "diagnose"]

REQUEST_TIMEOUT_S = 60.0
"""How long each request may take: a small model on a CPU answers these within seconds."""

LIMIT = 16
"""The ``max_tokens`` of the third request."""

_LIMIT_SLACK = 4  # a server counting a few special tokens into the reply still honours the limit
_LIMIT_STOPS = frozenset({"length", "max_tokens"})  # OpenAI-compatible and Anthropic words for it

Verdict = Literal["ok", "note", "problem", "not asked"]
_LATER = ("streams text", "streams tool calls", "honours max_tokens", "reports usage")

_SYSTEM = "You are being tested by a program. Do exactly what the user asks, nothing more."

GET_TIME = ToolSpec(
    name="get_time",
    description="Tell the current time.",
    parameters={
        "type": "object",
        "properties": {"timezone": {"type": "string", "description": "An IANA time zone; UTC if left out."}},
    },
)

_TEXT = ModelRequest(
    system=_SYSTEM,
    messages=[UserMessage("Count from 1 to 10 in words, separated by commas.")],
    max_tokens=64,
    temperature=0.0,
)
_TOOL = ModelRequest(
    system=_SYSTEM,
    messages=[UserMessage("What time is it? Call the get_time tool to find out; do not answer in words.")],
    tools=[GET_TIME],
    max_tokens=100,  # a call takes a few dozen; a model that rambles instead is cut short
    temperature=0.0,
)
_LONG = ModelRequest(
    system=_SYSTEM,
    messages=[UserMessage("Write a story of at least 300 words about a lighthouse keeper.")],
    max_tokens=LIMIT,
    temperature=0.0,
)


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing learned about the model: what was checked, the verdict, and what was seen (or
    the fix)."""

    check: str
    verdict: Verdict
    detail: str


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """What three tiny requests told about ``model``."""

    model: str
    findings: tuple[Finding, ...]
    #: What the provider said once about how the model is reached (e.g. a fallback it chose).
    notices: tuple[str, ...] = ()

    @property
    def usable(self) -> bool:
        """Whether runs can use it: it answers, and it calls tools."""
        return not any(f.verdict == "problem" for f in self.findings)

    def finding(self, check: str) -> Finding:
        return next(f for f in self.findings if f.check == check)


@dataclass(slots=True)
class _Reply:
    """One request's outcome: the reply and the text pieces before it, or why there is none."""

    response: ModelResponse | None = None
    text_pieces: int = 0
    error: str = ""
    notices: list[str] = field(default_factory=list)


async def _ask(model: Model, request: ModelRequest, timeout_s: float) -> _Reply:
    reply = _Reply()
    items = model.stream(request)
    try:
        async with asyncio.timeout(timeout_s):
            async for item in items:
                if isinstance(item, TextDelta) and item.text:
                    reply.text_pieces += 1
                elif isinstance(item, Notice):
                    reply.notices.append(item.message)
                elif isinstance(item, ModelResponse):
                    reply.response = item
                    break
    except TimeoutError:
        reply.error = (
            f"no whole reply within {timeout_s:g} s: check the server's log; a slow model may need "
            "a smaller one or a faster machine"
        )
    except StewardError as exc:  # ModelError and the rest name their fix
        reply.error = str(exc)
    except Exception as exc:  # a provider's bug is a finding too, never a traceback
        reply.error = f"{type(exc).__name__}: {exc}"
    finally:
        close = getattr(items, "aclose", None)
        if close is not None:
            await close()  # the HTTP stream of a reply left midway is released now
    if reply.response is None and not reply.error:
        reply.error = "the reply ended without a response"
    return reply


async def diagnose(model: Model, *, timeout_s: float = REQUEST_TIMEOUT_S) -> Diagnosis:
    """Send the three requests to ``model`` (one after the other) and say what they showed."""
    text = await _ask(model, _TEXT, timeout_s)
    if text.response is None:
        unasked = (Finding(check, "not asked", "the model could not be reached") for check in _LATER)
        return Diagnosis(
            model.name, (Finding("reachable", "problem", text.error), *unasked), tuple(text.notices)
        )
    answered_as = f" as {text.response.model!r}" if text.response.model else ""
    tool = await _ask(model, _TOOL, timeout_s)
    long = await _ask(model, _LONG, timeout_s)
    findings = (
        Finding("reachable", "ok", f"yes, it answered{answered_as}"),
        _streams_text(text),
        _tool_calls(model, tool),
        _limit(long),
        _usage([r.response for r in (text, tool, long) if r.response is not None]),
    )
    notices = tuple(dict.fromkeys([*text.notices, *tool.notices, *long.notices]))
    return Diagnosis(model.name, findings, notices)


def _streams_text(reply: _Reply) -> Finding:
    if reply.text_pieces >= 2:
        return Finding(
            "streams text", "ok", f"yes, {reply.text_pieces} pieces arrived before the whole reply"
        )
    if reply.text_pieces == 1:
        return Finding("streams text", "note", "answers whole replies (the text came in one piece)")
    return Finding("streams text", "note", "the reply held no text")


def _tool_calls(model: Model, reply: _Reply) -> Finding:
    check = "streams tool calls"
    if reply.response is None:
        return Finding(check, "problem", f"a request with one tool failed: {reply.error}")
    message = reply.response.message
    if not message.tool_calls:
        said = " ".join(message.text.split())[:120]
        return Finding(
            check,
            "problem",
            "no tool call came back"
            + (f" (it answered {said!r})" if said else "")
            + ": runs need a model that calls tools; use one made for tool use, served with tool "
            "calling on (llama-cpp-python: --chat_format chatml-function-calling; llama.cpp's "
            "server: --jinja)",
        )
    call = message.tool_calls[0]
    what = f"{call.name} was called" + (
        " (its arguments were not valid JSON)" if call.arguments_error else ""
    )
    provider = model.name.split(":", 1)[0]
    streamed: bool | None = getattr(model, "streams_tools", None)
    if streamed is True:
        return Finding(check, "ok", f"yes, {what} in a streamed reply")
    if streamed is False and getattr(model, "fell_back", False):
        return Finding(
            check,
            "note",
            f"only in whole replies: {what} once the request was sent again without streaming, as "
            f"runs do by themselves (stream = false in [models.{provider}] skips the first try)",
        )
    if streamed is False:
        return Finding(check, "note", f"{what} in a whole reply (stream = false in [models.{provider}])")
    return Finding(check, "ok", f"{what}; whether it could be streamed is not asked of this provider")


def _limit(reply: _Reply) -> Finding:
    check = "honours max_tokens"
    if reply.response is None:
        return Finding(check, "note", f"a request with max_tokens = {LIMIT} failed: {reply.error}")
    out, stop = reply.response.usage.output_tokens, reply.response.stop_reason
    counted = f"{out} tokens" + (" (estimated)" if reply.response.usage.estimated else "")
    if stop in _LIMIT_STOPS or (0 < out <= LIMIT + _LIMIT_SLACK):
        return Finding(
            check, "ok", f"yes, asked for at most {LIMIT}: {counted}, stop reason {stop or 'none'}"
        )
    return Finding(
        check,
        "note",
        f"no: asked for at most {LIMIT}, the reply held {counted} (stop reason {stop or 'none'}); "
        "[limits] max_output_tokens cannot bound a step here, the call's timeout_s still does",
    )


def _usage(responses: Sequence[ModelResponse]) -> Finding:
    check = "reports usage"
    total = Usage()
    for response in responses:
        total.add(response.usage)
    if total.estimated:
        return Finding(
            check, "note", "no usage: tokens are estimated locally (budgets and the page still work)"
        )
    if total.input_tokens == 0 and total.output_tokens == 0:
        return Finding(check, "note", "no usage reported, and none estimated")
    return Finding(
        check,
        "ok",
        f"yes: {total.input_tokens:,} tokens in, {total.output_tokens:,} out over {len(responses)} replies",
    )
