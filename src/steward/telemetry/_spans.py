"""The spans of one run: ``invoke_agent``, ``step``, ``chat`` and ``execute_tool`` (GenAI
semantic conventions), made by wrappers around the run's event stream, model and toolset.

Imported only when ``[telemetry]`` is on. The run's event stream (``RunTrace.events``) opens
the ``invoke_agent`` span and a ``step`` span at each ``step`` event, and makes the step (or,
between steps, the run) the current span only while it waits for the loop's next event: a
context attached and detached around one ``await``, never across a ``yield``, so whoever reads
the stream never runs inside the run's spans and nothing leaks between runs. The model and
tool wrappers start their spans under whatever is current, so they nest under the step, and
make their own span current while the call runs (a ``delegate`` call's job carries it).
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from steward import events as ev
from steward.errors import ApprovalRequired
from steward.models.base import Model, ModelRequest, ModelResponse, StreamItem, ToolCall
from steward.telemetry._export import tracer
from steward.tools.base import ToolContext, ToolResult, Toolset, WrapperToolset

if TYPE_CHECKING:
    from steward.config import TelemetrySettings
    from steward.loop import Loop
    from steward.run_state import RunState
    from steward.safety.secrets.values import SecretWatch

_PROPAGATOR = TraceContextTextMapPropagator()
_CONTENT_CHARS = 16_000  # recorded content per attribute: spans are not the run's log
#: Steward's long-term memory tools and the memory operation each is (GenAI memory spans).
MEMORY_OPERATIONS: Mapping[str, str] = {
    "remember": "upsert_memory",
    "recall": "search_memory",
    "forget": "delete_memory",
}
_MEMORY_STORE = "steward.long_term"
#: The events ``RunTrace.seen`` reads.
_TELLING = frozenset({"step", "phase", "tool_use", "approval_result", "error"})
_ITEM_REF = re.compile(r"\bm(\d+)\b")  # how memory tools name an item (``archival.item_ref``)
# Providers as the conventions name them; others keep the name the user wrote.
_PROVIDER_NAMES: Mapping[str, str] = {"openai": "openai", "anthropic": "anthropic", "ollama": "ollama"}


def traceparent_here() -> str | None:
    """The W3C traceparent of the current span, or None."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    return carrier.get("traceparent")


def _context_of(traceparent: str | None) -> otel_context.Context | None:
    if not traceparent:
        return None
    return _PROPAGATOR.extract({"traceparent": traceparent})


def provider_and_model(name: str) -> tuple[str, str]:
    """``provider:model`` as the conventions' provider name and requested model."""
    provider, sep, model = name.partition(":")
    if not sep:
        return "steward", name
    return _PROVIDER_NAMES.get(provider, provider), model


def _error(span: Span, kind: str, message: str = "") -> None:
    span.set_attribute("error.type", kind)
    span.set_status(Status(StatusCode.ERROR, message[:500] or kind))


@dataclass(slots=True)
class _Content:
    """Content recording: on only when ``record_content``, always through the secret redaction."""

    watch: SecretWatch | None

    def text(self, value: str) -> str:
        if self.watch is not None:
            value = self.watch.redactor().redact(value)
        return value if len(value) <= _CONTENT_CHARS else value[: _CONTENT_CHARS - 1] + "…"

    def json(self, value: Any) -> str:
        return self.text(json.dumps(value, ensure_ascii=False, default=str))


class RunTrace:
    """The spans of one run, in this process: its current ``invoke_agent`` and ``step`` spans."""

    def __init__(
        self,
        settings: TelemetrySettings,
        state: RunState,
        *,
        agent: str,
        model: str,
        content: _Content | None,
    ) -> None:
        self.tracer = tracer(settings)
        self.state, self.agent, self.model, self.content = state, agent, model, content
        self.span: Span | None = None  # the stretch of running now traced
        self.step: Span | None = None
        self.first: str | None = None  # the traceparent of this run's first span here
        self.call: tuple[str, str] | None = None  # (tool, call id) the loop announced last
        self.usage = [0, 0]
        self.failed = False  # the run span has its error.type already
        self._run_context: otel_context.Context | None = None  # the spans as contexts, made once
        self._step_context: otel_context.Context | None = None

    @classmethod
    def around(
        cls, loop: Loop, settings: TelemetrySettings, *, agent: str, watch: Callable[[], SecretWatch] | None
    ) -> RunTrace:
        """The trace of ``loop``'s run, its model and toolset wrapped to make their spans."""
        content = _Content(watch() if watch is not None else None) if settings.record_content else None
        made = cls(settings, loop.state, agent=agent or "steward", model=loop.model.name, content=content)
        loop.model = TracingModel(loop.model, made)
        loop.toolset = TracingToolset(loop.toolset, made)
        return made

    # --- the run ---------------------------------------------------------------------------

    def begin(self, parent: otel_context.Context | None) -> None:
        """Open the span of a stretch of running, under ``parent`` (default: what is current,
        else this run's first span)."""
        if self.span is not None:
            return
        if parent is None and not trace.get_current_span().get_span_context().is_valid:
            parent = _context_of(self.first)
        st = self.state
        provider, model = provider_and_model(self.model)
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.provider.name": provider,
            "gen_ai.agent.name": self.agent,
            "gen_ai.agent.id": st.run_id,
            "gen_ai.conversation.id": st.session_id or st.run_id,
            "gen_ai.request.model": model,
            "steward.run.id": st.run_id,
            "steward.run.resumed": st.counters.step > 0,
        }
        if self.content is not None:
            attributes["gen_ai.input.messages"] = self.content.json(
                [{"role": "user", "parts": [{"type": "text", "content": st.goal}]}]
            )
        self.span = self.tracer.start_span(
            f"invoke_agent {self.agent}", context=parent, kind=SpanKind.INTERNAL, attributes=attributes
        )
        self._run_context = trace.set_span_in_context(self.span)
        self.usage, self.failed = [0, 0], False
        if self.first is None:
            self.first = _traceparent_of(self.span)
        if st.resume is not None:  # an answered approval: its call runs first, announced before
            self.call = (st.resume.approval.tool, st.resume.approval.call.id)

    def join(self, traceparent: str | None) -> str | None:
        """Go on in a job's trace (its ``traceparent``); for a job that has none yet, the
        traceparent of this run's first span, for the job to keep."""
        self.begin(_context_of(traceparent))
        return self.first if traceparent is None else None

    def end(self) -> None:
        self._end_step()
        span, self.span, self._run_context = self.span, None, None
        if span is None:
            return
        st = self.state
        span.set_attribute("steward.run.status", st.status)
        if st.end_status is not None:
            span.set_attribute("steward.run.end_status", st.end_status)
        span.set_attribute("steward.run.steps", st.counters.step)
        span.set_attribute("gen_ai.usage.input_tokens", self.usage[0])
        span.set_attribute("gen_ai.usage.output_tokens", self.usage[1])
        if self.content is not None and st.output:
            span.set_attribute(
                "gen_ai.output.messages",
                self.content.json([{"role": "assistant", "parts": [{"type": "text", "content": st.output}]}]),
            )
        if st.status in ("failed", "cancelled") and not self.failed:
            _error(span, st.status, st.output)
        span.end()

    def _end_step(self) -> None:
        step, self.step, self._step_context = self.step, None, None
        if step is not None:
            step.end()

    def _current(self) -> otel_context.Context | None:
        return self._step_context or self._run_context

    def seen(self, event: ev.Event) -> None:
        """What the run's events say about its spans."""
        match event:
            case ev.StepStart(step=n):
                self._end_step()
                self.step = self.tracer.start_span(
                    "step", context=self._current(), attributes={"steward.step": n}
                )
                self._step_context = trace.set_span_in_context(self.step)  # made once, attached per event
            case ev.PhaseEvent(phase=phase) if self.step is not None:
                self.step.set_attribute("steward.phase", phase)
            case ev.ToolUse(tool=tool, call_id=call_id):
                self.call = (tool, call_id)
            case ev.ApprovalResultEvent() if (resume := self.state.resume) is not None:
                self.call = (resume.approval.tool, resume.approval.call.id)  # the approved call runs next
            case ev.ErrorEvent(code=code, message=message, recoverable=False) if self.span is not None:
                _error(self.span, code, message)
                self.failed = True
            case _:
                pass

    async def events(self, stream: AsyncIterator[ev.Event]) -> AsyncIterator[ev.Event]:
        """``stream``, its stretch of running traced; closing this closes ``stream``."""
        self.begin(None)
        try:
            for _ in range(10**12):  # bounded by the run's own limits: it ends or pauses
                token = otel_context.attach(self._current() or otel_context.get_current())
                try:
                    event = await anext(stream, None)
                except BaseException as exc:
                    if self.span is not None and not isinstance(exc, GeneratorExit):
                        _error(self.span, type(exc).__qualname__, str(exc))
                        self.failed = True
                    raise
                finally:
                    otel_context.detach(token)
                if event is None:
                    return
                if event.type in _TELLING:  # most events say nothing about spans: skip them cheaply
                    self.seen(event)
                yield event
        finally:
            close = getattr(stream, "aclose", None)
            if close is not None:
                await close()
            self.end()

    def tool_call_id(self, name: str) -> str | None:
        if self.call is not None and self.call[0] == name:
            return self.call[1]
        return None


def _traceparent_of(span: Span) -> str | None:
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span))
    return carrier.get("traceparent")


# --- the model ----------------------------------------------------------------------------


class TracingModel(Model):
    """``chat {model}`` spans around each call of ``wrapped``."""

    def __init__(self, wrapped: Model, trace_: RunTrace) -> None:
        self.wrapped, self.trace = wrapped, trace_
        self.name = wrapped.name

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

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        provider, model = provider_and_model(self.name)
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider,
            "gen_ai.request.model": model,
            "steward.request.purpose": request.purpose,
        }
        if request.max_tokens is not None:
            attributes["gen_ai.request.max_tokens"] = request.max_tokens
        if request.temperature is not None:
            attributes["gen_ai.request.temperature"] = request.temperature
        content = self.trace.content
        if content is not None:
            attributes["gen_ai.system_instructions"] = content.json(
                [{"type": "text", "content": request.system_text}]
            )
            attributes["gen_ai.input.messages"] = content.json(_messages(request))
        span = self.trace.tracer.start_span(f"chat {model}", kind=SpanKind.CLIENT, attributes=attributes)
        items = self.wrapped.stream(request)
        current = trace.set_span_in_context(span)
        try:
            for _ in range(10**9):  # bounded by the provider's reply
                token = otel_context.attach(current)
                try:
                    item = await anext(items, None)
                finally:
                    otel_context.detach(token)
                if item is None:
                    break
                if isinstance(item, ModelResponse):
                    self._replied(span, item, model)
                yield item
        except BaseException as exc:
            if not isinstance(exc, GeneratorExit):
                _error(span, type(exc).__qualname__, str(exc))
            raise
        finally:
            close = getattr(items, "aclose", None)
            if close is not None:
                await close()
            span.end()

    def _replied(self, span: Span, response: ModelResponse, model: str) -> None:
        usage = response.usage
        replied: dict[str, Any] = {
            "gen_ai.response.model": response.model or model,
            "gen_ai.usage.input_tokens": usage.input_tokens,
            "gen_ai.usage.output_tokens": usage.output_tokens,
        }
        if usage.cache_read_tokens:
            replied["gen_ai.usage.cache_read.input_tokens"] = usage.cache_read_tokens
        if usage.cache_write_tokens:
            replied["gen_ai.usage.cache_creation.input_tokens"] = usage.cache_write_tokens
        if response.stop_reason:
            replied["gen_ai.response.finish_reasons"] = [response.stop_reason]
        span.set_attributes(replied)
        self.trace.usage[0] += usage.input_tokens
        self.trace.usage[1] += usage.output_tokens
        content = self.trace.content
        if content is not None:
            message = response.message
            parts: list[dict[str, Any]] = [{"type": "text", "content": message.text}] if message.text else []
            parts += [_call_part(call) for call in message.tool_calls]
            span.set_attribute(
                "gen_ai.output.messages", content.json([{"role": "assistant", "parts": parts}])
            )


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


class TracingToolset(WrapperToolset):
    """``execute_tool {tool}`` spans around each call, the span current while the call runs."""

    def __init__(self, wrapped: Toolset, trace_: RunTrace) -> None:
        super().__init__(wrapped)
        self.trace = trace_

    async def call_tool(self, name: str, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        run = self.trace
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.type": "function",
        }
        if (call_id := run.tool_call_id(name)) is not None:
            attributes["gen_ai.tool.call.id"] = call_id
        if run.content is not None:
            attributes["gen_ai.tool.call.arguments"] = run.content.json(dict(arguments))
        span = run.tracer.start_span(f"execute_tool {name}", kind=SpanKind.INTERNAL, attributes=attributes)
        token = otel_context.attach(trace.set_span_in_context(span))
        try:
            operation = MEMORY_OPERATIONS.get(name)
            if operation is not None:
                result = await self._memory(operation, name, arguments, ctx)
            else:
                result = await self.wrapped.call_tool(name, arguments, ctx)
        except ApprovalRequired as asked:  # the run waits (a human, or a delegated job): not a failure
            span.set_attribute("steward.tool.waits", asked.waits_for or "approval")
            raise
        except BaseException as exc:
            _error(span, type(exc).__qualname__, str(exc))
            raise
        else:
            if result.is_error:
                _error(span, result.category or "tool_error", result.content[:200])
            if run.content is not None:
                span.set_attribute("gen_ai.tool.call.result", run.content.text(result.content))
            return result
        finally:
            otel_context.detach(token)
            span.end()

    async def _memory(
        self, operation: str, name: str, arguments: Mapping[str, Any], ctx: ToolContext
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
            f"{operation} {_MEMORY_STORE}", kind=SpanKind.CLIENT, attributes=attributes,
            record_exception=False, set_status_on_exception=False,
        ) as span:  # fmt: skip
            result = await self.wrapped.call_tool(name, arguments, ctx)
            refs = [] if result.is_error else _ITEM_REF.findall(result.content)
            if name == "remember" and refs:
                span.set_attribute("gen_ai.memory.record.id", f"m{refs[0]}")
            if name == "recall":
                span.set_attribute("gen_ai.memory.record.count", len(dict.fromkeys(refs)))
            if result.is_error:
                _error(span, result.category or "tool_error", result.content[:200])
            return result
