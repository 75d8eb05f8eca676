"""`steward doctor` says whether the sandbox works here, and how to fix it when it does not."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest


def ended(message: str) -> dict[str, Any]:
    """A scripted reply that ends the run solved with ``message`` (agent_step end)."""
    return {"agent_step": {"phase": "end", "summary": "done", "end_status": "solved", "end_message": message}}


needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="needs bubblewrap: apt-get install bubblewrap"
)


@needs_bwrap
def test_doctor_reports_a_working_sandbox_and_its_limits(cli: Any) -> None:
    proc = cli("doctor")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert "sandbox: ok" in proc.stdout
    for limit in ("cpu:", "memory:", "file size:", "processes:", "network:"):
        assert limit in proc.stdout
    assert "policy: mode structured" in proc.stdout
    for layer in ("guard: on", "checkpoints: on", "change detection: on", "secrets:", "file tools:"):
        assert layer in proc.stdout, layer
    assert "own network namespace" in proc.stdout and "egress proxy" in proc.stdout


@needs_bwrap
def test_doctor_names_masked_programs_and_secret_files(cli: Any, tmp_path: Path) -> None:
    (tmp_path / "steward.toml").write_text('[policy]\ndeny = ["bash(rm *)"]\n')
    (tmp_path / ".env").write_text("TOKEN=abcdefghijkl\n")
    proc = cli("doctor")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert "program masks: rm" in proc.stdout
    assert "1 secret file here (.env)" in proc.stdout
    assert "abcdefghijkl" not in proc.stdout


def test_doctor_without_bubblewrap_names_the_fix(cli: Any, tmp_path: Path) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    proc = cli("doctor", PATH=str(empty))
    assert proc.returncode == 1
    assert "sandbox: NOT WORKING" in proc.stdout
    assert "apt-get install bubblewrap" in proc.stdout and "--no-sandbox" in proc.stdout
    assert "Traceback" not in proc.stderr


def test_run_without_bubblewrap_refuses_bash_and_names_the_fix(cli: Any, tmp_path: Path) -> None:
    import yaml

    empty = tmp_path / "empty-bin"
    empty.mkdir()
    script = tmp_path / "s.yaml"
    marker = tmp_path / "ran"
    script.write_text(yaml.safe_dump([{"tool": "bash", "args": {"command": f"touch {marker}"}}, ended("ok")]))
    proc = cli("run", "touch it", "--json", "--model", f"scripted:{script}", PATH=str(empty))
    assert not marker.exists()
    assert "apt-get install bubblewrap" in proc.stdout and "--no-sandbox" in proc.stdout


def test_no_sandbox_is_explicit_and_loud(cli: Any, tmp_path: Path) -> None:
    import yaml

    script = tmp_path / "s.yaml"
    script.write_text(yaml.safe_dump([{"tool": "bash", "args": {"command": "echo direct"}}, ended("ok")]))
    proc = cli("run", "echo", "--no-sandbox", "--model", f"scripted:{script}")
    assert proc.returncode == 0
    assert "--no-sandbox: commands run directly on this machine" in proc.stderr


def test_a_sandbox_turned_off_by_a_config_file_is_announced(cli: Any, tmp_path: Path) -> None:
    import yaml

    (tmp_path / "steward.toml").write_text("[sandbox]\nenabled = false\n")
    script = tmp_path / "s.yaml"
    script.write_text(yaml.safe_dump([ended("ok")]))
    proc = cli("run", "hi", "--model", f"scripted:{script}")
    assert proc.returncode == 0
    assert "the sandbox is off ([sandbox] enabled = false" in proc.stderr
