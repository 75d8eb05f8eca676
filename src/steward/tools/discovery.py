"""Progressive tool discovery: ``discover_tools`` instead of hundreds of schemas.

When the offered tools would take more than ``discovery_share`` of the request budget, or
number more than ``discovery_max_tools`` (mode "auto"; "on" always, "off" never), the model
gets the tools matching ``always_offer`` plus ``discover_tools(query)``. That tool searches
an in-memory SQLite FTS5 index (BM25, prefix terms) over every tool's name, description and
argument names, built-in and MCP alike; the tools it finds join the run's discovered tools
(``DiscoveryToolset.discovered``) and their schemas are offered for the rest of the run.
With an embedder (``[memory] embedder``) that keyword ranking is fused with one by meaning
(``steward.embed.fusion``); the descriptions' vectors are kept in process (``tools._meaning``).
Without one, search is by keyword alone, exactly as before.

Found tools are listed one per line as ``- NAME(arg*, arg): description [origin]``, so a run
rebuilt from its log can read them back (``replayed``) without searching again.
"""

from __future__ import annotations

import json
import re
import sqlite3
import threading
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Any

from steward.errors import ConfigError
from steward.models.base import ToolSpec, schema_chars
from steward.tools.base import ToolContext, ToolResult, Toolset, WrapperToolset

if TYPE_CHECKING:
    from steward.config import ToolsSettings
    from steward.embed.base import Embedder

__all__ = ["DISCOVER_TOOL", "DiscoveryToolset", "ToolIndex", "found_names", "match_expression"]

DISCOVER_TOOL = "discover_tools"
DEFAULT_LIMIT = 5
MAX_LIMIT = 20
# A query is a few words; more only dilutes the ranking (and bounds the MATCH expression).
MAX_QUERY_WORDS = 16
# Shorter words match exactly: as prefixes ("a"*, "to"*) they would match nearly every tool.
MIN_PREFIX_LEN = 3
DESCRIPTION_CAP = 200

# Column weights for bm25() (name, description, args, origin): a word in the tool's name says
# far more than the same word in its prose.
_SEARCH = (
    "SELECT rowid FROM tools WHERE tools MATCH ? ORDER BY bm25(tools, 6.0, 1.0, 0.75, 1.0), rowid LIMIT ?"
)

# Words that carry no meaning about what a tool does; dropped unless nothing else is left.
_STOP_WORDS = frozenset({
    "a", "an", "and", "any", "are", "as", "at", "be", "by", "can", "for", "from", "i", "in", "is", "it",
    "me", "my", "of", "on", "or", "please", "that", "the", "this", "to", "tool", "tools", "want",
    "which", "with", "you",
})  # fmt: skip

_DISCOVER_SPEC = ToolSpec(
    name=DISCOVER_TOOL,
    description=(
        "Search all tools available to you by what they do: their names, descriptions and argument "
        "names, including the tools of connected servers whose schemas are not shown yet. The tools "
        "it finds become callable, and their full schemas are shown to you from the next step on. "
        'Describe the task in a few plain words, e.g. "create calendar event" or "list pull requests".'
    ),
    parameters={
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "A few words saying what the tool should do."},
            "limit": {
                "type": "integer",
                "description": f"How many tools to return, 1 to {MAX_LIMIT}.",
                "default": DEFAULT_LIMIT,
            },
        },
        "required": ["query"],
    },
)

_CHUNK = re.compile(r"[^\W_]+")
# Boundaries inside a chunk: "createIssue" -> create|Issue, "HTTPServer" -> HTTP|Server.
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_FOUND_LINE = re.compile(r"^- ([^\s(]+)\(", re.MULTILINE)


def words(text: str) -> list[str]:
    """Lower-case words of ``text``: split at anything not a letter or digit and at camelCase,
    so ``github__create_issue`` and ``createIssue`` both yield ``create`` and ``issue``."""
    out: list[str] = []
    for chunk in _CHUNK.findall(text):
        parts = _CAMEL.sub(" ", chunk).split()
        out.extend(p.lower() for p in parts)
        if len(parts) > 1:
            out.append(chunk.lower())  # the whole word too: "createissue" still finds createIssue
    return out


def query_terms(query: str) -> list[str]:
    """The words of a query worth searching for: unique, in order, without stop words."""
    found = list(dict.fromkeys(words(query)))
    return ([w for w in found if w not in _STOP_WORDS] or found)[:MAX_QUERY_WORDS]


def _is_prefix(term: str) -> bool:
    return len(term) >= MIN_PREFIX_LEN


def match_expression(query: str) -> str:
    """A safe FTS5 MATCH expression for a user's query ("" when it has no words).

    The query is never passed through: FTS5 syntax in it (quotes, ``*``, ``-``, ``:``,
    parentheses, NEAR, AND/OR/NOT) would be a syntax error or change the meaning. Each word
    becomes a quoted term (a prefix term when long enough), OR-combined; bm25 ranks them.
    """
    return " OR ".join(f'"{t}"*' if _is_prefix(t) else f'"{t}"' for t in query_terms(query))


def _index_text(text: str) -> str:
    """``text`` with its names split into words, for the tokenizer to see both forms."""
    return " ".join(words(text))


def _arguments(spec: ToolSpec) -> list[tuple[str, bool, str]]:
    """(name, required, description) of each argument the schema declares."""
    properties = spec.parameters.get("properties")
    if not isinstance(properties, Mapping):
        return []
    required = spec.parameters.get("required")
    needed = set(required) if isinstance(required, list) else set()
    out = []
    for name, schema in properties.items():
        about = schema.get("description", "") if isinstance(schema, Mapping) else ""
        out.append((str(name), name in needed, about if isinstance(about, str) else ""))
    return out


def _one_line(description: str) -> str:
    line = next((ln.strip() for ln in description.splitlines() if ln.strip()), "")
    return line if len(line) <= DESCRIPTION_CAP else line[: DESCRIPTION_CAP - 1].rstrip() + "…"


def _found_line(spec: ToolSpec) -> str:
    args = ", ".join(f"{name}*" if required else name for name, required, _ in _arguments(spec))
    origin = f" [{spec.origin}]" if spec.origin else ""
    return f"- {spec.name}({args}): {_one_line(spec.description)}{origin}"


def found_names(text: str) -> list[str]:
    """The tool names listed in a ``discover_tools`` result."""
    return _FOUND_LINE.findall(text)


class ToolIndex:
    """An in-memory FTS5 index over tool specs; rows are positions in the indexed list."""

    def __init__(self) -> None:
        self._db: sqlite3.Connection | None = None
        # One agent's toolset may serve runs on several threads; searches are short.
        self._lock = threading.Lock()
        self._name_words: list[frozenset[str]] = []

    def rebuild(self, specs: Sequence[ToolSpec]) -> None:
        rows = []
        for i, spec in enumerate(specs):
            args = " ".join(f"{_index_text(name)} {about}" for name, _, about in _arguments(spec))
            rows.append((i, _index_text(spec.name), spec.description, args, _index_text(spec.origin)))
        name_words = [frozenset(words(spec.name)) for spec in specs]
        with self._lock:
            self._name_words = name_words
            if self._db is None:
                self._db = sqlite3.connect(":memory:", check_same_thread=False)
            db = self._db
            db.execute("DROP TABLE IF EXISTS tools")
            db.execute("CREATE VIRTUAL TABLE tools USING fts5(name, description, args, origin)")
            db.executemany(
                "INSERT INTO tools(rowid, name, description, args, origin) VALUES (?, ?, ?, ?, ?)", rows
            )

    def search(self, query: str, limit: int) -> list[int]:
        """Positions of the tools that best match ``query``, best first."""
        assert self._db is not None, "search before rebuild"
        terms = query_terms(query)
        if not terms:
            return []
        with self._lock:
            rows = self._db.execute(_SEARCH, (match_expression(query), max(limit * 10, 50)))
            found = [row[0] for row in rows]
            # bm25 barely counts a word most tools share ("search" is in many argument
            # descriptions), and its length normalisation can then outweigh a name match. So
            # tools whose names hold more of the query's words come first; bm25 orders the rest
            # (the sort is stable).
            found.sort(key=lambda row: -self._name_hits(row, terms))
        return found[:limit]

    def _name_hits(self, row: int, terms: Sequence[str]) -> int:
        name = self._name_words[row]
        return sum(any(w.startswith(t) for w in name) if _is_prefix(t) else t in name for t in terms)

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None


class DiscoveryToolset(WrapperToolset):
    """Offers ``discover_tools`` instead of every schema when the tools would crowd the request."""

    def __init__(
        self,
        wrapped: Toolset,
        *,
        settings: ToolsSettings,
        budget_chars: int,
        embedder: Embedder | None = None,
    ) -> None:
        super().__init__(wrapped)
        self.settings = settings
        self.budget_chars = budget_chars
        #: With an embedder, the keyword ranking is fused with one by meaning (``_ranked``).
        self.embedder = embedder
        self._index = ToolIndex()
        # What the wrapped toolset offered last, and what was derived from it.
        self._specs: Sequence[ToolSpec] | None = None
        self._signature: tuple[tuple[str, str], ...] = ()
        self._by_name: dict[str, ToolSpec] = {}
        self._active = False
        self._indexed: tuple[tuple[str, str], ...] | None = None
        # The list handed out while active, for (signature, discovered names).
        self._offered: list[ToolSpec] = []
        self._offered_key: tuple[tuple[tuple[str, str], ...], frozenset[str]] | None = None

    # --- what a run has found ---------------------------------------------------------------

    def discovered(self, ctx: ToolContext) -> frozenset[str]:
        """The tools the run of ``ctx`` has found or called: their schemas are offered to it."""
        return frozenset(self._found(ctx))

    def _found(self, ctx: ToolContext) -> set[str]:
        # Per run, not in the wrapper (one agent's toolset serves many runs at once): the run's
        # context holds it (``RunScopes``); a run rebuilt from its log gets it back in ``replayed``.
        return ctx.scope(self, set[str])

    # --- offering ---------------------------------------------------------------------------

    async def get_tools(self, ctx: ToolContext) -> Sequence[ToolSpec]:
        specs = await self.wrapped.get_tools(ctx)
        self._observe(specs)
        if not self._active:
            return specs  # the same object: the context's size cache keys on it
        discovered = self.discovered(ctx)
        key = (self._signature, discovered)
        if key != self._offered_key:
            self._offered_key, self._offered = key, self._offer(discovered)
        return self._offered

    def _observe(self, specs: Sequence[ToolSpec]) -> None:
        if specs is self._specs:
            return
        signature = tuple((s.name, s.fingerprint) for s in specs)
        if signature == self._signature and self._by_name:
            self._specs = specs
            return  # a new list of the same tools: keep what was derived
        by_name = {s.name: s for s in specs}
        active = self._should_discover(specs)
        if active and DISCOVER_TOOL in by_name:
            raise ConfigError(
                f"A tool is named {DISCOVER_TOOL!r}, which tool discovery offers itself; rename that tool "
                'or set [tools] discovery = "off" in steward.toml.'
            )
        self._specs, self._signature, self._by_name, self._active = specs, signature, by_name, active

    def _should_discover(self, specs: Sequence[ToolSpec]) -> bool:
        mode = self.settings.discovery
        if mode != "auto":
            return bool(mode == "on")
        if len(specs) > self.settings.discovery_max_tools:
            return True
        return schema_chars(specs) > self.settings.discovery_share * self.budget_chars

    def _offer(self, discovered: frozenset[str]) -> list[ToolSpec]:
        patterns = self.settings.always_offer
        always = [s for s in self._by_name.values() if any(fnmatchcase(s.name, p) for p in patterns)]
        shown = {s.name for s in always}
        # Discovered tools come after discover_tools: the start of the list stays the same as
        # tools are found, which keeps providers' prompt caches warm.
        found = [s for s in self._by_name.values() if s.name in discovered and s.name not in shown]
        return [*always, _DISCOVER_SPEC, *found]

    # --- calling ----------------------------------------------------------------------------

    async def call_tool(self, name: str, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        if name == DISCOVER_TOOL and (self._active or name not in self._by_name):
            return await self._discover(arguments, ctx)
        if name not in self._by_name:
            self._observe(await self.wrapped.get_tools(ctx))  # the list may have changed since
        if name in self._by_name:
            # A tool called before it was discovered still runs: refusing would only cost the
            # model a turn to ask for what it already knows.
            self._found(ctx).add(name)
        elif self._active and not self.wrapped.claims(name):
            # The wrapped error would list every tool by name, which is what discovery avoids.
            # (A claimed tool, e.g. of a server that is down, goes on: its toolset explains.)
            return ToolResult(
                f"Unknown tool {name!r}. Call {DISCOVER_TOOL} with a few words about what you need "
                "to find the right tool.",
                is_error=True,
            )
        return await self.wrapped.call_tool(name, arguments, ctx)

    async def _discover(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        raw = arguments.get("query")
        query = raw if isinstance(raw, str) else ""
        limit = _limit(arguments.get("limit", DEFAULT_LIMIT))
        if not query_terms(query) or limit is None:
            return ToolResult(
                f"{DISCOVER_TOOL} needs a query of a few words saying what the tool should do, and an "
                f'optional whole-number limit (1 to {MAX_LIMIT}), e.g. {{"query": "create calendar event", '
                f'"limit": 5}}. Got {json.dumps(dict(arguments), default=str)[:200]}.',
                is_error=True,
            )
        self._observe(await self.wrapped.get_tools(ctx))
        specs = list(self._by_name.values())
        if self._indexed != self._signature:
            self._index.rebuild(specs)
            self._indexed = self._signature
        try:
            hits = self._index.search(query, limit if self.embedder is None else MAX_LIMIT * 2)
        except sqlite3.OperationalError as exc:  # defensive: the expression is built to be valid
            return ToolResult(f"The search failed ({exc}); try plain words.", is_error=True)
        note = ""
        if self.embedder is not None:
            hits, note = await self._ranked(query, hits, specs, limit)
        if not hits:
            return ToolResult(_no_match(query, specs))
        found = [specs[i] for i in hits]
        self._found(ctx).update(s.name for s in found)
        counted = f"{len(found)} tool" + ("s" if len(found) > 1 else "")
        lines = [f"Found {counted} for {query!r}; you can call them now:"]
        lines += [_found_line(s) for s in found]
        lines.append(f"(* marks a required argument. Call {DISCOVER_TOOL} again with other words for more.)")
        return ToolResult("\n".join(lines) + note)

    async def _ranked(
        self, query: str, keyword: list[int], specs: Sequence[ToolSpec], limit: int
    ) -> tuple[list[int], str]:
        """``keyword`` fused with the tools closest in meaning to ``query``, at most ``limit``;
        the keyword list alone, with a note, when the embedder fails."""
        from steward.embed.fusion import fuse
        from steward.tools._meaning import by_meaning

        assert self.embedder is not None
        texts = [f"{s.name}: {s.description}\n" + " ".join(n for n, _, _ in _arguments(s)) for s in specs]
        try:
            meaning = await by_meaning(self.embedder, query, texts)
        except Exception as exc:  # a server that is down: the words still find tools
            failed = f"\n(Search by meaning failed: {type(exc).__name__}; matched by words only.)"
            return keyword[:limit], failed
        return [f.key for f in fuse(keyword, meaning)][:limit], ""

    async def spec_of(self, name: str, ctx: ToolContext) -> ToolSpec | None:
        # Undiscovered tools keep their specs here (the wrapped lookup): the safety checks of
        # a direct call need them as much as those of an offered one.
        return _DISCOVER_SPEC if name == DISCOVER_TOOL else await self.wrapped.spec_of(name, ctx)

    def replayed(self, name: str, arguments: Mapping[str, Any], result: ToolResult, ctx: ToolContext) -> None:
        # Before the first listing the tools are not known; an unknown name is then harmless,
        # since only tools that exist are ever offered.
        known, found = self._by_name, self._found(ctx)
        if name == DISCOVER_TOOL:
            if not result.is_error:
                found.update(n for n in found_names(result.content) if not known or n in known)
        elif not known or name in known:
            found.add(name)
        self.wrapped.replayed(name, arguments, result, ctx)

    async def aclose(self) -> None:
        self._index.close()
        self._indexed = None  # a later search builds it again
        await self.wrapped.aclose()


def _limit(value: object) -> int | None:
    """The requested number of results, clamped to 1..MAX_LIMIT; None when not a number."""
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        return None
    return max(1, min(MAX_LIMIT, value))


def _no_match(query: str, specs: Iterable[ToolSpec]) -> str:
    sources = Counter(s.origin or "built-in" for s in specs)
    listed = ", ".join(f"{origin} ({count})" for origin, count in sorted(sources.items()))
    return (
        f"No tools match {query!r}. Try other words: what the tool does (a verb and a thing, e.g. "
        f'"send email", "read spreadsheet"), or the name of the service. Tools come from: {listed}.'
    )
