"""A live run shows the cache's hits dimly, keeps its misses out of sight, and sums both at the end."""

from __future__ import annotations

import io

from rich.console import Console

from steward.cli.render import TerminalRenderer
from steward.events import DoneEvent, SignalEvent
from steward.memory.cache import CacheNote


def test_hits_show_misses_wait_for_the_sum() -> None:
    err, out = io.StringIO(), io.StringIO()
    renderer = TerminalRenderer(err=Console(file=err, width=200), out=Console(file=out, width=200))
    miss, hit = CacheNote(False, "exact"), CacheNote(True, "exact", 1_234)
    for note in (miss, hit):
        renderer.show(SignalEvent(code="model_notice", level="info", message=note.message))
    renderer.show(
        SignalEvent(code="model_notice", level="info", message="the server cannot stream tool calls")
    )
    renderer.show(
        DoneEvent(status="done", end_status="solved", message="ok", steps=2, tool_calls=1, usage={}),
    )
    shown = err.getvalue()
    assert hit.message in shown and miss.message not in shown
    assert "the server cannot stream tool calls" in shown  # other notices as before
    assert "cache: 1 hit (exact 1), 1 miss, ~1,234 tokens saved" in shown
    assert out.getvalue().strip() == "ok"
