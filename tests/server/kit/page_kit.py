"""The page tests' browser: Debian's chromium driven by Playwright, one per test module, and a
fresh page per test that fails the test on any script error or console error it did not expect.

A test module uses them by importing ``browser`` and ``page`` (pytest finds fixtures by name in
the module); one that expects console errors (a server stopped on purpose, a wrong token) lists
their text in ``EXPECTED_CONSOLE_ERRORS``. Set STEWARD_REQUIRE_BROWSER=1 to fail instead of skip
when chromium is missing.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, expect, sync_playwright

CHROMIUM = shutil.which("chromium")
WAIT_MS = 30_000  # a scripted run takes a second or two; this bounds a broken one
# Assertions wait as long as actions do: Playwright's own 5 s default failed a page test whose
# server was starting a run on a machine busy with other work.
expect.set_options(timeout=WAIT_MS)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if CHROMIUM is None:
        reason = "chromium is not installed (apt-get install chromium) so the page cannot be tested"
        if os.environ.get("STEWARD_REQUIRE_BROWSER") == "1":
            pytest.fail(f"{reason}; STEWARD_REQUIRE_BROWSER=1 makes that a failure")
        pytest.skip(f"{reason}; set STEWARD_REQUIRE_BROWSER=1 to fail instead")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(browser: Browser, request: pytest.FixtureRequest) -> Iterator[Page]:
    """A fresh browser context; the test fails on any script error or unexpected console error.

    Tests ask for it after their server, so it closes first: a server stopped while the page
    still follows a run waits for that stream (up to its graceful-shutdown limit).
    """
    expected = tuple(getattr(request.module, "EXPECTED_CONSOLE_ERRORS", ()))
    context = browser.new_context(viewport={"width": 1280, "height": 1000})
    opened = context.new_page()
    opened.set_default_timeout(WAIT_MS)
    problems: list[str] = []
    opened.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    opened.on("console", lambda message: _console_error(message, expected, problems))
    try:
        yield opened
    finally:
        context.close()
    assert not problems, problems


def _console_error(message: ConsoleMessage, expected: tuple[str, ...], problems: list[str]) -> None:
    if message.type == "error" and not any(text in message.text for text in expected):
        problems.append(f"console: {message.text}")
