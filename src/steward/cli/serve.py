"""``steward serve``: the HTTP API, its event streams and the web page, with a worker pool."""

from __future__ import annotations

import ipaddress
import sys
from pathlib import Path
from typing import Annotated

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
    shown = f"[{host}]" if ":" in host else host
    typer.echo(f"steward: serving on http://{shown}:{port}  (API /v1, docs /docs, page /)", err=True)
    if first_token is not None:
        typer.echo(
            f"steward: a token was made for this server (shown once; more with --new-token NAME):\n"
            f"  {first_token}\n  open http://{shown}:{port}/#token={first_token}",
            err=True,
        )
    uvicorn.run(
        app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=5, server_header=False,
        proxy_headers=False,
    )  # fmt: skip
    raise typer.Exit(EXIT_OK)


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
