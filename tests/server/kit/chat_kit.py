"""The chat app's side of a channel for the server tests: a real receiver of Steward's replies on
loopback, and a bridge's signed messages to the webhook."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
from server_kit import Deployment, Server, sse, wait_for

SECRET = "chat-s3cret"
WEBHOOK = "/v1/channels/webhook/chat"
WRITE = {"tool": "bash", "args": {"command": "echo approved > approved.txt"}}
ASK_BASH = '[policy]\nask = ["bash"]\n'
QUESTION = {"agent_step": {"phase": "feedback", "summary": "ask", "feedback_message": "Which colour?"}}


def bridge_accepts(headers: Any, body: bytes, secret: str = SECRET, now: float | None = None) -> bool:
    """A bridge's check of a message from Steward, written from the README's words: "signed
    the same way": ``X-Steward-Timestamp`` is Unix seconds, at most 5 minutes from now, and
    ``X-Steward-Signature`` is ``sha256=`` and the hex HMAC-SHA256, keyed with the secret, of
    the timestamp, a dot and the raw body."""
    timestamp, given = headers.get("X-Steward-Timestamp"), headers.get("X-Steward-Signature")
    if not timestamp or not given or not timestamp.isdigit():
        return False
    if abs((time.time() if now is None else now) - int(timestamp)) > 300:
        return False
    expected = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(given, "sha256=" + expected)


def signed(body: bytes, secret: str = SECRET, at: float | None = None) -> dict[str, str]:
    """The headers of an inbound message: the signing time and the HMAC of TIMESTAMP.BODY."""
    timestamp = str(int(time.time() if at is None else at))
    digest = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return {"X-Steward-Timestamp": timestamp, "X-Steward-Signature": "sha256=" + digest}


class Receiver:
    """The chat app's side on loopback: keeps every message POSTed to it, with whether its
    signature is the channel's; answers 503 to the first ``fail_first`` of them."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.raw: list[tuple[dict[str, str], bytes]] = []  # each message's headers and body, as sent
        self.fail_first = 0
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with receiver.lock:
                    failing = receiver.fail_first > 0
                    receiver.fail_first -= int(failing)
                    if not failing:
                        receiver.raw.append((dict(self.headers.items()), body))
                        receiver.messages.append(
                            json.loads(body)
                            | {
                                "signed": bridge_accepts(self.headers, body),
                                "delivery": self.headers.get("X-Steward-Delivery"),
                            }
                        )
                status = 503 if failing else 200
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/chat/replies"

    def kinds(self) -> list[str]:
        with self.lock:
            return [m["kind"] for m in self.messages]

    def wait_for(self, kind: str, count: int = 1, timeout: float = 15) -> dict[str, Any]:
        """The ``count``-th message of ``kind``, once it came."""

        def found() -> dict[str, Any] | None:
            with self.lock:
                of_kind = [m for m in self.messages if m["kind"] == kind]
            return of_kind[count - 1] if len(of_kind) >= count else None

        message: dict[str, Any] = wait_for(found, f"message {count} of kind {kind!r}", timeout=timeout)
        return message


def channel(deployment: Deployment, receiver: Receiver, persona: str) -> None:
    # steward.toml at the workspace root: the project file the server reads.
    (deployment.workspace / "steward.toml").write_text(
        f'[server.channels.chat]\nsecret = "{SECRET}"\nreply_url = "{receiver.url}"\npersona = "{persona}"\n'
        'reply_headers = { "X-Bridge" = "steward" }\n'
    )


def say(server: Server, text: str, *, user: str = "ann", **extra: Any) -> dict[str, Any]:
    """A user's message through the webhook, signed; what the server answered (202)."""
    body = json.dumps({"user": user, "text": text, **extra}).encode()
    answer = httpx.post(server.url + WEBHOOK, content=body, headers=signed(body), timeout=30)
    assert answer.status_code == 202, answer.text
    said: dict[str, Any] = answer.json()
    return said


def jobs(server: Server) -> list[dict[str, Any]]:
    with server.client() as client:
        found: list[dict[str, Any]] = client.get("/v1/jobs").json()["jobs"]
        return found


def job(server: Server, job_id: str) -> dict[str, Any]:
    with server.client() as client:
        found: dict[str, Any] = client.get(f"/v1/jobs/{job_id}").json()
        return found


def events(server: Server, run_id: str) -> list[dict[str, Any]]:
    with server.client() as client:
        return [m["data"] for m in sse(client, f"/v1/runs/{run_id}/events?follow=false")]
