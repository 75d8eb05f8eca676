"""Tables and migrations of the store (SQLAlchemy Core).

The schema only ever moves forward through ``MIGRATIONS``: migration ``n`` (1-based) takes a
database from version ``n - 1`` to ``n``. ``migrate`` applies the missing ones in a single
transaction that holds the database's write lock (SQLite ``BEGIN IMMEDIATE``, a PostgreSQL
advisory lock), so two processes opening the same database at once apply each step once.
"""

from __future__ import annotations

from collections.abc import Callable

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from steward.errors import StewardError
from steward.store.engine import write_transaction

metadata = sa.MetaData()

schema_version = sa.Table(
    "schema_version",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),  # always 1: a single row
    sa.Column("version", sa.Integer, nullable=False),
)

runs = sa.Table(
    "runs",
    metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("session_id", sa.Text, nullable=True),
    sa.Column("goal", sa.Text, nullable=False),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("end_status", sa.Text, nullable=True),
    sa.Column("created_at", sa.Double, nullable=False),
    sa.Column("updated_at", sa.Double, nullable=False),
    sa.Column("workspace", sa.Text, nullable=False, server_default=""),
    sa.Column("model", sa.Text, nullable=False, server_default=""),
    sa.Column("output", sa.Text, nullable=False, server_default=""),
    sa.Column("owner", sa.Text, nullable=True),
    sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
)

events = sa.Table(
    "events",
    metadata,
    sa.Column("run_id", sa.Text, sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("seq", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("ts", sa.Double, nullable=False),
    sa.Column("type", sa.Text, nullable=False),
    sa.Column("data", sa.Text, nullable=False),  # the event's ``data`` in its one JSON encoding
)


sessions = sa.Table(
    "sessions",
    metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("title", sa.Text, nullable=False),
    sa.Column("summary", sa.Text, nullable=False),  # of this session, written when it is closed
    sa.Column("previous_id", sa.Text, nullable=True),  # the session whose summary this one starts from
    sa.Column("created_at", sa.Double, nullable=False),
    sa.Column("updated_at", sa.Double, nullable=False),
    sa.Column("closed_at", sa.Double, nullable=True),
)

memory_blocks = sa.Table(
    "memory_blocks",
    metadata,
    sa.Column("scope", sa.Text, primary_key=True),  # "agent" or a session id
    sa.Column("label", sa.Text, primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
    sa.Column("limit_chars", sa.Integer, nullable=False),
    sa.Column("updated_at", sa.Double, nullable=False),
)

archive = sa.Table(
    "archive",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("run_id", sa.Text, nullable=True),
    sa.Column("session_id", sa.Text, nullable=True),
    sa.Column("kind", sa.Text, nullable=False),  # "tool_output" | "turns"
    sa.Column("ref", sa.Text, nullable=False),  # a call id, or the turns' range
    sa.Column("content", sa.Text, nullable=False),
    sa.Column("created_at", sa.Double, nullable=False),
    sa.Index("ix_archive_run_ref", "run_id", "ref"),
)


# Long-term memory (steward.memory.longterm): what an agent remembered or a run archived, in a
# scope (user, persona, workspace) that the store's queries always filter on. Keyword search is
# an FTS5 table on SQLite and a generated tsvector on PostgreSQL, both made by migration 9.
memory_items = sa.Table(
    "memory_items",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("scope_user", sa.Text, nullable=False),
    sa.Column("scope_persona", sa.Text, nullable=False),
    sa.Column("scope_workspace", sa.Text, nullable=False),
    sa.Column("kind", sa.Text, nullable=False),  # "fact" | "session_summary" | "turns" | ...
    sa.Column("text", sa.Text, nullable=False),
    sa.Column("tags", sa.Text, nullable=False, server_default=""),  # " a b " (spaces around each)
    sa.Column("content_hash", sa.Text, nullable=False),  # sha256 of the normalised text
    sa.Column("run_id", sa.Text, nullable=True),
    sa.Column("session_id", sa.Text, nullable=True),
    sa.Column("created_at", sa.Double, nullable=False),
    sa.Column("updated_at", sa.Double, nullable=False),
    sa.Column("expires_at", sa.Double, nullable=True),
    sa.Column("hidden_at", sa.Double, nullable=True),  # hidden: kept, never recalled; purged: deleted
    sa.Column("merged", sa.Integer, nullable=False, server_default="1"),  # writes folded into it
    sa.Index("ix_memory_scope", "scope_user", "scope_persona", "scope_workspace", "created_at"),
    sa.Index("ix_memory_hash", "content_hash"),
    # A scope's items newest first (``memory list``, ``items``): the page read, not the scope sorted
    # (migration 13).
    sa.Index("ix_memory_scope_id", "scope_user", "scope_persona", "scope_workspace", "id"),
)

# Vectors by content hash and embedding model: changing the model embeds again, never mixes spaces.
memory_vectors = sa.Table(
    "memory_vectors",
    metadata,
    sa.Column("content_hash", sa.Text, primary_key=True),
    sa.Column("model", sa.Text, primary_key=True),
    sa.Column("dim", sa.Integer, nullable=False),
    sa.Column("vector", sa.LargeBinary, nullable=False),  # float32, little-endian, L2-normalised
    sa.Column("created_at", sa.Double, nullable=False),
)

# One row per memory scope, its generation bumped by every change to the scope's items or their
# vectors in the same transaction: a process that caches a scope's vectors (the NumPy backend)
# checks one row to know whether its copy is still true, whichever process wrote.
memory_scopes = sa.Table(
    "memory_scopes",
    metadata,
    sa.Column("scope_user", sa.Text, primary_key=True),
    sa.Column("scope_persona", sa.Text, primary_key=True),
    sa.Column("scope_workspace", sa.Text, primary_key=True),
    sa.Column("generation", sa.Integer, nullable=False, server_default="0"),
)

# Cached model replies (off by default; steward.memory.cache): exact by the whole request, or by
# similarity of the last user turn under the same static prompt.
model_cache = sa.Table(
    "model_cache",
    metadata,
    sa.Column("key", sa.Text, primary_key=True),  # sha256 of the request (exact) or "sim:<n>"
    sa.Column("kind", sa.Text, nullable=False),  # "exact" | "similar"
    sa.Column("model", sa.Text, nullable=False),
    sa.Column("prompt_hash", sa.Text, nullable=False),  # prompt and tools (similar: + the goal's literals)
    sa.Column("last_user", sa.Text, nullable=False, server_default=""),
    sa.Column("reply", sa.Text, nullable=False),  # JSON of the reply
    # A similar entry's goal vector (float32, little-endian, unit length) and its embedder's name.
    sa.Column("vector", sa.LargeBinary, nullable=True),
    sa.Column("embedder", sa.Text, nullable=False, server_default=""),
    sa.Column("tokens", sa.Integer, nullable=False, server_default="0"),  # what a hit saves
    sa.Column("hits", sa.Integer, nullable=False, server_default="0"),
    sa.Column("created_at", sa.Double, nullable=False),
    sa.Column("expires_at", sa.Double, nullable=True),
    sa.Index("ix_model_cache_prompt", "model", "prompt_hash"),
)


_ACTIVE = "status IN ('queued', 'running', 'waiting') AND user_key IS NOT NULL"

jobs = sa.Table(
    "jobs",
    metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("role", sa.Text, nullable=False),  # the persona the job is addressed to
    sa.Column("goal", sa.Text, nullable=False),
    sa.Column("workspace", sa.Text, nullable=False),
    sa.Column("priority", sa.Integer, nullable=False, server_default="0"),  # higher first
    sa.Column("idempotency_key", sa.Text, nullable=True, unique=True),
    sa.Column("user_key", sa.Text, nullable=True),  # at most one active job per user key
    sa.Column("parent_id", sa.Text, nullable=True),
    # queued -> running -> waiting -> done | failed | cancelled | dead
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),  # workers lost while running it
    sa.Column("max_attempts", sa.Integer, nullable=False, server_default="3"),
    sa.Column("run_id", sa.Text, nullable=True),  # the one recorded run the job drives
    sa.Column("result", sa.Text, nullable=True),  # the run's final answer (JSON for typed results)
    sa.Column("error", sa.Text, nullable=True),  # why it failed, was cancelled or is dead
    sa.Column("output_schema", sa.Text, nullable=True),  # a JSON Schema the result must validate
    sa.Column("lease_owner", sa.Text, nullable=True),  # the worker holding it while it runs
    sa.Column("lease_expires_at", sa.Double, nullable=True),
    sa.Column("fence", sa.Integer, nullable=False, server_default="0"),  # +1 per claim
    sa.Column("cancel_requested", sa.Boolean, nullable=False, server_default=sa.false()),
    # A person's reply (or a deadline's, or a child job's end) to what the waiting run asked, as
    # JSON naming the wait: the worker that takes the job next gives it to the run.
    sa.Column("reply", sa.Text, nullable=True),
    sa.Column("session_id", sa.Text, nullable=True),  # the session its run belongs to (a chat turn)
    sa.Column("model", sa.Text, nullable=True),  # a model for its run other than the persona's
    # The policy mode asked for its run ("structured" | "autonomous"); None: as configured.
    sa.Column("mode", sa.Text, nullable=True),
    # The W3C traceparent its run's spans continue (``steward.telemetry``): the span that
    # submitted it (a parent's delegate call), else its run's first span; a takeover keeps the trace.
    sa.Column("traceparent", sa.Text, nullable=True),
    # [budget] values for its run over the configured ones, as JSON (``steward submit
    # --budget-tokens``, each attempt of ``steward batch``); None: as configured.
    sa.Column("budget", sa.Text, nullable=True),
    sa.Column("created_at", sa.Double, nullable=False),
    sa.Column("updated_at", sa.Double, nullable=False),
    sa.Column("started_at", sa.Double, nullable=True),
    sa.Column("finished_at", sa.Double, nullable=True),
    sa.Index("ix_jobs_claim", "status", sa.text("priority DESC"), "created_at", "id"),
    sa.Index("ix_jobs_lease", "status", "lease_expires_at"),
    sa.Index("ix_jobs_parent", "parent_id"),
    sa.Index(
        "ux_jobs_active_user",
        "user_key",
        unique=True,
        sqlite_where=sa.text(_ACTIVE),
        postgresql_where=sa.text(_ACTIVE),
    ),
)


channel_messages = sa.Table(
    "channel_messages",
    metadata,
    # Also the order a user's messages go out in (``steward.server.channels``).
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("key", sa.Text, nullable=False, unique=True),  # one message per key, whoever finds it
    sa.Column("channel", sa.Text, nullable=False),
    sa.Column("recipient", sa.Text, nullable=False),  # the channel's user
    sa.Column("job_id", sa.Text, nullable=True),
    sa.Column("fence", sa.Integer, nullable=True),  # the job's claim whose wait the message announces
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("text", sa.Text, nullable=False),
    # queued -> sending -> sent | failed; "none": recorded, nothing to send
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("claim", sa.Text, nullable=True),  # who is sending it, while it is sent
    sa.Column("claimed_at", sa.Double, nullable=True),
    sa.Column("error", sa.Text, nullable=True),
    sa.Column("created_at", sa.Double, nullable=False),
    sa.Column("sent_at", sa.Double, nullable=True),
    sa.Index("ix_channel_messages_status", "status", "id"),
    sa.Index("ix_channel_messages_job", "job_id", "fence"),
    sa.Index("ix_channel_messages_recipient", "channel", "recipient", "id"),
)


channel_signatures = sa.Table(
    "channel_signatures",
    metadata,
    # A signed chat message is taken once: its signature is kept for as long as its timestamp is
    # accepted (``steward.server.outbox``), and a second insert of it fails on the key.
    sa.Column("signature", sa.Text, primary_key=True),
    sa.Column("channel", sa.Text, nullable=False),
    sa.Column("seen_at", sa.Double, nullable=False),
    sa.Index("ix_channel_signatures_seen", "seen_at"),
)


workers = sa.Table(
    "workers",
    metadata,
    # Workers say they are there (``steward.jobs.presence``), so that a submit
    # that waits can say when no worker serves its role. A row whose ``seen_at`` is old is a
    # worker that died; a worker that stops removes its own.
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("roles", sa.Text, nullable=False),  # JSON list; empty: any role
    sa.Column("started_at", sa.Double, nullable=False),
    sa.Column("seen_at", sa.Double, nullable=False),
    sa.Index("ix_workers_seen", "seen_at"),
)


# --- notes (migration 10, issue 23): annotations on a file, a job or a run, per workspace ---
notes = sa.Table(
    "notes",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("workspace", sa.Text, nullable=False),  # the resolved folder: notes never cross it
    sa.Column("about", sa.Text, nullable=False),  # "file:src/app.py" | "run:<id>" (a job's run has its id)
    sa.Column("text", sa.Text, nullable=False),
    sa.Column("run_id", sa.Text, nullable=True),  # the run that wrote it (None: written by a person)
    sa.Column("persona", sa.Text, nullable=False, server_default=""),
    sa.Column("created_at", sa.Double, nullable=False),
    sa.Index("ix_notes_about", "workspace", "about", "created_at"),
    sa.Index("ix_notes_run", "run_id"),
)


# --- budgets (migration 12, issue 24): what runs spent, and the limits of the scopes they share ---
budget_scopes = sa.Table(
    "budget_scopes",
    metadata,
    # "run:<id>" (a run and the jobs it delegated), "tree:<root job>", "session:<id>".
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("limit_tokens", sa.BigInteger, nullable=False, server_default="0"),  # 0: no limit
    sa.Column("limit_cost", sa.Double, nullable=False, server_default="0"),
    sa.Column("limit_time", sa.Double, nullable=False, server_default="0"),
    sa.Column("limit_calls", sa.Integer, nullable=False, server_default="0"),
    sa.Column("spent_tokens", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("spent_cost", sa.Double, nullable=False, server_default="0"),
    sa.Column("spent_time", sa.Double, nullable=False, server_default="0"),
    sa.Column("spent_calls", sa.Integer, nullable=False, server_default="0"),
    # Taken by model calls in flight (``steward.budget.ledger``): a call starts only if it fits.
    sa.Column("held_tokens", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("held_cost", sa.Double, nullable=False, server_default="0"),
    sa.Column("updated_at", sa.Double, nullable=False),
)

budget_runs = sa.Table(
    "budget_runs",
    metadata,
    # One row per run: what it spent itself (its children have their own rows).
    sa.Column("run_id", sa.Text, primary_key=True),
    sa.Column("model", sa.Text, nullable=False, server_default=""),
    sa.Column("scopes", sa.Text, nullable=False, server_default="[]"),  # JSON list of scope ids it charges
    sa.Column("input_tokens", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("output_tokens", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("cache_read_tokens", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("cache_write_tokens", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("requests", sa.Integer, nullable=False, server_default="0"),
    sa.Column("cost_usd", sa.Double, nullable=False, server_default="0"),
    sa.Column("unpriced", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("tool_calls", sa.Integer, nullable=False, server_default="0"),
    sa.Column("time_s", sa.Double, nullable=False, server_default="0"),
    sa.Column("held_tokens", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("held_cost", sa.Double, nullable=False, server_default="0"),
    sa.Column("updated_at", sa.Double, nullable=False),
)


def _v1_runs_and_events(conn: Connection) -> None:
    # The tables as version 1 made them (later columns come from later migrations).
    sa.Table(
        "runs",
        sa.MetaData(),
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("session_id", sa.Text, nullable=True),
        sa.Column("goal", sa.Text, nullable=False),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("end_status", sa.Text, nullable=True),
        sa.Column("created_at", sa.Double, nullable=False),
        sa.Column("updated_at", sa.Double, nullable=False),
        sa.Index("ix_runs_created_at", "created_at"),
    ).create(conn)
    events.create(conn)


def _v2_resume_sessions_memory(conn: Connection) -> None:
    for column in (
        "workspace TEXT NOT NULL DEFAULT ''",
        "model TEXT NOT NULL DEFAULT ''",
        "output TEXT NOT NULL DEFAULT ''",
        "owner TEXT",  # host:pid of the process running it, while it runs
        "attempts INTEGER NOT NULL DEFAULT 0",  # times it was resumed after a crash
    ):
        conn.execute(sa.text(f"ALTER TABLE runs ADD COLUMN {column}"))
    conn.execute(sa.text("CREATE INDEX ix_runs_session ON runs (session_id, created_at)"))
    sessions.create(conn)
    memory_blocks.create(conn)
    archive.create(conn)


def _v3_jobs(conn: Connection) -> None:
    jobs.create(conn)  # as the code declares it now: a new database gets the later columns here


def _add_missing(conn: Connection, table: str, *columns: str) -> None:
    """Each column (``"name TYPE"``) that ``table`` lacks, added: a database made before the
    migration lacks them; one made after has them from the table's own creation."""
    have = {c["name"] for c in sa.inspect(conn).get_columns(table)}
    for column in columns:
        if column.split()[0] not in have:
            conn.execute(sa.text(f"ALTER TABLE {table} ADD COLUMN {column}"))


def _v4_job_replies(conn: Connection) -> None:
    _add_missing(conn, "jobs", "reply TEXT")  # made by _v3_jobs in a database made later


def _v5_job_sessions(conn: Connection) -> None:
    _add_missing(conn, "jobs", "session_id TEXT", "model TEXT", "mode TEXT")


def _v6_channel_messages(conn: Connection) -> None:
    # checkfirst: a test database whose other tables were dropped may still have this one.
    channel_messages.create(conn, checkfirst=True)


def _v7_channel_signatures(conn: Connection) -> None:
    channel_signatures.create(conn, checkfirst=True)


def _v8_workers(conn: Connection) -> None:
    workers.create(conn, checkfirst=True)


def _v9_long_term_memory(conn: Connection) -> None:
    for table in (memory_items, memory_vectors, memory_scopes, model_cache):
        table.create(conn, checkfirst=True)
    if conn.dialect.name == "sqlite":
        # External-content FTS5 over memory_items, kept in step by triggers; porter stems English.
        conn.execute(
            sa.text(
                "CREATE VIRTUAL TABLE IF NOT EXISTS memory_fts USING fts5("
                "text, tags, content='memory_items', content_rowid='id', tokenize='porter unicode61')"
            )
        )
        conn.execute(
            sa.text(
                "CREATE TRIGGER IF NOT EXISTS memory_fts_ai AFTER INSERT ON memory_items BEGIN "
                "INSERT INTO memory_fts(rowid, text, tags) VALUES (new.id, new.text, new.tags); END"
            )
        )
        conn.execute(
            sa.text(
                "CREATE TRIGGER IF NOT EXISTS memory_fts_ad AFTER DELETE ON memory_items BEGIN "
                "INSERT INTO memory_fts(memory_fts, rowid, text, tags) "
                "VALUES ('delete', old.id, old.text, old.tags); END"
            )
        )
        conn.execute(
            sa.text(
                "CREATE TRIGGER IF NOT EXISTS memory_fts_au AFTER UPDATE OF text, tags ON memory_items BEGIN "
                "INSERT INTO memory_fts(memory_fts, rowid, text, tags) "
                "VALUES ('delete', old.id, old.text, old.tags); "
                "INSERT INTO memory_fts(rowid, text, tags) VALUES (new.id, new.text, new.tags); END"
            )
        )
    elif conn.dialect.name == "postgresql":
        conn.execute(
            sa.text(
                "ALTER TABLE memory_items ADD COLUMN IF NOT EXISTS tsv tsvector GENERATED ALWAYS AS "
                "(to_tsvector('english', text || ' ' || tags)) STORED"
            )
        )
        conn.execute(sa.text("CREATE INDEX IF NOT EXISTS ix_memory_tsv ON memory_items USING gin (tsv)"))


def _v10_notes(conn: Connection) -> None:
    notes.create(conn, checkfirst=True)


def _v11_job_trace(conn: Connection) -> None:
    _add_missing(conn, "jobs", "traceparent TEXT")


def _v12_budgets(conn: Connection) -> None:
    budget_scopes.create(conn, checkfirst=True)
    budget_runs.create(conn, checkfirst=True)


def _v13_memory_scope_id(conn: Connection) -> None:
    # A database made before version 13 lacks the index; one made later has it from _v9.
    next(i for i in memory_items.indexes if i.name == "ix_memory_scope_id").create(conn, checkfirst=True)


# PostgreSQL's keyword postings (steward.memory.pgsearch): one row per (lexeme, item) with the
# item's BM25 term-frequency part, so a query reads only the index, never each matching row's
# tsvector (ts_rank read every match: ~3 us each, 36 ms at the 95th percentile on 100 k items).
# Kept by a trigger on memory_items, so every write, merge, purge and expiry keeps them true.
# The weight is tf * (k1 + 1) / (tf + k1 * (1 - b + b * length / 32)): k1 1.2, b 0.75, and a
# fixed average length (32 lexemes), as a store's average would change every weight on each write.
_TERMS_TABLE = (
    "CREATE TABLE IF NOT EXISTS memory_terms (lexeme text NOT NULL, item_id integer NOT NULL, "
    "weight real NOT NULL, PRIMARY KEY (lexeme, item_id) INCLUDE (weight))"
)
_TERMS_OF = (
    "SELECT t.lexeme, {item}.id, "
    "(greatest(cardinality(t.positions), 1) * 2.2 / (greatest(cardinality(t.positions), 1) "
    "+ 1.2 * (0.25 + 0.75 * l.n / 32.0)))::real "
    "FROM {rows}LATERAL (SELECT coalesce(sum(greatest(cardinality(u.positions), 1)), 0) AS n "
    "FROM unnest({item}.tsv) AS u) AS l, unnest({item}.tsv) AS t"
)
# Built from the constants above only: no value reaches it.
_TERMS_SYNC = (
    "CREATE OR REPLACE FUNCTION memory_terms_sync() "  # noqa: S608
    "RETURNS trigger LANGUAGE plpgsql AS $body$ "
    "BEGIN "
    "IF TG_OP <> 'INSERT' THEN "
    "DELETE FROM memory_terms WHERE lexeme = ANY (tsvector_to_array(OLD.tsv)) AND item_id = OLD.id; "
    "END IF; "
    "IF TG_OP <> 'DELETE' THEN "
    "INSERT INTO memory_terms (lexeme, item_id, weight) " + _TERMS_OF.format(item="NEW", rows="") + "; "
    "END IF; "
    "RETURN NULL; "
    "END $body$"
)


def _v14_memory_terms(conn: Connection) -> None:
    if conn.dialect.name != "postgresql":
        return
    for statement in (
        _TERMS_TABLE,
        _TERMS_SYNC,
        "CREATE OR REPLACE TRIGGER memory_terms_write AFTER INSERT OR DELETE ON memory_items "
        "FOR EACH ROW EXECUTE FUNCTION memory_terms_sync()",
        # A merge changes the tags (so the tsvector): the item's postings are written again.
        "CREATE OR REPLACE TRIGGER memory_terms_change AFTER UPDATE OF text, tags ON memory_items "
        "FOR EACH ROW WHEN (OLD.tsv IS DISTINCT FROM NEW.tsv) EXECUTE FUNCTION memory_terms_sync()",
        # The items stored before this version.
        "INSERT INTO memory_terms (lexeme, item_id, weight) "
        + _TERMS_OF.format(item="memory_items", rows="memory_items, ")
        + " ON CONFLICT DO NOTHING",
        "ANALYZE memory_terms",
    ):
        conn.exec_driver_sql(statement)


def _v15_job_budget(conn: Connection) -> None:
    _add_missing(conn, "jobs", "budget TEXT")


MIGRATIONS: tuple[Callable[[Connection], None], ...] = (
    _v1_runs_and_events,
    _v2_resume_sessions_memory,
    _v3_jobs,
    _v4_job_replies,
    _v5_job_sessions,
    _v6_channel_messages,
    _v7_channel_signatures,
    _v8_workers,
    _v9_long_term_memory,
    _v10_notes,
    _v11_job_trace,
    _v12_budgets,
    _v13_memory_scope_id,
    _v14_memory_terms,
    _v15_job_budget,
)
LATEST_VERSION = len(MIGRATIONS)

_PG_LOCK_KEY = 0x5757_0001  # arbitrary, fixed: "the steward schema" advisory lock


def _migrate(conn: Connection) -> int:
    if conn.dialect.name == "postgresql":
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_LOCK_KEY})
    schema_version.create(conn, checkfirst=True)
    current = conn.execute(sa.select(schema_version.c.version)).scalar_one_or_none()
    if current is None:
        conn.execute(schema_version.insert().values(id=1, version=0))
        current = 0
    if current > LATEST_VERSION:
        raise StewardError(
            f"the store's schema is version {current} but this Steward knows up to {LATEST_VERSION}; "
            "upgrade Steward or point [store] url at another database"
        )
    for step in MIGRATIONS[current:]:
        step(conn)
    # Written even when nothing changed: a database opened read-only fails here, at open time,
    # with a clear error, rather than at the first append.
    conn.execute(schema_version.update().values(version=LATEST_VERSION))
    return LATEST_VERSION - current


async def migrate(engine: AsyncEngine) -> int:
    """Bring the database up to ``LATEST_VERSION``; return how many migrations were applied."""
    async with write_transaction(engine) as conn:
        return await conn.run_sync(_migrate)


async def current_version(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        version = (await conn.execute(sa.select(schema_version.c.version))).scalar_one_or_none()
    return version or 0
