"""Spans leaving a process that ends: a short flush at exit, and one line when they could not go.

The OTLP exporter retries a collector that does not answer for its whole timeout, and the SDK's
own exit hook waits for it: a one-off ``steward run`` pointed at a collector that is down would
hang for seconds after its answer. Steward's providers skip that hook; this one sends what is
batched in a helper thread, waits for it at most ``EXIT_WAIT_S``, and says which collector
did not take the spans. Imported with the OTLP exporter only (``_export.tracer``).
"""

from __future__ import annotations

import atexit
import logging
import sys
import threading
from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

EXIT_WAIT_S = 1.5  # what a process's exit waits, at most, for its last spans to be sent
_lock = threading.Lock()
_sending: list[tuple[Any, Watched]] = []  # (provider, its exporter), the exit hook's to flush


class Watched(SpanExporter):
    """``exporter``, remembering whether its last export went through (for the exit's word)."""

    def __init__(self, exporter: SpanExporter, url: str, source: str) -> None:
        self.exporter, self.url, self.source = exporter, url, source
        self.ok, self.busy = True, False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.busy = True
        try:
            result = self.exporter.export(spans)
        except Exception:
            self.ok = False
            raise
        finally:
            self.busy = False
        self.ok = result is SpanExportResult.SUCCESS
        return result

    def shutdown(self) -> None:
        self.exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.exporter.force_flush(timeout_millis)


def flush_at_exit(provider: Any, exporter: Watched) -> None:
    """Send ``provider``'s last spans when the process exits (at most ``EXIT_WAIT_S``)."""
    with _lock:
        if not _sending:
            atexit.register(flush_all)
        _sending.append((provider, exporter))


def flush_all(wait_s: float = EXIT_WAIT_S) -> None:
    """Send what every provider holds, waiting at most ``wait_s``; a line on stderr for each
    collector that did not take its spans. The thread left sending, if any, dies with the process."""
    with _lock:
        sending = list(_sending)
    if not sending:
        return
    # The exporter's own retry warnings would say at length what the one line below says.
    logging.getLogger("opentelemetry.exporter").setLevel(logging.CRITICAL)
    done = threading.Event()

    def send() -> None:
        for provider, _ in sending:
            provider.force_flush()
        done.set()

    threading.Thread(target=send, name="steward-spans-at-exit", daemon=True).start()
    sent = done.wait(wait_s)
    for _, exporter in sending:
        if not exporter.ok or (not sent and exporter.busy):
            sys.stderr.write(
                f"steward: spans not sent: the OpenTelemetry collector at {exporter.url} did not "
                f"answer (from {exporter.source}; gave up at exit)\n"
            )
