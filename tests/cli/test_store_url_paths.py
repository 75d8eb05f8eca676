"""Where a relative SQLite path in a store URL points: a config file's folder for ``[store] url``
in that file, the current directory for ``STEWARD_DB``; ``sqlite:////abs`` is absolute."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from steward.config import anchored_store_url, load_config


def model(tmp_path: Path) -> str:
    path = tmp_path / "s.yaml"
    end = {"phase": "end", "summary": "done", "end_status": "solved", "end_message": "done"}
    path.write_text(yaml.safe_dump([{"agent_step": end}]))
    return f"scripted:{path}"


@pytest.mark.parametrize(
    ("url", "where"),
    [
        ("sqlite:///db/x.db", "db/x.db"),
        ("sqlite:///./db/x.db", "db/x.db"),
        ("sqlite+aiosqlite:///db/x.db", "db/x.db"),
        ("sqlite:///../shared/x.db", "../shared/x.db"),
    ],
)
def test_a_relative_path_in_a_workspace_config_is_under_that_workspace_wherever_steward_runs(
    cli: Any, tmp_path: Path, url: str, where: str
) -> None:
    ws, elsewhere = tmp_path / "a" / "ws", tmp_path / "elsewhere"
    ws.mkdir(parents=True)
    elsewhere.mkdir()
    (ws / "steward.toml").write_text(f'[store]\nurl = "{url}"\n')
    ran = cli("run", "say done", "--model", model(tmp_path), "-w", "../a/ws", cwd=elsewhere)
    assert ran.returncode == 0, ran.stderr
    assert (ws / where).resolve().is_file()
    assert not list(elsewhere.rglob("*.db")) and not (tmp_path / "shared").exists()
    listed = cli("runs", "list", cwd=ws)  # from the workspace itself: the same store
    assert "say done" in listed.stdout, listed.stderr


def test_a_relative_path_in_the_user_config_is_next_to_that_file(cli: Any, tmp_path: Path) -> None:
    home = tmp_path / "config-home" / "steward"
    home.mkdir(parents=True)
    (home / "config.toml").write_text('[store]\nurl = "sqlite:///runs.db"\n')
    (tmp_path / "ws").mkdir()
    ran = cli("run", "say done", "--model", model(tmp_path), "-w", "ws")
    assert ran.returncode == 0, ran.stderr
    assert (home / "runs.db").is_file()


def test_steward_db_is_relative_to_the_current_directory(cli: Any, tmp_path: Path) -> None:
    ws, here = tmp_path / "ws", tmp_path / "here"
    ws.mkdir()
    here.mkdir()
    (ws / "steward.toml").write_text('[store]\nurl = "sqlite:///db/x.db"\n')  # the environment wins
    ran = cli(
        "run", "say done", "--model", model(tmp_path), "-w", str(ws), cwd=here, STEWARD_DB="sqlite:///r.db"
    )
    assert ran.returncode == 0, ran.stderr
    assert (here / "r.db").is_file() and not (ws / "db").exists()
    listed = cli("runs", "list", "-w", str(ws), cwd=here, STEWARD_DB="sqlite:///r.db")
    assert "say done" in listed.stdout


def test_four_slashes_and_other_databases_are_left_as_written(tmp_path: Path) -> None:
    assert anchored_store_url("sqlite:////var/x.db", tmp_path) == "sqlite:////var/x.db"
    pg = "postgresql://u@h:5432/db"
    assert anchored_store_url(pg, tmp_path) == pg
    assert anchored_store_url("sqlite:///x.db?mode=ro", tmp_path) == f"sqlite:///{tmp_path}/x.db?mode=ro"
    (tmp_path / "steward.toml").write_text('[store]\nurl = "sqlite:///state/s.db"\n')
    config = load_config(tmp_path, environ={}, user_file=tmp_path / "none.toml")
    assert config.store.url == f"sqlite:///{tmp_path}/state/s.db"
