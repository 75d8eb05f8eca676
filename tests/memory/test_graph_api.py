"""`GET /v1/runs/{id}/graph` on a real `steward serve`, on both engines: a run's plan and files as
the JSON the page draws, a 404 for a run that is not there, and the token asked for."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "server" / "kit"))  # as tests/server/conftest.py does
from server_kit import Deployment, wait_for

SCRIPT = [
    {
        "agent_step": {
            "phase": "plan", "summary": "plan",
            "plan": {"goal": "g", "sub_tasks": [{"id": 1, "title": "write it"}, {"id": 2, "title": "check", "depends_on": [1]}]},
        }
    },
    {"tool": "write_file", "args": {"path": "made.txt", "content": "hi\n"}},
    {"agent_step": {"phase": "end", "summary": "e", "end_status": "solved", "end_message": "made"}},
]  # fmt: skip


@pytest.fixture
def deployment(tmp_path: Path, db_url: str) -> Iterator[Deployment]:
    made = Deployment(tmp_path, db_url)
    try:
        yield made
    finally:
        made.stop()


def test_the_graph_of_a_run_over_http(deployment: Deployment) -> None:
    deployment.persona("maker", SCRIPT, tools='["write_file"]')
    server = deployment.start()
    with server.client() as client:
        created = client.post("/v1/runs", json={"goal": "make a file", "persona": "maker"})
        assert created.status_code == 201, created.text
        run_id = created.json()["id"]

        def done() -> bool:
            return bool(client.get(f"/v1/runs/{run_id}").json()["status"] == "done")

        wait_for(done, f"run {run_id} to be done")
        response = client.get(f"/v1/runs/{run_id}/graph")
        assert response.status_code == 200, response.text
        graph: dict[str, Any] = response.json()
        assert graph["root"] == f"run:{run_id}" and graph["truncated"] is False
        nodes = {n["id"]: n for n in graph["nodes"]}
        assert (
            nodes[f"run:{run_id}"]["status"] == "done" and nodes[f"run:{run_id}"]["data"]["role"] == "maker"
        )
        assert (
            nodes[f"task:{run_id}/1"]["label"] == "1. write it" and nodes["file:made.txt"]["kind"] == "file"
        )
        edges = {(e["source"], e["kind"], e["target"]) for e in graph["edges"]}
        assert (f"run:{run_id}", "touched", "file:made.txt") in edges
        assert (f"task:{run_id}/2", "depends_on", f"task:{run_id}/1") in edges
        assert all(e["source"] in nodes and e["target"] in nodes for e in graph["edges"])

        missing = client.get("/v1/runs/nope/graph")
        assert missing.status_code == 404 and missing.headers["content-type"] == "application/problem+json"
        assert client.get(f"/v1/runs/{run_id}/graph?depth=9").status_code == 422
    assert httpx.get(f"{server.url}/v1/runs/{run_id}/graph").status_code == 401
