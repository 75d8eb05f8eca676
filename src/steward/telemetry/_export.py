"""Where spans go: the OTLP/HTTP exporter ``[telemetry]`` describes, made once per process.

The collector is ``[telemetry] endpoint`` when set, else OpenTelemetry's own variables
(``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, the whole URL; ``OTEL_EXPORTER_OTLP_ENDPOINT``, the
base), else ``http://localhost:4318``: as in OpenTelemetry's SDKs, what the configuration says
comes before the variables. Spans are batched and sent by a helper process; what is left is sent
when the process exits, waiting a second or two at most (``_light``).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from steward.errors import ConfigError

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer

    from steward.config import TelemetrySettings

DEFAULT_BASE = "http://localhost:4318"
_TRACES_PATH = "/v1/traces"
_EXPORT_TIMEOUT_S = 10.0
_lock = threading.Lock()
_providers: dict[tuple[str, tuple[tuple[str, str], ...], str, float], Any] = {}
_override: list[Any] = []  # the application's own provider (``use_provider``), when it set one


def use_provider(provider: Any) -> None:
    with _lock:
        _override[:] = [provider] if provider is not None else []


def traces_url(settings: TelemetrySettings, environ: Mapping[str, str] | None = None) -> tuple[str, str]:
    """The URL spans are POSTed to, and what said so."""
    env = os.environ if environ is None else environ
    if settings.endpoint:
        return _with_path(settings.endpoint), "[telemetry] endpoint"
    if whole := env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip():
        return whole, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
    if base := env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip():
        return _with_path(base), "OTEL_EXPORTER_OTLP_ENDPOINT"
    return _with_path(DEFAULT_BASE), "the default"


_OTEL_HEADERS = ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS")


def _with_path(base: str) -> str:
    base = base.rstrip("/")
    return base if base.endswith(_TRACES_PATH) else base + _TRACES_PATH


def headers(settings: TelemetrySettings, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The export's headers from the variable ``headers_env`` names, else from OpenTelemetry's
    own (``OTEL_EXPORTER_OTLP_TRACES_HEADERS``, then ``OTEL_EXPORTER_OTLP_HEADERS``), in their
    ``key=value,key2=value2`` form, values percent-encoded; a ``ConfigError`` naming the fix."""
    name = settings.headers_env
    env = os.environ if environ is None else environ
    if not name:
        # Read here, as headers_env is, so that a malformed one is Steward's error before the
        # run, not the exporter's log line from its helper process.
        name = next((n for n in _OTEL_HEADERS if env.get(n, "").strip()), "")
        if not name:
            return {}
    text = env.get(name)
    if text is None:
        raise ConfigError(
            f"[telemetry] headers_env names {name}, which is not set. Export {name}='key=value' "
            "(e.g. authorization=Bearer%20TOKEN), or remove headers_env."
        )
    found: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise ConfigError(
                f"{name} must hold key=value pairs separated by commas (got {part!r}); "
                "percent-encode commas and spaces inside a value"
            )
        found[key.strip().lower()] = unquote(value.strip())
    return found


def where(settings: TelemetrySettings, environ: Mapping[str, str] | None = None) -> str:
    """What ``steward doctor`` says: on, to which URL (from where), or why it cannot be."""
    if not installed():
        return f"ON but cannot send: {missing_extra()}"
    if _override:
        return "on: spans go to the TracerProvider the application set"
    url, source = traces_url(settings, environ)
    try:
        sent = headers(settings, environ)
    except ConfigError as exc:
        return f"ON but cannot send: {exc}"
    env = os.environ if environ is None else environ
    named = settings.headers_env or next((n for n in _OTEL_HEADERS if env.get(n, "").strip()), "")
    extra = f", headers from {named} ({len(sent)})" if sent else ""
    content = ", content recorded (secrets redacted)" if settings.record_content else ""
    sampled = f", {settings.sample_ratio:.0%} of runs" if settings.sample_ratio < 1 else ""
    return (
        f"on: OTLP/HTTP to {url} (from {source}{extra}), service {settings.service_name!r}{sampled}{content}"
    )


def installed() -> bool:
    """Whether the ``otel`` extra is there (without importing it)."""
    from importlib.util import find_spec

    try:
        return all(
            find_spec(m) is not None for m in ("opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http")
        )
    except (ModuleNotFoundError, ValueError):  # a parent package is missing, or blocked
        return False


def missing_extra() -> str:
    return "[telemetry] enabled needs OpenTelemetry: pip install 'steward[otel]' (or set enabled = false)"


def tracer(settings: TelemetrySettings) -> Tracer:
    """Steward's tracer for ``settings``: the application's provider, or Steward's own light
    spans sent over OTLP/HTTP by a helper process (``_light``; one per collector, headers,
    service name and sampling ratio)."""
    from steward import __version__

    with _lock:
        if _override:
            return _override[0].get_tracer("steward", __version__)  # type: ignore[no-any-return]
    from steward.telemetry._light import LightTracer, Sink

    url, source = traces_url(settings)
    sent = headers(settings)
    key = (url, tuple(sorted(sent.items())), settings.service_name, settings.sample_ratio)
    with _lock:
        made = _providers.get(key)
        if made is None:
            if not installed():  # the helper process sends with the SDK's exporter
                raise ConfigError(missing_extra())
            sink = Sink(url, source, sent, settings.service_name, _EXPORT_TIMEOUT_S)
            made = _providers[key] = LightTracer(sink, settings.sample_ratio)
    return made
