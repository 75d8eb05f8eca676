"""Real ``steward serve`` processes for the server tests: a workspace with scripted personas, a
store (SQLite file or a PostgreSQL database), a token, and an HTTP client with it."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import yaml

from steward.server.tokens import Tokens


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Deployment:
    """One workspace, one store and one token; ``start`` runs a server on them (several may)."""

    def __init__(self, root: Path, db_url: str) -> None:
        self.root = root
        self.db_url = db_url
        self.workspace = root / "ws"
        (self.workspace / "personas").mkdir(parents=True)
        self.env = {
            k: v for k, v in os.environ.items() if not k.startswith(("STEWARD_", "OPENAI_", "ANTHROPIC_"))
        }
        self.env |= {
            "STEWARD_DB": db_url,
            "XDG_STATE_HOME": str(root / "state"),
            "XDG_CONFIG_HOME": str(root / "config"),
        }
        self.servers: list[Server] = []
        # Made here, where `steward serve --new-token` keeps it (that command has a test of its own
        # in test_api.py): one `steward` start less for every test that deploys a server.
        self.token = Tokens(root / "config" / "steward" / "tokens.json").create("tests")

    def persona(self, name: str, script: list[object], *, tools: str = '["bash"]', extra: str = "") -> None:
        """A persona whose model plays ``script`` (each run from its top)."""
        (self.workspace / "personas" / f"{name}.yaml").write_text(yaml.safe_dump(script))
        (self.workspace / "personas" / f"{name}.toml").write_text(
            f'role = "{name}"\ntools = {tools}\nmodel = "scripted:{name}.yaml"\n{extra}'
        )

    def config(self, text: str) -> None:
        """The workspace's steward.toml."""
        (self.workspace / "steward.toml").write_text(text)

    def steward(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "steward", *args], cwd=self.workspace, env=self.env,
            capture_output=True, text=True, timeout=timeout,
        )  # fmt: skip

    def start(self, *args: str, workers: int = 2, env: dict[str, str] | None = None) -> Server:
        server = Server(self, free_port(), ["--workers", str(workers), *args], env or {})
        self.servers.append(server)
        return server

    def stop(self) -> None:
        for server in self.servers:
            server.stop()


class Server:
    """A ``steward serve`` process on a loopback port."""

    def __init__(self, deployment: Deployment, port: int, args: list[str], env: dict[str, str]) -> None:
        self.deployment = deployment
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.log = deployment.root / f"serve-{port}.log"
        with self.log.open("w") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "steward", "serve", "--port", str(port), *args],
                cwd=deployment.workspace, env=deployment.env | env, stdout=out, stderr=subprocess.STDOUT,
                text=True,
            )  # fmt: skip
        self.wait_up()

    def wait_up(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"steward serve exited {self.process.returncode}: {self.output()}")
            try:
                if httpx.get(self.url + "/v1/health", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"steward serve did not come up in {timeout} s: {self.output()}")

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def client(self, token: str | None = None, timeout: float = 30) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token or self.deployment.token}"}
        return httpx.Client(base_url=self.url, headers=headers, timeout=timeout)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def sse(
    client: httpx.Client,
    path: str,
    *,
    headers: dict[str, str] | None = None,
    limit: int | None = None,
    timeout: float = 30,
) -> Iterator[dict[str, Any]]:
    """The SSE messages of ``path`` as dicts {id, event, data (parsed JSON), comment}."""
    with client.stream("GET", path, headers=headers or {}, timeout=timeout) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        message: dict[str, Any] = {}
        count = 0
        for line in response.iter_lines():
            if line == "":
                if message:
                    yield message
                    count += 1
                    if limit is not None and count >= limit:
                        return
                message = {}
            elif line.startswith(":"):
                message["comment"] = line[1:].strip()
            else:
                field, _, value = line.partition(":")
                value = value[1:] if value.startswith(" ") else value
                message[field] = json.loads(value) if field == "data" else value


def wait_for(check: Any, what: str, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")
