"""``steward runs export``: the event log stays the default; ``--format chat`` and ``tasks`` give
training data for one run, several, or every ended run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from tests.trajectories.conftest import Cli

WRITE = {"tool": "write_file", "args": {"path": "out.txt", "content": "done\n"}}
MISSING = {"tool": "read_file", "args": {"path": "nope.txt"}}


def end(status: str) -> dict[str, Any]:
    return {
        "agent_step": {"phase": "end", "summary": "end", "end_status": status, "end_message": f"{status}!"}
    }


def scripted_run(cli: Cli, tmp_path: Path, goal: str, replies: list[dict[str, Any]]) -> str:
    script = tmp_path / f"{len(list(tmp_path.glob('*.yaml')))}.yaml"
    script.write_text(yaml.safe_dump(replies))
    done = cli("run", goal, "--json", "--model", f"scripted:{script}")
    assert done.returncode in (0, 1, 3), done.stderr  # solved, partial or stuck, answered
    return str(json.loads(done.stdout.splitlines()[0])["run_id"])


def records(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()]


def test_chat_tasks_and_events_formats(cli: Cli, tmp_path: Path) -> None:
    first = scripted_run(cli, tmp_path, "write out.txt", [MISSING, WRITE, end("solved")])
    second = scripted_run(cli, tmp_path, "write out.txt", [WRITE, end("partial")])
    other = scripted_run(cli, tmp_path, "try something", [MISSING, end("stuck")])

    chat = cli("runs", "export", "--format", "chat", first, second)
    assert chat.returncode == 0, chat.stderr
    got = records(chat.stdout)
    assert [r["run"]["id"] for r in got] == [first, second]
    assert [r["reward"] for r in got] == [1.0, 0.5]
    one = got[0]
    assert [m["role"] for m in one["messages"]] == ["system", "user", "assistant", "tool", "assistant", "tool",
                                                     "assistant"]  # fmt: skip
    assert one["phases"] == [None, None, "act", None, "act", None, "end"]
    assert json.loads(one["messages"][2]["tool_calls"][0]["function"]["arguments"]) == MISSING["args"]
    assert "not found" in one["messages"][3]["content"]
    assert {t["function"]["name"] for t in one["tools"]} >= {"read_file", "write_file", "agent_step"}

    every = records(cli("runs", "export", "-f", "chat", "--all").stdout)
    assert [r["run"]["id"] for r in every] == [first, second, other]  # oldest first

    tasks = records(cli("runs", "export", "--format", "tasks", "--since", "1h").stdout)
    assert [(t["goal"], t["runs"], t["mean_reward"]) for t in tasks] == [
        ("write out.txt", [first, second], 0.75),
        ("try something", [other], 0.0),
    ]
    assert tasks[0]["prompt"] == [{"role": "user", "content": "write out.txt"}]

    events = records(cli("runs", "export", first).stdout)  # the default: the audit trail, as before
    assert events[0]["type"] == "run_start" and events[-1]["type"] == "done"
    assert all(e["run_id"] == first for e in events)


def test_an_export_to_a_file_is_whole(cli: Cli, tmp_path: Path) -> None:
    run = scripted_run(cli, tmp_path, "write out.txt", [WRITE, end("solved")])
    target = tmp_path / "data" / "train.jsonl"
    target.parent.mkdir()
    done = cli("runs", "export", "-f", "chat", run, "-o", str(target))
    assert done.returncode == 0 and "wrote 1 run(s) as chat" in done.stderr
    assert [r["run"]["id"] for r in records(target.read_text())] == [run]
    assert list(target.parent.iterdir()) == [target]


def test_a_since_no_run_matches_says_so(cli: Cli, tmp_path: Path) -> None:
    scripted_run(cli, tmp_path, "write out.txt", [WRITE, end("solved")])
    for fmt in ("chat", "events"):
        done = cli("runs", "export", "-f", fmt, "--since", "2999-01-01")
        assert done.returncode == 0 and done.stdout == ""
        assert "no runs matched" in done.stderr and "in the future" in done.stderr, done.stderr


def test_mistakes_name_the_fix(cli: Cli, tmp_path: Path) -> None:
    run = scripted_run(cli, tmp_path, "write out.txt", [WRITE, end("solved")])
    cases = {
        ("runs", "export"): "give runs to export (RUN ...), or --all or --since",
        ("runs", "export", run, "--all"): "give runs to export",
        ("runs", "export", "--format", "sharegpt", run): "use one of events, chat, tasks",
        ("runs", "export", "--since", "last tuesday"): "give e.g. 12h, 7d",
        ("runs", "export", "-f", "chat", "zzzz"): "zzzz",
    }
    for args, said in cases.items():
        done = cli(*args)
        assert done.returncode == 2 and said in done.stderr and "Traceback" not in done.stderr, (
            args,
            done.stderr,
        )


def test_an_export_to_a_place_that_cannot_be_written_names_the_fix_and_leaves_nothing(
    cli: Cli, tmp_path: Path
) -> None:
    run = scripted_run(cli, tmp_path, "write out.txt", [WRITE, end("solved")])
    (tmp_path / "data").mkdir()
    for target in (tmp_path / "data", tmp_path / "missing" / "train.jsonl"):
        before = sorted(tmp_path.iterdir())
        done = cli("runs", "export", "-f", "chat", run, "-o", str(target))
        assert done.returncode == 2, done.stderr
        assert f"cannot write {target}" in done.stderr and "choose another file with -o" in done.stderr
        assert "internal error" not in done.stderr
        assert sorted(tmp_path.iterdir()) == before  # no half-written file beside it
