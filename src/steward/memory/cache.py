"""The model cache: a reply reused for a request seen before (exact) or close enough (similar).

Off by default (``[cache]``). ``CachingModel`` wraps a model like any other wrapper:

* exact: the key is the sha256 of the whole request as sent (model, system prompt and working
  memory, messages, tools, settings); a hit replays the stored reply as the same stream items.
  Only the tool durations the working memory shows ("Duration: 3ms") are left out of the key,
  so that a run repeated step for step hits at every step;
* similar (needs an embedder): only for the first step of a run, whose request is the static
  prompt plus the user's goal. The key is the prompt's hash (static prompt, tools, settings) and
  the goal's vector; a hit is the nearest stored goal under the same prompt and model with
  cosine >= ``threshold`` that names the same literals (file names, numbers, quoted words:
  ``literals``), which embeddings hardly tell apart. Later steps carry tool results: only the
  exact cache serves them.

A reply is stored only if replaying it is harmless: every tool it calls changes nothing
(``read_only_tool``, or the tool's own ``read_only`` flag), unless ``side_effects = true``.
Replaying a ``write_file`` decided for another request would write again, unasked. Entries
live ``ttl_s`` seconds; expired ones are never served and are deleted when their prompt is
written again. Each lookup is announced as a ``Notice`` (``CacheNote.message``), which the
loop records as a ``model_notice`` signal and a rebuilt run replays: hits and misses are in
the run's log, and ``runs show`` sums them. A cache that cannot be read or written (the store
is busy, the embedder unreachable) is a miss, never a failed run.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from steward.errors import ConfigError
from steward.models.base import (
    AssistantMessage,
    Model,
    ModelRequest,
    ModelResponse,
    Notice,
    StreamItem,
    TextDelta,
    Thinking,
    ThinkingDelta,
    ToolCall,
    ToolSpec,
    Usage,
    UserMessage,
)
from steward.phases import AGENT_STEP
from steward.store.engine import write_transaction
from steward.store.schema import model_cache

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

    from steward.config import CacheSettings, Config
    from steward.embed.base import Embedder

__all__ = [
    "READ_ONLY_TOOLS",
    "CacheNote",
    "CachingModel",
    "ModelCache",
    "cache_notes",
    "cached_model",
    "exact_key",
    "literals",
    "prompt_hash",
    "read_only_tool",
    "reply_is_reusable",
    "similar_group",
]

#: Steward's tools that change nothing: they read files, search, or recall. ``bash`` is opaque
#: (any command may write), ``fetch_url`` reaches out, and a tool not named here (a user's, an
#: MCP server's without ``readOnlyHint``) is taken to have side effects.
READ_ONLY_TOOLS = frozenset(
    {
        "read_file", "list_dir", "glob", "grep", "recall_output", "search_history",
        "read_rules", "find_skill", "discover_tools", "recall", "related",
    }
)  # fmt: skip

#: Similar entries compared per lookup: the newest under the same prompt and model.
SIMILAR_SCAN = 2_000

_TOKEN = re.compile(r"'[^']*'|\"[^\"]*\"|`[^`]*`|\S+")
_LITERAL = re.compile(r"[\d_/\\]|\w\.\w")
_DURATION = re.compile(r"^(\s*Duration: )\d+ms$", re.M)
_NOTE = re.compile(
    r"^model cache (?P<outcome>hit|miss) \((?P<kind>exact|similar)(?:, (?:best )?(?P<sim>[0-9.]+))?\)"
    r"(?:: ~(?P<tokens>[0-9,]+) tokens saved)?$"
)


def read_only_tool(name: str) -> bool:
    """Whether Steward knows the tool ``name`` to change nothing (see ``READ_ONLY_TOOLS``)."""
    return name in READ_ONLY_TOOLS


def reply_is_reusable(
    message: AssistantMessage, read_only: Callable[[str], bool], tools: Sequence[ToolSpec] = ()
) -> bool:
    """Whether replaying ``message`` for another request is harmless: it says something or calls
    only tools that change nothing. An ``agent_step`` is judged by the tool its ``act`` runs;
    its other phases only record the agent's own cycle. Malformed calls are not kept."""
    if not message.text and not message.tool_calls:
        return False
    flagged = {spec.name for spec in tools if spec.read_only}

    def harmless(name: object) -> bool:
        return isinstance(name, str) and (read_only(name) or name in flagged)

    for call in message.tool_calls:
        if call.arguments_error is not None:
            return False
        if call.name != AGENT_STEP:
            if not harmless(call.name):
                return False
            continue
        if call.arguments.get("phase") == "act":
            action = call.arguments.get("action")
            if not isinstance(action, Mapping) or not harmless(action.get("tool_name")):
                return False
    return True


# --- keys -----------------------------------------------------------------------------------


def _digest(value: object) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _stable(text: str) -> str:
    return _DURATION.sub(r"\g<1>?", text)


def prompt_hash(request: ModelRequest) -> str:
    """The hash of what a request holds besides its messages: the system prompt and working
    memory, the tools as the model sees them, and the settings that shape a reply."""
    tools = [[t.name, t.description, t.parameters] for t in request.tools]
    return _digest(
        {
            "system": request.system,
            "context": _stable(request.context),
            "tools": tools,
            "max_tokens": request.max_tokens,
            "temperature": request.temperature,
            "purpose": request.purpose,
        }
    )


def exact_key(model: str, request: ModelRequest) -> str:
    """The sha256 of the whole request as sent to ``model``."""
    messages = [{"role": m.role, **dataclasses.asdict(m)} for m in request.messages]
    return _digest({"model": model, "prompt": prompt_hash(request), "messages": messages})


def similar_group(prompt: str, goal: str) -> str:
    """The ``prompt_hash`` of a similar entry: the prompt's hash and the goal's literals, hashed,
    so that the table's (model, prompt_hash) index finds only goals that name the same."""
    return _digest([prompt, sorted(literals(goal))])


def _similar_key(model: str, prompt: str, goal: str) -> str:
    return "sim:" + _digest([model, prompt, goal])


def literals(text: str) -> frozenset[str]:
    """What a goal names exactly: quoted strings, numbers, paths and identifiers (``notes_04.txt``,
    ``v2``, ``src/app.py``). Embeddings hardly tell "notes_01.txt" from "notes_04.txt" (cosine
    above 0.95 with e5), so a similar hit also needs the same literals."""
    found = set()
    for token in _TOKEN.findall(text):
        word = token.strip(".,;:!?()[]")
        if word[:1] in "'\"`" or _LITERAL.search(word):
            found.add(word.casefold())
    return frozenset(found)


def _goal(request: ModelRequest) -> str | None:
    """The user's goal when the request is a run's first step (nothing but that turn)."""
    messages = request.messages
    if len(messages) == 1 and isinstance(messages[0], UserMessage) and messages[0].content.strip():
        return messages[0].content
    return None


# --- what a lookup says ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CacheNote:
    """One lookup: a hit or a miss, of which kind, the tokens a hit saved, and the similarity
    (of the hit, or of the nearest entry a similar lookup found below the threshold)."""

    hit: bool
    kind: str  # "exact" | "similar"
    tokens_saved: int = 0
    similarity: float | None = None

    @property
    def message(self) -> str:
        sim = "" if self.similarity is None else f", {'' if self.hit else 'best '}{self.similarity:.3f}"
        head = f"model cache {'hit' if self.hit else 'miss'} ({self.kind}{sim})"
        return f"{head}: ~{self.tokens_saved:,} tokens saved" if self.hit else head

    @classmethod
    def parse(cls, message: str) -> CacheNote | None:
        """The note a ``model_notice`` message holds, or None for other notices."""
        found = _NOTE.match(message)
        if found is None:
            return None
        sim = found["sim"]
        return cls(
            hit=found["outcome"] == "hit",
            kind=found["kind"],
            tokens_saved=int((found["tokens"] or "0").replace(",", "")),
            similarity=float(sim) if sim else None,
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "hit": self.hit,
            "kind": self.kind,
            "tokens_saved": self.tokens_saved,
            "similarity": self.similarity,
        }


def cache_notes(messages: Iterable[str]) -> list[CacheNote]:
    """The cache's notes among a run's ``model_notice`` messages, in order."""
    return [note for m in messages if (note := CacheNote.parse(m)) is not None]


# --- the table ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Entry:
    key: str
    model: str
    message: AssistantMessage
    stop_reason: str
    tokens: int


def _encode(message: AssistantMessage, stop_reason: str) -> str:
    reply: dict[str, Any] = {
        "text": message.text,
        "tool_calls": [
            {"id": c.id, "name": c.name, "arguments": dict(c.arguments)} for c in message.tool_calls
        ],
        "thinking": [{"text": t.text, "signature": t.signature} for t in message.thinking],
        "stop_reason": stop_reason,
    }
    return json.dumps(reply, ensure_ascii=False)


def _decode(row: Any) -> Entry:  # a row of key, model, tokens, reply
    data = json.loads(row.reply)
    calls = tuple(ToolCall(c["id"], c["name"], c.get("arguments") or {}) for c in data.get("tool_calls", []))
    thinking = tuple(Thinking(t.get("text", ""), t.get("signature")) for t in data.get("thinking", []))
    message = AssistantMessage(data.get("text", ""), calls, thinking)
    return Entry(row.key, row.model, message, data.get("stop_reason", ""), row.tokens)


class ModelCache:
    """The ``model_cache`` table: entries by key, similar entries by prompt and vector."""

    def __init__(self, engine: AsyncEngine, *, clock: Callable[[], float] = time.time) -> None:
        self.engine, self.clock = engine, clock

    def _live(self) -> sa.ColumnElement[bool]:
        t = model_cache.c
        return sa.or_(t.expires_at.is_(None), t.expires_at > self.clock())

    async def _entry(self, key: str) -> Entry | None:
        t = model_cache.c
        query = sa.select(t.key, t.model, t.tokens, t.reply).where(t.key == key, self._live())
        async with self.engine.connect() as conn:
            row = (await conn.execute(query)).one_or_none()
        return None if row is None else _decode(row)

    async def get(self, key: str) -> Entry | None:
        """The live entry ``key``, its hit counted."""
        entry = await self._entry(key)
        if entry is not None:
            await self._count_hit(key)
        return entry

    async def nearest(
        self, model: str, prompt: str, goal: str, embedder: str, vector: bytes
    ) -> tuple[Entry | None, float | None]:
        """The live similar entry under ``prompt`` and ``model`` whose goal names the same
        literals as ``goal`` and whose vector (by the same embedder) is closest to ``vector``,
        with its cosine; ``(None, None)`` when there is none to compare."""
        import numpy as np

        t = model_cache.c
        query = (
            sa.select(t.key, t.vector)
            .where(
                t.model == model,
                t.prompt_hash == similar_group(prompt, goal),
                t.kind == "similar",
                t.embedder == embedder,
                self._live(),
            )
            .order_by(t.created_at.desc())
            .limit(SIMILAR_SCAN)
        )
        async with self.engine.connect() as conn:
            rows = [r for r in (await conn.execute(query)).all() if len(r.vector or b"") == len(vector)]
        if not rows:
            return None, None
        stored = np.frombuffer(b"".join(r.vector for r in rows), dtype="<f4").reshape(len(rows), -1)
        scores = stored @ np.frombuffer(vector, dtype="<f4")
        best = int(np.argmax(scores))
        entry = await self._entry(rows[best].key)
        return (entry, float(scores[best])) if entry is not None else (None, None)

    async def hit(self, entry: Entry) -> None:
        await self._count_hit(entry.key)

    async def _count_hit(self, key: str) -> None:
        async with write_transaction(self.engine) as conn:
            await conn.execute(
                model_cache.update().where(model_cache.c.key == key).values(hits=model_cache.c.hits + 1)
            )

    async def put(
        self,
        key: str,
        *,
        kind: str,
        model: str,
        prompt: str,
        message: AssistantMessage,
        stop_reason: str,
        tokens: int,
        ttl_s: float,
        last_user: str = "",
        vector: bytes | None = None,
        embedder: str = "",
    ) -> None:
        """Store (or replace) an entry; expired entries under the same prompt go in passing."""
        now = self.clock()
        t = model_cache.c
        row = {
            "key": key, "kind": kind, "model": model, "prompt_hash": prompt, "last_user": last_user,
            "reply": _encode(message, stop_reason), "vector": vector, "embedder": embedder,
            "tokens": tokens, "hits": 0, "created_at": now, "expires_at": now + ttl_s,
        }  # fmt: skip
        async with write_transaction(self.engine) as conn:
            await conn.execute(
                model_cache.delete().where(
                    sa.or_(
                        t.key == key, sa.and_(t.model == model, t.prompt_hash == prompt, t.expires_at <= now)
                    )
                )
            )
            await conn.execute(model_cache.insert().values(**row))

    async def purge_expired(self) -> int:
        """Delete every expired entry; returns how many."""
        async with write_transaction(self.engine) as conn:
            done = await conn.execute(model_cache.delete().where(model_cache.c.expires_at <= self.clock()))
        return int(done.rowcount or 0)


# --- the wrapper ---------------------------------------------------------------------------------


class CachingModel(Model):
    """``model`` behind the cache (see the module's docstring)."""

    def __init__(
        self,
        model: Model,
        *,
        engine: AsyncEngine,
        settings: CacheSettings,
        embedder: Embedder | None,
        read_only: Callable[[str], bool] = read_only_tool,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.model, self.settings, self.embedder, self.read_only = model, settings, embedder, read_only
        self.cache = ModelCache(engine, clock=clock)
        self.name = model.name

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        s = self.settings
        goal = _goal(request) if s.similar and self.embedder is not None else None
        if request.purpose != "step" or not (s.exact or goal is not None):
            async for item in self.model.stream(request):
                yield item
            return
        key, prompt = exact_key(self.name, request), prompt_hash(request)
        entry, note, vector = await self._lookup(key, prompt, goal)
        yield Notice(note.message)
        if entry is not None:
            # The call the cache answered is one the model did not make: a model that answers in
            # order (the scripted one) moves past it, as for a reply replayed from a run's log,
            # so its next reply is the next call's and none is left over as "never used".
            self.model.replayed()
            for item in _replayed(entry, self.name):
                yield item
            return
        async for item in self.model.stream(request):
            if isinstance(item, ModelResponse):
                await self._keep(request, item, key, prompt, goal, vector)
            yield item

    async def _lookup(
        self, key: str, prompt: str, goal: str | None
    ) -> tuple[Entry | None, CacheNote, bytes | None]:
        """The entry to serve (or None), the note saying so, and the goal's vector if made."""
        kind = "exact" if goal is None else "similar"
        try:
            entry = await self.cache.get(key) if self.settings.exact else None
            if entry is not None:
                return entry, CacheNote(True, "exact", entry.tokens), None
            if goal is None:
                return None, CacheNote(False, kind), None
            vector = await self._vector(goal)
            if vector is None:
                return None, CacheNote(False, kind), None
            assert self.embedder is not None
            near, similarity = await self.cache.nearest(self.name, prompt, goal, self.embedder.name, vector)
            if near is not None and similarity is not None and similarity >= self.settings.threshold:
                await self.cache.hit(near)
                return near, CacheNote(True, "similar", near.tokens, round(similarity, 3)), vector
            best = None if similarity is None else round(similarity, 3)
            return None, CacheNote(False, kind, similarity=best), vector
        except sa.exc.SQLAlchemyError:
            return None, CacheNote(False, kind), None

    async def _vector(self, goal: str) -> bytes | None:
        from steward.embed.base import to_bytes

        assert self.embedder is not None
        try:
            vectors = await self.embedder.embed([goal], query=True)
        except Exception:  # an embedder that cannot answer makes a miss, never a failed run
            return None
        return to_bytes(vectors[0]) if len(vectors) else None

    async def _keep(
        self,
        request: ModelRequest,
        response: ModelResponse,
        key: str,
        prompt: str,
        goal: str | None,
        vector: bytes | None,
    ) -> None:
        """Store a reply that is harmless to replay, for the lookups that are on."""
        s = self.settings
        if not s.side_effects and not reply_is_reusable(response.message, self.read_only, request.tools):
            return
        if any(c.arguments_error is not None for c in response.message.tool_calls):
            return
        tokens, message = _tokens(request, response), response.message
        try:
            if s.exact:
                await self.cache.put(
                    key, kind="exact", model=self.name, prompt=prompt, message=message,
                    stop_reason=response.stop_reason, tokens=tokens, ttl_s=s.ttl_s,
                )  # fmt: skip
            if goal is not None and vector is not None and self.embedder is not None:
                await self.cache.put(
                    _similar_key(self.name, prompt, goal), kind="similar", model=self.name,
                    prompt=similar_group(prompt, goal),
                    message=message, stop_reason=response.stop_reason, tokens=tokens, ttl_s=s.ttl_s,
                    last_user=goal, vector=vector, embedder=self.embedder.name,
                )  # fmt: skip
        except sa.exc.SQLAlchemyError:
            return

    def replayed(self) -> None:
        self.model.replayed()

    async def aclose(self) -> None:
        await self.model.aclose()

    def check(self) -> None:
        self.model.check()

    async def probe(self) -> str:
        return await self.model.probe()

    def warnings(self) -> list[str]:
        return self.model.warnings()


def _tokens(request: ModelRequest, response: ModelResponse) -> int:
    """What the call cost, as reported (or estimated) by the provider, else estimated here."""
    usage = response.usage
    if usage.input_tokens or usage.output_tokens:
        return usage.input_tokens + usage.output_tokens
    from steward.models.tokens import estimate_usage

    guess = estimate_usage(request, response.message)
    return guess.input_tokens + guess.output_tokens


def _replayed(entry: Entry, name: str) -> list[StreamItem]:
    """A stored reply as the stream items a provider would give; no tokens were spent on it."""
    items: list[StreamItem] = [ThinkingDelta(t.text) for t in entry.message.thinking if t.text]
    if entry.message.text:
        items.append(TextDelta(entry.message.text))
    items.append(ModelResponse(entry.message, Usage(), model=name, stop_reason=entry.stop_reason or "cached"))
    return items


def cached_model(
    model: Model, config: Config, engine: AsyncEngine | None, embedder: Embedder | None
) -> Model:
    """``model`` behind the cache ``[cache]`` turns on, or ``model`` itself when it is off (or
    when there is no store to keep it in: a run that records nothing caches nothing)."""
    settings = config.cache
    if not (settings.exact or settings.similar) or engine is None:
        return model
    if settings.similar and embedder is None:
        raise ConfigError(
            "[cache] similar = true compares requests by meaning and needs an embedder: set [memory] "
            'embedder = "local" (pip install \'steward[embed]\') or "openai:text-embedding-3-small", '
            "or set [cache] similar = false (exact = true needs no embedder)."
        )
    return CachingModel(model, engine=engine, settings=settings, embedder=embedder, read_only=read_only_tool)
