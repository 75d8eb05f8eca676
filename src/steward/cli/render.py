"""Live, readable progress in a terminal: one more consumer of the event stream.

Progress goes to stderr; the final answer goes to stdout, so ``steward run ... > answer.txt``
keeps just the answer.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from typing import Any

from rich.console import Console, RenderableType
from rich.live import Live
from rich.markup import escape as escape_markup
from rich.spinner import Spinner
from rich.text import Text

from steward.events import (
    ApprovalResultEvent,
    DoneEvent,
    ErrorEvent,
    Event,
    KeyFactEvent,
    PhaseEvent,
    PlanEvent,
    RunStart,
    SignalEvent,
    StepStart,
    TextEvent,
    ThinkingEvent,
    ToolResultEvent,
    ToolUse,
    WaitingEvent,
)
from steward.text import shown

_PHASE_STYLE = {
    "plan": "bold blue",
    "reason": "magenta",
    "act": "bold cyan",
    "verify": "green",
    "reflect": "yellow",
    "feedback": "bold yellow",
    "end": "bold green",
}
_MARK = {"done": "[green]✓[/]", "failed": "[red]✗[/]", "in_progress": "[cyan]→[/]", "pending": "○"}


def escape(text: str) -> str:
    """What a run brings (file names, outputs, a model's text) as printed: no terminal control
    sequence reaches the user's terminal (``steward.text.shown``), no rich markup is read."""
    return escape_markup(shown(text, lines=True))


def _short(value: Any, limit: int = 100) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _tool_label(tool: str, arguments: dict[str, Any]) -> str:
    if tool == "bash" and "command" in arguments:
        return f"$ {_short(arguments['command'], 120)}"
    if isinstance(arguments.get("path"), str):
        return f"{tool} {arguments['path']}"
    return f"{tool} {_short(arguments)}"


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"


def cache_summary(messages: Iterable[str]) -> str:
    """What the model cache did in a run, from its ``model_notice`` messages: "cache: 3 hits
    (exact 2, similar 1), 4 misses, ~12,400 tokens saved"; "" when it was not asked."""
    from steward.memory.cache import cache_notes

    notes = cache_notes(messages)
    if not notes:
        return ""
    hits = [n for n in notes if n.hit]
    kinds = ", ".join(f"{k} {c}" for k in ("exact", "similar") if (c := sum(n.kind == k for n in hits)))
    line = f"cache: {_count(len(hits), 'hit')}" + (f" ({kinds})" if kinds else "")
    line += f", {len(notes) - len(hits):,} miss" + ("" if len(notes) - len(hits) == 1 else "es")
    saved = sum(n.tokens_saved for n in hits)
    return line + (f", ~{saved:,} tokens saved" if saved else "")


def tokens_label(usage: Mapping[str, Any]) -> str:
    """A run's tokens as recorded (``Usage.as_dict``): "~1,234 tokens (estimated)" when counted
    here because the server reported none; "" when there are none."""
    tokens = int(usage.get("input_tokens", 0)) + int(usage.get("output_tokens", 0))
    if not tokens:
        return ""
    return f"~{tokens:,} tokens (estimated)" if usage.get("estimated") else f"{tokens:,} tokens"


def run_cache_summary(events: Iterable[Event]) -> str:
    """``cache_summary`` of a recorded run's events (``runs show``)."""
    return cache_summary(e.message for e in events if isinstance(e, SignalEvent) and e.code == "model_notice")


class Running:
    """A status line while a tool call runs: a spinner and the seconds it has taken so far.

    Redrawn four times a second and erased when it stops. It shows only on a terminal: in a
    pipe or a CI log it writes nothing at all.
    """

    def __init__(self, console: Console, tool: str) -> None:
        self.tool = tool
        self.started = time.monotonic()
        self.spinner = Spinner("dots", style="cyan")
        self.live = Live(
            console=console,
            get_renderable=self._render,
            transient=True,
            refresh_per_second=4,
            redirect_stdout=False,  # the answer and the prompts keep their own streams
            redirect_stderr=False,
        )

    def _render(self) -> RenderableType:
        elapsed = int(time.monotonic() - self.started)
        self.spinner.update(text=Text(f"running {self.tool} … {elapsed} s", style="dim"))
        return self.spinner

    def start(self) -> None:
        self.live.start()

    def stop(self) -> None:
        self.live.stop()


class TerminalRenderer:
    """Prints events as they come; ``quiet`` prints only the final answer."""

    def __init__(
        self, *, quiet: bool = False, err: Console | None = None, out: Console | None = None
    ) -> None:
        self.quiet = quiet
        # soft_wrap: a one-line message stays one line in pipes and CI logs.
        self.err = err or Console(stderr=True, highlight=False, soft_wrap=True)
        self.out = out or Console(highlight=False, soft_wrap=True)
        self._streamed_text = False
        self._streamed = ""
        self._plan: dict[int, str] = {}
        self._plan_version = 0
        self._running: Running | None = None
        self._cache: list[str] = []  # the model cache's notes, summed up when the run ends

    def close(self) -> None:
        """Stop what is still drawn live (a run stopped while a tool call ran)."""
        if self._running is not None:
            self._running.stop()
            self._running = None

    def _start_running(self, tool: str) -> None:
        # A long call (a test suite, a build) would otherwise show nothing until it ends.
        self.close()
        self._running = Running(self.err, tool)
        self._running.start()

    def show(self, event: Event) -> None:  # noqa: C901, PLR0912 - one branch per event type reads best
        self.close()  # whatever comes next, the call that was running has ended or paused
        if self.quiet:
            self._show_quiet(event)
            return
        e = self.err
        if self._streamed_text and not (isinstance(event, TextEvent) and event.partial):
            e.print()  # end the streamed line before anything else is shown
            self._streamed_text = False
        match event:
            case RunStart():
                e.print(f"[bold]steward[/] · {escape(event.model)} · {escape(event.workspace)}")
                e.print(f"[dim]goal:[/] {escape(event.goal)}")
            case PhaseEvent():
                style = _PHASE_STYLE.get(event.phase, "")
                e.print(
                    f"[dim]{event.step:>3}[/] [{style}]{event.phase.upper():<8}[/] {escape(event.summary)}"
                )
            case PlanEvent():
                self._show_plan(event)
            case ToolUse():
                e.print(f"    [cyan]▸[/] {escape(_tool_label(event.tool, event.input))}")
                self._start_running(event.tool)
            case ApprovalResultEvent() if event.decision == "approved":
                self._start_running(event.tool)  # the approved call runs now
            case ToolResultEvent():
                ok = event.status == "completed"
                mark = "[green]✓[/]" if ok else "[red]✗[/]"
                lines = event.output.strip().splitlines() or [""]
                # A command's verdict is at its end (exit code); other tools lead with it.
                first = _short(lines[-1] if event.tool == "bash" else lines[0], 90)
                e.print(f"      {mark} [dim]{event.duration_ms:,.0f} ms[/]  {escape(first)}")
            case KeyFactEvent():
                e.print(f"      [dim]• fact:[/] {escape(event.fact)}")
            case SignalEvent() if self._cache_note(event):
                pass
            case SignalEvent():
                e.print(f"    [yellow]{escape(event.message)}[/]")
            case ErrorEvent():
                style = "yellow" if event.recoverable else "bold red"
                e.print(f"    [{style}]error:[/] {escape(_short(event.message, 300))}")
            case ThinkingEvent() if not event.partial:
                e.print(f"    [dim italic]{escape(_short(event.text, 160))}[/]")
            case TextEvent() if event.partial:
                self._streamed_text = True
                self._streamed += event.text
                e.print(escape(event.text), end="")
            case StepStart():
                self._streamed = ""
            case WaitingEvent() if event.kind == "question":
                e.print(f"[bold yellow]? the agent asks:[/] {escape(event.question)}")
            case DoneEvent():
                self._final(event, quiet=False)
            case _:
                pass

    def _cache_note(self, event: SignalEvent) -> bool:
        """Keep a note of the model cache (a hit is shown dim, a miss only in the end's sum)."""
        if event.code != "model_notice" or not event.message.startswith("model cache "):
            return False
        self._cache.append(event.message)
        if event.message.startswith("model cache hit"):
            self.err.print(f"    [dim]{escape(event.message)}[/]")
        return True

    def _show_quiet(self, event: Event) -> None:
        if isinstance(event, DoneEvent):
            self._final(event, quiet=True)
        elif isinstance(event, WaitingEvent):
            self.err.print(f"[bold yellow]?[/] {escape(event.question)}")

    def _show_plan(self, event: PlanEvent) -> None:
        state = {
            t["id"]: "current" if t["id"] == event.current and t["status"] != "failed" else t["status"]
            for t in event.sub_tasks
        }
        if event.version != self._plan_version:
            self.err.print(f"    [bold]plan v{event.version}[/]: {escape(event.goal)}")
            for task in event.sub_tasks:
                mark = "[cyan]→[/]" if state[task["id"]] == "current" else _MARK.get(task["status"], "○")
                self.err.print(f"      {mark} {task['id']}. {escape(task['title'])}")
        else:
            titles = {t["id"]: t["title"] for t in event.sub_tasks}
            changed = [i for i, status in state.items() if self._plan.get(i) != status]
            for i in changed:
                mark = "[cyan]→[/]" if state[i] == "current" else _MARK.get(state[i], "○")
                self.err.print(f"      {mark} {i}. {escape(titles[i])}")
        self._plan, self._plan_version = state, event.version

    def _final(self, event: DoneEvent, *, quiet: bool) -> None:
        if not quiet:
            status = event.end_status or event.status
            color = {"solved": "green", "answered": "cyan", "partial": "yellow"}.get(status, "red")
            tokens = tokens_label(event.usage)
            self.err.print(
                f"[bold {color}]■ {status}[/] · {_count(event.steps, 'step')} · "
                f"{_count(event.tool_calls, 'tool call')}" + (f" · {tokens}" if tokens else "")
            )
            if cached := cache_summary(self._cache):
                self.err.print(f"[dim]{cached}[/]")
        if event.status == "failed":
            if quiet:  # otherwise the error event was shown already
                self.err.print(f"[bold red]run failed:[/] {escape(event.message)}")
        # A cancelled run's message ("Cancelled before it finished.") is no answer: stdout stays empty.
        elif event.status != "cancelled" and event.message and not self._already_on_screen(event.message):
            self.out.print(escape(event.message))

    def _already_on_screen(self, message: str) -> bool:
        # A streamed final answer was shown live; print it again only when stdout is not the
        # terminal (redirected to a file or a pipe), where it is the only copy.
        same_screen = self.out.is_terminal and self.err.is_terminal
        return same_screen and self._streamed.strip() == message.strip()
