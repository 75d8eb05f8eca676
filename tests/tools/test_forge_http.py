"""A push over HTTPS-style token auth: the bare remote is served by ``git http-backend`` behind a
loopback server that demands the token, so the token really travels, and only there."""

from __future__ import annotations

import base64
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from tests.tools.test_forge_repo import TOKEN, Repo, git, make_repo

from steward import Agent, ScriptedModel
from steward.config import Config, GitSettings, PolicySettings
from steward.events import ToolResultEvent
from steward.safety.policy.rules import Policy

END = {"agent_step": {"phase": "end", "summary": "pushed", "end_status": "solved", "end_message": "done"}}
PUSH: dict[str, Any] = {"tool": "git_push", "args": {}}


class GitHttp(ThreadingHTTPServer):
    """``git http-backend`` (CGI) for the repositories under ``root``, for one Basic credential."""

    daemon_threads = False
    block_on_close = True

    def __init__(self, root: Path, token: str) -> None:
        super().__init__(("127.0.0.1", 0), _Backend)
        self.root, self.token = root, token
        self.authorizations: list[str] = []


class _Backend(BaseHTTPRequestHandler):
    server: GitHttp
    protocol_version = "HTTP/1.1"
    timeout = 30

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""

    def do_GET(self) -> None:
        self._cgi()

    def do_POST(self) -> None:
        self._cgi()

    def _cgi(self) -> None:
        header = self.headers.get("Authorization", "")
        self.server.authorizations.append(header)
        expected = "Basic " + base64.b64encode(f"x-access-token:{self.server.token}".encode()).decode()
        if header != expected:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="git"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        path, _, query = self.path.partition("?")
        env = {
            "GIT_PROJECT_ROOT": str(self.server.root), "GIT_HTTP_EXPORT_ALL": "1", "PATH_INFO": path,
            "QUERY_STRING": query, "REQUEST_METHOD": self.command, "REMOTE_USER": "x-access-token",
            "CONTENT_TYPE": self.headers.get("Content-Type", ""), "CONTENT_LENGTH": str(len(body)),
            "PATH": "/usr/bin:/bin", "GIT_CONFIG_NOSYSTEM": "1",
        }  # fmt: skip
        done = subprocess.run(
            ["git", "http-backend"], input=body, env=env, capture_output=True, timeout=60, check=False
        )
        head, _, payload = done.stdout.partition(b"\r\n\r\n")
        status = 200
        headers = []
        for line in head.decode("latin-1").split("\r\n"):
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = int(value.split()[0])
            elif name:
                headers.append((name, value.strip()))
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Repo, GitHttp]]:
    (tmp_path / "r").mkdir()
    repo = make_repo(tmp_path / "r")
    root = tmp_path / "served"
    (root / "acme").mkdir(parents=True)
    repo.remote.rename(root / "acme" / "widgets.git")
    repo.remote = root / "acme" / "widgets.git"
    server = GitHttp(root, TOKEN)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}/acme/widgets.git"
    git(repo.workspace, "config", "remote.origin.url", url)
    git(repo.workspace, "config", "--unset", "remote.origin.pushurl")
    git(repo.workspace, "switch", "-q", "-c", "fix")
    repo.commit("fix.py", "x = 1\n", "Fix it")
    try:
        yield repo, server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=30)


def agent() -> Agent:
    return Agent(
        ScriptedModel.from_data([PUSH, END]),
        config=Config(git=GitSettings(forge="github"), policy=PolicySettings(allow=["git_push"])),
        policy=Policy.from_lists(allow=["git_push"]),
    )


async def push(repo: Repo) -> str:
    events = [e async for e in agent().run_stream("push", workspace=repo.workspace)]
    return next(e for e in events if isinstance(e, ToolResultEvent)).output


async def test_the_token_from_the_environment_authenticates_the_push(
    served: tuple[Repo, GitHttp], monkeypatch: pytest.MonkeyPatch
) -> None:
    repo, server = served
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    said = await push(repo)
    assert said.startswith("Pushed") and TOKEN not in said, said
    assert repo.remote_sha("fix") == git(repo.workspace, "rev-parse", "HEAD")
    assert server.authorizations and all(a.startswith("Basic ") for a in server.authorizations)
    config = (repo.workspace / ".git" / "config").read_text()
    assert TOKEN not in config and "extraheader" not in config.lower()  # nothing written to the repository


async def test_without_a_token_the_push_fails_and_says_how_to_give_one(
    served: tuple[Repo, GitHttp], monkeypatch: pytest.MonkeyPatch
) -> None:
    repo, _ = served
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    said = await push(repo)
    assert "GITHUB_TOKEN" in said and "credential helper" in said, said
    assert repo.remote_sha("fix") is None


async def test_a_wrong_token_is_refused_without_showing_it(
    served: tuple[Repo, GitHttp], monkeypatch: pytest.MonkeyPatch
) -> None:
    repo, _ = served
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_wrongWrongWrong0123456789abcdef")
    said = await push(repo)
    assert "refused the token in GITHUB_TOKEN" in said and "wrongWrong" not in said, said
    assert repo.remote_sha("fix") is None
