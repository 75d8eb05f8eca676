"""Configuration mistakes stop a command with one line naming the file or section and the fix."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def test_a_quoted_switch_is_refused_not_read_as_false(cli: Any, tmp_path: Path) -> None:
    (tmp_path / "steward.toml").write_text('[sandbox]\nenabled = "no"\n')
    proc = cli("runs", "list")
    assert proc.returncode == 2
    assert "steward.toml: 'sandbox.enabled' must be true or false (without quotes), got 'no'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_an_mcp_server_with_neither_command_nor_url_is_told_so(cli: Any, tmp_path: Path) -> None:
    (tmp_path / "steward.toml").write_text('[mcp_servers.docs]\nargs = ["--stdio"]\n')
    proc = cli("mcp", "list")
    assert proc.returncode == 2
    assert "[mcp_servers.docs]: sets neither command nor url" in proc.stderr
    assert 'add command = "PROGRAM"' in proc.stderr and 'url = "https://..."' in proc.stderr
    assert "both" not in proc.stderr and "Traceback" not in proc.stderr


def test_an_mcp_server_with_both_command_and_url_is_told_so(cli: Any, tmp_path: Path) -> None:
    (tmp_path / "steward.toml").write_text(
        '[mcp_servers.docs]\ncommand = "docs-server"\nurl = "http://127.0.0.1:9/mcp"\n'
    )
    proc = cli("mcp", "list")
    assert proc.returncode == 2
    assert "[mcp_servers.docs]: sets both command and url" in proc.stderr


def test_doctor_names_an_mcp_server_that_cannot_work(cli: Any, tmp_path: Path) -> None:
    (tmp_path / "steward.toml").write_text("[mcp_servers.docs]\nenabled = true\n")
    proc = cli("doctor")
    assert "problem: [mcp_servers.docs]: sets neither command nor url" in proc.stdout
    assert "Traceback" not in proc.stderr
