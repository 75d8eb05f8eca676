"""Paths are opened beneath the workspace in one step: a symlink swapped in meanwhile cannot lead out.

Each behaviour runs twice, through ``openat2`` and through the component walk (forced by
turning ``USE_OPENAT2`` off), so both ways are tested on this kernel. The race tests swap a
directory for a symlink to outside in a background thread while the tools work through it,
then check the disk: nothing written outside, nothing read from there.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest

from steward.errors import ToolError
from steward.safety.protected import protected_reason
from steward.tools import _beneath
from steward.tools._beneath import (
    MAX_LINK_HOPS,
    LeadsOutside,
    NotRegularFile,
    Root,
    locate_beneath,
    open_beneath,
    open_regular,
    replace_contents,
)
from steward.tools._paths import Checked, write_checked
from steward.tools.base import Tool, ToolContext
from steward.tools.files import edit_file, glob_paths, grep, list_dir, read_file, write_file

SECRET_TEXT = "TOP SECRET"
ROUNDS = 150
"""Tool calls per race test: each takes well under a millisecond, the swapper runs meanwhile."""

MAX_SWAPS = 5_000_000
"""The swapper's bound, in case nothing stops it."""


@pytest.fixture(params=["openat2", "walk"])
def resolver(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run the test once through openat2 and once through the walk alone."""
    if request.param == "openat2" and not _beneath.openat2_available():
        pytest.skip("this system has no openat2; the walk is tested by the other parameter")
    if request.param == "walk":
        monkeypatch.setattr(_beneath, "USE_OPENAT2", False)
    return str(request.param)


@pytest.fixture
def root(workspace: Path) -> Iterator[Root]:
    with Root.open(workspace) as opened:
        yield opened


def read_beneath(root: Root, path: str) -> str:
    with os.fdopen(open_regular(root, path), encoding="utf-8") as handle:
        return handle.read()


def tree(directory: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(directory)): path.read_bytes() for path in directory.rglob("*") if path.is_file()
    }


# --- racing swaps -----------------------------------------------------------------------------


def _renameat2() -> Callable[[Path, Path], None]:
    """Atomic exchange of two names (renameat2 RENAME_EXCHANGE): a directory and a symlink swap
    places with no moment where either name is missing."""
    libc = ctypes.CDLL(None, use_errno=True)
    call = libc.renameat2
    call.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint)
    call.restype = ctypes.c_int

    def exchange(first: Path, second: Path) -> None:
        if call(-100, os.fsencode(first), -100, os.fsencode(second), 2) != 0:
            error = ctypes.get_errno()
            raise OSError(error, os.strerror(error))

    return exchange


class Swapper:
    """Calls ``swap`` in a background thread as fast as it can until the block ends."""

    def __init__(self, swap: Callable[[], None]) -> None:
        self.swap = swap
        self.swaps = 0
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            for _ in range(MAX_SWAPS):
                if self.stop.is_set():
                    return
                self.swap()
                self.swaps += 1
        except BaseException as exc:  # reported by the test, not lost in the thread
            self.error = exc

    def __enter__(self) -> Swapper:
        self.thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop.set()
        self.thread.join()
        if self.error is not None:
            raise self.error
        assert self.swaps > 0, "the swapper never ran, so nothing was raced"


@pytest.fixture
def target_outside(outside: Path) -> Path:
    """A directory outside whose file has the same name as the one inside, holding the secret."""
    directory = outside / "dir"
    directory.mkdir()
    (directory / "f.txt").write_text(f"side A {SECRET_TEXT}\n")
    return directory


def directory_swapper(workspace: Path, target: Path) -> Swapper:
    """``ws/sub`` keeps turning from a real directory into a symlink to ``target`` and back."""
    exchange = _renameat2()
    (workspace / "sub").mkdir()
    (workspace / "sub" / "f.txt").write_text("side A\n")
    (workspace / ".sub-swap").symlink_to(target, target_is_directory=True)
    try:
        exchange(workspace / "sub", workspace / ".sub-swap")
        exchange(workspace / "sub", workspace / ".sub-swap")
    except OSError as exc:
        if exc.errno in (errno.ENOSYS, errno.EINVAL):
            pytest.skip(f"this filesystem cannot exchange names atomically ({exc.strerror})")
        raise
    return Swapper(lambda: exchange(workspace / "sub", workspace / ".sub-swap"))


def link_swapper(workspace: Path, target: Path) -> Swapper:
    """``ws/sub`` is a symlink that keeps being replaced (os.rename of a prepared link over it),
    pointing inside (``real``) and outside (``target``) in turn."""
    (workspace / "real").mkdir()
    (workspace / "real" / "f.txt").write_text("side A\n")
    (workspace / "sub").symlink_to("real", target_is_directory=True)
    targets = ["real", str(target)]
    count = [0]

    def swap() -> None:
        count[0] += 1
        prepared = workspace / ".sub-next"
        prepared.symlink_to(targets[count[0] % 2], target_is_directory=True)
        prepared.rename(workspace / "sub")

    return Swapper(swap)


async def test_a_directory_swapped_for_a_symlink_never_leads_the_tools_out(
    ctx: ToolContext, target_outside: Path, resolver: str
) -> None:
    before = tree(target_outside)
    written = refused = 0
    with directory_swapper(ctx.workspace, target_outside):
        for number in range(ROUNDS):
            write = await write_file.call({"path": f"sub/new{number}.txt", "content": "written\n"}, ctx)
            overwrite = await write_file.call({"path": "sub/f.txt", "content": "side A\n"}, ctx)
            edit = await edit_file.call(
                {"path": "sub/f.txt", "old_text": "side A", "new_text": "side B"}, ctx
            )
            read = await read_file.call({"path": "sub/f.txt"}, ctx)
            assert SECRET_TEXT not in read.content
            results = (write, overwrite, edit, read)
            written += sum(not result.is_error for result in results)
            refused += sum("symlink" in result.content for result in results)
    assert tree(target_outside) == before
    assert written > 0  # the race left room for the tools to work, and they did
    assert refused > 0  # and it reached them: some calls met the symlink


async def test_grep_and_list_dir_never_show_what_a_swapped_symlink_leads_to(
    ctx: ToolContext, target_outside: Path, resolver: str
) -> None:
    with directory_swapper(ctx.workspace, target_outside):
        for _ in range(ROUNDS):
            found = await grep.call({"pattern": "side", "path": "sub"}, ctx)
            listed = await list_dir.call({"path": "sub"}, ctx)
            anywhere = await grep.call({"pattern": "SECRET"}, ctx)
            assert SECRET_TEXT not in found.content
            assert SECRET_TEXT not in anywhere.content
            assert str(target_outside) not in listed.content


def test_open_beneath_never_reads_through_a_swapped_directory(
    root: Root, target_outside: Path, resolver: str
) -> None:
    seen: set[str] = set()
    with directory_swapper(root.path, target_outside):
        for _ in range(ROUNDS * 10):
            try:
                seen.add(read_beneath(root, "sub/f.txt"))
            except LeadsOutside:
                seen.add("refused")
    assert seen <= {"side A\n", "refused"}
    assert "side A\n" in seen


def test_replacing_never_writes_through_a_relinked_symlink(
    root: Root, target_outside: Path, resolver: str
) -> None:
    before = tree(target_outside)
    with link_swapper(root.path, target_outside):
        for number in range(ROUNDS * 10):
            try:
                located = locate_beneath(root, f"sub/new{number}.txt", create_parents=True)
            except LeadsOutside:
                continue
            try:
                replace_contents(located, b"written\n")
            finally:
                located.close()
    assert tree(target_outside) == before
    # Some writes went where the link pointed inside.
    assert any(name.startswith("new") for name in os.listdir(root.path / "real"))


def test_reading_through_a_relinked_symlink_reads_only_inside(
    root: Root, target_outside: Path, resolver: str
) -> None:
    seen: set[str] = set()
    with link_swapper(root.path, target_outside):
        for _ in range(ROUNDS * 10):
            try:
                seen.add(read_beneath(root, "sub/f.txt"))
            except LeadsOutside:
                seen.add("refused")
    assert seen <= {"side A\n", "refused"}
    assert "side A\n" in seen


# --- symlinks that are allowed ----------------------------------------------------------------


def test_an_absolute_symlink_pointing_inside_is_followed(root: Root, resolver: str) -> None:
    (root.path / "real").mkdir()
    (root.path / "real" / "f.txt").write_text("inside\n")
    (root.path / "abs").symlink_to(root.path / "real", target_is_directory=True)
    assert read_beneath(root, "abs/f.txt") == "inside\n"
    located = locate_beneath(root, "abs/f.txt")
    located.close()
    assert str(located.relative) == "real/f.txt"


def test_an_absolute_symlink_through_the_configured_workspace_path_is_followed(
    tmp_path: Path, workspace: Path, resolver: str
) -> None:
    alias = tmp_path / "alias"
    alias.symlink_to(workspace, target_is_directory=True)
    (workspace / "f.txt").write_text("inside\n")
    (workspace / "link").symlink_to(alias / "f.txt")
    with Root.open(alias) as root:
        assert read_beneath(root, "link") == "inside\n"


async def test_tools_follow_an_absolute_symlink_pointing_inside(ctx: ToolContext, resolver: str) -> None:
    (ctx.workspace / "real").mkdir()
    (ctx.workspace / "real" / "f.txt").write_text("inside\n")
    (ctx.workspace / "abs").symlink_to(ctx.workspace.resolve() / "real", target_is_directory=True)
    read = await read_file.call({"path": "abs/f.txt"}, ctx)
    write = await write_file.call({"path": "abs/g.txt", "content": "new\n"}, ctx)
    assert read.content == "     1\tinside"
    assert write.content == "Created real/g.txt (4 bytes, 1 line)."
    assert (ctx.workspace / "real" / "g.txt").read_text() == "new\n"


def test_a_chain_of_symlinks_is_followed_to_its_end(root: Root, resolver: str) -> None:
    (root.path / "real").mkdir()
    (root.path / "real" / "f.txt").write_text("end\n")
    (root.path / "third").symlink_to("real/f.txt")
    (root.path / "second").symlink_to("third")
    (root.path / "first").symlink_to(root.path / "second")
    assert read_beneath(root, "first") == "end\n"
    located = locate_beneath(root, "first")
    located.close()
    assert (str(located.relative), located.name) == ("real/f.txt", "f.txt")


def test_as_many_links_as_the_kernel_follows_are_followed_and_one_more_is_a_loop(
    root: Root, resolver: str
) -> None:
    (root.path / "f.txt").write_text("end\n")
    previous = "f.txt"
    for number in range(MAX_LINK_HOPS + 1):
        (root.path / f"l{number}").symlink_to(previous)
        previous = f"l{number}"
    assert read_beneath(root, f"l{MAX_LINK_HOPS - 1}") == "end\n"
    with pytest.raises(OSError, match="symbolic links") as caught:
        open_beneath(root, f"l{MAX_LINK_HOPS}", os.O_RDONLY)
    assert caught.value.errno == errno.ELOOP


def test_a_symlink_loop_is_refused(root: Root, resolver: str) -> None:
    (root.path / "loop1").symlink_to("loop2")
    (root.path / "loop2").symlink_to("loop1")
    with pytest.raises(OSError) as caught:
        open_beneath(root, "loop1/f.txt", os.O_RDONLY)
    assert caught.value.errno == errno.ELOOP


async def test_tools_name_a_symlink_loop_clearly(ctx: ToolContext, resolver: str) -> None:
    (ctx.workspace / "loop1").symlink_to("loop2")
    (ctx.workspace / "loop2").symlink_to("loop1")
    read = await read_file.call({"path": "loop1"}, ctx)
    write = await write_file.call({"path": "loop1/f.txt", "content": "x"}, ctx)
    listed = await list_dir.call({}, ctx)
    for path, result in (("loop1", read), ("loop1/f.txt", write)):
        assert result.is_error
        assert result.content.startswith(f"Path {path!r} goes through a loop of symlinks")
        assert str(ctx.workspace) not in result.content
    assert listed.content == "loop1 -> (a loop of symlinks)\nloop2 -> (a loop of symlinks)"


def test_dotdot_after_a_symlinked_directory_goes_to_the_real_parent(root: Root, resolver: str) -> None:
    (root.path / "real" / "inner").mkdir(parents=True)
    (root.path / "real" / "f.txt").write_text("real parent\n")
    (root.path / "f.txt").write_text("lexical parent\n")
    (root.path / "alias").symlink_to("real/inner", target_is_directory=True)
    # As the kernel resolves it: '..' of the link's target, not of the link's name.
    assert read_beneath(root, "alias/../f.txt") == "real parent\n"


# --- what leads out ---------------------------------------------------------------------------


def test_dotdot_above_the_root_is_refused(root: Root, outside: Path, resolver: str) -> None:
    (root.path / "up").symlink_to("..", target_is_directory=True)
    with pytest.raises(LeadsOutside):
        open_beneath(root, "../outside/secret.txt", os.O_RDONLY)
    with pytest.raises(LeadsOutside):
        open_beneath(root, "up/outside/secret.txt", os.O_RDONLY)


def test_dotdot_after_a_symlink_to_outside_is_refused(root: Root, outside: Path, resolver: str) -> None:
    (outside / "nested").mkdir()
    (root.path / "linkdir").symlink_to(outside / "nested", target_is_directory=True)
    with pytest.raises(LeadsOutside):
        open_beneath(root, "linkdir/../secret.txt", os.O_RDONLY)


def test_a_symlink_to_a_sibling_sharing_the_prefix_is_refused(
    tmp_path: Path, root: Root, resolver: str
) -> None:
    sibling = tmp_path / "ws2"
    sibling.mkdir()
    (sibling / "secret.txt").write_text(SECRET_TEXT)
    (root.path / "link").symlink_to(sibling / "secret.txt")
    with pytest.raises(LeadsOutside):
        open_beneath(root, "link", os.O_RDONLY)
    with pytest.raises(LeadsOutside):
        locate_beneath(root, "link", create_parents=True)


def test_missing_parents_are_not_made_on_the_way_out(root: Root, outside: Path, resolver: str) -> None:
    (root.path / "linkdir").symlink_to(outside, target_is_directory=True)
    with pytest.raises(LeadsOutside):
        locate_beneath(root, "linkdir/deeper/new.txt", create_parents=True)
    assert not (outside / "deeper").exists()


def test_a_write_finding_a_symlink_where_the_check_found_none_is_refused(workspace: Path) -> None:
    """The check saw a plain 'x'; by the write, 'x' is a link elsewhere (inside, even)."""
    (workspace / "hooks").mkdir()
    (workspace / "hooks" / "pre-commit").write_text("#!/bin/sh\n")
    (workspace / "x").symlink_to("hooks/pre-commit")
    checked = Checked("x", workspace.resolve() / "x", "x")
    with Root.open(workspace) as root, pytest.raises(ToolError, match="changed while it was being written"):
        write_checked(root, checked, b"pwned\n")
    assert (workspace / "hooks" / "pre-commit").read_text() == "#!/bin/sh\n"


def test_an_edit_whose_file_was_replaced_meanwhile_is_refused(workspace: Path) -> None:
    (workspace / "a.txt").write_text("one\n")
    (workspace / "b.txt").write_text("two\n")
    read_earlier = os.stat(workspace / "b.txt")
    checked = Checked("a.txt", workspace.resolve() / "a.txt", "a.txt")
    with Root.open(workspace) as root, pytest.raises(ToolError, match="changed"):
        write_checked(root, checked, b"edited\n", same_as=read_earlier)
    assert (workspace / "a.txt").read_text() == "one\n"


# --- files that are not text ------------------------------------------------------------------


def test_a_fifo_is_refused_without_waiting_for_a_writer(root: Root, resolver: str) -> None:
    os.mkfifo(root.path / "pipe")
    with pytest.raises(NotRegularFile):
        open_regular(root, "pipe")
    with pytest.raises(IsADirectoryError):
        open_regular(root, ".")


async def test_tools_pass_over_a_fifo_without_hanging(ctx: ToolContext, resolver: str) -> None:
    os.mkfifo(ctx.workspace / "pipe")
    (ctx.workspace / "a.txt").write_text("needle\n")
    write = await write_file.call({"path": "pipe", "content": "x"}, ctx)
    found = await grep.call({"pattern": "needle"}, ctx)
    assert write.is_error
    assert "not a regular file" in write.content
    assert found.content == "a.txt:1: needle"


# --- writing ----------------------------------------------------------------------------------


def test_replacing_keeps_the_mode_and_leaves_no_temporary_file(root: Root, resolver: str) -> None:
    script = root.path / "run.sh"
    script.write_text("echo old\n")
    script.chmod(0o750)
    located = locate_beneath(root, "run.sh")
    try:
        assert replace_contents(located, b"echo new\n") is True
    finally:
        located.close()
    assert script.read_text() == "echo new\n"
    assert stat.S_IMODE(script.stat().st_mode) == 0o750
    assert sorted(os.listdir(root.path)) == ["run.sh"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write any file")
async def test_a_file_we_may_not_write_is_not_replaced(ctx: ToolContext, resolver: str) -> None:
    locked = ctx.workspace / "locked.txt"
    locked.write_text("keep\n")
    locked.chmod(0o444)
    result = await write_file.call({"path": "locked.txt", "content": "changed\n"}, ctx)
    assert result.content == "Could not write 'locked.txt': Permission denied."
    assert locked.read_text() == "keep\n"


def test_a_reader_holding_the_old_file_sees_it_whole(root: Root, resolver: str) -> None:
    (root.path / "f.txt").write_text("old content\n")
    with os.fdopen(open_regular(root, "f.txt"), encoding="utf-8") as reader:
        located = locate_beneath(root, "f.txt")
        try:
            replace_contents(located, b"new content\n")
        finally:
            located.close()
        assert reader.read() == "old content\n"  # not half of either
    assert read_beneath(root, "f.txt") == "new content\n"


def test_missing_parent_directories_are_made_beneath_the_root(root: Root, resolver: str) -> None:
    located = locate_beneath(root, "a/b/c.txt", create_parents=True)
    try:
        assert located.stat is None
        assert replace_contents(located, b"made\n") is False
    finally:
        located.close()
    assert (root.path / "a" / "b" / "c.txt").read_text() == "made\n"


async def test_a_hard_link_to_a_protected_file_is_still_refused(workspace: Path, resolver: str) -> None:
    hook = workspace / ".git" / "hooks" / "pre-commit"
    hook.parent.mkdir(parents=True)
    hook.write_text("#!/bin/sh\necho hook\n")
    os.link(hook, workspace / "innocent.sh")
    ctx = ToolContext(workspace=workspace, protected=lambda path: protected_reason(workspace, path))
    write = await write_file.call({"path": "innocent.sh", "content": "pwned\n"}, ctx)
    edit = await edit_file.call({"path": "innocent.sh", "old_text": "hook", "new_text": "pwned"}, ctx)
    for result in (write, edit):
        assert result.is_error
        assert "hard link" in result.content
    assert hook.read_text() == "#!/bin/sh\necho hook\n"


# --- secret files -----------------------------------------------------------------------------


async def test_grep_does_not_search_secret_files_and_says_how_many(ctx: ToolContext, resolver: str) -> None:
    (ctx.workspace / ".env").write_text("TOKEN=needle\n")
    (ctx.workspace / "deploy.key").write_text("needle\n")
    (ctx.workspace / "notes.txt").symlink_to(".env")
    (ctx.workspace / "a.txt").write_text("needle\n")
    result = await grep.call({"pattern": "needle"}, ctx)
    assert (
        result.content
        == "a.txt:1: needle\n[3 secret files were not searched: their names match secret_files]"
    )


async def test_grep_on_a_secret_file_by_name_does_not_search_it(ctx: ToolContext) -> None:
    (ctx.workspace / ".env").write_text("TOKEN=needle\n")
    result = await grep.call({"pattern": "needle", "path": ".env"}, ctx)
    assert "TOKEN" not in result.content
    assert result.content.endswith("[1 secret file was not searched: its name matches secret_files]")


# --- housekeeping -----------------------------------------------------------------------------


async def test_no_file_descriptor_is_left_open(ctx: ToolContext, outside: Path, resolver: str) -> None:
    (ctx.workspace / "src" / "deep").mkdir(parents=True)
    (ctx.workspace / "src" / "deep" / "a.py").write_text("needle = 1\n" * 50)
    (ctx.workspace / "bin.dat").write_bytes(b"needle\x00")
    (ctx.workspace / "out").symlink_to(outside, target_is_directory=True)
    (ctx.workspace / "leak.txt").symlink_to(outside / "secret.txt")
    (ctx.workspace / "loop").symlink_to("loop")
    os.mkfifo(ctx.workspace / "pipe")
    calls: list[tuple[Tool, dict[str, Any]]] = [
        (read_file, {"path": "src/deep/a.py"}),
        (read_file, {"path": "bin.dat"}),
        (read_file, {"path": "out/secret.txt"}),
        (read_file, {"path": "pipe"}),
        (write_file, {"path": "src/new/b.py", "content": "needle\n"}),
        (write_file, {"path": "src"}),
        (edit_file, {"path": "src/deep/a.py", "old_text": "needle = 1\n" * 50, "new_text": "x\n"}),
        (list_dir, {}),
        (glob_paths, {"pattern": "**/*.py"}),
        (grep, {"pattern": "needle"}),
        (grep, {"pattern": "needle", "max_results": 1}),
        (grep, {"pattern": "needle", "path": "src/new/b.py"}),
    ]
    before = sorted(os.listdir("/proc/self/fd"))
    for call, arguments in calls:
        await call.call(arguments, ctx)
    assert sorted(os.listdir("/proc/self/fd")) == before
