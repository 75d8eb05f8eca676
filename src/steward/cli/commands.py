"""The command table of ``steward``: the commands that run agents, and the groups of the others.

Each command reads its flags into a configuration and hands over: ``driving`` runs an agent at
the terminal, ``continuing`` goes on with a recorded run; the groups (``runs``, ``jobs``, ...)
live in modules of their own. Exit codes and errors: ``steward.cli.app``.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from steward.cli.continuing import continue_run, persona_named
from steward.cli.doctor import DoctorCommand, TryEmbedderOpt, TryModelOpt
from steward.cli.driving import (
    check_model,
    drive,
    run_async,
    warn_about_sandbox,
)
from steward.cli.options import (
    EXIT_CODES_HELP,
    EXIT_INTERRUPTED,
    NO_MODEL,
    AllowOpt,
    AskOpt,
    BudgetTokens,
    BudgetUsd,
    DenyOpt,
    ForceOpt,
    JsonOpt,
    MaxSteps,
    ModelOpt,
    ModeOpt,
    NoSandbox,
    PersonaOpt,
    QuietOpt,
    ReadOnly,
    ResumeOpt,
    Workspace,
    budget_flags,
    budget_tokens_option,
    budget_usd_option,
    config_from_flags,
    fail,
)

if TYPE_CHECKING:
    from steward.agent import Agent

app = typer.Typer(
    name="steward",
    help="Steward: autonomous, tool-using agents that plan, act, verify and report.",
    epilog=EXIT_CODES_HELP,
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


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


@app.command(epilog=EXIT_CODES_HELP)
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
    budget_tokens: BudgetTokens = None,
    budget_usd: BudgetUsd = None,
    json_lines: Annotated[bool, typer.Option("--json", help="Print the event stream as NDJSON.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print only the final answer.")] = False,
    mode: ModeOpt = None,
    no_sandbox: NoSandbox = False,
    allow: AllowOpt = None,
    ask: AskOpt = None,
    deny: DenyOpt = None,
    read_only: ReadOnly = False,
    persona: PersonaOpt = None,
    schema_file: Annotated[
        Path | None,
        typer.Option(
            "--schema",
            help="A JSON Schema file: the answer must be JSON matching it (default: the persona's, if any).",
        ),
    ] = None,
) -> None:
    """Run an agent on GOAL in the workspace and show its progress live."""
    from steward.run import check_goal, check_workspace

    if resume_id is not None:
        if goal:
            raise fail("give either a GOAL or --resume RUN, not both")
        if schema_file is not None:
            raise fail("--schema is for a new run: a resumed run keeps the schema it was started with")
        continue_run(
            resume_id, None, workspace=workspace, model=model, json_lines=json_lines, quiet=quiet,
            force=False, no_sandbox=no_sandbox, mode=mode,
        )  # fmt: skip
    if not goal:
        raise fail('give a GOAL, e.g. steward run "fix the failing test", or --resume RUN')
    chosen = persona_named(persona, workspace)
    schema = _schema(schema_file)
    config = config_from_flags(
        workspace, model, max_steps, mode=mode, no_sandbox=no_sandbox, allow=allow, ask=ask, deny=deny,
        read_only=read_only, persona=chosen,
        budget=budget_flags(budget_tokens, budget_usd),
    )  # fmt: skip
    if not config.model:
        raise fail(NO_MODEL)
    check_goal(goal)  # before anything runs
    check_workspace(workspace)

    def prepare(agent: Agent) -> None:
        warn_about_sandbox(agent, flag_given=no_sandbox)
        check_model(agent)

    async def go(agent: Agent) -> int:
        if session is None:
            started = agent.start(goal, workspace=workspace, output_schema=schema)
        else:
            from steward.sessions import Session

            opened = await Session.open(agent, None if session == "new" else session)
            started = await opened.start(goal, workspace=workspace, output_schema=schema)
            if not json_lines and not quiet:
                typer.echo(f"steward: session {opened.id}", err=True)
        return await drive(started, json_lines=json_lines, quiet=quiet)

    raise typer.Exit(run_async(go, config, workspace, prepare=prepare, persona=chosen))


def _schema(path: Path | None) -> dict[str, Any] | None:
    """The JSON Schema of ``--schema``, read and checked before anything runs."""
    if path is None:
        return None
    from steward.answers import load_schema_file
    from steward.errors import ConfigError

    try:
        return load_schema_file(path)
    except ConfigError as exc:
        raise fail(f"--schema {exc}") from None


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
    continue_run(
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
    continue_run(
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
    continue_run(
        run_id, ("deny", reason), workspace=workspace, model=model, json_lines=json_lines, quiet=quiet
    )


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
        raise fail('the answer is empty; say what the agent should know, e.g. steward answer RUN "yes"')
    continue_run(
        run_id, ("answer", text), workspace=workspace, model=model, json_lines=json_lines, quiet=quiet
    )


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
    budget_tokens: Annotated[int | None, budget_tokens_option("each message's run")] = None,
    budget_usd: Annotated[float | None, budget_usd_option("each message's run")] = None,
) -> None:
    """Talk with an agent: each message is a run that sees the session's earlier turns."""
    from steward.cli.chat import chat

    budget = budget_flags(budget_tokens, budget_usd)
    config = config_from_flags(workspace, model, None, mode=mode, no_sandbox=no_sandbox, budget=budget)
    if not config.model:
        raise fail(NO_MODEL)
    which = None if new else (session or "last")

    def prepare(agent: Agent) -> None:
        warn_about_sandbox(agent, flag_given=no_sandbox)
        check_model(agent)

    async def go(agent: Agent) -> int:
        if which is None:
            from steward.sessions import Session

            opened = await Session.open(agent, None)
            return await chat(
                agent, workspace=workspace, session_id=opened.id, json_lines=json_lines, quiet=quiet
            )
        return await chat(agent, workspace=workspace, session_id=which, json_lines=json_lines, quiet=quiet)

    raise typer.Exit(run_async(go, config, workspace, prepare=prepare))


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
    from steward.safety.sandbox.bubblewrap import BubblewrapSandbox

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
        return await drive(agent.start(DEMO_GOAL, workspace=workspace), json_lines=json_lines, quiet=False)

    sandbox = status is None or status.ok
    code = run_async(go, config, workspace, model=demo_model(), sandbox=sandbox)
    if not json_lines:
        typer.echo(
            "\nThat was a scripted model driving real tools in "
            + (f"{workspace}." if keep else "a temporary copy of the sample project.")
            + "\nTo run Steward with a real model:\n"
            '  export OPENAI_API_KEY=...    then  steward run --model openai:gpt-4o-mini "GOAL"\n'
            '  export ANTHROPIC_API_KEY=... then  steward run --model anthropic:claude-sonnet-4-5 "GOAL"\n'
            '  a local Ollama server        then  steward run --model ollama:llama3.1 "GOAL"\n'
            "  llama.cpp, vLLM, LM Studio   then  OPENAI_BASE_URL=http://127.0.0.1:8080/v1 "
            'steward run --model openai:local "GOAL"\n'
            'or set STEWARD_MODEL, or model = "..." in steward.toml. '
            "`steward doctor --model` checks a model first.",
            err=True,
        )
    if not keep:
        import shutil

        shutil.rmtree(workspace, ignore_errors=True)
    raise typer.Exit(code)


@app.command(cls=DoctorCommand)
def doctor(
    workspace: Workspace = Path(), model: TryModelOpt = None, embedder: TryEmbedderOpt = False
) -> None:
    """Check this machine: sandbox, limits, configuration, model (key, server, script), store, memory.

    Without --model the model's server is only asked for its model list: nothing is billed.
    Without --embedder the embedder is sent nothing.
    """
    from steward.cli.doctor import check

    check(workspace, model or None, try_model=model is not None, try_embedder=embedder)


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


def _memory_app() -> typer.Typer:
    from steward.cli.memory import memory_app

    return memory_app


app.add_typer(_memory_app(), name="memory")


def _notes_app() -> typer.Typer:
    from steward.cli.notes import notes_app  # notes on files, jobs and runs (issue 23)

    return notes_app


app.add_typer(_notes_app(), name="notes")


def _mcp_app() -> typer.Typer:
    from steward.cli.mcp import mcp_app

    return mcp_app


app.add_typer(_mcp_app(), name="mcp")


def _personas_app() -> typer.Typer:
    from steward.cli.personas import personas_app

    return personas_app


app.add_typer(_personas_app(), name="personas")


def _jobs_app() -> typer.Typer:
    from steward.cli.jobs import jobs_app

    return jobs_app


app.add_typer(_jobs_app(), name="jobs")


def _queue_commands() -> None:
    from steward.cli.jobs import submit, worker

    app.command("submit")(submit)
    app.command("worker")(worker)


def _batch_command() -> None:
    from steward.cli.batch import batch  # task sets run K times, pass@k (issue 24)

    app.command("batch")(batch)


def _serve_command() -> None:
    from steward.cli.serve import serve

    app.command("serve")(serve)


_queue_commands()
_serve_command()
_batch_command()


@app.command()
def version() -> None:
    """Print Steward's version."""
    from steward import __version__

    typer.echo(__version__)
