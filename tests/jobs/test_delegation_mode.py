"""A delegated job runs under the mode its parent job actually runs in, not a wider one from the
configuration files: the operator's `--mode structured` holds all the way down."""

from __future__ import annotations

import asyncio

from fleet_kit import Fleet

from steward.jobs.api import Queue

LEAD = [{"tool": "delegate", "args": {"role": "helper", "goal": "make the marker"}}, {"text": "lead done"}]
HELPER = [{"tool": "bash", "args": {"command": "touch marker"}}, {"text": "made it"}]


def _fleet_with_an_autonomous_config(fleet: Fleet) -> None:
    # The files say autonomous; `bash` is an `ask` call, which autonomous mode approves by itself.
    (fleet.workspace / "steward.toml").write_text('[policy]\nmode = "autonomous"\nask = ["bash(*)"]\n')
    fleet.persona("lead", LEAD, tools='["delegate", "bash"]')
    fleet.persona("helper", HELPER, tools='["bash"]')


def test_a_child_of_a_job_submitted_structured_asks_before_its_ask_call(fleet: Fleet) -> None:
    _fleet_with_an_autonomous_config(fleet)
    lead = fleet.submit("lead", "get the marker made", "--mode", "structured")
    fleet.worker("--lease", "5")
    jobs = fleet.wait_until(
        lambda jobs: any(j.parent_id == lead and j.status in ("waiting", "done", "failed") for j in jobs),
        what="the child to wait or end",
    )
    child = next(j for j in jobs if j.parent_id == lead)
    assert child.status == "waiting", child
    assert not (fleet.workspace / "marker").exists()  # the call waits for a person
    approved = fleet.steward("approve", child.id)
    assert approved.returncode == 0, approved.stderr
    ended = fleet.wait_until(lambda jobs: any(j.id == lead and j.ended for j in jobs), what="the lead to end")
    assert next(j for j in ended if j.id == lead).status == "done"
    assert (fleet.workspace / "marker").exists()


def test_a_child_of_a_job_switched_to_structured_at_run_time_asks_too(fleet: Fleet) -> None:
    """The parent's mode as switched while it runs, not as submitted, is the one its child gets."""
    _fleet_with_an_autonomous_config(fleet)
    hold = "touch started; until [ -f go ]; do sleep 0.05; done"  # the lead runs until the test says go
    fleet.persona("lead", [{"tool": "bash", "args": {"command": hold}}, *LEAD], tools='["delegate", "bash"]')
    lead = fleet.submit("lead", "get the marker made", "--mode", "autonomous")
    fleet.worker("--lease", "5")
    fleet.wait_for_file("started")

    async def switch() -> None:
        async with await Queue.open(fleet.db_url) as queue:
            await queue.job(lead).switch_mode("structured")

    asyncio.run(switch())
    (fleet.workspace / "go").touch()
    jobs = fleet.wait_until(
        lambda jobs: any(j.parent_id == lead and j.status in ("waiting", "done", "failed") for j in jobs),
        what="the child to wait or end",
    )
    child = next(j for j in jobs if j.parent_id == lead)
    assert child.status == "waiting", child
    assert not (fleet.workspace / "marker").exists()


def test_submit_refuses_an_unknown_mode(fleet: Fleet) -> None:
    fleet.persona("lead", LEAD, tools='["delegate"]')
    done = fleet.steward("submit", "--role", "lead", "go", "--mode", "yolo")
    assert done.returncode == 2 and "structured or autonomous" in done.stderr
    assert "Traceback" not in done.stderr
    assert fleet.jobs() == []
