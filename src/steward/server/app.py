"""``steward serve``: the HTTP API under ``/v1``, live events as Server-Sent Events, the web page.

Every run the API starts is a job of the queue (the run's id is the job's id), so whoever runs
it (this server's own workers, or a fleet behind it) records it in the shared store, and any
server on that store can show it, stream it live and take replies to it. A client that drops
its stream cancels nothing; it comes back with ``Last-Event-ID`` and misses nothing.

This module assembles the application: its lifespan (store, event hub, channel watcher, worker
pool), one router per resource (``steward.server.routes``), the page and the docs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

from fastapi import FastAPI
from fastapi.responses import FileResponse, RedirectResponse

from steward.jobs.api import Queue
from steward.server.channels import watch_channels
from steward.server.errors import ApiError, install_error_handlers
from steward.server.hub import EventHub
from steward.server.limits import RequestLimits
from steward.server.outbox import Outbox
from steward.server.routes import channels, jobs, memory, notes, runs, sessions, system
from steward.server.state import ServerOptions, ServerState

if TYPE_CHECKING:
    from steward.jobs.worker import Worker

__all__ = ["ServerOptions", "create_app"]

log = logging.getLogger("steward.server")

PAGE = Path(__file__).parent / "page"
DRAIN_S = 10.0  # how long a stopping server lets its runs reach their next step


def create_app(options: ServerOptions) -> FastAPI:
    """The server's ASGI application. Nothing is opened until it starts (its lifespan)."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        from steward.jobs.worker import Worker, WorkerSettings
        from steward.store.events import open_store

        store = await open_store(options.store_url)
        hub = EventHub(store, poll_s=options.settings.poll_s)
        state = ServerState(options, store, Queue(store), hub, Outbox(store.engine))
        app.state.steward = state
        stop, now = asyncio.Event(), asyncio.Event()
        tasks = [asyncio.create_task(hub.run(stop), name="steward-hub")]
        tasks.append(asyncio.create_task(watch_channels(state, stop), name="steward-channels"))
        if options.workers > 0:
            pool = Worker(store, WorkerSettings(roles=options.worker_roles, concurrency=options.workers))
            state.poke_workers = pool.poke
            tasks.append(asyncio.create_task(_worker_pool(pool, stop, now), name="steward-workers"))
        try:
            yield
        finally:
            # Runs go back to the queue at their next step (a few seconds at most), then at once.
            stop.set()
            await asyncio.wait(tasks, timeout=DRAIN_S)
            now.set()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), timeout=10)
            await memory.close_memory(app)
            await store.close()

    app = FastAPI(
        title="Steward",
        version="1",
        summary="Sessions, live runs, approvals and jobs of a Steward deployment.",
        lifespan=lifespan,
        docs_url=None,  # served below from files in the package, not from a CDN: it works offline
        openapi_url="/openapi.json",
        redoc_url=None,
    )
    install_error_handlers(app)
    routers = (system.status, sessions.router, runs.router, jobs.router, memory.router, system.router)
    for router in (*routers, notes.router, channels.router):  # notes: issue 23
        app.include_router(router)
    _page_routes(app)
    _docs_routes(app)
    if options.settings.cors_origins:
        from fastapi.middleware.cors import CORSMiddleware

        app.add_middleware(
            CORSMiddleware, allow_origins=options.settings.cors_origins,
            allow_methods=["GET", "POST", "DELETE"],  # DELETE: forgetting a memory item
            allow_headers=["Authorization", "Content-Type", "Last-Event-ID"],
        )  # fmt: skip
    app.add_middleware(RequestLimits, limit=options.settings.max_body_kb * 1024)
    return app


def _page_routes(app: FastAPI) -> None:
    files = {p.name: p for p in PAGE.glob("*") if p.is_file()} if PAGE.is_dir() else {}

    @app.get("/", include_in_schema=False, response_model=None)
    async def index() -> FileResponse | RedirectResponse:
        if "index.html" not in files:
            return RedirectResponse("/docs")
        return FileResponse(files["index.html"], headers=_PAGE_HEADERS)

    @app.get("/page/{name}", include_in_schema=False)
    async def page_file(name: str) -> FileResponse:
        found = files.get(name)  # only the package's own files, by name: no path from the client
        if found is None:
            raise ApiError(404, f"no page file {name!r}")
        return FileResponse(found, headers=_PAGE_HEADERS)


def _docs_routes(app: FastAPI) -> None:
    """Swagger UI at /docs, from the files the fastapi-offline package ships (no CDN)."""
    import fastapi_offline
    from fastapi.openapi.docs import get_swagger_ui_html
    from fastapi.responses import HTMLResponse

    static = Path(fastapi_offline.__file__).parent / "static"
    files = {p.name: p for p in static.glob("*") if p.is_file()}

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url="/openapi.json", title="Steward API",
            swagger_js_url="/docs/static/swagger-ui-bundle.js", swagger_css_url="/docs/static/swagger-ui.css",
            swagger_favicon_url="/docs/static/favicon.png",
        )  # fmt: skip

    @app.get("/docs/static/{name}", include_in_schema=False)
    async def docs_file(name: str) -> FileResponse:
        found = files.get(name)
        if found is None:
            raise ApiError(404, f"no docs file {name!r}")
        return FileResponse(found, headers={"Cache-Control": "max-age=86400"})


# The page runs no script but its own and talks only to this server.
_PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; style-src 'self'; "
    "script-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


async def _worker_pool(pool: Worker, stop: asyncio.Event, now: asyncio.Event) -> None:
    try:
        await pool.run(stop, now)
    except Exception:  # the API goes on; the log says why the pool stopped
        log.exception("the server's worker pool stopped")
