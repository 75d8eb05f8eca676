"""Streaming one model reply for the loop: deltas shown live, retries and failures as outcomes.

Kept out of ``steward.loop`` so the loop reads as its steps; the loop calls ``stream_reply``
once per step and gets back events, the complete response, or the outcome that ends the run.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol, assert_never

from steward import events as ev
from steward import run_state as rs
from steward.clock import Clock, OutOfTime, within
from steward.errors import ModelError
from steward.models.base import (
    NOTICE_SIGNAL,
    Model,
    ModelRequest,
    ModelResponse,
    Notice,
    Retrying,
    StreamItem,
    TextDelta,
    ThinkingDelta,
)
from steward.models.retry import RetryingModel


class Loop(Protocol):
    """What of ``steward.loop.Loop`` a reply needs (a protocol: the loop imports this module)."""

    model: Model
    settings: rs.LoopSettings
    clock: Clock

    def emit(self, event: ev.Event) -> ev.Event: ...

    def _time_up(self) -> tuple[ev.Event, rs.Finish]: ...


async def stream_reply(
    loop: Loop, request: ModelRequest
) -> AsyncIterator[ev.Event | ModelResponse | rs.Fail | rs.Finish]:
    """Stream one reply: deltas are partial events, retries ``error`` events, failures ``Fail``.

    When the run's time is up the reply (or the wait before a retry) is cancelled and the
    run ends. Each wait for a piece is bounded, never a yield: a deadline must not cancel
    whoever consumes the events.
    """
    s = loop.settings
    retrying = RetryingModel(loop.model, retries=s.model_retries, backoff_s=s.model_retry_backoff_s)
    stream = retrying.stream(request)
    try:
        while (piece := await within(loop.clock, lambda: anext(stream, None))) is not None:
            yield _shown(loop, piece)
    except OutOfTime:
        for item in loop._time_up():
            yield item
    except ModelError as exc:
        yield rs.Fail("model_error", str(exc))
    except Exception as exc:  # a provider bug must end this run cleanly, not the process
        yield rs.Fail("model_error", f"{loop.model.name} failed unexpectedly: {type(exc).__name__}: {exc}")
    finally:
        await stream.aclose()  # type: ignore[attr-defined]  # a reply cut midway: release its connection


def _shown(loop: Loop, piece: StreamItem) -> ev.Event | ModelResponse:
    """A piece of the reply as it is passed on: deltas as partial (live-only) events."""
    match piece:
        case TextDelta(text=text):
            return loop.emit(ev.TextEvent(text=text, partial=True))
        case ThinkingDelta(text=text):
            return loop.emit(ev.ThinkingEvent(text=text, partial=True))
        case Retrying(message=message):
            return loop.emit(ev.ErrorEvent(code="model_retry", message=message, recoverable=True))
        case Notice(message=message):
            return loop.emit(ev.SignalEvent(code=NOTICE_SIGNAL, level="info", message=message))
        case ModelResponse():
            return piece
        case _:
            assert_never(piece)
