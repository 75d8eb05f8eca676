"""The software worker end to end, as a job run by a real worker process: fix the failing test,
commit on a branch, push (approved from the command line), open a pull request on the fake
GitHub with the summary in its body."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.tools.test_forge_repo import TOKEN, Repo, git, make_repo

from steward.events import ApprovalGateEvent, Event, ToolResultEvent
from steward.jobs.store import Job, JobStore
from steward.store.events import open_store
from steward.testing.fake_forge import FakeForge

SUMMARY = "add() subtracted instead of adding; it adds now and test_calc passes."


def script() -> list[dict[str, Any]]:
    return [
        {"tool": "bash", "args": {"command": "python3 test_calc.py"}},
        {"tool": "edit_file", "args": {"path": "calc.py", "old_text": "a - b", "new_text": "a + b"}},
        {"tool": "bash", "args": {"command": "python3 test_calc.py && echo TESTS PASS"}},
        {"tool": "git_branch", "args": {"action": "create", "name": "fix-add"}},
        {"tool": "git_commit", "args": {"message": "Fix add()", "paths": ["calc.py"]}},
        {"tool": "git_push", "args": {}},
        {"tool": "create_pull_request", "args": {"title": "Fix add()", "body": f"Summary: {SUMMARY}"}},
        {
            "agent_step": {
                "phase": "end",
                "summary": SUMMARY,
                "end_status": "solved",
                "end_message": "PR opened",
            }
        },
    ]


class Worker:
    """A workspace repository, its persona, one store, and real ``steward`` processes on them."""

    def __init__(self, root: Path, forge_api: str) -> None:
        self.repo: Repo = make_repo(root)
        ws = self.repo.workspace
        (ws / "calc.py").write_text("def add(a, b):\n    return a - b\n")
        (ws / "test_calc.py").write_text(
            "from calc import add\n\nassert add(2, 3) == 5, 'add(2, 3) is not 5'\n"
        )
        git(ws, "add", "calc.py", "test_calc.py")
        git(ws, "commit", "-q", "-m", "Add calc with its failing test")
        git(ws, "push", "-q", "origin", "main")
        (ws / ".git" / "info" / "exclude").write_text("personas/\nsteward.toml\n.steward/\n")
        personas = ws / "personas"
        personas.mkdir()
        (personas / "dev.yaml").write_text(yaml.safe_dump(script()))
        tools = '["bash", "edit_file", "git_branch", "git_commit", "git_push", "create_pull_request"]'
        (personas / "dev.toml").write_text(f'role = "dev"\ntools = {tools}\nmodel = "scripted:dev.yaml"\n')
        (ws / "steward.toml").write_text(
            f'[git]\nforge = "github"\napi_url = "{forge_api}"\n\n[policy]\nallow = ["create_pull_request"]\n'
        )
        self.db_url = f"sqlite:///{root}/queue/steward.db"
        self.env = {
            k: v for k, v in os.environ.items() if not k.startswith(("STEWARD_", "OPENAI_", "ANTHROPIC_"))
        }
        self.env |= {
            "STEWARD_DB": self.db_url,
            "XDG_STATE_HOME": str(root / "state"),
            "XDG_CONFIG_HOME": str(root / "config"),
            "GITHUB_TOKEN": TOKEN,
        }
        self.process: subprocess.Popen[str] | None = None

    def steward(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "steward", *args], cwd=self.repo.workspace, env=self.env,
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip

    def start(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "steward", "worker", "--lease", "10"], cwd=self.repo.workspace, env=self.env,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip

    def stop(self) -> str:
        if self.process is None:
            return ""
        self.process.terminate()
        try:
            _, err = self.process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            _, err = self.process.communicate()
        return err

    def job(self, job_id: str) -> Job:
        async def read() -> Job:
            async with await open_store(self.db_url) as store:
                return next(j for j in await JobStore(store.engine).list(limit=100) if j.id == job_id)

        return asyncio.run(read())

    def events(self, run_id: str) -> list[Event]:
        async def read() -> list[Event]:
            async with await open_store(self.db_url) as store:
                return list(await store.events(run_id))

        return asyncio.run(read())

    def wait_for(self, job_id: str, check: Callable[[Job], bool], what: str, timeout: float = 180) -> Job:
        deadline = time.monotonic() + timeout
        job = self.job(job_id)
        while not check(job):
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}: {job}")
            time.sleep(0.2)
            job = self.job(job_id)
        return job


@pytest.fixture
def forge_and_worker(tmp_path: Path) -> Iterator[tuple[FakeForge, Worker]]:
    remote = tmp_path / "remote.git"
    with FakeForge({"acme/widgets": remote}, token=TOKEN) as forge:
        worker = Worker(tmp_path, forge.github_api_url)
        try:
            yield forge, worker
        finally:
            worker.stop()


def test_a_job_fixes_the_test_commits_pushes_after_a_cli_approval_and_opens_the_pull_request(
    forge_and_worker: tuple[FakeForge, Worker],
) -> None:
    forge, worker = forge_and_worker
    submitted = worker.steward("submit", "--role", "dev", "fix the failing test and open a pull request")
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip().splitlines()[0]
    worker.start()
    worker.wait_for(job_id, lambda j: j.status == "waiting", "the push's approval")
    gate = next(e for e in worker.events(job_id) if isinstance(e, ApprovalGateEvent))
    pushed_later = git(worker.repo.workspace, "rev-parse", "fix-add")
    assert gate.tool == "git_push" and "Fix add()" in gate.description and "calc.py" in gate.description
    assert worker.repo.remote_sha("fix-add") is None and forge.pulls == []

    shown = worker.steward("runs", "show", job_id)
    assert "Fix add()" in shown.stdout and "branch 'fix-add'" in shown.stdout, shown.stdout + shown.stderr
    approved = worker.steward("approve", job_id)
    assert approved.returncode == 0, approved.stderr
    job = worker.wait_for(job_id, lambda j: j.ended, "the job's end")

    assert job.status == "done", (job, worker.stop())
    assert worker.repo.remote_sha("fix-add") == pushed_later
    (opened,) = forge.pulls
    assert (opened.head, opened.base, opened.title) == ("fix-add", "main", "Fix add()")
    assert SUMMARY in opened.body
    outputs = [e.output for e in worker.events(job_id) if isinstance(e, ToolResultEvent)]
    assert any("TESTS PASS" in o for o in outputs), outputs
    assert all(TOKEN not in o for o in outputs)
