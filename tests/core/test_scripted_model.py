"""The scripted model fails loudly: malformed scripts, running out, replies left over."""

from __future__ import annotations

from pathlib import Path

import pytest

from steward import ScriptedModel
from steward.errors import ScriptError
from steward.models.base import ModelRequest, ModelResponse, TextDelta, ThinkingDelta
from steward.models.scripted import load_script

REQUEST = ModelRequest(system="s", messages=[])


async def collect(model: ScriptedModel) -> list[object]:
    return [item async for item in model.stream(REQUEST)]


def test_yaml_script_with_every_reply_form(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(
        "- thinking: hmm\n  text: hello\n"
        "- tool: read_file\n  args: {path: a.txt}\n"
        "- tool_calls: [{name: bash, arguments: {command: ls}, id: x1}]\n"
        "- agent_step: {phase: end, summary: s, end_status: solved, end_message: ok}\n"
    )
    replies = load_script(path)
    assert replies[0].text == "hello" and replies[0].thinking[0].text == "hmm"
    assert replies[1].tool_calls[0].name == "read_file"
    assert replies[2].tool_calls[0].id == "x1"
    assert replies[3].tool_calls[0].name == "agent_step"


def test_json_script_in_a_replies_object(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text('{"replies": [{"text": "hi"}]}')
    assert load_script(path)[0].text == "hi"


async def test_stream_yields_thinking_text_then_response() -> None:
    model = ScriptedModel.from_data([{"thinking": "t", "text": "x"}])
    items = await collect(model)
    assert isinstance(items[0], ThinkingDelta) and isinstance(items[1], TextDelta)
    assert isinstance(items[-1], ModelResponse) and items[-1].usage.requests == 1


async def test_missing_call_ids_are_numbered() -> None:
    model = ScriptedModel.from_data([{"tool": "a", "args": {}}])
    response = (await collect(model))[-1]
    assert isinstance(response, ModelResponse)
    assert response.message.tool_calls[0].id == "call_1_1"


async def test_running_out_raises_a_clear_error() -> None:
    model = ScriptedModel.from_data([{"text": "one"}], source="demo.yaml")
    await collect(model)
    with pytest.raises(
        ScriptError, match=r"demo.yaml has 1 replies and all were used; the agent asked for reply 2"
    ):
        await collect(model)


def test_leftover_replies_are_reported() -> None:
    model = ScriptedModel.from_data([{"text": "a"}, {"text": "b"}], source="s.yaml")
    assert model.unconsumed == 2
    with pytest.raises(ScriptError, match=r"2 of 2 replies in s.yaml were never used"):
        model.assert_consumed()


def test_missing_file_names_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ScriptError, match=r"was not found\. Pass an existing JSON or YAML file"):
        ScriptedModel.from_file(tmp_path / "nope.yaml")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("- tool_cals: []\n", r"reply 1: unknown key\(s\) \['tool_cals'\]"),
        ("- {}\n", r"reply 1: a reply needs 'text' or at least one tool call"),
        ("- args: {a: 1}\n", r"'args' needs a 'tool' key"),
        ("- tool: x\n  args: [1]\n", r"arguments of x must be a mapping"),
        ("[]\n", r"non-empty list of replies"),
        ("- text: [unclosed\n", r"not valid YAML"),
    ],
)
def test_malformed_scripts_name_the_reply_and_key(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ScriptError, match=message):
        load_script(path)
