"""What ``execute_code`` costs over ``bash``, and tool calls per second through its channel.

    .venv/bin/python bench/code.py [--runs 20] [--calls 500] [--no-sandbox]

Both tools run in the real bubblewrap sandbox (unless ``--no-sandbox``) over a small workspace.
Printed: p50/p95 of ``bash`` running ``python3 -c`` with a 10-line program, of
``execute_code`` running the same program, and the difference (what the channel, the private
directory and the runner add; goal: at most 30 ms at p50); then one program making
``--calls`` ``read_file`` calls through the channel, each through the whole toolset as a
run has it (the guard, the policy, checkpoints and redaction), as calls per second.
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

from steward.config import Config
from steward.safety.checkpoints.around_calls import checkpointer_for
from steward.safety.checkpoints.wrapper import CheckpointToolset
from steward.safety.policy.guard import Guard
from steward.safety.policy.rules import Policy
from steward.safety.policy.wrapper import GuardedToolset
from steward.safety.sandbox.bubblewrap import BubblewrapSandbox, SandboxSettings
from steward.safety.secrets.watches import secret_watch
from steward.safety.secrets.wrapper import RedactingToolset
from steward.tools.base import CombinedToolset, FunctionToolset, ToolContext, Toolset
from steward.tools.builtin import builtin_toolset
from steward.tools.code import CodeToolset, code_tools

PROGRAM = """\
import json
words = ["alpha", "beta", "gamma", "delta"]
counts = {}
for word in words:
    counts[word] = len(word)
total = sum(counts.values())
longest = max(words, key=len)
report = {"total": total, "longest": longest}
text = json.dumps(report, sort_keys=True)
print(text)
"""


def toolset(config: Config) -> Toolset:
    """The built-in tools and execute_code under the guard, the policy, checkpoints and redaction."""
    inner = CombinedToolset([builtin_toolset(), FunctionToolset(code_tools())])
    checked = CheckpointToolset(inner, lambda workspace: checkpointer_for(workspace, config))
    guarded = GuardedToolset(checked, guard=Guard(), policy=Policy.from_lists())
    redacted = RedactingToolset(guarded, lambda workspace: secret_watch(workspace, config))
    return CodeToolset(redacted, max_tool_calls=10_000)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


async def timed(tools: Toolset, name: str, arguments: dict[str, object], ctx: ToolContext) -> float:
    started = time.perf_counter()
    result = await tools.call_tool(name, arguments, ctx)
    took = (time.perf_counter() - started) * 1000
    if result.is_error:
        raise SystemExit(f"{name} failed: {result.content}")
    return took


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--no-sandbox", action="store_true")
    args = parser.parse_args()
    config = Config()
    with tempfile.TemporaryDirectory() as tmp:
        workspace = Path(tmp)
        (workspace / "data.txt").write_text("one line\n")
        sandbox = None if args.no_sandbox else BubblewrapSandbox(SandboxSettings(cpu_s=60, max_processes=64))
        ctx = ToolContext(workspace=workspace, sandbox=sandbox, run_id="bench-code")
        tools = toolset(config)
        bare = CodeToolset(
            CombinedToolset([builtin_toolset(), FunctionToolset(code_tools())]), max_tool_calls=10_000
        )
        command = f"{shlex.quote(sys.executable)} -I -S -c {shlex.quote(PROGRAM)}"
        bash_args: dict[str, object] = {"command": command}
        code_args: dict[str, object] = {"code": PROGRAM}
        await timed(tools, "bash", bash_args, ctx)  # warm: the sandbox's first probe
        await timed(tools, "execute_code", code_args, ctx)
        where = "no sandbox" if sandbox is None else "bubblewrap"
        code_ms: list[float] = []
        for label, stack in (("as a run has them (bash checkpointed)", tools), ("the tools alone", bare)):
            bash_ms: list[float] = []
            code_ms = []
            for _ in range(args.runs):  # interleaved, so a busy moment of the machine hits both
                bash_ms.append(await timed(stack, "bash", bash_args, ctx))
                code_ms.append(await timed(stack, "execute_code", code_args, ctx))
            print(f"10-line program, {args.runs} runs each ({where}), {label}:")
            for name, values in (("bash python3 -c", bash_ms), ("execute_code", code_ms)):
                print(
                    f"  {name:16} p50 {statistics.median(values):7.1f} ms   p95 {percentile(values, 0.95):7.1f} ms"
                )
            added = statistics.median(code_ms) - statistics.median(bash_ms)
            print(f"  added by execute_code (p50): {added:+.1f} ms (goal: <= 30 ms)")

        calls = f"for _ in range({args.calls}):\n    read_file(path='data.txt')\n"
        alone = statistics.median(code_ms)  # the program's own cost, without its calls
        for label, stack in (("through guard, policy, checkpoints, redaction", tools), ("tools alone", bare)):
            took = await timed(stack, "execute_code", {"code": calls, "timeout_s": 600}, ctx)
            rate = args.calls / max((took - alone) / 1000, 1e-9)
            print(
                f"{args.calls} read_file calls from one program, {label}: {took:.0f} ms, {rate:.0f} calls/s"
            )


if __name__ == "__main__":
    asyncio.run(main())
