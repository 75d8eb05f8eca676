"""What every route shares: the server's options and state (a FastAPI dependency), and its
bearer-token check."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from steward.config import ServerSettings
from steward.jobs.api import Queue
from steward.server.errors import ApiError
from steward.server.hub import EventHub
from steward.server.outbox import Outbox
from steward.server.tokens import Tokens
from steward.store.events import EventStore


def _nothing() -> None:
    return None


@dataclass(slots=True)
class ServerOptions:
    store_url: str
    home: Path  # the folder the server was started in: the default workspace
    tokens: Tokens
    settings: ServerSettings = field(default_factory=ServerSettings)
    workers: int = 2  # worker slots of this server's own pool; 0: an API node in front of a fleet
    worker_roles: tuple[str, ...] = ()

    def roots(self) -> list[Path]:
        given = [self.home / r for r in self.settings.roots] or [self.home]
        return [r.resolve() for r in given]


@dataclass(slots=True)
class ServerState:
    options: ServerOptions
    store: EventStore
    queue: Queue
    hub: EventHub
    outbox: Outbox  # the chat channels' messages, and the webhook's seen signatures
    #: Tell this server's own workers that a job was queued here (others hear it from the store).
    poke_workers: Callable[[], None] = _nothing
    #: Tell this server's channel watcher that a message was queued here.
    poke_channels: Callable[[], None] = _nothing


def server_state(request: Request) -> ServerState:
    state: ServerState = request.app.state.steward
    return state


State = Annotated[ServerState, Depends(server_state)]

_bearer = HTTPBearer(auto_error=False, description="A token from `steward serve --new-token NAME`.")


async def authorized(
    state: State, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> str:
    """The name of the request's token; a 401 that says how to get one otherwise."""
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise ApiError(
            401, "send Authorization: Bearer TOKEN (steward serve printed one; --new-token makes more)"
        )
    name = state.options.tokens.check(credentials.credentials)
    if name is None:
        raise ApiError(
            401, "the token is not one of this server's; make one with `steward serve --new-token NAME`"
        )
    return name


#: A router's dependency: every route of it needs a token.
Authorized = Depends(authorized)
