"""A batch on a provider's model (the OpenAI wire, served by the loopback fake server), as a
user compares models: the tokens are the server's own counts, and an unpriced model has no cost."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from steward.testing.fake_llm import FakeLLMServer, FakeReply, FakeToolCall

Steward = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def fake() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as server:
        yield server


def test_a_batch_on_an_openai_compatible_model(
    tmp_path: Path, steward: Steward, steward_env: dict[str, str], fake: FakeLLMServer
) -> None:
    (tmp_path / "set" / "tpl").mkdir(parents=True)
    (tmp_path / "set" / "tpl" / "value.txt").write_text("old\n")
    task = {"id": "value", "goal": "Change old to new in value.txt", "workspace": "tpl",
            "verify": "grep -qx new value.txt"}  # fmt: skip
    (tmp_path / "set" / "tasks.jsonl").write_text(json.dumps(task) + "\n")
    # One worker slot: the attempts ask in turn, so the replies go to them in this order.
    for new in ("new", "newer"):
        edit = FakeToolCall("edit_file", {"path": "value.txt", "old_text": "old", "new_text": new})
        fake.add(FakeReply(tool_calls=[edit], input_tokens=900, output_tokens=30), FakeReply(text="Done."))
    env = steward_env | {"OPENAI_BASE_URL": fake.openai_base_url}
    report = tmp_path / "report"
    done = steward(
        "batch", str(tmp_path / "set" / "tasks.jsonl"), "-m", "openai:smol", "-k", "2", "-j", "1", "-o", str(report),
        env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    body = json.loads((report / "report.json").read_text())
    assert [a["passed"] for a in body["attempts"]] == [True, False]
    assert body["tasks"][0]["pass_at"] == pytest.approx({"1": 0.5, "2": 1.0})
    assert all(a["usage"]["input_tokens"] >= 900 for a in body["attempts"])  # the server's counts
    assert body["tasks"][0]["cost_usd"] is None  # no price known for this model: not a made-up figure
    assert fake.remaining == 0


def test_the_folders_steward_toml_reaches_the_attempts(
    tmp_path: Path, steward: Steward, fake: FakeLLMServer
) -> None:
    """`steward run` here reads ./steward.toml; so do the batch's attempts, though each runs in a
    copy of its template (the model server's base_url is there, not in the environment)."""
    (tmp_path / "set" / "tpl").mkdir(parents=True)
    (tmp_path / "set" / "tpl" / "value.txt").write_text("old\n")
    task = {"id": "value", "goal": "Change old to new in value.txt", "workspace": "tpl",
            "verify": "grep -qx new value.txt"}  # fmt: skip
    (tmp_path / "set" / "tasks.jsonl").write_text(json.dumps(task) + "\n")
    (tmp_path / "steward.toml").write_text(
        f'[models.openai]\nbase_url = "{fake.openai_base_url}"\nmax_retries = 0\n'
    )
    edit = FakeToolCall("edit_file", {"path": "value.txt", "old_text": "old", "new_text": "new"})
    fake.add(FakeReply(tool_calls=[edit]), FakeReply(text="Done."))
    report = tmp_path / "report"
    done = steward("batch", "set/tasks.jsonl", "-m", "openai:smol", "-k", "1", "-o", str(report))
    assert done.returncode == 0, done.stderr
    body = json.loads((report / "report.json").read_text())
    assert [a["passed"] for a in body["attempts"]] == [True], body["attempts"]
    assert fake.remaining == 0 and "cannot reach" not in done.stderr
