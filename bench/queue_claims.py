"""Claims from the job queue as it grows: does a claim cost more with 10,000 queued jobs than with 100?

    .venv/bin/python bench/queue_claims.py [--sizes 100,1000,10000] [--postgres URL]

Queues N jobs, then claims and finishes 200 of them one by one (one worker), and prints claims
per second and the median claim latency: the queue's own mechanism. ``bench/jobs.py`` measures
jobs end to end with worker processes, and claims against a raw-SQL loop.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from steward.jobs.store import JobStore
from steward.store.events import open_store


async def measure(url: str, size: int, claims: int = 200) -> tuple[float, float]:
    async with await open_store(url) as store:
        jobs = JobStore(store.engine)
        for n in range(size):
            await jobs.submit("coder", f"job {n}", workspace="/w", priority=n % 5)
        latencies = []
        started = time.perf_counter()
        for _ in range(min(claims, size)):
            t = time.perf_counter()
            claim = await jobs.claim("bench")
            latencies.append((time.perf_counter() - t) * 1000)
            assert claim is not None
            await jobs.finish(claim, "done", result="ok")
        elapsed = time.perf_counter() - started
    return min(claims, size) / elapsed, statistics.median(latencies)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="100,1000,10000")
    parser.add_argument("--postgres", help="also measure PostgreSQL at this URL (its jobs table is emptied)")
    args = parser.parse_args()
    print("| store | queued jobs | claim + finish per s | median claim, ms |")
    print("|---|---|---|---|")
    for size in (int(s) for s in args.sizes.split(",")):
        directory = Path(tempfile.mkdtemp(prefix="steward-queue-"))
        urls = [("SQLite", f"sqlite:///{directory / 'q.db'}")]
        if args.postgres:
            urls.append(("PostgreSQL", args.postgres))
        for name, url in urls:
            if name == "PostgreSQL":
                async with await open_store(url) as store, store.engine.begin() as conn:
                    from sqlalchemy import text

                    await conn.execute(text("DELETE FROM jobs"))
            rate, median = await measure(url, size)
            print(f"| {name} | {size:,} | {rate:,.0f} | {median:.2f} |", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
