"""The spans of one run: ``invoke_agent`` and ``step`` (GenAI semantic conventions), from the
run's event stream; its model and toolset wrapped for the spans of its calls (``_calls``).

Imported only when ``[telemetry]`` is on. A stretch of the run's stream (``Run._recorded``)
opens the ``invoke_agent`` span, and the loop hands each event it numbers of a type the trace
reads to that type's handler (``RunTrace.watchers``): a ``step`` span starts at each ``step``
event. The step is never made the current span: a call's span names its parent
(``RunTrace.under``), and only a tool call's own span is current while the call runs (where an
instrumentation library reads it). Whoever reads the stream never runs inside the run's spans, and
nothing the loop schedules keeps a step's span alive: an ``asyncio`` timer captures the context
current when it is made, and a cancelled one stays in the event loop's queue until the loop next
turns, which a run with no I/O (a scripted model, in-process tools) may not do for its whole
length; with the step current, each of its timers kept a span (and its attributes) alive.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import INVALID_SPAN, Span, SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from steward import events as ev
from steward.telemetry._calls import TracingModel, TracingToolset
from steward.telemetry._common import CALL_SPAN, Content, in_context, mark_error, provider_and_model
from steward.telemetry._export import tracer
from steward.telemetry._light import BASE, LightTracer, child_span, next_step

if TYPE_CHECKING:
    from steward.config import TelemetrySettings
    from steward.loop import Loop
    from steward.run_state import RunState
    from steward.safety.secrets.values import SecretWatch

_PROPAGATOR = TraceContextTextMapPropagator()
#: A light step span's base once a tool is called directly in it.
_ACTING: Mapping[str, Any] = {"steward.phase": "act"}


def traceparent_here() -> str | None:
    """The W3C traceparent of the tool call running here (``CALL_SPAN``), else of
    OpenTelemetry's current span, or None."""
    call = CALL_SPAN.get()
    if call is not None:
        return _traceparent_of(call)
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    return carrier.get("traceparent")


def _context_of(traceparent: str | None) -> otel_context.Context | None:
    if not traceparent:
        return None
    return _PROPAGATOR.extract({"traceparent": traceparent})


class RunTrace:
    """The spans of one run, in this process: its current ``invoke_agent`` and ``step`` spans."""

    def __init__(
        self,
        settings: TelemetrySettings,
        state: RunState,
        *,
        agent: str,
        model: str,
        content: Content | None,
    ) -> None:
        self.tracer = tracer(settings)
        #: How a step's or a call's span is made under its parent span (a step, the run):
        #: Steward's light spans directly, another tracer's through the API (``_api_child``).
        self.light = isinstance(self.tracer, LightTracer)
        self.child: Callable[[Span, str, int | None, Mapping[str, Any] | None, dict[str, Any]], Span] = (
            child_span if self.light else self._api_child  # type: ignore[assignment]
        )
        self.state, self.agent, self.model, self.content = state, agent, model, content
        self.span: Span | None = None  # the stretch of running now traced
        self.step: Span | None = None
        #: The span a call's span starts under: the step's (between steps, the run's).
        self.under: Span = INVALID_SPAN
        self.first: str | None = None  # the traceparent of this run's first span here
        self.call: tuple[str, str] | None = None  # (tool, call id) the loop announced last
        self.usage = [0, 0, 0, 0]  # tokens of its calls: input, output, cache read, cache creation
        #: The span of the step's model call, until the loop has its reply (``replied``).
        self.chat: Span | None = None
        self.failed = False  # the run span has its error.type already
        self._phased = False  # the current step span has its steward.phase
        # Whether the run's span records (sampled, a real provider). A run left out (a sampler's
        # no, a no-op provider) makes no step or call spans: with the sampler parent-based, as
        # Steward's is, they would not record either; its calls run with the run's span current,
        # so a delegated job and an HTTP client's spans follow the same decision.
        self.recording = True
        self._run_context: otel_context.Context | None = None  # the run's span as a context, made once

    @classmethod
    def around(
        cls, loop: Loop, settings: TelemetrySettings, *, agent: str, watch: Callable[[], SecretWatch] | None
    ) -> RunTrace:
        """The trace of ``loop``'s run, its model and toolset wrapped to make their spans."""
        content = Content(watch() if watch is not None else None) if settings.record_content else None
        made = cls(settings, loop.state, agent=agent or "steward", model=loop.model.name, content=content)
        model = TracingModel(loop.model, made)
        loop.model, loop.replied = model, model.took
        loop.toolset = TracingToolset(loop.toolset, made)
        return made

    def end_chat(self, error: tuple[str, str] | None = None) -> None:
        """End the span of a step's model call that got no reply (``error``: what it got)."""
        span, self.chat = self.chat, None
        if span is not None:
            if error is not None:
                mark_error(span, *error)
            span.end()

    # --- the run ---------------------------------------------------------------------------

    def begin(self, parent: otel_context.Context | None) -> None:
        """Open the span of a stretch of running, under ``parent`` (default: what is current,
        else this run's first span)."""
        if (resume := self.state.resume) is not None:  # an answered approval: its call runs first
            self.call = (resume.approval.tool, resume.approval.call.id)  # (decided before the stream)
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
        self.under = self.span
        self.recording = self.span.is_recording()
        self.usage, self.failed = [0, 0, 0, 0], False
        if self.first is None:
            self.first = _traceparent_of(self.span)

    def join(self, traceparent: str | None) -> str | None:
        """Go on in a job's trace (its ``traceparent``); for a job that has none yet, the
        traceparent of this run's first span, for the job to keep."""
        self.begin(_context_of(traceparent))
        return self.first if traceparent is None else None

    def end(self) -> None:
        self.end_chat()  # a call the run left before its reply (cancelled, out of time)
        self._end_step()
        span, self.span, self._run_context, self.under = self.span, None, None, INVALID_SPAN
        if span is None:
            return
        st = self.state
        span.set_attribute("steward.run.status", st.status)
        if st.end_status is not None:
            span.set_attribute("steward.run.end_status", st.end_status)
        span.set_attribute("steward.run.steps", st.counters.step)
        span.set_attribute("gen_ai.usage.input_tokens", self.usage[0])
        span.set_attribute("gen_ai.usage.output_tokens", self.usage[1])
        if self.usage[2]:
            span.set_attribute("gen_ai.usage.cache_read.input_tokens", self.usage[2])
        if self.usage[3]:
            span.set_attribute("gen_ai.usage.cache_creation.input_tokens", self.usage[3])
        if self.content is not None and st.output:
            span.set_attribute(
                "gen_ai.output.messages",
                self.content.json([{"role": "assistant", "parts": [{"type": "text", "content": st.output}]}]),
            )
        if st.status in ("failed", "cancelled") and not self.failed:
            mark_error(span, st.status, st.output)
        span.end()
        flush = getattr(self.tracer, "flush", None)  # Steward's light spans: sent at the run's end
        if flush is not None:
            flush()

    def _end_step(self) -> None:
        step, self.step = self.step, None
        if step is not None:
            self.under = self.span or INVALID_SPAN
            step.end()

    def parent(self) -> otel_context.Context | None:
        """The context a call's span starts in: the step's (between steps, the run's)."""
        step = self.step
        return self._run_context if step is None else in_context(step, self._run_context)

    def _api_child(
        self,
        parent: Span,
        name: str,
        kind: int | None,
        base: Mapping[str, Any] | None,
        attributes: dict[str, Any],
    ) -> Span:
        """``child`` for a tracer of the application's provider: a span started in ``parent``'s
        context (the run's context, with ``parent`` current)."""
        given = {**base, **attributes} if base else attributes
        return self.tracer.start_span(
            name, context=in_context(parent, self._run_context), kind=SpanKind(kind or 0), attributes=given
        )

    def watchers(self) -> dict[str, Callable[[Any], None]]:
        """What the loop tells the trace (``Loop.watchers``): a handler per event type it reads.
        A run left out reads none: it has no step spans, and its calls none."""
        if not self.recording:
            return {}
        return {
            "tool_use": self._tool_use, "step": self._step, "phase": self._phase,
            "approval_result": self._approval_result, "error": self._error,
        }  # fmt: skip

    def _tool_use(self, event: ev.ToolUse) -> None:
        self.call = (event.tool, event.call_id)
        if not self._phased and (step := self.step) is not None:  # a tool called directly:
            if self.light:  # acting, as ``runs show`` counts it: shared, sent once a batch
                step._record[BASE] = _ACTING  # type: ignore[attr-defined]
            else:
                step.set_attribute("steward.phase", "act")
            self._phased = True

    def _step(self, event: ev.StepStart) -> None:
        run = self.span
        if run is None:
            return
        # No context of its own: a call's span names its parent (``child``), and a context that
        # an instrumentation library reads is made only when one is loaded.
        if self.light:  # the step before ends as this one starts
            self.step = self.under = next_step(self.step, run, {"steward.step": event.step})  # type: ignore[arg-type,assignment]
        else:
            if self.step is not None:
                self.step.end()
            self.step = self.under = self.child(run, "step", None, None, {"steward.step": event.step})
        self._phased = False

    def _phase(self, event: ev.PhaseEvent) -> None:
        if self.step is not None:
            self.step.set_attribute("steward.phase", event.phase)
            self._phased = True

    def _approval_result(self, event: ev.ApprovalResultEvent) -> None:
        if (resume := self.state.resume) is not None:  # the approved call runs next
            self.call = (resume.approval.tool, resume.approval.call.id)

    def _error(self, event: ev.ErrorEvent) -> None:
        if self.chat is not None and event.code.startswith("model_"):  # its call got no reply
            self.end_chat((event.code, event.message))  # (``model_retry``: the call is made again)
        if not event.recoverable and self.span is not None:
            mark_error(self.span, event.code, event.message)
            self.failed = True

    def failed_with(self, exc: BaseException) -> None:
        """The run's stream raised ``exc`` (not a close): its span says so."""
        if self.span is not None and not isinstance(exc, GeneratorExit):
            mark_error(self.span, type(exc).__qualname__, str(exc))
            self.failed = True


def _traceparent_of(span: Span) -> str | None:
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span))
    return carrier.get("traceparent")
