"""The span exporter process: span records on stdin, sent over OTLP/HTTP by the SDK's exporter.

Started by ``steward.telemetry._light.Sink`` (``python -m steward.telemetry._child``). Its stdin
carries length-prefixed ``marshal`` frames: first the setup (url, headers, service name, timeout,
Steward's version), then batches of span records, as ``LightSpan.end`` hands them on. A reader
thread drains the pipe at once, so that the run's process never waits on it; the main thread
turns records into the SDK's ``ReadableSpan``s and exports them. When stdin closes (the run's
process exits, or dies), what is left is sent, and one word on stdout says whether the collector
took the last batches: ``ok`` or ``failed``.
"""

from __future__ import annotations

import logging
import marshal
import queue
import sys
import threading
from collections.abc import Iterator
from typing import Any, BinaryIO

_CHUNK = 512  # spans per export request


def frames(stream: BinaryIO) -> Iterator[Any]:
    """The frames on ``stream`` until it ends (a cut frame ends it too)."""
    for _ in range(10**12):  # bounded by the stream: it ends when the run's process closes it
        head = stream.read(4)
        if len(head) < 4:
            return
        size = int.from_bytes(head, "big")
        body = stream.read(size)
        if len(body) < size:
            return
        yield marshal.loads(body)  # noqa: S302 - written by the process that started this one


def main() -> int:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import Event, ReadableSpan
    from opentelemetry.sdk.trace.export import SpanExportResult
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
    from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

    # Retries are the exporter's; a failed batch after them is one error line, not one per retry.
    logging.getLogger("opentelemetry.exporter").setLevel(logging.ERROR)
    stdin = sys.stdin.buffer
    found = frames(stdin)
    setup = next(found, None)
    if setup is None:
        return 0
    url, headers, service, timeout_s, version = setup
    exporter = OTLPSpanExporter(endpoint=url, headers=headers, timeout=timeout_s)
    resource = Resource.create({"service.name": service})
    scope = InstrumentationScope("steward", version)
    sampled = TraceFlags(TraceFlags.SAMPLED)
    kinds = {kind.value: kind for kind in SpanKind}
    codes = {code.value: code for code in StatusCode}
    unset = Status(StatusCode.UNSET)

    def readable(record: list[Any]) -> ReadableSpan:
        # As ``steward.telemetry._light`` makes it (its ``NAME`` ... ``BASE``); times in seconds.
        name, kind, trace_id, span_id, parent_id, start, end, remote, own, status, events, base = record
        attributes = {**base, **own} if base else own
        parent = SpanContext(trace_id, parent_id, remote, sampled) if parent_id else None
        return ReadableSpan(
            name, SpanContext(trace_id, span_id, False, sampled), parent, resource, attributes,
            [Event(n, a, t) for n, a, t in events or ()], (), kinds.get(kind, SpanKind.INTERNAL),
            None, unset if status is None else Status(codes.get(status[0], StatusCode.UNSET), status[1]),
            round(start * 1e9), round(end * 1e9), scope,
        )  # fmt: skip

    batches: queue.Queue[list[list[Any]] | None] = queue.Queue()

    def read() -> None:
        for batch in found:
            batches.put(batch)
        batches.put(None)

    threading.Thread(target=read, name="steward-spans-in", daemon=True).start()
    ok, more = True, True
    for _ in range(10**12):  # bounded by the stream, as ``frames``
        if not more:
            break
        first = batches.get()
        spans: list[list[Any]] = []
        for batch in (first, *_waiting(batches)):
            if batch is None:
                more = False
            else:
                spans.extend(batch)
        for at in range(0, len(spans), _CHUNK):
            try:
                result = exporter.export([readable(r) for r in spans[at : at + _CHUNK]])
            except Exception:  # a malformed record or an exporter fault: that batch is lost
                logging.getLogger(__name__).exception("steward: a batch of spans could not be sent")
                result = SpanExportResult.FAILURE
            ok = result is SpanExportResult.SUCCESS
    exporter.shutdown()  # type: ignore[no-untyped-call]
    try:
        sys.stdout.write("ok\n" if ok else "failed\n")
        sys.stdout.flush()
    except OSError:  # the run's process stopped waiting for the word
        pass
    return 0


def _waiting(batches: queue.Queue[list[list[Any]] | None]) -> Iterator[list[list[Any]] | None]:
    """The batches already queued (without waiting), at most a thousand."""
    for _ in range(1000):
        try:
            yield batches.get_nowait()
        except queue.Empty:
            return


if __name__ == "__main__":
    sys.exit(main())
