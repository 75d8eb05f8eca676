"""Tool discovery: a real FTS5 index decides which schemas the model sees."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from steward import Agent, Limits, ScriptedModel, Tool, ToolContext, ToolResult, Toolset, tool
from steward.config import ToolsSettings
from steward.models.base import (
    AssistantMessage,
    ModelRequest,
    StreamItem,
    ToolCall,
    ToolResultMessage,
    ToolSpec,
    UserMessage,
)
from steward.models.scripted import FunctionModel
from steward.store.events import open_store
from steward.tools.discovery import DISCOVER_TOOL, DiscoveryToolset, found_names, match_expression

BUDGET_CHARS = 112_000  # 32k tokens at 3.5 chars per token


def spec(name: str, description: str, args: Mapping[str, str] | None = None, *, origin: str = "") -> ToolSpec:
    """A tool spec whose arguments are all strings; the first one is required."""
    args = dict(args or {})
    properties = {arg: {"type": "string", "description": about} for arg, about in args.items()}
    return ToolSpec(
        name,
        description,
        {"type": "object", "properties": properties, "required": list(args)[:1]},
        origin=origin,
    )


class SpecToolset(Toolset):
    """Offers fixed specs (the same list until ``specs`` is replaced); a call echoes itself."""

    def __init__(self, specs: Sequence[ToolSpec]) -> None:
        self.specs = list(specs)
        self.calls: list[str] = []
        self.replays: list[str] = []

    async def get_tools(self, ctx: ToolContext) -> Sequence[ToolSpec]:
        return self.specs

    async def call_tool(self, name: str, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        self.calls.append(name)
        return ToolResult(f"ran {name} with {dict(arguments)}")

    def replayed(self, name: str, arguments: Mapping[str, Any], result: ToolResult, ctx: ToolContext) -> None:
        self.replays.append(name)


CATALOG = [
    spec("bash", "Run a shell command in the workspace.", {"command": "The command."}),
    spec("read_file", "Read a text file of the workspace.", {"path": "Relative path."}),
    spec(
        "github__create_issue",
        "Open a new ticket in a GitHub repository.",
        {"repo": "owner/name", "title": "Title.", "body": "Text."},
        origin="mcp:github",
    ),
    spec(
        "github__list_pull_requests",
        "List the pull requests of a repository.",
        {"repo": "owner/name", "state": "open or closed"},
        origin="mcp:github",
    ),
    spec(
        "notes__append",
        "Append text to a note; mention an issue number and the note links to that issue.",
        {"note_id": "Which note.", "text": "What to append."},
        origin="mcp:notes",
    ),
    spec(
        "calendar__create_event",
        "Add an event to a calendar.",
        {"calendar_id": "Which calendar.", "start": "ISO time.", "attendees": "Emails."},
        origin="mcp:calendar",
    ),
    spec(
        "calendar__list_calendars",
        "List the calendars the user can see.",
        {},
        origin="mcp:calendar",
    ),
    spec(
        "mail__sendMessage",
        "Send an e-mail.",
        {"recipient_address": "Who gets it.", "subject": "Subject line."},
        origin="mcp:mail",
    ),
]


def discovery(specs: Sequence[ToolSpec] = CATALOG, **settings: Any) -> tuple[DiscoveryToolset, SpecToolset]:
    settings.setdefault("discovery", "on")
    inner = SpecToolset(specs)
    return DiscoveryToolset(inner, settings=ToolsSettings(**settings), budget_chars=BUDGET_CHARS), inner


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    return ToolContext(workspace=tmp_path)


def names(specs: Sequence[ToolSpec]) -> list[str]:
    return [s.name for s in specs]


async def search(ctx: ToolContext, query: Any, **extra: Any) -> ToolResult:
    toolset, _ = discovery()
    return await toolset.call_tool(DISCOVER_TOOL, {"query": query, **extra}, ctx)


# --- searching ------------------------------------------------------------------------------


async def test_a_name_match_ranks_above_a_description_only_match(ctx: ToolContext) -> None:
    result = await search(ctx, "issue")
    assert found_names(result.content)[:2] == ["github__create_issue", "notes__append"]


async def test_a_word_most_tools_share_still_favours_the_tool_named_for_it(ctx: ToolContext) -> None:
    # "search" is in every tool's arguments, so bm25 gives it no weight, and length
    # normalisation alone would put a shorter page tool first; the name decides.
    fillers = [
        spec(f"db__tool_{i}", "Run a database job.", {"query": "Free-text search terms."}) for i in range(10)
    ]
    pages = [
        spec(
            f"wiki__{verb}_page",
            f"{verb.title()} a wiki page.",
            {"query": "Free-text search terms.", "page_id": "Which page.", **extra},
        )
        for verb, extra in [
            ("create", {}),
            ("update", {}),
            ("search", {"limit": "Most results.", "cursor": "Paging cursor.", "owner": "Whose pages."}),
        ]
    ]
    toolset, _ = discovery([*fillers, *pages])
    result = await toolset.call_tool(DISCOVER_TOOL, {"query": "how do I search a page"}, ctx)
    assert found_names(result.content)[0] == "wiki__search_page"


async def test_a_word_prefix_finds_tools(ctx: ToolContext) -> None:
    result = await search(ctx, "calend")
    assert set(found_names(result.content)) == {"calendar__create_event", "calendar__list_calendars"}


async def test_argument_names_are_searchable(ctx: ToolContext) -> None:
    result = await search(ctx, "recipient")
    assert found_names(result.content) == ["mail__sendMessage"]


async def test_camel_case_names_are_split_into_words(ctx: ToolContext) -> None:
    result = await search(ctx, "send message")
    assert found_names(result.content)[0] == "mail__sendMessage"


async def test_the_result_lists_name_arguments_description_and_origin(ctx: ToolContext) -> None:
    result = await search(ctx, "create issue", limit=1)
    assert not result.is_error
    assert (
        "- github__create_issue(repo*, title, body): Open a new ticket in a GitHub repository. [mcp:github]"
        in (result.content.splitlines())
    )


async def test_limit_bounds_the_number_of_results(ctx: ToolContext) -> None:
    result = await search(ctx, "list create", limit=2)
    assert len(found_names(result.content)) == 2


@pytest.mark.parametrize(
    "query",
    [
        '"',
        '"unterminated issue',
        "issue*",
        "-issue",
        "name:issue",
        "(((issue",
        "NEAR(issue calendar, 2)",
        "issue AND OR NOT calendar",
        "^issue",
        "issue + calendar -- {x}",
        "💥 événement",
        "a",
    ],
)
async def test_fts_syntax_in_the_query_never_crashes(ctx: ToolContext, query: str) -> None:
    result = await search(ctx, query)
    assert isinstance(result, ToolResult)


async def test_fts_syntax_around_words_still_finds_them(ctx: ToolContext) -> None:
    result = await search(ctx, 'NEAR("calend*" -AND) OR:')
    assert "calendar__create_event" in found_names(result.content)


def test_the_match_expression_quotes_every_word() -> None:
    assert match_expression('create "issue" NEAR x*') == '"create"* OR "issue"* OR "near"* OR "x"'


@pytest.mark.parametrize("arguments", [{}, {"query": ""}, {"query": "  ?!* "}, {"query": 3}])
async def test_an_empty_or_bad_query_is_an_error_the_model_can_fix(
    ctx: ToolContext, arguments: dict[str, Any]
) -> None:
    toolset, _ = discovery()
    result = await toolset.call_tool(DISCOVER_TOOL, arguments, ctx)
    assert result.is_error
    assert "needs a query of a few words" in result.content


async def test_a_bad_limit_is_an_error(ctx: ToolContext) -> None:
    result = await search(ctx, "issue", limit="many")
    assert result.is_error and "limit" in result.content


async def test_no_match_suggests_other_words_and_lists_the_sources(ctx: ToolContext) -> None:
    toolset, _ = discovery()
    result = await toolset.call_tool(DISCOVER_TOOL, {"query": "kubernetes"}, ctx)
    assert not result.is_error
    assert "No tools match 'kubernetes'. Try other words" in result.content
    assert "built-in (2), mcp:calendar (2), mcp:github (2), mcp:mail (1), mcp:notes (1)" in result.content
    assert not toolset.discovered(ctx)


async def test_discover_tools_is_not_in_its_own_index(ctx: ToolContext) -> None:
    result = await search(ctx, "discover")
    assert DISCOVER_TOOL not in found_names(result.content)


async def test_the_index_follows_a_changed_tool_list(ctx: ToolContext) -> None:
    toolset, inner = discovery()
    await toolset.call_tool(DISCOVER_TOOL, {"query": "issue"}, ctx)
    inner.specs = [*CATALOG, spec("jira__close_ticket", "Close a Jira ticket.", origin="mcp:jira")]
    result = await toolset.call_tool(DISCOVER_TOOL, {"query": "jira"}, ctx)
    assert found_names(result.content) == ["jira__close_ticket"]


# --- offering -------------------------------------------------------------------------------


def many(n: int) -> list[ToolSpec]:
    return [spec(f"svc__tool_{i}", f"Tool number {i}.", {"x": "An x."}, origin="mcp:svc") for i in range(n)]


async def test_auto_turns_on_above_the_tool_count(ctx: ToolContext) -> None:
    toolset, _ = discovery(many(41), discovery="auto", discovery_max_tools=40)
    assert names(await toolset.get_tools(ctx)) == [DISCOVER_TOOL]


async def test_auto_stays_off_at_the_tool_count_and_returns_the_wrapped_list(ctx: ToolContext) -> None:
    toolset, inner = discovery(many(40), discovery="auto", discovery_max_tools=40)
    assert await toolset.get_tools(ctx) is inner.specs


async def test_auto_turns_on_above_the_share_of_the_budget(ctx: ToolContext) -> None:
    wordy = [spec(f"t{i}", "x" * 9_000) for i in range(3)]  # 27,000 chars > 0.2 * 112,000
    toolset, _ = discovery(wordy, discovery="auto")
    assert names(await toolset.get_tools(ctx)) == [DISCOVER_TOOL]
    toolset, inner = discovery(wordy, discovery="auto", discovery_share=0.5)
    assert await toolset.get_tools(ctx) is inner.specs


async def test_on_offers_discovery_even_for_few_tools(ctx: ToolContext) -> None:
    toolset, _ = discovery(CATALOG, discovery="on")
    assert names(await toolset.get_tools(ctx)) == ["bash", "read_file", DISCOVER_TOOL]


async def test_off_offers_every_tool(ctx: ToolContext) -> None:
    toolset, inner = discovery(many(500), discovery="off")
    assert await toolset.get_tools(ctx) is inner.specs


async def test_always_offer_takes_glob_patterns(ctx: ToolContext) -> None:
    toolset, _ = discovery(always_offer=["calendar__*"])
    assert names(await toolset.get_tools(ctx)) == [
        "calendar__create_event",
        "calendar__list_calendars",
        DISCOVER_TOOL,
    ]


async def test_discovered_tools_stay_offered(ctx: ToolContext) -> None:
    toolset, _ = discovery()
    await toolset.call_tool(DISCOVER_TOOL, {"query": "pull requests"}, ctx)
    for _ in range(3):
        offered = names(await toolset.get_tools(ctx))
        assert offered[:3] == ["bash", "read_file", DISCOVER_TOOL]
        assert "github__list_pull_requests" in offered


async def test_the_same_list_is_returned_until_something_changes(ctx: ToolContext) -> None:
    toolset, _ = discovery()
    first = await toolset.get_tools(ctx)
    assert await toolset.get_tools(ctx) is first
    await toolset.call_tool(DISCOVER_TOOL, {"query": "calendar"}, ctx)
    second = await toolset.get_tools(ctx)
    assert second is not first
    assert await toolset.get_tools(ctx) is second


async def test_a_tool_named_discover_tools_is_a_config_error(ctx: ToolContext) -> None:
    from steward.errors import ConfigError

    toolset, _ = discovery([spec(DISCOVER_TOOL, "Mine.")])
    with pytest.raises(ConfigError, match="rename that tool"):
        await toolset.get_tools(ctx)


# --- calling and replaying ------------------------------------------------------------------


async def test_an_undiscovered_tool_called_directly_runs_and_is_offered_after(ctx: ToolContext) -> None:
    toolset, inner = discovery()
    result = await toolset.call_tool("mail__sendMessage", {"recipient_address": "a@b.c"}, ctx)
    assert result.content == "ran mail__sendMessage with {'recipient_address': 'a@b.c'}"
    assert "mail__sendMessage" in names(await toolset.get_tools(ctx))
    assert inner.calls == ["mail__sendMessage"]


async def test_an_unknown_tool_points_at_discovery_instead_of_listing_every_tool(ctx: ToolContext) -> None:
    toolset, inner = discovery()
    result = await toolset.call_tool("nope", {}, ctx)
    assert result.is_error and DISCOVER_TOOL in result.content
    assert inner.calls == []


async def test_specs_of_undiscovered_tools_stay_known_for_the_safety_checks(ctx: ToolContext) -> None:
    toolset, _ = discovery()
    assert "mail__sendMessage" not in names(await toolset.get_tools(ctx))
    found = await toolset.spec_of("mail__sendMessage", ctx)
    assert found is not None and found.origin == "mcp:mail"
    assert (await toolset.spec_of(DISCOVER_TOOL, ctx)) is not None


async def test_replayed_discovery_restores_the_found_tools(ctx: ToolContext, tmp_path: Path) -> None:
    toolset, _ = discovery()
    recorded = await toolset.call_tool(DISCOVER_TOOL, {"query": "calendar"}, ctx)
    rebuilt = ToolContext(workspace=tmp_path)
    fresh, inner = discovery()
    await fresh.get_tools(rebuilt)
    fresh.replayed(DISCOVER_TOOL, {"query": "calendar"}, recorded, rebuilt)
    found = {"calendar__create_event", "calendar__list_calendars"}
    assert fresh.discovered(rebuilt) == toolset.discovered(ctx) == found
    assert inner.replays == [DISCOVER_TOOL]


async def test_replay_keeps_only_tools_that_still_exist(ctx: ToolContext) -> None:
    toolset, _ = discovery()
    await toolset.get_tools(ctx)
    recorded = ToolResult(
        "Found 2 tools for 'x'; you can call them now:\n- gone__tool(a): Old.\n- bash(): B."
    )
    toolset.replayed(DISCOVER_TOOL, {"query": "x"}, recorded, ctx)
    assert toolset.discovered(ctx) == {"bash"}


async def test_replay_of_a_direct_call_restores_that_tool(ctx: ToolContext) -> None:
    toolset, inner = discovery()
    await toolset.get_tools(ctx)
    toolset.replayed("mail__sendMessage", {}, ToolResult("sent"), ctx)
    toolset.replayed("no_such_tool", {}, ToolResult("?", is_error=True), ctx)
    assert toolset.discovered(ctx) == {"mail__sendMessage"}
    assert inner.replays == ["mail__sendMessage", "no_such_tool"]


# --- through an agent -----------------------------------------------------------------------


def user_tools() -> list[Tool]:
    """60 tools from five services, one of which tells the weather."""

    def make(service: str, verb: str, thing: str) -> Tool:
        def run(target: str, note: str = "") -> str:
            return f"{verb} {thing} {target} done"

        return Tool(
            run, name=f"{service}__{verb}_{thing}", description=f"{verb.title()} a {thing} in {service}."
        )

    tools = [
        make(service, verb, thing)
        for service in ("crm", "shop", "wiki", "hr", "ads")
        for verb in ("create", "update", "delete", "list")
        for thing in ("record", "page", "entry")
    ][:59]

    def forecast(city: str) -> str:
        return f"Sunny in {city}"

    return [
        *tools,
        Tool(forecast, name="weather__get_forecast", description="Get the weather forecast for a city."),
    ]


class RecordingModel(ScriptedModel):
    """The scripted model, keeping every request it was sent."""

    def __init__(self, replies: Sequence[Mapping[str, Any]]) -> None:
        script = ScriptedModel.from_data(replies)
        super().__init__(script.replies, source=script.source)
        self.requests: list[ModelRequest] = []

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        self.requests.append(request)
        return super().stream(request)


async def test_an_agent_with_many_tools_discovers_then_calls_one(tmp_path: Path) -> None:
    model = RecordingModel(
        [
            {"tool": DISCOVER_TOOL, "args": {"query": "weather forecast"}},
            {"tool": "weather__get_forecast", "args": {"city": "Paris"}},
            {"text": "It is sunny in Paris."},
        ]
    )
    agent = Agent(model, tools=user_tools(), builtin_tools=False, limits=Limits())
    run = agent.start("What is the weather in Paris?", workspace=tmp_path)
    _ = [event async for event in run.stream()]

    first, second, third = (names(r.tools) for r in model.requests)
    assert DISCOVER_TOOL in first and len(first) < 10
    assert "weather__get_forecast" not in first
    assert "weather__get_forecast" in second
    results = [m for m in model.requests[2].messages if isinstance(m, ToolResultMessage)]
    assert results[0].content.splitlines()[1].startswith("- weather__get_forecast(city*)")
    assert results[1].content == "Sunny in Paris"
    assert "weather__get_forecast" in third
    assert run.snapshot().output == "It is sunny in Paris."
    model.assert_consumed()


# --- one agent, many runs ---------------------------------------------------------------------

Script = Sequence[tuple[str, dict[str, Any]] | str]


def by_goal(scripts: Mapping[str, Script], offered: dict[str, list[list[str]]]) -> FunctionModel:
    """A model that follows the script of each run's goal (the results so far pick the reply), so
    runs of one agent may interleave; ``offered`` gets the tools each request of a run offered."""

    def reply(request: ModelRequest) -> AssistantMessage:
        goal = next(m.content for m in request.messages if isinstance(m, UserMessage))
        done = sum(1 for m in request.messages if isinstance(m, ToolResultMessage))
        offered.setdefault(goal, []).append(names(request.tools))
        entry = scripts[goal][done]
        if isinstance(entry, str):
            return AssistantMessage(text=entry)
        return AssistantMessage(tool_calls=(ToolCall(f"{goal}-{done}", *entry),))

    return FunctionModel(reply)


async def test_what_one_run_finds_is_never_offered_to_another_run_at_the_same_time(tmp_path: Path) -> None:
    both = asyncio.Barrier(2)

    @tool
    async def meet() -> str:
        """Wait until the other run is here too."""
        async with asyncio.timeout(10):
            await both.wait()
        return "met"

    offered: dict[str, list[list[str]]] = {}
    model = by_goal(
        {
            "find": [(DISCOVER_TOOL, {"query": "weather forecast"}), ("meet", {}), "found"],
            "other": [("meet", {}), "done"],
        },
        offered,
    )
    agent = Agent(model, tools=[*user_tools(), meet], builtin_tools=False, limits=Limits())
    finder, other = agent.start("find", workspace=tmp_path), agent.start("other", workspace=tmp_path)
    results = await asyncio.gather(finder.result(), other.result())

    assert [r.output for r in results] == ["found", "done"]
    assert "weather__get_forecast" in offered["find"][2]
    # The other run asked again after the finder had found it (they met in between): not offered.
    assert len(offered["other"]) == 2
    assert all("weather__get_forecast" not in tools for tools in offered["other"])
    assert "meet" in offered["other"][1]  # what it called itself is offered to it


async def test_a_rebuilt_run_offers_the_tools_it_had_found(tmp_path: Path) -> None:
    script: Script = [
        (DISCOVER_TOOL, {"query": "weather forecast"}),
        ("agent_step", {"phase": "feedback", "summary": "ask", "feedback_message": "Which city?"}),
        ("weather__get_forecast", {"city": "Paris"}),
        "It is sunny in Paris.",
    ]
    store = await open_store(f"sqlite:///{tmp_path}/state/steward.db")
    try:
        before: dict[str, list[list[str]]] = {}
        first = Agent(
            by_goal({"weather": script}, before), tools=user_tools(), builtin_tools=False, store=store
        )
        original = first.start("weather", workspace=tmp_path)
        assert (await original.result()).question == "Which city?"
        assert "weather__get_forecast" in before["weather"][1]
        await first.aclose()  # its process ends here: nothing of it runs on beside the second

        after: dict[str, list[list[str]]] = {}
        # A new process, in effect: nothing shared with the first but the store.
        second = Agent(
            by_goal({"weather": script}, after), tools=user_tools(), builtin_tools=False, store=store
        )
        try:
            rebuilt = await second.resume(original.id)
            result = await rebuilt.answer("Paris")
        finally:
            await second.aclose()
    finally:
        await store.close()

    assert result.answered and result.output == "It is sunny in Paris."
    assert "weather__get_forecast" in after["weather"][0]  # the first request after the rebuild
