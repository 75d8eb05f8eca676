"""The sandbox's self-check is remembered per machine: written, reused, invalidated, refreshed.

Whether a command ran the check or reused the file is told by a planted outcome: a remembered
"does not work" that only the file can have said shows as the start-up warning.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml


def ended(message: str) -> dict[str, Any]:
    """A scripted reply that ends the run solved with ``message`` (agent_step end)."""
    return {"agent_step": {"phase": "end", "summary": "done", "end_status": "solved", "end_message": message}}


needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="needs bubblewrap: apt-get install bubblewrap"
)
PLANTED = "planted by the test"


def _cache(tmp_path: Path) -> Path:
    # The cli fixture's XDG_STATE_HOME.
    return tmp_path.parent / f"{tmp_path.name}-state" / "steward" / "sandbox-check.json"


@pytest.fixture(autouse=True)
def _never_checked(tmp_path: Path, cli: Any) -> None:
    """A machine where no command checked the sandbox yet (the cli fixture remembers a check)."""
    _cache(tmp_path).unlink(missing_ok=True)


def _reply_only(cli: Any, tmp_path: Path, **env: str) -> Any:
    """A run that starts no command: only the start-up check can look at the sandbox."""
    script = tmp_path / "s.yaml"
    script.write_text(yaml.safe_dump([ended("ok")]))
    return cli("run", "say ok", "--model", f"scripted:{script}", **env)


def _plant_failure(cache: Path, **key_changes: Any) -> None:
    record = json.loads(cache.read_text())
    record.update(ok=False, reason=PLANTED, fix="nothing")
    record["key"].update(key_changes)
    cache.write_text(json.dumps(record))


@needs_bwrap
def test_the_first_command_writes_the_outcome_and_what_it_depends_on(cli: Any, tmp_path: Path) -> None:
    proc = _reply_only(cli, tmp_path)
    assert proc.returncode == 0, proc.stderr
    record = json.loads(_cache(tmp_path).read_text())
    assert record["ok"] is True and "bubblewrap works" in record["reason"]
    key = record["key"]
    bwrap = shutil.which("bwrap")
    assert bwrap is not None
    assert key["bwrap"] == bwrap and key["bwrap_mtime_ns"] == Path(bwrap).stat().st_mtime_ns
    assert key["kernel"] == os.uname().release and key["uid"] == os.geteuid()
    assert key["steward"] and "userns" in key


@needs_bwrap
def test_later_commands_reuse_the_remembered_outcome(cli: Any, tmp_path: Path) -> None:
    _reply_only(cli, tmp_path)
    _plant_failure(_cache(tmp_path))
    proc = _reply_only(cli, tmp_path)
    assert f"the sandbox does not work here ({PLANTED})" in proc.stderr


@needs_bwrap
@pytest.mark.parametrize(
    "change",
    [{"steward": "0.0.0-older"}, {"kernel": "1.0.0-other"}, {"uid": 54321}, {"bwrap_mtime_ns": 1}],
)
def test_a_changed_machine_is_checked_again(cli: Any, tmp_path: Path, change: dict[str, Any]) -> None:
    _reply_only(cli, tmp_path)
    _plant_failure(_cache(tmp_path), **change)
    proc = _reply_only(cli, tmp_path)
    assert PLANTED not in proc.stderr
    record = json.loads(_cache(tmp_path).read_text())
    assert record["ok"] is True and PLANTED not in record["reason"]  # checked again and rewritten


@needs_bwrap
def test_another_bwrap_is_checked_again(cli: Any, tmp_path: Path) -> None:
    bwrap = shutil.which("bwrap")
    assert bwrap is not None
    _reply_only(cli, tmp_path)
    _plant_failure(_cache(tmp_path))
    other = tmp_path / "bin"
    other.mkdir()
    (other / "bwrap").symlink_to(bwrap)
    proc = _reply_only(cli, tmp_path, PATH=f"{other}{os.pathsep}{os.environ['PATH']}")
    assert PLANTED not in proc.stderr
    assert json.loads(_cache(tmp_path).read_text())["key"]["bwrap"] == str(other / "bwrap")


@needs_bwrap
def test_a_damaged_file_is_checked_again_and_replaced(cli: Any, tmp_path: Path) -> None:
    _cache(tmp_path).parent.mkdir(parents=True, exist_ok=True)
    _cache(tmp_path).write_text("{not json")
    proc = _reply_only(cli, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(_cache(tmp_path).read_text())["ok"] is True


@needs_bwrap
def test_doctor_always_checks_again_and_refreshes_the_file(cli: Any, tmp_path: Path) -> None:
    _reply_only(cli, tmp_path)
    _plant_failure(_cache(tmp_path))
    before = json.loads(_cache(tmp_path).read_text())["checked_at"]
    proc = cli("doctor")
    assert proc.returncode == 0, proc.stdout
    assert "sandbox: ok" in proc.stdout and PLANTED not in proc.stdout
    assert str(_cache(tmp_path)) in proc.stdout
    record = json.loads(_cache(tmp_path).read_text())
    assert record["ok"] is True and record["checked_at"] > before
    assert f"({PLANTED})" not in _reply_only(cli, tmp_path).stderr  # and later commands see it


def test_a_remembered_success_never_lets_a_command_skip_the_real_check(cli: Any, tmp_path: Path) -> None:
    # A bwrap that cannot start anything, remembered (by a planted file) as working.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    path = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"
    _reply_only(cli, tmp_path, PATH=path)  # writes the real (failed) outcome for this bwrap
    record = json.loads(_cache(tmp_path).read_text())
    assert record["ok"] is False and record["key"]["bwrap"] == str(fake)
    record.update(ok=True, reason="planted: works", fix="")
    _cache(tmp_path).write_text(json.dumps(record))
    marker = tmp_path / "ran-unsandboxed"
    script = tmp_path / "touch.yaml"
    script.write_text(yaml.safe_dump([{"tool": "bash", "args": {"command": f"touch {marker}"}}, ended("ok")]))
    proc = cli("run", "touch it", "--json", "--model", f"scripted:{script}", PATH=path)
    assert not marker.exists()
    assert "the sandbox does not work here" in proc.stdout and "namespace" in proc.stdout
    assert json.loads(_cache(tmp_path).read_text())["ok"] is False  # the real check rewrote it
