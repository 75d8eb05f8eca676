"""execute_code: a Python program in the real sandbox, its tools reached over its channel."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from steward.safety.sandbox.bubblewrap import BubblewrapSandbox, SandboxSettings
from steward.tools.base import CombinedToolset, FunctionToolset, Tool, ToolContext, ToolResult, Toolset, tool
from steward.tools.builtin import builtin_toolset
from steward.tools.code import CodeToolset, code_tools, execute_code

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="needs bubblewrap: apt-get install bubblewrap"
)

LIMITS = SandboxSettings(cpu_s=5, memory_mb=256, file_size_mb=1, max_processes=32, tmpfs_mb=64)


@pytest.fixture(scope="module")
def sandbox() -> BubblewrapSandbox:
    return BubblewrapSandbox(LIMITS)


def program_toolset(*extra: Tool, wrapped: Toolset | None = None, max_calls: int = 50) -> CodeToolset:
    """The built-in tools and execute_code, with execute_code's calls going through ``wrapped``."""
    inner = wrapped or CombinedToolset([builtin_toolset(), FunctionToolset([*code_tools(), *extra])])
    return CodeToolset(inner, max_tool_calls=max_calls)


async def run_code(
    code: str,
    workspace: Path,
    sandbox: BubblewrapSandbox | None,
    *,
    toolset: Toolset | None = None,
    timeout_s: float = 20,
) -> ToolResult:
    ctx = ToolContext(workspace=workspace, sandbox=sandbox, run_id="code-test")
    arguments = {"code": code, "timeout_s": timeout_s}
    return await (toolset or program_toolset()).call_tool("execute_code", arguments, ctx)


def calls_of(result: ToolResult) -> list[tuple[str, Mapping[str, Any], bool]]:
    return [(c.tool, c.arguments, c.is_error) for c in result.nested]


# --- what comes back ---------------------------------------------------------------------


async def test_printed_output_and_the_last_expression_come_back(
    workspace: Path, sandbox: BubblewrapSandbox
) -> None:
    result = await run_code("print('hi')\nx = 6 * 7\nx", workspace, sandbox)
    assert not result.is_error
    assert result.content == "hi\n42"


async def test_a_last_line_that_is_not_an_expression_shows_nothing_more(
    workspace: Path, sandbox: BubblewrapSandbox
) -> None:
    result = await run_code("value = 1\nprint(value)\nvalue = 2", workspace, sandbox)
    assert result.content == "1"


async def test_an_exception_shows_the_programs_own_line_and_nothing_of_the_runner(
    workspace: Path, sandbox: BubblewrapSandbox
) -> None:
    code = "def half(n):\n    return n / 0\n\nprint('before')\nhalf(3)\n"
    result = await run_code(code, workspace, sandbox)
    assert result.is_error
    assert "before" in result.content
    assert 'File "<code>", line 5' in result.content and 'File "<code>", line 2, in half' in result.content
    assert "ZeroDivisionError: division by zero" in result.content
    assert "runner" not in result.content and "exec(" not in result.content


async def test_a_syntax_error_names_its_line(workspace: Path, sandbox: BubblewrapSandbox) -> None:
    result = await run_code("x = 1\nif x\n    pass\n", workspace, sandbox)
    assert result.is_error
    assert "line 2" in result.content and "SyntaxError" in result.content


# --- tools as functions ------------------------------------------------------------------


async def test_tools_are_functions_with_keyword_and_positional_arguments(
    workspace: Path, sandbox: BubblewrapSandbox
) -> None:
    (workspace / "notes.txt").write_text("alpha\nTODO: beta\n")
    code = (
        "text = read_file(path='notes.txt')\n"
        "print(len(text.splitlines()))\n"
        "print(grep('TODO'))\n"
        "list_dir('.')\n"
    )
    result = await run_code(code, workspace, sandbox)
    assert not result.is_error, result.content
    lines = result.content.splitlines()
    assert lines[0] == "2" and lines[1] == "notes.txt:2: TODO: beta" and "notes.txt" in lines[-1]
    assert calls_of(result) == [
        ("read_file", {"path": "notes.txt"}, False),
        ("grep", {"pattern": "TODO"}, False),
        ("list_dir", {"path": "."}, False),
    ]
    assert [c.n for c in result.nested] == [1, 2, 3]


async def test_a_failed_call_raises_tool_call_error_in_the_program(
    workspace: Path, sandbox: BubblewrapSandbox
) -> None:
    code = (
        "try:\n"
        "    read_file(path='missing.txt')\n"
        "except ToolCallError as error:\n"
        "    print('caught:', str(error)[:60])\n"
    )
    result = await run_code(code, workspace, sandbox)
    assert not result.is_error
    assert result.content.startswith("caught:") and "missing.txt" in result.content
    assert calls_of(result) == [("read_file", {"path": "missing.txt"}, True)]


@tool(name="weird-name.v2")
def weird(word: str) -> str:
    """A tool whose name is not a Python name.

    Args:
        word: Echoed back.
    """
    return f"echo {word}"


async def test_any_tool_is_reached_by_name_with_call_tool(
    workspace: Path, sandbox: BubblewrapSandbox
) -> None:
    code = "print(call_tool('weird-name.v2', word='a'))\nprint(weird_name_v2('b'))"
    result = await run_code(code, workspace, sandbox, toolset=program_toolset(weird))
    assert result.content == "echo a\necho b"


async def test_a_program_cannot_start_another_program(workspace: Path, sandbox: BubblewrapSandbox) -> None:
    code = "try:\n    call_tool('execute_code', code='print(1)')\nexcept ToolCallError as e:\n    print(e)"
    result = await run_code(code, workspace, sandbox)
    assert "cannot be called from a program" in result.content


async def test_the_number_of_calls_is_bounded(workspace: Path, sandbox: BubblewrapSandbox) -> None:
    (workspace / "a.txt").write_text("a")
    code = (
        "done = 0\n"
        "try:\n"
        "    for _ in range(50):\n"
        "        read_file(path='a.txt')\n"
        "        done += 1\n"
        "except ToolCallError as error:\n"
        "    print(done, error)\n"
    )
    result = await run_code(code, workspace, sandbox, toolset=program_toolset(max_calls=3))
    assert result.content.startswith("3 the program made 3 tool calls, the limit ([code] max_tool_calls)")
    assert len(result.nested) == 3


# --- limits ------------------------------------------------------------------------------


async def test_a_program_that_loops_is_stopped_by_the_time_limit(
    workspace: Path, sandbox: BubblewrapSandbox
) -> None:
    result = await run_code("while True:\n    pass\n", workspace, sandbox, timeout_s=2)
    assert result.is_error
    assert "stopped after 2 s" in result.content or "killed by signal" in result.content


async def test_the_time_limit_covers_the_programs_tool_calls(
    workspace: Path, sandbox: BubblewrapSandbox
) -> None:
    started = asyncio.Event()

    @tool
    async def slow() -> str:
        """Never answers in time."""
        started.set()
        await asyncio.Event().wait()  # until cancelled
        return "late"

    result = await run_code("slow()", workspace, sandbox, toolset=program_toolset(slow), timeout_s=2)
    assert started.is_set()
    assert result.is_error and "stopped after 2 s, its tool calls included" in result.content


async def test_a_fork_bomb_is_contained(workspace: Path, sandbox: BubblewrapSandbox) -> None:
    code = (
        "import os\n"
        "children = 0\n"
        "for _ in range(200):\n"
        "    try:\n"
        "        if os.fork() == 0:\n"
        "            import time; time.sleep(30); os._exit(0)\n"
        "        children += 1\n"
        "    except OSError:\n"
        "        break\n"
        "print('forked', children)\n"
    )
    result = await run_code(code, workspace, sandbox, timeout_s=10)
    forked = int(result.content.split("forked ")[1].split()[0]) if "forked " in result.content else 0
    assert forked < LIMITS.max_processes if LIMITS.max_processes else True


async def test_a_program_that_eats_memory_is_stopped(workspace: Path, sandbox: BubblewrapSandbox) -> None:
    code = "blocks = []\nwhile True:\n    blocks.append(bytearray(16 * 1024 * 1024))\n"
    result = await run_code(code, workspace, sandbox, timeout_s=10)
    assert result.is_error
    assert "MemoryError" in result.content or "killed by signal" in result.content


async def test_a_cancelled_call_kills_the_program(workspace: Path, sandbox: BubblewrapSandbox) -> None:
    from tests.safety.test_sandbox_limits import marker, none_left, processes_with

    mark = marker()
    code = f"import subprocess, time\nsubprocess.Popen(['sleep', '{mark}'])\nprint('up', flush=True)\ntime.sleep(60)\n"
    task = asyncio.ensure_future(run_code(code, workspace, sandbox, timeout_s=60))
    for _ in range(3000):  # bounded wait (60 s) for the program to start its child
        if processes_with(mark):
            break
        await asyncio.sleep(0.02)
    assert processes_with(mark)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert none_left(mark, within_s=30)


async def test_without_the_sandbox_the_program_still_runs_with_its_tools(workspace: Path) -> None:
    (workspace / "a.txt").write_text("x")
    result = await run_code("read_file(path='a.txt')", workspace, None)
    assert "x" in result.content and len(result.nested) == 1


class _Listed(Toolset):
    """Offers nothing: a program then has no tools (and says so when it calls one)."""

    async def get_tools(self, ctx: ToolContext) -> Sequence[Any]:
        return ()

    async def call_tool(self, name: str, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        return await FunctionToolset(code_tools()).call_tool(name, arguments, ctx)


async def test_execute_code_alone_has_no_tools(workspace: Path, sandbox: BubblewrapSandbox) -> None:
    code = "try:\n    call_tool('read_file', path='a')\nexcept ToolCallError as e:\n    print(e)"
    result = await run_code(code, workspace, sandbox, toolset=_Listed())
    assert result.content == "No tools are available to this program."


def test_the_model_sees_code_and_an_optional_time_limit() -> None:
    spec = execute_code.spec
    assert spec.name == "execute_code"
    assert spec.parameters["required"] == ["code"]
    assert set(spec.parameters["properties"]) == {"code", "timeout_s"}
    assert "read_file(path=" in spec.description and "ToolCallError" in spec.description
