"""Whole-number options and arguments say in our words what they take, with an example."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from steward.cli.commands import app


def test_a_word_given_for_max_steps_says_a_whole_number_of_steps_goes_there(cli: Any) -> None:
    proc = cli("run", "fix it", "--max-steps", "abc")
    assert proc.returncode == 2
    assert proc.stderr == "steward: --max-steps takes a whole number of steps, e.g. 40 (got 'abc')\n"


def test_a_number_out_of_range_says_which_numbers_the_option_takes(cli: Any) -> None:
    steps = cli("run", "fix it", "--max-steps", "0")
    assert steps.stderr == "steward: --max-steps takes 1 or more steps, e.g. 40 (got 0)\n"
    port = cli("serve", "--port", "70000")
    assert (port.returncode, port.stderr) == (
        2,
        "steward: --port takes a whole number from 0 to 65535, e.g. 8321 (got 70000)\n",
    )


def _whole_number_params() -> Iterator[tuple[list[str], Any]]:
    """Every parameter of every command that takes a whole number, with the command's words."""

    def walk(command: Any, path: list[str]) -> Iterator[tuple[list[str], Any]]:
        if hasattr(command, "commands"):  # a group
            for name, sub in command.commands.items():
                yield from walk(sub, [*path, name])
            return
        for param in command.params:
            descriptor = getattr(param, "type_descriptor", None)
            if descriptor is not None and descriptor.annotation is int:
                yield path, param

    yield from walk(typer.main.get_command(app), [])


WHOLE_NUMBER_PARAMS = list(_whole_number_params())


def test_the_command_line_has_whole_number_options_in_several_commands() -> None:
    commands = {" ".join(path) for path, _ in WHOLE_NUMBER_PARAMS}
    assert {"run", "submit", "worker", "batch", "serve", "runs list", "notes rm", "memory search"} <= commands


@pytest.mark.parametrize(
    ("path", "param"),
    WHOLE_NUMBER_PARAMS,
    ids=[f"{' '.join(path)} {param.opts[0]}" for path, param in WHOLE_NUMBER_PARAMS],
)
def test_every_whole_number_option_says_in_one_line_what_it_takes(path: list[str], param: Any) -> None:
    parser = param.type_descriptor.parameter_info.parser
    assert parser is not None, f"{' '.join(path)} {param.opts[0]} reads its number without our parser"
    given = ["twelve"] if param.param_type_name == "argument" else [param.opts[0], "twelve"]
    result = CliRunner().invoke(app, [*path, *given], env={"COLUMNS": "200"})
    assert result.exit_code == 2
    said = result.output.strip()
    assert len(said.splitlines()) == 1 and said.startswith("steward: "), said
    assert "'twelve'" in said and "e.g." in said, said
    assert "Invalid value" not in said and "Input should" not in said
