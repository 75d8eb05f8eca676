"""The page's memory view and a run's relation graph, in a real browser (Debian's chromium)
against a real ``steward serve``: items written to the store as runs write them, searched with
the explanation shown, hidden and purged with a confirmation; a run's graph drawn from its JSON.

Set STEWARD_REQUIRE_BROWSER=1 to fail instead of skip when chromium is missing.
"""

from __future__ import annotations

import asyncio
import json
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from page_kit import browser, page
from playwright.sync_api import Dialog, Locator, Page, expect
from server_kit import Deployment, Server, sse

from steward.config import MemorySettings
from steward.memory.longterm import LongTermMemory, Scope
from steward.store.events import open_store

__all__ = ["browser", "page"]  # the fixtures, used by name


def remember(deployment: Deployment, *items: tuple[Scope, str]) -> list[int]:
    async def write() -> list[int]:
        store = await open_store(deployment.db_url)
        try:
            memory = LongTermMemory(store.engine)
            return [(await memory.remember(scope, text)).item.id for scope, text in items]
        finally:
            await store.close()

    # Playwright's sync API runs an event loop in this thread: the store is written from another.
    with ThreadPoolExecutor(1) as thread:
        return thread.submit(asyncio.run, write()).result()


def open_memory(page: Page, server: Server) -> None:
    page.goto(f"{server.url}/#token={server.deployment.token}")
    expect(page.get_by_test_id("token-panel")).to_be_hidden()
    page.get_by_test_id("nav-memory").click()
    expect(page.get_by_test_id("memory-view")).to_be_visible()


def item(page: Page, item_id: int) -> Locator:
    return page.get_by_test_id("memory-items").locator(f'[data-id="{item_id}"]')


def test_memory_is_searched_with_its_ranks_and_a_hidden_item_leaves_the_list(
    sqlite_deployment: Deployment, page: Page
) -> None:
    workspace = str(sqlite_deployment.workspace.resolve())
    mine, bobs = Scope("local", "", workspace), Scope("bob", "", workspace)
    key, deploy, lunch, bob = remember(
        sqlite_deployment,
        (mine, "rotate the deploy key every month"),
        (mine, "the deploy went out on friday"),
        (mine, "lunch is at noon"),
        (bobs, "bob keeps the deploy key too"),
    )
    server = sqlite_deployment.start(workers=0)
    open_memory(page, server)
    items = page.get_by_test_id("memory-items").get_by_test_id("memory-item")
    expect(items).to_have_count(4)  # every scope: the operator's view
    expect(items.first.get_by_test_id("memory-id")).to_have_text(f"m{bob}")

    page.get_by_test_id("memory-q").fill("deploy key")
    page.get_by_test_id("memory-explain").check()
    page.get_by_test_id("memory-search").click()
    hits = page.get_by_test_id("memory-results").get_by_test_id("memory-hit")
    expect(hits).to_have_count(2)  # the search's scope (local, no persona, here): not bob's
    expect(page.get_by_test_id("memory-mode")).to_contain_text("By words only")
    first = hits.nth(0)
    expect(first).to_have_attribute("data-id", str(key))
    expect(first.get_by_test_id("explain-keyword")).to_have_text("keyword rank 1")
    expect(first.get_by_test_id("explain-vector")).to_have_text("vector rank –")
    settings = MemorySettings()  # keyword rank 1 alone: the keyword list's weighted share
    fused = settings.keyword_weight / (settings.rrf_k + 1)
    expect(first.get_by_test_id("explain-score")).to_contain_text(f"fused {fused:.4f}")
    expect(hits.nth(1).get_by_test_id("explain-keyword")).to_have_text("keyword rank 2")

    asked: list[str] = []

    def accept(dialog: Dialog) -> None:
        asked.append(dialog.message)
        dialog.accept()

    page.once("dialog", accept)
    first.get_by_test_id("memory-hide").click()
    expect(item(page, key)).to_have_count(0)  # left the list
    expect(hits).to_have_count(1)  # and the results
    assert asked and f"Hide m{key}" in asked[0]
    expect(items).to_have_count(3)

    page.get_by_test_id("memory-search").click()  # searched again: it is never recalled
    expect(hits).to_have_count(1)
    expect(hits.first).to_have_attribute("data-id", str(deploy))

    page.once("dialog", lambda dialog: dialog.dismiss())
    item(page, lunch).get_by_test_id("memory-purge").click()
    expect(page.get_by_test_id("memory-items").get_by_test_id("memory-item")).to_have_count(3)  # kept
    page.once("dialog", lambda dialog: dialog.accept())
    item(page, lunch).get_by_test_id("memory-purge").click()
    expect(item(page, lunch)).to_have_count(0)

    page.get_by_test_id("memory-hidden").check()
    page.get_by_test_id("memory-list").click()
    expect(item(page, key)).to_have_attribute("data-state", "hidden")  # hidden is kept; purged is gone
    expect(item(page, lunch)).to_have_count(0)
    page.get_by_test_id("memory-user").fill("bob")
    page.get_by_test_id("memory-list").click()
    expect(items).to_have_count(1)
    expect(items.first).to_have_attribute("data-id", str(bob))


def test_a_search_that_finds_nothing_says_so_in_its_scope(sqlite_deployment: Deployment, page: Page) -> None:
    workspace = str(sqlite_deployment.workspace.resolve())
    remember(sqlite_deployment, (Scope("bob", "", workspace), "bob's secret plan"))
    server = sqlite_deployment.start(workers=0)
    open_memory(page, server)
    page.get_by_test_id("memory-q").fill("secret plan")
    page.get_by_test_id("memory-search").click()
    expect(page.get_by_test_id("memory-none")).to_contain_text("Nothing in this scope matches")
    expect(page.get_by_test_id("memory-mode")).to_contain_text("local · (no persona)")
    page.get_by_test_id("memory-user").fill("bob")
    page.get_by_test_id("memory-search").click()
    expect(page.get_by_test_id("memory-results").get_by_test_id("memory-hit")).to_have_count(1)


def test_export_downloads_the_selected_items_as_json_lines(sqlite_deployment: Deployment, page: Page) -> None:
    workspace = str(sqlite_deployment.workspace.resolve())
    _, bob = remember(
        sqlite_deployment,
        (Scope("local", "", workspace), "mine to keep"),
        (Scope("bob", "", workspace), "bob's to keep"),
    )
    server = sqlite_deployment.start(workers=0)
    open_memory(page, server)
    page.get_by_test_id("memory-user").fill("bob")
    with page.expect_download() as download:
        page.get_by_test_id("memory-export").click()
    assert download.value.suggested_filename == "steward-memory.jsonl"
    lines = [json.loads(line) for line in Path(download.value.path()).read_text().splitlines()]
    assert [(item["id"], item["text"]) for item in lines] == [(bob, "bob's to keep")]


WRITE = {"tool": "write_file", "args": {"path": "notes/todo.txt", "content": "buy milk\n"}}
REMEMBER = {"tool": "remember", "args": {"text": "the todo list lives in notes/todo.txt"}}
ENDED = {"agent_step": {"phase": "end", "summary": "done", "end_status": "solved", "end_message": "Written."}}


def test_a_runs_graph_shows_the_file_it_touched_and_what_it_remembered(
    sqlite_deployment: Deployment, page: Page
) -> None:
    sqlite_deployment.persona("writer", [WRITE, REMEMBER, ENDED], tools='["write_file", "remember"]')
    server = sqlite_deployment.start()
    with server.client() as client:
        made = client.post("/v1/runs", json={"goal": "write the todo list", "persona": "writer"})
    assert made.status_code == 201, made.text
    run_id = made.json()["id"]
    page.goto(f"{server.url}/#token={server.deployment.token}&run={run_id}")
    expect(page.get_by_test_id("run-status")).to_have_attribute("data-status", "done")
    page.get_by_test_id("graph-panel").locator("summary").click()
    graph = page.get_by_test_id("graph")
    run = graph.locator(f'[data-testid="graph-node"][data-node-id="run:{run_id}"]')
    expect(run).to_contain_text("write the todo list")
    file = graph.locator('[data-testid="graph-node"][data-kind="file"]')
    expect(file).to_have_count(1)
    expect(file).to_contain_text("notes/todo.txt")
    edge = file.locator("xpath=..").get_by_test_id("graph-edge")
    expect(edge).to_have_attribute("data-kind", "touched")
    expect(edge).to_contain_text("→ touched (1 call: write_file)")
    memory = graph.locator('[data-testid="graph-node"][data-kind="memory"]')
    expect(memory).to_contain_text("the todo list lives in notes/todo.txt")
    expect(memory.locator("xpath=..").get_by_test_id("graph-edge")).to_have_attribute(
        "data-kind", "remembered"
    )
    expect(page.get_by_test_id("graph-state")).to_contain_text("3 nodes, 2 edges")


def test_a_child_job_in_the_graph_opens_its_own_run(sqlite_deployment: Deployment, page: Page) -> None:
    delegate = {"tool": "delegate", "args": {"role": "reviewer", "goal": "review the todo list"}}
    sqlite_deployment.persona("lead", [delegate, ENDED], tools='["delegate"]')
    sqlite_deployment.persona("reviewer", [ENDED], tools="[]")
    server = sqlite_deployment.start()
    with server.client() as client:
        made = client.post("/v1/runs", json={"goal": "have the list reviewed", "persona": "lead"})
    assert made.status_code == 201, made.text
    lead = made.json()["id"]
    page.goto(f"{server.url}/#token={server.deployment.token}&run={lead}")
    # Said once the child job is in the queue: the graph read after it has the child.
    expect(page.get_by_test_id("timeline")).to_contain_text("waits for a job it delegated")
    page.get_by_test_id("graph-panel").locator("summary").click()
    child = page.get_by_test_id("graph").locator('[data-testid="graph-node"][data-kind="run"]').nth(1)
    expect(child).to_contain_text("review the todo list")
    child_id = (child.get_attribute("data-node-id") or "").removeprefix("run:")
    child.get_by_test_id("graph-open-run").click()
    expect(page).to_have_url(re.compile(f"#run={child_id}$"))
    expect(page.get_by_test_id("run-goal")).to_have_text("review the todo list")


def test_an_item_a_run_remembered_opens_that_run(sqlite_deployment: Deployment, page: Page) -> None:
    sqlite_deployment.persona("keeper", [REMEMBER, ENDED], tools='["remember"]')
    server = sqlite_deployment.start()
    with server.client() as client:
        made = client.post("/v1/runs", json={"goal": "note where the list is", "persona": "keeper"})
        assert made.status_code == 201, made.text
        run_id = made.json()["id"]
        assert [m["event"] for m in sse(client, f"/v1/runs/{run_id}/events")][-1] == "done"  # to its end
    open_memory(page, server)
    page.get_by_test_id("memory-persona").fill("keeper")
    page.get_by_test_id("memory-list").click()
    kept = page.get_by_test_id("memory-items").get_by_test_id("memory-item")
    expect(kept.get_by_test_id("memory-text")).to_have_text("the todo list lives in notes/todo.txt")
    kept.get_by_test_id("memory-run").click()
    expect(page.get_by_test_id("memory-view")).to_be_hidden()
    expect(page).to_have_url(re.compile(f"#run={run_id}$"))
    expect(page.get_by_test_id("run-goal")).to_have_text("note where the list is")
