"""A client that sees a run wait may reply at once: by the time the ``waiting`` event (or the
approval card's ``approval_gate``) reaches any client of any server, the run's row says
``waiting``, so an approval sent the instant it arrives is never a 409."""

from __future__ import annotations

from server_kit import Deployment, sse

CALLS = 6  # waits in one run, each approved the instant it is seen


def test_a_client_of_another_server_that_approves_the_instant_it_sees_the_wait_never_gets_409(
    deployment: Deployment,
) -> None:
    steps: list[object] = [
        {"tool": "bash", "args": {"command": f"echo {i} >> calls.txt"}} for i in range(CALLS)
    ]
    deployment.persona("careful", [*steps, {"text": "all six"}], extra='[policy]\nask = ["bash"]\n')
    deployment.start(workers=2)  # A runs the jobs
    api = deployment.start(workers=0)  # B: an API node in front of it, where the client is
    answers: list[int] = []
    with api.client() as client:
        run = client.post("/v1/runs", json={"goal": "six approved calls", "persona": "careful"}).json()
        for message in sse(client, f"/v1/runs/{run['id']}/events", timeout=120):
            # The page shows the approval card at the gate: the earliest a person can click.
            if message.get("event") == "approval_gate":
                approval_id = message["data"]["data"]["id"]
                reply = client.post(f"/v1/runs/{run['id']}/approve", json={"approval_id": approval_id})
                answers.append(reply.status_code)
                assert reply.status_code == 200, f"approval {len(answers)}: {reply.text}"
            if message.get("event") == "done":
                break
        assert answers == [200] * CALLS
        assert client.get(f"/v1/runs/{run['id']}").json()["output"] == "all six"
    assert (deployment.workspace / "calls.txt").read_text().split() == [str(i) for i in range(CALLS)]
