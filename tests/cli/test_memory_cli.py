"""`steward memory list|search|show|forget|export` against a real store, on both engines."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from steward.config import MemorySettings
from steward.memory.longterm import LongTermMemory, Scope
from steward.store.events import open_store

from .conftest import Cli


async def _seed(url: str, workspace: Path) -> dict[str, int]:
    """Three items in three scopes; returns their ids by a short name."""
    here = str(workspace.resolve())
    async with await open_store(url) as store:
        memory = LongTermMemory(store.engine)
        ids = {}
        ids["port"] = (await memory.remember(Scope("local", "", here), "The staging database listens on port 6543.",
                                             tags=["db"])).item.id  # fmt: skip
        ids["ada"] = (
            await memory.remember(Scope("ada", "", here), "Ada prefers the staging database in UTC.")
        ).item.id
        ids["other"] = (
            await memory.remember(Scope("local", "reviewer", "/elsewhere"), "Reviews need two approvals.")
        ).item.id
        return ids


@pytest.fixture
def seeded(db_url: str, tmp_path: Path) -> dict[str, int]:
    return asyncio.run(_seed(db_url, tmp_path))


def test_list_spans_every_scope_newest_first_and_narrows(
    cli: Cli, db_url: str, seeded: dict[str, int]
) -> None:
    listed = cli("memory", "list", "--store", db_url)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert [line.split()[0] for line in lines] == [f"m{seeded[n]}" for n in ("other", "ada", "port")]
    assert "local/reviewer" in lines[0] and "[/elsewhere]" in lines[0]
    only_ada = cli("memory", "list", "--store", db_url, "--user", "ada").stdout.splitlines()
    assert len(only_ada) == 1 and "Ada prefers" in only_ada[0]
    facts = cli("memory", "list", "--store", db_url, "--kind", "session_summary")
    assert facts.stdout.strip() == "no memories match"


def test_a_kind_no_item_has_names_the_kinds(cli: Cli, db_url: str, seeded: dict[str, int]) -> None:
    for command in ("list", "export"):
        wrong = cli("memory", command, "--store", db_url, "--kind", "bogus")
        assert wrong.returncode == 2 and wrong.stdout == ""
        assert (
            wrong.stderr.strip()
            == "steward: --kind 'bogus': no memory is of that kind; kinds: fact, session_summary, turns"
        )


def test_search_keeps_to_one_scope_this_folder_by_default(
    cli: Cli, db_url: str, seeded: dict[str, int], tmp_path: Path
) -> None:
    found = cli("memory", "search", "staging database", "--store", db_url)
    assert found.returncode == 0, found.stderr
    # The local user's item of this folder; never Ada's, which shares the words.
    assert found.stdout.splitlines() == [
        f"m{seeded['port']} ({found.stdout.split('(')[1].split(',')[0]}, tags: db): "
        "The staging database listens on port 6543."
    ]
    ada = cli("memory", "search", "staging database", "--store", db_url, "--user", "ada")
    assert ada.stdout.startswith(f"m{seeded['ada']} (") and "port 6543" not in ada.stdout
    nobody = cli("memory", "search", "staging database", "--store", db_url, "--user", "grace")
    assert nobody.stdout.startswith("nothing remembered matches 'staging database' for grace/-")


def test_search_explain_shows_the_ranks_and_score(cli: Cli, db_url: str, seeded: dict[str, int]) -> None:
    shown = cli("memory", "search", "database port", "--explain", "--store", db_url)
    assert shown.returncode == 0, shown.stderr
    head, columns, row = shown.stdout.splitlines()
    assert head.startswith("recall by words only (no embedder); scope local/- in ")
    assert columns.split() == ["id", "keyword", "vector", "fused", "similar", "text"]
    cells = row.split()
    settings = MemorySettings()  # keyword rank 1 alone: its weighted share of the fusion
    assert cells[:3] == [f"m{seeded['port']}", "1", "-"] and float(cells[3]) == pytest.approx(
        settings.keyword_weight / (settings.rrf_k + 1), abs=1e-4
    )
    assert cells[4] == "-" and row.endswith("The staging database listens on port 6543.")


def test_show_prints_the_whole_item(cli: Cli, db_url: str, seeded: dict[str, int]) -> None:
    shown = cli("memory", "show", f"m{seeded['port']}", "--store", db_url)
    assert shown.returncode == 0, shown.stderr
    first = shown.stdout.splitlines()[0]
    assert first.startswith(f"m{seeded['port']} · fact · local/- · ")
    assert "tags: db" in shown.stdout and shown.stdout.rstrip().endswith("listens on port 6543.")


def test_list_hidden_says_which_items_are_hidden_and_which_expired(
    cli: Cli, db_url: str, seeded: dict[str, int], tmp_path: Path
) -> None:
    async def expired() -> int:
        async with await open_store(db_url) as store:
            an_hour_ago = LongTermMemory(store.engine, clock=lambda: time.time() - 3600)
            scope = Scope("local", "", str(tmp_path.resolve()))
            return (await an_hour_ago.remember(scope, "A note kept for a minute.", ttl_s=60)).item.id

    gone = asyncio.run(expired())
    assert cli("memory", "forget", f"m{seeded['port']}", "--store", db_url).returncode == 0
    assert f"m{gone} " not in cli("memory", "list", "--store", db_url).stdout
    lines = {
        line.split()[0]: line
        for line in cli("memory", "list", "--hidden", "--store", db_url).stdout.splitlines()
    }
    assert " expired A note kept" in lines[f"m{gone}"]
    assert " hidden The staging database" in lines[f"m{seeded['port']}"]
    assert " hidden" not in lines[f"m{seeded['ada']}"] and " expired" not in lines[f"m{seeded['ada']}"]
    assert "(expired: never recalled)" in cli("memory", "show", f"m{gone}", "--store", db_url).stdout


def test_an_unknown_id_is_one_line_naming_the_fix(cli: Cli, db_url: str, seeded: dict[str, int]) -> None:
    for command in (("show", "m99999"), ("forget", "99999"), ("show", "banana")):
        done = cli("memory", *command, "--store", db_url)
        assert done.returncode == 2
        assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert "no memory m99999 in this store" in cli("memory", "show", "m99999", "--store", db_url).stderr
    assert "'banana' is not a memory id" in cli("memory", "show", "banana", "--store", db_url).stderr


def test_forget_hides_and_purge_asks_first(cli: Cli, db_url: str, seeded: dict[str, int]) -> None:
    ref = f"m{seeded['port']}"
    hidden = cli("memory", "forget", ref, "--store", db_url)
    assert hidden.returncode == 0 and hidden.stdout.startswith(f"hid {ref}: it is kept but never recalled")
    assert ref not in cli("memory", "list", "--store", db_url).stdout
    assert f"{ref} " in cli("memory", "list", "--hidden", "--store", db_url).stdout
    assert "nothing remembered matches" in cli("memory", "search", "port 6543", "--store", db_url).stdout
    refused = cli("memory", "forget", ref, "--purge", "--store", db_url, stdin="n\n")
    assert refused.returncode == 1 and "kept: nothing was deleted" in refused.stdout
    assert cli("memory", "show", ref, "--store", db_url).returncode == 0
    purged = cli("memory", "forget", ref, "--purge", "--yes", "--store", db_url)
    assert purged.returncode == 0 and purged.stdout.startswith(f"purged {ref}")
    assert cli("memory", "show", ref, "--store", db_url).returncode == 2


def test_purge_with_no_one_to_answer_keeps_the_item_and_names_yes(
    cli: Cli, db_url: str, seeded: dict[str, int]
) -> None:
    ref = f"m{seeded['port']}"
    unanswered = cli("memory", "forget", ref, "--purge", "--store", db_url, stdin="")  # a script, a pipe
    assert unanswered.returncode == 1 and "kept: nothing was deleted" in unanswered.stdout
    assert "--yes" in unanswered.stdout and "Aborted" not in unanswered.stdout + unanswered.stderr
    assert cli("memory", "show", ref, "--store", db_url).returncode == 0


def test_export_writes_every_field_as_json_lines(
    cli: Cli, db_url: str, seeded: dict[str, int], tmp_path: Path
) -> None:
    target = tmp_path / "memory.jsonl"
    done = cli("memory", "export", "-o", str(target), "--store", db_url)
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == f"exported 3 item(s) to {target}"
    rows = [json.loads(line) for line in target.read_text().splitlines()]
    assert [r["id"] for r in rows] == [seeded[n] for n in ("other", "ada", "port")]
    assert set(rows[2]) == {
        "id", "scope", "kind", "text", "tags", "run_id", "session_id", "created_at", "updated_at",
        "expires_at", "hidden_at", "merged",
    }  # fmt: skip
    assert rows[2]["scope"] == {"user": "local", "persona": "", "workspace": str(tmp_path.resolve())}
    assert rows[2]["tags"] == ["db"] and rows[2]["merged"] == 1
    to_stdout = cli("memory", "export", "--user", "ada", "--store", db_url)
    assert [json.loads(line)["text"] for line in to_stdout.stdout.splitlines()] == [
        "Ada prefers the staging database in UTC."
    ]


def test_a_bad_store_url_or_a_missing_store_is_one_line(cli: Cli) -> None:
    bad = cli("memory", "list", "--store", "mongodb://x")
    assert bad.returncode == 2 and bad.stderr.startswith(
        "steward: store url scheme 'mongodb' is not supported"
    )
    assert "Traceback" not in bad.stderr
    empty = cli("memory", "list")
    assert empty.returncode == 0 and empty.stdout.startswith("nothing remembered here yet (no store at ")
    asked = cli("memory", "show", "m1")
    assert asked.returncode == 2 and "no store at" in asked.stderr
    exported = cli("memory", "export")  # `> memory.jsonl` gets no line that is not an item
    assert exported.returncode == 0 and exported.stdout == "" and "no store at" in exported.stderr


def test_search_uses_the_configured_embedder(
    cli: Cli, db_url: str, seeded: dict[str, int], tmp_path: Path
) -> None:
    from steward.testing.fake_llm import FakeLLMServer

    with FakeLLMServer() as embeddings:
        (tmp_path / "steward.toml").write_text(
            f'[memory]\nembedder = "openai:hash-embed"\n[models.openai]\nbase_url = "{embeddings.openai_base_url}"\n'
        )
        shown = cli("memory", "search", "database port", "--explain", "--store", db_url)
        assert embeddings.embedding_requests  # the items, then the query, over a socket
    assert shown.returncode == 0, shown.stderr
    head, _, row = shown.stdout.splitlines()[:3]
    assert head.startswith("recall by words and meaning")
    cells = row.split()
    assert cells[:3] == [f"m{seeded['port']}", "1", "1"] and 0 < float(cells[4]) <= 1


def test_search_explain_says_when_the_embedder_failed_and_only_words_ranked(
    cli: Cli, db_url: str, seeded: dict[str, int], tmp_path: Path
) -> None:
    from steward.testing.fake_llm import FakeLLMServer

    with FakeLLMServer() as embeddings:
        embeddings.fail_embeddings(10, 401)  # a refused key: no retry
        (tmp_path / "steward.toml").write_text(
            f'[memory]\nembedder = "openai:hash-embed"\n[models.openai]\nbase_url = "{embeddings.openai_base_url}"\n'
        )
        shown = cli("memory", "search", "database port", "--explain", "--store", db_url)
    assert shown.returncode == 0, shown.stderr
    head, _, row = shown.stdout.splitlines()[:3]
    assert head.startswith("recall by words only: the embedder failed"), head
    assert "recall by meaning is off for this query" in shown.stderr
    assert row.split()[:3] == [f"m{seeded['port']}", "1", "-"]
