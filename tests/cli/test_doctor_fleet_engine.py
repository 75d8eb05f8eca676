"""`steward doctor` says which engine is for a fleet: SQLite serves one machine, PostgreSQL a fleet."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest


def test_doctor_on_sqlite_names_postgresql_as_the_engine_for_fleets(cli: Any, tmp_path: Path) -> None:
    done = cli("doctor")
    assert "Traceback" not in done.stderr
    assert "PostgreSQL is the engine for a fleet of workers" in done.stdout
    assert "holds every other writer" in done.stdout


@pytest.mark.postgres
def test_doctor_on_postgresql_says_nothing_of_sqlite(cli: Any, tmp_path: Path) -> None:
    url = os.environ.get("STEWARD_TEST_POSTGRES_URL")
    if not url:
        pytest.skip("set STEWARD_TEST_POSTGRES_URL to run the PostgreSQL tests")
    done = cli("doctor", STEWARD_DB=url)
    assert "Traceback" not in done.stderr
    assert "SQLite serves one machine" not in done.stdout
