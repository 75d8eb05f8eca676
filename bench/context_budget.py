"""Context budget on a long run: N=50 tool calls of S=4,000 chars with a 32k-token budget.

    .venv/bin/python bench/context_budget.py [--n 50] [--size 4000] [--budget 32000]

The trajectory plans, records a key fact, hits one tool error, then reads chunks. Printed:
the largest request (estimated tokens) against the budget, the total characters sent against
a full-history loop (every message resent on every call), and whether every request carried
the plan, the key facts, the error register and the three newest outputs verbatim.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from typing import Any

from steward import Agent, FunctionModel, Limits, tool
from steward.memory.budget import DEFAULT_CHARS_PER_TOKEN, budget_chars
from steward.models.base import AssistantMessage, ModelRequest, ToolCall, ToolResultMessage


def chunk(i: int, size: int) -> str:
    head = f"[chunk {i}] "
    return head + ("abcdefghijklmnopqrstuvwxyz0123456789" * (size // 36 + 1))[: size - len(head)]


def chars(request: ModelRequest) -> int:
    total = len(request.system) + len(request.context)
    for m in request.messages:
        if isinstance(m, AssistantMessage):
            total += len(m.text) + sum(len(c.arguments_json()) for c in m.tool_calls)
        else:
            total += len(m.content)
    return total


def schema_chars(request: ModelRequest) -> int:
    return sum(len(t.name) + len(t.description) + len(json.dumps(t.parameters)) for t in request.tools)


def step(k: int, **arguments: Any) -> AssistantMessage:
    return AssistantMessage(tool_calls=(ToolCall(f"c{k}", "agent_step", arguments),))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=50)
    parser.add_argument("--size", type=int, default=4000)
    parser.add_argument("--budget", type=int, default=32_000)
    args = parser.parse_args()
    n, size = args.n, args.size
    requests: list[ModelRequest] = []
    reads: list[int] = []

    def reply(request: ModelRequest) -> AssistantMessage:
        requests.append(request)
        k = len(requests)
        if k == 1:
            plan = {
                "goal": "read every chunk",
                "sub_tasks": [{"id": 1, "title": "read"}, {"id": 2, "title": "sum up"}],
            }
            return step(k, phase="plan", summary="plan", plan=plan)
        if k == 2:
            return AssistantMessage(tool_calls=(ToolCall("bad", "read_chunk", {"i": "one"}),))
        if k == 3:
            return step(k, phase="verify", summary="noted", key_facts=["chunks are ASCII"])
        if len(reads) < n:
            reads.append(len(reads) + 1)
            return AssistantMessage(tool_calls=(ToolCall(f"c{k}", "read_chunk", {"i": reads[-1]}),))
        return step(
            k, phase="end", summary="done", end_status="solved", end_message=f"Done: read {n} chunks."
        )

    @tool
    async def read_chunk(i: int) -> str:
        """Return chunk number i of the document."""
        return chunk(i, size)

    agent = Agent(
        FunctionModel(reply),
        tools=[read_chunk],
        builtin_tools=False,
        limits=Limits(max_steps=n + 10, request_token_budget=args.budget),
    )
    result = asyncio.run(agent.run("Read every chunk, then answer.", workspace=tempfile.mkdtemp()))
    assert result.solved, result.output

    sizes = [chars(r) + schema_chars(r) for r in requests]
    budget = budget_chars(args.budget)
    full_history = sum(size * k for k in range(1, n + 1))
    complete = 0
    for r in requests[4:]:
        outputs = [
            m.content
            for m in r.messages
            if isinstance(m, ToolResultMessage) and m.name == "read_chunk" and not m.is_error
        ]
        newest_ok = all(o.startswith("[chunk ") and len(o) == size for o in outputs[-3:])
        has_all = (
            "[PLAN v1]" in r.context
            and "chunks are ASCII" in r.context
            and "[step 2] read_chunk" in r.context
        )
        complete += newest_ok and has_all
    total = sum(chars(r) for r in requests)
    print(f"| measure (N={n}, S={size}, budget {args.budget:,} tokens) | value |")
    print("|---|---|")
    print(f"| model calls | {len(requests)} |")
    print(
        f"| largest request, est. tokens (incl. tool schemas) | {max(sizes) / DEFAULT_CHARS_PER_TOKEN:,.0f} |"
    )
    print(f"| requests over budget | {sum(1 for s in sizes if s > budget)} |")
    print(f"| total chars sent (messages + system) | {total:,} |")
    print(f"| full-history reference (each output resent every call) | {full_history:,} |")
    print(f"| ratio | {total / full_history:.3f} (target ≤ 0.333) |")
    print(f"| requests with plan, facts, errors and 3 newest verbatim | {complete} of {len(requests) - 4} |")


if __name__ == "__main__":
    main()
