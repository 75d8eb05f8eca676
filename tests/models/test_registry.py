"""resolve_model: a ``provider:model`` string becomes the right Model, or a ConfigError naming the forms."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from steward.errors import ConfigError, ModelError
from steward.models.anthropic_messages import AnthropicModel
from steward.models.base import ModelRequest, UserMessage
from steward.models.openai_chat import OpenAIChatModel
from steward.models.registry import resolve_model
from steward.testing.fake_llm import FakeLLMServer, FakeReply

from .conftest import Closing

FORMS = "Use one of: anthropic:MODEL, ollama:MODEL, openai:MODEL, scripted:FILE."


def test_openai_spec_builds_an_openai_chat_model_named_by_the_spec() -> None:
    model = resolve_model("openai:gpt-4o-mini")
    assert isinstance(model, OpenAIChatModel)
    assert (model.name, model.model, model.provider) == ("openai:gpt-4o-mini", "gpt-4o-mini", "openai")


def test_anthropic_spec_builds_an_anthropic_model() -> None:
    model = resolve_model("anthropic:claude-sonnet-4-5")
    assert isinstance(model, AnthropicModel)
    assert (model.name, model.model) == ("anthropic:claude-sonnet-4-5", "claude-sonnet-4-5")


def test_options_reach_the_provider() -> None:
    model = resolve_model("openai:local", base_url="http://127.0.0.1:8000/v1", timeout=3.0, max_retries=1)
    assert isinstance(model, OpenAIChatModel)
    assert model.base_url == "http://127.0.0.1:8000/v1"


def test_model_names_may_contain_colons() -> None:
    model = resolve_model("ollama:qwen3:8b")
    assert isinstance(model, OpenAIChatModel)
    assert (model.name, model.model) == ("ollama:qwen3:8b", "qwen3:8b")


def test_ollama_defaults_to_the_local_openai_compatible_endpoint() -> None:
    model = resolve_model("ollama:llama3.2")
    assert isinstance(model, OpenAIChatModel)
    assert (model.provider, model.base_url) == ("ollama", "http://localhost:11434/v1")


def test_ollama_host_gets_a_scheme_and_the_v1_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OLLAMA_HOST", "gpu-box:11434")
    model = resolve_model("ollama:llama3.2")
    assert isinstance(model, OpenAIChatModel)
    assert model.base_url == "http://gpu-box:11434/v1"


def test_ollama_base_url_wins_over_ollama_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OLLAMA_HOST", "ignored:1")
    monkeypatch.setenv("OLLAMA_BASE_URL", "http://ollama.internal:80/v1/")
    model = resolve_model("ollama:llama3.2")
    assert isinstance(model, OpenAIChatModel)
    assert model.base_url == "http://ollama.internal:80/v1"


async def test_ollama_model_talks_openai_chat_with_the_ollama_key(
    server: FakeLLMServer, closing: Closing
) -> None:
    server.add(FakeReply(text="hi from ollama"))
    model = closing(resolve_model("ollama:llama3.2", base_url=server.openai_base_url, max_retries=0))
    response = await model.request(ModelRequest(system="", messages=[UserMessage("hi")]))
    assert response.message.text == "hi from ollama"
    assert server.requests[0].headers["authorization"] == "Bearer ollama"


async def test_ollama_errors_are_labelled_ollama(server: FakeLLMServer, closing: Closing) -> None:
    server.add(FakeReply.error(404))
    model = closing(resolve_model("ollama:nope", base_url=server.openai_base_url, max_retries=0))
    with pytest.raises(ModelError, match=r"^ollama: model 'nope' was not found .*--model ollama:NAME"):
        await model.request(ModelRequest(system="", messages=[UserMessage("hi")]))


async def test_scripted_spec_loads_the_script_file(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"text": "scripted hello"}]), encoding="utf-8")
    model = resolve_model(f"scripted:{script}")
    assert model.name == f"scripted:{script}"
    response = await model.request(ModelRequest(system="", messages=[UserMessage("hi")]))
    assert response.message.text == "scripted hello"


def test_unknown_provider_is_a_config_error_naming_the_forms() -> None:
    with pytest.raises(ConfigError) as caught:
        resolve_model("foo:bar")
    assert str(caught.value) == f"Unknown model provider 'foo' in 'foo:bar'. {FORMS}"


def test_spec_without_a_provider_is_a_config_error_naming_the_forms() -> None:
    with pytest.raises(ConfigError, match=rf"Model 'gpt-4o' names no provider\. {FORMS}"):
        resolve_model("gpt-4o")


def test_spec_without_a_model_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"'openai:' names no model"):
        resolve_model("openai:")


def test_resolving_a_model_imports_no_sdk() -> None:
    code = (
        "import sys; from steward.models.registry import resolve_model; "
        "resolve_model('openai:x'); resolve_model('anthropic:y'); resolve_model('ollama:z'); "
        "print(sorted(m for m in ('openai', 'anthropic', 'httpx2') if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.strip() == "[]"
