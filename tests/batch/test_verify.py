"""The verifier runs in the attempt's workspace, in the sandbox: exit 0 passes, anything else
(a failure, a timeout) fails, with its exit code and the end of its output kept."""

from __future__ import annotations

import asyncio
from pathlib import Path

from steward.batch.verify import run_verifier


def test_exit_zero_passes_and_runs_in_the_workspace(tmp_path: Path) -> None:
    (tmp_path / "mark.txt").write_text("here\n")
    verdict = asyncio.run(run_verifier(tmp_path, "grep -qx here mark.txt && echo checked", 60))
    assert (verdict.passed, verdict.exit_code) == (True, 0)
    assert "checked" in verdict.output


def test_a_failing_command_fails_with_its_exit_code(tmp_path: Path) -> None:
    verdict = asyncio.run(run_verifier(tmp_path, "echo not yet; exit 3", 60))
    assert (verdict.passed, verdict.exit_code) == (False, 3)
    assert "not yet" in verdict.output


def test_a_verifier_past_its_time_fails(tmp_path: Path) -> None:
    verdict = asyncio.run(run_verifier(tmp_path, "sleep 30", 1))
    assert verdict.passed is False
    assert "timed out after 1 s" in verdict.output
