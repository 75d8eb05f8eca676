"""Switches (boolean settings) take TOML's true and false only, in every section."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

from steward import config as config_module
from steward.config import load_config
from steward.errors import ConfigError


def _switches() -> list[tuple[str, str]]:
    """Every boolean setting as (TOML section, key), found from the configuration's own types."""
    found = []
    for section, kind in sorted(config_module._SECTIONS.items()):
        header = {"": "", "mcp_servers": "mcp_servers.docs"}.get(section, section)
        found += [(header, f.name) for f in fields(kind) if isinstance(f.default, bool)]
    return found


SWITCHES = _switches()


def _toml(section: str, key: str, value: str) -> str:
    server = 'command = "docs-server"\n' if section.startswith("mcp_servers") else ""
    return f"[{section}]\n{server}{key} = {value}\n" if section else f"{key} = {value}\n"


def _load(tmp_path: Path) -> Any:
    return load_config(tmp_path, environ={}, user_file=tmp_path / "none.toml")


def test_the_switches_found_include_those_of_every_section() -> None:
    assert ("sandbox", "enabled") in SWITCHES and ("mcp_servers.docs", "network") in SWITCHES
    assert {section for section, _ in SWITCHES} >= {
        "limits", "memory", "policy", "sandbox", "checkpoints", "rules", "mcp_servers.docs",
    }  # fmt: skip


def test_sandbox_enabled_no_names_the_file_the_key_and_what_is_allowed(tmp_path: Path) -> None:
    (tmp_path / "steward.toml").write_text('[sandbox]\nenabled = "no"\n')
    with pytest.raises(ConfigError) as err:
        _load(tmp_path)
    message = str(err.value)
    assert str(tmp_path / "steward.toml") in message
    assert "'sandbox.enabled' must be true or false (without quotes), got 'no'" in message


@pytest.mark.parametrize(("section", "key"), SWITCHES)
@pytest.mark.parametrize("value", ['"no"', '"false"', '"true"', "0", "1"])
def test_a_switch_written_as_a_string_or_number_is_refused(
    tmp_path: Path, section: str, key: str, value: str
) -> None:
    (tmp_path / "steward.toml").write_text(_toml(section, key, value))
    where = f"{section}.{key}" if section else key
    with pytest.raises(ConfigError, match=rf"'{where}' must be true or false"):
        _load(tmp_path)


@pytest.mark.parametrize(("section", "key"), SWITCHES)
def test_a_switch_takes_true_and_false(tmp_path: Path, section: str, key: str) -> None:
    for value in ("true", "false"):
        (tmp_path / "steward.toml").write_text(_toml(section, key, value))
        loaded = _load(tmp_path)
        owner = loaded.mcp_servers["docs"] if section.startswith("mcp_servers") else getattr(loaded, section)
        assert getattr(owner, key) is (value == "true")


def test_the_command_line_still_turns_switches_off(tmp_path: Path) -> None:
    overrides = {"sandbox": {"enabled": False}, "policy": {"write": False}}
    config = load_config(tmp_path, environ={}, user_file=tmp_path / "none.toml", overrides=overrides)
    assert config.sandbox.enabled is False and config.policy.write is False
