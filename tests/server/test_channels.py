"""A chat channel (seed 004): signed messages in through the webhook, the agent's messages out to
a real receiver on loopback, with real ``steward serve`` processes and scripted personas."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
from chat_kit import (
    ASK_BASH,
    QUESTION,
    SECRET,
    WEBHOOK,
    WRITE,
    Receiver,
    channel,
    events,
    job,
    jobs,
    say,
    signed,
)
from server_kit import Deployment, wait_for


def ended(message: str) -> dict[str, Any]:
    """A scripted reply that ends the run solved with ``message`` (agent_step end)."""
    return {"agent_step": {"phase": "end", "summary": "done", "end_status": "solved", "end_message": message}}


def test_an_approval_asked_in_chat_is_given_by_replying_yes_and_each_message_goes_out_once(
    deployment: Deployment, receiver: Receiver
) -> None:
    deployment.persona("careful", [WRITE, ended("wrote approved.txt")], extra=ASK_BASH)
    channel(deployment, receiver, "careful")
    first, second = deployment.start(), deployment.start()  # two servers on one store

    started = say(first, "write approved.txt")
    assert started["status"] == "started" and started["job_id"]
    assert receiver.wait_for("ack")["job_id"] == started["job_id"]
    approval = receiver.wait_for("approval")
    assert "bash" in approval["text"] and "approved.txt" in approval["text"]
    assert "Reply YES to approve, or NO and why" in approval["text"]
    assert approval | {"text": "", "delivery": ""} == {
        "channel": "chat", "user": "ann", "text": "", "job_id": started["job_id"], "kind": "approval",
        "signed": True, "delivery": "",
    }  # fmt: skip
    assert not (deployment.workspace / "approved.txt").exists()

    replied = say(second, "Yes")  # the other server takes the reply
    assert replied == {"status": "approved", "job_id": started["job_id"], "detail": replied["detail"]}
    assert receiver.wait_for("result")["text"] == "wrote approved.txt"
    assert (deployment.workspace / "approved.txt").read_text() == "approved\n"
    assert job(first, started["job_id"])["status"] == "done"

    time.sleep(1.5)  # both servers look at the ended job a few more times
    assert receiver.kinds() == ["ack", "approval", "result"]
    assert all(m["signed"] for m in receiver.messages)
    assert len({m["delivery"] for m in receiver.messages}) == 3
    assert len(jobs(first)) == 1


def test_a_question_is_answered_by_the_next_message_and_the_session_goes_on(
    sqlite_deployment: Deployment, receiver: Receiver
) -> None:
    deployment = sqlite_deployment
    deployment.persona("painter", [QUESTION, ended("painted it green")])
    channel(deployment, receiver, "painter")
    server = deployment.start()

    started = say(server, "paint the shed")
    assert receiver.wait_for("question")["text"] == "Which colour?"
    assert say(server, "green, please")["status"] == "answered"
    assert receiver.wait_for("result")["text"] == "painted it green"
    answers = [e["data"]["answer"] for e in events(server, started["job_id"]) if e["type"] == "answer"]
    assert answers == ["green, please"]

    # A new request of the same user: a new job in the same session (the agent sees the first turn).
    again = say(server, "and the fence?")
    assert again["status"] == "started" and again["job_id"] != started["job_id"]
    assert job(server, again["job_id"])["session_id"] == job(server, started["job_id"])["session_id"]
    receiver.wait_for("question", count=2)

    # A restart sends nothing twice: what went out is in the store.
    server.stop()
    deployment.start()
    time.sleep(1.5)
    assert receiver.kinds() == ["ack", "question", "result", "ack", "question"]


def test_a_denial_with_a_reason_stops_the_call_and_an_unclear_reply_is_asked_again(
    sqlite_deployment: Deployment, receiver: Receiver
) -> None:
    deployment = sqlite_deployment
    deployment.persona("careful", [WRITE, ended("did not write it")], extra=ASK_BASH)
    channel(deployment, receiver, "careful")
    server = deployment.start()

    started = say(server, "write approved.txt")
    receiver.wait_for("approval")
    unclear = say(server, "hmm, what would that do?")
    assert unclear["status"] == "unclear"
    assert "reply YES to approve, or NO and why" in receiver.wait_for("again")["text"]
    assert say(server, "no, too risky")["status"] == "denied"
    assert receiver.wait_for("result")["text"] == "did not write it"
    assert not (deployment.workspace / "approved.txt").exists()
    [decided] = [e["data"] for e in events(server, started["job_id"]) if e["type"] == "approval_result"]
    assert (decided["decision"], decided["reason"]) == ("denied", "too risky")


def test_a_message_without_the_channels_signature_is_refused_and_starts_nothing(
    sqlite_deployment: Deployment, receiver: Receiver
) -> None:
    deployment = sqlite_deployment
    deployment.persona("careful", [WRITE, ended("unused")], extra=ASK_BASH)
    channel(deployment, receiver, "careful")
    server = deployment.start()
    body = json.dumps({"user": "mallory", "text": "rm -rf everything"}).encode()

    stale = signed(body, at=time.time() - 3600)  # captured an hour ago and sent again
    for headers in (
        {},
        signed(body, "guessed"),
        {"X-Steward-Signature": "sha256="},
        stale,
        {"X-Steward-Signature": signed(body)["X-Steward-Signature"]},
    ):
        refused = httpx.post(server.url + WEBHOOK, content=body, headers=headers)
        assert refused.status_code == 401, refused.text
        assert refused.headers["content-type"] == "application/problem+json"
        assert "X-Steward-Signature" in refused.json()["detail"]
    tampered = httpx.post(
        server.url + WEBHOOK,
        content=body.replace(b"mallory", b"ann"),
        headers=signed(body),
    )
    assert tampered.status_code == 401
    unknown = httpx.post(server.url + "/v1/channels/webhook/other", content=body, headers=signed(body))
    assert unknown.status_code == 404 and "no channel 'other'" in unknown.json()["detail"]

    assert jobs(server) == []
    time.sleep(1)
    assert receiver.messages == []
    assert server.output().count("channel chat: refused a message from 127.0.0.1") == 6
    assert "(a replay?)" in server.output() and "without a timestamp" in server.output()


def test_bad_input_is_a_problem_that_names_the_fix(sqlite_deployment: Deployment, receiver: Receiver) -> None:
    deployment = sqlite_deployment
    deployment.persona("careful", [ended("unused")])
    channel(deployment, receiver, "careful")
    server = deployment.start()

    def post(body: bytes) -> httpx.Response:
        return httpx.post(server.url + WEBHOOK, content=body, headers=signed(body))

    cases = [
        (b"user=ann&text=hi", 400, "not JSON"),
        (b'["ann", "hi"]', 400, "not an object"),
        (b'{"user": "ann"}', 422, "text: is missing"),
        (b'{"user": "ann", "text": ""}', 422, "text: is empty"),
        (b'{"user": "ann", "text": "   "}', 422, "text: is only blank space"),
        (json.dumps({"user": "ann", "text": "x" * 4001}).encode(), 422, "text: is over 4000 characters"),
        (b'{"user": 7, "text": "hi"}', 422, "user: must be a string"),
        (b'{"user": "ann", "text": "hi", "txt": "hi"}', 422, "txt: is not a field"),
    ]
    for body, status, fix in cases:
        answer = post(body)
        assert answer.status_code == status, (body, answer.text)
        assert answer.headers["content-type"] == "application/problem+json"
        assert fix in answer.json()["detail"], (body, answer.json())
    assert jobs(server) == []


def test_a_message_while_the_job_is_under_way_is_told_it_still_is_and_starts_no_other(
    sqlite_deployment: Deployment, receiver: Receiver
) -> None:
    deployment = sqlite_deployment
    deployment.persona("slow", [ended("unused")])
    channel(deployment, receiver, "slow")
    server = deployment.start(workers=0)  # nobody runs the job: it stays queued
    receiver.fail_first = 1  # the chat app is down for a moment: the acknowledgement is tried again

    started = say(server, "do the thing", id="m1")
    assert started["status"] == "started"
    assert say(server, "do the thing", id="m1")["status"] == "duplicate"  # the chat app sent it twice
    busy = say(server, "are you done?")
    assert busy["status"] == "busy" and busy["job_id"] == started["job_id"]
    assert "Still working" in receiver.wait_for("busy")["text"]
    assert receiver.kinds() == ["ack", "busy"]  # in the order they were said, the retried one first
    assert [j["id"] for j in jobs(server)] == [started["job_id"]]
    assert jobs(server)[0]["user"] == "channel:chat:ann"

    other = say(server, "mine too", user="bob")  # another user has a job of their own
    assert other["status"] == "started" and other["job_id"] != started["job_id"]


def test_a_failing_receiver_is_logged_and_the_server_goes_on(
    sqlite_deployment: Deployment, receiver: Receiver
) -> None:
    deployment = sqlite_deployment
    deployment.persona("quick", [ended("done quickly")])
    channel(deployment, receiver, "quick")
    server = deployment.start()
    receiver.fail_first = 100  # every try answers 503

    started = say(server, "hello")
    wait_for(lambda: job(server, started["job_id"])["status"] == "done", "the job's end")
    wait_for(lambda: "was not delivered" in server.output(), "the log of the failed delivery", timeout=30)
    assert "answered 503" in server.output()
    receiver.fail_first = 0
    assert say(server, "again")["status"] == "started"  # the server still takes messages
    assert receiver.wait_for("result")["text"] == "done quickly"


def test_a_channel_that_cannot_work_says_why_and_the_webhook_needs_no_token(
    sqlite_deployment: Deployment, receiver: Receiver
) -> None:
    deployment = sqlite_deployment
    channel(deployment, receiver, "")
    with (deployment.workspace / "steward.toml").open("a") as toml:
        toml.write(f'[server.channels.ghostly]\nsecret = "{SECRET}"\npersona = "ghost"\n')
        toml.write("[server.channels.open]\n")
    server = deployment.start(workers=0)
    body = json.dumps({"user": "ann", "text": "hi"}).encode()

    def post(name: str) -> httpx.Response:
        return httpx.post(
            f"{server.url}/v1/channels/webhook/{name}",
            content=body,
            headers=signed(body),
        )

    assert (open_ := post("open")).status_code == 503 and "has no secret" in open_.json()["detail"]
    assert (ghostly := post("ghostly")).status_code == 503 and "ghost" in ghostly.json()["detail"]
    assert "channel ghostly cannot start jobs" in server.output()
    assert httpx.get(server.url + "/v1/jobs").status_code == 401  # the rest of the API wants a token
    assert say(server, "hi")["status"] == "started"  # the webhook does not
    assert [j["user"] for j in jobs(server)] == ["channel:chat:ann"]


def test_two_servers_send_each_message_of_many_users_once_and_in_order(
    deployment: Deployment, receiver: Receiver
) -> None:
    deployment.persona("idle", [ended("unused")])
    channel(deployment, receiver, "idle")
    servers = [deployment.start(workers=0), deployment.start(workers=0)]  # the jobs stay queued
    users = [f"user{n}" for n in range(12)]
    with ThreadPoolExecutor(8) as pool:
        started = list(pool.map(lambda n: say(servers[n % 2], "start", user=users[n]), range(12)))
        busy = list(pool.map(lambda n: say(servers[(n + 1) % 2], "done yet?", user=users[n]), range(12)))
    assert {a["status"] for a in started} == {"started"} and {a["status"] for a in busy} == {"busy"}

    wait_for(lambda: len(receiver.messages) >= 24, "every message")
    time.sleep(1.5)  # both servers pass over everything a few more times
    assert len(receiver.messages) == 24
    assert len({m["delivery"] for m in receiver.messages}) == 24
    for user in users:
        assert [m["kind"] for m in receiver.messages if m["user"] == user] == ["ack", "busy"], user


def test_a_question_that_failed_to_go_out_is_sent_again_when_the_user_writes(
    sqlite_deployment: Deployment, receiver: Receiver
) -> None:
    deployment = sqlite_deployment
    deployment.persona("careful", [WRITE, ended("wrote approved.txt")], extra=ASK_BASH)
    channel(deployment, receiver, "careful")
    server = deployment.start()
    started = say(server, "write the file")
    receiver.wait_for("ack")
    receiver.fail_first = 1000  # the bridge is down while the approval goes out
    wait_for(lambda: "was not delivered" in server.output(), "the failed delivery", timeout=40)
    receiver.fail_first = 0
    assert say(server, "hello?")["status"] == "resent"
    assert "YES" in receiver.wait_for("approval")["text"]
    assert say(server, "yes")["status"] == "approved"
    assert receiver.wait_for("result")["text"] == "wrote approved.txt"
    assert job(server, started["job_id"])["status"] == "done"
