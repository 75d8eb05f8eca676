"""Turn a ``provider:model`` string into a ``Model``.

Each provider is one factory in ``_PROVIDERS``; adding a provider is adding an entry. No
SDK is imported here: the provider modules import theirs on first request.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import ConfigError
from .anthropic_messages import AnthropicModel
from .base import Model
from .openai_chat import OpenAIChatModel

__all__ = ["resolve_model"]

OLLAMA_DEFAULT_BASE_URL = "http://localhost:11434/v1"


@dataclass(frozen=True, slots=True)
class _Options:
    base_url: str | None
    api_key: str | None
    timeout: float | None
    max_retries: int | None
    stream: bool | None = None


def _openai(model: str, options: _Options) -> Model:
    return OpenAIChatModel(
        model,
        api_key=options.api_key,
        base_url=options.base_url,
        timeout=options.timeout,
        max_retries=options.max_retries,
        stream=options.stream,
    )


def _anthropic(model: str, options: _Options) -> Model:
    return AnthropicModel(
        model,
        api_key=options.api_key,
        base_url=options.base_url,
        timeout=options.timeout,
        max_retries=options.max_retries,
    )


def _ollama(model: str, options: _Options) -> Model:
    return OpenAIChatModel(
        model,
        # Ollama ignores the key, but the SDK wants one.
        api_key=options.api_key or "ollama",
        base_url=options.base_url or _ollama_base_url(),
        timeout=options.timeout,
        max_retries=options.max_retries,
        stream=options.stream,
        provider="ollama",
        base_url_env="OLLAMA_BASE_URL",
    )


def _scripted(path: str, options: _Options) -> Model:
    from .scripted import ScriptedModel

    return ScriptedModel.from_file(path)


def _ollama_base_url() -> str:
    """``OLLAMA_BASE_URL`` or ``OLLAMA_HOST`` (``host:port`` as Ollama itself reads it), with ``/v1``."""
    value = os.environ.get("OLLAMA_BASE_URL") or os.environ.get("OLLAMA_HOST")
    if not value:
        return OLLAMA_DEFAULT_BASE_URL
    if "://" not in value:
        value = f"http://{value}"
    value = value.rstrip("/")
    return value if value.endswith("/v1") else f"{value}/v1"


_PROVIDERS: dict[str, Callable[[str, _Options], Model]] = {
    "anthropic": _anthropic,
    "ollama": _ollama,
    "openai": _openai,
    "scripted": _scripted,
}

# What follows the colon, when it is not a model name (for error messages).
_ARGUMENT = {"scripted": "FILE"}


def resolve_model(
    spec: str,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    timeout: float | None = None,
    max_retries: int | None = None,
    stream: bool | None = None,
) -> Model:
    """Build the model named by ``spec`` (``provider:model``); ``ConfigError`` names the allowed forms."""
    provider, colon, rest = spec.partition(":")
    factory = _PROVIDERS.get(provider.strip())
    forms = ", ".join(f"{name}:{_ARGUMENT.get(name, 'MODEL')}" for name in sorted(_PROVIDERS))
    if not colon:
        raise ConfigError(f"Model '{spec}' names no provider. Use one of: {forms}.")
    if factory is None:
        raise ConfigError(f"Unknown model provider '{provider}' in '{spec}'. Use one of: {forms}.")
    if not rest.strip():
        raise ConfigError(f"Model '{spec}' names no model after the colon. Use one of: {forms}.")
    model = factory(rest.strip(), _Options(base_url, api_key, timeout, max_retries, stream))
    model.name = spec
    return model
