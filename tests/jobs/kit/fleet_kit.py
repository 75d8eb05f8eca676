"""A fleet for the job tests: a workspace with scripted personas, and real ``steward`` processes
(submit, worker, answer...) pointed at one store."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import yaml

from steward.jobs.store import Job, JobStore
from steward.store.events import open_store


class Fleet:
    """One workspace and one store, driven through real ``steward`` processes."""

    def __init__(self, root: Path, db_url: str) -> None:
        self.db_url = db_url
        self.workspace = root / "ws"
        (self.workspace / "personas").mkdir(parents=True)
        self.env = {
            k: v for k, v in os.environ.items() if not k.startswith(("STEWARD_", "OPENAI_", "ANTHROPIC_"))
        }
        self.env |= {
            "STEWARD_DB": db_url,
            "XDG_STATE_HOME": str(root / "state"),
            "XDG_CONFIG_HOME": str(root / "config"),
        }
        self.workers: list[subprocess.Popen[str]] = []

    def persona(
        self, name: str, script: Sequence[object], *, tools: str = '["bash"]', extra: str = ""
    ) -> None:
        """A persona whose model plays ``script`` (each run from its top)."""
        (self.workspace / "personas" / f"{name}.yaml").write_text(yaml.safe_dump(script))
        (self.workspace / "personas" / f"{name}.toml").write_text(
            f'role = "{name}"\ntools = {tools}\nmodel = "scripted:{name}.yaml"\n{extra}'
        )

    def steward(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "steward", *args], cwd=self.workspace, env=self.env,
            capture_output=True, text=True, timeout=timeout,
        )  # fmt: skip

    def submit(self, role: str, goal: str, *args: str) -> str:
        done = self.steward("submit", "--role", role, goal, *args)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip().splitlines()[0]

    def worker(self, *args: str, host: str | None = None) -> subprocess.Popen[str]:
        env = self.env | ({"STEWARD_HOST_ID": host} if host else {})
        process = subprocess.Popen(
            [sys.executable, "-m", "steward", "worker", *args], cwd=self.workspace, env=env,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        self.workers.append(process)
        return process

    def stop(self) -> None:
        for process in self.workers:
            if process.poll() is None:
                process.send_signal(signal.SIGCONT)
                process.send_signal(signal.SIGTERM)
                process.send_signal(signal.SIGTERM)  # at once: the test is over
        for process in self.workers:
            try:
                process.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.communicate()

    def jobs(self) -> list[Job]:
        async def read() -> list[Job]:
            async with await open_store(self.db_url) as store:
                return await JobStore(store.engine).list(limit=1000)

        return asyncio.run(read())

    def job(self, job_id: str) -> Job:
        return next(j for j in self.jobs() if j.id == job_id)

    def wait_until(
        self, check: Callable[[list[Job]], bool], timeout: float = 180, what: str = ""
    ) -> list[Job]:
        """Poll the jobs until ``check(jobs)`` is true."""
        deadline = time.monotonic() + timeout
        jobs = self.jobs()
        while not check(jobs):
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what or check}: {jobs}")
            time.sleep(0.2)
            jobs = self.jobs()
        return jobs

    def wait_for_file(self, name: str, timeout: float = 180) -> None:
        path = self.workspace / name
        deadline = time.monotonic() + timeout
        while not path.exists():
            if time.monotonic() > deadline:
                raise AssertionError(f"{name} did not appear in {timeout} s; jobs: {self.jobs()}")
            time.sleep(0.05)

    def ended(self, count: int, timeout: float = 180) -> list[Job]:
        return self.wait_until(lambda jobs: sum(j.ended for j in jobs) >= count, timeout, f"{count} ended")
