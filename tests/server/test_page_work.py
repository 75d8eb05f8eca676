"""The web page shows what a run kept beside its plan: its task list, the notes it left, and each
time it was asked whether it was done (a real chromium against a real ``steward serve``)."""

from __future__ import annotations

from playwright.sync_api import Page, expect
from server_kit import Deployment
from tests.server.test_page import browser, ended, open_page, page, start_run

__all__ = ["browser", "page"]  # the fixtures, used by name

SCRIPT: list[object] = [
    {"tool": "tasks", "args": {"action": "add", "text": "tidy the imports\nupdate the changelog"}},
    {"tool": "tasks", "args": {"action": "done", "ids": [1]}},
    {"tool": "note", "args": {"text": "the parser is fragile", "about": "file:src/parse.py"}},
    ended("done"),  # task 2 is open: asked whether it is done (autonomous)
    ended("done, the changelog can wait"),  # the bound (1) is reached: partial
]


def test_the_run_view_shows_tasks_notes_and_continuations(sqlite_deployment: Deployment, page: Page) -> None:
    sqlite_deployment.persona(
        "worker",
        SCRIPT,
        tools='["tasks", "note"]',
        extra='[policy]\nmode = "autonomous"\n[limits]\nmax_continuations = 1\n',
    )
    server = sqlite_deployment.start()
    open_page(page, server, start_run(server, "worker", "tidy up"))
    expect(page.get_by_test_id("run-status")).to_have_text("done · partial")
    tasks = page.get_by_test_id("tasks").locator("li")
    expect(tasks).to_have_text(["✓ 1. tidy the imports", "○ 2. update the changelog"])
    expect(page.get_by_test_id("notes").locator("li")).to_have_text(
        [r"#1 [file:src/parse.py] the parser is fragile"]
    )
    asked = page.get_by_test_id("timeline").locator("[data-type=continuation]")
    expect(asked).to_have_count(2)
    expect(asked.nth(0)).to_contain_text(
        "asked whether it is done (continuation 1): task 2 'update the changelog' is open"
    )
    expect(asked.nth(1)).to_contain_text("not asked again after 1 continuation(s)")
