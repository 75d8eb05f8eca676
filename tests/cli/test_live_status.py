"""A status line with the elapsed time while a tool call runs, read from a real terminal (a pty)."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml


def ended(message: str) -> dict[str, Any]:
    """A scripted reply that ends the run solved with ``message`` (agent_step end)."""
    return {"agent_step": {"phase": "end", "summary": "done", "end_status": "solved", "end_message": message}}


SLOW = {"tool": "bash", "args": {"command": "sleep 2.6; echo slept"}}
ANSWER = ended("finished")
_CONTROL = re.compile(r"\x1b\[(\d*)([A-Za-z])|\x1b\[\?\d+[hl]|\r|\n")


def run_in_terminal(tmp_path: Path, *args: str, timeout: float = 60) -> str:
    """What `steward ARGS` writes to a terminal (stdout and stderr both are the pty)."""
    script = tmp_path / "s.yaml"
    script.write_text(yaml.safe_dump([SLOW, ANSWER]))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STEWARD_", "OPENAI_", "ANTHROPIC_"))}
    env.update(TERM="xterm", COLUMNS="160", LINES="50", XDG_CONFIG_HOME=str(tmp_path / "config-home"))
    env.pop("NO_COLOR", None)
    controller, terminal = pty.openpty()
    command = [sys.executable, "-m", "steward", *args, "--no-sandbox", "--model", f"scripted:{script}"]
    proc = subprocess.Popen(command, cwd=tmp_path, env=env, stdin=terminal, stdout=terminal, stderr=terminal)
    os.close(terminal)
    written = b""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([controller], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(controller, 65536)
                except OSError:  # the process closed the terminal
                    break
                if not chunk:
                    break
                written += chunk
            elif proc.poll() is not None:
                break
    finally:
        os.close(controller)
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
    assert proc.returncode == 0, written.decode(errors="replace")
    return written.decode(errors="replace")


def screen(written: str) -> list[str]:
    """The lines left on the screen: carriage returns, cursor-up and erase-line applied."""
    lines, row, col = [""], 0, 0
    position = 0
    for match in _CONTROL.finditer(written):
        text = written[position : match.start()]
        line = lines[row]
        lines[row] = line[:col] + text + line[col + len(text) :]
        col += len(text)
        position = match.end()
        token = match.group(0)
        if token == "\n":
            row += 1
            col = 0
            if row == len(lines):
                lines.append("")
        elif token == "\r":
            col = 0
        elif match.group(2) == "A":
            row = max(0, row - int(match.group(1) or 1))
        elif match.group(2) == "K":
            lines[row] = ""
    lines[row] += written[position:]
    return lines


def test_a_running_tool_call_shows_its_elapsed_time_then_goes_away(tmp_path: Path) -> None:
    written = re.sub(r"\x1b\[[\d;]*m", "", run_in_terminal(tmp_path, "run", "wait"))  # no colours
    # Redrawn at least every second while the command sleeps.
    assert "running bash … 1 s" in written and "running bash … 2 s" in written
    left = screen(written)
    assert not [line for line in left if "running bash" in line], left
    assert any("✓" in line and "exit code: 0" in line for line in left)
    assert any(line.strip() == "finished" for line in left)


def test_json_output_has_no_status_line(tmp_path: Path) -> None:
    written = run_in_terminal(tmp_path, "run", "wait", "--json")
    assert '"type":"tool_result"' in written
    assert "running bash" not in written
