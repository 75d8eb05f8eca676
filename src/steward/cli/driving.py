"""Driving a run at the terminal: opening its agent, showing its events, asking the human.

Every command that runs an agent goes through ``run_async`` (the agent opened the one way,
``Agent.open``; Ctrl-C and SIGTERM handled) and ``drive`` (events shown live, questions and
approvals asked at the terminal or read from piped stdin).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from steward.cli._stdin import LineReader
from steward.cli.options import EXIT_INTERRUPTED, EXIT_NOT_SOLVED, EXIT_TERMINATED, exit_code, fail
from steward.safety.policy.rules import LEAVES_MACHINE

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable

    from steward.agent import Agent
    from steward.config import Config
    from steward.events import Event
    from steward.run import Run
    from steward.run_state import Approval

_STDIN = LineReader()
CURRENT: list[Run] = []  # the run being driven: named when it is stopped, asked how it stands


async def drive(run: Run, *, json_lines: bool, quiet: bool, first: AsyncIterator[Event] | None = None) -> int:
    """Stream a run to the terminal; answer its questions from the user when we can.

    ``first`` is where to start (an approval or answer given on the command line).
    """
    from steward.cli.render import TerminalRenderer
    from steward.events import encode_event

    renderer = TerminalRenderer(quiet=quiet)

    def show(event: Event) -> None:
        if json_lines:
            sys.stdout.write(encode_event(event) + "\n")
            sys.stdout.flush()
        else:
            renderer.show(event)

    CURRENT.clear()
    CURRENT.append(run)
    events = first or run.stream()
    try:
        return await _drive_stream(run, events, show, json_lines=json_lines)
    except BrokenPipeError:
        # Whoever read the output is gone (e.g. `| head`): the run stops here, recorded as
        # cancelled, and can be resumed. Further writes to the closed pipe would only fail.
        _silence_stdout()
        return EXIT_NOT_SOLVED
    finally:
        renderer.close()  # a status line still drawn (Ctrl-C during a tool call) goes away


def _silence_stdout() -> None:
    # Python would report the broken pipe again when it flushes stdout at exit.
    sys.stdout = open(os.devnull, "w")  # noqa: SIM115, PTH123 - replaces the closed stdout for good


async def _drive_stream(
    run: Run, events: AsyncIterator[Event], show: Callable[[Event], None], *, json_lines: bool
) -> int:
    for _ in range(1000):  # a run may ask many questions, but not without bound
        try:
            async for event in events:
                show(event)
        except asyncio.CancelledError:
            show(run.cancelled())  # consumers of the stream see how it ended
            raise
        finally:
            close = getattr(events, "aclose", None)
            if close is not None:
                await close()  # now, so that a stop is recorded before the process ends
        pending = run.pending
        if run.status != "waiting" or pending is None:
            break
        if pending.approval is not None:
            next_events = await _approve(run, pending.approval, json_lines=json_lines)
            if next_events is None:
                _still_waiting(run)
                return EXIT_NOT_SOLVED
            events = next_events
            continue
        answer = await ask_user(pending.question, json_lines=json_lines)
        if answer is None:
            _closed_stdin()
            _still_waiting(run)
            return EXIT_NOT_SOLVED
        events = run.answer_stream(answer)
    return exit_code(run.status, run.state.end_status)


def _still_waiting(run: Run) -> None:
    if run.store_backed:
        how = (
            f"steward approve {run.id}  or  steward deny {run.id} --reason WHY"
            if run.pending is not None and run.pending.approval is not None
            else f'steward answer {run.id} "ANSWER"'
        )
        typer.echo(f"steward: run {run.id} stays waiting; later: {how}", err=True)


def _closed_stdin() -> None:
    typer.echo(
        "steward: the agent is waiting for you and standard input is closed; run "
        "interactively, pipe the answer in, or use `steward stdio`.",
        err=True,
    )


async def ask_user(question: str, *, json_lines: bool, prompt: str = "answer> ") -> str | None:
    """One line from the user; None when stdin is closed. Cancellable (e.g. by a deadline)."""
    if sys.stdin.isatty() and not json_lines:
        typer.echo(prompt, err=True, nl=False)
    line = await _STDIN.readline()
    return line.rstrip("\n") if line else None


async def _approve(run: Run, approval: Approval, *, json_lines: bool) -> AsyncIterator[Event] | None:
    """Ask the user about one pending approval: once, always (remembered), or deny."""
    import time

    always = f"   [a] always: allow {approval.suggestion}" if approval.suggestion else ""
    # An MCP tool's description is the server's own word for what it does: show it.
    said = " ".join(approval.description.split())
    said = f"  the tool says: {said[:600]}{'...' if len(said) > 600 else ''}\n" if said else ""
    if approval.tool in LEAVES_MACHINE:  # steward-forge: what would leave, line by line
        said = "".join(f"  {line}\n" for line in approval.description.splitlines()[:80])
    typer.echo(
        f"? approve {approval.tool} {_short_json(approval.arguments)}\n  because {approval.reason}\n{said}"
        f"  [y] once{always}   [n] deny (optionally: n <reason>)   "
        f"default in {max(0, int(approval.deadline - time.time()))} s: {approval.default}"
        + ("" if approval.suggestion else f"\n  ({no_always(approval)})"),
        err=True,
    )
    for _ in range(20):  # a few unclear answers, not forever
        try:
            async with asyncio.timeout(max(0.0, approval.deadline - time.time())):
                line = await ask_user("", json_lines=json_lines, prompt="approve> ")
        except TimeoutError:
            typer.echo(f"\nsteward: no answer before the deadline; {approval.default}.", err=True)
            return run.expire_stream()
        if line is None:
            _closed_stdin()
            return None
        word, _, rest = line.strip().partition(" ")
        match word.lower():
            case "y" | "yes":
                return run.approve_stream()
            case "a" | "always" if approval.suggestion:
                return run.approve_stream(remember=True)
            case "a" | "always":
                typer.echo(f"  {no_always(approval)}; answer y or n", err=True)
            case "n" | "no" | "deny":
                return run.deny_stream(reason=rest.strip())
            case _:
                typer.echo(
                    "  answer y, n (with an optional reason)" + (", or a" if approval.suggestion else ""),
                    err=True,
                )
    return run.deny_stream(reason="no clear answer")


def no_always(approval: Approval) -> str:
    """Why "approve always" is not offered for this call, and what to do instead."""
    # The policy offers no rule to remember when an allow rule could not stop the question.
    if approval.reason.startswith("the rule ask "):
        return (
            "no [a] always: an ask rule asks every time, and no allow rule outranks it; to stop "
            "being asked, remove or narrow that rule in [policy] ask"
        )
    return "no [a] always: no single allow rule would cover just this call"


def _short_json(value: Any, limit: int = 4000) -> str:
    import json

    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def warn_about_sandbox(agent: Agent, *, flag_given: bool) -> None:
    """Say so whenever commands will not run sandboxed, whatever turned the sandbox off."""
    from steward.safety.sandbox.bubblewrap import BubblewrapSandbox

    if not agent.config.sandbox.enabled:
        if not flag_given:
            typer.echo(
                "steward: warning: the sandbox is off ([sandbox] enabled = false in a config file); "
                "commands run directly on this machine.",
                err=True,
            )
        return
    sandbox = agent.sandbox()
    if isinstance(sandbox, BubblewrapSandbox):
        status = sandbox.checked()  # remembered per machine: a command starts without a sandbox
        if not status.ok:
            typer.echo(
                f"steward: warning: the sandbox does not work here ({status.reason}); bash will refuse "
                f"to run commands. Fix: {status.fix}. (`steward doctor` says more.)",
                err=True,
            )


def print_warnings(agent: Agent) -> None:
    paused = bool(CURRENT) and CURRENT[-1].status == "waiting"
    for warning in final_warnings(agent, paused=paused):
        typer.echo(f"steward: warning: {warning}", err=True)


def final_warnings(agent: Agent, *, paused: bool) -> list[str]:
    """What to tell the user once ``agent`` is done with; ``paused``: a run of it waits."""
    found = agent.warnings()
    if paused:
        # The model's own warnings (scripted replies never used) speak of a run that ended;
        # a waiting run may still use those replies once it is answered.
        own = set(agent.model.warnings())
        found = [warning for warning in found if warning not in own]
    return found


def check_model(agent: Agent, hint: str = "") -> None:
    """Before the run starts, a model problem is a configuration problem: say so, no traceback."""
    from steward.errors import ModelError

    try:
        agent.model.check()
    except ModelError as exc:
        raise fail(f"{exc}{hint}") from None


def run_async(
    make: Callable[[Agent], Awaitable[int]],
    config: Config,
    workspace: Path,
    *,
    prepare: Callable[[Agent], None] | None = None,
    **options: Any,
) -> int:
    """Open the agent the one way every entry point does (``Agent.open``), run ``make`` with it.

    ``prepare`` checks the agent before anything runs (its model, its sandbox). Ctrl-C and
    SIGTERM stop the run (its log says so; ``steward resume`` continues it).
    """
    from steward.agent import Agent

    terminated: list[bool] = []

    async def main() -> int:
        import signal

        task = asyncio.current_task()
        assert task is not None

        def terminate() -> None:  # SIGTERM (docker stop, systemd) stops a run like Ctrl-C
            terminated.append(True)
            task.cancel()

        with contextlib.suppress(NotImplementedError, RuntimeError):
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, terminate)
        agent = await Agent.open(config, workspace=workspace, **options)
        try:
            if prepare is not None:
                prepare(agent)
            result: int = await make(agent)
            if result != EXIT_INTERRUPTED:
                print_warnings(agent)
            return result
        finally:
            await agent.aclose()

    def stopped(how: str) -> str:
        run = CURRENT[0] if CURRENT else None
        if run is not None and run.status == "waiting" and run.pending is not None:
            # Stopped at its prompt: the run was not cancelled; it still waits, recorded.
            what = "approval" if run.pending.approval is not None else "answer"
            verb = "approve|deny" if what == "approval" else "answer"
            later = f"`steward {verb} {run.id}` gives it later"
            return f"\nsteward: {how}; the run still waits for your {what}: {later}."
        if run is None or not run.recorded:
            return f"\nsteward: {how} while starting; no run was started or changed."
        ws = run.state.workspace
        elsewhere = "" if ws == Path.cwd() else f" -w {shlex.quote(str(ws))}"
        resume = f"; `steward resume {run.id}{elsewhere}` continues it" if run.store_backed else ""
        return f"\nsteward: {how}; the run was cancelled{resume}."

    try:
        return asyncio.run(main())
    except KeyboardInterrupt:
        typer.echo(stopped("interrupted"), err=True)
        return EXIT_INTERRUPTED
    except asyncio.CancelledError:
        if not terminated:
            raise
        typer.echo(stopped("terminated"), err=True)
        return EXIT_TERMINATED
