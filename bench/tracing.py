"""The cost of OpenTelemetry tracing per loop step (issue 24).

    .venv/bin/python bench/tracing.py [--steps 50,1000] [--repeats 7]
    .venv/bin/python bench/tracing.py --instructions [--modes off,noop,dropped] [--rounds 2]

Each run calls a tiny tool at every step (the model is a function: no I/O), then ends. The
ways, interleaved so the machine's load falls on each alike: tracing off (the default: nothing
wrapped, nothing imported); on with OpenTelemetry's no-op provider (Steward's own wrapping, no
span made); on for a run the sampler leaves out (``[telemetry] sample_ratio``: the SDK's
non-recording spans); on with SDK spans made and dropped (a provider with no exporter); on with
every span kept by the SDK's in-memory exporter; and ``otlp``, the path of ``[telemetry]
endpoint``: Steward's light spans (a span per run, step, model call and tool call), sent by its
exporter process to a collector on loopback (in this, unmeasured, process). Printed per N: the
median CPU ms per step of each (CPU time, not wall time: on a loaded machine the other processes'
share would drown the difference), and what tracing adds per step (µs, and as a share of the
loop's own time off). Target: on costs <= 5 % of the loop's step; off costs nothing (no per-step
code runs: the run's stream is wrapped only when tracing is on).

``--instructions`` counts instructions instead of CPU time (valgrind's callgrind): each way runs
in a child python at 50 and at 550 steps, callgrind counting only inside the measured run (the
child runs it under ``sys.call_tracing``, which callgrind toggles on), and a step's instructions
are (I(550) - I(50)) / 500, so what a run costs once cancels out. The children share one hash
seed and run side by side (``--jobs``): counts still move with the machine's load (asyncio's
timers fire by the clock; a few k a step at a load of 2, up to ~15 k at 10), so compare ways
counted together.
"""

from __future__ import annotations

import argparse
import asyncio
import http.server
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from _agent import ping_agent
from steward.config import Config, TelemetrySettings


class _Collector(http.server.BaseHTTPRequestHandler):
    """An OTLP/HTTP collector that takes every request (the bench's sends go somewhere real)."""

    requests = 0

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        type(self).requests += 1
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


def collector() -> str:
    """A local collector on a thread of this (unmeasured) process; its URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}"


def _exporter_cpu_s() -> float:
    """CPU seconds of the span exporter processes this process started (``otlp``)."""
    from steward.telemetry import _export

    total = 0.0
    for made in _export._providers.values():
        process = getattr(getattr(made, "_sink", None), "_process", None)
        if process is not None:
            fields = Path(f"/proc/{process.pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


async def ms_per_step(steps: int, mode: str, workspace: str) -> float:
    from steward.telemetry import use_tracer_provider

    endpoint = os.environ.get("STEWARD_BENCH_COLLECTOR", "")
    if mode == "noop":
        from opentelemetry.trace import NoOpTracerProvider

        use_tracer_provider(NoOpTracerProvider())
    elif mode not in ("off", "otlp"):
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

        # "unsampled": a run [telemetry] sample_ratio leaves out (non-recording spans).
        provider = TracerProvider(sampler=ParentBased(TraceIdRatioBased(0.0 if mode == "unsampled" else 1.0)))
        if mode == "memory":
            provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
        use_tracer_provider(provider)
    # "otlp": Steward's own spans, sent by its exporter process to a collector on loopback.
    telemetry = TelemetrySettings(enabled=mode != "off", endpoint=endpoint if mode == "otlp" else "")
    agent = ping_agent(steps, Config(telemetry=telemetry))
    run = agent.start("ping", workspace=workspace)
    started = time.process_time()  # CPU time: the machine's load (other processes) stays out of it
    result = await run.result()
    took = time.process_time() - started
    use_tracer_provider(None)
    assert result.solved, result.output
    return took * 1000 / (steps + 1)


MODES = ("off", "noop", "unsampled", "dropped", "memory", "otlp")
_FEW, _MANY = 50, 550  # the two step counts of --instructions


def child(mode: str, steps: int) -> None:
    """One measured run, the only code callgrind counts (``--toggle-collect=sys_call_tracing``)."""
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(ms_per_step(5, mode, tmp))  # warm: imports, the first provider
        sys.call_tracing(lambda: asyncio.run(ms_per_step(steps, mode, tmp)), ())


def instructions(mode: str, steps: int) -> int:
    """Instructions of one run of ``steps`` steps in ``mode``, counted by callgrind in a child
    (its string hashes seeded alike in every child: dict layouts, and so counts, repeat)."""
    done = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", "--cache-sim=no",
         "--branch-sim=no", "--collect-atstart=no", "--toggle-collect=sys_call_tracing",
         sys.executable, __file__, "--child", mode, str(steps)],
        capture_output=True, text=True, check=True, timeout=1800, env={**os.environ, "PYTHONHASHSEED": "0"},
    )  # fmt: skip
    found = re.search(r"Collected : (\d+)", done.stderr)
    assert found is not None, done.stderr
    return int(found.group(1))


def count_instructions(modes: list[str], jobs: int, rounds: int) -> None:
    os.environ["STEWARD_BENCH_COLLECTOR"] = collector()  # here: callgrind counts only the child
    # All the children at once (``jobs`` at a time): each way meets the machine's load alike,
    # which matters even to counts, since asyncio's timers fire by the clock. Each count is the
    # least of ``rounds``: the load only ever adds instructions (timers that fire, a heap that grows).
    ways = [(m, n) for _ in range(max(1, rounds)) for m in ["off", *modes] for n in (_FEW, _MANY)]
    with ThreadPoolExecutor(jobs) as pool:
        counted: dict[tuple[str, int], int] = {}
        for way, got in zip(ways, pool.map(lambda w: instructions(*w), ways), strict=True):
            counted[way] = min(counted.get(way, got), got)
        per_step = {m: (counted[m, _MANY] - counted[m, _FEW]) / (_MANY - _FEW) for m in ["off", *modes]}
    off = per_step["off"]
    print(
        f"python {sys.version.split()[0]}; instructions per step, (I({_MANY}) - I({_FEW})) / {_MANY - _FEW}, "
        f"each I the least of {max(1, rounds)}"
    )
    print(f"off: {off / 1000:.1f} k")
    for m in modes:
        added = per_step[m] - off
        print(f"{m:>10}: +{added / 1000:.1f} k ({added / off * 100:.1f} %)")


async def main(args: argparse.Namespace) -> None:
    modes = MODES
    os.environ["STEWARD_BENCH_COLLECTOR"] = collector()
    with tempfile.TemporaryDirectory() as tmp:
        workspace = str(Path(tmp))
        await ms_per_step(20, "memory", workspace)  # warm: imports, the first provider
        print(f"python {sys.version.split()[0]}; median of {args.repeats} runs each, interleaved")
        print(f"{'steps':>6} {'off ms':>8} " + " ".join(f"{'+µs ' + m:>12} {'% ' + m:>9}" for m in modes[1:]))
        for steps in (int(s) for s in args.steps.split(",")):
            got: dict[str, list[float]] = {m: [] for m in modes}
            for _ in range(args.repeats):
                for mode in modes:
                    got[mode].append(await ms_per_step(steps, mode, workspace))
            off = statistics.median(got["off"])
            added = [statistics.median(got[m]) - off for m in modes[1:]]
            print(
                f"{steps:>6} {off:>8.3f} "
                + " ".join(f"{a * 1000:>12.1f} {a / off * 100:>8.1f}%" for a in added)
            )
        # Where the sending went: another process, on another core; its CPU in all, per span.
        spans = sum(4 * int(s) + 2 for s in args.steps.split(",")) * args.repeats  # run, step, chat, tool
        print(
            f"otlp: the exporter process used {_exporter_cpu_s() * 1000:.0f} ms CPU for about {spans} spans "
            f"({_Collector.requests} requests to the collector)"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", default="50,1000")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--instructions", action="store_true", help="count instructions (callgrind)")
    parser.add_argument("--modes", default="noop,unsampled,dropped,memory,otlp", help="with --instructions")
    parser.add_argument("--jobs", type=int, default=2, help="callgrind children at once (--instructions)")
    parser.add_argument(
        "--rounds", type=int, default=2, help="counts of each way, the least kept (--instructions)"
    )
    parser.add_argument("--child", nargs=2, metavar=("MODE", "STEPS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], int(args.child[1]))
    elif args.instructions:
        count_instructions([m for m in args.modes.split(",") if m != "off"], args.jobs, args.rounds)
    else:
        asyncio.run(main(args))
