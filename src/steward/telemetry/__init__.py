"""OpenTelemetry traces of runs, following the GenAI semantic conventions (optional).

With ``[telemetry] enabled = true`` (and the ``otel`` extra installed) every run is traced: an
``invoke_agent {agent}`` span per stretch of running (a run that waits for a human, or for a job
it delegated to, goes on in a new one, in the same trace), a ``step`` span per step, a
``chat {model}`` span per model call and an ``execute_tool {tool}`` span per tool call, with a
memory span (``upsert_memory``, ``search_memory``, ``delete_memory``) under ``remember``,
``recall`` and ``forget``. A job keeps the W3C traceparent its run continues: a delegated
child's spans hang under the parent's ``delegate`` call, and a run taken over by another worker
goes on in its trace. Spans are sent over OTLP/HTTP (``steward.telemetry._export``).

Off (the default), nothing of OpenTelemetry is imported and nothing is wrapped: a run costs
what it did before. This module itself imports nothing heavy.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from steward.errors import ConfigError

if TYPE_CHECKING:
    from steward.config import Config, TelemetrySettings
    from steward.loop import Loop
    from steward.safety.secrets.values import SecretWatch
    from steward.telemetry._spans import RunTrace

__all__ = ["current_traceparent", "describe", "trace_run", "use_tracer_provider"]


def current_traceparent() -> str | None:
    """The W3C traceparent of the span current here, or None (no span, or no tracing at all)."""
    if "opentelemetry.trace" not in sys.modules:
        return None  # OpenTelemetry never loaded in this process: no span can be current
    from steward.telemetry._spans import traceparent_here

    return traceparent_here()


def trace_run(
    loop: Loop, settings: TelemetrySettings, *, agent: str, watch: Callable[[], SecretWatch] | None = None
) -> RunTrace | None:
    """Trace the run ``loop`` drives when ``[telemetry]`` says so (its model and toolset wrapped);
    None, with nothing imported, when it does not. ``watch``: the workspace's ``SecretWatch``
    maker, for recorded content."""
    if not settings.enabled:
        return None
    try:
        from steward.telemetry._spans import RunTrace
    except ImportError:  # the otel extra is not installed (its API is what is missing)
        from steward.telemetry._export import missing_extra

        raise ConfigError(missing_extra()) from None

    return RunTrace.around(loop, settings, agent=agent, watch=watch)


def use_tracer_provider(provider: Any) -> None:
    """Send Steward's spans to ``provider`` (an SDK ``TracerProvider`` the application set up)
    instead of the OTLP exporter ``[telemetry]`` describes; None goes back to that."""
    from steward.telemetry._export import use_provider

    use_provider(provider)


def describe(config: Config, environ: dict[str, str] | None = None) -> str:
    """Whether runs are traced and where spans go, in a few words (``steward doctor``)."""
    if not config.telemetry.enabled:
        return "off ([telemetry] enabled = true sends OpenTelemetry traces)"
    from steward.telemetry._export import where

    return where(config.telemetry, environ)
