"""A run cancelled while it waited, then retried, is a runnable job again: its wait is asked
again (with what it waits for), approving it runs the call, and the run ends done."""

from __future__ import annotations

from typing import Any

import httpx
from server_kit import Deployment, sse, wait_for

WRITE = {"tool": "bash", "args": {"command": "echo approved >> made.txt"}}


def _run(client: httpx.Client, run_id: str) -> dict[str, Any]:
    found: dict[str, Any] = client.get(f"/v1/runs/{run_id}").json()
    return found


def _waits_with_pending(client: httpx.Client, run_id: str) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        run = _run(client, run_id)
        assert run["status"] not in ("failed", "dead", "done"), run
        return run if run["status"] == "waiting" and run["pending"] is not None else None

    found: dict[str, Any] = wait_for(check, f"run {run_id} to wait for a person")
    return found


def test_a_run_cancelled_while_it_waited_and_retried_asks_again_and_runs_when_approved(
    deployment: Deployment,
) -> None:
    deployment.persona("careful", [WRITE, {"text": "made it"}], extra='[policy]\nask = ["bash"]\n')
    server = deployment.start()
    with server.client() as client:
        run = client.post("/v1/runs", json={"goal": "make a file", "persona": "careful"}).json()
        first = _waits_with_pending(client, run["id"])["pending"]
        for _ in range(2):  # cancelled while it waits and retried, twice
            assert client.post(f"/v1/runs/{run['id']}/cancel").json()["status"] == "cancelled"
            retried = client.post(f"/v1/jobs/{run['id']}/retry")
            assert retried.status_code == 200, retried.text
            again = _waits_with_pending(client, run["id"])["pending"]
        assert again["kind"] == "approval" and again["tool"] == "bash"
        assert again["input"] == WRITE["args"]
        assert not (deployment.workspace / "made.txt").exists()
        approved = client.post(f"/v1/runs/{run['id']}/approve", json={"approval_id": again["id"]})
        assert approved.status_code == 200, approved.text
        wait_for(lambda: _run(client, run["id"])["status"] in ("done", "failed"), "the run's end")
        ended = _run(client, run["id"])
        assert (ended["status"], ended["output"]) == ("done", "made it"), ended
        assert (deployment.workspace / "made.txt").read_text() == "approved\n"
        events = [m["event"] for m in sse(client, f"/v1/runs/{run['id']}/events?follow=false")]
        assert events[-1] == "done" and events.count("approval_gate") >= 1
        assert first["tool"] == again["tool"]
