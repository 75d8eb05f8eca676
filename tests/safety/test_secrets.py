"""Secret values are redacted from tool outputs by value: copies, archives and encodings too."""

from __future__ import annotations

import base64
import os
import random
import re
import shutil
import tarfile
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from steward import Agent, tool
from steward.events import ToolResultEvent
from steward.models.base import AssistantMessage, ModelRequest, ToolCall, ToolResultMessage
from steward.models.scripted import FunctionModel
from steward.safety.policy.guard import Guard
from steward.safety.policy.rules import Policy
from steward.safety.policy.wrapper import GuardedToolset
from steward.safety.secrets.values import Redactor, SecretWatch, encoded_forms, secret_values
from steward.safety.secrets.wrapper import RedactingToolset
from steward.tools.base import FunctionToolset, ToolContext, ToolResult, WrapperToolset

ENV = """\
# the app's settings
DB_PASSWORD=s3cr3t-Passw0rd # the database's
export API_TOKEN='tok_live_4f9a8b7c6d5e'
STRIPE_KEY = "sk_test_51Habc\\"def9"
CERT="line-one-abcdef12
line-two-ghijkl34"
DATABASE_URL=postgres://app:Pg-pass-9911@db.internal:5432/app
NODE_ENV=production
PORT=8080
DEBUG=true
HOST=localhost
SITE_URL=https://example.com/app
SHORT=abc12
"""
ENV_SECRETS = [
    "s3cr3t-Passw0rd",
    "tok_live_4f9a8b7c6d5e",
    'sk_test_51Habc"def9',
    "Pg-pass-9911",
    "line-one-abcdef12",
    "line-two-ghijkl34",
]
ENV_PLAIN = [
    "production",
    "8080",
    "true",
    "localhost",
    "https://example.com/app",
    "abc12",
    "# the database's",
]

PEM = """\
-----BEGIN OPENSSH PRIVATE KEY-----
b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW
QyNTUxOQAAACDxAbCdEfGh
-----END OPENSSH PRIVATE KEY-----
"""


def docker_config() -> str:
    auth = base64.b64encode(b"bob:docker-pass-55").decode()
    return f'{{"auths": {{"r.example.com": {{"auth": "{auth}"}}}}, "credsStore": "desktop"}}'


FORMATS: list[tuple[str, str, list[str], list[str]]] = [
    (".env", ENV, ENV_SECRETS, ENV_PLAIN),
    (
        ".npmrc",
        "registry=https://registry.npmjs.org/\n//registry.npmjs.org/:_authToken=npm_AbCdEf0123456789\n"
        "//other.example/:_auth=dXNlcjpucG0tcGFzc3dvcmQtNDI=\nalways-auth=true\n"
        "//x.example/:_authToken=${NPM_TOKEN}\n",
        ["npm_AbCdEf0123456789", "dXNlcjpucG0tcGFzc3dvcmQtNDI=", "npm-password-42"],
        ["https://registry.npmjs.org/", "${NPM_TOKEN}", "true"],
    ),
    (
        ".pypirc",
        "[pypi]\nusername = __token__\npassword = pypi-AgEIcHlwaS5vcmcCJDEx\n"
        "[testpypi]\nrepository = https://test.pypi.org/legacy/\ntoken: testpypi-token-998877\n",
        ["pypi-AgEIcHlwaS5vcmcCJDEx", "testpypi-token-998877"],
        ["__token__", "https://test.pypi.org/legacy/"],
    ),
    (
        ".netrc",
        "machine github.com login ghp_abcdefghijklmnop1234 password x-oauth-basic\n"
        "machine api.example.com\n  login alice@example.com\n  password Netrc-Pass-77\n",
        ["ghp_abcdefghijklmnop1234", "Netrc-Pass-77"],
        ["alice@example.com", "github.com"],
    ),
    (
        ".pgpass",
        "# host:port:db:user:password\ndb.internal:5432:app:appuser:pg\\:colon-pass-1\n",
        ["pg:colon-pass-1"],
        ["db.internal", "appuser"],
    ),
    (
        ".git-credentials",
        "https://alice:gh-cred-pass%2F9@github.com\n",
        ["gh-cred-pass/9", "gh-cred-pass%2F9"],
        ["alice", "github.com"],
    ),
    (".dockercfg", docker_config(), ["docker-pass-55"], ["desktop"]),
    ("id_ed25519", PEM, PEM.splitlines()[1:3], ["-----BEGIN OPENSSH PRIVATE KEY-----"]),
    (
        "service.key",
        "auth:\n  client_secret: 'yaml-secret-value-1'\n  name: my-service\n",
        ["yaml-secret-value-1"],
        ["my-service"],
    ),
]


@pytest.mark.parametrize(("name", "text", "secret", "plain"), FORMATS, ids=[f[0] for f in FORMATS])
def test_each_format_gives_its_secret_values_and_only_those(
    tmp_path: Path, name: str, text: str, secret: list[str], plain: list[str]
) -> None:
    (tmp_path / name).write_text(text)

    values = secret_values(tmp_path / name)

    assert set(secret) <= set(values)
    assert not set(plain) & set(values)


def test_a_file_that_cannot_be_read_holds_nothing(tmp_path: Path) -> None:
    assert secret_values(tmp_path / ".env") == []
    (tmp_path / "store.p12").write_bytes(b"\x30\x82\x00\x00binary-keystore-bytes")
    assert secret_values(tmp_path / "store.p12") == []
    os.mkfifo(tmp_path / ".env.local")  # nobody writes to it: reading it must not wait
    assert secret_values(tmp_path / ".env.local") == []


def test_a_long_value_is_redacted_whole(tmp_path: Path) -> None:
    blob = base64.b64encode(bytes(range(256)) * 3).decode()  # ~1 KB, like a key file in a variable
    (tmp_path / ".env").write_text(f"SERVICE_ACCOUNT={blob}\n")
    redactor = Redactor({".env": secret_values(tmp_path / ".env")})

    redacted = redactor.redact(f"value: {blob}\n")

    assert re.fullmatch(r"value: (\[redacted: secret from \.env\])+\n", redacted), redacted


# --- through the wrapper ---------------------------------------------------------------------


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / ".env").write_text(ENV)
    (ws / "README.md").write_text("Listening on localhost:8080 in production mode (debug: true).\n")
    return ws


def reader(ws: Path) -> FunctionToolset:
    @tool
    def show(path: str) -> str:
        """Print a file, like cat.

        Args:
            path: The file, relative to the workspace.
        """
        return (ws / path).read_bytes().decode("utf-8", errors="replace")

    @tool
    def echo(text: str) -> str:
        """Print the text.

        Args:
            text: What to print.
        """
        return text

    return FunctionToolset([show, echo])


def redacting(ws: Path, inner: Any = None) -> RedactingToolset:
    return RedactingToolset(inner or reader(ws), lambda root: SecretWatch(lambda: [root / ".env"]))


async def call(toolset: RedactingToolset, ws: Path, name: str, **arguments: Any) -> ToolResult:
    return await toolset.call_tool(name, arguments, ToolContext(workspace=ws))


async def test_a_copy_of_the_env_file_made_earlier_is_redacted(workspace: Path) -> None:
    shutil.copy(workspace / ".env", workspace / "notes.txt")

    result = await call(redacting(workspace), workspace, "show", path="notes.txt")

    for value in ENV_SECRETS:
        assert value not in result.content
    assert "DB_PASSWORD=[redacted: secret from .env] # the database's" in result.content
    assert "postgres://app:[redacted: secret from .env]@db.internal:5432/app" in result.content
    assert "NODE_ENV=production" in result.content  # the rest of the file reads as it was


async def test_a_tar_archive_of_the_workspace_is_redacted(workspace: Path) -> None:
    with tarfile.open(workspace / "backup.tar", "w") as archive:
        archive.add(workspace / ".env", arcname="project/.env")
        archive.add(workspace / "README.md", arcname="project/README.md")

    result = await call(redacting(workspace), workspace, "show", path="backup.tar")

    assert "[redacted: secret from .env]" in result.content
    for value in ENV_SECRETS:
        assert value not in result.content


async def test_base64_and_url_encodings_of_a_value_are_redacted(workspace: Path) -> None:
    value = "s3cr3t-Passw0rd"
    whole_file = base64.b64encode((workspace / ".env").read_bytes()).decode()  # `base64 -w0 .env`
    shown = f"{base64.b64encode(value.encode()).decode()}\n{quote(value, safe='')}\n{whole_file}\n"

    result = await call(redacting(workspace), workspace, "echo", text=shown)

    assert result.content.count("[redacted: secret from .env]") >= 3
    for secret in ENV_SECRETS:
        for form in encoded_forms(secret):
            assert form not in result.content, form


async def test_short_and_common_values_are_left_alone(workspace: Path) -> None:
    result = await call(redacting(workspace), workspace, "show", path="README.md")

    assert result.content == "Listening on localhost:8080 in production mode (debug: true).\n"


async def test_notes_and_failures_of_inner_layers_are_redacted_too(workspace: Path) -> None:
    class Noisy(WrapperToolset):
        async def call_tool(self, name: str, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
            if arguments.get("text") == "fail":
                raise RuntimeError("server said: s3cr3t-Passw0rd is wrong")
            result = await self.wrapped.call_tool(name, arguments, ctx)
            return replace(result, notes=(("auto_approved", f"{name}: saw tok_live_4f9a8b7c6d5e"),))

    toolset = redacting(workspace, Noisy(reader(workspace)))
    ctx = ToolContext(workspace=workspace)

    failed = await toolset.call_tool("echo", {"text": "fail"}, ctx)
    noted = await toolset.call_tool("echo", {"text": "x"}, ctx)

    assert failed.is_error and "s3cr3t-Passw0rd" not in failed.content
    assert failed.content == "echo failed: RuntimeError: server said: [redacted: secret from .env] is wrong"
    assert noted.notes == (("auto_approved", "echo: saw [redacted: secret from .env]"),)


async def test_a_blocked_calls_note_comes_back_redacted(workspace: Path) -> None:
    policy = Policy.from_lists(deny=["echo(tok_live_4f9a8b7c6d5e)"])
    toolset = redacting(workspace, GuardedToolset(reader(workspace), guard=Guard(), policy=policy))

    result = await call(toolset, workspace, "echo", text="tok_live_4f9a8b7c6d5e")

    assert result.is_error and "tok_live_4f9a8b7c6d5e" not in result.content
    assert result.notes == (
        ("blocked", "echo: denied by the rule deny echo([redacted: secret from .env]) (config)"),
    )


# --- the redactor and the watch --------------------------------------------------------------


def test_the_longest_of_overlapping_values_is_redacted_whole() -> None:
    redactor = Redactor({".env": ["abcdefgh12", "abcdefgh1234"], ".npmrc": ["zz-token-99"]})

    text = "a=abcdefgh1234; b=abcdefgh12; c=zz-token-99"

    assert redactor.redact(text) == (
        "a=[redacted: secret from .env]; b=[redacted: secret from .env]; c=[redacted: secret from .npmrc]"
    )


def test_a_large_output_with_hundreds_of_values_is_redacted(tmp_path: Path) -> None:
    values = [f"value-{n:04d}-{'x' * (n % 20)}Q" for n in range(400)]
    redactor = Redactor({".env": values})
    filler = "ordinary build output line 0123456789\n" * 800  # ~30 KB
    text = filler + values[123] + "\n" + filler

    redacted = redactor.redact(text)

    assert values[123] not in redacted
    assert redacted == filler + "[redacted: secret from .env]\n" + filler


def test_the_watch_rebuilds_only_when_the_secret_files_change(tmp_path: Path) -> None:
    env = tmp_path / ".env"
    env.write_text("API_TOKEN=first-token-1111\n")
    listed = [env]
    watch = SecretWatch(lambda: list(listed))

    first = watch.redactor()
    assert first.redact("first-token-1111") == "[redacted: secret from .env]"

    env.write_text("API_TOKEN=second-token-22222\n")  # another size, whatever the clock's tick
    second = watch.redactor()
    assert second is not first
    assert second.redact("second-token-22222") == "[redacted: secret from .env]"
    assert second.redact("first-token-1111") == "first-token-1111"

    npmrc = tmp_path / ".npmrc"
    npmrc.write_text("//registry.npmjs.org/:_authToken=npm_AbCdEf0123456789\n")
    listed.append(npmrc)  # a new secret file found by the next scan
    assert watch.redactor().redact("npm_AbCdEf0123456789") == "[redacted: secret from .npmrc]"


def test_the_watch_keeps_its_redactor_while_nothing_changes(tmp_path: Path) -> None:
    env = tmp_path / ".env"
    env.write_text("API_TOKEN=first-token-1111\n")
    past = 1_000_000_000  # an mtime long ago: not a stamp the coarse clock could still repeat
    os.utime(env, ns=(past, past))
    watch = SecretWatch(lambda: [env])

    assert watch.redactor() is watch.redactor()


def test_one_pass_finds_what_trying_each_value_longest_first_would() -> None:
    rng = random.Random(7)  # fixed: the same cases every time
    alphabet = "abAB01-_"
    for _ in range(50):
        values = ["".join(rng.choice(alphabet) for _ in range(rng.randint(8, 14))) for _ in range(30)]
        text = "".join(rng.choice([rng.choice(values), rng.choice(alphabet) * 3, " "]) for _ in range(200))
        forms = sorted({f for v in values for f in encoded_forms(v)}, key=len, reverse=True)
        naive = re.compile("|".join(re.escape(f) for f in forms))

        expected = naive.sub("[redacted: secret from .env]", text)

        assert Redactor({".env": values}).redact(text) == expected


async def test_each_workspace_gets_the_values_of_its_own_secret_files(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    for ws, token in ((first, "first-token-1111"), (second, "second-token-2222")):
        ws.mkdir()
        (ws / ".env").write_text(f"API_TOKEN={token}\n")
    toolset = redacting(first)
    both = "first-token-1111 second-token-2222"

    in_first = await call(toolset, first, "echo", text=both)
    in_second = await call(toolset, second, "echo", text=both)

    assert in_first.content == "[redacted: secret from .env] second-token-2222"
    assert in_second.content == "first-token-1111 [redacted: secret from .env]"


async def test_neither_the_model_nor_the_log_sees_a_redacted_value(workspace: Path) -> None:
    shutil.copy(workspace / ".env", workspace / "copy.txt")
    asked: list[ModelRequest] = []

    def reply(request: ModelRequest) -> AssistantMessage:
        asked.append(request)
        if len(asked) == 1:
            return AssistantMessage(tool_calls=(ToolCall("c1", "show", {"path": "copy.txt"}),))
        return AssistantMessage("ok")

    agent = Agent(FunctionModel(reply), toolsets=[redacting(workspace)], builtin_tools=False, sandbox=False)
    run = agent.start("show the copy", workspace=workspace)
    events = [e async for e in run.stream()]

    logged = next(e for e in events if isinstance(e, ToolResultEvent)).output
    sent = asked[-1].messages[-1]
    assert isinstance(sent, ToolResultMessage)
    for text in (logged, sent.content):
        assert "[redacted: secret from .env]" in text
        assert not any(value in text for value in ENV_SECRETS)


def test_reversed_case_changed_and_hex_forms_are_redacted_too() -> None:
    from steward.safety.secrets.values import Redactor

    value = "sk_live_Zq81mPq0TvX2aBcD9eF"
    redactor = Redactor({".env": [value]})
    for form in (value[::-1], value.upper(), value.lower(), value.encode().hex()):
        assert form not in redactor.redact(f"out: {form} end"), form


# --- values the configuration hands to processes ---------------------------------------------


def test_configured_values_are_found_by_where_they_are_configured() -> None:
    from steward.config import Config, McpServerConfig, SandboxConfig
    from steward.safety.secrets.configured import configured_secrets

    environ = {
        "GH": "ghp_8Zx2Lq7Vm3Kp9Wr4",
        "DATABASE_URL": "postgres://u:Pq8zLm2Xw7@db/x",
        "DATABASE_HOST": "db.internal",
    }
    config = Config(
        sandbox=SandboxConfig(env=["DATABASE_*"]),
        mcp_servers={
            "gh": McpServerConfig(command="x", env={"TOKEN": "${GH}", "MODE": "production"}),
            "api": McpServerConfig(
                url="http://127.0.0.1:1/mcp",
                headers={
                    "Authorization": "Bearer lit3ralBearer9x",
                    "x-api-key": "k3y-Literal-77aa",
                    "Cookie": "sid=Ck9Lm2Xq7Zv3",
                    "Accept": "application/json",
                },
            ),
        },
    )
    found = configured_secrets(config, environ)
    assert found["[mcp_servers.gh] env TOKEN"] == ["ghp_8Zx2Lq7Vm3Kp9Wr4"]
    assert "[mcp_servers.gh] env MODE" not in found  # a plain word
    assert "lit3ralBearer9x" in found["[mcp_servers.api] headers Authorization"]
    assert found["[mcp_servers.api] headers x-api-key"] == ["k3y-Literal-77aa"]
    assert "sid=Ck9Lm2Xq7Zv3" in found["[mcp_servers.api] headers Cookie"]
    assert "[mcp_servers.api] headers Accept" not in found
    assert found["[sandbox] env DATABASE_URL"][0] == "Pq8zLm2Xw7"
    assert "[sandbox] env DATABASE_HOST" not in found
