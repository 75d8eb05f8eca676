"""A loopback forge that speaks GitHub's and Gitea's pull-request APIs, for tests.

``FakeForge`` is a real HTTP server on 127.0.0.1 (an ephemeral port). It serves

* GitHub under ``/api/v3`` (as GitHub Enterprise does): ``GET /repos/{owner}/{repo}`` and
  ``POST /repos/{owner}/{repo}/pulls``, token as ``Authorization: Bearer TOKEN`` (or ``token``);
* Gitea/Forgejo under ``/api/v1``: the same two routes, token as ``Authorization: token TOKEN``.

Each request is checked as the real forge would: the token, a known repository (each maps to
a bare git repository on disk), the JSON body's fields and types, head and base branches that
exist in that bare repository (so an unpushed branch is refused), no second open pull request
for the same head and base. Failures answer with the forge's status and error body (GitHub:
401, 404, 422 with ``errors``; Gitea: 401, 404, 409, 422). ``fail_next(status)`` makes the next
request fail as told (a 403 for a token without rights). Every request is recorded in
``requests`` (method, path, lower-cased headers, JSON body); opened pull requests in ``pulls``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self

__all__ = ["FakeForge", "ForgeRequest", "OpenedPull"]

SOCKET_TIMEOUT = 30.0
MAX_BODY = 1_000_000
Flavour = Literal["github", "gitea"]
_PREFIX: dict[str, Flavour] = {"/api/v3": "github", "/api/v1": "gitea"}


@dataclass(frozen=True, slots=True)
class ForgeRequest:
    method: str
    path: str
    headers: Mapping[str, str]
    body: Any


@dataclass(slots=True)
class OpenedPull:
    forge: Flavour
    repository: str
    number: int
    title: str
    body: str
    head: str
    base: str
    draft: bool
    url: str = field(default="")


class FakeForge:
    """GitHub and Gitea pull-request APIs over HTTP on 127.0.0.1; use as a context manager.

    ``repositories``: ``owner/name`` -> the bare repository holding its branches.
    """

    def __init__(self, repositories: Mapping[str, Path], *, token: str, default_branch: str = "main") -> None:
        self.repositories = dict(repositories)
        self.token = token
        self.default_branch = default_branch
        self.requests: list[ForgeRequest] = []
        self.pulls: list[OpenedPull] = []
        self._failures: list[tuple[int, str]] = []
        self._lock = threading.Lock()
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> Self:
        if self._httpd is not None:
            raise RuntimeError("FakeForge is already started")
        self._httpd = _Server(("127.0.0.1", 0), _Handler, self)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="FakeForge", daemon=True
        )
        self._thread.start()
        return self

    def close(self) -> None:
        if self._httpd is None:
            return
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=SOCKET_TIMEOUT)
        self._httpd = self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("FakeForge is not started; use `with FakeForge(...) as forge:`")
        return int(self._httpd.server_address[1])

    @property
    def github_api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/v3"

    @property
    def gitea_api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/v1"

    def fail_next(self, status: int, message: str = "Resource not accessible by integration") -> None:
        """The next request is answered with ``status`` and ``message``, whatever it is."""
        with self._lock:
            self._failures.append((status, message))

    # --- used by the handler -------------------------------------------------------------

    def _record(self, request: ForgeRequest) -> tuple[int, str] | None:
        with self._lock:
            self.requests.append(request)
            return self._failures.pop(0) if self._failures else None

    def _authorised(self, header: str) -> bool:
        # Both forges take "Bearer TOKEN" and "token TOKEN"; tests check which one was sent.
        scheme, _, value = header.partition(" ")
        return scheme.lower() in ("bearer", "token") and value.strip() == self.token

    def _branch_exists(self, repository: str, branch: str) -> bool:
        bare = self.repositories[repository]
        found = subprocess.run(
            ["git", f"--git-dir={bare}", "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}"],
            capture_output=True,
            timeout=SOCKET_TIMEOUT,
            check=False,
        )
        return found.returncode == 0

    def _open(self, flavour: Flavour, repository: str, body: Mapping[str, Any]) -> tuple[int, dict[str, Any]]:
        problems = _field_problems(flavour, body)
        if problems:
            return 422, _error(flavour, "Validation Failed", problems)
        head = str(body["head"]).split(":", 1)[-1]
        base = str(body["base"])
        for name, branch in (("head", head), ("base", base)):
            if not self._branch_exists(repository, branch):
                if flavour == "github":
                    return 422, _error(flavour, "Validation Failed", [f"{name} invalid"])
                return 404, _error(flavour, f"{name} branch {branch} does not exist", [])
        with self._lock:
            if any(p.repository == repository and p.head == head and p.base == base for p in self.pulls):
                status = 422 if flavour == "github" else 409
                message = f"A pull request already exists for {repository.split('/', maxsplit=1)[0]}:{head}."
                return status, _error(
                    flavour, message if flavour == "gitea" else "Validation Failed", [message]
                )
            number = len(self.pulls) + 1
            kind = "pull" if flavour == "github" else "pulls"
            url = f"http://127.0.0.1:{self.port}/{repository}/{kind}/{number}"
            draft = (
                bool(body.get("draft", False))
                if flavour == "github"
                else str(body["title"]).startswith("WIP:")
            )
            opened = OpenedPull(flavour, repository, number, str(body["title"]), str(body.get("body") or ""),
                                head, base, draft, url)  # fmt: skip
            self.pulls.append(opened)
        return 201, {
            "number": number, "html_url": url, "state": "open", "title": opened.title, "body": opened.body,
            "draft": draft, "head": {"ref": head}, "base": {"ref": base},
        }  # fmt: skip


def _field_problems(flavour: Flavour, body: Mapping[str, Any]) -> list[str]:
    problems = [
        f"{name} is missing or not a non-empty string"
        for name in ("title", "head", "base")
        if not isinstance(body.get(name), str) or not body[name].strip()
    ]
    if "body" in body and not isinstance(body["body"], str | None):
        problems.append("body is not a string")
    if flavour == "github" and "draft" in body and not isinstance(body["draft"], bool):
        problems.append("draft is not a boolean")
    known = {"title", "head", "base", "body", "draft", "maintainer_can_modify", "issue"}
    if flavour == "gitea":
        known = {"title", "head", "base", "body", "assignee", "assignees", "labels", "milestone", "due_date"}
    problems += [f"unknown field {name!r}" for name in body if name not in known]
    return problems


def _error(flavour: Flavour, message: str, problems: list[str]) -> dict[str, Any]:
    if flavour == "github":
        return {"message": message, "errors": [{"resource": "PullRequest", "message": p} for p in problems]}
    return {"message": f"{message}: {'; '.join(problems)}" if problems else message}


class _Server(ThreadingHTTPServer):
    daemon_threads = False
    block_on_close = True

    def __init__(self, address: tuple[str, int], handler: type[_Handler], forge: FakeForge) -> None:
        super().__init__(address, handler)
        self.forge = forge

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError | TimeoutError):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    timeout = SOCKET_TIMEOUT

    def log_message(self, format: str, *args: Any) -> None:
        """Keep test output quiet."""

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def _serve(self, method: str) -> None:
        forge = self.server.forge
        length = min(int(self.headers.get("Content-Length") or 0), MAX_BODY)
        raw = self.rfile.read(length) if length else b""
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        headers = {name.lower(): value for name, value in self.headers.items()}
        failure = forge._record(ForgeRequest(method, self.path, headers, body))
        flavour, route = _split(self.path)
        if flavour is None:
            self._send(404, {"message": "Not Found"})
        elif failure is not None:
            self._send(failure[0], {"message": failure[1]})
        elif not forge._authorised(headers.get("authorization", "")):
            self._send(401, {"message": "Bad credentials" if flavour == "github" else "token is required"})
        else:
            self._route(forge, flavour, method, route, body)

    def _route(self, forge: FakeForge, flavour: Flavour, method: str, route: list[str], body: Any) -> None:
        if len(route) < 3 or route[0] != "repos":
            self._send(404, {"message": "Not Found"})
            return
        repository = f"{route[1]}/{route[2]}"
        if repository not in forge.repositories:
            self._send(404, {"message": "Not Found"})
        elif method == "GET" and len(route) == 3:
            self._send(200, {"full_name": repository, "default_branch": forge.default_branch})
        elif method == "POST" and route[3:] == ["pulls"]:
            if not isinstance(body, dict):
                self._send(400, {"message": "Problems parsing JSON"})
                return
            self._send(*forge._open(flavour, repository, body))
        else:
            self._send(404, {"message": "Not Found"})

    def _send(self, status: int, data: Any) -> None:
        payload = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


def _split(path: str) -> tuple[Flavour | None, list[str]]:
    clean = path.split("?", 1)[0].rstrip("/")
    for prefix, flavour in _PREFIX.items():
        if clean.startswith(prefix + "/"):
            return flavour, [p for p in clean[len(prefix) :].split("/") if p]
    return None, []
