"""The spans of a run's calls: ``chat {model}`` around the model, ``execute_tool {tool}`` around
the toolset (a memory operation under ``remember``, ``recall`` and ``forget``).

Each wrapper starts its span under the run's step (``RunTrace.under``). What the call does nests
under its span: a job a tool call submits (a ``delegate`` call's) continues the span in
``CALL_SPAN``, and, where an instrumentation library is loaded (an HTTP client's own spans), the
call's span is OpenTelemetry's current span while it runs. Without one, nothing reads that
context, and making it current at every call would cost more than the span.
"""

from __future__ import annotations

import re
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry.trace import SpanKind

from steward.errors import ApprovalRequired
from steward.models.base import Model, ModelRequest, ModelResponse, StreamItem, ToolCall
from steward.telemetry._common import CALL_SPAN, attach, detach, in_context, mark_error, provider_and_model
from steward.tools.base import ToolContext, ToolResult, Toolset, WrapperToolset

if TYPE_CHECKING:
    from opentelemetry.trace import Span

    from steward.telemetry._spans import RunTrace

#: Steward's long-term memory tools and the memory operation each is (GenAI memory spans).
MEMORY_OPERATIONS: Mapping[str, str] = {
    "remember": "upsert_memory",
    "recall": "search_memory",
    "forget": "delete_memory",
}
_MEMORY_STORE = "steward.long_term"
_INSTRUMENTATION = "opentelemetry.instrumentation"  # the package instrumentations load
_ITEM_REF = re.compile(r"\bm(\d+)\b")  # how memory tools name an item (``archival.item_ref``)
_new = object.__new__
_NAMES_KEPT = 256  # tools' span names kept per run
_BASES_KEPT = 64  # model calls' shared attributes kept per run (purpose, token limit, temperature)
#: Every tool call span's attributes, shared (never changed): a span's own go with them.
_TOOL_CALL: Mapping[str, Any] = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.type": "function"}
# As ``RunTrace.child`` takes them: a kind's value, None for an internal span (no number to send).
_INTERNAL, _CLIENT = None, SpanKind.CLIENT.value


# --- the model ----------------------------------------------------------------------------


class TracingModel(Model):
    """``chat {model}`` spans around each call of ``wrapped``."""

    def __init__(self, wrapped: Model, trace_: RunTrace) -> None:
        self.wrapped, self.trace = wrapped, trace_
        self.name = wrapped.name
        provider, model = provider_and_model(self.name)  # as the conventions name them, once
        self._span_name = f"chat {model}"
        # Every call's, shared (never changed): a span's own attributes go with them.
        self._attributes: Mapping[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider,
            "gen_ai.request.model": model,
        }
        self._bases: dict[tuple[str, int | None, float | None], Mapping[str, Any]] = {}

    def replayed(self) -> None:
        self.wrapped.replayed()

    async def aclose(self) -> None:
        await self.wrapped.aclose()

    def check(self) -> None:
        self.wrapped.check()

    async def probe(self) -> str:
        return await self.wrapped.probe()

    def warnings(self) -> list[str]:
        return self.wrapped.warnings()

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        run = self.trace
        if not run.recording:  # a run left out: no span, the run's context current
            return _in_context(self.wrapped.stream(request), run.parent())
        # What a call shares with the run's other calls of its kind (a step's, a summary's) is
        # its base, made once and sent once a batch; what is its own goes in ``attributes``.
        key = (request.purpose, request.max_tokens, request.temperature)
        base = self._bases.get(key)
        if base is None:
            base = self._base(key)
        attributes: dict[str, Any] = {}
        if run.content is not None:
            self._content(attributes, request)
        span = run.child(run.under, self._span_name, _CLIENT, base, attributes)
        try:
            items = self.wrapped.stream(request)
        except BaseException as exc:
            mark_error(span, type(exc).__qualname__, str(exc))
            span.end()
            raise
        # The span is made current while the provider works only for what reads it there: an
        # HTTP client's instrumentation (``opentelemetry.instrumentation.*``, loaded by the
        # application). Steward's own code reads no context under a model call, so the stream
        # gets no layer of its own otherwise.
        if _INSTRUMENTATION in sys.modules:
            items = _in_context(items, in_context(span, run._run_context))
        if request.purpose == "step":
            # A step's reply reaches the loop, which tells ``took``: the span ends there, and
            # the stream goes to the loop as the provider made it. A call still waiting had no
            # reply (a stream left without one, whose error, if any, was said already).
            if run.chat is not None:
                run.end_chat()
            run.chat = span
            return items
        made: _ChatStream = _new(_ChatStream)  # without ``__init__``'s frame
        made._model, made._span, made._items, made._next = self, span, items, items.__anext__
        made._ended = False
        return made

    def _base(self, key: tuple[str, int | None, float | None]) -> Mapping[str, Any]:
        """The attributes of every call with this purpose, token limit and temperature."""
        purpose, max_tokens, temperature = key
        made: dict[str, Any] = {**self._attributes, "steward.request.purpose": purpose}
        if max_tokens is not None:
            made["gen_ai.request.max_tokens"] = max_tokens
        if temperature is not None:
            made["gen_ai.request.temperature"] = temperature
        if len(self._bases) < _BASES_KEPT:
            self._bases[key] = made
        return made

    def _content(self, attributes: dict[str, Any], request: ModelRequest) -> None:
        content = self.trace.content
        assert content is not None
        attributes["gen_ai.system_instructions"] = content.json(
            [{"type": "text", "content": request.system_text}]
        )
        attributes["gen_ai.input.messages"] = content.json(_messages(request))

    def took(self, response: ModelResponse, span: Span | None = None) -> None:
        """End ``span``, a call's, with what ``response`` says (its model, usage, reason). Without
        ``span``, the loop took a step's reply (``Loop.replied``): the step's call's span ends."""
        run, usage = self.trace, response.usage
        if span is None:
            span = run.chat
            if span is None:
                return
            run.chat = None
        # A light span's attributes are its own dict until it ends: written into, not merged.
        replied: dict[str, Any] = span.attributes if run.light else {}  # type: ignore[attr-defined]
        if response.model:  # as the provider named it; a provider that did not, none
            replied["gen_ai.response.model"] = response.model
        replied["gen_ai.usage.input_tokens"] = usage.input_tokens
        replied["gen_ai.usage.output_tokens"] = usage.output_tokens
        counted = run.usage  # the run's: input, output, cache read, cache creation
        if usage.cache_read_tokens:
            replied["gen_ai.usage.cache_read.input_tokens"] = usage.cache_read_tokens
            counted[2] += usage.cache_read_tokens
        if usage.cache_write_tokens:
            replied["gen_ai.usage.cache_creation.input_tokens"] = usage.cache_write_tokens
            counted[3] += usage.cache_write_tokens
        if response.stop_reason:
            replied["gen_ai.response.finish_reasons"] = [response.stop_reason]
        if not run.light:
            span.set_attributes(replied)
        counted[0] += usage.input_tokens
        counted[1] += usage.output_tokens
        content = run.content
        if content is not None:
            message = response.message
            parts: list[dict[str, Any]] = [{"type": "text", "content": message.text}] if message.text else []
            parts += [_call_part(call) for call in message.tool_calls]
            span.set_attribute(
                "gen_ai.output.messages", content.json([{"role": "assistant", "parts": parts}])
            )
        span.end()


class _ChatStream:
    """The stream of a model call other than a step's (a summary) in its ``chat {model}`` span
    (started with the call). The
    span ends with the reply (a stream's last item, ``steward.models.base``), an error, or
    ``aclose`` (which every reader of a model's stream in Steward calls) for a call left before
    its reply. A class, not an async generator, and a layer only until the reply: a generator's
    frame per item and asyncio's hooks for each generator cost more than the span itself."""

    __slots__ = ("_ended", "_items", "_model", "_next", "_span")

    _model: TracingModel
    _span: Span
    _items: AsyncIterator[StreamItem]
    _next: Callable[[], Awaitable[StreamItem]]
    _ended: bool  # the span ended (a reply, an error): the stream's items go by as they are

    def __aiter__(self) -> _ChatStream:
        return self

    def __anext__(self) -> Awaitable[StreamItem]:
        if self._ended:  # after the reply: the stream's own end, as it comes
            return self._next()
        return self._item()  # before it: each item looked at

    async def _item(self) -> StreamItem:
        span = self._span
        try:
            item = await self._next()
        except StopAsyncIteration:
            self._ended = True
            span.end()  # a stream without a reply
            raise
        except BaseException as exc:
            self._ended = True
            mark_error(span, type(exc).__qualname__, str(exc))
            span.end()
            raise
        if type(item) is ModelResponse:
            self._ended = True
            self._model.took(item, span)
        return item

    def aclose(self) -> Awaitable[None]:
        if not self._ended:  # a call left before its reply (an SDK span warns of a second end)
            self._ended = True
            self._span.end()
        close = getattr(self._items, "aclose", None)
        return close() if close is not None else _closed()


async def _closed() -> None:
    """What ``aclose`` awaits for a stream that has nothing to close."""


async def _in_context(
    items: AsyncIterator[StreamItem], current: otel_context.Context | None
) -> AsyncIterator[StreamItem]:
    """``items``, ``current`` made the current context while each is made."""
    next_item = items.__anext__  # not anext(items, None): no awaitable made per item
    try:
        for _ in range(10**9):  # bounded by the provider's reply
            token = otel_context.attach(current) if current is not None else None
            try:
                item = await next_item()
            except StopAsyncIteration:
                return
            finally:
                if token is not None:
                    otel_context.detach(token)
            yield item
    finally:
        close = getattr(items, "aclose", None)
        if close is not None:
            await close()


def _call_part(call: ToolCall) -> dict[str, Any]:
    return {"type": "tool_call", "id": call.id, "name": call.name, "arguments": dict(call.arguments)}


def _messages(request: ModelRequest) -> list[dict[str, Any]]:
    """The request's messages in the conventions' shape (content recording only)."""
    out: list[dict[str, Any]] = []
    for message in request.messages:
        role = message.role
        text = getattr(message, "content", None) or getattr(message, "text", "")
        parts: list[dict[str, Any]] = [{"type": "text", "content": text}] if text else []
        parts += [_call_part(call) for call in getattr(message, "tool_calls", ())]
        if role == "tool":
            parts = [{"type": "tool_call_response", "id": getattr(message, "call_id", ""), "response": text}]
        out.append({"role": role, "parts": parts})
    return out


# --- the tools ------------------------------------------------------------------------------


class _ToolSpans(dict[str, tuple[str, Mapping[str, Any], str | None]]):
    """A tool's span name, the attributes every call of it shares (made once, and so sent once a
    batch) and the memory operation it is, if any, for a few hundred tools: a model may name
    tools that do not exist."""

    def __missing__(self, tool: str) -> tuple[str, Mapping[str, Any], str | None]:
        made = (f"execute_tool {tool}", {**_TOOL_CALL, "gen_ai.tool.name": tool}, MEMORY_OPERATIONS.get(tool))
        if len(self) < _NAMES_KEPT:
            self[tool] = made
        return made


class TracingToolset(WrapperToolset):
    """``execute_tool {tool}`` spans around each call. While the call runs its span is the one a
    job it submits continues (``CALL_SPAN``: a ``delegate`` call's), and, where an instrumentation
    library is loaded, OpenTelemetry's current span too (an HTTP client's spans nest under it)."""

    def __init__(self, wrapped: Toolset, trace_: RunTrace) -> None:
        super().__init__(wrapped)
        self.trace = trace_
        self._spans = _ToolSpans()
        self.get_tools = wrapped.get_tools  # type: ignore[method-assign]  # asked each step: no layer

    async def call_tool(self, name: str, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        run = self.trace
        if not run.recording:
            return await self._untraced(name, arguments, ctx)
        span_name, base, operation = self._spans[name]
        call, content = run.call, run.content
        attributes: dict[str, Any] = (
            {"gen_ai.tool.call.id": call[1]} if call is not None and call[0] == name else {}
        )
        if content is not None:
            attributes["gen_ai.tool.call.arguments"] = content.json(dict(arguments))
        span = run.child(run.under, span_name, _INTERNAL, base, attributes)
        token = CALL_SPAN.set(span)
        current = attach(in_context(span, run._run_context)) if _INSTRUMENTATION in sys.modules else None
        try:
            if operation is not None:
                result = await self._memory(operation, name, arguments, ctx, span)
            else:
                result = await self.wrapped.call_tool(name, arguments, ctx)
        except ApprovalRequired as asked:  # the run waits (a human, or a delegated job): not a failure
            span.set_attribute("steward.tool.waits", asked.waits_for or "approval")
            raise
        except BaseException as exc:
            mark_error(span, type(exc).__qualname__, str(exc))
            raise
        else:
            if result.is_error:
                mark_error(span, result.category or "tool_error", result.content[:200])
            if content is not None:
                span.set_attribute("gen_ai.tool.call.result", content.text(result.content))
            return result
        finally:
            if current is not None:
                detach(current)
            CALL_SPAN.reset(token)
            span.end()

    async def _untraced(self, name: str, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        """A call of a run left out: no span, the run's context current (a delegated job follows it)."""
        current = self.trace.parent()
        if current is None:
            return await self.wrapped.call_tool(name, arguments, ctx)
        token = attach(current)
        try:
            return await self.wrapped.call_tool(name, arguments, ctx)
        finally:
            detach(token)

    async def _memory(
        self, operation: str, name: str, arguments: Mapping[str, Any], ctx: ToolContext, tool: Span
    ) -> ToolResult:
        """The memory operation a memory tool is, as its own span under the tool's."""
        run = self.trace
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": operation,
            "gen_ai.provider.name": "steward",
            "gen_ai.memory.store.id": _MEMORY_STORE,
        }
        if name == "forget" and (ref := _ITEM_REF.search(str(arguments.get("id", "")))) is not None:
            attributes["gen_ai.memory.record.id"] = ref.group(0)
        if run.content is not None and name == "recall":
            attributes["gen_ai.memory.query.text"] = run.content.text(str(arguments.get("query", "")))
        with run.tracer.start_as_current_span(
            f"{operation} {_MEMORY_STORE}", context=in_context(tool, run._run_context), kind=SpanKind.CLIENT,
            attributes=attributes,
            record_exception=False, set_status_on_exception=False,
        ) as span:  # fmt: skip
            result = await self.wrapped.call_tool(name, arguments, ctx)
            refs = [] if result.is_error else _ITEM_REF.findall(result.content)
            if name == "remember" and refs:
                span.set_attribute("gen_ai.memory.record.id", f"m{refs[0]}")
            if name == "recall":
                span.set_attribute("gen_ai.memory.record.count", len(dict.fromkeys(refs)))
            if result.is_error:
                mark_error(span, result.category or "tool_error", result.content[:200])
            return result
