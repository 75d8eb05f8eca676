"""The model cache on a replayed workload: 20 goals, the same 20 again, then 20 paraphrases.

    .venv/bin/python bench/cache.py [--postgres URL] [--threshold 0.95] [--embedder hash|local|both]

Each goal is a real run (``Agent`` with a store, the built-in tools, no sandbox) against a model
that answers like a careful agent (a plan, a ``read_file`` of the file the goal names, an end)
and reports the usage a server would (estimated tokens). The cache has ``exact`` and ``similar``
on. Printed per pass: model requests made, cache lookups, hits (exact, similar), hit rate, tokens
saved and spent, and wrong hits: a similar hit whose stored plan was made for another goal than
this one or its paraphrase (what a too-low threshold costs). The paraphrases are small rewordings; some goals
differ from others only in the file they name, so that a loose threshold shows its errors.
Then the table's own cost with 2,000 similar entries under one prompt: a write, an exact hit
and miss, and similar lookups with 1 and with 1,000 candidates (p50/p95 of 100).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from steward import Agent
from steward.config import CacheSettings, Config
from steward.embed.base import Embedder, normalise, to_bytes
from steward.events import SignalEvent
from steward.memory.cache import SIMILAR_SCAN, CacheNote, CachingModel, ModelCache, similar_group
from steward.models.base import (
    AssistantMessage,
    Model,
    ModelRequest,
    ModelResponse,
    StreamItem,
    ToolCall,
    UserMessage,
)
from steward.models.tokens import estimate_usage
from steward.store.events import EventStore, open_store
from steward.store.schema import model_cache

FILES = [f"notes_{n:02d}.txt" for n in range(1, 11)] + ["README.md", "setup.cfg", "CHANGES.md", "LICENSE"]
GOALS = [
    ("How many lines does notes_01.txt have?", "How many lines are there in notes_01.txt?"),
    ("How many lines does notes_02.txt have?", "How many lines are in notes_02.txt?"),
    ("How many lines does notes_03.txt have?", "how many lines does notes_03.txt have"),
    ("Summarise what README.md says about installation.", "Summarize what README.md says about installing."),
    ("Which version does setup.cfg declare?", "What version does setup.cfg declare?"),
    (
        "List the changes CHANGES.md records for the last release.",
        "List the changes in CHANGES.md for the last release.",
    ),
    (
        "Which license is the project under? Look at LICENSE.",
        "Which licence is the project under? Look at LICENSE.",
    ),
    (
        "Find the word 'deadline' in notes_04.txt and quote its line.",
        "Find the word 'deadline' in notes_04.txt and quote the line.",
    ),
    ("Does notes_05.txt mention a meeting on Monday?", "Does notes_05.txt mention a Monday meeting?"),
    ("What is the first sentence of notes_06.txt?", "What's the first sentence of notes_06.txt?"),
    ("Count the TODO items in notes_07.txt.", "Count the TODO items in notes_07.txt please."),
    ("Who is named as the author in README.md?", "Who is named as author in README.md?"),
    ("What does notes_08.txt say about the budget?", "What does notes_08.txt say regarding the budget?"),
    ("Read notes_09.txt and tell me its title.", "Read notes_09.txt and tell me the title."),
    ("Is there a phone number in notes_10.txt?", "Is there any phone number in notes_10.txt?"),
    ("How many lines does notes_04.txt have?", "How many lines are there in notes_04.txt?"),
    ("How many lines does notes_05.txt have?", "How many lines are in notes_05.txt?"),
    ("Which Python versions does setup.cfg support?", "Which versions of Python does setup.cfg support?"),
    ("What is the date of the last entry in CHANGES.md?", "What's the date of the last entry in CHANGES.md?"),
    ("Does README.md explain how to run the tests?", "Does README.md explain how to run tests?"),
]
_FILE = re.compile(r"[\w.-]+\.(?:txt|md|cfg)|LICENSE")


def _same_goal(asked: str, planned: str) -> bool:
    """Whether the plan a hit replayed was made for this goal or its paraphrase."""
    return any(asked in pair and planned in pair for pair in GOALS)


def careful_agent(request: ModelRequest) -> AssistantMessage:
    """Plan, read the file the goal names, end: the same request always gets the same reply."""
    goal = next(m.content for m in request.messages if isinstance(m, UserMessage))
    name = (_FILE.findall(goal) or ["README.md"])[0]
    done = sum(1 for m in request.messages if getattr(m, "role", "") == "assistant")
    if done == 0:
        plan = {"goal": goal, "sub_tasks": [{"id": 1, "title": f"read {name}"}]}
        return AssistantMessage(
            tool_calls=(ToolCall("", "agent_step", {"phase": "plan", "summary": "plan", "plan": plan}),)
        )
    if done == 1:
        return AssistantMessage(tool_calls=(ToolCall("", "read_file", {"path": name}),))
    end = {
        "phase": "end",
        "summary": "answer",
        "end_status": "solved",
        "end_message": f"Read {name}: it has 3 lines.",
    }
    return AssistantMessage(tool_calls=(ToolCall("", "agent_step", end),))


class CountingModel(Model):
    """``careful_agent`` with the usage a server would report (estimated), counting requests."""

    def __init__(self) -> None:
        self.name = "bench:careful"
        self.requests = 0
        self.tokens = 0

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        self.requests += 1
        message = careful_agent(request)
        usage = estimate_usage(request, message)
        self.tokens += usage.input_tokens + usage.output_tokens
        yield ModelResponse(message, usage, model=self.name, stop_reason="end")


async def one_pass(
    store: EventStore, model: CachingModel, inner: CountingModel, goals: list[str], workspace: Path
) -> dict[str, Any]:
    config = Config(cache=model.settings)
    before_requests, before_tokens = inner.requests, inner.tokens
    notes: list[CacheNote] = []
    wrong = 0
    started = time.perf_counter()
    for goal in goals:
        agent = Agent(model, config=config, store=store, sandbox=False)
        result = await agent.run(goal, workspace=workspace)
        events = await store.events(result.run.id)
        run_notes = [n for e in events if isinstance(e, SignalEvent) and (n := CacheNote.parse(e.message))]
        notes += run_notes
        plan = next((e for e in events if e.type == "plan"), None)
        if run_notes and run_notes[0].hit and run_notes[0].kind == "similar" and plan is not None:
            wrong += not _same_goal(goal, plan.data()["goal"])
    hits = [n for n in notes if n.hit]
    return {
        "requests": inner.requests - before_requests,
        "lookups": len(notes),
        "exact": sum(n.kind == "exact" for n in hits),
        "similar": sum(n.kind == "similar" for n in hits),
        "hit_rate": len(hits) / len(notes) if notes else 0.0,
        "saved": sum(n.tokens_saved for n in hits),
        "spent": inner.tokens - before_tokens,
        "wrong": wrong,
        "seconds": time.perf_counter() - started,
    }


async def empty_cache(store: EventStore) -> None:
    """The scratch store's model cache, made again (empty, and with this version's columns)."""
    async with store.engine.begin() as conn:
        await conn.run_sync(lambda sync: model_cache.drop(sync, checkfirst=True))
        await conn.run_sync(model_cache.create)


def _ms(samples: list[float]) -> str:
    samples = sorted(samples)
    p50, p95 = samples[len(samples) // 2], samples[int(len(samples) * 0.95)]
    return f"p50 {p50 * 1000:6.1f} ms  p95 {p95 * 1000:6.1f} ms"


_WORDS = [
    "apples",
    "budgets",
    "cables",
    "dragons",
    "engines",
    "forests",
    "gardens",
    "harbours",
    "islands",
    "journeys",
    "kettles",
    "lanterns",
    "meadows",
    "novels",
    "oceans",
    "planets",
    "quarries",
    "rivers",
    "saddles",
    "tunnels",
    "umbrellas",
    "valleys",
    "wagons",
    "yachts",
    "anchors",
    "bridges",
    "castles",
    "deserts",
    "glaciers",
    "hammers",
    "ladders",
    "mirrors",
]


def _goals(entries: int) -> list[str]:
    """Half name a file (one literal each), half name none: all of those are candidates at once."""
    half = entries // 2
    named = [f"How many lines does notes_{n}.txt have?" for n in range(half)]
    plain = [f"Summarise what the notes say about {a} and {b}" for a in _WORDS for b in _WORDS][
        : entries - half
    ]
    return named + plain


async def latency(url: str, entries: int = SIMILAR_SCAN, samples: int = 100) -> None:
    """The table's own cost: a write, an exact hit and miss, similar lookups with one candidate
    (the goal names a file) and with ``entries / 2`` (it names nothing)."""
    import numpy as np

    async with await open_store(url) as store:
        await empty_cache(store)
        cache = ModelCache(store.engine)
        goals = _goals(entries)
        vectors = normalise(np.random.default_rng(0).normal(size=(entries, 384)))
        reply = AssistantMessage(text="An answer of a few words. " * 8)
        puts = []
        for n, goal in enumerate(goals):
            started = time.perf_counter()
            await cache.put(
                f"sim:{n}", kind="similar", model="m", prompt=similar_group("p", goal), message=reply,
                stop_reason="end", tokens=900, ttl_s=3600, last_user=goal, vector=to_bytes(vectors[n]),
                embedder="e",
            )  # fmt: skip
            puts.append(time.perf_counter() - started)

        async def timed(call: Any) -> str:
            spent = []
            for n in range(samples):
                started = time.perf_counter()
                await call(n)
                spent.append(time.perf_counter() - started)
            return _ms(spent)

        def near(goal: str, n: int) -> Any:
            return cache.nearest("m", "p", goal, "e", to_bytes(vectors[n]))

        hit = await timed(lambda n: cache.get(f"sim:{n}"))
        miss = await timed(lambda n: cache.get(f"none:{n}"))
        one = await timed(lambda n: near(f"How many lines has notes_{n}.txt?", n))
        many = await timed(lambda n: near(f"Summarise the notes about {_WORDS[n % 32]}", n))
        print(f"\n{store.dialect}, {entries:,} similar entries under one prompt:")
        print(f"  store an entry          {_ms(puts)}")
        print(f"  exact hit               {hit}   (the lookup and its hit count)")
        print(f"  exact miss              {miss}")
        print(f"  similar, 1 candidate    {one}   (without the embedder's time)")
        print(f"  similar, {entries - entries // 2:,} candidates {many}")


def embedder_named(name: str) -> Embedder:
    if name == "local":
        from steward.embed.local import LocalEmbedder

        return LocalEmbedder()
    from steward.testing.fake_embed import HashEmbedder

    return HashEmbedder()


async def bench(url: str, embedder_name: str, threshold: float, workspace: Path) -> None:
    embedder = embedder_named(embedder_name)
    inner = CountingModel()
    async with await open_store(url) as store:
        await empty_cache(store)  # every pass starts from an empty cache
        settings = CacheSettings(exact=True, similar=True, threshold=threshold)
        model = CachingModel(inner, engine=store.engine, settings=settings, embedder=embedder)
        passes = [
            ("20 goals, cold", [g for g, _ in GOALS]),
            ("the same 20 again", [g for g, _ in GOALS]),
            ("20 paraphrases", [p for _, p in GOALS]),
        ]
        print(f"\n{store.dialect}, embedder {embedder.name}, threshold {threshold}")
        print(
            f"{'pass':<20} {'requests':>8} {'lookups':>8} {'exact':>6} {'similar':>8} {'hit rate':>9} {'saved':>9} {'spent':>9} {'wrong':>6} {'s':>6}"
        )
        total_saved = total_spent = 0
        for label, goals in passes:
            r = await one_pass(store, model, inner, goals, workspace)
            total_saved += r["saved"]
            total_spent += r["spent"]
            print(
                f"{label:<20} {r['requests']:>8} {r['lookups']:>8} {r['exact']:>6} {r['similar']:>8} "
                f"{r['hit_rate']:>8.0%} {r['saved']:>9,} {r['spent']:>9,} {r['wrong']:>6} {r['seconds']:>6.2f}"
            )
        share = total_saved / (total_saved + total_spent) if total_saved + total_spent else 0.0
        print(
            f"{'all 60 runs':<20} tokens saved {total_saved:,} of {total_saved + total_spent:,} ({share:.0%})"
        )
    await embedder.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--postgres",
        help="also on this PostgreSQL database (a scratch store: its model cache table is made again)",
    )
    parser.add_argument("--threshold", type=float, default=0.95)
    parser.add_argument("--embedder", choices=("hash", "local", "both"), default="both")
    args = parser.parse_args()
    names = ["hash", "local"] if args.embedder == "both" else [args.embedder]
    with tempfile.TemporaryDirectory() as tmp:
        workspace = Path(tmp) / "ws"
        workspace.mkdir()
        for name in FILES:
            (workspace / name).write_text(f"{name}\nline two\nline three\n")
        for n, embedder in enumerate(names):
            urls = [f"sqlite:///{tmp}/cache-{n}.db"] + ([args.postgres] if args.postgres else [])
            for url in urls:
                asyncio.run(bench(url, embedder, args.threshold, workspace))
        for url in [f"sqlite:///{tmp}/latency.db"] + ([args.postgres] if args.postgres else []):
            asyncio.run(latency(url))


if __name__ == "__main__":
    main()
