"""Ctrl-C at any moment of `steward run`'s start-up ends with one line, never a traceback, and
offers `steward resume` only for a run the store has.

The moments are found by watching the process, not by waiting: the libraries it has loaded so far
(``/proc/PID/maps``: the asyncio, pydantic and SQLite extension modules come in that order while
it imports, reads the configuration and opens the store), then its first event on stdout.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

SLOW = [{"tool": "bash", "args": {"command": "sleep 30"}}, {"text": "done"}]


def start(tmp_path: Path) -> subprocess.Popen[str]:
    script = tmp_path / "s.yaml"
    script.write_text(yaml.safe_dump(SLOW))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STEWARD_", "OPENAI_", "ANTHROPIC_"))}
    env |= {"XDG_CONFIG_HOME": str(tmp_path / "config-home")}
    return subprocess.Popen(
        [sys.executable, "-m", "steward", "run", "wait a while", "--model", f"scripted:{script}", "--json"],
        cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip


def wait_until_loaded(process: subprocess.Popen[str], library: str) -> None:
    """Until the process has mapped ``library`` (it got that far in its start-up)."""
    maps = Path(f"/proc/{process.pid}/maps")
    deadline = time.monotonic() + 60
    while library not in maps.read_text(errors="replace"):
        assert process.poll() is None, "it ended before getting there"
        assert time.monotonic() < deadline, f"{library} was never loaded"
        time.sleep(0.001)


def interrupted(process: subprocess.Popen[str]) -> tuple[int, str, list[dict[str, Any]]]:
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=60)
    return process.returncode, err, [json.loads(x) for x in out.splitlines() if x.startswith("{")]


def check_the_claim(cli: Any, err: str) -> str | None:
    """The run `steward resume` is offered for, which must be in the store (None: none offered)."""
    offered = re.search(r"steward resume (\w+)", err)
    if offered is None:
        return None
    shown = cli("runs", "show", offered.group(1))
    assert shown.returncode == 0, f"resume was offered for a run the store does not have: {err}"
    return offered.group(1)


@pytest.mark.parametrize("library", ["_asyncio", "pydantic_core", "_sqlite3"])
def test_ctrl_c_while_starting_is_one_line_and_claims_no_run(cli: Any, tmp_path: Path, library: str) -> None:
    process = start(tmp_path)
    wait_until_loaded(process, library)
    code, err, _ = interrupted(process)
    assert "Traceback" not in err, err
    assert code in (130, -signal.SIGINT), (code, err)  # -2: it was leaving already, silently
    check_the_claim(cli, err)


def test_ctrl_c_once_the_run_is_recorded_offers_to_resume_it(cli: Any, tmp_path: Path) -> None:
    process = start(tmp_path)
    assert process.stdout is not None
    first = json.loads(process.stdout.readline())
    assert first["type"] == "run_start"
    code, err, _ = interrupted(process)
    assert code == 130 and "Traceback" not in err, err
    assert check_the_claim(cli, err) == first["run_id"]
    assert "cancelled" in cli("runs", "list").stdout
