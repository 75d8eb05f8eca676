"""Notes, tasks and continuations over the HTTP API, against a real ``steward serve`` on both
engines: a run's task list, notes and "are you done?" at ``/v1/runs/{id}/work``; notes listed by
workspace and what they are about, and removed."""

from __future__ import annotations

from typing import Any

import httpx
from server_kit import Deployment, wait_for


def ended(message: str) -> dict[str, Any]:
    return {"agent_step": {"phase": "end", "summary": "done", "end_status": "solved", "end_message": message}}


SCRIPT: list[object] = [
    {"tool": "tasks", "args": {"action": "add", "text": "tidy the imports"}},
    {"tool": "note", "args": {"text": "the parser is fragile", "about": "file:src/parse.py"}},
    ended("done"),  # the task is open: asked whether it is done (autonomous)
    {"tool": "tasks", "args": {"action": "done", "ids": [1]}},
    ended("done, imports tidied"),
]


def finished(client: httpx.Client, run_id: str) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        run: dict[str, Any] = client.get(f"/v1/runs/{run_id}").json()
        return run if run["status"] in ("done", "failed") else None

    found: dict[str, Any] = wait_for(check, f"run {run_id} to end")
    return found


def test_a_runs_work_and_its_notes_over_http(deployment: Deployment) -> None:
    deployment.persona("worker", SCRIPT, tools='["tasks", "note"]', extra='[policy]\nmode = "autonomous"\n')
    server = deployment.start()
    with server.client() as client:
        made = client.post("/v1/runs", json={"goal": "tidy up", "persona": "worker"})
        assert made.status_code == 201, made.text
        run_id = made.json()["id"]
        done = finished(client, run_id)
        assert (done["end_status"], done["output"]) == ("solved", "done, imports tidied")

        work = client.get(f"/v1/runs/{run_id}/work")
        assert work.status_code == 200, work.text
        body = work.json()
        assert body["tasks"] == [{"id": 1, "text": "tidy the imports", "done": True}]
        [note] = body["notes"]
        assert (note["about"], note["text"], note["run_id"]) == (
            "file:src/parse.py",
            "the parser is fragile",
            run_id,
        )
        assert note["persona"] == "worker"
        [asked] = body["continuations"]
        assert asked["asked"] and asked["reasons"] == ["task 1 'tidy the imports' is open"]

        here = str(deployment.workspace.resolve())
        listed = client.get("/v1/notes", params={"workspace": here, "about": "src/parse.py"}).json()["notes"]
        assert [n["id"] for n in listed] == [note["id"]]
        assert client.get("/v1/notes", params={"workspace": here, "about": "run:nope"}).json() == {
            "notes": []
        }
        outside = client.get("/v1/notes", params={"workspace": "/"})
        assert outside.status_code == 403
        bad = client.get("/v1/notes", params={"workspace": here, "about": "file:../x"})
        assert bad.status_code == 400 and "file:src/app.py" in bad.json()["detail"]
        assert client.delete(f"/v1/notes/{note['id']}").json() == {"removed": True}
        assert client.delete(f"/v1/notes/{note['id']}").status_code == 404
        assert client.get("/v1/notes").json() == {"notes": []}
