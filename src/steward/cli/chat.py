"""``steward chat``: an interactive session; each message is a run that sees the earlier turns.

Input: a line is a message; end a line with a backslash to continue it on the next line, or
paste a block between two lines of three double quotes. Commands: ``/new`` (close this
session with a summary and start the next from it), ``/sessions``, ``/help``, ``/quit``, and
the MCP commands ``/mcp``, ``/resources``, ``/resource``, ``/prompts``, ``/prompt``.

Ctrl-C during a turn cancels that turn (its run is recorded as cancelled) and comes back to
the prompt; at the prompt, Ctrl-C or Ctrl-D leaves. A cancelled or failed turn has no
answer: later turns are told it was cancelled or failed, not its closing message.
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from steward.cli.mcp import CHAT_COMMANDS, CHAT_HELP, chat_command
from steward.cli.options import EXIT_ANSWERED, EXIT_NOT_SOLVED, EXIT_OK

if TYPE_CHECKING:
    from steward.agent import Agent
    from steward.run import Run
    from steward.sessions import Session

HELP = (
    "Type a message and press Enter. Multi-line: end a line with \\ to continue, or paste between "
    'lines of """.\n/new      close this session with a summary and start a new one from it\n'
    "/sessions list recent sessions\n/quit     leave (also Ctrl-D, or Ctrl-C at the prompt)\n"
    "Ctrl-C during a turn cancels that turn and comes back here.\n"
)
MAX_LINES = 10_000  # one message's lines; a paste larger than this is cut


async def read_message(prompt: str = "you> ") -> str | None:
    """One message from the user (possibly several lines); None at end of input."""
    from steward.cli.driving import ask_user

    first = await ask_user("", json_lines=False, prompt=prompt)
    if first is None:
        return None
    if first.strip() == '"""':
        lines: list[str] = []
        for _ in range(MAX_LINES):
            line = await ask_user("", json_lines=False, prompt="... ")
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
        more = await ask_user("", json_lines=False, prompt="... ")
        if more is None:
            break
        lines.append(more)
    return "\n".join(lines)


async def chat(
    agent: Agent, *, workspace: Path, session_id: str | None, json_lines: bool, quiet: bool
) -> int:
    from steward.sessions import Session

    session = await Session.open(agent, None if session_id == "new" else session_id)
    turns = len(await session.turns())
    conversation = _Conversation(agent, session, workspace=workspace, json_lines=json_lines, quiet=quiet)
    with CtrlC() as ctrl_c:  # before the banner: once it is shown, Ctrl-C is the chat's
        typer.echo(
            f"steward chat · session {session.id} ({turns} earlier turn{'s' if turns != 1 else ''}) · "
            "/help for commands, /quit to leave",
            err=True,
        )
        try:
            await conversation.go_on(ctrl_c)
        except asyncio.CancelledError:
            if not ctrl_c.leaving:
                raise  # stopped from outside (SIGTERM): the command line says how it ended
            ctrl_c.forget()
            typer.echo("", err=True)  # the ^C the terminal echoed ends the line
    return conversation.code


class CtrlC:
    """Ctrl-C in a chat: the first cancels the turn in progress; at the prompt it ends the chat.

    A second Ctrl-C while the turn is still stopping ends the chat too. Where signals cannot be
    handled (not the main thread), Ctrl-C ends everything, as it does outside a chat.
    """

    def __init__(self) -> None:
        self.chat: asyncio.Task[object] | None = None
        self.turn: asyncio.Task[int] | None = None
        self.leaving = False

    def __enter__(self) -> CtrlC:
        self.chat = asyncio.current_task()
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            asyncio.get_running_loop().add_signal_handler(signal.SIGINT, self._pressed)
        return self

    def __exit__(self, *_exc: object) -> None:
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            asyncio.get_running_loop().remove_signal_handler(signal.SIGINT)

    def _pressed(self) -> None:
        turn = self.turn
        if turn is not None and not turn.done() and not turn.cancelling():
            turn.cancel()
            return
        self.leaving = True
        if self.chat is not None:
            self.chat.cancel()

    def stopping_chat(self) -> bool:
        """Whether the chat itself is being cancelled (not just its turn)."""
        return self.chat is not None and self.chat.cancelling() > 0

    def forget(self) -> None:
        """The chat's cancellation was Ctrl-C asking to leave: it ends normally."""
        if self.chat is not None:
            self.chat.uncancel()


class _Conversation:
    """The messages of one chat and what they lead to; ``code``: the last turn's exit code (0 for
    an answer as for a solved turn)."""

    def __init__(
        self, agent: Agent, session: Session, *, workspace: Path, json_lines: bool, quiet: bool
    ) -> None:
        self.agent = agent
        self.session = session
        self.workspace = workspace
        self.json_lines = json_lines
        self.quiet = quiet
        self.code = 0
        self.attached = ""  # a resource read with /resource, sent with the next message
        self.spent = ""  # the session whose budget a turn found spent: its next messages start no run

    async def go_on(self, ctrl_c: CtrlC) -> None:
        for _ in range(1_000_000):  # messages of one chat; ends at /quit or end of input
            text = await read_message()
            if text is None:
                return
            message = await self._message(text.strip())
            if message is None:
                return
            if message and self.spent == self.session.id:
                _say_session_spent(self.session.id)
                self.code = EXIT_NOT_SOLVED
            elif message:
                code = await self._turn(message, ctrl_c)
                # A conversation's turns are answers: only a turn that failed or stopped short
                # makes the chat's exit code say so.
                self.code = EXIT_OK if code == EXIT_ANSWERED else code

    async def _message(self, message: str) -> str | None:
        """What to send for one input ("" nothing, after a command); None to leave."""
        if not message:
            return ""
        word = message.split(maxsplit=1)[0].lower()
        if word in CHAT_COMMANDS:
            # /resource attaches to the next message; /prompt sends the prompt as this one.
            send, self.attached = await _mcp_command(self.agent, message, self.workspace, self.attached)
            if not send:
                return ""
            message = send
        elif message.startswith("/"):
            if word in ("/quit", "/exit", "/q"):
                return None
            self.session = await _command(self.agent, self.session, word)
            return ""
        if self.attached:
            message, self.attached = f"{self.attached}\n\n{message}", ""
        return message

    async def _turn(self, message: str, ctrl_c: CtrlC) -> int:
        """One run of the session, which Ctrl-C cancels without ending the chat."""
        from steward.budget.guard import stopped_by_session_budget
        from steward.cli.driving import drive
        from steward.cli.options import EXIT_INTERRUPTED

        run = await self.session.start(message, workspace=self.workspace)
        ctrl_c.turn = turn = asyncio.create_task(drive(run, json_lines=self.json_lines, quiet=self.quiet))
        try:
            code = await turn
        except asyncio.CancelledError:
            if ctrl_c.stopping_chat():
                raise
        else:
            if stopped_by_session_budget(run.state.output) and run.state.end_status == "partial":
                self.spent = self.session.id
                _say_session_spent(self.session.id)
            return code
        finally:
            ctrl_c.turn = None
        await _end_waiting(self.agent, run, json_lines=self.json_lines)
        typer.echo(
            f"steward: turn cancelled (run {run.id} is recorded as cancelled); back to the chat", err=True
        )
        return EXIT_INTERRUPTED


def _say_session_spent(session_id: str) -> None:
    typer.echo(
        f"steward: session {session_id} has spent its budget ([budget] session_tokens, session_cost_usd, "
        "session_time_s, session_tool_calls), so a new message would stop before its first model call. "
        "/new starts a new session (a budget of its own) from this one's summary; or raise the limit in "
        f"steward.toml and go on with `steward chat --session {session_id}`; /quit leaves.",
        err=True,
    )


async def _end_waiting(agent: Agent, run: Run, *, json_lines: bool) -> None:
    """A turn cancelled at its approval or answer prompt: its run ends cancelled, not waiting."""
    from steward.errors import StewardError
    from steward.events import encode_event

    if run.status != "waiting" or agent.store is None:
        return  # a run cancelled while it worked has recorded its own ending
    done = run.cancelled()
    with contextlib.suppress(StewardError):  # the store is gone: the run stays waiting there
        await agent.store.append(run.id, [done])
        await agent.store.set_status(run.id, "cancelled", output=run.state.output)
    if json_lines:
        sys.stdout.write(encode_event(done) + "\n")
        sys.stdout.flush()


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
    from steward.memory.session_store import SessionStore

    assert agent.store is not None
    return (await SessionStore(agent.store.engine).get(session_id)).summary


async def _list_sessions(agent: Agent, *, current: str) -> None:
    from steward.memory.session_store import SessionStore

    assert agent.store is not None
    sessions = SessionStore(agent.store.engine)
    for row in await sessions.list(limit=20):
        turns = len(await sessions.turns(row.id))
        mark = "*" if row.id == current else " "
        state = "open" if row.is_open else "closed"
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(row.updated_at))
        typer.echo(f"{mark} {row.id}  {when}  {state:<6} {turns:>3} turns  {row.title}", err=True)
