"""Which replies the model cache may keep, and how its notes read and add up."""

from __future__ import annotations

from typing import Any

import pytest

from steward.cli.render import cache_summary
from steward.memory.cache import CacheNote, exact_key, literals, read_only_tool, reply_is_reusable
from steward.models.base import AssistantMessage, ModelRequest, ToolCall, ToolSpec, UserMessage


def reply(*calls: tuple[str, dict[str, Any]], text: str = "") -> AssistantMessage:
    return AssistantMessage(text=text, tool_calls=tuple(ToolCall(f"c{n}", *c) for n, c in enumerate(calls)))


def act(tool: str) -> tuple[str, dict[str, Any]]:
    return "agent_step", {"phase": "act", "summary": "s", "action": {"tool_name": tool, "tool_input": {}}}


@pytest.mark.parametrize(
    ("message", "reusable"),
    [
        (reply(text="The answer is 4."), True),
        (reply(("read_file", {"path": "a.py"}), ("grep", {"pattern": "x"})), True),
        (reply(("agent_step", {"phase": "plan", "summary": "s"})), True),
        (reply(("agent_step", {"phase": "end", "summary": "s", "end_status": "solved"})), True),
        (reply(act("read_file")), True),
        (reply(act("write_file")), False),
        (reply(act("bash")), False),
        (reply(("agent_step", {"phase": "act", "summary": "s"})), False),  # no action named
        (reply(("read_file", {"path": "a.py"}), ("edit_file", {"path": "a.py"})), False),
        (reply(("bash", {"command": "ls"})), False),  # opaque: any command may write
        (reply(("fetch_url", {"url": "https://example.org"})), False),
        (reply(("delegate", {"role": "reviewer", "goal": "g"})), False),
        (reply(("memory_append", {"label": "human", "content": "x"})), False),
        (reply(("my_own_tool", {})), False),  # unknown tools are taken to have side effects
        (AssistantMessage(), False),  # nothing to replay
        (AssistantMessage(tool_calls=(ToolCall("c", "read_file", {}, arguments_error="not JSON"),)), False),
    ],
)
def test_a_reply_is_kept_only_when_replaying_it_is_harmless(
    message: AssistantMessage, reusable: bool
) -> None:
    assert reply_is_reusable(message, read_only_tool) is reusable


def test_a_tool_that_says_it_is_read_only_counts_as_such() -> None:
    spec = ToolSpec("docs__search", "Search the docs.", {"type": "object"}, origin="mcp:docs", read_only=True)
    message = reply(("docs__search", {"q": "x"}))
    assert not reply_is_reusable(message, read_only_tool)
    assert reply_is_reusable(message, read_only_tool, [spec])


def test_the_exact_key_ignores_only_the_durations_shown() -> None:
    def req(context: str, goal: str = "g") -> ModelRequest:
        return ModelRequest(system="s", messages=[UserMessage(goal)], context=context)

    shown = "[Steps]\n  [Step 1] ACT: Execute read_file\n    Duration: 3ms\n"
    assert exact_key("m", req(shown)) == exact_key("m", req(shown.replace("3ms", "17ms")))
    assert exact_key("m", req(shown)) != exact_key("m", req(shown.replace("read_file", "list_dir")))
    assert exact_key("m", req(shown)) != exact_key("other", req(shown))
    assert exact_key("m", req(shown)) != exact_key("m", req(shown, "g2"))


def test_literals_are_what_a_goal_names_exactly() -> None:
    assert literals("How many lines does notes_01.txt have?") == {"notes_01.txt"}
    assert literals("Find 'Deadline' in src/app.py, version 2.") == {"'deadline'", "src/app.py", "2"}
    assert literals("Which licence is the project under? Look at LICENSE.") == frozenset()


@pytest.mark.parametrize(
    "note",
    [
        CacheNote(hit=True, kind="exact", tokens_saved=12_345),
        CacheNote(hit=True, kind="similar", tokens_saved=800, similarity=0.962),
        CacheNote(hit=False, kind="similar", similarity=0.41),
        CacheNote(hit=False, kind="similar"),
        CacheNote(hit=False, kind="exact"),
    ],
)
def test_a_note_reads_back_from_its_message(note: CacheNote) -> None:
    assert CacheNote.parse(note.message) == note


def test_other_notices_are_not_notes() -> None:
    assert CacheNote.parse("the server cannot stream tool calls; whole replies are asked for") is None


def test_the_summary_counts_hits_by_kind_misses_and_tokens() -> None:
    notes = [
        CacheNote(True, "exact", 5_000),
        CacheNote(True, "exact", 4_400),
        CacheNote(True, "similar", 3_000, 0.97),
        *[CacheNote(False, "exact")] * 4,
    ]
    messages = [n.message for n in notes] + ["some other notice"]
    assert cache_summary(messages) == "cache: 3 hits (exact 2, similar 1), 4 misses, ~12,400 tokens saved"
    assert cache_summary([CacheNote(False, "exact").message]) == "cache: 0 hits, 1 miss"
    assert cache_summary(["some other notice"]) == ""
