"""The GRPO environment adapter, driven as TRL drives it: reset with a task row, Steward's tools as
its methods (in the sandbox, behind the guard and the policy), the verifier as its reward."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from steward.trajectories.environment import StewardEnvironment
from steward.trajectories.tasks import task_file_rows

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="needs bubblewrap: apt-get install bubblewrap"
)

BUGGY = "def add(a, b):\n    return a - b\n"
TEST = "import unittest\nfrom calc import add\n\nclass T(unittest.TestCase):\n    def test_add(self):\n" \
       "        self.assertEqual(add(2, 3), 5)\n"  # fmt: skip


@pytest.fixture
def task(tmp_path: Path) -> dict[str, object]:
    template = tmp_path / "tasks" / "fix-add"
    template.mkdir(parents=True)
    (template / "calc.py").write_text(BUGGY)
    (template / "test_calc.py").write_text(TEST)
    tasks = tmp_path / "tasks.jsonl"
    line = {
        "id": "fix-add",
        "goal": "Make add() add.",
        "workspace": "tasks/fix-add",
        "verify": "python3 -m unittest -q",
    }
    tasks.write_text(json.dumps(line) + "\n")
    (row,) = task_file_rows(tasks)
    return row


@pytest.fixture
def env(tmp_path: Path) -> Iterator[StewardEnvironment]:
    rollouts = tmp_path / "rollouts"
    rollouts.mkdir()
    made = StewardEnvironment(root=rollouts)
    yield made
    made.close()


def test_a_rollout_fixes_the_task_with_steward_tools_and_is_rewarded(
    env: StewardEnvironment, task: dict[str, object], tmp_path: Path
) -> None:
    assert task["prompt"] == [{"role": "user", "content": "Make add() add."}] and task["task"] == "fix-add"
    assert env.reset(**task) is None
    assert "calc.py" in env.list_dir()
    assert env.get_reward() == 0.0  # the test fails as given
    assert "return a - b" in env.read_file("calc.py")
    assert "Edited calc.py" in env.edit_file("calc.py", "a - b", "a + b")
    ran = env.bash("python3 -m unittest -q 2>&1 | tail -1")
    assert ran.rstrip().endswith("exit code: 0") and "OK" in ran
    assert env.get_reward() == 1.0
    assert (tmp_path / "tasks" / "fix-add" / "calc.py").read_text() == BUGGY  # the template is untouched

    first = env.workspace
    env.reset(**task)  # the next rollout starts afresh, the last one's folder gone
    assert first is not None and not first.exists() and env.workspace != first
    assert env.get_reward() == 0.0 and "return a - b" in env.read_file("calc.py")


def test_the_safety_layers_hold_in_a_rollout(
    env: StewardEnvironment, task: dict[str, object], tmp_path: Path
) -> None:
    env.reset(**task)
    outside = tmp_path / "outside.txt"
    said = env.write_file(str(outside), "escaped")  # paths stay in the workspace
    assert not outside.exists() and "is outside the workspace" in said
    env.bash(f"echo escaped > {outside}")  # the sandbox: nothing outside the workspace is writable
    assert not outside.exists()
    blocked = env.bash("rm -rf --no-preserve-root /")  # the guard refuses it before it runs
    assert blocked.startswith("Not run: blocked by the guard")
    assert "calc.py" in env.list_dir()


def test_the_listing_shows_the_tasks_files_not_stewards_folder(
    env: StewardEnvironment, task: dict[str, object]
) -> None:
    env.reset(**task)
    assert env.bash("true").rstrip().endswith("exit code: 0")  # the sandbox keeps its bookkeeping there
    assert env.workspace is not None and (env.workspace / ".steward").is_dir()
    for path in (".", "./", str(env.workspace)):
        assert env.list_dir(path).splitlines() == ["calc.py (32 bytes)", "test_calc.py (129 bytes)"], path
    env.reset(prompt=[{"role": "user", "content": "say hi"}])  # no template: an empty folder
    env.bash("true")
    assert env.list_dir() == "[./ is empty]"


def test_a_task_without_a_verifier_earns_nothing_and_a_missing_template_is_named(
    env: StewardEnvironment, tmp_path: Path
) -> None:
    env.reset(prompt=[{"role": "user", "content": "say hi"}], verify="")
    assert env.get_reward() == 0.0
    with pytest.raises(ValueError, match="is not a folder"):
        env.reset(workspace=str(tmp_path / "nowhere"))


def test_the_methods_are_tools_trl_can_describe() -> None:
    transformers = pytest.importorskip("transformers", reason="needs the train extra")
    for name in ("read_file", "write_file", "edit_file", "list_dir", "bash"):
        schema = transformers.utils.get_json_schema(getattr(StewardEnvironment(), name))
        assert schema["function"]["name"] == name and schema["function"]["parameters"]["properties"]
