"""Long-term memory over the HTTP API, against a real ``steward serve`` on both engines: list with
scope filters, search in one scope with its explanation, show, hide, purge, export."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa
from server_kit import Deployment, Server, sse

from steward.memory.longterm import LongTermMemory, Scope
from steward.store.events import open_store
from steward.store.schema import memory_items


def remember(deployment: Deployment, *items: tuple[Scope, str, Sequence[str]]) -> list[int]:
    """Write ``(scope, text, tags)`` items to the deployment's store as a run would; their ids."""

    async def write() -> list[int]:
        store = await open_store(deployment.db_url)
        try:
            memory = LongTermMemory(store.engine)
            return [(await memory.remember(scope, text, tags=tags)).item.id for scope, text, tags in items]
        finally:
            await store.close()

    return asyncio.run(write())


def stored_texts(deployment: Deployment) -> list[str]:
    async def read() -> list[str]:
        store = await open_store(deployment.db_url)
        try:
            async with store.engine.connect() as conn:
                return list((await conn.execute(sa.select(memory_items.c.text))).scalars())
        finally:
            await store.close()

    return asyncio.run(read())


def scopes(deployment: Deployment) -> dict[str, Scope]:
    """Four scopes that differ in one part each from ``mine`` (the CLI's user, no persona, the
    server's workspace)."""
    workspace = deployment.workspace.resolve()
    (workspace / "other").mkdir(exist_ok=True)
    return {
        "mine": Scope("local", "", str(workspace)),
        "bob": Scope("bob", "", str(workspace)),
        "persona": Scope("local", "careful", str(workspace)),
        "elsewhere": Scope("local", "", str(workspace / "other")),
    }


@pytest.fixture
def server(deployment: Deployment) -> Server:
    return deployment.start(workers=0)


def ids_of(reply: httpx.Response) -> list[int]:
    assert reply.status_code == 200, reply.text
    body = reply.json()
    return [hit["item"]["id"] for hit in body["hits"]] if "hits" in body else [i["id"] for i in body["items"]]


def test_search_stays_in_one_scope_whatever_the_query(deployment: Deployment, server: Server) -> None:
    scope = scopes(deployment)
    text = "the deploy key lives in the vault"
    mine, bobs, personas, elsewhere = remember(deployment, *[(scope[n], text, ()) for n in scope])
    with server.client() as client:
        # No scope given: the CLI's user, no persona, the server's workspace. Never every scope.
        assert ids_of(client.get("/v1/memory/search", params={"q": "deploy key"})) == [mine]
        for query in ("deploy OR key", 'text:* "vault', "% _ ' NEAR(deploy key)", "*"):
            found = ids_of(client.get("/v1/memory/search", params={"q": query, "k": 100}))
            assert set(found) <= {mine}, query
        assert ids_of(client.get("/v1/memory/search", params={"q": "vault", "user": "bob"})) == [bobs]
        as_persona = client.get("/v1/memory/search", params={"q": "vault", "persona": "careful"})
        assert ids_of(as_persona) == [personas]
        assert ids_of(client.get("/v1/memory/search", params={"q": "vault", "workspace": "other"})) == [
            elsewhere
        ]
        nobody = client.get("/v1/memory/search", params={"q": "vault", "user": "mallory"})
        assert ids_of(nobody) == []
        assert nobody.json()["scope"]["user"] == "mallory"


def test_search_with_explain_gives_each_items_ranks_and_fused_score(
    deployment: Deployment, server: Server
) -> None:
    mine = scopes(deployment)["mine"]
    best, other = remember(
        deployment,
        (mine, "rotate the deploy key every month", ("ops",)),
        (mine, "the deploy went out on friday", ()),
    )
    remember(deployment, (mine, "lunch is at noon", ()))
    with server.client() as client:
        plain = client.get("/v1/memory/search", params={"q": "deploy key"}).json()
        explained = client.get("/v1/memory/search", params={"q": "deploy key", "explain": "true"}).json()
    assert [h["explain"] for h in plain["hits"]] == [None, None]
    assert explained["mode"] == "keyword"  # no [memory] embedder: by words only, and it says so
    assert explained["vector_backend"] == "none"
    hits = explained["hits"]
    assert [h["item"]["id"] for h in hits] == [best, other]
    assert hits[0]["item"]["tags"] == ["ops"]
    assert [h["explain"]["keyword_rank"] for h in hits] == [1, 2]
    assert all(h["explain"]["vector_rank"] is None and h["explain"]["similarity"] is None for h in hits)
    assert hits[0]["explain"]["score"] > hits[1]["explain"]["score"] > 0


def test_the_list_filters_by_each_scope_part_and_pages(deployment: Deployment, server: Server) -> None:
    scope = scopes(deployment)
    made = dict(
        zip(scope, remember(deployment, *[(scope[n], f"note of {n}", ()) for n in scope]), strict=True)
    )
    with server.client() as client:
        assert ids_of(client.get("/v1/memory")) == sorted(made.values(), reverse=True)  # every scope
        assert ids_of(client.get("/v1/memory", params={"user": "bob"})) == [made["bob"]]
        assert ids_of(client.get("/v1/memory", params={"persona": "careful"})) == [made["persona"]]
        no_persona = ids_of(client.get("/v1/memory", params={"persona": "", "user": "local"}))
        assert sorted(no_persona) == sorted([made["mine"], made["elsewhere"]])
        assert ids_of(client.get("/v1/memory", params={"workspace": "other"})) == [made["elsewhere"]]
        assert ids_of(client.get("/v1/memory", params={"kind": "session_summary"})) == []

        first = client.get("/v1/memory", params={"limit": 3}).json()
        assert len(first["items"]) == 3 and first["next"] == first["items"][-1]["id"]
        rest = client.get("/v1/memory", params={"limit": 3, "before": first["next"]}).json()
        assert [i["id"] for i in first["items"] + rest["items"]] == sorted(made.values(), reverse=True)
        assert rest["next"] is None
    item = first["items"][0]
    assert set(item) >= {"scope", "kind", "text", "tags", "created_at", "hidden_at", "expires_at", "merged"}


def test_a_hidden_item_is_never_recalled_but_shown_and_listed_with_hidden(
    deployment: Deployment, server: Server
) -> None:
    mine = scopes(deployment)["mine"]
    (item,) = remember(deployment, (mine, "the printer is on floor two", ()))
    with server.client() as client:
        hidden = client.delete(f"/v1/memory/{item}")
        assert hidden.status_code == 200, hidden.text
        assert hidden.json()["purged"] is False and hidden.json()["item"]["hidden_at"] is not None
        assert ids_of(client.get("/v1/memory/search", params={"q": "printer"})) == []
        assert ids_of(client.get("/v1/memory")) == []
        assert ids_of(client.get("/v1/memory", params={"hidden": "true"})) == [item]
        assert client.get(f"/v1/memory/{item}").json()["hidden_at"] is not None
        assert client.delete(f"/v1/memory/{item}").status_code == 200  # hiding twice is no error
        # The id as the tools, `steward memory list` and the page show it.
        named = client.get(f"/v1/memory/m{item}")
        assert named.status_code == 200 and named.json()["id"] == item
        assert client.delete(f"/v1/memory/m{item}").status_code == 200
        assert client.get("/v1/memory/m999").status_code == 404
    assert stored_texts(deployment) == ["the printer is on floor two"]  # kept


def test_a_purged_item_leaves_the_store(deployment: Deployment, server: Server) -> None:
    mine = scopes(deployment)["mine"]
    gone, kept = remember(deployment, (mine, "the old wifi password was hunter2", ()), (mine, "keep me", ()))
    with server.client() as client:
        purged = client.delete(f"/v1/memory/{gone}", params={"purge": "true"})
        assert purged.status_code == 200, purged.text
        assert purged.json() == {"id": gone, "purged": True, "item": None}
        missing = client.get(f"/v1/memory/{gone}")
        assert missing.status_code == 404 and "GET /v1/memory" in missing.json()["detail"]
        assert ids_of(client.get("/v1/memory", params={"hidden": "true"})) == [kept]
        assert ids_of(client.get("/v1/memory/search", params={"q": "wifi password"})) == []
        assert client.delete(f"/v1/memory/{gone}", params={"purge": "true"}).status_code == 404
    assert stored_texts(deployment) == ["keep me"]


def test_export_is_one_json_line_per_item_with_every_field(deployment: Deployment, server: Server) -> None:
    scope = scopes(deployment)
    shown, hidden = remember(
        deployment, (scope["mine"], "alpha line", ("a", "b")), (scope["bob"], 'beta "quoted"\nline', ())
    )
    with server.client() as client:
        assert client.delete(f"/v1/memory/{hidden}").status_code == 200
        everything = client.get("/v1/memory/export")
        only_bob = client.get("/v1/memory/export", params={"user": "bob", "hidden": "false"})
    assert everything.status_code == 200, everything.text
    assert everything.headers["content-type"].startswith("application/x-ndjson")
    lines = [json.loads(line) for line in everything.text.splitlines()]
    assert [item["id"] for item in lines] == [hidden, shown]  # hidden ones too, by default
    assert lines[0]["text"] == 'beta "quoted"\nline' and lines[0]["hidden_at"] is not None
    assert lines[1]["tags"] == ["a", "b"] and lines[1]["scope"]["user"] == "local"
    assert only_bob.status_code == 200 and only_bob.text == ""


def test_bad_requests_are_4xx_that_name_the_fix(
    tmp_path: Path, deployment: Deployment, server: Server
) -> None:
    with server.client() as client:
        outside = client.get("/v1/memory/search", params={"q": "x", "workspace": str(tmp_path)})
        assert outside.status_code == 403 and "roots" in outside.json()["detail"]
        assert client.get("/v1/memory", params={"workspace": "/"}).status_code == 403
        blank = client.get("/v1/memory/search", params={"q": "   "})
        assert blank.status_code == 400 and "q is empty" in blank.json()["detail"]
        assert client.get("/v1/memory/search").status_code == 422  # q is required
        assert client.get("/v1/memory/search", params={"q": "x", "persona": "../x"}).status_code == 422
        assert client.get("/v1/memory", params={"user": "a\x00b"}).status_code == 400
        assert client.get("/v1/memory/0").status_code == 422
        assert client.get(f"/v1/memory/{2**40}").status_code == 422
        unknown = client.get("/v1/memory/999")
        assert unknown.status_code == 404 and unknown.headers["content-type"] == "application/problem+json"
    with server.client(token="stw_not-a-token") as stranger:
        for path in ("/v1/memory", "/v1/memory/search?q=x", "/v1/memory/export", "/v1/memory/1"):
            assert stranger.get(path).status_code == 401, path
        assert stranger.delete("/v1/memory/1").status_code == 401


def test_search_by_meaning_over_an_embedder_served_by_http_explains_both_ranks(
    deployment: Deployment,
) -> None:
    from steward.testing.fake_llm import FakeLLMServer

    scope = scopes(deployment)
    with FakeLLMServer() as embeddings:
        deployment.config(
            f'[memory]\nembedder = "openai:hash-embed"\n[models.openai]\nbase_url = "{embeddings.openai_base_url}"\n'
        )
        server = deployment.start(workers=0)
        near, far = remember(
            deployment,
            (scope["mine"], "deployment keys are rotated monthly", ()),
            (scope["mine"], "lunch is at noon", ()),
        )
        (bobs,) = remember(deployment, (scope["bob"], "deployment keys are rotated monthly", ()))
        with server.client() as client:
            reply = client.get(
                "/v1/memory/search", params={"q": "deployment keys", "k": 10, "explain": "true"}
            )
        assert reply.status_code == 200, reply.text
        assert embeddings.embedding_requests  # the real client, over a socket: items and query embedded
    found = reply.json()
    assert found["mode"] == "hybrid" and found["vector_backend"] != "none"
    hits = {h["item"]["id"]: h["explain"] for h in found["hits"]}
    assert bobs not in hits  # the same words in another scope: never
    assert hits[near]["keyword_rank"] == 1 and hits[near]["vector_rank"] == 1
    assert hits[near]["similarity"] > 0.5
    if far in hits:  # only by meaning, if at all: below the near one
        assert hits[far]["keyword_rank"] is None and hits[far]["similarity"] < hits[near]["similarity"]
    assert found["hits"][0]["item"]["id"] == near


def test_what_a_run_remembered_is_found_in_its_scope_only(deployment: Deployment) -> None:
    remembered = {
        "tool": "remember",
        "args": {"text": "the staging database is on port 6543", "tags": ["db"]},
    }
    ended = {
        "agent_step": {"phase": "end", "summary": "kept", "end_status": "solved", "end_message": "Kept."}
    }
    deployment.persona("keeper", [remembered, ended], tools='["remember"]')
    server = deployment.start()
    with server.client() as client:
        run = client.post("/v1/runs", json={"goal": "keep the port in mind", "persona": "keeper"}).json()
        events = [m["event"] for m in sse(client, f"/v1/runs/{run['id']}/events")]  # to the run's end
        assert events[-1] == "done"
        found = client.get("/v1/memory/search", params={"q": "staging port", "persona": "keeper"}).json()
        elsewhere = client.get("/v1/memory/search", params={"q": "staging port"}).json()  # no persona
    (hit,) = found["hits"]
    assert hit["item"]["text"] == "the staging database is on port 6543" and hit["item"]["tags"] == ["db"]
    assert hit["item"]["run_id"] == run["id"]
    assert hit["item"]["scope"] == {
        "user": "local", "persona": "keeper", "workspace": str(deployment.workspace.resolve())
    }  # fmt: skip
    assert elsewhere["hits"] == []


def test_a_configured_origin_may_forget_across_origins(sqlite_deployment: Deployment) -> None:
    sqlite_deployment.config('[server]\ncors_origins = ["http://app.example"]\n')
    server = sqlite_deployment.start(workers=0)
    asked = {"Origin": "http://app.example", "Access-Control-Request-Method": "DELETE"}
    with server.client() as client:
        allowed = client.options(
            "/v1/memory/1", headers=asked | {"Access-Control-Request-Headers": "authorization"}
        )
        other = client.options("/v1/memory/1", headers=asked | {"Origin": "http://elsewhere.example"})
    assert allowed.status_code == 200, allowed.text
    assert "DELETE" in allowed.headers["access-control-allow-methods"]
    assert allowed.headers["access-control-allow-origin"] == "http://app.example"
    assert "access-control-allow-origin" not in other.headers


def test_an_embedder_the_server_cannot_make_fails_search_only_naming_the_fix(
    sqlite_deployment: Deployment,
) -> None:
    sqlite_deployment.config('[memory]\nembedder = "word2vec"\n')
    (item,) = remember(sqlite_deployment, (scopes(sqlite_deployment)["mine"], "kept by words", ()))
    server = sqlite_deployment.start(workers=0)
    with server.client() as client:
        search = client.get("/v1/memory/search", params={"q": "kept"})
        assert search.status_code == 409
        assert "[memory] embedder" in search.json()["detail"] and "openai:MODEL" in search.json()["detail"]
        assert ids_of(client.get("/v1/memory")) == [item]  # listing, showing and forgetting need no embedder
        assert client.get(f"/v1/memory/{item}").status_code == 200
        assert client.delete(f"/v1/memory/{item}").json()["item"]["hidden_at"] is not None


def test_an_id_that_is_not_a_memory_id_is_a_404_naming_the_forms(
    deployment: Deployment, server: Server
) -> None:
    with server.client() as client:
        for reply in (client.get("/v1/memory/abc"), client.delete("/v1/memory/m7x")):
            assert reply.status_code == 404 and reply.headers["content-type"] == "application/problem+json"
            assert "is not a memory id" in reply.json()["detail"] and "m12" in reply.json()["detail"]
        export = client.delete("/v1/memory/export")  # a route, not an id
        assert export.status_code == 405 and export.headers["allow"] == "GET"
    with server.client(token="stw_not-a-token") as stranger:
        assert stranger.get("/v1/memory/abc").status_code == 401
