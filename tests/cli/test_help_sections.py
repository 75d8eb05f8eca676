"""A help text that names a configuration section (``[budget] tokens``, ``[store] url``) shows it
as written: the help is rendered as rich markup, where an unescaped ``[budget]`` is a style tag
and vanishes, leaving ``( tokens)``."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import typer
from typer.testing import CliRunner

from steward.cli.commands import app

SECTION = re.compile(r"\[[a-z_]+(?:\.[A-Za-z_]+)*\]")


def _commands(command: Any, path: list[str]) -> Iterator[tuple[list[str], Any]]:
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        yield from _commands(sub, [*path, name])


def _sections(command: Any) -> set[str]:
    texts = [command.help or "", *(getattr(p, "help", None) or "" for p in command.params)]
    return {found for text in texts for found in SECTION.findall(text.replace("\\[", "["))}


def test_configuration_sections_named_in_help_are_shown() -> None:
    runner = CliRunner()
    checked = []
    for path, command in _commands(typer.main.get_command(app), []):
        if not (sections := _sections(command)):
            continue
        shown = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "200", "TERMINAL_WIDTH": "200"}).output
        assert {s for s in sections if s not in shown} == set(), f"steward {' '.join(path)} --help"
        checked.append(path)
    assert ["run"] in checked and ["memory", "list"] in checked and ["mcp", "call"] in checked
