"""Tracing off (the default): not one OpenTelemetry module is imported, even by a whole run, a
worker's modules (FastAPI imports OpenTelemetry's API on its own: the server is not checked); and a bad [telemetry] section is a clear error."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from steward.config import Config, TelemetrySettings, load_config
from steward.errors import ConfigError
from steward.telemetry import describe
from steward.telemetry._export import headers, traces_url, where

_PROGRAM = """
import asyncio, sys
from steward import Agent
from steward.models.scripted import ScriptedModel
import steward.jobs.worker, steward.jobs.store, steward.cli.app  # what the CLI and a worker load

def lookup(key: str) -> str:
    '''Look a key up.

    Args:
        key: The key.
    '''
    return "value"

END = {"agent_step": {"phase": "end", "summary": "s", "end_status": "solved", "end_message": "ok"}}
model = ScriptedModel.from_data([{"tool": "lookup", "args": {"key": "a"}}, END])
agent = Agent(model, tools=[lookup], builtin_tools=False, sandbox=False)
result = asyncio.run(agent.run("look it up", workspace=sys.argv[1]))
assert result.solved, result
print(sorted(m for m in sys.modules if m.startswith("opentelemetry")))
"""


def test_a_whole_run_with_tracing_off_imports_no_opentelemetry_module(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _PROGRAM, str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_a_bad_endpoint_or_an_empty_service_name_names_the_fix(tmp_path: Path) -> None:
    (tmp_path / "steward.toml").write_text('[telemetry]\nenabled = true\nendpoint = "localhost:4318"\n')
    with pytest.raises(ConfigError, match=r"telemetry.endpoint' must be the collector's http:// or https://"):
        load_config(tmp_path, user_file=tmp_path / "none.toml")
    (tmp_path / "steward.toml").write_text('[telemetry]\nservice_name = " "\n')
    with pytest.raises(ConfigError, match="service_name' is empty"):
        load_config(tmp_path, user_file=tmp_path / "none.toml")
    (tmp_path / "steward.toml").write_text("[telemetry]\nenable = true\n")
    with pytest.raises(ConfigError, match="telemetry"):
        load_config(tmp_path, user_file=tmp_path / "none.toml")


def test_headers_come_from_the_variable_named_and_a_missing_one_says_so() -> None:
    settings = TelemetrySettings(enabled=True, headers_env="TRACE_HEADERS")
    with pytest.raises(ConfigError, match="headers_env names TRACE_HEADERS, which is not set"):
        headers(settings, {})
    assert headers(settings, {"TRACE_HEADERS": "api-key=a%2Cb, x-team = core"}) == {
        "api-key": "a,b",
        "x-team": "core",
    }
    with pytest.raises(ConfigError, match="key=value pairs"):
        headers(settings, {"TRACE_HEADERS": "just-a-token"})


def test_without_headers_env_opentelemetry_s_header_variables_are_read_and_checked_alike() -> None:
    on = TelemetrySettings(enabled=True)
    assert headers(on, {}) == {}
    assert headers(on, {"OTEL_EXPORTER_OTLP_HEADERS": "Authorization=Bearer%20t0ken"}) == {
        "authorization": "Bearer t0ken"
    }
    both = {"OTEL_EXPORTER_OTLP_HEADERS": "a=1", "OTEL_EXPORTER_OTLP_TRACES_HEADERS": "b=2"}
    assert headers(on, both) == {"b": "2"}  # the traces' own first, as OpenTelemetry's SDKs read them
    with pytest.raises(ConfigError, match="OTEL_EXPORTER_OTLP_HEADERS must hold key=value pairs"):
        headers(on, {"OTEL_EXPORTER_OTLP_HEADERS": "bad header"})
    said = where(on, {"OTEL_EXPORTER_OTLP_HEADERS": "a=1"})
    assert "headers from OTEL_EXPORTER_OTLP_HEADERS (1)" in said, said


def test_the_collector_is_the_configured_one_then_opentelemetry_s_variables_then_localhost() -> None:
    on = TelemetrySettings(enabled=True)
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/"}
    assert traces_url(on, {}) == ("http://localhost:4318/v1/traces", "the default")
    assert traces_url(on, env) == ("http://collector:4318/v1/traces", "OTEL_EXPORTER_OTLP_ENDPOINT")
    whole = env | {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://other:9/traces"}
    assert traces_url(on, whole) == ("http://other:9/traces", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    mine = TelemetrySettings(enabled=True, endpoint="https://otel.example.com")
    assert traces_url(mine, whole) == ("https://otel.example.com/v1/traces", "[telemetry] endpoint")


def test_doctor_says_whether_runs_are_traced_and_where_spans_go() -> None:
    assert describe(Config()).startswith("off")
    on = Config(telemetry=TelemetrySettings(enabled=True, endpoint="http://127.0.0.1:4318"))
    assert describe(on, {}).startswith(
        "on: OTLP/HTTP to http://127.0.0.1:4318/v1/traces (from [telemetry] endpoint"
    )
    missing = Config(telemetry=TelemetrySettings(enabled=True, headers_env="NOPE"))
    assert describe(missing, {}).startswith("ON but cannot send: [telemetry] headers_env names NOPE")


_WITHOUT_EXTRA = """
import asyncio, sys
for name in ("opentelemetry", "opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http"):
    sys.modules[name] = None  # as if the otel extra were not installed
from steward import Agent
from steward.config import Config, TelemetrySettings
from steward.errors import ConfigError
from steward.models.scripted import ScriptedModel
from steward.telemetry import describe

config = Config(telemetry=TelemetrySettings(enabled=True))
print(describe(config))
agent = Agent(ScriptedModel.from_data([{"text": "hi"}]), builtin_tools=False, config=config, sandbox=False)
try:
    agent.start("say hi", workspace=sys.argv[1])
except ConfigError as exc:
    print(exc)
"""


def test_tracing_on_without_the_otel_extra_is_a_config_error_naming_the_install(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_EXTRA, str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    doctor, error = done.stdout.strip().splitlines()
    assert doctor == "ON but cannot send: " + error
    assert (
        error
        == "[telemetry] enabled needs OpenTelemetry: pip install 'steward[otel]' (or set enabled = false)"
    )
