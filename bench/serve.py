"""`steward serve` under load: live event streams to many clients, and run creation.

    .venv/bin/python bench/serve.py [--postgres URL] [--clients 1,10,50,200] [--runs 10]
        [--steps 24] [--sleep 0.2] [--runner server|worker|server,worker] [--creates 200]
        [--concurrency 1,8]

A real `steward serve` process on loopback, in a scratch workspace, on a fresh store (a new
SQLite file; with `--postgres URL` also a new PostgreSQL database at that server, dropped
afterwards). The clients run here, on asyncio streams (a minimal HTTP/1.1 + SSE reader: the
client's own cost stays small next to the server's).

Event streams: the runs are executed by the server's own workers (`--workers` = `--runs`; with
`--runner worker` by a separate `steward worker --concurrency RUNS` on the same store, so the
server only streams). The persona `bench` is a scripted model whose every reply thinks a line and
calls `bash` with `sleep S && echo N` (`--steps` of them, then the answer), so each run appends 5
events per step at a steady pace for several seconds (checkpoints are off: a step costs the sleep,
the sandbox and the loop, not a snapshot; each run has its own workspace, as two runs in one take
turns at each `bash` call). For C clients in `--clients`: min(C, `--runs`) runs are started, and
C clients follow them (client i follows run i mod runs) from the first event, concurrently, until
each stream ends with the run. Per row:

- events/s produced (appended by the runs) and delivered (received by all clients, over the time
  from the first stream open to the last event received); how long the C streams took to open;
- delay, p50 / p95 / max: an event's arrival at a client minus its `ts` (when the run appended
  it; one clock), for events appended after that client's stream was open;
- exactly once: each client must receive seqs 1..N of its run in order, N being what the store
  recorded (read once more with `follow=false` at the end); events lost, duplicated or out of
  order are counted;
- the server's CPU (its own process: the `bash` commands are children), and its RSS (VmRSS) at its
  peak during the row; its RSS at idle (after a warm-up run, before any client) is printed per
  table. The client's CPU is shown too: near one core it would limit the figures.

Run creation: another server on a fresh store with `--workers 0` (runs only queue). `--creates`
requests `POST /v1/runs` (a new session each) from 1 and from 8 concurrent clients (httpx, one
connection each, kept alive), after 20 not counted: requests/s and the latency p50 / p95.

Figures, not assertions: on SQLite the delay is mostly the server's poll of followed runs
(`[server] poll_s`, 0.5 s); PostgreSQL tells the server of each commit (`LISTEN`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import sqlalchemy as sa

UP_TIMEOUT_S = 60.0
LEVEL_TIMEOUT_S = 180.0  # a row whose streams have not all ended by then is an error
REQUEST_TIMEOUT_S = 30.0
WARM_CREATES = 20
TICK_S = os.sysconf("SC_CLK_TCK")
PAGE = 1 << 20  # MiB


# --- databases and the workspace --------------------------------------------------------------


async def _pg_execute(server: str, statement: str) -> None:
    conn = await asyncpg.connect(server, timeout=5)
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


@contextlib.asynccontextmanager
async def fresh_database(kind: str, server: str | None, scratch: Path) -> AsyncIterator[str]:
    """A store URL on an empty database: a new SQLite file, or a new PostgreSQL database."""
    if kind == "SQLite":
        directory = Path(tempfile.mkdtemp(prefix="db-", dir=scratch))
        yield f"sqlite:///{directory / 'steward.db'}"
        return
    assert server is not None
    name = f"steward_bench_{uuid.uuid4().hex[:10]}"
    await _pg_execute(server, f'CREATE DATABASE "{name}"')
    try:
        yield sa.make_url(server).set(database=name).render_as_string(hide_password=False)
    finally:
        await _pg_execute(server, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def make_workspace(scratch: Path, steps: int, sleep_s: float, runs: int) -> Path:
    """The server's folder, with one workspace per run followed at once (runs/rN: two runs
    changing one workspace take turns at each call that can change it). The personas and the
    configuration are the user's (the scratch config dir), so every workspace has them."""
    workspace = scratch / "ws"
    for n in range(runs):
        (workspace / "runs" / f"r{n}").mkdir(parents=True)
    user = scratch / "config" / "steward"
    (user / "personas").mkdir(parents=True)
    (user / "config.toml").write_text("[checkpoints]\nenabled = false\n")
    for name, count in (("bench", steps), ("warm", 3)):
        replies: list[dict[str, Any]] = [
            {"thinking": f"step {n}", "tool": "bash", "args": {"command": f"sleep {sleep_s:g} && echo {n}"}}
            for n in range(count)
        ]
        replies.append({"text": "done"})
        (user / "personas" / f"{name}.yaml").write_text(json.dumps(replies))
        (user / "personas" / f"{name}.toml").write_text(
            f'role = "{name}"\ntools = ["bash"]\nmodel = "scripted:{name}.yaml"\n'
            f"[limits]\nmax_steps = {count + 10}\n"
        )
    return workspace


def environment(url: str, scratch: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STEWARD_", "OPENAI_", "ANTHROPIC_"))}
    env.update(STEWARD_DB=url, XDG_STATE_HOME=str(scratch / "state"), XDG_CONFIG_HOME=str(scratch / "config"))
    return env


def new_token(workspace: Path, scratch: Path) -> str:
    made = subprocess.run(
        [sys.executable, "-m", "steward", "serve", "--new-token", "bench"], cwd=workspace,
        env=environment("sqlite://", scratch), capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    if made.returncode != 0:
        raise SystemExit(f"steward serve --new-token failed: {made.stderr}")
    return made.stdout.strip().splitlines()[-1]


# --- the server process -------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Server:
    process: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def rss_mib(self) -> float:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024 / PAGE
        return 0.0

    def cpu_s(self) -> float:
        """User + system CPU of the server process itself (not of its children)."""
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICK_S


def start(argv: list[str], workspace: Path, url: str, log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "steward", *argv], cwd=workspace, env=environment(url, log.parent),
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip


async def stop(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        await asyncio.to_thread(process.wait, 30)
    except subprocess.TimeoutExpired:
        process.kill()
        await asyncio.to_thread(process.wait)


@contextlib.asynccontextmanager
async def serving(
    workspace: Path, url: str, scratch: Path, workers: int, *, worker_process: int = 0
) -> AsyncIterator[Server]:
    """A server running ``workers`` jobs at once itself; with ``worker_process`` N, a separate
    `steward worker --concurrency N` on the same store runs them instead."""
    port = free_port()
    log = scratch / f"serve-{port}.log"
    server = Server(
        start(["serve", "--port", str(port), "--workers", str(workers)], workspace, url, log), port, log
    )
    logs, helper = [log], None
    try:
        if worker_process:
            logs.append(scratch / f"worker-{port}.log")
            helper = start(["worker", "--concurrency", str(worker_process)], workspace, url, logs[-1])
            await until_taking(helper, logs[-1])
        await until_up(server)
        yield server
    except BaseException:
        for name in logs:
            print(f"--- {name.name}:\n{name.read_text(errors='replace')[-3000:]}", file=sys.stderr)
        raise
    finally:
        await stop(server.process)
        if helper is not None:
            await stop(helper)


async def until_taking(process: subprocess.Popen[bytes], log: Path) -> None:
    """Until the worker said it takes jobs."""
    for _ in range(round(UP_TIMEOUT_S * 20)):
        if "taking" in await asyncio.to_thread(log.read_text, errors="replace"):
            return
        if process.poll() is not None:
            raise SystemExit(f"steward worker exited {process.returncode}")
        await asyncio.sleep(0.05)
    raise SystemExit(f"steward worker did not start in {UP_TIMEOUT_S:.0f} s")


async def until_up(server: Server) -> None:
    async with httpx.AsyncClient(base_url=server.url, timeout=1) as client:
        for _ in range(round(UP_TIMEOUT_S * 10)):
            if server.process.poll() is not None:
                raise SystemExit(f"steward serve exited {server.process.returncode}")
            with contextlib.suppress(httpx.TransportError):
                if (await client.get("/v1/health")).status_code == 200:
                    return
            await asyncio.sleep(0.1)
    raise SystemExit(f"steward serve did not answer in {UP_TIMEOUT_S:.0f} s")


# --- a follower: one SSE stream on a raw connection -------------------------------------------


@dataclass
class Follower:
    run_id: str
    connected: float = 0.0  # when the response's headers arrived (time.time())
    seqs: list[int] = field(default_factory=list)
    delays: list[float] = field(default_factory=list)  # s, of events appended after `connected`
    last: float = 0.0  # when the last event arrived

    async def follow(self, port: int, token: str) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(
                f"GET /v1/runs/{self.run_id}/events HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                f"Authorization: Bearer {token}\r\nAccept: text/event-stream\r\n\r\n".encode()
            )
            head = await reader.readuntil(b"\r\n\r\n")
            if not head.startswith(b"HTTP/1.1 200") or b"chunked" not in head.lower():
                raise SystemExit(f"run {self.run_id}: the stream did not open: {head[:300]!r}")
            self.connected = time.time()
            await self._read(reader)
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _read(self, reader: asyncio.StreamReader) -> None:
        pending = b""
        for _ in range(10**9):  # until the last chunk (the run ended)
            size = int((await reader.readline()).split(b";")[0], 16)
            if size == 0:
                return
            pending += (await reader.readexactly(size + 2))[:-2]
            now = self.last = time.time()
            *messages, pending = pending.split(b"\n\n")
            for message in messages:
                for line in message.split(b"\n"):
                    if line.startswith(b"data: "):
                        event = json.loads(line[6:])
                        self.seqs.append(event["seq"])
                        if event["ts"] >= self.connected:
                            self.delays.append(now - event["ts"])


async def recorded(client: httpx.AsyncClient, run_id: str) -> list[tuple[int, float]]:
    """(seq, ts) of every event the store holds for the run."""
    response = await client.get(f"/v1/runs/{run_id}/events", params={"follow": "false"})
    response.raise_for_status()
    out = []
    for line in response.text.splitlines():
        if line.startswith("data: "):
            event = json.loads(line[6:])
            out.append((int(event["seq"]), float(event["ts"])))
    return out


# --- event streams: one row per number of clients ---------------------------------------------


@dataclass
class Row:
    clients: int
    runs: int
    produced_per_s: float
    delivered: int
    delivered_per_s: float
    delays_ms: list[float]
    lost: int
    duplicated: int
    out_of_order: int
    connect_ms: float  # from the first stream open to the last
    server_cpu_s: float
    server_cpu: float  # share of one core
    client_cpu: float
    rss_peak_mib: float


async def start_runs(client: httpx.AsyncClient, persona: str, count: int) -> list[str]:
    ids = []
    for n in range(count):
        body = {"goal": f"bench {n}", "persona": persona, "workspace": f"runs/r{n}"}
        response = await client.post("/v1/runs", json=body)
        if response.status_code != 201:
            raise SystemExit(f"POST /v1/runs answered {response.status_code}: {response.text[:300]}")
        ids.append(response.json()["id"])
    return ids


async def sample_rss(server: Server, peak: list[float], stop: asyncio.Event) -> None:
    for _ in range(round(LEVEL_TIMEOUT_S * 20)):
        peak[0] = max(peak[0], server.rss_mib())
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(0.05):
                await stop.wait()
        if stop.is_set():
            return


async def stream_row(server: Server, client: httpx.AsyncClient, token: str, clients: int, runs: int) -> Row:
    run_ids = await start_runs(client, "bench", runs)
    followers = [Follower(run_ids[n % runs]) for n in range(clients)]
    peak, stop = [server.rss_mib()], asyncio.Event()
    sampler = asyncio.create_task(sample_rss(server, peak, stop))
    cpu, mine = server.cpu_s(), time.process_time()
    try:
        async with asyncio.timeout(LEVEL_TIMEOUT_S):
            await asyncio.gather(*(f.follow(server.port, token) for f in followers))
    finally:
        stop.set()
        await sampler
    cpu, mine = server.cpu_s() - cpu, time.process_time() - mine
    logs = {run_id: await recorded(client, run_id) for run_id in run_ids}
    first = min(f.connected for f in followers)
    wall = max(f.last for f in followers) - first
    stamps = [ts for log in logs.values() for _, ts in log]
    delivered = sum(len(f.seqs) for f in followers)
    lost, duplicated, out_of_order = tally(followers, logs)
    return Row(
        clients=clients, runs=runs, produced_per_s=len(stamps) / (max(stamps) - min(stamps)),
        delivered=delivered, delivered_per_s=delivered / wall,
        delays_ms=[d * 1000 for f in followers for d in f.delays], lost=lost, duplicated=duplicated,
        out_of_order=out_of_order, connect_ms=(max(f.connected for f in followers) - first) * 1000,
        server_cpu_s=cpu, server_cpu=cpu / wall, client_cpu=mine / wall, rss_peak_mib=peak[0],
    )  # fmt: skip


def tally(followers: list[Follower], logs: dict[str, list[tuple[int, float]]]) -> tuple[int, int, int]:
    """Events lost, duplicated and out of order over all followers, against what was recorded."""
    lost = duplicated = out_of_order = 0
    for f in followers:
        lost += len({seq for seq, _ in logs[f.run_id]} - set(f.seqs))
        duplicated += len(f.seqs) - len(set(f.seqs))
        out_of_order += sum(b <= a for a, b in zip(f.seqs, f.seqs[1:], strict=False))
    return lost, duplicated, out_of_order


def pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))] if ordered else float("nan")


async def streams_table(
    kind: str, runner: str, server_url: str | None, scratch: Path, args: argparse.Namespace
) -> None:
    workspace, token = args.workspace, args.token
    own, helper = (args.runs, 0) if runner == "server" else (0, args.runs)
    async with (
        fresh_database(kind, server_url, scratch) as url,
        serving(workspace, url, scratch, own, worker_process=helper) as server,
        httpx.AsyncClient(
            base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=REQUEST_TIMEOUT_S
        ) as client,
    ):
        (warm,) = await start_runs(client, "warm", 1)  # imports and first-use costs, not counted
        async with asyncio.timeout(LEVEL_TIMEOUT_S):
            await Follower(warm).follow(server.port, token)
        await asyncio.sleep(1.0)
        where = "the server's own workers" if runner == "server" else "a separate `steward worker`"
        print(
            f"\n{kind}, runs executed by {where}: server RSS at idle (after a warm-up run) "
            f"{server.rss_mib():.0f} MiB\n",
            flush=True,
        )
        print(
            "| store | clients | runs followed | events/s produced | events delivered | delivered/s "
            "| all streams open in, ms | delay p50 / p95 / max, ms | lost / duplicated / out of order "
            "| server CPU, s (% of a core) | client CPU, % | server RSS peak, MiB |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for clients in (int(c) for c in args.clients.split(",")):
            row = await stream_row(server, client, token, clients, min(clients, args.runs))
            d = row.delays_ms
            print(
                f"| {kind} | {clients} | {row.runs} | {row.produced_per_s:,.0f} | {row.delivered:,} "
                f"| {row.delivered_per_s:,.0f} | {row.connect_ms:,.0f} "
                f"| {pct(d, 50):,.0f} / {pct(d, 95):,.0f} / {max(d, default=0):,.0f} "
                f"| {row.lost} / {row.duplicated} / {row.out_of_order} "
                f"| {row.server_cpu_s:.1f} ({row.server_cpu * 100:.0f} %) | {row.client_cpu * 100:.0f} "
                f"| {row.rss_peak_mib:.0f} |",
                flush=True,
            )


# --- run creation ----------------------------------------------------------------------------


async def create_runs(
    server: Server, token: str, count: int, concurrency: int
) -> tuple[float, list[float], int]:
    """``count`` POST /v1/runs from ``concurrency`` clients: (requests/s, latencies in s, errors)."""
    left, errors = [count], [0]
    latencies: list[float] = []

    async def one_client() -> None:
        async with httpx.AsyncClient(
            base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=REQUEST_TIMEOUT_S
        ) as client:
            await client.get("/v1/ready")  # connected before the clock starts
            await ready.wait()
            while left[0] > 0:
                left[0] -= 1
                started = time.perf_counter()
                response = await client.post("/v1/runs", json={"goal": "queued", "persona": "bench"})
                latencies.append(time.perf_counter() - started)
                errors[0] += response.status_code != 201

    ready = asyncio.Event()
    tasks = [asyncio.create_task(one_client()) for _ in range(concurrency)]
    await asyncio.sleep(0.5)
    started = time.perf_counter()
    ready.set()
    await asyncio.gather(*tasks)
    return count / (time.perf_counter() - started), latencies, errors[0]


async def creation_table(kind: str, server_url: str | None, scratch: Path, args: argparse.Namespace) -> None:
    async with (
        fresh_database(kind, server_url, scratch) as url,
        serving(args.workspace, url, scratch, 0) as server,
    ):
        await create_runs(server, args.token, WARM_CREATES, 1)
        print(f"\n{kind}: `POST /v1/runs`, `--workers 0`, {args.creates} requests per row\n")
        print(
            "| store | concurrent clients | requests/s | latency p50 / p95, ms | errors | server RSS after, MiB |"
        )
        print("|---|---|---|---|---|---|")
        for concurrency in (int(c) for c in args.concurrency.split(",")):
            rate, latencies, errors = await create_runs(server, args.token, args.creates, concurrency)
            ms = [x * 1000 for x in latencies]
            print(
                f"| {kind} | {concurrency} | {rate:,.0f} | {pct(ms, 50):.1f} / {pct(ms, 95):.1f} | {errors} "
                f"| {server.rss_mib():.0f} |",
                flush=True,
            )


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--postgres", help="also measure PostgreSQL on fresh databases made at this server URL"
    )
    parser.add_argument("--clients", default="1,10,50,200", help="numbers of concurrent SSE clients")
    parser.add_argument(
        "--runs", type=int, default=10, help="most runs followed at once (the server's workers)"
    )
    parser.add_argument("--steps", type=int, default=24, help="bash steps per run")
    parser.add_argument("--sleep", type=float, default=0.2, help="seconds each step's command sleeps")
    parser.add_argument(
        "--runner",
        default="server",
        help="who executes the runs: server (its --workers), worker (a "
        "separate `steward worker`: the server only streams), or both: server,worker",
    )
    parser.add_argument("--creates", type=int, default=200, help="POST /v1/runs per run-creation row")
    parser.add_argument("--concurrency", default="1,8", help="concurrent clients creating runs")
    args = parser.parse_args()
    kinds = ["SQLite"] + (["PostgreSQL"] if args.postgres else [])
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"{time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores, Python {platform.python_version()}, load {load}"
    )
    print(f"runs: {args.steps} steps of `sleep {args.sleep:g}` in bash, 5 events per step")
    with tempfile.TemporaryDirectory(prefix="steward-serve-bench-") as directory:
        scratch = Path(directory)
        args.workspace = make_workspace(scratch, args.steps, args.sleep, args.runs)
        args.token = new_token(args.workspace, scratch)
        for kind in kinds:
            for runner in args.runner.split(","):
                await streams_table(kind, runner, args.postgres, scratch, args)
            await creation_table(kind, args.postgres, scratch, args)
    print(f"\nload average after: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    asyncio.run(main())
