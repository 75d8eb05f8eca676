"""`steward submit --wait` with no worker for the job's role says so, keeps waiting, and says
again when a worker arrives; the job then ends and the submit prints it."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from typing import Any

from fleet_kit import Fleet

from steward.jobs import presence
from steward.store.events import open_store


def ended(message: str) -> dict[str, Any]:
    """A scripted reply that ends the run solved with ``message`` (agent_step end)."""
    return {"agent_step": {"phase": "end", "summary": "done", "end_status": "solved", "end_message": message}}


def serving(fleet: Fleet, role: str) -> list[str]:
    async def read() -> list[str]:
        async with await open_store(fleet.db_url) as store:
            return await presence.serving(store.engine, role)

    return asyncio.run(read())


def test_a_waiting_submit_says_no_worker_serves_the_role_then_that_one_does(fleet: Fleet) -> None:
    fleet.persona("closer", [ended("finished")], tools="[]")
    submit = subprocess.Popen(
        [sys.executable, "-m", "steward", "submit", "--role", "closer", "close it", "--wait"],
        cwd=fleet.workspace, env=fleet.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert submit.stderr is not None
        said = submit.stderr.readline()  # the first thing it says: nobody will take the job
        assert "no worker serves role 'closer'" in said and "steward worker --role closer" in said, said
        assert submit.poll() is None  # and it goes on waiting
        fleet.worker("--role", "closer")
        out, err = submit.communicate(timeout=120)
    finally:
        if submit.poll() is None:
            submit.kill()
            submit.communicate()
    assert submit.returncode == 0, err
    assert "serves role 'closer' now" in err
    assert "done: finished" in out
    assert "Traceback" not in said + err


def test_a_worker_for_other_roles_serves_nobody_here(fleet: Fleet) -> None:
    fleet.persona("closer", [ended("finished")], tools="[]")
    fleet.persona("other", [ended("other")], tools="[]")
    fleet.worker("--role", "other")
    fleet.wait_until(lambda _jobs: bool(serving(fleet, "other")), what="the worker of 'other' to be there")
    submit = subprocess.Popen(
        [sys.executable, "-m", "steward", "submit", "--role", "closer", "close it", "--wait"],
        cwd=fleet.workspace, env=fleet.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert submit.stderr is not None
        said = submit.stderr.readline()
        assert "no worker serves role 'closer'" in said, said
    finally:
        submit.kill()
        submit.communicate()
