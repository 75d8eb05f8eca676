"""Nothing is stored unredacted: a secret that ends up in a file's name, an argument or a rewind's
list of removed files is redacted before the store writes it, whoever writes the event."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml


def ended(message: str) -> dict[str, Any]:
    """A scripted reply that ends the run solved with ``message`` (agent_step end)."""
    return {"agent_step": {"phase": "end", "summary": "done", "end_status": "solved", "end_message": message}}


pytestmark = [
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap: apt-get install bubblewrap"),
    pytest.mark.skipif(shutil.which("git") is None, reason="needs git"),
]

SECRET = "tok9fQ2xLm7Vb3Kp8ZrW4"
SPELLINGS = [SECRET, SECRET.encode().hex(), base64.b64encode(SECRET.encode()).decode().rstrip("=")]


def _stored_bytes(workspace: Path) -> bytes:
    """Every byte of the SQLite store: the database and its write-ahead log."""
    found = sorted((workspace / ".steward").glob("steward.db*"))
    assert found, "the run was not recorded in the workspace's store"
    return b"".join(path.read_bytes() for path in found)


def test_a_rewind_of_files_named_after_a_secret_stores_no_secret(cli: Any, tmp_path: Path) -> None:
    (tmp_path / ".env").write_text(f"API_TOKEN={SECRET}\n")
    subprocess.run(["git", "-C", str(tmp_path), "init", "-q"], check=True)
    names = " ".join(SPELLINGS[:2])  # the secret as a file name, and its hex
    (tmp_path / "s.yaml").write_text(
        yaml.safe_dump(
            [
                {"tool": "bash", "args": {"command": f"touch {names} && ls"}},
                {"tool": "write_file", "args": {"path": f"{SPELLINGS[2]}.txt", "content": "x\n"}},
                ended("done"),
            ]
        )
    )
    run = cli("run", "make files", "--model", f"scripted:{tmp_path / 's.yaml'}", "--json")
    assert run.returncode == 0, run.stderr
    run_id = json.loads(run.stdout.splitlines()[0])["run_id"]
    assert (tmp_path / SECRET).exists()

    rewound = cli("rewind", run_id, "--to", "1")
    assert rewound.returncode == 0, rewound.stderr
    assert not (tmp_path / SECRET).exists() and not (tmp_path / f"{SPELLINGS[2]}.txt").exists()

    exported = cli("runs", "export", run_id)
    assert exported.returncode == 0, exported.stderr
    assert '"type":"rewind"' in exported.stdout.replace(" ", "")
    assert "redacted: secret from .env" in exported.stdout  # the names were there, redacted
    stored = _stored_bytes(tmp_path)
    for spelling in SPELLINGS:
        assert spelling not in exported.stdout, spelling
        assert spelling.encode() not in stored, spelling


AUTH = "dbAuth7Qx2Lp9Vw3Kz8"
PASSWORD = "pw4Hq8Zt2Lx7Rm3"
URL = f"postgresql://app:{PASSWORD}@db.internal:5432/app"
ECHOES = (
    'printf "%s\\n" "$DATABASE_AUTH"; printf %s "$DATABASE_AUTH" | base64; '
    "printf %s \"$DATABASE_AUTH\" | od -An -tx1 | tr -d ' \\n'; echo; "
    'echo "$DATABASE_URL"; printf %s "$DATABASE_URL" | base64 -w0; echo'
)


def test_host_variables_passed_into_the_sandbox_are_redacted_in_output_and_store(
    cli: Any, tmp_path: Path
) -> None:
    (tmp_path / "steward.toml").write_text('[sandbox]\nenv = ["DATABASE_*"]\n')
    (tmp_path / "s.yaml").write_text(
        yaml.safe_dump([{"tool": "bash", "args": {"command": ECHOES}}, ended("ok")])
    )
    run = cli(
        "run", "show the database settings", "--model", f"scripted:{tmp_path / 's.yaml'}", "--json",
        DATABASE_AUTH=AUTH, DATABASE_URL=URL,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    events = [json.loads(line) for line in run.stdout.splitlines()]
    run_id = events[0]["run_id"]
    (result,) = [e["data"]["output"] for e in events if e["type"] == "tool_result"]
    assert "[redacted: secret from [sandbox] env DATABASE_AUTH]" in result
    assert "@db.internal:5432/app" in result  # what is not secret in the URL stays readable
    spellings = [AUTH, base64.b64encode(AUTH.encode()).decode(), AUTH.encode().hex(), PASSWORD, _inside(URL)]
    exported = cli("runs", "export", run_id)
    assert exported.returncode == 0, exported.stderr
    stored = _stored_bytes(tmp_path)
    for spelling in spellings:
        assert spelling not in result, spelling
        assert spelling not in exported.stdout, spelling
        assert spelling.encode() not in stored, spelling


def _inside(url: str) -> str:
    """The characters of ``base64(url)`` that encode the password's bytes alone."""
    start, end = url.index(PASSWORD), url.index(PASSWORD) + len(PASSWORD)
    first, last = -(-start // 3), end // 3  # whole 3-byte groups inside the password
    inner = base64.b64encode(url.encode()).decode()[first * 4 : last * 4]
    assert len(inner) >= 8
    return inner
