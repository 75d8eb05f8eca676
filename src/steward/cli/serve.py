"""``steward serve``: the HTTP API, its event streams and the web page, with a worker pool."""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Annotated, Any

import typer

from steward.cli.options import EXIT_OK, EXIT_USAGE, fail, whole_option


def serve(
    host: Annotated[
        str, typer.Option("--host", help="Address to listen on (loopback unless told).")
    ] = "127.0.0.1",
    port: Annotated[
        int,
        whole_option("--port", "-p", unit="", example=8321, least=0, most=65535, help="Port to listen on."),
    ] = 8321,
    workers: Annotated[
        int,
        whole_option(
            "--workers",
            unit="jobs",
            example=4,
            least=0,
            most=64,
            help="Jobs this server runs at once; 0: an API node for a fleet.",
        ),
    ] = 2,
    role: Annotated[
        list[str] | None,
        typer.Option("--role", "-r", help="Its workers take jobs of this role only (repeatable)."),
    ] = None,
    workspace: Annotated[
        Path,
        typer.Option("--workspace", "-w", help="Folder whose configuration the server reads; runs' default."),
    ] = Path(),
    new_token: Annotated[
        str | None,
        typer.Option("--new-token", metavar="NAME", help="Make a token named NAME, print it, and exit."),
    ] = None,
    revoke_token: Annotated[
        str | None, typer.Option("--revoke-token", metavar="NAME", help="Remove the token NAME, and exit.")
    ] = None,
) -> None:
    """Serve the HTTP API (/v1, OpenAPI at /docs), live run events and the web page (/).

    Every route but /v1/health needs a bearer token. The first start makes one and prints it
    (once); `--new-token NAME` makes more. Runs are jobs: this server runs them with its own
    workers (--workers), and any `steward worker` on the same store helps.
    """
    from steward.agent import store_url
    from steward.config import load_config
    from steward.server.tokens import Tokens, tokens_path

    tokens = Tokens(tokens_path())
    if revoke_token is not None:
        found = tokens.revoke(revoke_token)
        typer.echo(f"steward: token {revoke_token!r} {'removed' if found else 'not found'} ({tokens.path})")
        raise typer.Exit(EXIT_OK if found else EXIT_USAGE)
    if new_token is not None:
        token = tokens.create(new_token)
        typer.echo(f"steward: token {new_token!r} (shown once; kept hashed in {tokens.path}):\n{token}")
        raise typer.Exit(EXIT_OK)
    home = workspace.resolve()
    if not home.is_dir():
        typer.echo(f"steward: {workspace} is not a folder; pass --workspace DIR", err=True)
        raise typer.Exit(EXIT_USAGE)
    config = load_config(home)
    _check_the_extra()
    _warn_if_exposed(host)
    from steward.server.app import ServerOptions

    options = ServerOptions(
        store_url=store_url(config, home), home=home, tokens=tokens, settings=config.server, workers=workers,
        worker_roles=tuple(role or ()),
    )  # fmt: skip
    for root in options.roots():
        if not root.is_dir():
            raise fail(f"[server] roots names {root}, which is not a folder; create it or fix the list")
    _check_store(options.store_url)
    listening = _listen(host, port)  # bound here: a port in use is said before anything is served
    raise typer.Exit(_serve(options, listening, tokens))


def _check_the_extra() -> None:
    """The serve extra is installed, or the command that installs it is named (nothing is made)."""
    try:
        import fastapi  # noqa: F401
        import fastapi_offline  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        missing = exc.name or "fastapi"
        raise fail(
            f"steward serve needs the serve extra ({missing} is not installed): pip install 'steward[serve]'"
        ) from None


def _check_store(url: str) -> None:
    """The store is reachable and its schema up to date before the server says it serves."""
    import asyncio

    from steward.errors import ConfigError, StewardError
    from steward.store.events import open_store

    async def check() -> None:
        store = await open_store(url)
        await store.close()

    try:
        asyncio.run(check())
    except (ConfigError, StewardError) as exc:
        raise fail(f"cannot serve: {exc}") from None


def _listen(host: str, port: int) -> socket.socket:
    """A socket bound to ``host``:``port`` (listening starts with the server)."""
    shown = f"[{host}]" if ":" in host else host
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except OSError as exc:
        why = exc.strerror or exc
        raise fail(f"cannot listen on {host}: {why}; pass --host with an address of this machine") from None
    listening = socket.socket(family, kind, proto)
    try:
        listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listening.bind(address)
    except OSError as exc:
        listening.close()
        raise fail(
            f"cannot listen on {shown}:{port}: {exc.strerror or exc}; pass another --port (or --host), "
            "or stop what uses it"
        ) from None
    return listening


def _serve(options: Any, listening: socket.socket, tokens: Any) -> int:
    """Serve until stopped; the exit code. Announced (and a first token made) once it serves."""
    import logging

    import uvicorn

    from steward.server.app import create_app

    app = create_app(options)
    host, port = listening.getsockname()[:2]
    shown = f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    def announce() -> None:
        typer.echo(f"steward: serving on {shown}  (API /v1, docs /docs, page /)", err=True)
        if not tokens.entries():  # made only now: a server that never served leaves no token behind
            first = tokens.create("default")
            typer.echo(
                f"steward: a token was made for this server (shown once; more with --new-token NAME):\n"
                f"  {first}\n  open {shown}/#token={first}",
                err=True,
            )

    server = _server_class()(
        uvicorn.Config(
            app, log_level="warning", timeout_graceful_shutdown=5, server_header=False, proxy_headers=False,
            # The standard loop: uvicorn forks the whole server to start each tool's process
            # with uvloop (several times slower than asyncio's spawn, and runs start many).
            loop="asyncio",
        ),
        announce,
    )  # fmt: skip
    failures = _StartupFailures()
    logging.getLogger("uvicorn.error").addFilter(failures)
    # uvicorn exits (SystemExit) when the application did not start: said below.
    with listening, contextlib.suppress(SystemExit):
        server.run(sockets=[listening])
    if not server.started:
        why = failures.reason or "see the lines above"
        typer.echo(f"steward: the server did not start: {why}", err=True)
        return EXIT_USAGE
    return EXIT_OK


class _StartupFailures:
    """Keeps a failed start-up's reason as one line instead of uvicorn's traceback."""

    def __init__(self) -> None:
        self.reason = ""

    def filter(self, record: Any) -> bool:
        message = str(record.getMessage())
        if "Traceback (most recent call last)" in message:
            last = [line for line in message.strip().splitlines() if line.strip()][-1]
            kind, sep, said = last.partition(": ")
            self.reason = said if sep and "." in kind and " " not in kind else last
            return False
        return not (self.reason and message.startswith("Application startup failed"))


def _server_class() -> type[Any]:
    import asyncio

    import uvicorn

    class Server(uvicorn.Server):
        """Ends the event streams when asked to stop: uvicorn waits for open connections first,
        and a stream of a waiting run never closes by itself. Says it serves once it does."""

        def __init__(self, config: uvicorn.Config, announce: Callable[[], None]) -> None:
            super().__init__(config)
            self.announce = announce

        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets=sockets)
            if self.started:
                self.announce()

        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            state = (
                getattr(self.config.app.state, "steward", None) if hasattr(self.config.app, "state") else None
            )
            if state is not None:
                with contextlib.suppress(RuntimeError):  # no loop running: nothing streams
                    asyncio.get_event_loop().call_soon_threadsafe(state.hub.close)
            super().handle_exit(sig, frame)

    return Server


def _warn_if_exposed(host: str) -> None:
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback:
        sys.stderr.write(
            f"steward: warning: listening on {host}, not loopback: anyone who can reach it and holds a "
            "token can run agents here. Put TLS in front of it (a reverse proxy) and keep tokens secret.\n"
        )
