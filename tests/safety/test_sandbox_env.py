"""The environment inside the sandbox is cleared to an allowlist: no API keys, no tokens."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from steward.safety.sandbox.bubblewrap import SANDBOX_HOME, BubblewrapSandbox, SandboxSettings
from steward.tools.base import ToolContext
from steward.tools.shell import bash

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="needs bubblewrap: apt-get install bubblewrap"
)

SECRETS = {
    "OPENAI_API_KEY": "sk-test-openai-0123456789",
    "ANTHROPIC_API_KEY": "sk-ant-test-0123456789",
    "GITHUB_TOKEN": "ghp_test0123456789",
    "AWS_SECRET_ACCESS_KEY": "aws-test-0123456789",
    "PGPASSWORD": "pg-test-0123456789",
    "GOOGLE_APPLICATION_CREDENTIALS": "/home/me/creds.json",
}


async def environment(settings: SandboxSettings, workspace: Path) -> dict[str, str]:
    """The environment a sandboxed command sees, read with `env -0` (exit status checked)."""
    box = BubblewrapSandbox(settings)
    result = await bash.call({"command": "env -0 > env.out"}, ToolContext(workspace=workspace, sandbox=box))
    assert result.content.endswith("exit code: 0"), result.content
    pairs = (workspace / "env.out").read_text().split("\0")
    return dict(pair.split("=", 1) for pair in pairs if pair)


@pytest.fixture
def secrets(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    return SECRETS


async def test_api_keys_and_tokens_do_not_reach_the_command(tmp_path: Path, secrets: dict[str, str]) -> None:
    env = await environment(SandboxSettings(), tmp_path)
    for name, value in secrets.items():
        assert name not in env
        assert value not in env.values()


async def test_the_environment_is_cleared_to_the_allowlist(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STEWARD_TEST_PLAIN", "1")
    monkeypatch.setenv("SSH_AUTH_SOCK", "/tmp/agent.sock")
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    monkeypatch.setenv("TZ", "UTC")
    env = await environment(SandboxSettings(), tmp_path)
    assert "STEWARD_TEST_PLAIN" not in env
    assert "SSH_AUTH_SOCK" not in env
    assert env["LC_ALL"] == "C.UTF-8"
    assert env["TZ"] == "UTC"
    assert set(env) <= {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "LANG",
        "LANGUAGE",
        "LC_ALL",
        "TERM",
        "TZ",
        "COLORTERM",
        "NO_COLOR",
        "PWD",
        "SHLVL",
        "GIT_CONFIG_GLOBAL",
        "PYTHONDONTWRITEBYTECODE",  # set by the sandbox itself (tests/safety/test_sandbox_bytecode.py)
        "_",
    }


async def test_home_and_user_are_the_sandbox_s_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "real-home"))
    monkeypatch.setenv("USER", "someone")
    env = await environment(SandboxSettings(), tmp_path)
    assert env["HOME"] == SANDBOX_HOME
    assert env["USER"] == env["LOGNAME"] == "steward"


async def test_configured_names_and_patterns_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_TOOL_HOME", "/opt/tool")
    monkeypatch.setenv("PIP_INDEX_URL", "https://mirror.example/simple")
    env = await environment(SandboxSettings(env=("MY_TOOL_HOME", "PIP_*")), tmp_path)
    assert env["MY_TOOL_HOME"] == "/opt/tool"
    assert env["PIP_INDEX_URL"] == "https://mirror.example/simple"


async def test_a_pattern_never_lets_a_secret_through(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIP_PASSWORD", "hunter2-test")
    monkeypatch.setenv("PIP_TOKEN", "tok-test")
    env = await environment(SandboxSettings(env=("PIP_*",)), tmp_path)
    assert "PIP_PASSWORD" not in env
    assert "PIP_TOKEN" not in env


async def test_a_secret_passes_only_when_configured_by_its_exact_name(
    tmp_path: Path, secrets: dict[str, str]
) -> None:
    env = await environment(SandboxSettings(env=("OPENAI_API_KEY",)), tmp_path)
    assert env["OPENAI_API_KEY"] == secrets["OPENAI_API_KEY"]
    assert "ANTHROPIC_API_KEY" not in env


async def test_the_parent_s_environment_cannot_be_read_through_proc(
    tmp_path: Path, secrets: dict[str, str]
) -> None:
    box = BubblewrapSandbox(SandboxSettings())
    result = await bash.call(
        {"command": "cat /proc/1/environ /proc/*/environ 2>/dev/null | tr '\\0' '\\n'; true"},
        ToolContext(workspace=tmp_path, sandbox=box),
    )
    assert result.content.endswith("exit code: 0")
    for value in secrets.values():
        assert value not in result.content
