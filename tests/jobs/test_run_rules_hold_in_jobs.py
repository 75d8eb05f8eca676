"""A job's run keeps the rules it started under when a worker goes on with it after a wait, on
both engines: the deny rules of the configuration and of the persona at the start hold though
both files lose them before the answer comes."""

from __future__ import annotations

from fleet_kit import Fleet

QUESTION = {"agent_step": {"phase": "feedback", "summary": "ask", "feedback_message": "Which colour?"}}


def test_a_job_answered_after_its_rules_were_relaxed_still_goes_on_under_them(fleet: Fleet) -> None:
    writes = [
        {"tool": "write_file", "args": {"path": "from-config.txt", "content": "x"}},
        {"tool": "write_file", "args": {"path": "from-persona.txt", "content": "x"}},
        {"tool": "write_file", "args": {"path": "allowed.txt", "content": "x"}},
    ]
    config = fleet.workspace / "steward.toml"
    config.write_text('[policy]\ndeny = ["write_file(from-config*)"]\n')
    deny = '[policy]\ndeny = ["write_file(from-persona.txt)"]\n'
    fleet.persona("painter", [QUESTION, *writes, {"text": "painted"}], tools='["write_file"]', extra=deny)
    job_id = fleet.submit("painter", "paint the shed")
    fleet.worker("--lease", "5")
    fleet.wait_until(lambda jobs: any(j.id == job_id and j.status == "waiting" for j in jobs), what="a wait")

    config.write_text("")  # both rules are gone from the files, not from the run
    fleet.persona("painter", [QUESTION, *writes, {"text": "painted"}], tools='["write_file"]')
    answered = fleet.steward("answer", job_id, "green")
    assert answered.returncode == 0, answered.stderr
    (job,) = fleet.ended(1)
    assert job.status == "done", job
    assert (fleet.workspace / "allowed.txt").exists()  # the run went on and wrote what it may
    assert not (fleet.workspace / "from-config.txt").exists()
    assert not (fleet.workspace / "from-persona.txt").exists()
