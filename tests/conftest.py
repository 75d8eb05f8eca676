"""Fixtures for every test."""

from __future__ import annotations

import asyncio
import os
import resource
import shutil
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Generator, Iterator
from pathlib import Path

import asyncpg
import pytest
import sqlalchemy as sa

from steward.store.engine import make_engine
from steward.store.events import EventStore, open_store
from steward.store.schema import migrate


def pytest_configure(config: pytest.Config) -> None:
    # Hundreds of tests start `steward` as a subprocess. Where the environment forbids writing
    # bytecode, each would compile the package from source again (~0.2 CPU-s): the subprocesses
    # keep theirs in the virtual environment instead, as scripts/test does, and the tree stays
    # free of __pycache__.
    in_venv = sys.prefix != sys.base_prefix
    if in_venv and os.environ.get("PYTHONDONTWRITEBYTECODE") and not os.environ.get("PYTHONPYCACHEPREFIX"):
        del os.environ["PYTHONDONTWRITEBYTECODE"]
        os.environ["PYTHONPYCACHEPREFIX"] = str(Path(sys.prefix) / "pycache")


@pytest.fixture(autouse=True, scope="session")
def _checkpoints_out_of_home(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Shadow repositories of test runs go to a temporary state directory, never the user's."""
    import os

    os.environ["XDG_STATE_HOME"] = str(tmp_path_factory.mktemp("state-home"))


POSTGRES_ENV = "STEWARD_TEST_POSTGRES_URL"


@pytest.fixture(scope="session")
def remember_sandbox_check(_checkpoints_out_of_home: None) -> Callable[[Path], None]:
    """``remember_sandbox_check(state_home)`` gives the state directory ``state_home`` (what a
    test's commands get as XDG_STATE_HOME) the sandbox's self-check as `steward` remembers it
    (``sandbox-check.json``), run once per worker: a command then starts as on a machine that
    checked already, instead of each starting a real sandbox to check (~0.5 CPU-s). The first
    command a sandbox runs still checks for real in its own process."""
    from steward.safety.sandbox import selfcheck
    from steward.safety.sandbox.bubblewrap import BubblewrapSandbox

    BubblewrapSandbox().probe()  # remembered under this session's XDG_STATE_HOME
    check = selfcheck.cache_path()

    def remember(state_home: Path) -> None:
        if check.exists():  # none when bubblewrap is missing: each command checks, as a user's
            target = state_home / "steward" / check.name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(check, target)

    return remember


# `STEWARD_TEST_CPU_REPORT=DIR pytest ...` records what each test costs in CPU seconds (its own
# process's, and its children's: the `steward` subprocesses, servers, sandboxes it waited for) and
# prints the costliest tests, modules and directories at the end. CPU seconds, not wall time:
# they do not change with how loaded the machine is. Each process writes its own file in DIR.
CPU_REPORT_ENV = "STEWARD_TEST_CPU_REPORT"


def _cpu_seconds() -> tuple[float, float]:
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time(), children.ru_utime + children.ru_stime


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(
    item: pytest.Item, nextitem: pytest.Item | None
) -> Generator[None, object, object]:
    folder = os.environ.get(CPU_REPORT_ENV)
    if not folder:
        return (yield)
    (own, children), started = _cpu_seconds(), time.monotonic()
    try:
        return (yield)
    finally:
        own_after, children_after = _cpu_seconds()
        spent = (own_after - own, children_after - children, time.monotonic() - started)
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        with open(Path(folder) / f"{worker}-{os.getpid()}.tsv", "a", encoding="utf-8") as out:
            out.write("\t".join([item.nodeid, *(f"{x:.3f}" for x in spent)]) + "\n")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    folder = os.environ.get(CPU_REPORT_ENV)
    if not folder or hasattr(config, "workerinput"):  # the workers' lines are read by the controller
        return
    tests: dict[str, tuple[float, float, float]] = {}
    for part in sorted(Path(folder).glob("*.tsv")):
        for row in part.read_text(encoding="utf-8").splitlines()[:100_000]:
            nodeid, *figures = row.rsplit("\t", 3)
            own, children, wall = (float(x) for x in figures)
            tests[nodeid] = (own, children, wall)
    by_module: dict[str, float] = defaultdict(float)
    by_folder: dict[str, float] = defaultdict(float)
    for nodeid, (own, children, _wall) in tests.items():
        module = nodeid.split("::", 1)[0]
        by_module[module] += own + children
        by_folder[module.rsplit("/", 1)[0]] += own + children
    write = terminalreporter.write_line
    write(f"CPU seconds of {len(tests)} tests, {sum(by_folder.values()):.0f} in all (own + children, wall):")
    for nodeid, (own, children, wall) in sorted(tests.items(), key=lambda kv: -kv[1][0] - kv[1][1])[:40]:
        write(f"  {own + children:7.2f}  ({own:6.2f} + {children:6.2f})  {wall:6.2f}  {nodeid}")
    for title, table in (("module", by_module), ("directory", by_folder)):
        write(f"CPU seconds by {title}:")
        for name, cpu in sorted(table.items(), key=lambda kv: -kv[1])[:40]:
            write(f"  {cpu:7.2f}  {name}")


# Fixtures that migrate the store before the test's body runs. A test that uses one gets a copy of
# a database migrated once per worker: the same tables, sooner (migrating a fresh PostgreSQL
# database takes most of a second; copying a migrated one, a fraction of that). Every other test
# gets an empty database, as the store's own first migration is part of what it runs.
MIGRATED_BY = frozenset({"engine", "store"})


async def _execute(url: str, *statements: str) -> None:
    conn = await asyncpg.connect(url, timeout=5)
    try:
        for statement in statements:
            await conn.execute(statement)
    finally:
        await conn.close()


async def _migrate(url: str) -> None:
    engine = make_engine(url)
    try:
        await migrate(engine)
    finally:
        await engine.dispose()


class MigratedTemplates:
    """Databases migrated on first use, once per worker, and copied for each test that wants one."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.sqlite_file: Path | None = None
        self.postgres: dict[str, str] = {}  # server URL -> name of its template database

    def sqlite_copy(self, path: Path) -> None:
        if self.sqlite_file is None:
            made = self.root / "template.db"
            asyncio.run(_migrate(f"sqlite:///{made}"))
            assert not made.with_name(made.name + "-wal").exists()  # the file alone is the database
            self.sqlite_file = made
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(self.sqlite_file, path)

    def postgres_template(self, base: str) -> str:
        if base not in self.postgres:
            name = f"steward_template_{uuid.uuid4().hex[:10]}"
            asyncio.run(_execute(base, f'CREATE DATABASE "{name}"'))
            self.postgres[base] = name  # dropped at the end of the session even if migrate fails
            asyncio.run(_migrate(sa.make_url(base).set(database=name).render_as_string(hide_password=False)))
        return self.postgres[base]


@pytest.fixture(scope="session")
def migrated_templates(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MigratedTemplates]:
    templates = MigratedTemplates(tmp_path_factory.mktemp("migrated"))
    try:
        yield templates
    finally:
        for base, name in templates.postgres.items():
            asyncio.run(_execute(base, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(
    request: pytest.FixtureRequest, tmp_path: Path, migrated_templates: MigratedTemplates
) -> Iterator[str]:
    """A database of its own for the test, on SQLite and (when configured) PostgreSQL: empty, or
    already migrated when the test uses a fixture that migrates it (``MIGRATED_BY``)."""
    migrated = not MIGRATED_BY.isdisjoint(request.fixturenames)
    if request.param == "sqlite":
        path = tmp_path / "queue" / "steward.db"
        if migrated:
            migrated_templates.sqlite_copy(path)
        yield f"sqlite:///{path}"
        return
    base = os.environ.get(POSTGRES_ENV)
    if not base:
        pytest.skip("set STEWARD_TEST_POSTGRES_URL to run the PostgreSQL tests")
    name = f"steward_jobs_{uuid.uuid4().hex[:10]}"
    template = f' TEMPLATE "{migrated_templates.postgres_template(base)}"' if migrated else ""
    asyncio.run(_execute(base, f'CREATE DATABASE "{name}"{template}'))
    try:
        yield sa.make_url(base).set(database=name).render_as_string(hide_password=False)
    finally:
        asyncio.run(_execute(base, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture
async def store(db_url: str) -> AsyncIterator[EventStore]:
    """An open event store on each engine of ``db_url`` (the store suite has its own, over
    ``store_url``, with the tables dropped between tests)."""
    opened = await open_store(db_url)
    try:
        yield opened
    finally:
        await opened.close()
