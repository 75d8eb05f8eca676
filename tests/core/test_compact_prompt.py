"""``prompt = "compact"``: a shorter static prompt for small models, the same tools and parsing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Literal

import pytest

from steward import Agent
from steward.config import Config, load_config
from steward.demo import DEMO_GOAL, demo_model, prepare_workspace
from steward.errors import ConfigError
from steward.models.base import ModelRequest
from steward.models.tokens import estimate_tokens, request_tokens
from steward.personas import find_persona, read_persona
from steward.phases import AGENT_STEP_SPEC, COMPACT_AGENT_STEP_SPEC, agent_step_spec, parse_agent_step
from steward.tools.base import ToolContext
from steward.tools.builtin import builtin_toolset
from steward.tools.compact import CompactToolset, first_sentence, without_descriptions

from .conftest import RecordingScript


def _shape(schema: Any) -> Any:
    """What a schema accepts, with its annotations left out: names, types, enums, required."""
    return without_descriptions(schema)


# --- the configuration key ---------------------------------------------------------------------


def test_prompt_is_full_unless_the_configuration_says_compact(tmp_path: Path) -> None:
    assert Config().prompt == "full"
    (tmp_path / "steward.toml").write_text('prompt = "compact"\n')
    assert load_config(tmp_path, user_file=tmp_path / "none.toml", environ={}).prompt == "compact"


def test_an_unknown_prompt_style_names_the_allowed_ones(tmp_path: Path) -> None:
    (tmp_path / "steward.toml").write_text('prompt = "tiny"\n')
    with pytest.raises(ConfigError) as caught:
        load_config(tmp_path, user_file=tmp_path / "none.toml", environ={})
    assert "'prompt' cannot be 'tiny'" in str(caught.value) and "compact" in str(caught.value)


def test_a_persona_can_choose_the_compact_prompt(tmp_path: Path) -> None:
    folder = tmp_path / "personas"
    folder.mkdir()
    (folder / "small.toml").write_text('role = "helper"\nprompt = "compact"\n')
    persona = find_persona("small", tmp_path)
    assert persona.layer()["prompt"] == "compact"
    config = load_config(tmp_path, user_file=tmp_path / "none.toml", environ={}, persona=persona.layer())
    assert config.prompt == "compact"
    agent = Agent(persona=persona)
    assert "agent_step once per step" in agent._static and agent._step_spec is COMPACT_AGENT_STEP_SPEC


def test_personas_show_says_which_prompt_a_persona_chose(tmp_path: Path) -> None:
    (tmp_path / "personas").mkdir()
    (tmp_path / "personas" / "small.toml").write_text('role = "helper"\nprompt = "compact"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("STEWARD_")}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config-home")
    shown = subprocess.run(
        [sys.executable, "-m", "steward", "personas", "show", "small"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    assert "prompt: compact" in shown.stdout.splitlines()


def test_a_persona_with_a_wrong_prompt_style_is_refused_with_its_file(tmp_path: Path) -> None:
    path = tmp_path / "odd.toml"
    path.write_text('prompt = "short"\n')
    with pytest.raises(ConfigError) as caught:
        read_persona(path)
    assert str(path) in str(caught.value) and "'prompt' cannot be 'short'" in str(caught.value)


# --- what the model is told ----------------------------------------------------------------------


def test_first_sentence_keeps_abbreviations_and_whole_texts_without_an_end() -> None:
    assert first_sentence("Read a file, e.g. a log. Then more.") == "Read a file, e.g. a log."
    assert first_sentence("List files\nin a folder\n\nMore text.") == "List files in a folder"
    assert first_sentence("Version 1.2 is read. Rest.") == "Version 1.2 is read."
    assert first_sentence("") == ""


def test_descriptions_go_and_everything_a_value_must_match_stays() -> None:
    schema = {
        "type": "object",
        "description": "the arguments",
        "properties": {
            "description": {"type": "string", "description": "a property that is called description"},
            "mode": {"type": "string", "enum": ["a", "b"], "title": "Mode", "default": "a"},
            "meta": {"type": "object", "default": {"description": "data, not a keyword"}},
        },
        "required": ["description"],
    }
    assert without_descriptions(schema) == {
        "type": "object",
        "properties": {
            "description": {"type": "string"},
            "mode": {"type": "string", "enum": ["a", "b"], "default": "a"},
            "meta": {"type": "object", "default": {"description": "data, not a keyword"}},
        },
        "required": ["description"],
    }


def test_the_compact_agent_step_has_the_same_fields_and_parses_the_same() -> None:
    full, compact = AGENT_STEP_SPEC.parameters, COMPACT_AGENT_STEP_SPEC.parameters
    assert compact == _shape(full)  # same names, types, enums and required lists
    assert "description" not in str(compact)
    assert (
        agent_step_spec("compact") is COMPACT_AGENT_STEP_SPEC and agent_step_spec("full") is AGENT_STEP_SPEC
    )
    raw = {
        "phase": "act",
        "summary": "look",
        "action": {"tool_name": "list_dir", "tool_input": {"path": "."}},
    }
    assert parse_agent_step(raw).action is not None


async def test_compact_tools_keep_their_arguments_and_lose_their_explanations(tmp_path: Path) -> None:
    ctx = ToolContext(workspace=tmp_path)
    full = list(await builtin_toolset().get_tools(ctx))
    compact_set = CompactToolset(builtin_toolset())
    compact = list(await compact_set.get_tools(ctx))
    assert [s.name for s in compact] == [s.name for s in full]
    for long, short in zip(full, compact, strict=True):
        assert short.parameters == _shape(long.parameters)
        assert short.description == first_sentence(long.description)
        assert len(short.description) <= len(long.description)
    # What the guard and the approvals read is the whole spec.
    whole = await compact_set.spec_of("bash", ctx)
    assert whole is not None and whole.description == next(s for s in full if s.name == "bash").description
    # The same tools come back as the same objects (the request builder measures each once).
    again = await compact_set.get_tools(ctx)
    assert all(a is b for a, b in zip(again, compact, strict=True))


# --- the demo, with the compact prompt -------------------------------------------------------------


async def _demo(tmp_path: Path, prompt: Literal["full", "compact"]) -> tuple[Any, ModelRequest]:
    model = RecordingScript(demo_model())
    agent = Agent(model, config=Config(prompt=prompt), sandbox=False)
    workspace = prepare_workspace(str(tmp_path))
    try:
        result = await agent.run(DEMO_GOAL, workspace=workspace)
    finally:
        await agent.aclose()
    model.assert_consumed()
    first: ModelRequest = model.requests[0]
    return result, first


async def test_the_demo_is_solved_with_the_compact_prompt_and_a_smaller_request(tmp_path: Path) -> None:
    compact_result, compact = await _demo(tmp_path, "compact")
    full_result, full = await _demo(tmp_path, "full")
    assert compact_result.solved, compact_result.output
    assert "All 4 tests now pass" in compact_result.output
    assert full_result.solved
    # The same tools are offered, each described briefly.
    assert [t.name for t in compact.tools] == [t.name for t in full.tools]
    assert compact.tools[-1] is COMPACT_AGENT_STEP_SPEC
    assert "agent_step once per step" in compact.system
    # Measurably smaller: the system prompt and the schemas, and the request as a whole.
    assert estimate_tokens(compact.system) < estimate_tokens(full.system)
    assert request_tokens(compact) < 0.7 * request_tokens(full)
