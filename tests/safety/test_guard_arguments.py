"""Arguments of the wrong type are sent back to the model to fix, not judged as commands."""

from __future__ import annotations

from pathlib import Path

from steward.safety.policy.guard import Guard

WORKSPACE = Path("/srv/project")


def test_a_command_given_as_a_list_is_invalid_arguments_not_obfuscation() -> None:
    verdict = Guard().check("bash", {"command": ["ls", "-la"]}, workspace=WORKSPACE)
    assert not verdict.findings  # nothing was judged: the list is not a command line
    assert verdict.invalid.startswith("command must be a string, not a list")
    assert '{"command": "ls -la"}' in verdict.invalid  # the fix, spelled out


def test_the_suggested_command_line_quotes_words_as_the_shell_needs() -> None:
    verdict = Guard().check("bash", {"command": ["echo", "two words"]}, workspace=WORKSPACE)
    assert """{"command": "echo 'two words'"}""" in verdict.invalid


def test_a_command_that_is_not_a_string_or_list_is_named_by_its_type() -> None:
    for value, kind in ((None, "null"), (7, "a number"), ({"cmd": "ls"}, "an object")):
        verdict = Guard().check("bash", {"command": value}, workspace=WORKSPACE)
        assert verdict.invalid.startswith(f"command must be a string, not {kind}"), verdict.invalid


def test_a_file_path_given_as_a_list_is_invalid_arguments() -> None:
    verdict = Guard().check("write_file", {"path": ["a.txt"], "content": "x"}, workspace=WORKSPACE)
    assert verdict.invalid.startswith("path must be a string, not a list")


def test_a_string_command_is_judged_as_before() -> None:
    verdict = Guard().check("bash", {"command": "rm -rf /"}, workspace=WORKSPACE)
    assert verdict.blocked and not verdict.invalid
