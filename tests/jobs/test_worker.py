"""Real worker processes: jobs submitted from the command line end exactly once, and a job whose
worker is killed mid-call is taken over and finished without running that call again."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from steward.events import ToolResultEvent
from steward.jobs.store import Job, JobStore
from steward.store.events import open_store


def end_step(message: str) -> dict[str, Any]:
    """A scripted reply that ends the run solved with ``message`` (agent_step end)."""
    return {"agent_step": {"phase": "end", "summary": "done", "end_status": "solved", "end_message": message}}


def workspace_with_persona(root: Path, script: Sequence[object]) -> Path:
    workspace = root / "ws"
    (workspace / "personas").mkdir(parents=True)
    (workspace / "personas" / "script.yaml").write_text(yaml.safe_dump(script))
    (workspace / "personas" / "appender.toml").write_text(
        'role = "appender"\ntools = ["bash"]\nmodel = "scripted:script.yaml"\n'
    )
    return workspace


def environment(tmp_path: Path, db_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STEWARD_", "OPENAI_", "ANTHROPIC_"))}
    env["STEWARD_DB"] = db_url
    env["XDG_STATE_HOME"] = str(tmp_path / "state")
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config")
    return env


def steward(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "steward", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )


def start_worker(env: dict[str, str], cwd: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "steward", "worker", *args], cwd=cwd, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


async def all_jobs(db_url: str) -> list[Job]:
    async with await open_store(db_url) as store:
        return await JobStore(store.engine).list(limit=100)


async def bash_results(db_url: str, run_ids: Sequence[str]) -> dict[str, list[ToolResultEvent]]:
    """Each run's recorded bash results, in order."""
    async with await open_store(db_url) as store:
        return {
            run_id: [
                e for e in await store.events(run_id) if isinstance(e, ToolResultEvent) and e.tool == "bash"
            ]
            for run_id in run_ids
        }


def failed(results: Sequence[ToolResultEvent]) -> list[str]:
    """What each failed call said: a sandbox that could not start (bwrap's "Can't find source
    path" when a placeholder went under it) fails the call, which an end step would hide."""
    return [f"{r.error_category}: {r.output}" for r in results if r.status != "completed" or r.error_category]


def wait_for(db_url: str, done: int, timeout: float = 60) -> list[Job]:
    deadline = time.monotonic() + timeout
    jobs = asyncio.run(all_jobs(db_url))
    while time.monotonic() < deadline and sum(1 for j in jobs if j.ended) < done:
        time.sleep(0.3)
        jobs = asyncio.run(all_jobs(db_url))
    return jobs


def test_two_workers_finish_every_job_exactly_once(tmp_path: Path, db_url: str) -> None:
    script = [{"tool": "bash", "args": {"command": "echo ran >> ran.txt"}}, end_step("appended")]
    workspace = workspace_with_persona(tmp_path, script)
    env = environment(tmp_path, db_url)
    ids = []
    for n in range(4):
        submitted = steward(
            env, workspace, "submit", "--role", "appender", f"append {n}", "--priority", str(n)
        )
        assert submitted.returncode == 0, submitted.stderr
        ids.append(submitted.stdout.strip())
    workers = [start_worker(env, workspace, "--role", "appender", "--lease", "5") for _ in range(2)]
    try:
        jobs = wait_for(db_url, done=4)
    finally:
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        for worker in workers:
            worker.communicate(timeout=30)
    assert sorted(j.id for j in jobs) == sorted(ids)
    assert all(j.status == "done" and j.result == "appended" and j.run_id == j.id for j in jobs), jobs
    assert (workspace / "ran.txt").read_text() == "ran\n" * 4  # each job's call ran once
    results = asyncio.run(bash_results(db_url, [j.run_id or j.id for j in jobs]))
    assert all(len(calls) == 1 for calls in results.values()), results
    assert [failed(calls) for calls in results.values()] == [[]] * 4
    listed = steward(env, workspace, "jobs", "list")
    assert listed.stdout.count(" done ") == 4
    shown = steward(env, workspace, "jobs", "show", ids[0][:8])
    assert "result: appended" in shown.stdout and f"run: {ids[0]}" in shown.stdout
    ended = steward(env, workspace, "jobs", "cancel", ids[0])
    assert ended.returncode != 0 and "already ended (done)" in ended.stderr
    queued = steward(env, workspace, "submit", "--role", "appender", "later")
    cancelled = steward(env, workspace, "jobs", "cancel", queued.stdout.strip())
    assert " cancelled " in cancelled.stdout
    retried = steward(env, workspace, "jobs", "retry", queued.stdout.strip())
    assert " queued " in retried.stdout
    again = steward(env, workspace, "submit", "--role", "appender", "x", "--idempotency-key", "k1")
    same = steward(env, workspace, "submit", "--role", "appender", "y", "--idempotency-key", "k1")
    assert again.stdout == same.stdout and "names job" in same.stderr


def test_a_killed_worker_s_job_is_taken_over_and_its_call_is_not_run_again(
    tmp_path: Path, db_url: str
) -> None:
    script = [
        {"tool": "bash", "args": {"command": "echo ran >> ran.txt; touch started; sleep 30"}},
        end_step("finished after the takeover"),
    ]
    workspace = workspace_with_persona(tmp_path, script)
    env = environment(tmp_path, db_url)
    submitted = steward(env, workspace, "submit", "--role", "appender", "append once")
    assert submitted.returncode == 0, submitted.stderr
    first = start_worker(env, workspace, "--lease", "2")
    deadline = time.monotonic() + 30
    while not (workspace / "started").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert (workspace / "started").exists()
    first.kill()  # mid-call: no chance to release anything
    first.communicate(timeout=30)
    second = start_worker(env, workspace, "--lease", "60")  # its own lease must not lapse under load
    try:
        jobs = wait_for(db_url, done=1, timeout=60)
    finally:
        second.send_signal(signal.SIGTERM)
        second.communicate(timeout=30)
    (job,) = jobs
    assert job.status == "done" and job.result == "finished after the takeover", job
    assert job.attempts == 1  # one worker lost
    assert (workspace / "ran.txt").read_text() == "ran\n"  # the interrupted call did not run twice
    (calls,) = asyncio.run(bash_results(db_url, [job.run_id or job.id])).values()
    assert [c.error_category for c in calls] == ["interrupted"]  # told the model, never run again
    shown = steward(env, workspace, "runs", "show", job.id)
    assert "Interrupted" in shown.stdout or "interrupted" in shown.stdout
