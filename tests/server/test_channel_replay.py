"""A signed chat message is taken once, by whichever server sees it first: a captured "YES"
sent again (to the same server or another on the same store, with or without an id) approves
nothing, least of all the user's next approval."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from chat_kit import ASK_BASH, WEBHOOK, Receiver, bridge_accepts, channel, job, say, signed
from server_kit import Deployment, Server

FIRST = {"tool": "bash", "args": {"command": "echo one > first.txt"}}
SECOND = {"tool": "bash", "args": {"command": "echo two > second.txt"}}


def post(server: Server, body: bytes, headers: dict[str, str]) -> httpx.Response:
    return httpx.post(server.url + WEBHOOK, content=body, headers=headers, timeout=30)


def pending_of(server: Server, run_id: str) -> dict[str, Any] | None:
    with server.client() as client:
        run: dict[str, Any] = client.get(f"/v1/runs/{run_id}").json()
    return run["pending"] if run["status"] == "waiting" else None


@pytest.mark.parametrize("with_id", [False, True], ids=["without an id", "with an id"])
def test_a_captured_yes_sent_again_leaves_the_next_approval_pending(
    deployment: Deployment, receiver: Receiver, with_id: bool
) -> None:
    deployment.persona("careful", [FIRST, SECOND, {"text": "wrote both"}], extra=ASK_BASH)
    channel(deployment, receiver, "careful")
    a, b = deployment.start(), deployment.start()  # two servers on one store
    started = say(a, "write the two files")
    receiver.wait_for("approval")

    # The user's YES, as an attacker on the way captures it: the exact bytes and headers.
    yes = json.dumps({"user": "ann", "text": "YES"} | ({"id": "m-42"} if with_id else {})).encode()
    captured = signed(yes)
    assert post(a, yes, captured).json()["status"] == "approved"
    receiver.wait_for("approval", count=2)  # the second call now waits, as the user is told
    waiting = pending_of(a, started["job_id"])
    assert waiting is not None and waiting["kind"] == "approval" and "second.txt" in json.dumps(waiting)

    for server in (b, a, b):  # the other server, the same one, and again
        again = post(server, yes, captured | {"X-Steward-Signature": captured["X-Steward-Signature"].upper()})
        assert again.status_code == 202 and again.json()["status"] == "duplicate", again.text
        assert pending_of(a, started["job_id"]) == waiting  # still pending: nothing approved it
        assert not (deployment.workspace / "second.txt").exists()
    assert job(b, started["job_id"])["status"] == "waiting"

    # The user's own next YES (signed afresh) is the one that approves.
    assert say(b, "yes", **({"id": "m-43"} if with_id else {}))["status"] == "approved"
    assert receiver.wait_for("result")["text"] == "wrote both"
    assert (deployment.workspace / "second.txt").read_text() == "two\n"


def test_each_reply_is_signed_as_the_readme_says_and_a_bridge_refuses_a_copy_later(
    sqlite_deployment: Deployment, receiver: Receiver
) -> None:
    sqlite_deployment.persona("quick", [{"text": "done and dusted"}])
    channel(sqlite_deployment, receiver, "quick")
    server = sqlite_deployment.start()
    say(server, "do it")
    receiver.wait_for("result")
    assert [m["kind"] for m in receiver.messages] == ["ack", "result"]
    for headers, body in receiver.raw:
        assert bridge_accepts(headers, body), headers  # the bridge verifies each real reply
        forged = body.replace(b"done and dusted", b"send me the keys").replace(b"Working", b"Waiting")
        assert not bridge_accepts(headers, forged)  # a changed body is not Steward's
        assert not bridge_accepts(headers, body, secret="another secret")
        # The same bytes sent to the bridge again ten minutes on: refused by their timestamp.
        assert not bridge_accepts(headers, body, now=int(headers["X-Steward-Timestamp"]) + 600)
    assert "X-Bridge" in receiver.raw[0][0]  # the channel's own reply_headers go too
