"""A real OTLP/HTTP trace receiver on loopback: decodes each ExportTraceServiceRequest (protobuf)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


@dataclass(frozen=True, slots=True)
class Received:
    name: str
    trace_id: str
    span_id: str
    parent_id: str  # "" for a root span
    attributes: dict[str, Any]
    service: str
    kind: int = 0  # OTLP's SpanKind: 1 internal, 3 client
    status: int = 0  # OTLP's status code: 0 unset, 1 ok, 2 error
    start: int = 0  # nanoseconds since the epoch
    end: int = 0


@dataclass
class Receiver:
    url: str
    spans: list[Received] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    changed: threading.Condition = field(default_factory=threading.Condition)

    def wait_for(self, check: Callable[[list[Received]], bool], timeout: float = 90) -> list[Received]:
        """The spans once ``check`` holds for them (``timeout`` only bounds a failure)."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while not check(self.spans):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"spans never matched; got {[s.name for s in self.spans]}")
                self.changed.wait(left)
            return list(self.spans)


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind is not None else None


def _decode(body: bytes) -> list[Received]:
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    out: list[Received] = []
    for resource_spans in request.resource_spans:
        resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
        service = str(resource.get("service.name", ""))
        for scope_spans in resource_spans.scope_spans:
            out.extend(_received(span, service) for span in scope_spans.spans)
    return out


def _received(span: Any, service: str) -> Received:
    return Received(
        name=span.name,
        trace_id=span.trace_id.hex(),
        span_id=span.span_id.hex(),
        parent_id=span.parent_span_id.hex(),
        attributes={a.key: _value(a.value) for a in span.attributes},
        service=service,
        kind=span.kind,
        status=span.status.code,
        start=span.start_time_unix_nano,
        end=span.end_time_unix_nano,
    )


@contextmanager
def receiver() -> Iterator[Receiver]:
    made = Receiver(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            spans = _decode(body) if self.path == "/v1/traces" else []
            with made.changed:
                made.headers.append({k.lower(): v for k, v in self.headers.items()})
                made.spans.extend(spans)
                made.changed.notify_all()
            reply = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200 if self.path == "/v1/traces" else 404)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    made.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield made
    finally:
        server.shutdown()
        server.server_close()
