"""Personas: files found in order, checked with the fix named, their words, tools, policy and limits
applied to a real run, protected in the workspace, and the commands that show and run them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from steward import Agent, FunctionModel
from steward.config import load_config
from steward.errors import ConfigError
from steward.models.base import AssistantMessage, ModelRequest, ToolCall, ToolResultMessage
from steward.personas import Persona, find_persona, list_personas, persona_from_data, read_persona


def ended(message: str) -> dict[str, Any]:
    """A scripted reply that ends the run solved with ``message`` (agent_step end)."""
    return {"agent_step": {"phase": "end", "summary": "done", "end_status": "solved", "end_message": message}}


@pytest.fixture(autouse=True)
def user_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "config-home"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home))
    return home / "steward" / "personas"


def write(directory: Path, name: str, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.toml"
    path.write_text(text)
    return path


def test_steward_ships_three_personas_that_load(tmp_path: Path) -> None:
    found = list_personas(tmp_path)
    assert {"coder", "reviewer", "researcher"} <= set(found)
    for name in ("coder", "reviewer", "researcher"):
        persona = find_persona(name, tmp_path)
        assert persona.role and persona.goal and persona.instructions and persona.tools
        assert "read_file" in persona.tools
    assert find_persona("reviewer", tmp_path).policy == {"write": False}


def test_the_workspace_comes_before_the_user_before_steward(tmp_path: Path, user_config: Path) -> None:
    write(user_config, "coder", 'role = "the user\'s coder"\n')
    assert find_persona("coder", tmp_path).role == "the user's coder"
    write(tmp_path / "personas", "coder", 'role = "this project\'s coder"\n')
    chosen = find_persona("coder", tmp_path)
    assert chosen.role == "this project's coder" and chosen.source == tmp_path / "personas" / "coder.toml"
    assert list_personas(tmp_path)["coder"] == tmp_path / "personas" / "coder.toml"


def test_a_mistake_names_the_file_the_key_and_what_is_allowed(tmp_path: Path) -> None:
    personas = tmp_path / "personas"
    bad_key = write(personas, "a", 'role = "x"\ntool = ["bash"]\n')
    with pytest.raises(ConfigError, match="unknown key 'tool'") as caught:
        read_persona(bad_key)
    assert str(bad_key) in str(caught.value) and "tools" in str(caught.value)
    with pytest.raises(ConfigError, match="'tools' must be a list"):
        read_persona(write(personas, "b", 'tools = "bash"\n'))
    with pytest.raises(ConfigError, match=r"unknown key 'limits.max_step'.*max_steps") as caught:
        read_persona(write(personas, "c", "[limits]\nmax_step = 3\n"))
    assert str(personas / "c.toml") in str(caught.value)
    with pytest.raises(ConfigError, match=r"'policy\.write' must be true or false"):
        read_persona(write(personas, "d", '[policy]\nwrite = "no"\n'))
    with pytest.raises(ConfigError, match="not valid TOML"):
        read_persona(write(personas, "e", "role = \n"))
    with pytest.raises(ConfigError, match=r"no persona 'nobody'.*coder"):
        find_persona("nobody", tmp_path)
    with pytest.raises(ConfigError, match="not a persona name"):
        find_persona("../escape", tmp_path)


class Recorder:
    """A model that calls ``calls`` one per step, then answers; it keeps every request."""

    def __init__(self, *calls: ToolCall) -> None:
        self.calls = list(calls)
        self.requests: list[ModelRequest] = []

    def __call__(self, request: ModelRequest) -> AssistantMessage:
        self.requests.append(request)
        if self.calls:
            return AssistantMessage(tool_calls=(self.calls.pop(0),))
        end = {"phase": "end", "summary": "done", "end_status": "solved", "end_message": "done"}
        return AssistantMessage(tool_calls=(ToolCall("end", "agent_step", end),))


async def test_the_persona_s_words_are_its_prompt_and_its_allowlist_wraps_the_tools(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    persona = persona_from_data(
        {
            "role": "archivist",
            "goal": "Keep notes tidy.",
            "backstory": "Librarian.",
            "tools": ["read_*", "glob"],
        },
        name="archivist",
    )
    model = Recorder(
        ToolCall("c1", "write_file", {"path": "x.txt", "content": "no"}),
        ToolCall("c2", "read_file", {"path": "notes.txt"}),
    )
    agent = Agent(FunctionModel(model), persona=persona, sandbox=False)
    result = await agent.run("tidy", workspace=tmp_path)
    assert result.solved
    first = model.requests[0]
    assert "You are archivist" in first.system and "Your role: archivist." in first.system
    assert "Your goal: Keep notes tidy." in first.system and "Background: Librarian." in first.system
    offered = {t.name for t in first.tools}
    assert {"read_file", "glob", "recall_output", "agent_step"} <= offered
    assert not offered & {"write_file", "edit_file", "bash", "grep", "list_dir"}
    results = {m.call_id: m for m in model.requests[-1].messages if isinstance(m, ToolResultMessage)}
    assert results["c1"].is_error and "not available" in results["c1"].content
    assert not (tmp_path / "x.txt").exists()  # not run, whatever the model asked
    assert "hello" in results["c2"].content


async def test_its_policy_and_limits_are_a_configuration_layer(tmp_path: Path) -> None:
    persona = persona_from_data({"policy": {"write": False}, "limits": {"max_steps": 3}}, name="reader")
    model = Recorder(*(ToolCall(f"c{i}", "glob", {"pattern": "*"}) for i in range(1, 10)))
    agent = Agent(FunctionModel(model), persona=persona, sandbox=False)
    result = await agent.run("look", workspace=tmp_path)
    assert result.steps == 3 and not result.solved  # the persona's step limit
    assert "write_file" not in {t.name for t in model.requests[0].tools}  # its write switch
    # Loaded with the configuration, the layer sits above the files, below the command line.
    (tmp_path / "steward.toml").write_text("[limits]\nmax_steps = 20\n[policy]\ndeny = ['bash(rm *)']\n")
    layered = Persona(
        "x", policy={"deny": ["bash(curl *)"]}, limits={"max_steps": 7}, model="openai:from-persona"
    )
    config = load_config(tmp_path, persona=layered.layer(), environ={})
    assert config.limits.max_steps == 7 and config.model == "openai:from-persona"
    assert set(config.policy.deny) == {"bash(rm *)", "bash(curl *)"}  # rules add up
    overridden = load_config(
        tmp_path, persona=layered.layer(), overrides={"model": "openai:flag"}, environ={}
    )
    assert overridden.model == "openai:flag"


def run_cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STEWARD_", "OPENAI_", "ANTHROPIC_"))}
    env["XDG_STATE_HOME"] = str(tmp_path.parent / f"{tmp_path.name}-state")
    return subprocess.run(
        [sys.executable, "-m", "steward", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_commands_list_show_and_run_a_persona(tmp_path: Path) -> None:
    script = [{"tool": "bash", "args": {"command": "echo hi"}}, ended("listed")]
    (tmp_path / "personas").mkdir()
    (tmp_path / "personas" / "script.yaml").write_text(yaml.safe_dump(script))
    write(
        tmp_path / "personas", "lister", 'role = "lister"\ntools = ["glob"]\nmodel = "scripted:script.yaml"\n'
    )
    listed = run_cli(tmp_path, "personas", "list")
    assert listed.returncode == 0, listed.stderr
    assert "lister" in listed.stdout and "coder" in listed.stdout and "personas/lister.toml" in listed.stdout
    shown = run_cli(tmp_path, "personas", "show", "lister")
    assert "tools: glob" in shown.stdout and "scripted:" in shown.stdout
    ran = run_cli(tmp_path, "run", "list things", "--persona", "lister", "--json")
    assert ran.returncode == 0, ran.stderr
    assert "not available to this agent" in ran.stdout  # bash is not the lister's
    missing = run_cli(tmp_path, "run", "x", "--persona", "nobody")
    assert (
        missing.returncode == 2
        and "no persona 'nobody'" in missing.stderr
        and "Traceback" not in missing.stderr
    )


async def test_an_agent_cannot_change_or_add_persona_files(tmp_path: Path) -> None:
    write(tmp_path / "personas", "coder", 'role = "coder"\ntools = ["read_file"]\n')
    model = Recorder(
        ToolCall("c1", "bash", {"command": "echo 'tools = [\"*\"]' >> personas/coder.toml"}),
        ToolCall("c2", "write_file", {"path": "personas/coder.toml", "content": 'tools = ["*"]'}),
        ToolCall("c3", "bash", {"command": "echo 'role = \"x\"' > personas/reviewer.toml"}),
    )
    agent = Agent(FunctionModel(model), builtin_tools=True)
    await agent.run("widen my tools", workspace=tmp_path)
    assert (tmp_path / "personas" / "coder.toml").read_text() == 'role = "coder"\ntools = ["read_file"]\n'
    assert not (tmp_path / "personas" / "reviewer.toml").exists()
    results = {m.call_id: m for m in model.requests[-1].messages if isinstance(m, ToolResultMessage)}
    assert all(results[c].is_error for c in ("c1", "c2", "c3"))
    assert "protected path" in results["c2"].content


async def test_a_missing_personas_folder_cannot_be_made_by_the_agent(tmp_path: Path) -> None:
    model = Recorder(
        ToolCall("c1", "bash", {"command": "mkdir -p personas && echo 'x' > personas/coder.toml"})
    )
    await Agent(FunctionModel(model)).run("make a persona", workspace=tmp_path)
    assert not (tmp_path / "personas" / "coder.toml").exists()
    assert not (tmp_path / "personas").exists() or not any((tmp_path / "personas").iterdir())


def test_a_run_started_as_a_persona_goes_on_as_that_persona(tmp_path: Path) -> None:
    script = [
        {"agent_step": {"phase": "feedback", "summary": "ask", "feedback_message": "Which folder?"}},
        {"tool": "bash", "args": {"command": "echo widened > widened.txt"}},
        ended("done"),
    ]
    (tmp_path / "personas").mkdir()
    (tmp_path / "personas" / "script.yaml").write_text(yaml.safe_dump(script))
    write(
        tmp_path / "personas", "asker", 'role = "asker"\ntools = ["glob"]\nmodel = "scripted:script.yaml"\n'
    )
    started = run_cli(tmp_path, "run", "ask first", "--persona", "asker", "--json")
    assert '"type":"waiting"' in started.stdout, started.stderr
    answered = run_cli(tmp_path, "answer", "last", "src", "--json")  # no --persona: the run's own
    assert answered.returncode == 0, answered.stderr
    assert "not available to this agent" in answered.stdout  # bash is still not the asker's
    assert not (tmp_path / "widened.txt").exists()


def test_an_output_schema_is_a_table_or_a_json_file_next_to_the_persona(tmp_path: Path) -> None:
    personas = tmp_path / "personas"
    inline = write(personas, "a", '[output_schema]\ntype = "object"\nrequired = ["count"]\n')
    assert read_persona(inline).output_schema == {"type": "object", "required": ["count"]}
    (personas / "answer.schema.json").write_text('{"type": "array"}')
    from_file = write(personas, "b", 'output_schema = "answer.schema.json"\n')
    assert read_persona(from_file).output_schema == {"type": "array"}
    assert read_persona(write(personas, "c", 'role = "x"\n')).output_schema is None


def test_a_bad_output_schema_names_the_file_the_key_and_what_is_allowed(tmp_path: Path) -> None:
    personas = tmp_path / "personas"
    cases = {
        "n": ("output_schema = 3\n", r"'output_schema' must be a table .* or the path of a \.json file"),
        "m": ('output_schema = "gone.json"\n', r"'output_schema': .*gone\.json: no such file"),
        "i": ('[output_schema]\ntype = "objekt"\n', r"'output_schema': not a valid JSON Schema"),
        "d": ("[output_schema]\ndefault = 1979-05-27\n", r"'output_schema': a JSON Schema holds only JSON"),
    }
    for name, (text, expected) in cases.items():
        path = write(personas, name, text)
        with pytest.raises(ConfigError, match=expected) as caught:
            read_persona(path)
        assert str(path) in str(caught.value), caught.value
    (personas / "broken.json").write_text("{")
    with pytest.raises(ConfigError, match=r"broken\.json: not valid JSON"):
        read_persona(write(personas, "b", 'output_schema = "broken.json"\n'))


def test_a_persona_s_output_schema_types_its_runs_and_is_shown(tmp_path: Path) -> None:
    script = [{"text": "three"}, {"text": '```json\n{"count": 3}\n```'}]
    (tmp_path / "personas").mkdir()
    (tmp_path / "personas" / "script.yaml").write_text(yaml.safe_dump(script))
    write(
        tmp_path / "personas",
        "counter",
        'model = "scripted:script.yaml"\n[output_schema]\ntype = "object"\nrequired = ["count"]\n',
    )
    shown = run_cli(tmp_path, "personas", "show", "counter")
    assert 'output_schema: {"type": "object", "required": ["count"]}' in shown.stdout, shown.stderr
    ran = run_cli(tmp_path, "run", "count", "--persona", "counter", "--quiet")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == '{"count": 3}'
