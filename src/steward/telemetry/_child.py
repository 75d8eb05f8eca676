"""The span exporter process: span records on stdin, sent over OTLP/HTTP by the SDK's exporter.

Started by ``steward.telemetry._light.Sink`` (``python -m steward.telemetry._child``). Its stdin
carries length-prefixed ``marshal`` frames: first the setup (url, headers, service name, timeout,
Steward's version), then batches of span records, as ``LightSpan.end`` hands them on. A reader
thread drains the pipe at once, so that the run's process never waits on it; the main thread
turns records into the SDK's ``ReadableSpan``s and exports them. When stdin closes (the run's
process exits, or dies), what is left is sent, and one line on stdout says whether the collector
took the last batches: ``ok``, ``failed`` (it did not answer), ``failed HTTP 404 (reason)`` (it
answered with an error) or ``failed told`` (as stderr said already). The exporter's own log
lines are not shown: a batch refused while the run goes on is one line of Steward's on stderr,
once per answer.
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

    stdin = sys.stdin.buffer
    found = frames(stdin)
    setup = next(found, None)
    if setup is None:
        return 0
    url, headers, service, timeout_s, version = setup
    refusals = _Refusals.install(url)
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
            refusals.last = ""
            try:
                result = exporter.export([readable(r) for r in spans[at : at + _CHUNK]])
            except Exception:  # a malformed record or an exporter fault: that batch is lost
                logging.getLogger(__name__).exception("steward: a batch of spans could not be sent")
                result = SpanExportResult.FAILURE
            ok = refusals.sent(result is SpanExportResult.SUCCESS, going_on=more)
    exporter.shutdown()  # type: ignore[no-untyped-call]
    try:
        sys.stdout.write("ok\n" if ok else f"failed {refusals.final()}".rstrip() + "\n")
        sys.stdout.flush()
    except OSError:  # the run's process stopped waiting for the word
        pass
    return 0


class _Refusals(logging.Handler):
    """What the exporter logged of the last failed batch: ``last`` is ``HTTP 404 (reason)`` when
    the collector answered with an error, "" when it did not answer."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.url, self.last = "", ""
        self._told: set[str] = set()

    @classmethod
    def install(cls, url: str) -> _Refusals:
        """Hear the exporter's errors (its retries are its own; a batch failed after them is
        logged once) instead of letting them reach stderr as they are."""
        made = cls()
        made.url = url
        logger = logging.getLogger("opentelemetry.exporter")
        logger.setLevel(logging.ERROR)
        logger.addHandler(made)
        logger.propagate = False
        return made

    def sent(self, ok: bool, *, going_on: bool) -> bool:
        """``ok``, once a failed batch is said on stderr if the run goes on (a worker, a server)."""
        if not ok and going_on:
            self.tell()
        return ok

    def emit(self, record: logging.LogRecord) -> None:
        args = record.args
        if "batch code" in str(record.msg) and isinstance(args, tuple) and len(args) == 3 and args[1]:
            self.last = f"HTTP {args[1]} ({args[2]})"

    def final(self) -> str:
        """The last failure for the final line: ``told`` when stderr said it already."""
        return "told" if (self.last or "did not answer") in self._told else self.last

    def tell(self) -> None:
        what = self.last or "did not answer"
        if what in self._told:
            return
        self._told.add(what)
        said = (
            refused(self.url, self.last) if self.last else f"the OpenTelemetry collector at {self.url} {what}"
        )
        sys.stderr.write(f"steward: spans not sent: {said}\n")


def refused(url: str, answer: str) -> str:
    """What to say of a collector that answered ``answer`` (``HTTP 401 (...)``), with the fix."""
    code = answer.split()[1] if answer.startswith("HTTP ") else ""
    if code in ("401", "403"):
        fix = "it refused the key: check the headers headers_env names (or OTEL_EXPORTER_OTLP_HEADERS)"
    elif code in ("404", "405", "501"):
        fix = (
            "this is not an OTLP/HTTP traces address: give [telemetry] endpoint the collector's base URL, "
            'e.g. "http://localhost:4318" (/v1/traces is added)'
        )
    else:
        fix = "see the collector's log"
    return f"the OpenTelemetry collector at {url} answered {answer}; {fix}"


def _waiting(batches: queue.Queue[list[list[Any]] | None]) -> Iterator[list[list[Any]] | None]:
    """The batches already queued (without waiting), at most a thousand."""
    for _ in range(1000):
        try:
            yield batches.get_nowait()
        except queue.Empty:
            return


if __name__ == "__main__":
    sys.exit(main())
