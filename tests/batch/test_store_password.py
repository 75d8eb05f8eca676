"""A store's password never goes into the batch's directory; a resumed batch asks for it."""

from __future__ import annotations

import pytest
import typer

from steward.cli.batch import _kept_store, _without_password


def test_the_manifest_keeps_the_store_without_its_password() -> None:
    kept = _without_password("postgresql://steward:s3cret@db.example:5432/runs")
    assert "s3cret" not in kept
    assert kept.startswith("postgresql://steward:")
    assert _without_password("sqlite:///tmp/x.db") == "sqlite:///tmp/x.db"


def test_resuming_without_the_password_names_the_flag(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("STEWARD_DB", raising=False)
    kept = _without_password("postgresql://steward:s3cret@db.example:5432/runs")
    with pytest.raises(typer.Exit):
        _kept_store(kept)
    assert "its password is not kept in batch.json): pass --store URL" in capsys.readouterr().err
    monkeypatch.setenv("STEWARD_DB", "postgresql://steward:s3cret@db.example:5432/runs")
    assert _kept_store(kept) == "postgresql://steward:s3cret@db.example:5432/runs"
    assert _kept_store("sqlite:///tmp/x.db") == "sqlite:///tmp/x.db"
