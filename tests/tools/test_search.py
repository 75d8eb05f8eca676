"""list_dir, glob and grep: formats, ordering, skipped directories, symlinks and caps."""

from __future__ import annotations

from pathlib import Path

import pytest

from steward.tools.base import ToolContext, ToolSettings
from steward.tools.files import GLOB_CAP, LIST_CAP, glob_paths, grep, list_dir


def make_tree(root: Path, files: dict[str, str]) -> None:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


@pytest.fixture
def project(ctx: ToolContext) -> ToolContext:
    make_tree(
        ctx.workspace,
        {
            "README.md": "# Demo\nTODO: write docs\n",
            "src/app.py": "import os\n\ndef main():\n    return 'todo'\n",
            "src/util/strings.py": "def shout(s):\n    return s.upper()  # TODO\n",
            "src/web/app.ts": "export const todo = 1;\n",
            "tests/test_app.py": "def test_main():\n    assert True\n",
            ".git/config": "[core] TODO\n",
            "node_modules/pkg/index.js": "// TODO\n",
            ".venv/lib/site.py": "# TODO\n",
        },
    )
    return ctx


# --- list_dir -----------------------------------------------------------------------------


async def test_list_dir_sorts_by_name_marks_directories_and_sizes_files(project: ToolContext) -> None:
    result = await list_dir.call({}, project)
    assert result.content == "\n".join(
        [".git/", ".venv/", "README.md (24 bytes)", "node_modules/", "src/", "tests/"]
    )


async def test_list_dir_lists_a_subdirectory(project: ToolContext) -> None:
    result = await list_dir.call({"path": "src"}, project)
    assert result.content == "app.py (41 bytes)\nutil/\nweb/"


async def test_list_dir_shows_symlink_targets_without_machine_paths(ctx: ToolContext, outside: Path) -> None:
    make_tree(ctx.workspace, {"real/a.txt": "a"})
    (ctx.workspace / "alias").symlink_to(ctx.workspace / "real", target_is_directory=True)
    (ctx.workspace / "escape").symlink_to(outside / "secret.txt")
    result = await list_dir.call({}, ctx)
    assert result.content == "alias/ -> real/\nescape -> (outside the workspace)\nreal/"


async def test_list_dir_says_when_a_directory_is_empty(ctx: ToolContext) -> None:
    (ctx.workspace / "empty").mkdir()
    result = await list_dir.call({"path": "empty"}, ctx)
    assert result.content == "[empty/ is empty]"


async def test_list_dir_on_a_file_suggests_read_file(project: ToolContext) -> None:
    result = await list_dir.call({"path": "README.md"}, project)
    assert result.is_error
    assert "read_file" in result.content


async def test_list_dir_missing_directory_says_not_found(ctx: ToolContext) -> None:
    result = await list_dir.call({"path": "nope"}, ctx)
    assert result.is_error
    assert "not found" in result.content


async def test_list_dir_caps_the_entries_with_a_notice(ctx: ToolContext) -> None:
    for number in range(LIST_CAP + 5):
        (ctx.workspace / f"f{number:04}.txt").touch()
    lines = (await list_dir.call({}, ctx)).content.splitlines()
    assert len(lines) == LIST_CAP + 1
    assert lines[-1] == (
        f"[truncated: showing the first {LIST_CAP} of {LIST_CAP + 5} entries; "
        "use glob with a pattern to narrow the list]"
    )


# --- glob ---------------------------------------------------------------------------------


async def test_glob_double_star_matches_at_every_depth_sorted_by_path(project: ToolContext) -> None:
    result = await glob_paths.call({"pattern": "**/*.py"}, project)
    assert result.content == "src/app.py\nsrc/util/strings.py\ntests/test_app.py"


async def test_glob_single_star_stays_in_one_directory(project: ToolContext) -> None:
    result = await glob_paths.call({"pattern": "src/*"}, project)
    assert result.content == "src/app.py\nsrc/util/\nsrc/web/"


async def test_glob_searches_from_path(project: ToolContext) -> None:
    result = await glob_paths.call({"pattern": "*/*", "path": "src"}, project)
    assert result.content == "src/util/strings.py\nsrc/web/app.ts"


async def test_glob_supports_alternatives_and_sets(project: ToolContext) -> None:
    braces = await glob_paths.call({"pattern": "src/**/app.{py,ts}"}, project)
    sets = await glob_paths.call({"pattern": "[st]*/app.[!t]*"}, project)
    assert braces.content == "src/app.py\nsrc/web/app.ts"
    assert sets.content == "src/app.py"


async def test_glob_skips_tool_directories_unless_named(project: ToolContext) -> None:
    everything = await glob_paths.call({"pattern": "**/*.js"}, project)
    named = await glob_paths.call({"pattern": "node_modules/**/*.js"}, project)
    assert everything.content.startswith("No paths match '**/*.js'")
    assert "node_modules" in everything.content
    assert named.content == "node_modules/pkg/index.js"


async def test_glob_without_wildcards_names_one_path(project: ToolContext) -> None:
    found = await glob_paths.call({"pattern": "src/util"}, project)
    missing = await glob_paths.call({"pattern": "src/nope.py"}, project)
    assert found.content == "src/util/"
    assert missing.content == "No paths match 'src/nope.py'."


async def test_glob_refuses_an_empty_pattern(project: ToolContext) -> None:
    result = await glob_paths.call({"pattern": ""}, project)
    assert result.is_error
    assert "empty" in result.content


async def test_glob_refuses_dotdot(project: ToolContext) -> None:
    result = await glob_paths.call({"pattern": "../*"}, project)
    assert result.is_error
    assert "'..'" in result.content


async def test_glob_refuses_an_absolute_pattern_outside(project: ToolContext, outside: Path) -> None:
    result = await glob_paths.call({"pattern": str(outside / "*.txt")}, project)
    assert result.is_error
    assert "outside the workspace" in result.content
    assert "secret" not in result.content


async def test_glob_accepts_an_absolute_pattern_inside(project: ToolContext) -> None:
    result = await glob_paths.call({"pattern": str(project.workspace / "src" / "*.py")}, project)
    assert result.content == "src/app.py"


async def test_glob_does_not_descend_into_a_symlink_to_outside(ctx: ToolContext, outside: Path) -> None:
    (ctx.workspace / "linkdir").symlink_to(outside, target_is_directory=True)
    result = await glob_paths.call({"pattern": "**/*"}, ctx)
    assert result.content == "linkdir/"


async def test_glob_caps_the_matches_with_a_notice(ctx: ToolContext) -> None:
    for number in range(GLOB_CAP + 3):
        (ctx.workspace / f"f{number:04}.txt").touch()
    lines = (await glob_paths.call({"pattern": "*.txt"}, ctx)).content.splitlines()
    assert len(lines) == GLOB_CAP + 1
    assert lines[-1].startswith(f"[truncated: showing {GLOB_CAP} of {GLOB_CAP + 3} matches;")


# --- grep ---------------------------------------------------------------------------------


async def test_grep_prints_path_line_and_text_in_name_order(project: ToolContext) -> None:
    result = await grep.call({"pattern": "TODO"}, project)
    assert (
        result.content == "README.md:2: TODO: write docs\nsrc/util/strings.py:2:     return s.upper()  # TODO"
    )


async def test_grep_ignore_case(project: ToolContext) -> None:
    result = await grep.call({"pattern": "todo", "path": "src", "ignore_case": True}, project)
    assert result.content.splitlines() == [
        "src/app.py:4:     return 'todo'",
        "src/util/strings.py:2:     return s.upper()  # TODO",
        "src/web/app.ts:1: export const todo = 1;",
    ]


async def test_grep_glob_filters_by_name_or_by_path(project: ToolContext) -> None:
    by_name = await grep.call({"pattern": "todo", "glob": "*.ts", "ignore_case": True}, project)
    by_path = await grep.call({"pattern": "def", "glob": "src/**/*.py"}, project)
    assert by_name.content == "src/web/app.ts:1: export const todo = 1;"
    assert by_path.content == "src/app.py:3: def main():\nsrc/util/strings.py:1: def shout(s):"


async def test_grep_searches_a_single_file(project: ToolContext) -> None:
    result = await grep.call({"pattern": "def", "path": "tests/test_app.py"}, project)
    assert result.content == "tests/test_app.py:1: def test_main():"


async def test_grep_skips_binary_files_and_says_so(ctx: ToolContext) -> None:
    (ctx.workspace / "blob.bin").write_bytes(b"needle\x00\x01")
    (ctx.workspace / "a.txt").write_text("needle\n")
    result = await grep.call({"pattern": "needle"}, ctx)
    assert result.content == "a.txt:1: needle\n[skipped 1 binary file]"


async def test_grep_does_not_follow_symlinks_out_of_the_workspace(ctx: ToolContext, outside: Path) -> None:
    (ctx.workspace / "leak.txt").symlink_to(outside / "secret.txt")
    (ctx.workspace / "leakdir").symlink_to(outside, target_is_directory=True)
    result = await grep.call({"pattern": "SECRET"}, ctx)
    assert "TOP SECRET" not in result.content
    assert result.content.endswith("[skipped 1 symlink to outside the workspace]")
    direct = await grep.call({"pattern": "SECRET", "path": "leakdir"}, ctx)
    assert direct.is_error
    assert "TOP SECRET" not in direct.content


async def test_grep_invalid_regex_is_a_fixable_error(ctx: ToolContext) -> None:
    result = await grep.call({"pattern": "foo(bar"}, ctx)
    assert result.is_error
    assert "Invalid regex 'foo(bar': missing ), unterminated subpattern at position 3" in result.content
    assert "backslash" in result.content


async def test_grep_caps_results_with_a_notice(ctx: ToolContext) -> None:
    (ctx.workspace / "many.txt").write_text("hit\n" * 50)
    result = await grep.call({"pattern": "hit", "max_results": 10}, ctx)
    lines = result.content.splitlines()
    assert lines[:10] == [f"many.txt:{n}: hit" for n in range(1, 11)]
    assert lines[10].startswith("[truncated: showing the first 10 matches; more exist.")
    assert len(lines) == 11


async def test_grep_exactly_max_results_has_no_notice(ctx: ToolContext) -> None:
    (ctx.workspace / "ten.txt").write_text("hit\n" * 10)
    result = await grep.call({"pattern": "hit", "max_results": 10}, ctx)
    assert len(result.content.splitlines()) == 10


async def test_grep_caps_total_output_size(workspace: Path) -> None:
    (workspace / "wide.txt").write_text(("x" * 200 + "\n") * 100)
    ctx = ToolContext(workspace=workspace, settings=ToolSettings(output_cap_chars=1000))
    result = await grep.call({"pattern": "x"}, ctx)
    assert len(result.content) < 1300
    assert "[truncated: showing the first 4 matches" in result.content


async def test_grep_shortens_very_long_lines(ctx: ToolContext) -> None:
    (ctx.workspace / "min.js").write_text("needle" + "y" * 1000 + "\n")
    result = await grep.call({"pattern": "needle"}, ctx)
    assert result.content == "min.js:1: needle" + "y" * 294 + "…"


async def test_grep_rejects_max_results_out_of_range(ctx: ToolContext) -> None:
    result = await grep.call({"pattern": "x", "max_results": 0}, ctx)
    assert result.is_error
    assert "between 1 and 1000" in result.content


async def test_grep_no_match_says_what_was_skipped(project: ToolContext) -> None:
    result = await grep.call({"pattern": "zebra"}, project)
    assert result.content.startswith("No matches for 'zebra' in '.'")
    assert ".git" in result.content


async def test_grep_missing_path_says_not_found(ctx: ToolContext) -> None:
    result = await grep.call({"pattern": "x", "path": "nope"}, ctx)
    assert result.is_error
    assert "not found" in result.content
