"""Fixtures for provider tests: a clean environment, a loopback fake server, closed models."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

import pytest

from steward.models.anthropic_messages import AnthropicModel
from steward.models.base import (
    Model,
    ModelRequest,
    ModelResponse,
    Notice,
    Retrying,
    StreamItem,
    TextDelta,
    ThinkingDelta,
)
from steward.models.openai_chat import OpenAIChatModel
from steward.testing.fake_llm import FakeLLMServer

_PROVIDER_ENV = (
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "OPENAI_ADMIN_KEY",
    "OPENAI_ORG_ID",
    "OPENAI_PROJECT_ID",
    "OPENAI_CUSTOM_HEADERS",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_PROFILE",
    "ANTHROPIC_CONFIG_DIR",
    "ANTHROPIC_CUSTOM_HEADERS",
    "ANTHROPIC_FEDERATION_RULE_ID",
    "ANTHROPIC_ORGANIZATION_ID",
    "ANTHROPIC_IDENTITY_TOKEN",
    "ANTHROPIC_IDENTITY_TOKEN_FILE",
    "OLLAMA_BASE_URL",
    "OLLAMA_HOST",
)

M = TypeVar("M", bound=Model)


class Closing(Protocol):
    """The ``closing`` fixture: registers a model to be closed after the test and returns it."""

    def __call__(self, model: M, /) -> M: ...


MakeOpenAI = Callable[..., OpenAIChatModel]
MakeAnthropic = Callable[..., AnthropicModel]


@pytest.fixture(autouse=True)
def _clean_provider_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Keys, base URLs and credential profiles of the developer's shell must not leak in."""
    for name in _PROVIDER_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # the anthropic SDK looks for profiles under ~/.config


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as fake:
        yield fake
    leftover = [
        t.name for t in threading.enumerate() if "FakeLLMServer" in t.name or "process_request" in t.name
    ]
    assert not leftover, f"FakeLLMServer left threads running: {leftover}"


@pytest.fixture
async def closing() -> AsyncIterator[Closing]:
    """Register models to be closed after the test (their HTTP clients hold sockets)."""
    models: list[Model] = []

    def register(model: M, /) -> M:
        models.append(model)
        return model

    yield register
    for model in models:
        await model.aclose()


@pytest.fixture
def make_openai(server: FakeLLMServer, closing: Closing) -> MakeOpenAI:
    def make(**options: Any) -> OpenAIChatModel:
        defaults: dict[str, Any] = {
            "base_url": server.openai_base_url,
            "api_key": "sk-test",
            "timeout": 5.0,
            "max_retries": 0,
        }
        options = defaults | options
        return closing(OpenAIChatModel(options.pop("model", "gpt-test"), **options))

    return make


@pytest.fixture
def make_anthropic(server: FakeLLMServer, closing: Closing) -> MakeAnthropic:
    def make(**options: Any) -> AnthropicModel:
        defaults: dict[str, Any] = {
            "base_url": server.anthropic_base_url,
            "api_key": "sk-ant-test",
            "timeout": 5.0,
            "max_retries": 0,
        }
        options = defaults | options
        return closing(AnthropicModel(options.pop("model", "claude-test"), **options))

    return make


@dataclass
class Streamed:
    """One streamed reply: its deltas in order and the final response."""

    deltas: list[TextDelta | ThinkingDelta | Retrying | Notice]
    response: ModelResponse

    @property
    def text(self) -> str:
        return "".join(d.text for d in self.deltas if isinstance(d, TextDelta))

    @property
    def thinking(self) -> str:
        return "".join(d.text for d in self.deltas if isinstance(d, ThinkingDelta))


Collect = Callable[[Model, ModelRequest], Awaitable[Streamed]]
"""The ``collect`` fixture: streams a request to the end and checks the stream's shape."""


async def _collect(model: Model, request: ModelRequest) -> Streamed:
    deltas: list[TextDelta | ThinkingDelta | Retrying | Notice] = []
    responses: list[ModelResponse] = []
    async for item in model.stream(request):
        assert not responses, "nothing may follow the ModelResponse"
        if isinstance(item, ModelResponse):
            responses.append(item)
        else:
            deltas.append(item)
    assert len(responses) == 1, "a stream ends with exactly one ModelResponse"
    return Streamed(deltas, responses[0])


@pytest.fixture
def collect() -> Collect:
    """Stream a request to the end and check the stream's shape."""
    return _collect


# --- reading one model's stream whole (shared by the provider tests) -----------------------

NEVER = 60.0  # an upper bound a correct program never reaches


async def items_of(model: Model, request: ModelRequest) -> list[StreamItem]:
    """Every item ``model`` streams for ``request``, read within ``NEVER`` seconds."""

    async def read() -> list[StreamItem]:
        return [item async for item in model.stream(request)]

    return await asyncio.wait_for(read(), NEVER)


def reply_of(items: list[StreamItem]) -> ModelResponse:
    """The one response among streamed items."""
    (response,) = [item for item in items if isinstance(item, ModelResponse)]
    return response
