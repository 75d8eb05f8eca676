"""The Chat Completions wire format: what is sent, and how a reply is put together.

Requests are shaped so that every OpenAI-compatible server takes them: an assistant turn
always carries a string ``content`` (``""`` beside tool calls; llama-cpp-python refuses
``null``), and ``tool_choice: "auto"`` goes with every offer of tools (OpenAI's default
anyway; llama-cpp-python's function-calling format shows the tools only when it is named).

Replies are read from the JSON the server sent, streamed chunks or one whole body, as plain
objects rather than through the SDK's models: local servers put fields where they like
(``reasoning_content`` or ``reasoning``, arguments as an object, no index on a fragment).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, assert_never

from ._think import ThinkFilter
from .base import (
    AssistantMessage,
    Message,
    ModelRequest,
    ModelResponse,
    SystemMessage,
    TextDelta,
    Thinking,
    ThinkingDelta,
    ToolCall,
    ToolResultMessage,
    ToolSpec,
    Usage,
    UserMessage,
    parse_arguments,
)
from .tokens import estimate_usage

if TYPE_CHECKING:
    from openai.types.chat import (
        ChatCompletionAssistantMessageParam,
        ChatCompletionFunctionToolParam,
        ChatCompletionMessageParam,
    )

__all__ = ["ReplyAssembler", "messages", "tools"]

JSON = dict[str, Any]
Delta = TextDelta | ThinkingDelta


# --- request mapping ---------------------------------------------------------------------


def messages(request: ModelRequest) -> list[ChatCompletionMessageParam]:
    out: list[ChatCompletionMessageParam] = []
    if request.system or request.context:
        out.append({"role": "system", "content": request.system_text})
    out.extend(_message(message) for message in request.messages)
    return out


def _message(message: Message) -> ChatCompletionMessageParam:
    match message:
        case SystemMessage():
            return {"role": "system", "content": message.content}
        case UserMessage():
            return {"role": "user", "content": message.content}
        case AssistantMessage():
            return _assistant(message)
        case ToolResultMessage():
            # Chat Completions has no error flag: the content itself must say the call failed.
            return {"role": "tool", "tool_call_id": message.call_id, "content": message.content}
        case _:
            assert_never(message)


def _assistant(message: AssistantMessage) -> ChatCompletionAssistantMessageParam:
    # Thinking is not sent back: Chat Completions has no field for it. The content is a string
    # even beside tool calls: OpenAI takes "" as well as null, llama-cpp-python only "".
    out: ChatCompletionAssistantMessageParam = {"role": "assistant", "content": message.text}
    if message.tool_calls:
        out["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments_json()},
            }
            for call in message.tool_calls
        ]
    return out


def tools(specs: Sequence[ToolSpec]) -> list[ChatCompletionFunctionToolParam]:
    return [
        {
            "type": "function",
            "function": {"name": t.name, "description": t.description, "parameters": dict(t.parameters)},
        }
        for t in specs
    ]


# --- reply assembly ----------------------------------------------------------------------


@dataclass
class _PendingCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


def _objects(value: object) -> Iterator[JSON]:
    """The JSON objects in a list (anything else in it, or a non-list, is skipped)."""
    if isinstance(value, list):
        yield from (item for item in value if isinstance(item, dict))


def _first_choice(payload: JSON) -> JSON | None:
    return next((c for c in _objects(payload.get("choices")) if c.get("index", 0) == 0), None)


def _text(value: object) -> str:
    """Content as a string: some servers send a list of parts instead."""
    if isinstance(value, str):
        return value
    return "".join(str(part.get("text") or "") for part in _objects(value))


class ReplyAssembler:
    """Collects one reply: text through the think filter, reasoning, tool calls, usage, the end.

    ``chunks`` counts the streamed chunks read; ``delivered`` is whether any of them carried a
    piece of the reply (text, reasoning or a tool call), not just the role or usage.
    """

    def __init__(self) -> None:
        self.think = ThinkFilter()
        self.text: list[str] = []
        self.thinking: list[str] = []
        self.calls: dict[int, _PendingCall] = {}
        self.usage: Usage | None = None
        self.finish_reason = ""
        self.model = ""
        self.chunks = 0
        self.done = False
        self.delivered = False

    @property
    def complete(self) -> bool:
        """The server said the reply is over: a finish reason, or ``[DONE]``."""
        return bool(self.finish_reason) or self.done

    def add_chunk(self, chunk: JSON) -> list[Delta]:
        """One streamed ``chat.completion.chunk``."""
        self.chunks += 1
        self._common(chunk)
        choice = _first_choice(chunk)
        if choice is None:
            return []
        delta = choice.get("delta")
        delta = delta if isinstance(delta, dict) else {}
        out = self._content(delta)
        for fragment in _objects(delta.get("tool_calls")):
            self._add_fragment(fragment)
        self._finish(choice)
        return self._record(out)

    def add_whole(self, completion: JSON) -> list[Delta]:
        """A whole ``chat.completion`` body: its text comes out at once."""
        self._common(completion)
        choice = _first_choice(completion)
        if choice is None:
            return []
        message = choice.get("message")
        message = message if isinstance(message, dict) else {}
        out = self._content(message)
        for position, call in enumerate(_objects(message.get("tool_calls"))):
            self._add_fragment({**call, "index": position})
        self._finish(choice)
        return self._record(out)

    def finish(self) -> list[Delta]:
        return self._record(self.think.flush())

    def response(self, requested_model: str, request: ModelRequest) -> ModelResponse:
        thinking = (Thinking("".join(self.thinking)),) if self.thinking else ()
        message = AssistantMessage(text="".join(self.text), tool_calls=self.tool_calls(), thinking=thinking)
        return ModelResponse(
            message=message,
            usage=self.usage if self.usage is not None else estimate_usage(request, message),
            model=self.model or requested_model,
            stop_reason=self.finish_reason,
        )

    def tool_calls(self) -> tuple[ToolCall, ...]:
        calls = []
        for position, index in enumerate(sorted(self.calls)):
            pending = self.calls[index]
            arguments, error = parse_arguments("".join(pending.arguments))
            call_id = pending.id or f"call_{position}"
            calls.append(ToolCall(call_id, pending.name, arguments, arguments_error=error))
        return tuple(calls)

    def _common(self, payload: JSON) -> None:
        if isinstance(payload.get("usage"), dict):
            self._set_usage(payload["usage"])
        if isinstance(payload.get("model"), str) and payload["model"]:
            self.model = payload["model"]

    def _content(self, part: JSON) -> list[Delta]:
        out: list[Delta] = []
        # vLLM and DeepSeek name it reasoning_content; OpenRouter and LM Studio, reasoning.
        reasoning = part.get("reasoning_content") or part.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            out.append(ThinkingDelta(reasoning))
        content = _text(part.get("content"))
        if content:
            out.extend(self.think.feed(content))
        return out

    def _finish(self, choice: JSON) -> None:
        reason = choice.get("finish_reason")
        if isinstance(reason, str) and reason:
            self.finish_reason = reason

    def _record(self, deltas: list[Delta]) -> list[Delta]:
        for delta in deltas:
            (self.thinking if isinstance(delta, ThinkingDelta) else self.text).append(delta.text)
        self.delivered = self.delivered or bool(deltas)
        return deltas

    def _add_fragment(self, fragment: JSON) -> None:
        self.delivered = True
        index = fragment.get("index")
        fragment_id = fragment.get("id") if isinstance(fragment.get("id"), str) else ""
        if not isinstance(index, int):
            # Servers that leave out the index: a fragment with a new id starts a new call.
            last = max(self.calls, default=-1)
            starts_new = last < 0 or bool(fragment_id and fragment_id != self.calls[last].id)
            index = last + 1 if starts_new else last
        call = self.calls.setdefault(index, _PendingCall())
        call.id = fragment_id or call.id
        function = fragment.get("function")
        if not isinstance(function, dict):
            return
        if isinstance(function.get("name"), str) and function["name"]:
            call.name = function["name"]
        arguments = function.get("arguments")
        if isinstance(arguments, dict):  # some servers send the object itself
            arguments = json.dumps(arguments)
        if isinstance(arguments, str) and arguments:
            call.arguments.append(arguments)

    def _set_usage(self, usage: JSON) -> None:
        prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
        if not (isinstance(prompt, int) and prompt > 0) and not (
            isinstance(completion, int) and completion > 0
        ):
            return  # no usage, or only zeros (no real reply costs nothing): the server did not count
        details = usage.get("prompt_tokens_details")
        cached = details.get("cached_tokens") if isinstance(details, dict) else None
        self.usage = Usage(
            input_tokens=prompt if isinstance(prompt, int) else 0,
            output_tokens=completion if isinstance(completion, int) else 0,
            cache_read_tokens=cached if isinstance(cached, int) else 0,
            requests=1,
        )
