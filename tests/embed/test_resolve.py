"""``[memory] embedder`` to an embedder: the accepted forms, where URLs and keys come from, and
the errors that list the forms."""

from __future__ import annotations

import numpy as np
import pytest

from steward.config import Config, MemorySettings, ProviderSettings
from steward.embed.local import LocalEmbedder
from steward.embed.openai import OpenAIEmbedder
from steward.embed.resolve import embedder_from_config
from steward.errors import ConfigError
from steward.testing.fake_llm import FakeLLMServer


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OLLAMA_BASE_URL", "OLLAMA_HOST", "EMBED_KEY"):
        monkeypatch.delenv(name, raising=False)


def config(spec: str, **models: ProviderSettings) -> Config:
    return Config(memory=MemorySettings(embedder=spec, embed_batch=16), models=dict(models))


def openai(spec: str, **models: ProviderSettings) -> OpenAIEmbedder:
    embedder = embedder_from_config(config(spec, **models))
    assert isinstance(embedder, OpenAIEmbedder)
    return embedder


def test_no_embedder_means_keyword_recall() -> None:
    assert embedder_from_config(config("")) is None
    assert embedder_from_config(config("  ")) is None


def test_local_is_the_wheel_model() -> None:
    embedder = embedder_from_config(config("local"))
    assert isinstance(embedder, LocalEmbedder) and embedder.batch == 16
    assert embedder.name == "local:multilingual-e5-small-q4"


def test_openai_uses_the_key_and_openai_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-x")
    embedder = openai("openai:text-embedding-3-small")
    assert embedder.url == "https://api.openai.com/v1/embeddings"
    assert embedder.name == "openai:text-embedding-3-small" and embedder.model == "text-embedding-3-small"
    assert embedder.batch == 16


def test_openai_without_a_key_names_both_fixes() -> None:
    with pytest.raises(ConfigError, match=r"OPENAI_API_KEY is not set.*base_url"):
        embedder_from_config(config("openai:text-embedding-3-small"))


def test_a_local_server_needs_no_key_and_takes_the_provider_settings() -> None:
    settings = ProviderSettings(base_url="http://127.0.0.1:8080/v1/", timeout_s=7.0, max_retries=1)
    embedder = openai("openai:e5", openai=settings)
    assert embedder.url == "http://127.0.0.1:8080/v1/embeddings"
    assert (embedder.timeout_s, embedder.max_retries) == (7.0, 1)


def test_openai_base_url_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9000/v1")
    assert openai("openai:bge").url == "http://127.0.0.1:9000/v1/embeddings"


def test_api_key_env_names_the_variable_and_must_be_set(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = ProviderSettings(base_url="http://127.0.0.1:8080/v1", api_key_env="EMBED_KEY")
    with pytest.raises(ConfigError, match="api_key_env names EMBED_KEY, which is not set"):
        embedder_from_config(config("openai:e5", openai=settings))
    monkeypatch.setenv("EMBED_KEY", "k")
    assert openai("openai:e5", openai=settings).url.startswith("http://127.0.0.1:8080")


def test_ollama_at_its_usual_address_or_where_it_is_said_to_be(monkeypatch: pytest.MonkeyPatch) -> None:
    embedder = openai("ollama:nomic-embed-text")
    assert embedder.url == "http://localhost:11434/v1/embeddings"
    assert embedder.name == "ollama:nomic-embed-text"
    monkeypatch.setenv("OLLAMA_HOST", "10.0.0.5:11434")
    assert openai("ollama:nomic-embed-text").url == "http://10.0.0.5:11434/v1/embeddings"
    settings = ProviderSettings(base_url="http://127.0.0.1:7000/v1")
    assert openai("ollama:x", ollama=settings).url == "http://127.0.0.1:7000/v1/embeddings"


@pytest.mark.parametrize("spec", ["e5", "openai:", "cohere:embed-v3", "ollama", "Local"])
def test_a_bad_spec_lists_the_accepted_forms(spec: str) -> None:
    with pytest.raises(ConfigError, match=r'"local", "openai:MODEL".*"ollama:MODEL"'):
        embedder_from_config(config(spec))


async def test_a_resolved_endpoint_embeds_over_the_socket() -> None:
    with FakeLLMServer(embed_dim=64) as fake:
        embedder = openai("openai:fake", openai=ProviderSettings(base_url=fake.openai_base_url))
        texts = [f"text {n}" for n in range(20)]
        vectors = await embedder.embed(texts)
        await embedder.aclose()
    assert vectors.shape == (20, 64)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert [len(r.body["input"]) for r in fake.embedding_requests] == [16, 4]
