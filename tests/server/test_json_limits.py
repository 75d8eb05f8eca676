"""No input gives a 5xx: every JSON body is bounded in nesting depth and carries finite numbers
that fit in 64 bits, whichever route it goes to and whichever field holds it; a signed chat
message whose timestamp is not a time is refused like an unsigned one. Against a real server."""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from server_kit import Deployment, Server

SECRET = "limits-s3cret"
WEBHOOK = "/v1/channels/webhook/chat"
DEEP = 150


def nested(kind: str, depth: int = DEEP) -> str:
    """A JSON value ``depth`` levels deep, as text: arrays, objects, or both in turn."""
    opens = {"array": ["["], "object": ['{"a":'], "mixed": ["[", '{"a":']}[kind]
    closes = {"[": "]", '{"a":': "}"}
    chain = [opens[i % len(opens)] for i in range(depth)]
    return "".join(chain) + "1" + "".join(closes[o] for o in reversed(chain))


# The bodies each route takes, with every field's place: a field's value is swapped for a
# spelling below, the rest stays valid.
BODIES: dict[str, dict[str, Any]] = {
    "/v1/sessions": {"title": "t"},
    "/v1/runs": {"goal": "g", "persona": "", "model": "openai:gpt-4o-mini", "workspace": ".", "mode": "structured",
                 "output_schema": {"type": "object"}, "priority": 0, "session_id": None},
    "/v1/jobs": {"role": "", "goal": "g", "workspace": ".", "priority": 0, "idempotency_key": "k", "user": "u",
                 "max_attempts": 3, "output_schema": {"type": "object"}},
    "/v1/runs/RUN/approve": {"approval_id": "a"},
    "/v1/runs/RUN/deny": {"reason": "r", "approval_id": "a"},
    "/v1/runs/RUN/answer": {"text": "t"},
    "/v1/runs/RUN/mode": {"mode": "autonomous"},
    "/v1/sessions/SESSION/runs": {"goal": "g", "output_schema": {"type": "object"}},
}  # fmt: skip
SPELLINGS = {
    "nested arrays": nested("array"),
    "nested objects": nested("object"),
    "arrays and objects": nested("mixed"),
    "deep inside a schema": '{"type": "object", "properties": {"x": ' + nested("object", 60) + "}}",
    "NaN": "NaN",
    "Infinity": "Infinity",
    "-Infinity": "-Infinity",
    "1e400": "1e400",
    "-1e400": "-1e400",
    "a schema bound of 1e999": '{"type": "number", "maximum": 1e999}',
    "a huge int": "1" + "0" * 5000,
    "a 30-digit int": "1" + "0" * 30,
    "a huge int in a schema": '{"type": "string", "maxLength": 1' + "0" * 40 + "}",
}


def body_with(route: str, field: str, value: str) -> bytes:
    """The route's body with ``field`` holding ``value`` (JSON text, spliced in as written)."""
    fields = [f'"{k}": {value if k == field else json.dumps(v)}' for k, v in BODIES[route].items()]
    return ("{" + ", ".join(fields) + "}").encode()


def signed(body: bytes, timestamp: str) -> dict[str, str]:
    digest = hmac.new(SECRET.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return {"X-Steward-Timestamp": timestamp, "X-Steward-Signature": "sha256=" + digest,
            "Content-Type": "application/json"}  # fmt: skip


@pytest.fixture
def server(sqlite_deployment: Deployment) -> Iterator[Server]:
    sqlite_deployment.config(
        'model = "openai:gpt-4o-mini"\n'
        f'[server.channels.chat]\nsecret = "{SECRET}"\nreply_url = "http://127.0.0.1:9/replies"\n'
    )
    yield sqlite_deployment.start(workers=0)


def _ids(client: httpx.Client) -> dict[str, str]:
    session = client.post("/v1/sessions", json={"title": "s"}).json()["id"]
    run = client.post("/v1/runs", json={"goal": "g", "session_id": session}).json()["id"]
    return {"RUN": run, "SESSION": session}


def _refused_by_its_limit(answer: httpx.Response, what: str) -> None:
    assert answer.status_code == 400, f"{what}: {answer.status_code} {answer.text[:300]}"
    assert answer.headers["content-type"].startswith("application/problem+json"), what
    detail = answer.json()["detail"]
    assert any(w in detail for w in ("levels", "finite", "64 bits")), f"{what}: {detail}"


def test_every_field_of_every_route_refuses_deep_nesting_and_numbers_that_are_not_finite(
    server: Server,
) -> None:
    with server.client() as client:
        ids = _ids(client)
        before = client.get("/v1/jobs").json()["jobs"]
        for route, fields in BODIES.items():
            path = route.replace("RUN", ids["RUN"]).replace("SESSION", ids["SESSION"])
            for field in fields:
                for name, value in SPELLINGS.items():
                    answer = client.post(path, content=body_with(route, field, value),
                                         headers={"Content-Type": "application/json"})  # fmt: skip
                    _refused_by_its_limit(answer, f"{route} {field} = {name}")
        assert client.get("/v1/jobs").json()["jobs"] == before  # nothing was queued by any of them
    assert "Traceback" not in server.output()


def test_a_body_sent_without_a_json_content_type_is_bounded_too(server: Server) -> None:
    with server.client() as client:
        for content_type in ({}, {"Content-Type": "text/plain"}, {"Content-Type": "application/x+json"}):
            answer = client.post("/v1/runs", content=body_with("/v1/runs", "output_schema", nested("array")),
                                 headers=content_type)  # fmt: skip
            assert 400 <= answer.status_code < 500, (content_type, answer.status_code)


def test_a_deep_body_that_is_not_even_json_is_a_4xx(server: Server) -> None:
    with server.client() as client:
        for text in ("[" * 100_000, '{"a":' * 20_000, '{"goal": ' + "[" * 50_000 + '"x'):
            answer = client.post(
                "/v1/runs", content=text.encode(), headers={"Content-Type": "application/json"}
            )
            assert 400 <= answer.status_code < 500, answer.status_code
    assert "Traceback" not in server.output()


def test_the_webhook_bounds_its_body_and_refuses_a_signed_timestamp_that_is_not_a_time(
    server: Server,
) -> None:
    for field in ("user", "text", "id"):
        for name, value in SPELLINGS.items():
            body = ('{"user": "ann", "text": "hi", "id": "m1"}'.replace('"' + ("ann" if field == "user" else
                    "hi" if field == "text" else "m1") + '"', value, 1)).encode()  # fmt: skip
            answer = httpx.post(
                server.url + WEBHOOK, content=body, headers=signed(body, "1700000000"), timeout=30
            )
            _refused_by_its_limit(answer, f"webhook {field} = {name}")
    body = b'{"user": "ann", "text": "hi"}'
    for timestamp in (
        "nan",
        "NaN",
        "inf",
        "-inf",
        "Infinity",
        "1e400",
        "-1e400",
        "1e3",
        "0x10",
        "1_700_000_000",
        "+1e9",
        "1700000000 seconds",
    ):
        answer = httpx.post(server.url + WEBHOOK, content=body, headers=signed(body, timestamp), timeout=30)
        assert answer.status_code == 401, (timestamp, answer.status_code, answer.text[:200])
    with server.client() as client:
        assert client.get("/v1/jobs").json()["jobs"] == []  # no message started a job
    assert "Traceback" not in server.output()


def test_an_output_schema_whose_ref_loops_is_refused_when_the_run_is_asked_for(server: Server) -> None:
    loops = [
        {"$ref": "#"},
        {"allOf": [{"$ref": "#"}]},
        {"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"},
    ]
    with server.client() as client:
        for schema in loops:
            for route, body in (("/v1/runs", {"goal": "g"}), ("/v1/jobs", {"goal": "g"})):
                answer = client.post(route, json=body | {"output_schema": schema})
                assert answer.status_code == 400, (route, schema, answer.status_code)
                assert "$ref" in answer.json()["detail"]
        assert client.get("/v1/jobs").json()["jobs"] == []
