"""A `.steward` folder is made with a `.gitignore` that keeps it out of version control."""

from __future__ import annotations

from pathlib import Path

import pytest

from steward.state_dir import GITIGNORE, make_dir


def test_a_new_steward_folder_gets_a_gitignore_of_everything(tmp_path: Path) -> None:
    make_dir(tmp_path / "ws" / ".steward")
    ignore = tmp_path / "ws" / ".steward" / ".gitignore"
    assert ignore.read_text() == GITIGNORE
    assert ignore.read_text().splitlines()[-1] == "*"


def test_an_existing_folder_and_its_gitignore_are_left_as_they_are(tmp_path: Path) -> None:
    state = tmp_path / ".steward"
    state.mkdir()
    (state / ".gitignore").write_text("*\n!/skills/\n!/skills/**\n")
    make_dir(state)
    assert (state / ".gitignore").read_text() == "*\n!/skills/\n!/skills/**\n"


def test_other_folders_get_no_gitignore(tmp_path: Path) -> None:
    make_dir(tmp_path / "db")
    assert (tmp_path / "db").is_dir() and not (tmp_path / "db" / ".gitignore").exists()


def test_a_file_in_the_way_is_an_error_as_with_mkdir(tmp_path: Path) -> None:
    (tmp_path / ".steward").write_text("not a folder")
    with pytest.raises(FileExistsError):
        make_dir(tmp_path / ".steward")
