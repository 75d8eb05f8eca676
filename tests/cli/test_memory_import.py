"""`steward memory import`: an export read back into another store, on both engines; bad lines
are named and nothing is half-imported."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from steward.memory.longterm import LongTermMemory, Scope
from steward.store.events import open_store

from .conftest import Cli


async def _seed(url: str) -> None:
    """Items in two scopes: tagged, expiring, merged twice, hidden."""
    async with await open_store(url) as store:
        memory = LongTermMemory(store.engine, clock=lambda: 1_700_000_000.0)
        home, review = Scope("local", "", "/projects/app"), Scope("ada", "reviewer", "/elsewhere")
        await memory.remember(home, "The staging database listens on port 6543.", tags=["db", "infra"])
        await memory.remember(home, "the staging database listens on port 6543.")
        await memory.remember(home, "Release notes go in CHANGES.md", kind="rule", session_id="s1")
        await memory.remember(review, "Reviews need two approvals.", run_id="r9", ttl_s=3600)
        hidden = await memory.remember(review, "An old password hint")
        await memory.forget(None, hidden.item.id)


def _export(cli: Cli, url: str, path: Path) -> list[dict[str, Any]]:
    done = cli("memory", "export", "--store", url, "--hidden", "-o", str(path))
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in path.read_text().splitlines()]


def _without_ids(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(({k: v for k, v in item.items() if k != "id"} for item in items), key=lambda i: i["text"])


def _round_trip(cli: Cli, source: str, target: str, tmp_path: Path) -> None:
    asyncio.run(_seed(source))
    before = _export(cli, source, tmp_path / "before.jsonl")
    done = cli("memory", "import", str(tmp_path / "before.jsonl"), "--store", target)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"imported 4 item(s) from {tmp_path / 'before.jsonl'}"
    after = _export(cli, target, tmp_path / "after.jsonl")
    assert len(after) == 4 and _without_ids(after) == _without_ids(before)
    assert [i["text"] for i in after] == [i["text"] for i in before]  # the same order: oldest first


def test_an_export_imports_into_an_empty_store_as_the_same_items(
    cli: Cli, db_url: str, tmp_path: Path
) -> None:
    _round_trip(cli, f"sqlite:///{tmp_path}/source/steward.db", db_url, tmp_path)


def test_an_export_of_each_engine_imports_into_sqlite(cli: Cli, db_url: str, tmp_path: Path) -> None:
    _round_trip(cli, db_url, f"sqlite:///{tmp_path}/target/steward.db", tmp_path)


def test_importing_the_same_export_again_merges_visible_items(cli: Cli, db_url: str, tmp_path: Path) -> None:
    asyncio.run(_seed(db_url))
    before = _export(cli, db_url, tmp_path / "all.jsonl")
    again = cli("memory", "import", str(tmp_path / "all.jsonl"), "--store", db_url)
    assert again.returncode == 0, again.stderr
    # The hidden and the expired item are copied as they are; the two visible ones merge.
    assert "(2 merged into items with the same text)" in again.stdout
    after = _export(cli, db_url, tmp_path / "after.jsonl")
    assert len(after) == len(before) + 2
    port = next(i for i in after if i["text"].startswith("The staging"))
    assert port["merged"] == 4 and port["tags"] == ["db", "infra"]


def test_a_bad_line_is_named_and_nothing_is_imported(cli: Cli, db_url: str, tmp_path: Path) -> None:
    asyncio.run(_seed(db_url))
    good = _export(cli, db_url, tmp_path / "good.jsonl")[0]
    target = f"sqlite:///{tmp_path}/target/steward.db"
    cases = {
        "not json": "line 2: not JSON",
        json.dumps({**good, "text": "  "}): 'line 2: "text" is empty',
        json.dumps(
            {**good, "scope": {"user": "a", "persona": ""}}
        ): 'line 2: "scope.workspace" must be a string',
        json.dumps({**good, "created_at": "yesterday"}): 'line 2: "created_at" must be a time',
        json.dumps({**good, "merged": 0}): 'line 2: "merged" must be a whole number',
        json.dumps([1, 2]): "line 2: expected a JSON object",
    }
    for bad, message in cases.items():
        path = tmp_path / "bad.jsonl"
        path.write_text(json.dumps(good) + "\n" + bad + "\n")
        done = cli("memory", "import", str(path), "--store", target)
        assert done.returncode == 2, (bad, done.stdout)
        assert message in done.stderr and "nothing was imported" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
    listed = cli("memory", "list", "--store", target, "--hidden")
    assert listed.stdout.startswith("nothing remembered"), listed.stdout


def test_a_missing_file_names_the_fix(cli: Cli, tmp_path: Path) -> None:
    done = cli("memory", "import", str(tmp_path / "nope.jsonl"), "--store", f"sqlite:///{tmp_path}/s.db")
    assert done.returncode == 2 and "cannot read" in done.stderr and "export -o" in done.stderr
    assert not (tmp_path / "s.db").exists()


def test_an_import_keeps_the_scope_out_of_other_scopes_recall(cli: Cli, db_url: str, tmp_path: Path) -> None:
    path = tmp_path / "one.jsonl"
    item = {
        "id": 7,
        "scope": {"user": "eve", "persona": "", "workspace": str(tmp_path.resolve())},
        "kind": "fact",
        "text": "the launch code is swordfish",
        "tags": [],
        "run_id": None,
        "session_id": None,
        "created_at": 1.0,
        "updated_at": 1.0,
        "expires_at": None,
        "hidden_at": None,
        "merged": 1,
    }
    path.write_text(json.dumps(item) + "\n")
    assert cli("memory", "import", str(path), "--store", db_url).returncode == 0
    mine = cli("memory", "search", "launch code swordfish", "--store", db_url)
    assert mine.stdout.startswith("nothing remembered matches")  # the local user's scope here
    theirs = cli("memory", "search", "launch code swordfish", "--store", db_url, "--user", "eve")
    assert "swordfish" in theirs.stdout
