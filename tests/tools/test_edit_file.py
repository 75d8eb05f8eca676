"""edit_file: one exact match or nothing changes; replacements are literal; newlines are kept."""

from __future__ import annotations

import codecs
from pathlib import Path

import pytest

from steward.tools.base import ToolContext
from steward.tools.files import edit_file

CODE = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"


@pytest.fixture
def code_file(ctx: ToolContext) -> Path:
    path = ctx.workspace / "calc.py"
    path.write_text(CODE)
    return path


def text_of(path: Path) -> str:
    return path.read_text()


async def edit(ctx: ToolContext, old: str, new: str, path: str = "calc.py") -> tuple[bool, str]:
    result = await edit_file.call({"path": path, "old_text": old, "new_text": new}, ctx)
    return result.is_error, result.content


async def test_replaces_the_single_match_and_reports_the_lines(ctx: ToolContext, code_file: Path) -> None:
    failed, message = await edit(ctx, "    return a - b\n", "    result = a - b\n    return result\n")
    assert not failed
    assert text_of(code_file) == CODE.replace("    return a - b\n", "    result = a - b\n    return result\n")
    assert message.startswith("Edited calc.py: replaced line 6 with lines 6-7.\n")
    assert "     7\t    return result" in message


async def test_deleting_text_reports_the_removed_lines(ctx: ToolContext, code_file: Path) -> None:
    failed, message = await edit(ctx, "\n\ndef sub(a, b):\n    return a - b\n", "")
    assert not failed
    assert text_of(code_file) == "def add(a, b):\n    return a + b\n"
    assert message.startswith("Edited calc.py: removed lines 3-6.")


async def test_no_match_leaves_the_file_untouched_and_names_the_closest_line(
    ctx: ToolContext, code_file: Path
) -> None:
    failed, message = await edit(ctx, "def subtract(a, b):", "def minus(a, b):")
    assert failed
    assert "not found" in message
    assert "The closest line is 5: 'def sub(a, b):'" in message
    assert text_of(code_file) == CODE


async def test_no_match_because_of_indentation_gives_a_whitespace_hint(
    ctx: ToolContext, code_file: Path
) -> None:
    failed, message = await edit(ctx, "def add(a, b):\n\treturn a + b", "def add(a, b):\n\treturn b + a")
    assert failed
    assert "near line 1 if whitespace were ignored" in message
    assert text_of(code_file) == CODE


async def test_no_match_because_of_pasted_line_numbers_says_so(ctx: ToolContext, code_file: Path) -> None:
    failed, message = await edit(ctx, "     2\t    return a + b", "     2\t    return b + a")
    assert failed
    assert "line-number prefixes" in message
    assert text_of(code_file) == CODE


async def test_several_matches_list_every_line_and_change_nothing(ctx: ToolContext, code_file: Path) -> None:
    failed, message = await edit(ctx, "(a, b):", "(x, y):")
    assert failed
    assert "occurs 2 times" in message
    assert "(lines 1, 5)" in message
    assert text_of(code_file) == CODE


async def test_overlapping_matches_count_as_several(ctx: ToolContext) -> None:
    (ctx.workspace / "a.txt").write_text("aaa\n")
    failed, message = await edit(ctx, "aa", "b", path="a.txt")
    assert failed
    assert "occurs 2 times" in message


@pytest.mark.parametrize("replacement", ["$1", "\\1", "\\g<0>", "\\n", "${name}"])
async def test_replacement_text_is_literal(ctx: ToolContext, code_file: Path, replacement: str) -> None:
    failed, _ = await edit(ctx, "a + b", replacement)
    assert not failed
    assert f"    return {replacement}\n" in text_of(code_file)


async def test_crlf_file_matches_lf_text_and_stays_crlf(ctx: ToolContext) -> None:
    path = ctx.workspace / "win.txt"
    path.write_bytes(b"one\r\ntwo\r\nthree\r\n")
    failed, message = await edit(ctx, "two\nthree", "2\n3\n3.5", path="win.txt")
    assert not failed, message
    assert path.read_bytes() == b"one\r\n2\r\n3\r\n3.5\r\n"


async def test_mixed_newlines_are_left_as_they_are(ctx: ToolContext) -> None:
    path = ctx.workspace / "mixed.txt"
    path.write_bytes(b"one\r\ntwo\nthree\r\n")
    failed, _ = await edit(ctx, "two", "TWO", path="mixed.txt")
    assert not failed
    assert path.read_bytes() == b"one\r\nTWO\nthree\r\n"


async def test_missing_final_newline_stays_missing(ctx: ToolContext) -> None:
    path = ctx.workspace / "a.txt"
    path.write_text("x = 1\ny = 2")
    await edit(ctx, "y = 2", "y = 3", path="a.txt")
    assert path.read_text() == "x = 1\ny = 3"


async def test_utf8_bom_and_non_ascii_text_are_kept(ctx: ToolContext) -> None:
    path = ctx.workspace / "bom.txt"
    path.write_bytes(codecs.BOM_UTF8 + "naïve café\n".encode())
    failed, _ = await edit(ctx, "café", "crème", path="bom.txt")
    assert not failed
    assert path.read_bytes() == codecs.BOM_UTF8 + "naïve crème\n".encode()


async def test_empty_old_text_is_refused(ctx: ToolContext, code_file: Path) -> None:
    failed, message = await edit(ctx, "", "x")
    assert failed
    assert "old_text is empty" in message
    assert "write_file" in message
    assert text_of(code_file) == CODE


async def test_identical_old_and_new_text_is_refused(ctx: ToolContext, code_file: Path) -> None:
    failed, message = await edit(ctx, "a + b", "a + b")
    assert failed
    assert "identical" in message


async def test_missing_file_says_not_found(ctx: ToolContext) -> None:
    failed, message = await edit(ctx, "a", "b", path="missing.py")
    assert failed
    assert "not found" in message


async def test_non_utf8_file_is_refused_and_untouched(ctx: ToolContext) -> None:
    path = ctx.workspace / "latin1.txt"
    path.write_bytes(b"caf\xe9 au lait\n")
    failed, message = await edit(ctx, "au lait", "noir", path="latin1.txt")
    assert failed
    assert "not valid UTF-8" in message
    assert path.read_bytes() == b"caf\xe9 au lait\n"
