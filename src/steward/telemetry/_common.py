"""What the spans of a run share: provider names, errors, and content recording (redacted)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from contextvars import ContextVar, Token
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry.context import Context
from opentelemetry.context.contextvars_context import ContextVarsRuntimeContext
from opentelemetry.trace import Span, Status, StatusCode
from opentelemetry.trace.propagation import _SPAN_KEY

if TYPE_CHECKING:
    from steward.safety.secrets.values import SecretWatch

_CONTENT_CHARS = 16_000  # recorded content per attribute: spans are not the run's log
# Providers as the conventions name them; others keep the name the user wrote.
_PROVIDER_NAMES: Mapping[str, str] = {"openai": "openai", "anthropic": "anthropic", "ollama": "ollama"}


#: The span of the tool call running here (``TracingToolset``): the span a job submitted from
#: the call continues (``steward.telemetry.current_traceparent``). Steward's own variable, set
#: and reset in C, where making OpenTelemetry's context current costs a context made per call.
CALL_SPAN: ContextVar[Span | None] = ContextVar("steward_call_span", default=None)


def provider_and_model(name: str) -> tuple[str, str]:
    """``provider:model`` as the conventions' provider name and requested model."""
    provider, sep, model = name.partition(":")
    if not sep:
        return "steward", name
    return _PROVIDER_NAMES.get(provider, provider), model


def in_context(span: Span, parent: Context | None) -> Context:
    """``parent`` (or an empty context) with ``span`` current: ``trace.set_span_in_context``
    made in one copy of a few keys (a traced tool call makes one)."""
    if parent is None:
        return Context({_SPAN_KEY: span})
    made = Context(parent)
    _set_item(made, _SPAN_KEY, span)  # a Context refuses ``made[key] = ...``: it is new, not shared yet
    return made


_set_item = dict.__setitem__


def _attach_detach() -> tuple[Callable[[Context], Token[Context]], Callable[[Token[Context]], None]]:
    """``opentelemetry.context.attach`` and ``detach``, or, where the runtime context is the
    default one (a ``ContextVar``), that variable's ``set`` and ``reset`` themselves: the same
    effect without the two layers of calls around them, for a context made current at every
    tool call."""
    runtime = getattr(otel_context, "_RUNTIME_CONTEXT", None)
    current = getattr(runtime, "_current_context", None)
    if type(runtime) is ContextVarsRuntimeContext and current is not None:
        return current.set, current.reset
    return otel_context.attach, otel_context.detach


attach, detach = _attach_detach()


def mark_error(span: Span, kind: str, message: str = "") -> None:
    span.set_attribute("error.type", kind)
    span.set_status(Status(StatusCode.ERROR, message[:500] or kind))


@dataclass(slots=True)
class Content:
    """Content recording: on only when ``record_content``, always through the secret redaction."""

    watch: SecretWatch | None

    def text(self, value: str) -> str:
        if self.watch is not None:
            value = self.watch.redactor().redact(value)
        return value if len(value) <= _CONTENT_CHARS else value[: _CONTENT_CHARS - 1] + "…"

    def json(self, value: Any) -> str:
        return self.text(json.dumps(value, ensure_ascii=False, default=str))
