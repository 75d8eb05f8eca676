"""The store's redaction follows the configuration as the user edits it: a value handed to a
process by a setting added while a server runs is a secret in what is recorded from then on."""

from __future__ import annotations

from pathlib import Path

import pytest

from steward.safety.secrets.watches import StoreRedaction

TOKEN = "tok-9f8e7d6c5b4a39281706"


@pytest.fixture(autouse=True)
def own_config_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config-home"))
    monkeypatch.delenv("STEWARD_CONFIG", raising=False)


def test_a_secret_added_to_the_configuration_later_is_redacted_from_then_on(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    store = StoreRedaction()
    assert TOKEN in store(str(workspace))(f"the server said {TOKEN}")  # nothing says it is a secret yet
    (workspace / "steward.toml").write_text(
        f'[mcp_servers.tracker]\ncommand = "tracker"\nenv = {{ API_TOKEN = "{TOKEN}" }}\n'
    )
    assert TOKEN not in store(str(workspace))(f"the server said {TOKEN}")


def test_the_user_configuration_counts_too(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    store = StoreRedaction()
    assert TOKEN in store(str(workspace))(TOKEN)
    user = tmp_path / "config-home" / "steward" / "config.toml"
    user.parent.mkdir(parents=True)
    user.write_text(f'[mcp_servers.tracker]\ncommand = "tracker"\nenv = {{ API_TOKEN = "{TOKEN}" }}\n')
    assert TOKEN not in store(str(workspace))(TOKEN)
