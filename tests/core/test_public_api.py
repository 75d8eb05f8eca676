"""The public surface is explicit: a sorted __all__ whose names all exist."""

from __future__ import annotations

import steward
from steward.events import EVENT_TYPES, DoneEvent, ToolResultEvent, decode_event, encode_event


def test_all_is_sorted_and_complete() -> None:
    assert steward.__all__ == sorted(steward.__all__)
    assert set(steward.__all__) == set(steward._WHERE)
    for name in steward.__all__:
        assert hasattr(steward, name), name
    assert set(steward.__all__) <= set(dir(steward))


def test_import_steward_loads_nothing_heavy() -> None:
    import subprocess
    import sys

    code = "import sys, steward; print(sorted(m for m in sys.modules if m.startswith(('steward.', 'pydantic', 'asyncio'))))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_every_event_type_round_trips_through_the_one_encoding() -> None:
    event = ToolResultEvent(
        step=2, call_id="c", tool="bash", status="failed", output="x\ny", duration_ms=1.5, error_category="runtime",
        seq=4, run_id="r", ts=1.25,
    )  # fmt: skip
    line = encode_event(event)
    assert "\n" not in line
    assert decode_event(line) == event
    assert set(EVENT_TYPES) >= {"run_start", "thinking", "text", "phase", "plan", "key_fact", "tool_use",
                                "tool_result", "signal", "error", "waiting", "done"}  # fmt: skip


def test_wire_shape_has_envelope_and_data() -> None:
    done = DoneEvent(
        status="done", end_status="solved", message="m", steps=1, tool_calls=0, usage={}, seq=1, run_id="r"
    )
    wire = done.to_dict()
    assert set(wire) == {"seq", "run_id", "session_id", "ts", "type", "data"}
    assert wire["type"] == "done" and wire["data"]["end_status"] == "solved"
