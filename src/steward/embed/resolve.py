"""``[memory] embedder`` to an ``Embedder``: ``""`` (none: recall by keyword), ``"local"``,
``"openai:MODEL"`` or ``"ollama:MODEL"``.

An endpoint's URL, key, timeout and retries come from the chat provider's own section
(``[models.openai]``, ``[models.ollama]``) and the same environment variables, so a local
server configured once serves both. Nothing is sent and nothing is loaded here.
"""

from __future__ import annotations

import os

from steward.config import Config, ProviderSettings
from steward.embed.base import Embedder
from steward.errors import ConfigError

__all__ = ["FORMS", "embedder_from_config"]

OPENAI_BASE_URL = "https://api.openai.com/v1"
FORMS = (
    '"local", "openai:MODEL" (e.g. "openai:text-embedding-3-small"), "ollama:MODEL" (e.g. '
    '"ollama:nomic-embed-text"), or "" for recall by keyword only'
)


def embedder_from_config(config: Config) -> Embedder | None:
    """The embedder ``[memory] embedder`` names, or None; ``ConfigError`` lists the forms."""
    spec = config.memory.embedder.strip()
    batch = config.memory.embed_batch
    if not spec:
        return None
    if spec == "local":
        from steward.embed.local import LocalEmbedder

        return LocalEmbedder(batch=batch)
    provider, colon, model = (part.strip() for part in spec.partition(":"))
    if not colon or provider not in ("openai", "ollama") or not model:
        raise ConfigError(f"[memory] embedder = {spec!r} is not one of the accepted forms: {FORMS}.")
    from steward.embed.openai import OpenAIEmbedder

    settings = config.models.get(provider) or ProviderSettings()
    key_env = settings.api_key_env or ("OPENAI_API_KEY" if provider == "openai" else "")
    api_key = os.environ.get(key_env) if key_env else None
    if settings.api_key_env and not api_key:
        # As for the chat model: never fall back to another variable, whose key may be another server's.
        raise ConfigError(
            f"[models.{provider}] api_key_env names {key_env}, which is not set. Export {key_env}=<key>, "
            f"or remove api_key_env from the config."
        )
    if provider == "openai":
        base_url = settings.base_url or os.environ.get("OPENAI_BASE_URL") or OPENAI_BASE_URL
        if base_url.rstrip("/") == OPENAI_BASE_URL and not api_key:
            raise ConfigError(
                f"[memory] embedder = {spec!r} asks OpenAI, and OPENAI_API_KEY is not set: export it, "
                "or set base_url in [models.openai] to a local OpenAI-compatible server."
            )
    else:
        from steward.models.registry import _ollama_base_url

        base_url = settings.base_url or _ollama_base_url()
    return OpenAIEmbedder(
        model,
        base_url=base_url,
        api_key=api_key,
        batch=batch,
        timeout_s=settings.timeout_s,
        max_retries=settings.max_retries,
        name=f"{provider}:{model}",
        key_env=key_env or None,
    )
