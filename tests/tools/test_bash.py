"""bash: real subprocesses in the workspace, bounded in time and output, leaving no orphans."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from steward.tools.base import ToolContext, ToolSettings
from steward.tools.shell import MAX_TIMEOUT_S, CappedOutput, bash


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state first), or None: no such pid."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return None


def started_at(pid: int) -> str | None:
    """When ``pid`` started (clock ticks since boot): with the pid, which process it is. Pids are
    reused, quickly on a busy machine whose pid_max is 32768."""
    fields = _stat(pid)
    return fields[19] if fields is not None else None


def alive(pid: int, start: str | None = None) -> bool:
    """True while ``pid`` runs; a zombie waiting to be reaped counts as gone, and so does another
    process that took the pid since ``start`` (its start time) was read."""
    fields = _stat(pid)
    if fields is None or fields[0] == "Z":
        return False
    return start is None or fields[19] == start


def gone_soon(pid: int, within_s: float = 60.0, start: str | None = None) -> bool:
    """Death after SIGKILL is asynchronous: allow the kernel a moment (a loaded machine, many)."""
    for _ in range(int(within_s / 0.02)):
        if not alive(pid, start):
            return True
        time.sleep(0.02)
    return False


async def run(ctx: ToolContext, command: str, timeout_s: float | None = None) -> tuple[bool, str]:
    arguments: dict[str, object] = {"command": command}
    if timeout_s is not None:
        arguments["timeout_s"] = timeout_s
    result = await bash.call(arguments, ctx)
    return result.is_error, result.content


async def test_runs_in_the_workspace(ctx: ToolContext) -> None:
    failed, output = await run(ctx, "pwd -P")
    assert not failed
    assert output == f"{ctx.workspace.resolve()}\nexit code: 0"


async def test_non_zero_exit_code_is_the_last_line_and_an_error(ctx: ToolContext) -> None:
    failed, output = await run(ctx, "echo partial; exit 3")
    assert failed
    assert output == "partial\nexit code: 3"


async def test_stderr_is_merged_in_order(ctx: ToolContext) -> None:
    _, output = await run(ctx, "echo out; echo err >&2; echo out2")
    assert output == "out\nerr\nout2\nexit code: 0"


async def test_stdin_is_empty(ctx: ToolContext) -> None:
    failed, output = await run(ctx, "cat; read -r line || echo eof")
    assert not failed
    assert output == "eof\nexit code: 0"


async def test_no_output_is_said_explicitly(ctx: ToolContext) -> None:
    _, output = await run(ctx, "true")
    assert output == "(no output)\nexit code: 0"


async def test_killed_by_a_signal_names_it(ctx: ToolContext) -> None:
    failed, output = await run(ctx, "kill -9 $$")
    assert failed
    assert output.endswith("exit code: -9 (killed by SIGKILL)")


async def test_output_is_decoded_as_utf8_with_replacement(ctx: ToolContext) -> None:
    _, output = await run(ctx, r"printf 'caf\xc3\xa9 \xff ok\n'")
    assert output == "café \ufffd ok\nexit code: 0"


async def test_timeout_kills_the_whole_process_tree(ctx: ToolContext) -> None:
    failed, output = await run(ctx, "sleep 100 & echo $!; sleep 100", timeout_s=0.5)
    assert failed
    assert "[timed out after 0.5 s;" in output
    background = int(output.splitlines()[0])
    assert gone_soon(background)


async def test_timeout_defaults_to_the_configured_limit(workspace: Path) -> None:
    ctx = ToolContext(workspace=workspace, settings=ToolSettings(bash_timeout_s=0.3))
    failed, output = await run(ctx, "sleep 30")
    assert failed
    assert "timed out after 0.3 s" in output


@pytest.mark.parametrize("timeout_s", [0, -1, MAX_TIMEOUT_S + 1])
async def test_timeout_outside_the_allowed_range_is_refused(ctx: ToolContext, timeout_s: float) -> None:
    failed, output = await run(ctx, "true", timeout_s=timeout_s)
    assert failed
    assert "timeout_s must be more than 0 and at most 600" in output


async def test_background_children_are_stopped_when_the_command_returns(ctx: ToolContext) -> None:
    failed, output = await run(ctx, "sleep 100 > /dev/null 2>&1 & echo $!", timeout_s=300)
    assert not failed
    assert "[background processes still running when the command exited were stopped]" in output
    assert gone_soon(int(output.splitlines()[0]))


async def test_a_background_child_holding_the_output_does_not_block_until_timeout(ctx: ToolContext) -> None:
    failed, output = await run(ctx, "sleep 100 & echo started", timeout_s=300)
    assert not failed
    assert output.startswith("started\n")


async def test_cancellation_kills_the_whole_process_tree(ctx: ToolContext) -> None:
    pids = ctx.workspace / "pids"
    task = asyncio.create_task(
        bash.call({"command": "sleep 100 & echo $$ $! > pids.tmp; mv pids.tmp pids; sleep 100"}, ctx)
    )
    for _ in range(250):
        if pids.exists():
            break
        await asyncio.sleep(0.02)
    shell, background = (int(pid) for pid in pids.read_text().split())
    starts = started_at(shell), started_at(background)  # both run now: these are our processes
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert gone_soon(shell, start=starts[0])
    assert gone_soon(background, start=starts[1])


async def test_long_output_keeps_head_and_tail_and_names_the_cut(workspace: Path) -> None:
    ctx = ToolContext(workspace=workspace, settings=ToolSettings(output_cap_chars=1000))
    failed, output = await run(ctx, "seq 1 100000")
    assert not failed
    assert output.startswith("1\n2\n3\n")
    assert output.endswith("99999\n100000\nexit code: 0")
    assert "chars cut: the output was 588895 chars" in output
    assert len(output) < 1400


async def test_huge_output_is_drained_without_being_kept(workspace: Path) -> None:
    ctx = ToolContext(workspace=workspace, settings=ToolSettings(output_cap_chars=2000))
    failed, output = await run(ctx, "head -c 50000000 /dev/zero | tr '\\0' 'x'; echo; echo done")
    assert not failed
    assert "the output was 50000006 chars" in output
    assert output.endswith("done\nexit code: 0")
    assert len(output) < 2400


def test_capped_output_keeps_only_head_and_tail() -> None:
    output = CappedOutput(100)
    for number in range(10_000):
        output.feed(f"{number:05}\n".encode())
    output.feed(b"", final=True)
    text = output.text()
    assert output.total == 60_000
    assert text.startswith("00000\n00001\n")
    assert text.endswith("09998\n09999\n")
    assert len(text) < 400


def test_capped_output_short_stream_is_kept_whole() -> None:
    output = CappedOutput(100)
    output.feed("héllo".encode()[:2])  # a multibyte character split across reads
    output.feed("héllo".encode()[2:], final=True)
    assert output.text() == "héllo"


async def test_a_start_cancelled_before_it_returned_stops_the_whole_group(tmp_path: Path) -> None:
    """What ``launch`` does when cancelled while asyncio connects the pipes: once the start is done,
    the shell's group goes, background children included (asyncio alone would kill the shell)."""
    from steward.tools.shell import launch, stop_started

    started = asyncio.ensure_future(
        launch(
            ["bash", "-c", "sleep 100 & echo $$ $! > pids.tmp; mv pids.tmp pids; sleep 100"],
            tmp_path,
            asyncio.SubprocessProtocol,
        )
    )
    pids = tmp_path / "pids"
    for _ in range(3000):  # bounded: a loaded machine may take seconds to start bash
        if pids.exists():
            break
        await asyncio.sleep(0.02)
    shell, background = (int(pid) for pid in pids.read_text().split())
    starts = started_at(shell), started_at(background)
    await stop_started(started)
    assert gone_soon(shell, start=starts[0]) and gone_soon(background, start=starts[1])
