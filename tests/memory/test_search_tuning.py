"""``[memory]`` settings of search by meaning: checked when the configuration is read, and given
to the vector backend (the partition and HNSW tests run with lowered values)."""

from __future__ import annotations

from pathlib import Path

import pytest

from steward.config import load_config
from steward.errors import ConfigError
from steward.memory.vectors import Tuning


def _load(tmp_path: Path, memory: str) -> Tuning:
    (tmp_path / "steward.toml").write_text(f"[memory]\n{memory}\n")
    config = load_config(tmp_path, environ={}, user_file=tmp_path / "none.toml")
    return Tuning.of(config.memory)


def test_the_settings_reach_the_search(tmp_path: Path) -> None:
    assert _load(tmp_path, "") == Tuning()
    tuned = _load(
        tmp_path,
        "exact_limit = 50000\nprobe_share = 0.3\npgvector_exact_items = 500\n"
        "pgvector_exact_share = 0.1\npgvector_ef_factor = 4",
    )
    assert tuned == Tuning(
        exact_limit=50_000, probe_share=0.3, pg_exact_items=500, pg_exact_share=0.1, pg_ef_factor=4
    )


@pytest.mark.parametrize(
    ("line", "key"),
    [
        ("exact_limit = 10", "exact_limit"),
        ("probe_share = 0", "probe_share"),
        ("probe_share = 1.5", "probe_share"),
        ("pgvector_exact_share = 2", "pgvector_exact_share"),
        ("pgvector_ef_factor = 0", "pgvector_ef_factor"),
        ('exact_limit = "many"', "exact_limit"),
    ],
)
def test_a_value_out_of_range_is_named(tmp_path: Path, line: str, key: str) -> None:
    with pytest.raises(ConfigError) as failure:
        _load(tmp_path, line)
    assert f"memory.{key}" in str(failure.value) and "steward.toml" in str(failure.value)
