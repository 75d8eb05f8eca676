"""``steward``: the command line.

Exit codes: 0 solved, 1 partial, stuck or failed, 2 usage or configuration error,
130 interrupted. A user's mistake is one line naming the fix, never a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from steward.cli._stdin import LineReader

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable

    from steward.agent import Agent
    from steward.config import Config
    from steward.events import Event
    from steward.run import Run
    from steward.run_state import Approval
    from steward.store.events import RunRow

app = typer.Typer(
    name="steward",
    help="Steward: autonomous, tool-using agents that plan, act, verify and report.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)

EXIT_OK, EXIT_NOT_SOLVED, EXIT_USAGE, EXIT_INTERRUPTED, EXIT_TERMINATED = 0, 1, 2, 130, 143
_STDIN = LineReader()
_CURRENT: list[Run] = []  # the run being driven: named when it is stopped, asked how it stands


def _show_version(value: bool) -> None:
    if value:
        from steward import __version__

        typer.echo(f"steward {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_show_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    """Steward: autonomous, tool-using agents that plan, act, verify and report."""


NO_MODEL = (
    "No model configured. Set STEWARD_MODEL=openai:gpt-4o-mini (or pass --model, or put "
    'model = "anthropic:claude-sonnet-4-5" in steward.toml), or run `steward demo` to see a scripted run.'
)

Workspace = Annotated[
    Path, typer.Option("--workspace", "-w", help="Directory the agent works in (default: current directory).")
]
ModelOpt = Annotated[
    str | None,
    typer.Option("--model", "-m", help="provider:model, e.g. openai:gpt-4o-mini, anthropic:..., ollama:..."),
]
MaxSteps = Annotated[int | None, typer.Option("--max-steps", min=1, help="Most model calls for this run.")]
ModeOpt = Annotated[
    str | None,
    typer.Option(
        "--mode",
        help="structured: risky calls wait for your approval; autonomous: they are approved automatically "
        "(the guard, deny rules, the sandbox and the step limit stay on).",
    ),
]
NoSandbox = Annotated[
    bool,
    typer.Option("--no-sandbox", help="Run commands without the bubblewrap sandbox (you accept the risk)."),
]
AllowOpt = Annotated[
    list[str] | None, typer.Option("--allow", help='Allow rule, e.g. "bash(pytest*)". Repeatable.')
]
AskOpt = Annotated[
    list[str] | None, typer.Option("--ask", help='Ask rule, e.g. "edit_file(src/**)". Repeatable.')
]
DenyOpt = Annotated[
    list[str] | None, typer.Option("--deny", help='Deny rule, e.g. "bash(rm *)". Repeatable.')
]
ReadOnly = Annotated[
    bool, typer.Option("--read-only", help="Turn every write tool off; bash sees the workspace read-only.")
]


def _fail(message: str, code: int = EXIT_USAGE) -> typer.Exit:
    typer.echo(f"steward: {message}", err=True)
    return typer.Exit(code)


def _load(
    workspace: Path,
    model: str | None,
    max_steps: int | None,
    *,
    mode: str | None = None,
    no_sandbox: bool = False,
    allow: list[str] | None = None,
    ask: list[str] | None = None,
    deny: list[str] | None = None,
    read_only: bool = False,
) -> Config:
    from steward.config import load_config

    overrides: dict[str, Any] = {}
    if model:
        overrides["model"] = model
    if max_steps:
        overrides["limits"] = {"max_steps": max_steps}
    policy: dict[str, Any] = {
        key: value for key, value in (("allow", allow), ("ask", ask), ("deny", deny)) if value
    }
    if mode:
        policy["mode"] = mode
    if read_only:
        policy["write"] = False
    if policy:
        overrides["policy"] = policy
    if no_sandbox:
        overrides["sandbox"] = {"enabled": False}
        typer.echo("steward: warning: --no-sandbox: commands run directly on this machine.", err=True)
    return load_config(workspace, overrides=overrides)


def _exit_code(status: str, end_status: str | None) -> int:
    return EXIT_OK if status == "done" and end_status == "solved" else EXIT_NOT_SOLVED


async def _drive(
    run: Run, *, json_lines: bool, quiet: bool, first: AsyncIterator[Event] | None = None
) -> int:
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

    _CURRENT.clear()
    _CURRENT.append(run)
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
        answer = await _ask(pending.question, json_lines=json_lines)
        if answer is None:
            _closed_stdin()
            _still_waiting(run)
            return EXIT_NOT_SOLVED
        events = run.answer_stream(answer)
    return _exit_code(run.status, run.state.end_status)


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


async def _ask(question: str, *, json_lines: bool, prompt: str = "answer> ") -> str | None:
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
    typer.echo(
        f"? approve {approval.tool} {_short_json(approval.arguments)}\n  because {approval.reason}\n{said}"
        f"  [y] once{always}   [n] deny (optionally: n <reason>)   "
        f"default in {max(0, int(approval.deadline - time.time()))} s: {approval.default}"
        + ("" if approval.suggestion else f"\n  ({_no_always(approval)})"),
        err=True,
    )
    for _ in range(20):  # a few unclear answers, not forever
        try:
            async with asyncio.timeout(max(0.0, approval.deadline - time.time())):
                line = await _ask("", json_lines=json_lines, prompt="approve> ")
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
                typer.echo(f"  {_no_always(approval)}; answer y or n", err=True)
            case "n" | "no" | "deny":
                return run.deny_stream(reason=rest.strip())
            case _:
                typer.echo(
                    "  answer y, n (with an optional reason)" + (", or a" if approval.suggestion else ""),
                    err=True,
                )
    return run.deny_stream(reason="no clear answer")


def _no_always(approval: Approval) -> str:
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


def _warn_about_sandbox(agent: Agent, *, flag_given: bool) -> None:
    """Say so whenever commands will not run sandboxed, whatever turned the sandbox off."""
    from steward.safety.sandbox import BubblewrapSandbox

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


def _warnings(agent: Agent) -> None:
    paused = bool(_CURRENT) and _CURRENT[-1].status == "waiting"
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


ResumeOpt = Annotated[
    str | None,
    typer.Option(
        "--resume", help="Continue recorded run RUN (an id, a prefix, or 'last') instead of a new goal."
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the event stream as NDJSON.")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="Print only the final answer.")]
ForceOpt = Annotated[
    bool, typer.Option("--force", help="Resume even if the run's recorded process may still be alive.")
]


@app.command()
def run(
    goal: Annotated[str | None, typer.Argument(help="What the agent should achieve.", metavar="GOAL")] = None,
    resume_id: ResumeOpt = None,
    session: Annotated[
        str | None,
        typer.Option("--session", "-s", help="Add this run to a session (id, prefix, 'last' or 'new')."),
    ] = None,
    workspace: Workspace = Path(),
    model: ModelOpt = None,
    max_steps: MaxSteps = None,
    json_lines: Annotated[bool, typer.Option("--json", help="Print the event stream as NDJSON.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print only the final answer.")] = False,
    mode: ModeOpt = None,
    no_sandbox: NoSandbox = False,
    allow: AllowOpt = None,
    ask: AskOpt = None,
    deny: DenyOpt = None,
    read_only: ReadOnly = False,
) -> None:
    """Run an agent on GOAL in the workspace and show its progress live."""
    from steward.run import check_goal, check_workspace

    if resume_id is not None:
        if goal:
            raise _fail("give either a GOAL or --resume RUN, not both")
        _continue(
            resume_id, None, workspace=workspace, model=model, json_lines=json_lines, quiet=quiet,
            force=False, no_sandbox=no_sandbox, mode=mode,
        )  # fmt: skip
    if not goal:
        raise _fail('give a GOAL, e.g. steward run "fix the failing test", or --resume RUN')
    config = _load(
        workspace, model, max_steps, mode=mode, no_sandbox=no_sandbox, allow=allow, ask=ask, deny=deny,
        read_only=read_only,
    )  # fmt: skip
    if not config.model:
        raise _fail(NO_MODEL)
    check_goal(goal)  # before anything runs
    check_workspace(workspace)

    def prepare(agent: Agent) -> None:
        _warn_about_sandbox(agent, flag_given=no_sandbox)
        _check_model(agent)

    async def go(agent: Agent) -> int:
        if session is None:
            started = agent.start(goal, workspace=workspace)
        else:
            from steward.memory.session import Session

            opened = await Session.open(agent, None if session == "new" else session)
            started = await opened.start(goal, workspace=workspace)
            if not json_lines and not quiet:
                typer.echo(f"steward: session {opened.id}", err=True)
        return await _drive(started, json_lines=json_lines, quiet=quiet)

    raise typer.Exit(_run_async(go, config, workspace, prepare=prepare))


def _check_model(agent: Agent, hint: str = "") -> None:
    """Before the run starts, a model problem is a configuration problem: say so, no traceback."""
    from steward.errors import ModelError

    try:
        agent.model.check()
    except ModelError as exc:
        raise _fail(f"{exc}{hint}") from None


@app.command()
def resume(
    run_id: Annotated[str, typer.Argument(help="The run: its id, a unique prefix, or 'last'.")] = "last",
    workspace: Workspace = Path(),
    model: ModelOpt = None,
    json_lines: JsonOpt = False,
    quiet: QuietOpt = False,
    force: ForceOpt = False,
    no_sandbox: NoSandbox = False,
    mode: ModeOpt = None,
) -> None:
    """Continue a recorded run where it stopped: crashed, interrupted, failed or waiting."""
    _continue(
        run_id, None, workspace=workspace, model=model, json_lines=json_lines, quiet=quiet, force=force,
        no_sandbox=no_sandbox, mode=mode,
    )  # fmt: skip


@app.command()
def approve(
    run_id: Annotated[str, typer.Argument(help="The waiting run: its id, a unique prefix, or 'last'.")],
    always: Annotated[
        bool, typer.Option("--always", help="Also allow calls like this from now on (saved in steward.toml).")
    ] = False,
    workspace: Workspace = Path(),
    model: ModelOpt = None,
    json_lines: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Approve the call a waiting run asks about, then let the run go on."""
    _continue(
        run_id, ("approve", "always" if always else ""), workspace=workspace, model=model,
        json_lines=json_lines, quiet=quiet,
    )  # fmt: skip


@app.command()
def deny(
    run_id: Annotated[str, typer.Argument(help="The waiting run: its id, a unique prefix, or 'last'.")],
    reason: Annotated[str, typer.Option("--reason", help="Why; the agent is told.")] = "",
    workspace: Workspace = Path(),
    model: ModelOpt = None,
    json_lines: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Deny the call a waiting run asks about; the agent is told and goes on another way."""
    _continue(run_id, ("deny", reason), workspace=workspace, model=model, json_lines=json_lines, quiet=quiet)


@app.command()
def answer(
    run_id: Annotated[str, typer.Argument(help="The waiting run: its id, a unique prefix, or 'last'.")],
    text: Annotated[str, typer.Argument(help="Your answer to the run's question.", metavar="ANSWER")],
    workspace: Workspace = Path(),
    model: ModelOpt = None,
    json_lines: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Answer the question a waiting run asked, then let the run go on."""
    if not text.strip():
        raise _fail('the answer is empty; say what the agent should know, e.g. steward answer RUN "yes"')
    _continue(run_id, ("answer", text), workspace=workspace, model=model, json_lines=json_lines, quiet=quiet)


def _continue(
    run_id: str,
    action: tuple[str, str] | None,
    *,
    workspace: Path,
    model: str | None,
    json_lines: bool,
    quiet: bool,
    force: bool = False,
    no_sandbox: bool = False,
    mode: str | None = None,
) -> None:
    """Rebuild a recorded run from the store, apply ``action`` if any, and drive it on."""
    config = _load(workspace, model, None, mode=mode, no_sandbox=no_sandbox)

    async def go(agent: Agent) -> int:
        from steward.run import owner_alive

        assert agent.store is not None
        row = await _find_run(agent, run_id, waiting=action is not None)
        if action is not None and row.status != "waiting":
            hint = f"; `steward resume {row.id}` continues it" if row.status != "done" else ""
            if row.status == "running" and row.owner and owner_alive(row.owner):
                hint = f" (process {row.owner} is running it)"
            raise _fail(f"run {row.id} is {row.end_status or row.status}, not waiting{hint}", EXIT_NOT_SOLVED)
        if not agent.model_spec:
            agent.model_spec = row.model  # the model the run was started with
        _check_model(agent, f" (run {row.id} used {row.model or 'an unknown model'}; pass --model)")
        _warn_about_sandbox(agent, flag_given=no_sandbox)  # only once there is a run to go on with
        run = await agent.resume(row.id, force=force)
        first = _apply(run, action)
        if not json_lines and first is None and run.status == "running":
            typer.echo(f"steward: resuming run {run.id} at step {run.state.counters.step}", err=True)
        return await _drive(run, json_lines=json_lines, quiet=quiet, first=first)

    raise typer.Exit(_run_async(go, config, workspace))


async def _find_run(agent: Agent, run_id: str, *, waiting: bool) -> RunRow:
    assert agent.store is not None
    # "last": the newest run that waits (to answer or approve it), or that did not finish.
    last = ("waiting",) if waiting else ("running", "waiting", "cancelled", "failed")
    return await agent.store.find_run(run_id, last=last)


def _apply(run: Run, action: tuple[str, str] | None) -> AsyncIterator[Event] | None:
    """The stream that starts with the human's decision given on the command line."""
    if action is None:
        return None
    kind, value = action
    pending = run.pending
    if run.status != "waiting" or pending is None:
        raise _fail(f"run {run.id} is {run.status}, not waiting; `steward runs show {run.id}` says more", 1)
    if kind == "answer":
        if pending.approval is not None:
            raise _fail(
                f"run {run.id} waits for an approval, not an answer: steward approve/deny {run.id}", 1
            )
        return run.answer_stream(value)
    if pending.approval is None:
        raise _fail(f'run {run.id} asks a question, not for approval: steward answer {run.id} "ANSWER"', 1)
    if kind == "approve":
        if value == "always" and not pending.approval.suggestion:
            typer.echo(f"steward: {_no_always(pending.approval)}; approving it once.", err=True)
        return run.approve_stream(remember=value == "always")
    return run.deny_stream(reason=value)


@app.command("chat")
def chat_command(
    workspace: Workspace = Path(),
    model: ModelOpt = None,
    session: Annotated[
        str | None,
        typer.Option("--session", "-s", help="Session to continue (id, prefix or 'last'); default: last."),
    ] = None,
    new: Annotated[bool, typer.Option("--new", help="Start a new session.")] = False,
    json_lines: JsonOpt = False,
    quiet: QuietOpt = False,
    mode: ModeOpt = None,
    no_sandbox: NoSandbox = False,
) -> None:
    """Talk with an agent: each message is a run that sees the session's earlier turns."""
    from steward.cli.chat import chat

    config = _load(workspace, model, None, mode=mode, no_sandbox=no_sandbox)
    if not config.model:
        raise _fail(NO_MODEL)
    which = None if new else (session or "last")

    def prepare(agent: Agent) -> None:
        _warn_about_sandbox(agent, flag_given=no_sandbox)
        _check_model(agent)

    async def go(agent: Agent) -> int:
        if which is None:
            from steward.memory.session import Session

            opened = await Session.open(agent, None)
            return await chat(
                agent, workspace=workspace, session_id=opened.id, json_lines=json_lines, quiet=quiet
            )
        return await chat(agent, workspace=workspace, session_id=which, json_lines=json_lines, quiet=quiet)

    raise typer.Exit(_run_async(go, config, workspace, prepare=prepare))


def _run_async(
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
                _warnings(agent)
            return result
        finally:
            await agent.aclose()

    def stopped(how: str) -> str:
        resume = f"; `steward resume {_CURRENT[0].id}` continues it" if _CURRENT else ""
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


@app.command()
def stdio(
    workspace: Workspace = Path(),
    model: ModelOpt = None,
    max_steps: MaxSteps = None,
) -> None:
    """Serve NDJSON: one request per line on stdin, events as NDJSON on stdout.

    \b
    Requests, one JSON object per line:
      {"prompt": "...", "run_id": "job-1"}   start a run (only "prompt" is
                                             required; also "workspace",
                                             "model", "max_steps")
      {"run_id": "job-1", "answer": "..."}   answer the question it waits on
      {"run_id": "job-1", "approve": true}   approve the call it waits on
                                             ("remember": true: from now on)
      {"run_id": "job-1", "deny": "why"}     deny that call; the agent is told
      {"run_id": "job-1", "resume": true}    continue a recorded run

    A recorded run goes on with the model it was started with; answer,
    approve, deny and resume requests may name another with "model". Every
    event carries its run_id; a request that cannot be served gets an error
    event and the server goes on. Runs until stdin closes.
    """
    from steward.cli.stdio import serve

    try:
        asyncio.run(serve(sys.stdin, sys.stdout, workspace=workspace, model=model, max_steps=max_steps))
    except KeyboardInterrupt:
        raise typer.Exit(EXIT_INTERRUPTED) from None


@app.command()
def demo(
    json_lines: Annotated[bool, typer.Option("--json", help="Print the event stream as NDJSON.")] = False,
    keep: Annotated[bool, typer.Option(help="Keep the demo workspace and print where it is.")] = True,
) -> None:
    """Watch a scripted agent fix a failing test in a sample project (real tools, no model key)."""
    from steward.agent import Agent
    from steward.config import Config
    from steward.demo import DEMO_GOAL, demo_model, prepare_workspace
    from steward.safety.sandbox import BubblewrapSandbox

    workspace = prepare_workspace()
    config = Config()
    probe = Agent(demo_model(), config=config).sandbox()
    status = probe.probe() if isinstance(probe, BubblewrapSandbox) else None
    if status is not None and not status.ok:
        # The demo's own commands are known and harmless, so it may go on, but never silently.
        typer.echo(
            f"steward: the sandbox does not work here ({status.reason}); the demo runs its two test commands "
            f"without it. Fix: {status.fix}",
            err=True,
        )

    async def go(agent: Agent) -> int:
        return await _drive(agent.start(DEMO_GOAL, workspace=workspace), json_lines=json_lines, quiet=False)

    sandbox = status is None or status.ok
    code = _run_async(go, config, workspace, model=demo_model(), sandbox=sandbox)
    if not json_lines:
        typer.echo(
            "\nThat was a scripted model driving real tools in "
            + (f"{workspace}." if keep else "a temporary copy of the sample project.")
            + "\nTo run Steward with a real model:\n"
            '  export OPENAI_API_KEY=...    then  steward run --model openai:gpt-4o-mini "GOAL"\n'
            '  export ANTHROPIC_API_KEY=... then  steward run --model anthropic:claude-sonnet-4-5 "GOAL"\n'
            '  a local Ollama server        then  steward run --model ollama:llama3.1 "GOAL"\n'
            'or set STEWARD_MODEL, or model = "..." in steward.toml.',
            err=True,
        )
    if not keep:
        import shutil

        shutil.rmtree(workspace, ignore_errors=True)
    raise typer.Exit(code)


@app.command()
def doctor(workspace: Workspace = Path()) -> None:
    """Check this machine: the sandbox, its limits, the configuration and the model."""
    import platform

    from steward import __version__
    from steward.safety.sandbox import sandbox_from_config

    config = _load(workspace, None, None)
    typer.echo(f"steward {__version__} on Python {platform.python_version()} ({sys.executable})")
    if not config.sandbox.enabled:
        typer.echo("sandbox: turned off in the configuration ([sandbox] enabled = false)")
        status_ok = True
    else:
        from steward.safety.sandbox_check import cache_path

        status = sandbox_from_config(config.sandbox).probe()  # always a real start: refreshes the cache
        typer.echo(status.render())
        typer.echo(f"  checked now; other commands reuse this outcome ({cache_path()})")
        status_ok = status.ok
    policy = config.policy
    typer.echo(
        f"policy: mode {policy.mode}, writes {'on' if policy.write else 'off'}, "
        f"{len(policy.allow)} allow / {len(policy.ask)} ask / {len(policy.deny)} deny rules, "
        f"approvals wait {policy.approval_timeout_s:g} s then {policy.on_timeout}"
    )
    _doctor_layers(workspace, config)
    typer.echo(f"model: {config.model or 'not configured (set STEWARD_MODEL or --model)'}")
    _doctor_context(workspace, config)
    raise typer.Exit(EXIT_OK if status_ok else EXIT_NOT_SOLVED)


def _doctor_layers(workspace: Path, config: Config) -> None:
    """Which safety layers are on here, besides the sandbox itself."""
    from steward.safety.checkpointing import settings_from_config
    from steward.safety.checkpoints import default_state_dir
    from steward.safety.policy import Policy
    from steward.safety.sandbox import mask_plan
    from steward.safety.scan import scanner_for
    from steward.tools._beneath import openat2_available

    typer.echo("guard: on (every command parsed and judged; blocks what is known to be dangerous)")
    p = config.policy
    policy = Policy.from_lists(allow=p.allow, ask=p.ask, deny=p.deny, mode=p.mode, write=p.write)
    if config.sandbox.enabled:
        plan = mask_plan(config.sandbox, policy)
        masked = ", ".join(sorted(plan.masked)) or "none"
        typer.echo(f"program masks: {masked} (programs deny rules forbid with any arguments)")
        for warning in plan.warnings:
            typer.echo(f"  warning: {warning}")
        domains = ", ".join(config.sandbox.allowed_domains) or "none ([sandbox] allowed_domains)"
        typer.echo(
            "network: every command in its own network namespace; a call granted the network reaches "
            f"only these domains through the egress proxy: {domains}; host loopback and private "
            "addresses never"
        )
    checkpoints = settings_from_config(config)
    if checkpoints.enabled:
        where = checkpoints.state_dir or default_state_dir()
        from steward.safety.checkpoints import _find_git

        git = os.access(_find_git(), os.X_OK)
        typer.echo(
            f"checkpoints: on, before every call that can change files (shadow repositories in {where}; "
            f"untracked files over {config.checkpoints.max_file_mb:g} MB left out)"
            + ("" if git else "; NOT WORKING: git is not installed (apt-get install git)")
        )
    else:
        typer.echo("checkpoints: off ([checkpoints] enabled = false): a damaged workspace cannot be rewound")
    typer.echo(
        "change detection: on (repository metadata and protected files compared after every such call)"
    )
    secrets = scanner_for(workspace.resolve(), tuple(config.sandbox.secret_files)).scan().secrets
    shown = ", ".join(secrets[:5]) + (f" and {len(secrets) - 5} more" if len(secrets) > 5 else "")
    noun = "secret file" if len(secrets) == 1 else "secret files"
    found = f"{len(secrets)} {noun} here" + (f" ({shown})" if secrets else "")
    typer.echo(
        f"secrets: {found}: masked in the sandbox, refused by the file tools unless a rule allows "
        "them, their values redacted from tool output"
    )
    typer.echo(
        "file tools: paths opened beneath the workspace in one step "
        + (
            "(openat2 RESOLVE_BENEATH)"
            if openat2_available()
            else "(a component walk refusing links that lead out)"
        )
    )
    limit = config.limits.run_timeout_s
    typer.echo(f"run time limit: {f'{limit:g} s' if limit else 'none ([limits] run_timeout_s)'}")


def _doctor_context(workspace: Path, config: Config) -> None:
    """What the agent will be told about this workspace: rules, skills, MCP servers."""
    from steward.rules import find_skills

    root = workspace.resolve()
    agents_md = (root / "AGENTS.md").is_file()
    typer.echo(f"rules: {'AGENTS.md found' if agents_md else 'no AGENTS.md'}"
               f"{'' if config.rules.agents_md else ' (turned off: [rules] agents_md = false)'}")  # fmt: skip
    scan = find_skills(root, config.rules)
    typer.echo(f"skills: {len(scan.skills)} found in {', '.join(config.rules.skill_dirs) or '(no folders)'}")
    for warning in scan.warnings:
        typer.echo(f"  warning: {warning}")
    servers = config.mcp_servers
    enabled = [n for n, c in servers.items() if c.enabled]
    if servers:
        typer.echo(f"mcp: {len(enabled)} of {len(servers)} servers enabled ({', '.join(enabled)}); "
                   "`steward mcp list` starts them and shows their tools")  # fmt: skip
        _doctor_mcp_problem(config)
    else:
        typer.echo("mcp: no servers configured ([mcp_servers.NAME] in steward.toml)")


def _doctor_mcp_problem(config: Config) -> None:
    from steward.errors import ConfigError
    from steward.mcp import check_servers

    try:
        check_servers(config.mcp_servers)
    except ConfigError as exc:
        typer.echo(f"  problem: {exc}")


def _checkpoint_commands() -> None:
    from steward.cli.checkpoints import checkpoints_command, rewind_command

    app.command("checkpoints")(checkpoints_command)
    app.command("rewind")(rewind_command)


_checkpoint_commands()


def _runs_app() -> typer.Typer:
    from steward.cli.runs import runs_app

    return runs_app


app.add_typer(_runs_app(), name="runs")


def _sessions_app() -> typer.Typer:
    from steward.cli.sessions import sessions_app

    return sessions_app


app.add_typer(_sessions_app(), name="sessions")


def _mcp_app() -> typer.Typer:
    from steward.cli.mcp import mcp_app

    return mcp_app


app.add_typer(_mcp_app(), name="mcp")


@app.command()
def version() -> None:
    """Print Steward's version."""
    from steward import __version__

    typer.echo(__version__)


def main() -> None:
    """Entry point: turns Steward's own errors into one line and a usage exit code."""
    import atexit
    import gc

    from steward.errors import ConfigError, ModelError, StewardError

    # The interpreter's last garbage collection walks every object the imported libraries made
    # (~60 ms of a 400 ms command) to free memory the process gives back anyway. Registered
    # first, this runs after every other exit handler; what needs closing is closed by then.
    atexit.register(gc.freeze)
    try:
        app()
    except ConfigError as exc:
        typer.echo(f"steward: {exc}", err=True)
        sys.exit(EXIT_USAGE)
    except ModelError as exc:
        typer.echo(f"steward: {exc}", err=True)
        sys.exit(EXIT_NOT_SOLVED)
    except StewardError as exc:
        typer.echo(f"steward: {exc}", err=True)
        sys.exit(EXIT_NOT_SOLVED)
    except Exception as exc:
        if os.environ.get("STEWARD_DEBUG"):
            raise
        typer.echo(
            f"steward: internal error: {type(exc).__name__}: {exc}. This is a bug in Steward; "
            "run again with STEWARD_DEBUG=1 to see the traceback, and please report it.",
            err=True,
        )
        sys.exit(EXIT_NOT_SOLVED)
