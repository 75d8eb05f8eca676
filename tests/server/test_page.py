"""The web page in a real browser (Debian's chromium) against a real ``steward serve``.

Each test runs a scripted persona in a fresh deployment and drives the page as a person would.
Set STEWARD_REQUIRE_BROWSER=1 to fail instead of skip when chromium is missing, and
STEWARD_SCREENSHOT=docs/page.png to save the page mid-run (the approval card showing).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
from page_kit import browser, page
from playwright.sync_api import Page, Route, expect
from server_kit import Deployment, Server, wait_for

__all__ = ["browser", "page"]  # the fixtures, used by name


def ended(message: str) -> dict[str, Any]:
    """A scripted reply that ends the run solved with ``message`` (agent_step end)."""
    return {"agent_step": {"phase": "end", "summary": "done", "end_status": "solved", "end_message": message}}


PLAN = {
    "agent_step": {
        "phase": "plan",
        "summary": "two steps",
        "plan": {
            "goal": "write a note",
            "sub_tasks": [{"id": 1, "title": "write the note"}, {"id": 2, "title": "read it back"}],
        },
    }
}
WRITE = {"tool": "bash", "args": {"command": "echo hello > note.txt"}}
WRITTEN = {
    "agent_step": {
        "phase": "verify",
        "summary": "written",
        "key_facts": ["note.txt holds hello"],
        "sub_task_outcome": "done",
    }
}
READ = {"tool": "read_file", "args": {"path": "note.txt"}}
READ_BACK = {"agent_step": {"phase": "verify", "summary": "read back", "sub_task_outcome": "done"}}
ANSWER = "The note says hello."
NOTE_SCRIPT: list[object] = [PLAN, WRITE, WRITTEN, READ, READ_BACK, ended(ANSWER)]
# bash waits for a person; the deadline is far enough that it never decides for the test.
ASK_BASH = '[policy]\nask = ["bash"]\napproval_timeout_s = 600\n'
TOOLS = '["bash", "read_file"]'


# Failed requests the browser logs whatever the page does: the server stopped on purpose, cutting
# the stream and refusing the reconnects (the reconnect test), or a wrong token (the token test).
EXPECTED_CONSOLE_ERRORS = ("ERR_CONNECTION_REFUSED", "ERR_INCOMPLETE_CHUNKED_ENCODING", "status of 401")


@pytest.fixture
def note_server(sqlite_deployment: Deployment) -> Server:
    sqlite_deployment.persona("careful", NOTE_SCRIPT, tools=TOOLS, extra=ASK_BASH)
    return sqlite_deployment.start()


def open_page(page: Page, server: Server, run_id: str = "") -> None:
    token = server.deployment.token
    page.goto(f"{server.url}/#token={token}" + (f"&run={run_id}" if run_id else ""))
    expect(page.get_by_test_id("token-panel")).to_be_hidden()


def start_run(server: Server, persona: str, goal: str) -> str:
    with server.client() as client:
        made = client.post("/v1/runs", json={"goal": goal, "persona": persona})
    assert made.status_code == 201, made.text
    run_id: str = made.json()["id"]
    return run_id


def timeline_seqs(page: Page) -> list[int]:
    seqs = (
        page.get_by_test_id("timeline")
        .locator("[data-seq]")
        .evaluate_all("entries => entries.map(e => Number(e.dataset.seq))")
    )
    return [int(seq) for seq in seqs]


def expect_waiting_for_the_write(page: Page) -> None:
    card = page.get_by_test_id("approval-card")
    expect(card).to_be_visible()
    expect(card.get_by_test_id("approval-tool")).to_have_text("bash")
    expect(card.get_by_test_id("approval-input")).to_contain_text('"command": "echo hello > note.txt"')
    expect(page.get_by_test_id("run-status")).to_have_attribute("data-status", "waiting")
    tasks = page.get_by_test_id("plan-task")
    expect(tasks).to_have_count(2)
    expect(tasks.nth(0)).to_have_attribute("data-status", "in_progress")
    expect(tasks.nth(1)).to_have_attribute("data-status", "pending")
    call = page.get_by_test_id("tool-call").first
    expect(call).to_have_attribute("data-status", "waiting")
    expect(call.get_by_test_id("tool-input")).to_contain_text("echo hello > note.txt")


def expect_the_note_answer(page: Page) -> None:
    expect(page.get_by_test_id("run-status")).to_have_attribute("data-status", "done")
    expect(page.get_by_test_id("run-status")).to_have_text("done · solved")
    expect(page.get_by_test_id("final-answer")).to_have_text(ANSWER)
    expect(page.get_by_test_id("approval-card")).to_have_count(0)


def test_a_run_started_in_the_page_is_approved_there_and_ends_with_its_answer(
    note_server: Server, page: Page
) -> None:
    open_page(page, note_server)
    expect(page).not_to_have_url(re.compile("token"))  # the token left the address bar
    expect(page.get_by_test_id("persona").locator("option", has_text="careful")).to_have_count(1)
    page.get_by_test_id("goal").fill("write a note")
    page.get_by_test_id("persona").select_option("careful")
    page.get_by_test_id("start").click()

    expect_waiting_for_the_write(page)
    expect(page).to_have_url(re.compile(r"#run=[0-9a-f]{12}$"))
    deadline = page.get_by_test_id("deadline")
    expect(deadline).to_contain_text("left, then it is denied")
    shown = deadline.inner_text()
    expect(deadline).not_to_have_text(shown, timeout=30_000)  # it counts down every second
    if target := os.environ.get("STEWARD_SCREENSHOT"):
        Path(target).parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=target, full_page=True)

    page.get_by_test_id("approve").click()

    expect_the_note_answer(page)
    tasks = page.get_by_test_id("plan-task")
    for n in range(2):
        expect(tasks.nth(n)).to_have_attribute("data-status", "done")
        expect(tasks.nth(n).locator("input[type=checkbox]")).to_be_checked()
    calls = page.get_by_test_id("tool-call")
    expect(calls).to_have_count(2)
    expect(calls.nth(0)).to_have_attribute("data-status", "completed")
    read = calls.nth(1)
    expect(read.get_by_test_id("tool-name")).to_have_text("read_file")
    output = read.get_by_test_id("tool-output")
    expect(output.locator("pre")).to_be_hidden()  # outputs start folded
    output.locator("summary").click()
    expect(output.locator("pre")).to_have_text(re.compile("hello"))
    expect(page.get_by_test_id("facts")).to_contain_text("note.txt holds hello")
    expect(page.get_by_test_id("timeline")).to_contain_text("bash approved by user")
    expect(page.get_by_test_id("chart").locator(".chart-step")).to_have_count(6)  # one per model call
    assert (note_server.deployment.workspace / "note.txt").read_text() == "hello\n"


def test_a_reload_mid_run_shows_the_earlier_events_and_goes_on_live(note_server: Server, page: Page) -> None:
    run_id = start_run(note_server, "careful", "write a note")
    open_page(page, note_server, run_id)
    expect(page).to_have_url(re.compile(f"#run={run_id}$"))  # the token went, the run stayed
    expect_waiting_for_the_write(page)
    before = timeline_seqs(page)

    page.reload()

    expect_waiting_for_the_write(page)
    expect(page.get_by_test_id("timeline").locator("[data-seq]")).to_have_count(len(before))
    assert timeline_seqs(page) == before
    page.get_by_test_id("approve").click()
    expect_the_note_answer(page)
    seqs = timeline_seqs(page)
    assert seqs[: len(before)] == before and seqs == sorted(set(seqs))


def test_a_dropped_stream_resumes_from_the_last_event_without_gaps_or_doubles(
    note_server: Server, page: Page
) -> None:
    run_id = start_run(note_server, "careful", "write a note")
    open_page(page, note_server, run_id)
    expect_waiting_for_the_write(page)

    note_server.stop()  # the run waits for its approval in the store; the page loses its stream
    expect(page.get_by_test_id("stream-state")).to_contain_text("reconnecting")
    again = Server(note_server.deployment, note_server.port, ["--workers", "2"], {})
    note_server.deployment.servers.append(again)
    expect(page.get_by_test_id("stream-state")).to_have_text("stream: live")
    page.get_by_test_id("approve").click()
    expect_the_note_answer(page)
    live = timeline_seqs(page)

    page.reload()  # the same run replayed from its first event: the live view missed nothing
    expect_the_note_answer(page)
    expect(page.get_by_test_id("timeline").locator("[data-seq]")).to_have_count(len(live))
    assert timeline_seqs(page) == live


def test_a_denied_call_needs_a_reason_and_the_run_goes_on_without_it(
    sqlite_deployment: Deployment, page: Page
) -> None:
    sqlite_deployment.persona("careful", [WRITE, ended("I was not allowed to write.")], extra=ASK_BASH)
    server = sqlite_deployment.start()
    open_page(page, server, start_run(server, "careful", "write a note"))
    expect(page.get_by_test_id("approval-card")).to_be_visible()

    page.get_by_test_id("deny").click()  # no reason yet: nothing is sent
    expect(page.get_by_test_id("notice")).to_contain_text("Say why you deny")
    expect(page.get_by_test_id("approval-card")).to_be_visible()
    page.get_by_test_id("deny-reason").fill("no writes today")
    page.get_by_test_id("deny").click()

    expect(page.get_by_test_id("final-answer")).to_have_text("I was not allowed to write.")
    expect(page.get_by_test_id("timeline")).to_contain_text("bash denied by user: no writes today")
    assert not (sqlite_deployment.workspace / "note.txt").exists()


def test_a_question_is_answered_in_the_page_and_the_mode_switches_while_it_waits(
    sqlite_deployment: Deployment, page: Page
) -> None:
    question = {"agent_step": {"phase": "feedback", "summary": "ask", "feedback_message": "Which colour?"}}
    sqlite_deployment.persona("asker", [question, ended("Painted it.")])
    server = sqlite_deployment.start()
    open_page(page, server, start_run(server, "asker", "paint the shed"))
    expect(page.get_by_test_id("question")).to_have_text("Which colour?")

    page.get_by_test_id("mode").select_option("autonomous")
    expect(page.get_by_test_id("notice")).to_be_hidden()  # the server took it
    page.get_by_test_id("answer").fill("green <b>please</b>")
    page.get_by_test_id("answer-send").click()

    expect(page.get_by_test_id("final-answer")).to_have_text("Painted it.")
    timeline = page.get_by_test_id("timeline")
    expect(timeline).to_contain_text("answered: green <b>please</b>")  # shown as text, not markup
    expect(timeline.locator("b")).to_have_count(0)
    expect(timeline).to_contain_text("mode switched to autonomous")


def test_a_run_that_answered_in_text_says_so_next_to_its_answer(
    sqlite_deployment: Deployment, page: Page
) -> None:
    sqlite_deployment.persona("answerer", [{"text": "It says hello."}], tools="[]")
    server = sqlite_deployment.start()
    open_page(page, server, start_run(server, "answerer", "what does the note say?"))
    expect(page.get_by_test_id("final-answer")).to_have_text("It says hello.")
    status = page.get_by_test_id("run-status")
    expect(status).to_have_text("done · answered")
    expect(status).to_have_attribute("data-end", "answered")
    expect(page.get_by_test_id("final")).to_have_attribute("data-end", "answered")
    meta = page.get_by_test_id("final-meta")
    expect(meta).to_contain_text("answered (the agent answered without saying the goal was done) · 1 steps")
    expect(meta).to_contain_text(" tokens")
    entry = page.get_by_test_id("sessions").get_by_test_id("session")
    expect(entry).to_have_attribute("data-state", "answered")


def test_a_waiting_run_is_cancelled_from_the_page(note_server: Server, page: Page) -> None:
    open_page(page, note_server, start_run(note_server, "careful", "write a note"))
    expect(page.get_by_test_id("approval-card")).to_be_visible()
    page.get_by_test_id("cancel").click()
    expect(page.get_by_test_id("run-status")).to_have_attribute("data-status", "cancelled")
    expect(page.get_by_test_id("approval-card")).to_have_count(0)
    expect(page.get_by_test_id("cancel")).to_be_disabled()


def test_a_wrong_token_brings_back_the_token_form(note_server: Server, page: Page) -> None:
    page.goto(f"{note_server.url}/#token=not-the-token")
    panel = page.get_by_test_id("token-panel")
    expect(panel).to_be_visible()
    expect(page.get_by_test_id("token-message")).to_contain_text("401")
    page.get_by_test_id("token").fill(note_server.deployment.token)
    page.get_by_test_id("token-save").click()
    expect(panel).to_be_hidden()
    expect(page.get_by_test_id("persona").locator("option", has_text="careful")).to_have_count(1)


def test_jobs_and_workers_are_listed_and_refreshed(note_server: Server, page: Page) -> None:
    open_page(page, note_server)
    expect(page.get_by_test_id("jobs")).to_contain_text("No active jobs.")
    run_id = start_run(note_server, "careful", "write a note")  # from elsewhere: the poll finds it
    job = page.get_by_test_id("jobs").locator(f'[data-job-id="{run_id}"]')
    expect(job).to_contain_text("waiting")
    expect(page.get_by_test_id("workers")).to_be_visible()
    job.click()
    expect_waiting_for_the_write(page)
    expect(page.get_by_test_id("sessions").get_by_test_id("session")).to_have_count(1)


def test_the_api_docs_render_offline_from_the_package(sqlite_deployment: Deployment, page: Page) -> None:
    server = sqlite_deployment.start(workers=0)
    asked: list[str] = []

    def only_this_server(route: Route) -> None:  # offline: anything not from the server fails
        asked.append(route.request.url)
        if route.request.url.startswith(server.url):
            route.continue_()
        else:
            route.abort()

    page.route("**/*", only_this_server)
    page.goto(f"{server.url}/docs")
    expect(page.get_by_text("/v1/runs/{run_id}/events").first).to_be_visible()
    expect(page.get_by_text("Steward").first).to_be_visible()
    assert asked and all(url.startswith(server.url) for url in asked), asked


def test_each_session_shows_its_last_runs_state_as_it_changes(note_server: Server, page: Page) -> None:
    open_page(page, note_server)
    run_id = start_run(note_server, "careful", "write a note")
    entry = page.get_by_test_id("sessions").get_by_test_id("session")
    expect(entry).to_have_count(1)
    expect(entry).to_have_attribute("data-state", "waiting")  # not "open": what its run does
    entry.click()
    page.get_by_test_id("turn").first.click()
    page.get_by_test_id("approve").click()
    expect_the_note_answer(page)
    expect(entry).to_have_attribute("data-state", "solved")
    with note_server.client() as client:
        client.post(f"/v1/runs/{run_id}/cancel")  # a finished run: nothing changes
        fresh = client.post("/v1/sessions", json={"title": "empty"}).json()
    page.get_by_test_id("sessions-refresh").click()
    expect(page.locator(f'[data-session-id="{fresh["id"]}"]')).to_have_attribute("data-state", "no runs yet")


def test_the_sessions_list_pages_through_older_sessions_and_back(note_server: Server, page: Page) -> None:
    with note_server.client() as client:
        made = [
            client.post("/v1/sessions", json={"title": f"session {n:02d}"}).json()["id"] for n in range(45)
        ]
    open_page(page, note_server)
    sessions = page.get_by_test_id("sessions").get_by_test_id("session")
    expect(sessions).to_have_count(20)
    expect(sessions.first).to_contain_text("session 44")  # the newest first
    page.get_by_test_id("sessions-older").click()
    expect(sessions.first).to_contain_text("session 24")
    expect(sessions).to_have_count(20)
    page.get_by_test_id("sessions-older").click()
    expect(sessions).to_have_count(5)
    expect(sessions.last).to_contain_text("session 00")  # the oldest is reachable
    expect(page.get_by_test_id("sessions-older")).to_be_hidden()
    seen = sessions.evaluate_all("items => items.map(i => i.dataset.sessionId)")
    assert seen == made[4::-1]
    page.get_by_test_id("sessions-newer").click()
    expect(sessions.first).to_contain_text("session 24")
    page.get_by_test_id("sessions-newer").click()
    expect(sessions.first).to_contain_text("session 44")
    expect(page.get_by_test_id("sessions-newer")).to_be_hidden()


def test_each_approval_shows_at_the_call_it_stopped_before_that_calls_output(
    sqlite_deployment: Deployment, page: Page
) -> None:
    first = {"tool": "bash", "args": {"command": "echo one > one.txt"}}
    second = {"tool": "bash", "args": {"command": "echo two > two.txt"}}
    sqlite_deployment.persona("careful", [first, second, ended("both")], extra=ASK_BASH)
    server = sqlite_deployment.start()
    open_page(page, server, start_run(server, "careful", "two writes"))
    calls = page.get_by_test_id("tool-call")
    expect(page.get_by_test_id("approval-card")).to_be_visible()
    page.get_by_test_id("approve").click()
    expect(calls).to_have_count(2)
    expect(page.get_by_test_id("approval-card")).to_be_visible()
    page.get_by_test_id("deny-reason").fill("one is enough")
    page.get_by_test_id("deny").click()
    expect(page.get_by_test_id("final-answer")).to_have_text("both")
    for n, decision in ((0, "bash approved by user"), (1, "bash denied by user: one is enough")):
        call = calls.nth(n)
        lines = call.get_by_test_id("call-approval")
        expect(lines).to_have_count(2)
        expect(lines.nth(0)).to_contain_text("bash needs approval")
        expect(lines.nth(1)).to_contain_text(decision)
        # Its approval comes before its output inside the call's entry: in the order it happened.
        order = call.locator("[data-testid=call-approval], [data-testid=tool-output]").evaluate_all(
            "nodes => nodes.map(n => n.dataset.testid)"
        )
        assert order == ["call-approval", "call-approval", "tool-output"], order
    expect(calls.nth(0)).not_to_contain_text("denied")
    assert (sqlite_deployment.workspace / "one.txt").exists() and not (
        sqlite_deployment.workspace / "two.txt"
    ).exists()


def test_a_run_cancelled_while_it_waited_and_retried_is_approved_in_the_page(
    note_server: Server, page: Page
) -> None:
    run_id = start_run(note_server, "careful", "write a note")
    with note_server.client() as client:
        wait_for(lambda: client.get(f"/v1/runs/{run_id}").json()["status"] == "waiting", "the wait")
        assert client.post(f"/v1/runs/{run_id}/cancel").json()["status"] == "cancelled"
        assert client.post(f"/v1/jobs/{run_id}/retry").status_code == 200
        wait_for(lambda: client.get(f"/v1/runs/{run_id}").json()["pending"], "the wait asked again")
    open_page(page, note_server, run_id)
    expect_waiting_for_the_write(page)
    expect(page.get_by_test_id("final")).to_be_hidden()
    page.get_by_test_id("approve").click()
    expect_the_note_answer(page)
    lines = page.get_by_test_id("tool-call").first.get_by_test_id(
        "call-approval"
    )  # asked, asked again, approved
    expect(lines).to_have_count(3)
    expect(lines.nth(2)).to_contain_text("bash approved by user")
    assert (note_server.deployment.workspace / "note.txt").read_text() == "hello\n"


def test_the_jobs_list_pages_through_older_jobs_and_back(sqlite_deployment: Deployment, page: Page) -> None:
    server = sqlite_deployment.start(workers=0)  # the jobs stay queued
    with server.client() as client:
        made = [client.post("/v1/jobs", json={"goal": f"job {n:02d}"}).json()["id"] for n in range(45)]
    open_page(page, server)
    jobs = page.get_by_test_id("jobs").get_by_test_id("job")
    expect(jobs).to_have_count(20)
    expect(jobs.first).to_contain_text("job 44")
    page.get_by_test_id("jobs-older").click()
    expect(jobs.first).to_contain_text("job 24")
    page.get_by_test_id("jobs-older").click()
    expect(jobs).to_have_count(5)
    expect(jobs.last).to_contain_text("job 00")
    expect(page.get_by_test_id("jobs-older")).to_be_hidden()
    assert jobs.evaluate_all("items => items.map(i => i.dataset.jobId)") == made[4::-1]
    page.get_by_test_id("jobs-newer").click()
    expect(jobs.first).to_contain_text("job 24")
    page.get_by_test_id("jobs-filter").select_option("all")  # another list: from its first page
    expect(jobs.first).to_contain_text("job 44")
    expect(page.get_by_test_id("jobs-newer")).to_be_hidden()


def test_an_open_run_cancelled_while_it_waits_goes_on_in_the_page_when_retried(
    note_server: Server, page: Page
) -> None:
    run_id = start_run(note_server, "careful", "write a note")
    open_page(page, note_server, run_id)
    expect(page.get_by_test_id("approval-card")).to_be_visible()
    page.get_by_test_id("cancel").click()
    expect(page.get_by_test_id("run-status")).to_have_attribute("data-status", "cancelled")
    with note_server.client() as client:
        assert client.post(f"/v1/jobs/{run_id}/retry").status_code == 200  # from elsewhere
    expect(page.get_by_test_id("approval-card")).to_be_visible()  # no reload: the page goes on
    expect(page.get_by_test_id("run-status")).to_have_attribute("data-status", "waiting")
    page.get_by_test_id("approve").click()
    expect_the_note_answer(page)
    assert (note_server.deployment.workspace / "note.txt").read_text() == "hello\n"
