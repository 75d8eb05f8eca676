"""``steward serve``: the HTTP API, its event streams and the web page, with a worker pool."""

from __future__ import annotations

import contextlib
import ipaddress
import sys
from pathlib import Path
from types import FrameType
from typing import Annotated, Any

import typer

from steward.cli.options import EXIT_OK, EXIT_USAGE


def serve(
    host: Annotated[
        str, typer.Option("--host", help="Address to listen on (loopback unless told).")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", "-p", min=0, max=65535, help="Port to listen on.")] = 8321,
    workers: Annotated[
        int,
        typer.Option(
            "--workers", min=0, max=64, help="Jobs this server runs at once; 0: an API node for a fleet."
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
    first_token = None
    if not tokens.entries():
        first_token = tokens.create("default")
    _warn_if_exposed(host)

    import uvicorn

    from steward.server.app import ServerOptions, create_app

    options = ServerOptions(
        store_url=store_url(config, home), home=home, tokens=tokens, settings=config.server, workers=workers,
        worker_roles=tuple(role or ()),
    )  # fmt: skip
    for root in options.roots():
        if not root.is_dir():
            typer.echo(
                f"steward: [server] roots names {root}, which is not a folder; create it or fix the list",
                err=True,
            )
            raise typer.Exit(EXIT_USAGE)
    app = create_app(options)
    _Server = _server_class()  # noqa: N806 - a class
    shown = f"[{host}]" if ":" in host else host
    typer.echo(f"steward: serving on http://{shown}:{port}  (API /v1, docs /docs, page /)", err=True)
    if first_token is not None:
        typer.echo(
            f"steward: a token was made for this server (shown once; more with --new-token NAME):\n"
            f"  {first_token}\n  open http://{shown}:{port}/#token={first_token}",
            err=True,
        )
    server = _Server(
        uvicorn.Config(
            app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=5, server_header=False,
            proxy_headers=False,
            # The standard loop: uvloop forks the whole server to start each tool's process
            # (several times slower than asyncio's spawn, and the server's runs start many).
            loop="asyncio",
        )
    )  # fmt: skip
    server.run()
    raise typer.Exit(EXIT_OK)


def _server_class() -> type[Any]:
    import asyncio

    import uvicorn

    class Server(uvicorn.Server):
        """Ends the event streams when asked to stop: uvicorn waits for open connections first,
        and a stream of a waiting run never closes by itself."""

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
