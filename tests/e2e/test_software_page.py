"""A push approved from the web page (Debian's chromium against a real ``steward serve``): the
approval card lists what would leave the machine, and approving pushes that commit."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect
from tests.tools.test_forge_repo import FORGE_URL, git

# The server tests' kit, imported as they import it (`server_kit`, on mypy's path too).
sys.path.insert(0, str(Path(__file__).parents[1] / "server" / "kit"))
from page_kit import browser, page
from server_kit import Deployment, Server

__all__ = ["browser", "page"]  # the fixtures, used by name

PUSH: dict[str, Any] = {"tool": "git_push", "args": {}}
END = {
    "agent_step": {"phase": "end", "summary": "pushed", "end_status": "solved", "end_message": "pushed it"}
}


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[Deployment]:
    made = Deployment(tmp_path, f"sqlite:///{tmp_path}/store/steward.db")
    try:
        yield made
    finally:
        made.stop()


def repository(deployment: Deployment) -> tuple[Path, str]:
    """The deployment's workspace as a repository on branch ``fix`` with one commit to push."""
    ws, remote = deployment.workspace, deployment.root / "remote.git"
    git(deployment.root, "init", "-q", "--bare", "-b", "main", str(remote))
    git(ws, "init", "-q", "-b", "main")
    git(ws, "config", "user.email", "dev@example.com")
    git(ws, "config", "user.name", "Dev")
    (ws / ".git" / "info" / "exclude").write_text("personas/\nsteward.toml\n.steward/\n")
    (ws / "README.md").write_text("widgets\n")
    git(ws, "add", "README.md")
    git(ws, "commit", "-q", "-m", "Initial commit")
    git(ws, "remote", "add", "origin", FORGE_URL)
    git(ws, "config", "remote.origin.pushurl", str(remote))
    git(ws, "push", "-q", "origin", "main")
    git(ws, "switch", "-q", "-c", "fix")
    (ws / "fix.py").write_text("x = 1\n")
    git(ws, "add", "fix.py")
    git(ws, "commit", "-q", "-m", "Fix the widget count")
    return remote, git(ws, "rev-parse", "HEAD")


def start_run(server: Server) -> str:
    with server.client() as client:
        made = client.post("/v1/runs", json={"goal": "push the fix", "persona": "pusher"})
    assert made.status_code == 201, made.text
    run_id: str = made.json()["id"]
    return run_id


def test_a_push_is_approved_in_the_page_after_it_shows_what_leaves(
    deployment: Deployment, page: Page
) -> None:
    remote, sha = repository(deployment)
    deployment.persona(
        "pusher", [PUSH, END], tools='["git_push"]', extra="[policy]\napproval_timeout_s = 600\n"
    )
    server = deployment.start()
    run_id = start_run(server)
    page.goto(f"{server.url}/#token={deployment.token}&run={run_id}")
    card = page.get_by_test_id("approval-card")
    expect(card.get_by_test_id("approval-tool")).to_have_text("git_push")
    detail = card.get_by_test_id("approval-detail")
    expect(detail).to_contain_text(f"commit {sha[:12]} to branch 'fix' of origin ({remote})")
    expect(detail).to_contain_text("Fix the widget count")
    expect(detail).to_contain_text("fix.py")
    assert git(remote, "for-each-ref", "refs/heads/fix") == ""  # nothing left yet
    page.get_by_test_id("approve").click()
    expect(page.get_by_test_id("run-status")).to_have_attribute("data-status", "done")
    assert git(remote, "rev-parse", "refs/heads/fix") == sha
