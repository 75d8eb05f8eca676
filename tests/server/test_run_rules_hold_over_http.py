"""A run started over HTTP keeps the rules it started under when it is answered over HTTP after
the configuration lost them (the server's worker rebuilds it from the store)."""

from __future__ import annotations

from typing import Any

import httpx
from server_kit import Deployment, wait_for


def status(client: httpx.Client, run_id: str, wanted: str) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        run: dict[str, Any] = client.get(f"/v1/runs/{run_id}").json()
        return run if run["status"] == wanted else None

    found: dict[str, Any] = wait_for(check, f"run {run_id} to be {wanted}")
    return found


QUESTION = {"agent_step": {"phase": "feedback", "summary": "ask", "feedback_message": "Which colour?"}}


def test_an_answer_over_http_goes_on_under_the_rules_the_run_started_with(
    sqlite_deployment: Deployment,
) -> None:
    deployment = sqlite_deployment
    deployment.config('[policy]\ndeny = ["write_file(from-config*)", "bash(touch *)"]\n')
    writes = [
        {"tool": "write_file", "args": {"path": "from-config.txt", "content": "x"}},
        {"tool": "bash", "args": {"command": "touch forbidden.txt"}},
        {"tool": "write_file", "args": {"path": "allowed.txt", "content": "x"}},
    ]
    deployment.persona("painter", [QUESTION, *writes, {"text": "painted"}], tools='["write_file", "bash"]')
    server = deployment.start()
    with server.client() as client:
        made = client.post("/v1/runs", json={"goal": "paint the shed", "persona": "painter"})
        assert made.status_code == 201, made.text
        run = made.json()
        status(client, run["id"], "waiting")
        deployment.config("")  # the rules are gone from the file, not from the run
        assert client.post(f"/v1/runs/{run['id']}/answer", json={"text": "green"}).status_code == 200
        assert status(client, run["id"], "done")["output"] == "painted"
    assert (deployment.workspace / "allowed.txt").exists()
    assert not (deployment.workspace / "from-config.txt").exists()
    assert not (deployment.workspace / "forbidden.txt").exists()
