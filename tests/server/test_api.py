"""The HTTP API against a real ``steward serve`` on loopback, on both engines: runs started,
streamed, dropped and resumed with Last-Event-ID, approved, answered, switched, cancelled; auth."""

from __future__ import annotations

import json
import re
import signal
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
from server_kit import Deployment, Server, sse, wait_for


def ended(message: str) -> dict[str, Any]:
    """A scripted reply that ends the run solved with ``message`` (agent_step end)."""
    return {"agent_step": {"phase": "end", "summary": "done", "end_status": "solved", "end_message": message}}


PLAN = {
    "agent_step": {
        "phase": "plan", "summary": "plan it",
        "plan": {"goal": "make a file", "sub_tasks": [{"id": 1, "title": "Write the file"}]},
    }
}  # fmt: skip


def careful(deployment: Deployment, name: str = "careful", command: str = "echo hi >> made.txt") -> None:
    """A persona whose one bash call waits for approval."""
    deployment.persona(
        name, [PLAN, {"tool": "bash", "args": {"command": command}}, ended("made it")],
        extra='[policy]\nask = ["bash"]\n',
    )  # fmt: skip


def start(client: httpx.Client, **body: Any) -> dict[str, Any]:
    response = client.post("/v1/runs", json=body)
    assert response.status_code == 201, response.text
    run: dict[str, Any] = response.json()
    return run


def run_status(client: httpx.Client, run_id: str, *statuses: str) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        run: dict[str, Any] = client.get(f"/v1/runs/{run_id}").json()
        return run if run["status"] in statuses else None

    found: dict[str, Any] = wait_for(check, f"run {run_id} to be {statuses}")
    return found


def test_a_run_streams_waits_is_approved_over_http_and_ends(deployment: Deployment) -> None:
    careful(deployment)
    server = deployment.start()
    with server.client() as client:
        run = start(client, goal="make a file", persona="careful")
        assert run["status"] in ("queued", "running", "waiting") and run["session_id"]
        waiting = run_status(client, run["id"], "waiting")
        pending = waiting["pending"]
        assert pending["kind"] == "approval" and pending["tool"] == "bash"
        assert pending["input"] == {"command": "echo hi >> made.txt"} and pending["deadline"] > time.time()
        assert not (deployment.workspace / "made.txt").exists()
        seen = [m for m in sse(client, f"/v1/runs/{run['id']}/events?follow=false")]
        assert [m["event"] for m in seen][-2:] == ["approval_gate", "waiting"]
        assert [int(m["id"]) for m in seen] == list(range(1, len(seen) + 1))
        assert all(m["data"]["seq"] == int(m["id"]) and m["data"]["type"] == m["event"] for m in seen)
        wrong = client.post(f"/v1/runs/{run['id']}/approve", json={"approval_id": "not-it"})
        assert wrong.status_code == 409 and pending["id"] in wrong.json()["detail"]
        approved = client.post(f"/v1/runs/{run['id']}/approve", json={"approval_id": pending["id"]})
        assert approved.status_code == 200, approved.text
        done = run_status(client, run["id"], "done")
        assert done["end_status"] == "solved" and done["output"] == "made it"
        assert (deployment.workspace / "made.txt").read_text() == "hi\n"
        everything = list(sse(client, f"/v1/runs/{run['id']}/events"))  # a finished run: all, then the end
        assert everything[-1]["event"] == "done"
        result = next(m["data"] for m in everything if m["event"] == "approval_result")
        assert result["data"]["decision"] == "approved"
        session = client.get(f"/v1/sessions/{run['session_id']}").json()
        assert [(t["run_id"], t["answer"]) for t in session["turns"]] == [(run["id"], "made it")]


def test_a_dropped_stream_resumes_with_last_event_id_without_loss_or_doubles(deployment: Deployment) -> None:
    steps: list[object] = [
        {"tool": "bash", "args": {"command": f"echo {i} >> steps.txt; sleep 0.2"}} for i in range(6)
    ]
    deployment.persona("stepper", [*steps, ended("six")])
    server = deployment.start()
    with server.client() as client:
        run = start(client, goal="six steps", persona="stepper")
        first = list(sse(client, f"/v1/runs/{run['id']}/events", limit=5))  # then the client drops
        last = first[-1]["id"]
        time.sleep(0.5)  # the run goes on meanwhile
        rest = list(sse(client, f"/v1/runs/{run['id']}/events", headers={"Last-Event-ID": last}))
        seqs = [int(m["id"]) for m in first + rest]
        assert seqs == list(range(1, seqs[-1] + 1)), seqs  # every event once, in order
        assert rest[-1]["event"] == "done"
        assert client.get(f"/v1/runs/{run['id']}").json()["status"] == "done"  # the drop cancelled nothing
        assert (deployment.workspace / "steps.txt").read_text().split() == [str(i) for i in range(6)]
        after = list(sse(client, f"/v1/runs/{run['id']}/events?after=3&follow=false"))
        assert int(after[0]["id"]) == 4


def test_questions_are_answered_and_deny_gives_the_reason_to_the_model(sqlite_deployment: Deployment) -> None:
    deployment = sqlite_deployment
    ask = {"agent_step": {"phase": "feedback", "summary": "ask", "feedback_message": "Which colour?"}}
    deployment.persona("asker", [ask, ended("painted it")])
    careful(deployment, "denied", "echo no >> denied.txt")
    server = deployment.start()
    with server.client() as client:
        asked = start(client, goal="paint the shed", persona="asker")
        pending = run_status(client, asked["id"], "waiting")["pending"]
        assert pending["kind"] == "question" and pending["question"] == "Which colour?"
        wrong = client.post(f"/v1/runs/{asked['id']}/approve", json={})
        assert wrong.status_code == 409 and "answer" in wrong.json()["detail"]
        assert client.post(f"/v1/runs/{asked['id']}/answer", json={"text": "   "}).status_code == 400
        assert client.post(f"/v1/runs/{asked['id']}/answer", json={"text": "green"}).status_code == 200
        assert run_status(client, asked["id"], "done")["output"] == "painted it"
        answers = [
            m["data"]["data"] for m in sse(client, f"/v1/runs/{asked['id']}/events") if m["event"] == "answer"
        ]
        assert [a["answer"] for a in answers] == ["green"]

        denied = start(client, goal="make a file", persona="denied")
        run_status(client, denied["id"], "waiting")
        assert client.post(f"/v1/runs/{denied['id']}/deny", json={"reason": "not today"}).status_code == 200
        run_status(client, denied["id"], "done", "failed")
        results = [
            m["data"]["data"]
            for m in sse(client, f"/v1/runs/{denied['id']}/events")
            if m["event"] == "approval_result"
        ]
        assert results[0]["decision"] == "denied" and results[0]["reason"] == "not today"
        assert not (deployment.workspace / "denied.txt").exists()


def test_switching_a_waiting_run_to_autonomous_is_recorded_and_applies(sqlite_deployment: Deployment) -> None:
    deployment = sqlite_deployment
    two = [
        {"tool": "bash", "args": {"command": "echo one >> two.txt"}},
        {"tool": "bash", "args": {"command": "echo two >> two.txt"}},
        {"agent_step": {"phase": "feedback", "summary": "ask", "feedback_message": "Anything else?"}},
        ended("both"),
    ]
    deployment.persona("twice", two, extra='[policy]\nask = ["bash"]\n')
    server = deployment.start()
    with server.client() as client:
        run = start(client, goal="two calls", persona="twice")
        run_status(client, run["id"], "waiting")
        switched = client.post(f"/v1/runs/{run['id']}/mode", json={"mode": "autonomous"})
        assert switched.status_code == 200 and switched.json()["mode"] == "autonomous"
        assert client.post(f"/v1/runs/{run['id']}/mode", json={"mode": "wild"}).status_code == 422
        client.post(f"/v1/runs/{run['id']}/approve", json={})
        # The second call is not asked about; the question that follows is (a person's answer).
        assert run_status(client, run["id"], "waiting")["pending"]["kind"] == "question"
        # Answered, the run is rebuilt from a log that holds the switch: it must replay it in place.
        assert client.post(f"/v1/runs/{run['id']}/answer", json={"text": "no"}).status_code == 200
        done = run_status(client, run["id"], "done", "failed")
        assert done["output"] == "both"
        events = [m["data"] for m in sse(client, f"/v1/runs/{run['id']}/events")]
        modes = [e for e in events if e["type"] == "mode"]
        assert [m["data"]["mode"] for m in modes] == ["autonomous"]
        assert sum(1 for e in events if e["type"] == "approval_gate") == 1
        assert (deployment.workspace / "two.txt").read_text().split() == ["one", "two"]


def test_cancel_stops_a_running_run_and_its_stream_ends(deployment: Deployment) -> None:
    deployment.persona(
        "sleeper",
        [{"tool": "bash", "args": {"command": "touch started; sleep 30; touch finished"}}, ended("no")],
    )
    server = deployment.start()
    with server.client() as client:
        run = start(client, goal="sleep", persona="sleeper")
        wait_for((deployment.workspace / "started").exists, "the call to start")
        cancelled = client.post(f"/v1/runs/{run['id']}/cancel")
        assert cancelled.status_code == 200, cancelled.text
        run_status(client, run["id"], "cancelled")
        stream = list(sse(client, f"/v1/runs/{run['id']}/events", timeout=20))
        assert stream[-1]["event"] == "done" and stream[-1]["data"]["data"]["status"] == "cancelled"
        again = client.post(f"/v1/runs/{run['id']}/cancel")
        assert again.status_code == 409 and "already ended" in again.json()["detail"]
        time.sleep(1)
        assert not (deployment.workspace / "finished").exists()


def test_auth_errors_and_bad_input_are_problem_details(sqlite_deployment: Deployment) -> None:
    deployment = sqlite_deployment
    server = deployment.start(workers=0)
    assert httpx.get(server.url + "/v1/health").json() == {"status": "ok"}
    spec = httpx.get(server.url + "/openapi.json").json()
    for path, operations in spec["paths"].items():
        for method in operations:
            # The channels' webhook is authenticated by its signature (tests/server/test_channels.py).
            if path == "/v1/health" or not path.startswith("/v1/") or path.startswith("/v1/channels/"):
                continue
            # Each path parameter filled with a value every converter takes (an id, a number).
            url = server.url + re.sub(r"\{[^}]+\}", "1", path)
            for headers in (
                {},
                {"Authorization": "Bearer stw_not-a-real-token"},
                {"Authorization": "Basic eDp5"},
            ):
                response = httpx.request(method, url, headers=headers, json={})
                assert response.status_code == 401, (method, path, headers, response.text)
                assert response.headers["content-type"] == "application/problem+json"
                assert "token" in response.json()["detail"]
    with server.client() as client:
        assert client.get("/v1/runs/nope").status_code == 404
        problems = [
            client.post("/v1/runs", json={"goal": ""}),
            client.post("/v1/runs", json={"goal": "x", "colour": "red"}),
            client.post("/v1/runs", json={"goal": "x", "persona": "nobody"}),
            client.post("/v1/runs", json={"goal": "x", "workspace": "/etc"}),
            client.post("/v1/runs", json={"goal": "x", "workspace": "../.."}),
            client.post("/v1/runs", json={"goal": "x", "model": "nonsense"}),
            client.post("/v1/runs", content=b"{not json", headers={"content-type": "application/json"}),
            client.post("/v1/runs", json={"goal": "x" * 400_000}),
            client.get("/v1/runs/abc/events", headers={"Last-Event-ID": "yesterday"}),
        ]
        for response in problems:
            assert 400 <= response.status_code < 500, response.text
            assert response.headers["content-type"] == "application/problem+json", response.text
            body = response.json()
            assert body["detail"] and "Traceback" not in response.text
        assert problems[2].status_code == 400 and "persona" in problems[2].json()["detail"]
        assert problems[3].status_code == 403 and problems[4].status_code == 403
        assert problems[7].status_code == 413

        def chunks() -> Iterator[bytes]:  # no Content-Length: sent as chunks
            yield b'{"goal": "'
            for _ in range(300):
                yield b"x" * 1024
            yield b'"}'

        chunked = client.post("/v1/runs", content=chunks(), headers={"content-type": "application/json"})
        assert chunked.status_code == 413, chunked.text
        assert client.get("/v1/jobs").json()["jobs"] == []  # nothing was queued by bad requests
    assert "Traceback" not in server.output()


def test_the_first_start_makes_a_private_token_and_new_tokens_work_at_once(tmp_path: Path) -> None:
    deployment = Deployment(tmp_path, f"sqlite:///{tmp_path}/store/steward.db")
    tokens = Path(deployment.env["XDG_CONFIG_HOME"]) / "steward" / "tokens.json"
    assert stat.S_IMODE(tokens.stat().st_mode) == 0o600
    assert deployment.token not in tokens.read_text()  # kept hashed
    server = deployment.start(workers=0)
    try:
        made = deployment.steward("serve", "--new-token", "phone")
        phone = made.stdout.strip().splitlines()[-1]
        with server.client(phone) as client:
            assert client.get("/v1/ready").status_code == 200
        assert deployment.steward("serve", "--revoke-token", "phone").returncode == 0
        with server.client(phone) as client:
            assert client.get("/v1/ready").status_code == 401
        names = [e["name"] for e in json.loads(tokens.read_text())]
        assert names == ["tests"]
    finally:
        server.stop()


def test_a_server_not_on_loopback_warns(sqlite_deployment: Deployment) -> None:
    server = sqlite_deployment.start("--host", "0.0.0.0", workers=0)
    assert "warning: listening on 0.0.0.0" in server.output()


def test_two_servers_on_one_postgres_store_stream_each_others_runs(deployment: Deployment) -> None:
    if not deployment.db_url.startswith("postgresql"):
        return  # SQLite: one machine; two servers on one file are covered by the polling path above
    steps: list[object] = [
        {"tool": "bash", "args": {"command": f"echo {i} >> b.txt; sleep 0.3"}} for i in range(4)
    ]
    deployment.persona("remote", [*steps, ended("ran on B")])
    api_only: Server = deployment.start(workers=0)  # A: no workers of its own
    runner: Server = deployment.start(workers=2)  # B: runs the jobs
    with api_only.client() as a, runner.client() as b:
        run = start(a, goal="run elsewhere", persona="remote")
        started = time.monotonic()
        received = [(message, time.monotonic()) for message in sse(a, f"/v1/runs/{run['id']}/events")]
        assert received[-1][0]["event"] == "done"
        seqs = [int(m["id"]) for m, _ in received]
        assert seqs == list(range(1, seqs[-1] + 1))
        # Live, not at the end: the events of the four calls arrived spread over the run's time.
        results = [t for m, t in received if m["event"] == "tool_result"]
        assert results[-1] - results[0] > 0.6, (results, started)
        shown = b.get(f"/v1/runs/{run['id']}").json()
        assert shown["status"] == "done" and shown["output"] == "ran on B"
        wait_for(lambda: a.get(f"/v1/jobs/{run['id']}").json()["status"] == "done", "the job to be settled")


def test_an_idle_stream_gets_keepalive_comments_and_a_waiting_run_keeps_it_open(
    sqlite_deployment: Deployment,
) -> None:
    deployment = sqlite_deployment
    deployment.config("[server]\nkeepalive_s = 0.3\n")
    careful(deployment)
    server = deployment.start()
    with server.client() as client:
        run = start(client, goal="make a file", persona="careful")
        run_status(client, run["id"], "waiting")
        messages = []
        for message in sse(client, f"/v1/runs/{run['id']}/events", timeout=10):
            messages.append(message)
            if "comment" in message:
                break
        assert messages[-1] == {"comment": "ping"}
        assert [m["event"] for m in messages[:-1]][-1] == "waiting"


def test_stopping_the_server_ends_open_streams_cleanly_and_the_run_goes_on_later(
    sqlite_deployment: Deployment,
) -> None:
    deployment = sqlite_deployment
    careful(deployment)
    server = deployment.start()
    with server.client() as client:
        run = start(client, goal="make a file", persona="careful")
        run_status(client, run["id"], "waiting")
        seen: list[dict[str, Any]] = []
        stopped = False
        for message in sse(client, f"/v1/runs/{run['id']}/events", timeout=20):
            seen.append(message)
            if message.get("event") == "waiting" and not stopped:
                stopped = True
                server.process.send_signal(signal.SIGTERM)
        # The stream ended as a whole response (a cut chunk would raise in the reader above).
        assert seen[-1]["event"] == "waiting"
        assert server.process.wait(timeout=20) in (0, -signal.SIGTERM)  # uvicorn re-raises the signal
    again = deployment.start()
    with again.client() as client:
        assert client.post(f"/v1/runs/{run['id']}/approve", json={}).status_code == 200
        assert run_status(client, run["id"], "done")["output"] == "made it"


def test_a_retried_run_streams_past_its_earlier_end(sqlite_deployment: Deployment) -> None:
    deployment = sqlite_deployment
    deployment.persona(
        "again",
        [
            {"tool": "bash", "args": {"command": "touch started; sleep 30"}},
            {"tool": "bash", "args": {"command": "echo second >> again.txt"}},
            ended("went on"),
        ],
    )
    server = deployment.start()
    with server.client() as client:
        run = start(client, goal="retry me", persona="again")
        wait_for((deployment.workspace / "started").exists, "the call to start")
        client.post(f"/v1/runs/{run['id']}/cancel")
        run_status(client, run["id"], "cancelled")
        first = list(sse(client, f"/v1/runs/{run['id']}/events"))
        assert first[-1]["event"] == "done" and first[-1]["data"]["data"]["status"] == "cancelled"
        assert client.post(f"/v1/jobs/{run['id']}/retry").status_code == 200
        again = list(sse(client, f"/v1/runs/{run['id']}/events", headers={"Last-Event-ID": first[-1]["id"]}))
        assert again, str(client.get(f"/v1/jobs/{run['id']}").json()).replace(", ", "\n")
        assert int(again[0]["id"]) == int(first[-1]["id"]) + 1
        assert again[-1]["event"] == "done" and again[-1]["data"]["data"]["status"] == "done"
        assert (deployment.workspace / "again.txt").read_text() == "second\n"


def test_nul_characters_are_refused_by_name_on_both_engines(deployment: Deployment) -> None:
    server = deployment.start(workers=0)
    with server.client() as client:
        for response in (
            client.post("/v1/runs", json={"goal": "\u0000x"}),
            client.post("/v1/sessions", json={"title": "a\u0000b"}),
            client.post("/v1/runs", json={"goal": "x", "session_id": "s\u0000"}),
            client.post("/v1/runs", json={"goal": "x", "output_schema": {"type": "string", "x\u0000": 1}}),
            client.get("/v1/runs/%00"),
            client.get("/v1/sessions/a%00b"),
            client.get("/v1/runs?session_id=%00"),
        ):
            assert response.status_code in (400, 422), response.text
            assert "NUL" in response.json()["detail"]
        assert client.get("/v1/sessions").json() == {"sessions": [], "next": None}


def test_a_run_cancelled_while_it_waits_ends_its_stream_and_its_turn(sqlite_deployment: Deployment) -> None:
    deployment = sqlite_deployment
    careful(deployment)
    server = deployment.start()
    with server.client() as client:
        run = start(client, goal="make a file", persona="careful")
        run_status(client, run["id"], "waiting")
        assert client.post(f"/v1/runs/{run['id']}/cancel").json()["status"] == "cancelled"
        stream = list(sse(client, f"/v1/runs/{run['id']}/events", timeout=10))
        assert stream[-1]["event"] == "done" and stream[-1]["data"]["data"]["status"] == "cancelled"
        turns = client.get(f"/v1/sessions/{run['session_id']}").json()["turns"]
        assert [t["status"] for t in turns] == ["cancelled"]
        assert not (deployment.workspace / "made.txt").exists()


def test_a_run_with_no_model_is_refused_and_one_whose_model_cannot_load_fails_its_turn(
    sqlite_deployment: Deployment,
) -> None:
    deployment = sqlite_deployment
    (deployment.workspace / "personas" / "broken.toml").write_text(
        'role = "broken"\nmodel = "scripted:gone.yaml"\n'
    )
    server = deployment.start()
    with server.client() as client:
        refused = client.post("/v1/runs", json={"goal": "hello"})
        assert refused.status_code == 400 and 'send "model"' in refused.json()["detail"]
        # No session is made for a run that cannot start.
        assert client.get("/v1/sessions").json() == {"sessions": [], "next": None}
        run = start(client, goal="hello", persona="broken")
        failed = run_status(client, run["id"], "failed")
        assert "gone.yaml" in (failed["error"] or "")
        turns = client.get(f"/v1/sessions/{run['session_id']}").json()["turns"]
        assert [t["status"] for t in turns] == ["failed"]
