"""Bad input stops a batch before anything is queued, with one line naming the line and the fix."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from steward.batch.plan import Manifest, new_manifest
from steward.batch.tasks import BatchError, load_tasks

Steward = Callable[..., subprocess.CompletedProcess[str]]


def _tasks(tmp_path: Path, *lines: str) -> Path:
    (tmp_path / "tpl").mkdir(exist_ok=True)
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    return path


GOOD = '{"id": "a", "goal": "do it", "workspace": "tpl"}'


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("{not json", "tasks.jsonl:2: not JSON"),
        ("[1, 2]", "tasks.jsonl:2: a task is a JSON object"),
        ('{"id": "b", "goal": "x"}', "tasks.jsonl:2: 'workspace' is missing"),
        ('{"id": "b", "goal": "x", "workspace": "nowhere"}', "template 'nowhere' is not a directory"),
        (
            '{"id": "b", "goal": "x", "workspace": "tpl", "verfy": "true"}',
            "unknown key(s) verfy; a task has:",
        ),
        ('{"id": "a", "goal": "x", "workspace": "tpl"}', "task id 'a' is used on line 1 already"),
        ('{"id": "a b", "goal": "x", "workspace": "tpl"}', "then be letters, digits"),
        ('{"id": "..", "goal": "x", "workspace": "tpl"}', "id '..' must start with a letter or a digit"),
        (
            '{"id": "b", "goal": "x", "workspace": "tpl", "script": "none.yaml"}',
            "the script 'none.yaml' is not a file",
        ),
        ('{"id": "b", "goal": "x", "workspace": "tpl", "verify_timeout_s": 0}', "verify_timeout_s"),
    ],
)
def test_a_bad_line_is_named_with_its_fix(tmp_path: Path, line: str, says: str) -> None:
    with pytest.raises(BatchError) as raised:
        load_tasks(_tasks(tmp_path, GOOD, line))
    assert says in str(raised.value)


def test_comments_and_blank_lines_are_skipped(tmp_path: Path) -> None:
    tasks = load_tasks(_tasks(tmp_path, "# the set", "", GOOD))
    assert [(t.id, t.line) for t in tasks] == [("a", 3)]


def test_a_task_file_saved_with_a_byte_order_mark_is_read(tmp_path: Path) -> None:
    path = _tasks(tmp_path, GOOD)
    path.write_bytes("\ufeff".encode() + path.read_bytes())  # as some Windows editors save UTF-8
    assert [t.id for t in load_tasks(path)] == ["a"]


def test_an_empty_or_missing_task_file_says_what_a_task_looks_like(tmp_path: Path) -> None:
    with pytest.raises(BatchError, match="has no task; write one JSON object per line"):
        load_tasks(_tasks(tmp_path, "# nothing yet"))
    with pytest.raises(BatchError, match="no task file at"):
        load_tasks(tmp_path / "missing.jsonl")


def test_the_scripted_model_needs_a_script_for_every_task(tmp_path: Path) -> None:
    tasks = load_tasks(_tasks(tmp_path, GOOD))
    with pytest.raises(BatchError, match=r"tasks.jsonl:1: task 'a' has no \"script\" for --model scripted"):
        new_manifest(
            tmp_path / "out", tasks, tasks_file=tmp_path / "tasks.jsonl", persona="coder", model="scripted",
            mode=None, attempts=2, store="sqlite:///x.db",
        )  # fmt: skip


def test_resuming_a_directory_without_a_batch_names_what_is_missing(tmp_path: Path) -> None:
    with pytest.raises(BatchError, match=r"holds no batch \(batch.json is not there\)"):
        Manifest.load(tmp_path)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--persona", "nobody"), "tasks.jsonl:1: "),
        (("--attempts", "0"), "--attempts 0: each task needs at least one attempt"),
        (("--attempts", "101"), "--attempts 101: at most 100 attempts a task"),
        (("--mode", "wild"), "--mode 'wild' is not a mode"),
        ((), "no model for task 'a': pass --model"),
    ],
)
def test_the_command_refuses_bad_flags_before_queueing_anything(
    tmp_path: Path, steward: Steward, args: tuple[str, ...], says: str
) -> None:
    tasks = _tasks(tmp_path, GOOD)
    model = () if not args else ("--model", "openai:gpt-4o-mini")
    done = steward("batch", str(tasks), *model, *args, "-o", str(tmp_path / "report"))
    assert done.returncode == 2, done.stderr
    assert says in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "report").exists()  # no manifest, no store, no job


def test_a_persona_the_attempts_cannot_find_says_where_every_template_sees_it(
    tmp_path: Path, steward: Steward, steward_env: dict[str, str]
) -> None:
    tasks = _tasks(tmp_path, GOOD)
    (tmp_path / "personas").mkdir()
    (tmp_path / "personas" / "tester.toml").write_text(
        'role = "tester"\n'
    )  # this folder's: not the templates'
    done = steward("batch", str(tasks), "--model", "scripted", "-p", "tester", "-o", str(tmp_path / "report"))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    user_dir = Path(steward_env["XDG_CONFIG_HOME"]) / "steward" / "personas"
    assert "no persona 'tester' for task 'a' (personas/tester.toml in this folder is not used" in done.stderr
    assert f"put tester.toml in {user_dir} (every template's attempts see it)" in done.stderr
    user_dir.mkdir(parents=True)
    (tmp_path / "personas" / "tester.toml").rename(user_dir / "tester.toml")
    checked = steward(
        "batch", str(tasks), "--model", "openai:gpt-4o-mini", "-p", "tester", "-o", str(tmp_path / "r")
    )
    assert (
        "no persona" not in checked.stderr and "no API key" in checked.stderr
    )  # found; the next check speaks


def test_a_model_that_cannot_work_is_refused_before_queueing_anything(
    tmp_path: Path, steward: Steward
) -> None:
    tasks = _tasks(tmp_path, GOOD)
    done = steward("batch", str(tasks), "--model", "openai:gpt-4o-mini", "-o", str(tmp_path / "report"))
    assert done.returncode == 2
    assert "the model 'openai:gpt-4o-mini' (task 'a') cannot work: openai: no API key" in done.stderr
    assert not (tmp_path / "report").exists()


def test_a_batch_of_more_runs_than_it_holds_is_refused_with_the_fix(tmp_path: Path, steward: Steward) -> None:
    lines = [f'{{"id": "t{n}", "goal": "do it", "workspace": "tpl"}}' for n in range(101)]
    tasks = _tasks(tmp_path, *lines)
    done = steward(
        "batch", str(tasks), "--model", "openai:gpt-4o-mini", "-k", "100", "-o", str(tmp_path / "r")
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "101 tasks x 100 attempts is 10,100 runs; a batch holds at most 10,000" in done.stderr
    assert not (tmp_path / "r").exists()


def test_a_store_that_cannot_open_leaves_no_batch_behind(
    tmp_path: Path, steward: Steward, steward_env: dict[str, str]
) -> None:
    tasks = _tasks(tmp_path, GOOD)
    (tmp_path / "afile").write_text("not a folder")
    store = f"sqlite:///{tmp_path / 'afile' / 'steward.db'}"
    key = steward_env | {"OPENAI_API_KEY": "sk-not-used"}  # the model could work: the store is the problem
    for _ in range(2):  # the same command again says the same: no half-made batch in the way
        done = steward(
            "batch", str(tasks), "--model", "openai:gpt-4o-mini", "--store", store, "-o", str(tmp_path / "r"),
            env=key,
        )  # fmt: skip
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert "cannot open the SQLite store" in done.stderr, done.stderr
        assert not (tmp_path / "r").exists()


def test_a_second_batch_into_the_same_directory_points_at_resume(
    tmp_path: Path, steward: Steward, steward_env: dict[str, str]
) -> None:
    tasks = _tasks(tmp_path, GOOD)
    (tmp_path / "report").mkdir()
    (tmp_path / "report" / "batch.json").write_text(json.dumps({"version": 1}))
    key = steward_env | {
        "OPENAI_API_KEY": "sk-not-used"
    }  # the model could work: the directory is the problem
    done = steward(
        "batch", str(tasks), "--model", "openai:gpt-4o-mini", "-o", str(tmp_path / "report"), env=key
    )
    assert done.returncode == 2
    assert f"`steward batch --resume {tmp_path / 'report'}` goes on with it" in done.stderr


def test_a_damaged_manifest_is_named_not_a_traceback(tmp_path: Path) -> None:
    (tmp_path / "batch.json").write_text(json.dumps({"version": 1, "id": "x"}))
    with pytest.raises(BatchError, match=r"batch.json is damaged \(KeyError"):
        Manifest.load(tmp_path)


def test_resume_refuses_flags_that_would_change_the_batch(tmp_path: Path, steward: Steward) -> None:
    done = steward("batch", "--resume", str(tmp_path), "--model", "openai:gpt-4o-mini", "-k", "3")
    assert done.returncode == 2
    assert "--attempts, --model cannot change a batch under way" in done.stderr


def test_a_report_directory_that_cannot_be_made_is_named_with_the_fix(
    tmp_path: Path, steward: Steward, steward_env: dict[str, str]
) -> None:
    tasks = _tasks(tmp_path, GOOD)
    (tmp_path / "taken").write_text("a file, not a folder\n")
    key = steward_env | {"OPENAI_API_KEY": "sk-not-used"}  # the model could work: -o is the problem
    done = steward(
        "batch", str(tasks), "--model", "openai:gpt-4o-mini", "-o", str(tmp_path / "taken"), env=key
    )
    assert done.returncode == 2, done.stderr
    assert f"-o {tmp_path / 'taken'} is a file" in done.stderr and "internal error" not in done.stderr
    assert (tmp_path / "taken").read_text() == "a file, not a folder\n"


def test_a_script_that_is_not_a_script_is_refused_before_queueing_anything(
    tmp_path: Path, steward: Steward
) -> None:
    (tmp_path / "notes.yaml").write_text("{this: is, not: [a list of replies\n")
    tasks = _tasks(tmp_path, '{"id": "a", "goal": "do it", "workspace": "tpl", "script": "notes.yaml"}')
    done = steward("batch", str(tasks), "--model", "scripted", "-o", str(tmp_path / "report"))
    assert done.returncode == 2, done.stderr
    assert "tasks.jsonl:1: scripted model:" in done.stderr and "notes.yaml' is not valid YAML" in done.stderr
    assert not (tmp_path / "report").exists()  # no manifest, no store, no job
