"""Every path a tool takes stays inside the workspace, whatever trick the model tries."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from steward.errors import ToolError
from steward.tools._paths import display_path, resolve_in_workspace
from steward.tools.base import ToolContext
from steward.tools.files import edit_file, list_dir, read_file, write_file

SECRET_TEXT = "TOP SECRET"


def tree(directory: Path) -> dict[str, bytes]:
    """Every file under ``directory`` with its bytes: what 'nothing changed' is checked against."""
    return {
        str(path.relative_to(directory)): path.read_bytes() for path in directory.rglob("*") if path.is_file()
    }


async def assert_refused_everywhere(ctx: ToolContext, outside: Path, path: str) -> None:
    """Reading, writing, editing and listing ``path`` all fail, and nothing outside changes."""
    before = tree(outside)
    read = await read_file.call({"path": path}, ctx)
    write = await write_file.call({"path": path, "content": "pwned\n"}, ctx)
    edit = await edit_file.call({"path": path, "old_text": "TOP", "new_text": "pwned"}, ctx)
    listing = await list_dir.call({"path": path}, ctx)
    for result in (read, write, edit, listing):
        assert result.is_error, result.content
        assert SECRET_TEXT not in result.content
        if not Path(path).is_absolute():  # echoing the model's own absolute path back is fine
            assert str(outside) not in result.content
    assert tree(outside) == before


def test_relative_path_resolves_inside_the_workspace(workspace: Path) -> None:
    assert resolve_in_workspace(workspace, "src/app.py") == workspace.resolve() / "src" / "app.py"


def test_dot_is_the_workspace_root(workspace: Path) -> None:
    assert resolve_in_workspace(workspace, ".") == workspace.resolve()


@pytest.mark.parametrize("path", ["src/../a.txt", "./a.txt", "src/./../src/../a.txt", "a.txt/"])
def test_paths_that_normalise_back_inside_are_accepted(workspace: Path, path: str) -> None:
    assert resolve_in_workspace(workspace, path) == workspace.resolve() / "a.txt"


def test_absolute_path_inside_the_workspace_is_accepted(workspace: Path) -> None:
    inside = str(workspace / "sub" / ".." / "a.txt")
    assert resolve_in_workspace(workspace, inside) == workspace.resolve() / "a.txt"


def test_must_exist_reports_not_found(workspace: Path) -> None:
    with pytest.raises(ToolError, match="not found"):
        resolve_in_workspace(workspace, "missing.txt", must_exist=True)


async def test_dotdot_escape_is_refused(ctx: ToolContext, outside: Path) -> None:
    with pytest.raises(ToolError, match="outside the workspace"):
        resolve_in_workspace(ctx.workspace, "../outside/secret.txt")
    await assert_refused_everywhere(ctx, outside, "../outside/secret.txt")


async def test_dotdot_escape_cannot_create_a_file(ctx: ToolContext, outside: Path) -> None:
    result = await write_file.call({"path": "a/../../outside/new.txt", "content": "x"}, ctx)
    assert result.is_error
    assert not (outside / "new.txt").exists()


async def test_absolute_path_outside_is_refused(ctx: ToolContext, outside: Path) -> None:
    await assert_refused_everywhere(ctx, outside, str(outside / "secret.txt"))


async def test_symlinked_file_pointing_outside_is_refused(ctx: ToolContext, outside: Path) -> None:
    (ctx.workspace / "link.txt").symlink_to(outside / "secret.txt")
    with pytest.raises(ToolError, match="symlink"):
        resolve_in_workspace(ctx.workspace, "link.txt")
    await assert_refused_everywhere(ctx, outside, "link.txt")


async def test_symlinked_directory_pointing_outside_is_refused(ctx: ToolContext, outside: Path) -> None:
    (ctx.workspace / "linkdir").symlink_to(outside, target_is_directory=True)
    await assert_refused_everywhere(ctx, outside, "linkdir/secret.txt")
    await assert_refused_everywhere(ctx, outside, "linkdir")


async def test_new_file_under_a_symlinked_directory_is_refused(ctx: ToolContext, outside: Path) -> None:
    (ctx.workspace / "linkdir").symlink_to(outside, target_is_directory=True)
    result = await write_file.call({"path": "linkdir/deeper/new.txt", "content": "x"}, ctx)
    assert result.is_error
    assert "symlink" in result.content
    assert tree(outside) == {"secret.txt": b"TOP SECRET\n"}
    assert not (outside / "deeper").exists()


async def test_dangling_symlink_pointing_outside_is_refused(ctx: ToolContext, outside: Path) -> None:
    (ctx.workspace / "dangling").symlink_to(outside / "not-yet.txt")
    result = await write_file.call({"path": "dangling", "content": "x"}, ctx)
    assert result.is_error
    assert not (outside / "not-yet.txt").exists()


async def test_symlink_then_dotdot_cannot_climb_out(ctx: ToolContext, outside: Path) -> None:
    (outside / "nested").mkdir()
    (ctx.workspace / "linkdir").symlink_to(outside / "nested", target_is_directory=True)
    # Lexically 'secret.txt' in the workspace; really outside/secret.txt.
    await assert_refused_everywhere(ctx, outside, "linkdir/../secret.txt")


async def test_null_byte_is_refused(ctx: ToolContext, outside: Path) -> None:
    with pytest.raises(ToolError, match="NUL"):
        resolve_in_workspace(ctx.workspace, "a.txt\x00../../outside/secret.txt")
    await assert_refused_everywhere(ctx, outside, "a.txt\x00.png")


async def test_sibling_sharing_the_workspace_prefix_is_outside(tmp_path: Path, outside: Path) -> None:
    workspace = tmp_path / "ws"
    sibling = tmp_path / "ws2"
    workspace.mkdir()
    sibling.mkdir()
    (sibling / "secret.txt").write_text(SECRET_TEXT)
    ctx = ToolContext(workspace=workspace)
    with pytest.raises(ToolError, match="outside the workspace"):
        resolve_in_workspace(workspace, str(sibling / "secret.txt"))
    await assert_refused_everywhere(ctx, sibling, str(sibling / "secret.txt"))
    await assert_refused_everywhere(ctx, sibling, "../ws2/secret.txt")


async def test_home_directory_is_refused_and_not_created(ctx: ToolContext, outside: Path) -> None:
    with pytest.raises(ToolError, match="'~'"):
        resolve_in_workspace(ctx.workspace, "~/.ssh/id_rsa")
    await assert_refused_everywhere(ctx, outside, "~/notes.txt")
    assert not (ctx.workspace / "~").exists()


@pytest.mark.parametrize("path", ["", "   "])
def test_empty_path_is_refused(workspace: Path, path: str) -> None:
    with pytest.raises(ToolError, match="empty"):
        resolve_in_workspace(workspace, path)


def test_symlink_inside_the_workspace_is_followed(workspace: Path) -> None:
    (workspace / "real").mkdir()
    (workspace / "alias").symlink_to(workspace / "real", target_is_directory=True)
    assert resolve_in_workspace(workspace, "alias/a.txt") == workspace.resolve() / "real" / "a.txt"


def test_workspace_reached_through_a_symlink_accepts_its_own_absolute_paths(
    tmp_path: Path, workspace: Path
) -> None:
    alias = tmp_path / "alias"
    alias.symlink_to(workspace, target_is_directory=True)
    assert resolve_in_workspace(alias, str(alias / "a.txt")) == workspace.resolve() / "a.txt"


async def test_tools_work_in_a_workspace_reached_through_a_symlink(tmp_path: Path, workspace: Path) -> None:
    (workspace / "a.txt").write_text("hello\n")
    alias = tmp_path / "alias"
    alias.symlink_to(workspace, target_is_directory=True)
    result = await read_file.call({"path": "a.txt"}, ToolContext(workspace=alias))
    assert result.content == "     1\thello"


def test_refusal_names_the_rule_and_the_fix(workspace: Path) -> None:
    with pytest.raises(ToolError) as caught:
        resolve_in_workspace(workspace, "../x")
    message = str(caught.value)
    assert "'../x' is outside the workspace" in message
    assert "relative to the workspace root" in message


def test_display_path_is_workspace_relative(workspace: Path) -> None:
    assert display_path(workspace, workspace.resolve() / "src" / "a.py") == "src/a.py"
    assert display_path(workspace, workspace) == "."


def test_display_path_never_shows_a_machine_path_outside(workspace: Path, outside: Path) -> None:
    assert display_path(workspace, outside / "secret.txt") == "secret.txt"


def test_resolving_does_not_create_anything(workspace: Path) -> None:
    resolve_in_workspace(workspace, "new/dir/file.txt")
    assert os.listdir(workspace) == []
