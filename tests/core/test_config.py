"""Layered configuration with errors that name the file, the key and what is allowed."""

from __future__ import annotations

from pathlib import Path

import pytest

from steward.config import load_config
from steward.errors import ConfigError


@pytest.fixture
def home(tmp_path: Path) -> Path:
    user = tmp_path / "user.toml"
    user.write_text('model = "openai:from-user"\n[limits]\nmax_steps = 7\nbash_timeout_s = 9\n')
    return user


def test_defaults_without_any_file(tmp_path: Path) -> None:
    config = load_config(tmp_path, environ={}, user_file=tmp_path / "none.toml")
    assert config.model is None
    assert config.limits.max_steps == 50 and config.limits.request_token_budget == 32_000


def test_layers_merge_in_order(tmp_path: Path, home: Path) -> None:
    (tmp_path / "steward.toml").write_text('model = "anthropic:from-project"\n[limits]\nmax_steps = 8\n')
    config = load_config(tmp_path, environ={}, user_file=home)
    assert config.model == "anthropic:from-project"
    assert config.limits.max_steps == 8 and config.limits.bash_timeout_s == 9
    config = load_config(tmp_path, environ={"STEWARD_MODEL": "ollama:env"}, user_file=home)
    assert config.model == "ollama:env"
    config = load_config(
        tmp_path, environ={"STEWARD_MODEL": "ollama:env"}, user_file=home, overrides={"model": "openai:flag"}
    )
    assert config.model == "openai:flag"


def test_steward_config_names_an_extra_file(tmp_path: Path) -> None:
    extra = tmp_path / "extra.toml"
    extra.write_text("[limits]\nmax_steps = 3\n")
    config = load_config(tmp_path, environ={"STEWARD_CONFIG": str(extra)}, user_file=tmp_path / "none")
    assert config.limits.max_steps == 3
    with pytest.raises(ConfigError, match="STEWARD_CONFIG names"):
        load_config(tmp_path, environ={"STEWARD_CONFIG": str(tmp_path / "missing.toml")})


def test_unknown_key_names_file_key_and_allowed(tmp_path: Path) -> None:
    (tmp_path / "steward.toml").write_text("[limits]\nmax_stepz = 3\n")
    with pytest.raises(ConfigError) as err:
        load_config(tmp_path, environ={}, user_file=tmp_path / "none")
    message = str(err.value)
    assert "steward.toml" in message and "unknown key 'limits.max_stepz'" in message
    assert "max_steps" in message


def test_out_of_range_value_is_explained(tmp_path: Path) -> None:
    (tmp_path / "steward.toml").write_text("[limits]\nmax_steps = 0\n")
    with pytest.raises(ConfigError, match=r"'limits.max_steps'.*greater than or equal to 1"):
        load_config(tmp_path, environ={}, user_file=tmp_path / "none")


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (
            '[memory]\nttl_days = "30d"\n',
            "'memory.ttl_days' must be a number, written without quotes: ttl_days = 30",
        ),
        (
            '[budget]\nwarn_at = "80%"\n',
            "'budget.warn_at' must be a number, written without quotes: warn_at = 0.8",
        ),
        ('[limits]\nrun_timeout_s = "10m"\n', "written without quotes: run_timeout_s = 600 (got '10m')"),
        (
            '[limits]\nmax_steps = "fifty"\n',
            "'limits.max_steps' must be a whole number, written without quotes",
        ),
    ],
)
def test_a_number_written_as_text_says_what_to_write(tmp_path: Path, text: str, said: str) -> None:
    (tmp_path / "steward.toml").write_text(text)
    with pytest.raises(ConfigError) as wrong:
        load_config(tmp_path, environ={}, user_file=tmp_path / "none")
    assert said in str(wrong.value) and "Input should be" not in str(wrong.value)


def test_unknown_provider_section(tmp_path: Path) -> None:
    (tmp_path / "steward.toml").write_text('[models.gemini]\nbase_url = "x"\n')
    with pytest.raises(
        ConfigError, match=r"unknown provider section.*gemini.*allowed: anthropic, ollama, openai"
    ):
        load_config(tmp_path, environ={}, user_file=tmp_path / "none")


def test_invalid_toml_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "steward.toml").write_text("model = \n")
    with pytest.raises(ConfigError, match=r"steward.toml: not valid TOML"):
        load_config(tmp_path, environ={}, user_file=tmp_path / "none")


def test_provider_settings(tmp_path: Path) -> None:
    (tmp_path / "steward.toml").write_text(
        '[models.openai]\nbase_url = "http://127.0.0.1:9/v1"\nmax_retries = 1\n'
    )
    config = load_config(tmp_path, environ={}, user_file=tmp_path / "none")
    assert config.models["openai"].base_url == "http://127.0.0.1:9/v1"
    assert config.models["openai"].max_retries == 1


def test_a_script_named_in_a_config_file_is_found_next_to_it(tmp_path: Path) -> None:
    (tmp_path / "steward.toml").write_text('model = "scripted:scripts/demo.yaml"\n')
    config = load_config(tmp_path, environ={}, user_file=tmp_path / "none")
    assert config.model == f"scripted:{tmp_path / 'scripts' / 'demo.yaml'}"


def test_a_non_utf8_config_file_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "steward.toml").write_bytes(b'model = "\xff\xfe"\n')
    with pytest.raises(ConfigError, match=r"steward.toml: not valid TOML \(UTF-8\)"):
        load_config(tmp_path, environ={}, user_file=tmp_path / "none")
