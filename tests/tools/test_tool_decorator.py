"""@tool: schemas from signatures and docstrings; every failure comes back as a result."""

from __future__ import annotations

from pathlib import Path

import pytest

from steward.errors import ToolError
from steward.tools.base import ToolContext, tool


@tool
def repeat(word: str, times: int = 2, separator: str = " ") -> str:
    """Repeat a word.

    Args:
        word: The word to repeat.
        times: How many times.
        separator: Put between the copies.
    """
    return separator.join([word] * times)


@tool
def where(ctx: ToolContext, name: str) -> str:
    """Say where a file would be.

    Args:
        name: A file name.
    """
    return str(ctx.workspace / name)


@tool
async def shout(text: str) -> str:
    """Upper-case text, asynchronously."""
    return text.upper()


@tool
def refuse(reason: str) -> str:
    """Always fails with a message for the model."""
    raise ToolError(f"Refused: {reason}. Ask for something else.")


@tool
def crash() -> str:
    """Has a bug."""
    raise ZeroDivisionError("division by zero")


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    return ToolContext(workspace=tmp_path)


def test_schema_comes_from_the_signature_and_the_docstring() -> None:
    assert repeat.name == "repeat"
    assert repeat.spec.description == "Repeat a word."
    assert repeat.spec.parameters == {
        "type": "object",
        "properties": {
            "word": {"type": "string", "description": "The word to repeat."},
            "times": {"type": "integer", "default": 2, "description": "How many times."},
            "separator": {"type": "string", "default": " ", "description": "Put between the copies."},
        },
        "required": ["word"],
    }


async def test_valid_arguments_run_the_function(ctx: ToolContext) -> None:
    result = await repeat.call({"word": "go", "times": 3}, ctx)
    assert not result.is_error
    assert result.content == "go go go"


async def test_invalid_argument_is_a_fixable_error_naming_the_field(ctx: ToolContext) -> None:
    result = await repeat.call({"word": "go", "times": "many"}, ctx)
    assert result.is_error
    assert result.content.startswith("Invalid arguments for repeat: times:")
    assert "Fix the arguments and call again." in result.content


async def test_missing_argument_names_the_field(ctx: ToolContext) -> None:
    result = await repeat.call({}, ctx)
    assert result.is_error
    assert "word: Field required" in result.content


async def test_extra_arguments_are_refused(ctx: ToolContext) -> None:
    result = await repeat.call({"word": "go", "colour": "red"}, ctx)
    assert result.is_error
    assert "colour" in result.content


async def test_tool_error_becomes_an_error_result_with_its_message(ctx: ToolContext) -> None:
    result = await refuse.call({"reason": "too risky"}, ctx)
    assert result.is_error
    assert result.content == "Refused: too risky. Ask for something else."


async def test_an_exception_in_a_tool_becomes_an_error_result(ctx: ToolContext) -> None:
    result = await crash.call({}, ctx)
    assert result.is_error
    assert result.content == "crash failed: ZeroDivisionError: division by zero"


async def test_async_tools_are_awaited(ctx: ToolContext) -> None:
    result = await shout.call({"text": "hi"}, ctx)
    assert result.content == "HI"


def test_tool_context_is_hidden_from_the_schema() -> None:
    assert list(where.spec.parameters["properties"]) == ["name"]


async def test_tool_context_is_injected(ctx: ToolContext) -> None:
    result = await where.call({"name": "a.txt"}, ctx)
    assert result.content == str(ctx.workspace / "a.txt")


async def test_tool_context_cannot_be_passed_by_the_model(ctx: ToolContext) -> None:
    result = await where.call({"name": "a.txt", "ctx": {"workspace": "/"}}, ctx)
    assert result.is_error
    assert "ctx" in result.content


def test_programmer_sections_stay_out_of_the_description() -> None:
    from steward.tools.base import Tool

    def find(name: str) -> str:
        """Find a thing by name.

        Args:
            name: What to find.

        Returns:
            The thing, described.

        Raises:
            KeyError: when missing.
        """
        return name

    spec = Tool(find).spec
    assert spec.description == "Find a thing by name."
    assert spec.parameters["properties"]["name"]["description"] == "What to find."


async def test_rich_return_values_become_json(tmp_path: Path) -> None:
    import enum
    from dataclasses import dataclass

    from steward.tools.base import Tool, ToolContext

    class Color(enum.Enum):
        RED = "red"

    @dataclass
    class Point:
        x: int
        color: Color

    def where() -> Point:
        """Where it is."""
        return Point(1, Color.RED)

    result = await Tool(where).call({}, ToolContext(workspace=tmp_path))
    assert result.content == '{"x": 1, "color": "red"}'
