"""`steward run --schema FILE`: the answer is JSON matching the schema; a bad file is one clear line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml


def scripted(tmp_path: Path, *texts: str) -> str:
    script = tmp_path / "s.yaml"
    script.write_text(yaml.safe_dump([{"text": text} for text in texts]))
    return f"scripted:{script}"


def test_the_answer_is_the_json_that_matches_the_schema(cli: Any, tmp_path: Path) -> None:
    (tmp_path / "answer.schema.json").write_text(json.dumps({"type": "object", "required": ["count"]}))
    model = scripted(tmp_path, "There are 3.", '{"count":   3}')
    proc = cli("run", "count", "--schema", "answer.schema.json", "--model", model, "--json")
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    assert events[0]["data"]["output_schema"] == {"type": "object", "required": ["count"]}
    assert [e["data"]["code"] for e in events if e["type"] == "error"] == ["invalid_answer"]
    assert events[-1]["data"]["message"] == '{"count": 3}'


def test_a_bad_schema_file_is_one_line_naming_the_fix(cli: Any, tmp_path: Path) -> None:
    model = scripted(tmp_path, "{}")
    (tmp_path / "bad.json").write_text("{type: object}")
    (tmp_path / "wrong.json").write_text('{"type": "objekt"}')
    expected = {
        "missing.json": "--schema missing.json: no such file. Give the path of a JSON file",
        "bad.json": "--schema bad.json: not valid JSON (",
        "wrong.json": "--schema wrong.json: not a valid JSON Schema",
    }
    for name, message in expected.items():
        proc = cli("run", "count", "--schema", name, "--model", model)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.startswith(f"steward: {message}"), proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def test_a_resumed_run_keeps_its_own_schema(cli: Any, tmp_path: Path) -> None:
    (tmp_path / "s.json").write_text("{}")
    proc = cli("run", "--resume", "last", "--schema", "s.json")
    assert proc.returncode == 2 and "a resumed run keeps the schema it was started with" in proc.stderr
