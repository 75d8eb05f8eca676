"""What a run spent, over the API (``GET /v1/runs/{id}/spent``) and on the web page's run view:
tokens, money and time per phase and per tool, and the budgets it counted against (a real
chromium against a real ``steward serve``)."""

from __future__ import annotations

import re

from playwright.sync_api import Page, expect
from server_kit import Deployment
from tests.server.test_page import browser, ended, open_page, page, start_run

__all__ = ["browser", "page"]  # the fixtures, used by name

SCRIPT: list[object] = [
    {"tool": "tasks", "args": {"action": "add", "text": "first"}},
    {"tool": "tasks", "args": {"action": "add", "text": "second"}},
    {"tool": "tasks", "args": {"action": "add", "text": "third"}},
    ended("done"),
]


def test_the_run_view_shows_what_the_run_spent_and_its_budget(
    sqlite_deployment: Deployment, page: Page
) -> None:
    sqlite_deployment.persona("worker", SCRIPT, tools='["tasks"]', extra="[budget]\ntool_calls = 2\n")
    server = sqlite_deployment.start()
    run_id = start_run(server, "worker", "keep a list")
    open_page(page, server, run_id)
    expect(page.get_by_test_id("run-status")).to_have_text("done · partial")  # stopped by its budget
    expect(page.get_by_test_id("spent")).to_contain_text("2 tool calls")
    expect(page.get_by_test_id("spent")).to_contain_text("$0.0000")  # a scripted model costs nothing
    table = page.get_by_test_id("spent-table")
    expect(table.locator("tr", has_text="tasks")).to_contain_text("2 calls")
    expect(table.locator("tr", has_text=f"run:{run_id}")).to_contain_text("tool_calls 2 of 2")

    with server.client() as client:
        spent = client.get(f"/v1/runs/{run_id}/spent").json()
    assert spent["tool_calls"] == 2 and spent["tokens"] > 0 and spent["cost_usd"] == 0
    assert [t["name"] for t in spent["tools"]] == ["tasks"]
    assert sum(p["tokens"] for p in spent["phases"]) == spent["tokens"]
    (budget,) = spent["budgets"]
    assert budget["scope"] == f"run:{run_id}" and budget["limits"]["tool_calls"] == 2
    assert re.fullmatch(r"\d+(\.\d+)?", str(spent["time_s"]))
