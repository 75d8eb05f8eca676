"""Where bubblewrap is missing or cannot start, sandboxed tools refuse: nothing runs unsandboxed."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import steward.safety.sandbox.bubblewrap as sandbox_module
from steward.config import SandboxConfig
from steward.errors import ToolError
from steward.safety.sandbox.bubblewrap import (
    INSTALL_FIX,
    BubblewrapSandbox,
    SandboxSettings,
    sandbox_from_config,
)
from steward.tools.base import ToolContext
from steward.tools.shell import bash

NO_USERNS = (
    "bwrap: No permissions to creating new namespace, likely because the kernel does not allow "
    "non-privileged user namespaces."
)


@pytest.fixture
def broken_bwrap(tmp_path: Path) -> Path:
    """A bwrap that fails the way it does where user namespaces are not allowed (and runs nothing)."""
    script = tmp_path / "bin" / "bwrap"
    script.parent.mkdir()
    script.write_text(f"#!/bin/sh\necho '{NO_USERNS}' >&2\nexit 1\n")
    script.chmod(0o755)
    return script


async def test_missing_bubblewrap_is_reported_with_the_fix(tmp_path: Path) -> None:
    status = BubblewrapSandbox(SandboxSettings(bwrap=str(tmp_path / "no-such-bwrap"))).probe()
    assert not status.ok
    assert "not installed" in status.reason
    assert "apt-get install bubblewrap" in status.fix
    assert "--no-sandbox" in status.fix


async def test_with_bubblewrap_missing_bash_refuses_and_runs_nothing(tmp_path: Path) -> None:
    box = BubblewrapSandbox(SandboxSettings(bwrap=str(tmp_path / "no-such-bwrap")))
    result = await bash.call({"command": "touch marker"}, ToolContext(workspace=tmp_path, sandbox=box))
    assert result.is_error
    assert INSTALL_FIX in result.content
    assert not (tmp_path / "marker").exists()


async def test_bubblewrap_that_cannot_start_is_reported_with_its_reason(broken_bwrap: Path) -> None:
    status = BubblewrapSandbox(SandboxSettings(bwrap=str(broken_bwrap))).probe()
    assert not status.ok
    assert "cannot start a sandbox here" in status.reason
    assert "non-privileged user namespaces" in status.reason
    assert "user namespaces" in status.fix
    assert "--no-sandbox" in status.fix


async def test_with_a_sandbox_that_cannot_start_bash_refuses_and_runs_nothing(
    tmp_path: Path, broken_bwrap: Path
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    box = BubblewrapSandbox(SandboxSettings(bwrap=str(broken_bwrap)))
    result = await bash.call({"command": "touch marker"}, ToolContext(workspace=workspace, sandbox=box))
    assert result.is_error
    assert "Commands cannot run: the sandbox does not work here" in result.content
    assert not (workspace / "marker").exists()


async def test_command_raises_a_tool_error_naming_the_fix(tmp_path: Path) -> None:
    box = BubblewrapSandbox(SandboxSettings(bwrap=str(tmp_path / "no-such-bwrap")))
    with pytest.raises(ToolError, match="apt-get install bubblewrap"):
        async with box.command(["true"], workspace=tmp_path, network=False, writable=True):
            pytest.fail("the body must not run")


async def test_turning_the_sandbox_off_is_explicit_and_runs_directly(tmp_path: Path) -> None:
    box = BubblewrapSandbox(SandboxSettings(enabled=False))
    result = await bash.call({"command": "touch marker"}, ToolContext(workspace=tmp_path, sandbox=box))
    assert not result.is_error
    assert (tmp_path / "marker").exists()
    assert "turned off" in box.probe().reason


def test_the_doctor_report_names_the_problem_and_the_fix(tmp_path: Path) -> None:
    report = BubblewrapSandbox(SandboxSettings(bwrap=str(tmp_path / "no-such-bwrap"))).probe().render()
    assert report.startswith("sandbox: NOT WORKING — bubblewrap is not installed")
    assert f"fix: {INSTALL_FIX}" in report


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap: apt-get install bubblewrap")
def test_the_doctor_report_says_what_works_here() -> None:
    box = BubblewrapSandbox()
    status = box.probe()
    assert box.probe() is status  # started once, then kept
    report = status.render()
    assert report.startswith("sandbox: ok — bubblewrap works")
    for key in ("network", "cpu", "memory", "file size", "processes", "python"):
        assert f"  {key}: " in report


def test_the_configuration_section_becomes_the_settings() -> None:
    config = SandboxConfig(readable=["/opt/tools"], env=["PIP_INDEX_URL"], cpu_s=30, max_processes=64)
    settings = sandbox_from_config(config).settings
    assert settings.readable == (Path("/opt/tools"),)
    assert settings.env == ("PIP_INDEX_URL",)
    assert (settings.cpu_s, settings.max_processes) == (30, 64)
    assert settings.enabled


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap: apt-get install bubblewrap")
def test_the_doctor_says_when_process_limits_cannot_be_enforced(monkeypatch: pytest.MonkeyPatch) -> None:
    # Root where no pids cgroup is writable: the kernel ignores RLIMIT_NPROC for root.
    monkeypatch.setattr("steward.safety.sandbox.bubblewrap.os.geteuid", lambda: 0)
    monkeypatch.setattr(sandbox_module, "find_pids_cgroup", lambda: (None, "no pids controller here"))
    status = BubblewrapSandbox().probe()
    assert status.ok
    assert status.details["processes"] == "not enforced"
    assert any(
        "process limits cannot be enforced" in w and "no pids controller here" in w for w in status.warnings
    )
    assert "warning: process limits cannot be enforced" in status.render()
