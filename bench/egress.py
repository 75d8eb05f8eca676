"""Latency the egress path adds per connection: forwarder + proxy vs. straight to the upstream.

    .venv/bin/python bench/egress.py [--connections 200] [--concurrency 1,10,50]

Three processes, as in real use: a local HTTP upstream, the egress proxy (as Steward runs it on
the host, with the test seams that let ``allowed.test`` lead to that upstream), and the
forwarder script (``forward.py``, daemonized) that a sandbox would run; the clients run here.
Each sample is one whole connection: connect, one request, the answer read to its end.
``http`` sends ``GET http://allowed.test:PORT/`` to the forwarder (plain-HTTP forwarding);
``connect`` opens a ``CONNECT`` tunnel and sends the request through it (what https does, minus
TLS). Figures, not assertions: read them on a quiet machine.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from steward.safety.sandbox.egress import EgressConnection, EgressProxy, IPAddress, forwarder_argv

ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"


# --- the two server roles (run as subprocesses of this script) ---------------------------------


async def serve_upstream() -> None:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            await reader.readuntil(b"\r\n\r\n")
            writer.write(ANSWER)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0, backlog=1024)
    print(server.sockets[0].getsockname()[1], flush=True)
    await server.serve_forever()


async def serve_proxy(socket_path: str) -> None:
    async def resolve(host: str, port: int) -> list[IPAddress]:
        return [ipaddress.ip_address("127.0.0.1")]

    def ignore(record: EgressConnection) -> None:
        pass

    proxy = EgressProxy(
        ["allowed.test"], resolve=resolve, address_ok=lambda ip: ip.is_loopback, max_connections=256
    )
    async with proxy.listen(socket_path, ignore):
        print("ready", flush=True)
        await asyncio.Event().wait()


# --- clients ---------------------------------------------------------------------------------


async def one_connection(port: int, request: bytes, tunnel: bytes | None) -> float:
    started = time.perf_counter()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    if tunnel is not None:
        writer.write(tunnel)
        await reader.readuntil(b"\r\n\r\n")
    writer.write(request)
    await writer.drain()
    answer = await reader.read()
    writer.close()
    elapsed = time.perf_counter() - started
    if not answer.endswith(b"ok"):
        raise RuntimeError(f"unexpected answer: {answer[:200]!r}")
    return elapsed


async def measure(
    sample: Callable[[], Awaitable[float]], total: int, concurrency: int
) -> tuple[list[float], float]:
    latencies: list[float] = []
    left = total

    async def worker() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            latencies.append(await sample())

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies, time.perf_counter() - started


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def run(total: int, levels: list[int], upstream_port: int, forward_port: int) -> None:
    origin = f"GET / HTTP/1.1\r\nHost: allowed.test:{upstream_port}\r\n\r\n".encode()
    absolute = f"GET http://allowed.test:{upstream_port}/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n".encode()
    tunnel = f"CONNECT allowed.test:{upstream_port} HTTP/1.1\r\n\r\n".encode()
    variants: dict[str, Callable[[], Awaitable[float]]] = {
        "direct": lambda: one_connection(upstream_port, origin, None),
        "proxy http": lambda: one_connection(forward_port, absolute, None),
        "proxy connect": lambda: one_connection(forward_port, origin, tunnel),
    }
    for sample in variants.values():  # warm up every path
        await measure(sample, 20, 5)
    print(f"{total} connections per row; latency per connection in ms; added = p50 - direct p50\n")
    print(f"{'clients':>7}  {'path':<14} {'p50':>7} {'p95':>7} {'max':>7} {'added p50':>9} {'conn/s':>8}")
    for level in levels:
        direct_p50 = 0.0
        for name, sample in variants.items():
            latencies, wall = await measure(sample, total, level)
            p50 = statistics.median(latencies) * 1000
            if name == "direct":
                direct_p50 = p50
            added = "" if name == "direct" else f"{p50 - direct_p50:9.2f}"
            print(
                f"{level:>7}  {name:<14} {p50:7.2f} {quantile(latencies, 0.95) * 1000:7.2f} "
                f"{max(latencies) * 1000:7.2f} {added:>9} {total / wall:8.0f}"
            )
        print()


def start(role: list[str]) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen([sys.executable, __file__, *role], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    return process, process.stdout.readline().strip()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--connections", type=int, default=200)
    parser.add_argument("--concurrency", default="1,10,50")
    parser.add_argument("--role", choices=["upstream", "proxy"], help=argparse.SUPPRESS)
    parser.add_argument("--socket", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role == "upstream":
        asyncio.run(serve_upstream())
        return
    if args.role == "proxy":
        asyncio.run(serve_proxy(args.socket))
        return

    directory = Path(tempfile.mkdtemp(prefix="egress-bench-"))
    socket_path = directory / "proxy.sock"
    upstream, port = start(["--role", "upstream"])
    proxy, _ = start(["--role", "proxy", "--socket", str(socket_path)])
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        forward_port = probe.getsockname()[1]
    started = subprocess.run(
        forwarder_argv(socket_path, port=forward_port),
        check=False,
        env={},
        capture_output=True,
        text=True,
        timeout=30,
    )
    try:
        if started.returncode != 0:
            raise SystemExit(f"forwarder did not start: {started.stderr}")
        levels = [int(n) for n in args.concurrency.split(",")]
        asyncio.run(run(args.connections, levels, int(port), forward_port))
    finally:
        for entry in Path("/proc").iterdir():  # the forwarder daemon: found by our socket path
            with contextlib.suppress(OSError):
                if entry.name.isdigit() and str(socket_path).encode() in (entry / "cmdline").read_bytes():
                    os.kill(int(entry.name), signal.SIGTERM)
        for process in (proxy, upstream):
            process.terminate()
            process.wait(timeout=10)
        with contextlib.suppress(OSError):
            socket_path.unlink()
            directory.rmdir()


if __name__ == "__main__":
    main()
