"""``steward memory``: long-term memory, inspected and forgotten by its operator.

``list`` and ``export`` span every scope unless told a user, persona or workspace (the
operator's view). ``search`` is what a run's ``recall`` does, so it has one scope: user "local",
no persona and the current folder unless given; ``--explain`` shows why each item came back.
``show`` and ``forget`` take an item's id (``m12`` or ``12``) whoever's it is. ``import`` reads
what ``export`` wrote, whole or not at all. The store is the
current folder's (``[store] url``, ``STEWARD_DB``, else ``.steward/steward.db``) or ``--store``.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from steward.cli.options import whole_option

if TYPE_CHECKING:
    import sqlalchemy as sa
    from sqlalchemy.ext.asyncio import AsyncEngine

    from steward.memory.longterm import Found, LongTermMemory, MemoryItem
    from steward.store.events import EventStore

memory_app = typer.Typer(
    help="Long-term memory: list, search (--explain), show, forget, export, import.", no_args_is_help=True
)

Store = Annotated[
    str | None,
    typer.Option(
        "--store", help="The store's URL (default: this folder's \\[store] url, STEWARD_DB or .steward)."
    ),
]
User = Annotated[str | None, typer.Option("--user", help='Whose memories: a job\'s user key, or "local".')]
Persona = Annotated[str | None, typer.Option("--persona", help='A persona\'s name; "" for none.')]
Workspace = Annotated[
    Path | None, typer.Option("--workspace", "-w", help="The workspace the memories are of.")
]
Kind = Annotated[
    str | None,
    typer.Option("--kind", help="fact (remembered), session_summary, turns (archived), or an imported kind."),
]
#: The kinds Steward writes; an import may bring others, which the store then lists.
KINDS = ("fact", "session_summary", "turns")
ItemId = Annotated[str, typer.Argument(metavar="ID", help="The item's id: m12 or 12.")]

_PAGE = 500
T = TypeVar("T")


def _fail(message: str) -> typer.Exit:
    typer.echo(f"steward: {message}", err=True)
    return typer.Exit(2)


def _run(main: Callable[[], Coroutine[Any, Any, T]]) -> T:
    return asyncio.run(main())


def _url(given: str | None, *, asked: bool, create: bool = False, data: bool = False) -> str:
    """The store to read; a SQLite file that does not exist is never created here (an error
    when an item was ``asked`` for) unless ``create`` (an import). ``data``: stdout carries the
    items (an export), so what is said goes to stderr."""
    from steward.agent import store_url
    from steward.config import load_config
    from steward.store.engine import parse_url, sqlite_path

    here = Path.cwd()
    url = given or store_url(load_config(here), here)
    path = sqlite_path(parse_url(url))  # a malformed URL: ConfigError naming the accepted forms
    if path is not None and not path.exists() and not create:
        if not asked:  # a listing of nothing is not an error
            typer.echo(
                f"nothing remembered here yet (no store at {path}); give --store URL for another", err=data
            )
            raise typer.Exit(0)
        raise _fail(f"no store at {path}: nothing is remembered there; give --store URL, or run here first")
    return url


@dataclass(frozen=True, slots=True)
class _Opened:
    memory: LongTermMemory
    engine: AsyncEngine  # for the listings, whose scope parts may each be left out


@asynccontextmanager
async def _memory(
    store_given: str | None,
    *,
    embed: bool = False,
    asked: bool = False,
    create: bool = False,
    data: bool = False,
) -> AsyncIterator[_Opened]:
    """The store's long-term memory (with ``[memory] embedder`` when ``embed``), closed after."""
    from steward.config import load_config
    from steward.memory.longterm import LongTermMemory
    from steward.store.events import open_store

    config = load_config(Path.cwd())
    embedder = None
    if embed:
        from steward.embed.resolve import embedder_from_config

        embedder = embedder_from_config(config)
    store: EventStore = await open_store(_url(store_given, asked=asked, create=create, data=data))
    try:
        yield _Opened(LongTermMemory(store.engine, embedder=embedder, settings=config.memory), store.engine)
    finally:
        await store.close()
        if embedder is not None:
            await embedder.aclose()


def _item_number(given: str) -> int:
    text = given.strip().lower().removeprefix("m")
    if not text.isdigit() or int(text) >= 2**31:
        raise _fail(f"{given!r} is not a memory id; give one as `steward memory list` shows it, e.g. m12")
    return int(text)


def _when(ts: float | None) -> str:
    return "-" if ts is None else time.strftime("%Y-%m-%d %H:%M", time.localtime(ts))


def _one_line(text: str, width: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _as_dict(item: MemoryItem) -> dict[str, Any]:
    from steward.memory.exported import as_dict

    return as_dict(item)


def _where(
    user: str | None, persona: str | None, workspace: Path | None, kind: str | None, hidden: bool
) -> list[sa.ColumnElement[bool]]:
    """Each scope part given is matched exactly; one left out spans every value."""
    import sqlalchemy as sa

    from steward.store.schema import memory_items as t

    where: list[sa.ColumnElement[bool]] = []
    if user is not None:
        where.append(t.c.scope_user == user)
    if persona is not None:
        where.append(t.c.scope_persona == persona)
    if workspace is not None:
        where.append(t.c.scope_workspace == str(workspace.expanduser().resolve()))
    if kind is not None:
        where.append(t.c.kind == kind)
    if not hidden:
        where.append(t.c.hidden_at.is_(None))
        where.append(sa.or_(t.c.expires_at.is_(None), t.c.expires_at > time.time()))
    return where


async def _check_kind(engine: AsyncEngine, kind: str | None) -> None:
    """A ``--kind`` no item has and Steward does not write is a mistake: name the kinds there are."""
    if kind is None or kind in KINDS:
        return
    import sqlalchemy as sa

    from steward.store.schema import memory_items as t

    async with engine.connect() as conn:
        stored = set((await conn.execute(sa.select(t.c.kind).distinct())).scalars())
    if kind not in stored:
        raise _fail(
            f"--kind {kind!r}: no memory is of that kind; kinds: {', '.join(sorted(stored | set(KINDS)))}"
        )


async def _rows(
    engine: AsyncEngine, where: list[sa.ColumnElement[bool]], limit: int
) -> AsyncIterator[MemoryItem]:
    """The items matching ``where``, newest first, read a page at a time; at most ``limit``."""
    import sqlalchemy as sa

    from steward.memory.longterm import MemoryItem, Scope
    from steward.store.schema import memory_items as t

    columns = [c for c in t.c if c.name != "tsv"]
    before: int | None = None
    left = limit
    while left > 0:
        query = sa.select(*columns).where(*where)
        if before is not None:
            query = query.where(t.c.id < before)
        async with engine.connect() as conn:
            rows = (await conn.execute(query.order_by(t.c.id.desc()).limit(min(left, _PAGE)))).all()
        for row in rows:
            yield MemoryItem(
                id=row.id, scope=Scope(row.scope_user, row.scope_persona, row.scope_workspace), kind=row.kind,
                text=row.text, tags=tuple(row.tags.split()), run_id=row.run_id, session_id=row.session_id,
                created_at=row.created_at, updated_at=row.updated_at, expires_at=row.expires_at,
                hidden_at=row.hidden_at, merged=row.merged,
            )  # fmt: skip
        if len(rows) < min(left, _PAGE):
            return
        left -= len(rows)
        before = rows[-1].id


@memory_app.command("list")
def list_items(
    user: User = None,
    persona: Persona = None,
    workspace: Workspace = None,
    kind: Kind = None,
    hidden: Annotated[bool, typer.Option("--hidden", help="Also hidden and expired items.")] = False,
    limit: Annotated[
        int, whole_option("--limit", unit="items", example=50, least=1, help="How many items, newest first.")
    ] = 50,
    store: Store = None,
) -> None:
    """List remembered items, newest first, of every scope unless narrowed."""

    async def main() -> None:
        async with _memory(store) as opened:
            await _check_kind(opened.engine, kind)
            shown, now = 0, time.time()
            async for item in _rows(opened.engine, _where(user, persona, workspace, kind, hidden), limit):
                shown += 1
                state = _state(item, now)
                scope = f"{item.scope.user}/{item.scope.persona or '-'}"
                typer.echo(
                    f"m{item.id:<5} {_when(item.created_at)}  {item.kind:<15} {scope:<20}{state} "
                    f"{_one_line(item.text, 80)}  [{item.scope.workspace}]"
                )
            if not shown:
                typer.echo(
                    "no memories match" if any((user, persona, workspace, kind)) else "nothing remembered yet"
                )

    _run(main)


def _state(item: MemoryItem, now: float) -> str:
    """Why ``list --hidden`` shows an item recall never returns: hidden, expired, or nothing."""
    if item.hidden_at is not None:
        return " hidden"
    return " expired" if item.expires_at is not None and item.expires_at <= now else ""


@memory_app.command("search")
def search(
    query: Annotated[str, typer.Argument(help="What to look for, in a few words.")],
    k: Annotated[
        int, whole_option("--k", "-k", unit="items", example=5, least=1, most=100, help="How many items.")
    ] = 5,
    explain: Annotated[
        bool,
        typer.Option(
            "--explain", help="Show each item's keyword rank, vector rank, fused score, similarity."
        ),
    ] = False,
    user: User = None,
    persona: Persona = None,
    workspace: Workspace = None,
    store: Store = None,
) -> None:
    """Search one scope as a run's recall does (default: user local, no persona, this folder)."""
    from steward.memory.longterm import Scope

    where = (workspace or Path.cwd()).expanduser().resolve()
    scope = Scope(user if user is not None else "local", persona or "", str(where))

    async def main() -> tuple[list[Found], str]:
        async with _memory(store, embed=True) as opened:
            return await opened.memory.recall(scope, query, k=k), opened.memory.mode

    found, mode = _run(main)
    if not found:
        who = f"{scope.user}/{scope.persona or '-'}"
        typer.echo(f"nothing remembered matches {query!r} for {who} in {scope.workspace}")
        return
    if explain:
        how = "words only (no embedder)"
        if mode == "hybrid":  # every item with a vector is in the vector list, unless embedding failed
            meaning = any(hit.similarity is not None for hit in found)
            how = "words and meaning" if meaning else "words only: the embedder failed (said above)"
        typer.echo(f"recall by {how}; scope {scope.user}/{scope.persona or '-'} in {scope.workspace}")
        typer.echo(f"{'id':<7}{'keyword':>8}{'vector':>8}{'fused':>9}{'similar':>9}  text")
        for hit in found:
            typer.echo(
                f"m{hit.item.id:<6}{_rank(hit.keyword_rank):>8}{_rank(hit.vector_rank):>8}{hit.score:>9.4f}"
                f"{_similar(hit.similarity):>9}  {_one_line(hit.item.text, 90)}"
            )
        return
    from steward.memory.archival import recalled_line

    for hit in found:
        typer.echo(recalled_line(hit, 200))


def _rank(rank: int | None) -> str:
    return "-" if rank is None else str(rank)


def _similar(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


@memory_app.command("show")
def show(item_id: ItemId, store: Store = None) -> None:
    """Show one item whole, hidden or expired too."""
    number = _item_number(item_id)

    async def main() -> MemoryItem | None:
        async with _memory(store, asked=True) as opened:
            return await opened.memory.get(None, number)

    item = _run(main)
    if item is None:
        raise _fail(f"no memory m{number} in this store; `steward memory list --hidden` shows the ids")
    fields = _as_dict(item)
    text = fields.pop("text")
    scope = fields.pop("scope")
    typer.echo(f"m{item.id} · {item.kind} · {scope['user']}/{scope['persona'] or '-'} · {scope['workspace']}")
    for name in ("created_at", "updated_at", "expires_at", "hidden_at"):
        if fields[name] is not None:
            ended = (
                " (expired: never recalled)" if name == "expires_at" and fields[name] <= time.time() else ""
            )
            typer.echo(f"{name.removesuffix('_at')}: {_when(fields[name])}{ended}")
    for name in ("tags", "merged", "run_id", "session_id"):
        if fields[name]:
            value = " ".join(fields[name]) if name == "tags" else fields[name]
            typer.echo(f"{name}: {value}")
    typer.echo(f"\n{text}")


def _confirmed(question: str) -> bool:
    """A yes to ``question``; no answer at all (stdin at its end: a script, a pipe) is a no."""
    try:
        return typer.confirm(question, default=False)
    except typer.Abort:
        typer.echo()  # the question's line is left open
        return False


@memory_app.command("forget")
def forget(
    item_id: ItemId,
    purge: Annotated[
        bool, typer.Option("--purge", help="Delete it (and its vector) instead of hiding it.")
    ] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Purge without asking.")] = False,
    store: Store = None,
) -> None:
    """Hide an item (kept, never recalled), or with --purge delete it for good."""
    number = _item_number(item_id)
    if purge and not yes and not _confirmed(f"Delete m{number} for good?"):
        typer.echo("kept: nothing was deleted (--yes purges without asking)")
        raise typer.Exit(1)

    async def main() -> tuple[MemoryItem | None, bool]:
        async with _memory(store, asked=True) as opened:
            item = await opened.memory.get(None, number)
            if item is None:
                return None, False
            return item, await opened.memory.forget(None, number, purge=purge)

    item, done = _run(main)
    if item is None:
        raise _fail(f"no memory m{number} in this store; `steward memory list --hidden` shows the ids")
    if purge:
        typer.echo(
            f"purged m{number}: deleted with its keyword entry and, if no other item shares it, its vector"
        )
    elif done:
        again = f"steward memory forget m{number} --purge"
        typer.echo(f"hid m{number}: it is kept but never recalled (`{again}` deletes it)")
    else:
        typer.echo(f"m{number} was already hidden; `--purge` deletes it")


@memory_app.command("export")
def export(
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write to this file (default: stdout).")
    ] = None,
    export_format: Annotated[
        str, typer.Option("--format", help="jsonl: one JSON object per item.")
    ] = "jsonl",
    user: User = None,
    persona: Persona = None,
    workspace: Workspace = None,
    kind: Kind = None,
    hidden: Annotated[bool, typer.Option("--hidden", help="Also hidden and expired items.")] = False,
    store: Store = None,
) -> None:
    """Export items with every field (not their vectors), newest first, as JSON Lines."""
    if export_format != "jsonl":
        raise _fail(f"--format {export_format!r} is not known; use --format jsonl")

    async def main() -> int:
        count = 0
        async with _memory(store, data=True) as opened:
            await _check_kind(opened.engine, kind)
            sink = output.open("w", encoding="utf-8") if output is not None else None
            try:
                async for item in _rows(opened.engine, _where(user, persona, workspace, kind, hidden), 2**31):
                    line = json.dumps(_as_dict(item), ensure_ascii=False)
                    if sink is not None:
                        sink.write(line + "\n")
                    else:
                        typer.echo(line)
                    count += 1
            finally:
                if sink is not None:
                    sink.close()
        return count

    try:
        count = _run(main)
    except OSError as exc:
        raise _fail(f"cannot write {output}: {exc.strerror or exc}; choose another file with -o") from None
    if output is not None:
        typer.echo(f"exported {count} item(s) to {output}", err=True)


@memory_app.command("import")
def import_items(
    source: Annotated[
        Path, typer.Argument(metavar="FILE.jsonl", help="A file `steward memory export` wrote.")
    ],
    store: Store = None,
) -> None:
    """Import items from an export (JSON Lines), in one transaction: all of them or none.

    Each keeps its scope, times, tags, count and hidden state; ids are new. An item whose text
    is already visible in its scope is merged into it, as a write would be. Vectors are computed
    later, as for any new item."""
    from steward.memory.exported import LineError, read_lines

    try:
        with source.open(encoding="utf-8") as lines:
            items = read_lines(lines)
    except OSError as exc:
        raise _fail(
            f"cannot read {source}: {exc.strerror or exc}; give the file `memory export -o` wrote"
        ) from None
    except UnicodeDecodeError:
        raise _fail(f"{source} is not UTF-8 text; give the file `steward memory export -o` wrote") from None
    except LineError as exc:
        raise _fail(f"{source}: {exc}; nothing was imported") from None
    if not items:
        typer.echo(f"{source} holds no items; nothing was imported")
        return

    async def main() -> int:
        async with _memory(store, create=True) as opened:
            written = await opened.memory.restore(items)
        return sum(1 for w in written if w.merged)

    merged = _run(main)
    typer.echo(
        f"imported {len(items)} item(s) from {source}"
        + (f" ({merged} merged into items with the same text)" if merged else "")
    )
