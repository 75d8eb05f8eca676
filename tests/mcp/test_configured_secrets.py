"""Values the configuration hands to an MCP server (its ``env``, an HTTP server's ``headers``)
are secrets everywhere: redacted from what its tools return and from what the store records."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from mcp_kit import HERE, HttpServer


def ended(message: str) -> dict[str, Any]:
    """A scripted reply that ends the run solved with ``message`` (agent_step end)."""
    return {"agent_step": {"phase": "end", "summary": "done", "end_status": "solved", "end_message": message}}


TOKEN = "mcpTok3Nq8Zv1Lx6Wr"
LITERAL = "k7Hd2Qm9Xc4Vb8Pz"
HEADER = "hdr5Tk9Lm2Qx7Zv4"


def _steward(workspace: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("STEWARD_", "OPENAI_", "ANTHROPIC_"))}
    clean |= {
        "XDG_CONFIG_HOME": str(workspace.parent / "config"),
        "XDG_STATE_HOME": str(workspace.parent / "state"),
    }
    return subprocess.run(
        [sys.executable, "-m", "steward", *args], cwd=workspace, env=clean | env,
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def _run(workspace: Path, config: str, replies: list[dict[str, Any]], **env: str) -> tuple[str, str, bytes]:
    """Run the scripted replies; the tool results as the run saw them, its export, the store's bytes."""
    (workspace / "steward.toml").write_text(config)
    (workspace / "s.yaml").write_text(yaml.safe_dump(replies))
    run = _steward(workspace, "run", "use the server", "--model", "scripted:s.yaml", "--json", **env)
    assert run.returncode == 0, run.stderr
    events = [json.loads(line) for line in run.stdout.splitlines()]
    results = "\n".join(e["data"]["output"] for e in events if e["type"] == "tool_result")
    exported = _steward(workspace, "runs", "export", events[0]["run_id"])
    assert exported.returncode == 0, exported.stderr
    stored = b"".join(p.read_bytes() for p in sorted((workspace / ".steward").glob("steward.db*")))
    return results, exported.stdout, stored


def _absent(value: str, *places: str | bytes) -> None:
    for spelling in (value, base64.b64encode(value.encode()).decode(), value.encode().hex()):
        for place in places:
            found = spelling.encode() in place if isinstance(place, bytes) else spelling in place
            assert not found, (spelling, place[:2000])


def test_a_stdio_server_s_env_values_are_redacted_in_its_output_and_the_store(workspace: Path) -> None:
    config = f"""
[policy]
allow = ["r__*"]
[mcp_servers.r]
command = {json.dumps(sys.executable)}
args = [{json.dumps(str(HERE / "servers" / "rogue.py"))}]
env = {{ TOKEN = "${{STEWARD_TEST_MCP_TOKEN}}", API_KEY = "{LITERAL}", LOG_LEVEL = "debugging" }}
"""
    replies: list[dict[str, Any]] = [
        {"tool": "r__env", "args": {}},
        {"tool": "r__echo", "args": {"text": base64.b64encode(TOKEN.encode()).decode()}},
        ended("done"),
    ]
    results, exported, stored = _run(workspace, config, replies, STEWARD_TEST_MCP_TOKEN=TOKEN)
    assert "[redacted: secret from [mcp_servers.r] env TOKEN]" in results
    assert "[redacted: secret from [mcp_servers.r] env API_KEY]" in results
    assert '"LOG_LEVEL": "debugging"' in results  # a plain word is not a secret
    _absent(TOKEN, results, exported, stored)
    _absent(LITERAL, results, exported, stored)


def test_a_token_in_an_http_server_s_headers_is_redacted(
    workspace: Path, everything_http: HttpServer
) -> None:
    config = f"""
[policy]
allow = ["ev__*"]
[mcp_servers.ev]
url = "{everything_http.url}"
headers = {{ Authorization = "Bearer ${{STEWARD_TEST_MCP_HEADER}}" }}
"""
    # The agent got hold of the token somehow and has the server echo it back, in several spellings.
    spellings = [HEADER, base64.b64encode(HEADER.encode()).decode(), HEADER.encode().hex()]
    replies: list[dict[str, Any]] = [
        *({"tool": "ev__echo", "args": {"message": s}} for s in spellings),
        ended("done"),
    ]
    results, exported, stored = _run(workspace, config, replies, STEWARD_TEST_MCP_HEADER=HEADER)
    assert results.count("[redacted: secret from [mcp_servers.ev] headers Authorization]") == 3
    _absent(HEADER, results, exported, stored)
