"""Spans made cheaply in the run's process, and sent over OTLP by a helper process.

OpenTelemetry's SDK builds a span with a sampler, validated attributes, locks and its processors:
about 160 k instructions a span, three to four spans a step, more than half of a loop's step
(bench/tracing.py). Where spans go to the collector ``[telemetry]`` names (no application
provider), Steward makes its own spans instead: an ``opentelemetry.trace.Span`` that keeps its
fields in one list, its record, made whole at its start; when it ends, the record joins the
batch. The batch goes down a pipe to a helper process (``python -m steward.telemetry._child``),
which builds the SDK's spans from the records and sends them with the SDK's OTLP exporter: the
wire format is the SDK's, the encoding and the HTTP happen on another core, and the run's
process pays a record and, once a batch, a write. Steward's own spans of steps and calls are
made under their parent span directly (``child_span``), without the API's context.

Sampling is the SDK's ``ParentBased(TraceIdRatioBased(ratio))``, decided once per trace: a root
span records when the low 64 bits of its trace id fall under ratio * 2**64; a span whose parent
is known follows the parent. A span not recorded is the API's ``NonRecordingSpan``, which still
carries its trace (with the sampled flag off) to a delegated job.

Nothing here ever stops a run: a helper that cannot start, dies, or falls behind costs the spans
(one warning), never a step. Imported only when tracing is on.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import marshal
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, Span, SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.trace.propagation import _SPAN_KEY
from opentelemetry.util.types import Attributes

_log = logging.getLogger(__name__)

_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_NOT_SAMPLED = TraceFlags(TraceFlags.DEFAULT)
_LOW_64 = (1 << 64) - 1
_INTERNAL, _CLIENT = SpanKind.INTERNAL, SpanKind.CLIENT
#: A batch goes to the helper when a span ends this long after the last batch went (the first
#: span at once: the helper starts while the run goes on): a long-lived worker's spans arrive
#: within about a second, and a burst goes in one write. A batch is at most a second of spans,
#: a few thousand at the fastest a loop steps (a few hundred bytes each): counting them as well
#: would cost every span a check.
BATCH_S = 1.0
#: Bytes the pipe may hold back (a helper that cannot keep up) before batches are dropped.
_MAX_PENDING = 16 * 1024 * 1024
EXIT_WAIT_S = 1.5  # what a process's exit waits, at most, for its last spans to be sent


def _new_id(bits: int) -> int:
    for _ in range(8):  # an id of zeros is invalid; 8 draws all zero will not happen
        found = random.getrandbits(bits)
        if found:
            return found
    return 1


#: A span's record, the list ``end`` hands to the ``Sink`` (and the helper reads): made whole at
#: the start, so that ending a span is a time and an append. ``START`` and ``END`` are seconds
#: as floats (``time.time()``, about a quarter of a microsecond fine today), which Python makes
#: and ``marshal`` writes for a fraction of what 64-bit ints cost; the helper turns them into
#: nanoseconds. ``END`` is None until the end: a span with an end is over. ``STATUS`` is None
#: (unset) or (code, description); ``EVENTS`` None or a list. ``BASE``: the attributes a span
#: shares with others of its kind (a model's, a tool call's), never changed, and so sent once a
#: batch; the span's own ``ATTRIBUTES`` come after them. ``KIND``: a ``SpanKind`` value, None for
#: an internal span (the most common, and None costs ``marshal`` nothing to look up).
NAME, KIND, TRACE_ID, SPAN_ID, PARENT_ID, START, END, REMOTE, ATTRIBUTES, STATUS, EVENTS, BASE = range(12)
_NS = 1e-9  # seconds a nanosecond (times the API gives in nanoseconds)


class LightSpan:
    """A recording span whose end appends its record (a list) to its ``Sink``: an
    ``opentelemetry.trace.Span`` by registration (``Span.register``), a plain slotted class by
    make-up, since an ABC subclass with its instance dict costs three times as much to make.
    Made by ``child_span`` or ``LightTracer.start_span``, not by calling the class.

    The attributes dict given at the start is kept, not copied (Steward's callers make a fresh
    one for each span, and may write into it until the end), and values are kept as given:
    Steward sets only strings, numbers, booleans and lists of strings, which is what OTLP carries."""

    # ``_context`` is left unset until asked for (a traceparent, a foreign child's parent).
    __slots__ = ("_context", "_record", "_sink", "attributes")

    _context: SpanContext
    _record: list[Any]
    _sink: Sink
    attributes: dict[str, Any]

    @property
    def name(self) -> str:
        return self._record[NAME]  # type: ignore[no-any-return]

    @property
    def trace_id(self) -> int:
        return self._record[TRACE_ID]  # type: ignore[no-any-return]

    @property
    def span_id(self) -> int:
        return self._record[SPAN_ID]  # type: ignore[no-any-return]

    @property
    def parent_id(self) -> int:
        return self._record[PARENT_ID]  # type: ignore[no-any-return]

    def get_span_context(self) -> SpanContext:
        try:
            return self._context
        except AttributeError:  # made when asked (a traceparent, a child's parent), not for every span
            record = self._record
            made = self._context = SpanContext(record[TRACE_ID], record[SPAN_ID], False, _SAMPLED)
            return made

    def is_recording(self) -> bool:
        return self._record[END] is None

    def set_attribute(self, key: str, value: Any) -> None:
        if self._record[END] is None:
            self.attributes[key] = value

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        if self._record[END] is None:
            self.attributes.update(attributes)

    def add_event(self, name: str, attributes: Attributes = None, timestamp: int | None = None) -> None:
        record = self._record
        if record[END] is not None:
            return
        if record[EVENTS] is None:
            record[EVENTS] = []
        record[EVENTS].append((name, dict(attributes or {}), timestamp or time.time_ns()))

    def update_name(self, name: str) -> None:
        if self._record[END] is None:
            self._record[NAME] = name

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        record = self._record
        if record[END] is not None:
            return
        if isinstance(status, Status):
            code, description = status.status_code, status.description
        else:
            code = status
        if record[STATUS] is not None and record[STATUS][0] == StatusCode.OK.value:
            return  # OK is final, as in the SDK
        record[STATUS] = (code.value, description if code is StatusCode.ERROR else None)

    def record_exception(
        self,
        exception: BaseException,
        attributes: Attributes = None,
        timestamp: int | None = None,
        escaped: bool = False,
    ) -> None:
        found: dict[str, Any] = {
            "exception.type": type(exception).__qualname__,
            "exception.message": str(exception),
            "exception.escaped": escaped,
        }
        self.add_event("exception", {**found, **dict(attributes or {})}, timestamp)

    def add_link(self, context: SpanContext, attributes: Attributes = None) -> None:
        pass  # Steward's spans have no links

    def __enter__(self) -> LightSpan:
        return self

    def __exit__(self, *exc: object) -> None:
        self.end()

    def end(self, end_time: int | None = None) -> None:
        record = self._record
        if record[END] is not None:
            return
        end = record[END] = _time() if end_time is None else end_time * _NS
        sink = self._sink
        spans = sink.spans  # ``Sink.add``, written out: one call less a span
        spans.append(record)
        if end > sink.due:
            sink.flush()


Span.register(LightSpan)
_new_span = object.__new__  # a LightSpan without a call of ``__init__`` (a Python frame less a span)
_time, _getrandbits = time.time, random.getrandbits  # module globals: one lookup, not two


def child_span(
    parent: LightSpan, name: str, kind: int | None, base: Mapping[str, Any] | None, attributes: dict[str, Any]
) -> LightSpan:
    """A span under ``parent`` (recorded, as its parent is: the sampler is parent-based), of
    ``kind`` (a ``SpanKind`` value), with the shared attributes ``base`` and its own
    ``attributes`` (kept): Steward's spans of steps and calls, made without the API's context."""
    span: LightSpan = _new_span(LightSpan)
    span._sink, span.attributes = parent._sink, attributes
    above = parent._record
    # Zero is the one invalid id: a draw of 64 zero bits (2**-64) becomes 1.
    span._record = [
        name, kind, above[TRACE_ID], _getrandbits(64) or 1, above[SPAN_ID], _time(), None, False, attributes,
        None, None, base,
    ]  # fmt: skip
    return span


def next_step(ending: LightSpan | None, run: LightSpan, attributes: dict[str, Any]) -> LightSpan:
    """A ``step`` span under ``run``, started as ``ending`` (the step before, if any) ends: one
    read of the clock and one call for the two, at every step."""
    now = _time()
    if ending is not None:
        record = ending._record
        if record[END] is None:
            record[END] = now
            sink = ending._sink
            sink.spans.append(record)
            if now > sink.due:
                sink.flush()
    span: LightSpan = _new_span(LightSpan)
    span._sink, span.attributes = run._sink, attributes
    above = run._record
    span._record = [
        "step", None, above[TRACE_ID], _getrandbits(64) or 1, above[SPAN_ID], now, None, False, attributes,
        None, None, None,
    ]  # fmt: skip
    return span


def _light_span(
    sink: Sink, name: str, kind: int | None, trace_id: int, parent_id: int, remote: bool,
    attributes: dict[str, Any], start: float,
) -> LightSpan:  # fmt: skip
    span: LightSpan = _new_span(LightSpan)
    span._sink, span.attributes = sink, attributes
    span._record = [
        name, kind, trace_id, _getrandbits(64) or 1, parent_id, start, None, remote, attributes, None, None,
        None,
    ]  # fmt: skip
    return span


class LightTracer(trace.Tracer):
    """The tracer of one collector: spans as ``LightSpan``s (or not recorded, by the sampler)."""

    def __init__(self, sink: Sink, sample_ratio: float) -> None:
        self._sink = sink
        self._bound = round(min(max(sample_ratio, 0.0), 1.0) * (_LOW_64 + 1))

    def flush(self) -> None:
        """Send the spans ended so far (a run's end: they should not wait for the next batch)."""
        self._sink.flush()

    def start_span(
        self,
        name: str,
        context: otel_context.Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: Attributes = None,
        links: Any = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
    ) -> Span:
        parent = (otel_context.get_current() if context is None else context).get(_SPAN_KEY)
        remote = False
        if type(parent) is LightSpan:  # Steward's own parent: read as it is
            trace_id, parent_id, sampled = parent.trace_id, parent.span_id, True
        else:
            parent = trace.get_current_span(context)
            known = parent.get_span_context()
            if known.is_valid:
                trace_id, parent_id, remote = known.trace_id, known.span_id, known.is_remote
                sampled = known.trace_flags.sampled
            else:
                trace_id, parent_id = _new_id(128), 0
                sampled = (trace_id & _LOW_64) < self._bound
        if not sampled:
            return NonRecordingSpan(SpanContext(trace_id, _new_id(64), False, _NOT_SAMPLED))
        given = attributes if isinstance(attributes, dict) else dict(attributes or {})
        # The kind's value without the enum's property call (and Enum's Python ``__hash__``).
        value = None if kind is _INTERNAL else 2 if kind is _CLIENT else kind.value
        start = _time() if start_time is None else start_time * _NS
        # A Span by registration, which mypy does not follow.
        return _light_span(self._sink, name, value, trace_id, parent_id, remote, given, start)  # type: ignore[return-value]

    @contextlib.contextmanager  # a plain context manager: Steward uses it with ``with`` only
    def start_as_current_span(  # type: ignore[override]
        self,
        name: str,
        context: otel_context.Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: Attributes = None,
        links: Any = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
        end_on_exit: bool = True,
    ) -> Iterator[Span]:
        span = self.start_span(name, context, kind, attributes, links, start_time)
        token = otel_context.attach(trace.set_span_in_context(span, context))
        try:
            yield span
        except BaseException as exc:
            if record_exception:
                span.record_exception(exc, escaped=True)
            if set_status_on_exception:
                span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
            raise
        finally:
            otel_context.detach(token)
            if end_on_exit:
                span.end()


class Sink:
    """Ended spans of one collector, sent to its helper process in batches."""

    def __init__(
        self, url: str, source: str, headers: Mapping[str, str], service: str, timeout_s: float
    ) -> None:
        from steward import __version__

        self.url, self.source = url, source
        self._setup = (url, dict(headers), service, float(timeout_s), __version__)
        self.spans: list[list[Any]] = []
        self.due = 0.0  # (``time.time()``) a span that ends after this sends the batch
        self._lock = threading.Lock()  # one writer of the pipe at a time
        self._process: subprocess.Popen[bytes] | None = None
        self._pending = bytearray()  # written to the pipe when it has room
        self._broken = False  # the helper could not start or went away: spans are dropped
        self._dropped = 0

    def flush(self) -> None:
        """Send the spans held here to the helper (without waiting for the pipe)."""
        with self._lock:
            # The list stays the same one: a span ending on another thread meanwhile, which
            # took ``self.spans`` before this, appends to it after what goes now, not to a
            # list already sent (``end`` takes no lock: it costs more than the span).
            held = self.spans
            spans = held[:]
            del held[: len(spans)]
            self.due = _time() + BATCH_S
            if not spans or self._broken:
                self._dropped += len(spans)
                return
            payload = marshal.dumps(spans)
            self._pending += len(payload).to_bytes(4, "big") + payload
            self._write(block_until=None)

    def close(self, wait_s: float = EXIT_WAIT_S) -> bool:
        """Send what is left and let the helper finish, waiting at most ``wait_s``; whether the
        collector took everything (False: a line says so on stderr)."""
        deadline = time.monotonic() + wait_s
        self.flush()
        with self._lock:
            process = self._process
            if process is None:
                return self._dropped == 0
            self._write(block_until=deadline)
            if process.stdin is not None:
                with contextlib.suppress(OSError):
                    process.stdin.close()
                process.stdin = None  # closed: ``communicate`` must not flush it
            self._process, self._broken = None, True
        answer, told = "", False  # the collector's error answer, when it gave one
        try:
            out, _ = process.communicate(timeout=max(deadline - time.monotonic(), 0.0))
            word = out.decode(errors="replace").strip()
            sent = process.returncode == 0 and word == "ok" and self._dropped == 0
            answer = word.removeprefix("failed").strip() if word.startswith("failed HTTP ") else ""
            told = word == "failed told"  # the helper said why on stderr already
        except subprocess.TimeoutExpired:
            process.kill()
            with contextlib.suppress(subprocess.TimeoutExpired, OSError):
                process.communicate(timeout=5)
            sent = False
        if answer:
            from steward.telemetry._child import refused

            sys.stderr.write(f"steward: spans not sent: {refused(self.url, answer)} (from {self.source})\n")
        elif not sent and not told:
            sys.stderr.write(
                f"steward: spans not sent: the OpenTelemetry collector at {self.url} did not "
                f"answer (from {self.source}; gave up at exit)\n"
            )
        return sent

    # --- the helper process --------------------------------------------------------------------

    def _write(self, *, block_until: float | None) -> None:
        """Write what is pending (the lock held); with ``block_until``, keep at it until then."""
        process = self._process
        if process is None:
            process = self._start()
            if process is None:
                return
        assert process.stdin is not None
        fd = process.stdin.fileno()
        for _ in range(1_000_000):  # each turn writes something or waits for room: bounded by the deadline
            if not self._pending:
                return
            try:
                written = os.write(fd, self._pending)
            except BlockingIOError:
                if block_until is None or time.monotonic() >= block_until:
                    break
                _wait_writable(fd, block_until - time.monotonic())
                continue
            except OSError:  # the helper is gone
                self._give_up("the span exporter process ended")
                return
            del self._pending[:written]
        if len(self._pending) > _MAX_PENDING:
            self._dropped += 1
            self._pending.clear()
            _log.warning("tracing: the span exporter process fell behind; a batch of spans was dropped")

    def _start(self) -> subprocess.Popen[bytes] | None:
        if self._broken:
            return None
        try:
            process = subprocess.Popen(
                [sys.executable, "-m", "steward.telemetry._child"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                # Its own session: a Ctrl-C meant for steward does not kill the spans of the
                # run it interrupts; the helper ends when the pipe closes, whatever ends steward.
                start_new_session=True,
            )  # fmt: skip
        except OSError as exc:
            self._give_up(f"the span exporter process could not start ({exc})")
            return None
        assert process.stdin is not None
        setup = marshal.dumps(self._setup)
        try:
            process.stdin.write(len(setup).to_bytes(4, "big") + setup)
            process.stdin.flush()
        except OSError:
            process.kill()
            self._give_up("the span exporter process ended at its start")
            return None
        os.set_blocking(process.stdin.fileno(), False)
        self._process = process
        _register_exit(self)
        return process

    def _give_up(self, why: str) -> None:
        self._broken = True
        self._dropped += 1
        self._pending.clear()
        _log.warning("tracing: %s; spans are no longer sent", why)

    def forget_after_fork(self) -> None:
        """In a forked child: the parent's helper and batch are not this process's."""
        self._lock = threading.Lock()
        self.spans, self._pending, self._process, self._broken = [], bytearray(), None, False


def _wait_writable(fd: int, seconds: float) -> None:
    import selectors

    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_WRITE)
        selector.select(max(seconds, 0.0))


_sinks: list[Sink] = []
_sinks_lock = threading.Lock()


def _register_exit(sink: Sink) -> None:
    with _sinks_lock:
        if not _sinks:
            atexit.register(close_all)
        if sink not in _sinks:
            _sinks.append(sink)


def close_all(wait_s: float = EXIT_WAIT_S) -> None:
    """At exit: every helper sends what is left, all of them within ``wait_s`` together."""
    with _sinks_lock:
        sinks = list(_sinks)
        _sinks.clear()
    deadline = time.monotonic() + wait_s
    for sink in sinks:
        sink.close(max(deadline - time.monotonic(), 0.0))


def _after_fork() -> None:
    with _sinks_lock:
        for sink in _sinks:
            sink.forget_after_fork()
        _sinks.clear()


os.register_at_fork(after_in_child=_after_fork)
