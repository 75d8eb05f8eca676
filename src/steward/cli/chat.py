"""``steward chat``: an interactive session; each message is a run that sees the earlier turns.

Input: a line is a message; end a line with a backslash to continue it on the next line, or
paste a block between two lines of three double quotes. Commands: ``/new`` (close this
session with a summary and start the next from it), ``/sessions``, ``/help``, ``/quit``, and
the MCP commands ``/mcp``, ``/resources``, ``/resource``, ``/prompts``, ``/prompt``.
"""

from __future__ import annotations

import shlex
import time
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from steward.cli.mcp import CHAT_COMMANDS, CHAT_HELP, chat_command

if TYPE_CHECKING:
    from steward.agent import Agent
    from steward.session import Session

HELP = (
    "Type a message and press Enter. Multi-line: end a line with \\ to continue, or paste between "
    'lines of """.\n/new      close this session with a summary and start a new one from it\n'
    "/sessions list recent sessions\n/quit     leave (also Ctrl-D)\n"
)
MAX_LINES = 10_000  # one message's lines; a paste larger than this is cut


async def read_message(prompt: str = "you> ") -> str | None:
    """One message from the user (possibly several lines); None at end of input."""
    from steward.cli.app import _ask

    first = await _ask("", json_lines=False, prompt=prompt)
    if first is None:
        return None
    if first.strip() == '"""':
        lines: list[str] = []
        for _ in range(MAX_LINES):
            line = await _ask("", json_lines=False, prompt="... ")
            if line is None:  # the input ended inside the block: nothing is sent half-pasted
                typer.echo(
                    'steward: the input ended before the closing """; the block was not sent', err=True
                )
                return None
            if line.strip() == '"""':
                break
            lines.append(line)
        return "\n".join(lines)
    lines = [first]
    for _ in range(MAX_LINES):
        if not lines[-1].endswith("\\"):
            break
        lines[-1] = lines[-1][:-1]
        more = await _ask("", json_lines=False, prompt="... ")
        if more is None:
            break
        lines.append(more)
    return "\n".join(lines)


async def chat(
    agent: Agent, *, workspace: Path, session_id: str | None, json_lines: bool, quiet: bool
) -> int:
    from steward.cli.app import _drive
    from steward.session import Session

    session = await Session.open(agent, None if session_id == "new" else session_id)
    turns = len(await session.turns())
    typer.echo(
        f"steward chat · session {session.id} ({turns} earlier turn{'s' if turns != 1 else ''}) · "
        "/help for commands, /quit to leave",
        err=True,
    )
    code = 0
    attached = ""  # a resource read with /resource, sent with the next message
    for _ in range(1_000_000):  # messages of one chat; ends at /quit or end of input
        text = await read_message()
        if text is None:
            break
        message = text.strip()
        if not message:
            continue
        if message.split()[0].lower() in CHAT_COMMANDS:
            # /resource attaches to the next message; /prompt sends the prompt as this one.
            send, attached = await _mcp_command(agent, message, workspace, attached)
            if not send:
                continue
            message = send
        elif message.startswith("/"):
            if message.split()[0].lower() in ("/quit", "/exit", "/q"):
                break
            session = await _command(agent, session, message.split()[0].lower())
            continue
        if attached:
            message, attached = f"{attached}\n\n{message}", ""
        run = await session.start(message, workspace=workspace)
        code = await _drive(run, json_lines=json_lines, quiet=quiet)
    return code


async def _command(agent: Agent, session: Session, command: str) -> Session:
    """A chat command other than /quit and the MCP ones; returns the session to go on with."""
    match command:
        case "/help":
            typer.echo(HELP + CHAT_HELP, err=True)
        case "/sessions":
            await _list_sessions(agent, current=session.id)
        case "/new":
            closed = session.id
            session = await session.new()
            summary = session.row.previous_id and await _summary_of(agent, closed)
            typer.echo(f"steward: session {closed} closed; new session {session.id}", err=True)
            if summary:
                typer.echo(f"summary carried over: {summary}", err=True)
        case other:
            typer.echo(f"steward: unknown command {other}; /help lists them", err=True)
    return session


async def _mcp_command(agent: Agent, message: str, workspace: Path, attached: str) -> tuple[str, str]:
    """Run an MCP command of chat; return (message to send now or "", attachment for the next)."""
    from steward.errors import StewardError

    try:
        words = shlex.split(message)
    except ValueError as exc:
        typer.echo(f"steward: cannot read the command ({exc}); check its quotes", err=True)
        return "", attached
    try:
        shown, send = await chat_command(agent.mcp_toolset(), words, workspace)
    except StewardError as exc:
        shown, send = f"steward: {exc}", ""
    typer.echo(shown, err=True)
    if words[0].lower() == "/resource":  # several resources add up for the next message
        return "", "\n\n".join(part for part in (attached, send) if part)
    return send, attached


async def _summary_of(agent: Agent, session_id: str) -> str:
    from steward.store.sessions import SessionStore

    assert agent.store is not None
    return (await SessionStore(agent.store.engine).get(session_id)).summary


async def _list_sessions(agent: Agent, *, current: str) -> None:
    from steward.store.sessions import SessionStore

    assert agent.store is not None
    sessions = SessionStore(agent.store.engine)
    for row in await sessions.list(limit=20):
        turns = len(await sessions.turns(row.id))
        mark = "*" if row.id == current else " "
        state = "open" if row.is_open else "closed"
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(row.updated_at))
        typer.echo(f"{mark} {row.id}  {when}  {state:<6} {turns:>3} turns  {row.title}", err=True)
