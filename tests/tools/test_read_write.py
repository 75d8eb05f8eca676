"""read_file and write_file: line numbers, ranges, caps, refusals and reports."""

from __future__ import annotations

import os
from pathlib import Path

from steward.tools.base import ToolContext, ToolSettings
from steward.tools.files import read_file, write_file


def numbered_file(workspace: Path, count: int, name: str = "f.txt") -> Path:
    path = workspace / name
    path.write_text("".join(f"line {n}\n" for n in range(1, count + 1)))
    return path


async def test_read_file_numbers_lines_from_one_with_a_tab(ctx: ToolContext) -> None:
    (ctx.workspace / "a.py").write_text("import os\n\nprint(os.sep)\n")
    result = await read_file.call({"path": "a.py"}, ctx)
    assert not result.is_error
    assert result.content == "     1\timport os\n     2\t\n     3\tprint(os.sep)"


async def test_read_file_range_is_inclusive_and_says_what_it_shows(ctx: ToolContext) -> None:
    numbered_file(ctx.workspace, 5)
    result = await read_file.call({"path": "f.txt", "start_line": 2, "end_line": 3}, ctx)
    assert result.content == "     2\tline 2\n     3\tline 3\n[showing lines 2-3 of 5]"


async def test_read_file_end_line_past_the_end_stops_at_the_end(ctx: ToolContext) -> None:
    numbered_file(ctx.workspace, 3)
    result = await read_file.call({"path": "f.txt", "start_line": 2, "end_line": 99}, ctx)
    assert result.content == "     2\tline 2\n     3\tline 3\n[showing lines 2-3 of 3]"


async def test_read_file_start_line_past_the_end_is_an_error(ctx: ToolContext) -> None:
    numbered_file(ctx.workspace, 3)
    result = await read_file.call({"path": "f.txt", "start_line": 10}, ctx)
    assert result.is_error
    assert "has 3 lines" in result.content


async def test_read_file_rejects_line_zero_and_reversed_ranges(ctx: ToolContext) -> None:
    numbered_file(ctx.workspace, 3)
    zero = await read_file.call({"path": "f.txt", "start_line": 0}, ctx)
    reversed_range = await read_file.call({"path": "f.txt", "start_line": 3, "end_line": 2}, ctx)
    assert zero.is_error
    assert "numbered from 1" in zero.content
    assert reversed_range.is_error
    assert "end_line" in reversed_range.content


async def test_read_file_cap_names_the_start_line_to_continue(workspace: Path) -> None:
    numbered_file(workspace, 500)
    ctx = ToolContext(workspace=workspace, settings=ToolSettings(read_cap_chars=1000))
    first = await read_file.call({"path": "f.txt"}, ctx)
    assert len(first.content) < 1200
    last_line = first.content.splitlines()[-2]
    shown = int(last_line.split("\t")[0])
    assert first.content.endswith(
        f"[truncated at the size limit: showing lines 1-{shown} of 500; "
        f"call read_file with start_line={shown + 1} to continue]"
    )
    following = await read_file.call({"path": "f.txt", "start_line": shown + 1}, ctx)
    assert following.content.startswith(f"{shown + 1:>6}\tline {shown + 1}\n")


async def test_read_file_shows_the_head_of_a_line_longer_than_the_cap(workspace: Path) -> None:
    (workspace / "min.js").write_text("x" * 5000 + "\nsecond\n")
    ctx = ToolContext(workspace=workspace, settings=ToolSettings(read_cap_chars=100))
    result = await read_file.call({"path": "min.js"}, ctx)
    body, notice = result.content.split("\n")
    assert len(body) == 100
    assert notice.startswith(
        "[truncated: line 1 alone is 5000 chars, more than the size limit; showing its first 93."
    )
    assert "start_line=2" in notice


async def test_read_file_shows_crlf_lines_without_carriage_returns(ctx: ToolContext) -> None:
    (ctx.workspace / "w.txt").write_bytes(b"one\r\ntwo\r\n")
    result = await read_file.call({"path": "w.txt"}, ctx)
    assert result.content == "     1\tone\n     2\ttwo"


async def test_read_file_replaces_invalid_utf8(ctx: ToolContext) -> None:
    (ctx.workspace / "latin.txt").write_bytes(b"caf\xe9\n")
    result = await read_file.call({"path": "latin.txt"}, ctx)
    assert not result.is_error
    assert result.content == "     1\tcaf\ufffd"


async def test_read_file_reports_an_empty_file(ctx: ToolContext) -> None:
    (ctx.workspace / "empty.txt").write_text("")
    result = await read_file.call({"path": "empty.txt"}, ctx)
    assert not result.is_error
    assert result.content == "[empty.txt is empty]"


async def test_read_file_refuses_binary_files(ctx: ToolContext) -> None:
    (ctx.workspace / "img.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    result = await read_file.call({"path": "img.png"}, ctx)
    assert result.is_error
    assert "binary" in result.content


async def test_read_file_missing_file_says_not_found(ctx: ToolContext) -> None:
    result = await read_file.call({"path": "nope/missing.py"}, ctx)
    assert result.is_error
    assert "'nope/missing.py' not found" in result.content


async def test_read_file_on_a_directory_suggests_list_dir(ctx: ToolContext) -> None:
    (ctx.workspace / "src").mkdir()
    result = await read_file.call({"path": "src"}, ctx)
    assert result.is_error
    assert "list_dir" in result.content


async def test_read_file_refuses_a_fifo_without_blocking(ctx: ToolContext) -> None:
    os.mkfifo(ctx.workspace / "pipe")
    result = await read_file.call({"path": "pipe"}, ctx)
    assert result.is_error
    assert "not a regular file" in result.content


async def test_write_file_creates_parent_directories_and_reports_size(ctx: ToolContext) -> None:
    result = await write_file.call({"path": "a/b/c.txt", "content": "héllo\nworld\n"}, ctx)
    assert not result.is_error
    assert result.content == "Created a/b/c.txt (13 bytes, 2 lines)."
    assert (ctx.workspace / "a" / "b" / "c.txt").read_text(encoding="utf-8") == "héllo\nworld\n"


async def test_write_file_reports_overwriting(ctx: ToolContext) -> None:
    (ctx.workspace / "a.txt").write_text("old\n")
    result = await write_file.call({"path": "a.txt", "content": "new"}, ctx)
    assert result.content == "Overwrote a.txt (3 bytes, 1 line)."
    assert (ctx.workspace / "a.txt").read_text() == "new"


async def test_write_file_writes_content_byte_for_byte(ctx: ToolContext) -> None:
    await write_file.call({"path": "w.txt", "content": "a\r\nb\n\tc"}, ctx)
    assert (ctx.workspace / "w.txt").read_bytes() == b"a\r\nb\n\tc"


async def test_write_file_refuses_a_directory(ctx: ToolContext) -> None:
    (ctx.workspace / "src").mkdir()
    result = await write_file.call({"path": "src", "content": "x"}, ctx)
    assert result.is_error
    assert "is a directory" in result.content


async def test_write_file_under_a_file_is_a_clear_error(ctx: ToolContext) -> None:
    (ctx.workspace / "a.txt").write_text("x")
    result = await write_file.call({"path": "a.txt/b.txt", "content": "y"}, ctx)
    assert result.is_error
    assert result.content.startswith("Could not write 'a.txt/b.txt'")
    assert str(ctx.workspace) not in result.content
