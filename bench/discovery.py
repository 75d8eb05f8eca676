"""Tool discovery over 1,000 MCP tools from 25 servers.

    .venv/bin/python bench/discovery.py [--servers 25] [--per-server 40] [--queries 300]

The servers are generated (names like ``github__create_issue``, varied descriptions, JSON
schemas with 1-6 arguments), next to the built-in tools. Printed: the FTS5 index build time;
``discover_tools`` latency (whole call: parse, search, format) over realistic queries, p50,
p95 and max; how often the tool a query was written for is among the 5 results; and the
characters of tool schemas per request without discovery (every tool) against with it
(always_offer + discover_tools + 5 discovered tools).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from steward import CombinedToolset, ToolContext, ToolResult, Toolset
from steward.config import ToolsSettings
from steward.memory.budget import budget_chars
from steward.memory.recall import recall_toolset
from steward.models.base import ToolSpec, schema_chars
from steward.tools.builtin import builtin_toolset
from steward.tools.discovery import DISCOVER_TOOL, DiscoveryToolset, ToolIndex, found_names

# server -> (what it is about, the things its tools act on)
SERVERS: dict[str, tuple[str, list[str]]] = {
    "github": ("GitHub", ["issue", "pull_request", "repository", "branch", "release", "comment", "workflow"]),
    "gitlab": ("GitLab", ["merge_request", "pipeline", "project", "issue", "tag", "runner"]),
    "jira": ("Jira", ["ticket", "sprint", "board", "epic", "worklog", "component"]),
    "linear": ("Linear", ["issue", "cycle", "team", "label", "roadmap"]),
    "slack": ("Slack", ["message", "channel", "thread", "reaction", "user_group", "reminder"]),
    "discord": ("Discord", ["message", "guild", "role", "voice_channel", "invite"]),
    "gmail": ("Gmail", ["email", "draft", "label", "attachment", "filter"]),
    "calendar": ("Google Calendar", ["event", "calendar", "attendee", "availability", "reminder"]),
    "drive": ("Google Drive", ["file", "folder", "permission", "revision", "shared_drive"]),
    "sheets": ("Google Sheets", ["spreadsheet", "row", "cell_range", "chart", "pivot_table"]),
    "notion": ("Notion", ["page", "database", "block", "comment", "property"]),
    "confluence": ("Confluence", ["page", "space", "attachment", "blog_post", "label"]),
    "postgres": ("PostgreSQL", ["table", "query", "index", "schema", "role", "extension"]),
    "redis": ("Redis", ["key", "stream", "hash", "sorted_set", "pubsub_channel"]),
    "aws": ("AWS", ["s3_bucket", "ec2_instance", "lambda_function", "iam_role", "cloudwatch_alarm"]),
    "gcp": (
        "Google Cloud",
        ["vm_instance", "storage_bucket", "cloud_run_service", "service_account", "firewall_rule"],
    ),
    "kubernetes": ("Kubernetes", ["pod", "deployment", "service", "config_map", "namespace", "secret"]),
    "docker": ("Docker", ["container", "image", "volume", "network", "compose_stack"]),
    "stripe": ("Stripe", ["customer", "invoice", "payment_intent", "subscription", "refund", "payout"]),
    "shopify": ("Shopify", ["product", "order", "inventory_item", "collection", "discount_code"]),
    "salesforce": ("Salesforce", ["lead", "opportunity", "account", "contact", "campaign"]),
    "hubspot": ("HubSpot", ["deal", "contact", "company", "ticket", "email_campaign"]),
    "sentry": ("Sentry", ["error_event", "issue", "release", "alert_rule", "project"]),
    "datadog": ("Datadog", ["monitor", "dashboard", "metric", "log_query", "incident"]),
    "figma": ("Figma", ["file", "frame", "component", "comment", "style"]),
}

# verb -> (how the description says it, words a user might type instead)
VERBS: dict[str, tuple[str, list[str]]] = {
    "create": ("Create a new {thing} in {service}", ["make", "add", "new", "open"]),
    "get": ("Fetch one {thing} from {service} by its id, with all its fields", ["show", "fetch", "details"]),
    "list": ("List the {things} in {service}, newest first, with paging", ["all", "browse", "enumerate"]),
    "update": ("Change fields of an existing {thing} in {service}", ["edit", "modify", "change"]),
    "delete": ("Delete a {thing} from {service}; this cannot be undone", ["remove", "erase", "drop"]),
    "search": ("Search {things} in {service} with a free-text query and filters", ["find", "look up"]),
    "archive": ("Archive a {thing} in {service} so it no longer shows in lists", ["hide", "close"]),
    "export": ("Export {things} from {service} as CSV or JSON", ["download", "dump", "backup"]),
}

ARGS: dict[str, str] = {
    "id": "The {thing}'s identifier.",
    "name": "A short, human-readable name.",
    "description": "Longer text, Markdown allowed.",
    "query": "Free-text search terms.",
    "limit": "Most results to return (1-100).",
    "cursor": "Paging cursor from the previous call.",
    "owner": "User or team that owns it.",
    "labels": "Labels to set, comma-separated.",
    "due_date": "ISO date when it is due.",
    "format": "csv or json.",
    "dry_run": "Only report what would change.",
    "parent_id": "The containing object's identifier.",
}


def make_spec(server: str, verb: str, thing: str, rng: random.Random) -> ToolSpec:
    product, _ = SERVERS[server]
    words = thing.replace("_", " ")
    template, _ = VERBS[verb]
    description = template.format(thing=words, things=words + "s", service=product) + "."
    if rng.random() < 0.5:
        description += rng.choice(
            [
                " Requires a token with write access.",
                " Rate limited to 60 calls per minute.",
                f" Returns the {words} as JSON.",
                " Use the id from a list or search call.",
            ]
        )
    names = rng.sample(sorted(ARGS), rng.randint(1, 6))
    kinds = {"limit": "integer", "dry_run": "boolean"}
    properties = {
        n: {"type": kinds.get(n, "string"), "description": ARGS[n].format(thing=words)} for n in names
    }
    schema = {"type": "object", "properties": properties, "required": names[: rng.randint(0, len(names))]}
    return ToolSpec(
        f"{server}__{verb}_{thing}",
        description,
        schema,
        origin=f"mcp:{server}",
        fingerprint=f"{server}{verb}",
    )


class GeneratedServers(Toolset):
    """Stands in for 25 connected MCP servers: their tools are listed, never run here."""

    def __init__(self, servers: int, per_server: int, seed: int = 7) -> None:
        rng = random.Random(seed)
        self.specs: list[ToolSpec] = []
        for server in list(SERVERS)[:servers]:
            _, things = SERVERS[server]
            pairs = [(v, t) for t in things for v in VERBS]
            rng.shuffle(pairs)
            self.specs += [make_spec(server, v, t, rng) for v, t in pairs[:per_server]]

    async def get_tools(self, ctx: ToolContext) -> Sequence[ToolSpec]:
        return self.specs

    async def call_tool(self, name: str, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        return ToolResult(f"{name} ran")


def queries(specs: Sequence[ToolSpec], n: int, rng: random.Random) -> list[tuple[str, str]]:
    """(query, the tool it was written for): how a model phrases what it needs."""
    out = []
    for spec in rng.sample(list(specs), n):
        server, _, rest = spec.name.partition("__")
        verb, _, thing = rest.partition("_")
        words = thing.replace("_", " ")
        product = SERVERS[server][0]
        synonym = rng.choice(VERBS[verb][1])
        query = rng.choice(
            [
                f"{verb} {words}",  # the tool's own words
                f"{synonym} a {product} {words}",  # other verb, names the service
                f"{verb} {words[: max(4, len(words) - 3)]} {server}",  # a word cut short
                f"how do I {verb} the {words} in {product}?",  # a sentence
            ]
        )
        out.append((query, spec.name))
    return out


def percentile(values: Sequence[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


async def run(servers: int, per_server: int, n_queries: int) -> None:
    generated = GeneratedServers(servers, per_server)
    combined = CombinedToolset([builtin_toolset(), recall_toolset(), generated])
    settings = ToolsSettings()
    budget = budget_chars(32_000)
    with tempfile.TemporaryDirectory() as tmp:
        ctx = ToolContext(workspace=Path(tmp))
        every = list(await combined.get_tools(ctx))

        builds = []
        for _ in range(5):
            index = ToolIndex()
            started = time.perf_counter()
            index.rebuild(every)
            builds.append((time.perf_counter() - started) * 1000)
            index.close()

        toolset = DiscoveryToolset(combined, settings=settings, budget_chars=budget)
        await toolset.get_tools(ctx)
        await toolset.call_tool(DISCOVER_TOOL, {"query": "warm up"}, ctx)  # builds the index once
        latencies, hits = [], 0
        for query, wanted in queries(generated.specs, n_queries, random.Random(11)):
            ctx = ToolContext(workspace=Path(tmp))  # a new run: nothing discovered yet
            started = time.perf_counter()
            result = await toolset.call_tool(DISCOVER_TOOL, {"query": query}, ctx)
            latencies.append((time.perf_counter() - started) * 1000)
            hits += wanted in found_names(result.content)

        ctx = ToolContext(workspace=Path(tmp))
        await toolset.call_tool(DISCOVER_TOOL, {"query": "create github issue", "limit": 5}, ctx)
        with_discovery = await toolset.get_tools(ctx)
        await toolset.aclose()

    without = schema_chars(every)
    offered = schema_chars(with_discovery)
    print(f"tools: {len(every):,} ({len(generated.specs):,} from {servers} servers + built-ins)")
    print(f"index build: median {statistics.median(builds):.1f} ms, max {max(builds):.1f} ms (5 builds)")
    print(
        f"discover_tools latency over {len(latencies)} queries: p50 {percentile(latencies, 50):.2f} ms, "
        f"p95 {percentile(latencies, 95):.2f} ms, max {max(latencies):.2f} ms"
    )
    print(f"intended tool among the 5 results: {hits}/{len(latencies)} ({hits / len(latencies):.0%})")
    print(f"schema chars per request without discovery: {without:,} ({len(every):,} tools)")
    print(f"schema chars per request with discovery:    {offered:,} ({len(with_discovery)} tools)")
    print(
        f"ratio: {offered / without:.3f} ({without / offered:.0f}x smaller; the budget is {budget:,} "
        f"chars, without discovery the schemas alone take {without / budget:.0%} of it)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--servers", type=int, default=25)
    parser.add_argument("--per-server", type=int, default=40)
    parser.add_argument("--queries", type=int, default=300)
    args = parser.parse_args()
    asyncio.run(run(args.servers, args.per_server, args.queries))


if __name__ == "__main__":
    main()
