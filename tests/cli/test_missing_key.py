"""A model whose key is missing stops the command before anything runs or is recorded: exit 2,
one line naming the variable to set, whichever provider and however the model was chosen."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


@pytest.mark.parametrize(
    ("how", "variable"),
    [
        (["--model", "anthropic:claude-sonnet-4-5"], "ANTHROPIC_API_KEY"),
        (["--model", "openai:gpt-4o-mini"], "OPENAI_API_KEY"),
        (["env:STEWARD_MODEL=anthropic:claude-sonnet-4-5"], "ANTHROPIC_API_KEY"),
        (["toml:model = 'anthropic:claude-haiku-4-5'"], "ANTHROPIC_API_KEY"),
        (["toml:model = 'anthropic:x'\n[models.anthropic]\napi_key_env = 'TEAM_KEY'"], "TEAM_KEY"),
    ],
)
@pytest.mark.parametrize("command", ["run", "chat"])
def test_a_missing_key_exits_2_naming_it_and_records_nothing(
    cli: Any, tmp_path: Path, how: list[str], variable: str, command: str
) -> None:
    args, env = [], {}
    for item in how:
        if item.startswith("env:"):
            name, _, value = item.removeprefix("env:").partition("=")
            env[name] = value
        elif item.startswith("toml:"):
            (tmp_path / "steward.toml").write_text(item.removeprefix("toml:") + "\n")
        else:
            args.append(item)
    goal = ["fix the tests"] if command == "run" else []
    done = cli(command, *goal, *args, stdin="hello\n", **env)
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert variable in done.stderr and "Traceback" not in done.stderr
    listed = cli("runs", "list")
    assert "no runs recorded" in listed.stdout or "nothing recorded" in listed.stdout, listed.stdout
