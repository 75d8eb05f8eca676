"""Rebuilding a run from its recorded events by running the loop against them.

The loop is the one place that knows how events change a run's state, so a run is rebuilt
by running the loop again with the recorded log as its source of everything that was not
deterministic: the model's replies, tool results, human answers and decisions, timestamps.
While the log lasts nothing is asked of the model and no tool runs; every event the loop
emits must be the recorded one at that position. When the log ends the loop is simply live
again, at exactly the point where the earlier process stopped.
"""

from __future__ import annotations

from collections.abc import Sequence

from steward.errors import RunError
from steward.events import DoneEvent, ErrorEvent, Event


class ReplayError(RunError):
    """The recorded log and the loop disagree: the run cannot be rebuilt faithfully."""


# The fields that identify an event well enough to notice that the loop took another path.
_KEYS: dict[str, tuple[str, ...]] = {
    "step": ("step",),
    "phase": ("step", "phase"),
    "tool_use": ("call_id", "tool"),
    "tool_result": ("call_id",),
    "model_reply": ("step",),
    "approval_gate": ("id",),
    "waiting": ("id",),
}


def resumable_prefix(events: Sequence[Event]) -> list[Event]:
    """The log without its closing events when the run ended cancelled or failed.

    A run stopped by Ctrl-C, or failed because the model's API or a toolset was down, goes
    on from where it stopped; its closing events stay in the store as a record of the stop.
    A run marked failed because it kept killing its process stays failed.
    """
    end = len(events)
    closing = events[end - 1] if end else None
    if isinstance(closing, DoneEvent) and closing.status in ("cancelled", "failed"):
        last = events[end - 2] if end > 1 else None
        if isinstance(last, ErrorEvent) and last.code == "crashed":
            return list(events)  # it kept killing its process: that ending is final
        end -= 1
        if isinstance(last, ErrorEvent) and not last.recoverable:
            end -= 1
    return list(events[:end])


class Replay:
    """A cursor over a run's recorded events, consumed as the loop emits them again."""

    def __init__(self, run_id: str, events: Sequence[Event], last_seq: int | None = None) -> None:
        self.run_id = run_id
        self._events = list(events)
        self._pos = 0
        #: The seq of the last recorded event, closing events of a stop included: live events
        #: continue after it.
        self.last_seq = last_seq if last_seq is not None else (self._events[-1].seq if self._events else 0)

    @property
    def done(self) -> bool:
        return self._pos >= len(self._events)

    def peek(self) -> Event | None:
        return None if self.done else self._events[self._pos]

    def match(self, event: Event) -> Event:
        """Consume the recorded event at this position; it must be the one the loop emitted."""
        recorded = self._events[self._pos]
        if recorded.type != event.type or any(
            getattr(recorded, key) != getattr(event, key) for key in _KEYS.get(event.type, ())
        ):
            raise ReplayError(
                f"cannot rebuild the run: at seq {recorded.seq} the log has {_describe(recorded)} "
                f"but the loop now produces {_describe(event)}. The run was recorded with other "
                "tools, settings or Steward version; resume it with those, or start a new run",
                run_id=self.run_id,
                status="diverged",
            )
        self._pos += 1
        return recorded


def _describe(event: Event) -> str:
    keys = ", ".join(f"{k}={getattr(event, k)!r}" for k in _KEYS.get(event.type, ()))
    return f"'{event.type}'" + (f" ({keys})" if keys else "")
