"""Fake models that ship with Steward: a scripted model and a function model.

``ScriptedModel`` replays replies from a JSON or YAML file (``scripted:FILE``), for the
demo and for tests. It fails loudly: a malformed script is a ``ScriptError`` naming the
reply and key, running out of replies is a ``ScriptError``, and ``assert_consumed`` /
``unconsumed`` report replies that were never used.

A script is a list of replies (or ``{"replies": [...]}``). Each reply is a mapping with any
of these keys::

    thinking: "reasoning text"
    text: "what the assistant says (a reply with text and no tool call is the final answer)"
    tool_calls: [{name: bash, arguments: {command: "ls"}, id: optional}]
    tool: read_file            # shorthand for one tool call ...
    args: {path: README.md}    # ... with these arguments
    agent_step: {phase: plan, summary: ..., plan: {...}}   # shorthand for a call to agent_step

``FunctionModel`` answers with a Python function of the request: the way to drive the loop
from code (benchmarks, tests that react to what the agent sent).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from steward.errors import ScriptError
from steward.models.base import (
    AssistantMessage,
    Model,
    ModelRequest,
    ModelResponse,
    StreamItem,
    TextDelta,
    Thinking,
    ThinkingDelta,
    ToolCall,
    Usage,
    UserMessage,
)

_REPLY_KEYS = frozenset({"thinking", "text", "tool_calls", "tool", "args", "agent_step"})
_CALL_KEYS = frozenset({"name", "arguments", "id"})


def _estimate_usage(request: ModelRequest, message: AssistantMessage) -> Usage:
    # No provider counts tokens for a script; a rough estimate keeps budgets meaningful.
    sent = (
        len(request.system)
        + len(request.context)
        + sum(len(getattr(m, "content", "") or "") for m in request.messages)
    )
    out = len(message.text) + sum(len(c.arguments_json()) for c in message.tool_calls)
    return Usage(input_tokens=sent // 4, output_tokens=out // 4, requests=1)


def _reply_from_mapping(raw: Any, where: str) -> AssistantMessage:
    if not isinstance(raw, Mapping):
        raise ScriptError(f"{where}: a reply must be a mapping with keys {sorted(_REPLY_KEYS)}, got {raw!r}")
    unknown = set(raw) - _REPLY_KEYS
    if unknown:
        raise ScriptError(
            f"{where}: unknown key(s) {sorted(unknown)}; allowed keys are {sorted(_REPLY_KEYS)}"
        )
    calls: list[ToolCall] = []
    for n, call in enumerate(raw.get("tool_calls") or [], start=1):
        if not isinstance(call, Mapping) or "name" not in call or set(call) - _CALL_KEYS:
            raise ScriptError(f"{where}, tool call {n}: write it as {{name: TOOL, arguments: {{...}}}}")
        calls.append(_call(call["name"], call.get("arguments") or {}, call.get("id"), where))
    if "tool" in raw:
        calls.append(_call(raw["tool"], raw.get("args") or {}, None, where))
    elif "args" in raw:
        raise ScriptError(f"{where}: 'args' needs a 'tool' key naming the tool")
    if "agent_step" in raw:
        calls.append(_call("agent_step", raw["agent_step"], None, where))
    text = raw.get("text") or ""
    if not calls and not text:
        raise ScriptError(f"{where}: a reply needs 'text' or at least one tool call")
    thinking = (Thinking(str(raw["thinking"])),) if raw.get("thinking") else ()
    return AssistantMessage(text=str(text), tool_calls=tuple(calls), thinking=thinking)


def _call(name: Any, arguments: Any, call_id: Any, where: str) -> ToolCall:
    if not isinstance(name, str) or not name:
        raise ScriptError(f"{where}: a tool name must be a non-empty string, got {name!r}")
    if not isinstance(arguments, Mapping):
        raise ScriptError(f"{where}: arguments of {name} must be a mapping, got {arguments!r}")
    return ToolCall(id=str(call_id or ""), name=name, arguments=dict(arguments))


def load_script(path: str | Path) -> list[AssistantMessage]:
    """Read and check a script file; every problem is a ``ScriptError`` naming the fix."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ScriptError(
            f"scripted model: script file '{path}' was not found. "
            "Pass an existing JSON or YAML file: --model scripted:path/to/script.yaml"
        ) from None
    except OSError as exc:
        raise ScriptError(f"scripted model: cannot read '{path}': {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ScriptError(f"scripted model: '{path}' is not UTF-8 text; save it as UTF-8") from None
    return parse_script(text, str(path), json_only=file.suffix.lower() == ".json")


def parse_script(text: str, source: str, *, json_only: bool = False) -> list[AssistantMessage]:
    """Parse a script's text (YAML, which includes JSON)."""
    path = source
    import yaml

    try:
        data = json.loads(text) if json_only else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise ScriptError(
            f"scripted model: '{path}' is not valid {'JSON' if json_only else 'YAML'}: {exc}"
        ) from None
    if isinstance(data, Mapping) and "replies" in data:
        data = data["replies"]
    if not isinstance(data, list) or not data:
        raise ScriptError(
            f"scripted model: '{path}' must hold a non-empty list of replies (or {{replies: [...]}})"
        )
    return [_reply_from_mapping(raw, f"{path}, reply {n}") for n, raw in enumerate(data, start=1)]


class ScriptedModel(Model):
    """Replies from a list, in order; loud when it runs out or is left over."""

    def __init__(
        self, replies: Sequence[AssistantMessage], *, name: str = "scripted", source: str = ""
    ) -> None:
        self.name = name
        self.replies = list(replies)
        self.source = source or "the script"
        self.used = 0

    @classmethod
    def from_file(cls, path: str | Path) -> ScriptedModel:
        return cls(load_script(path), name=f"scripted:{path}", source=str(path))

    @classmethod
    def from_data(cls, replies: Sequence[Mapping[str, Any]], *, source: str = "the script") -> ScriptedModel:
        """Build from reply mappings written in Python (the same keys as in a script file)."""
        parsed = [_reply_from_mapping(raw, f"{source}, reply {n}") for n, raw in enumerate(replies, start=1)]
        return cls(parsed, source=source)

    @property
    def unconsumed(self) -> int:
        return len(self.replies) - self.used

    def warnings(self) -> list[str]:
        if not self.unconsumed:
            return []
        return [
            f"{self.unconsumed} of {len(self.replies)} scripted replies in {self.source} were never used."
        ]

    def assert_consumed(self) -> None:
        """Raise ``ScriptError`` if some replies were never used."""
        if self.unconsumed:
            raise ScriptError(
                f"scripted model: {self.unconsumed} of {len(self.replies)} replies in {self.source} "
                f"were never used (the run ended after reply {self.used})."
            )

    def replayed(self) -> None:
        self.used += 1

    async def probe(self) -> str:
        return f"{len(self.replies)} scripted replies read from {self.source}"

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        if request.purpose != "step":  # a summary: not part of the script
            yield _summary_reply(request, self.name)
            return
        if self.used >= len(self.replies):
            raise ScriptError(
                f"scripted model: {self.source} has {len(self.replies)} replies and all were used; "
                f"the agent asked for reply {self.used + 1}. Add replies, or end the script with an "
                "agent_step of phase 'end' (a plain text reply ends the run 'answered', or is sent "
                "back once when the plan is open or nothing was done)."
            )
        message = self.replies[self.used]
        self.used += 1
        message = _number_calls(message, self.used)
        for thought in message.thinking:
            yield ThinkingDelta(thought.text)
        if message.text:
            yield TextDelta(message.text)
        yield ModelResponse(message, _estimate_usage(request, message), model=self.name, stop_reason="end")


def _number_calls(message: AssistantMessage, reply: int) -> AssistantMessage:
    if all(c.id for c in message.tool_calls):
        return message
    calls = tuple(
        c if c.id else ToolCall(f"call_{reply}_{n}", c.name, c.arguments)
        for n, c in enumerate(message.tool_calls, start=1)
    )
    return AssistantMessage(text=message.text, tool_calls=calls, thinking=message.thinking)


ReplyFunction = Callable[[ModelRequest], AssistantMessage]


def _summary_reply(request: ModelRequest, name: str) -> ModelResponse:
    """A deterministic stand-in for a model's summary: an excerpt of what was to be summarised."""
    from steward.text import excerpt

    last = request.messages[-1] if request.messages else None
    text = last.content if isinstance(last, UserMessage) else ""
    limit = (request.max_tokens or 1000) * 3
    return ModelResponse(AssistantMessage(text=excerpt(text, limit)), Usage(requests=1), model=name)


class FunctionModel(Model):
    """Answers each request with ``function(request)``; no tokens are counted (usage stays 0)."""

    def __init__(self, function: ReplyFunction, *, name: str = "function", summaries: bool = False) -> None:
        self.name = name
        self.function = function
        #: Whether ``function`` also answers summary requests; otherwise they get an excerpt.
        self.summaries = summaries

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        if request.purpose != "step" and not self.summaries:
            yield _summary_reply(request, self.name)
            return
        message = self.function(request)
        if message.text:
            yield TextDelta(message.text)
        yield ModelResponse(message, Usage(requests=1), model=self.name)
