"""The OpenAI-compatible embeddings client against the fake server, over a real socket: batches,
order, retries and the errors a user can act on."""

from __future__ import annotations

import base64
import socket
from collections.abc import Iterator

import numpy as np
import pytest

from steward.embed.openai import EmbedError, NotTheWireError, OpenAIEmbedder, vectors_from_reply
from steward.testing.fake_embed import hash_vectors
from steward.testing.fake_llm import FakeLLMServer

FAST = {"retry-after-ms": "1"}  # the wait the server asks for, honoured: keeps retry tests quick


@pytest.fixture
def fake() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as server:
        yield server


def client(fake: FakeLLMServer, **options: object) -> OpenAIEmbedder:
    return OpenAIEmbedder("fake-embed", base_url=fake.openai_base_url, **options)  # type: ignore[arg-type]


def sizes(fake: FakeLLMServer) -> list[int]:
    return [len(r.body["input"]) for r in fake.embedding_requests]


async def test_texts_go_in_batches_of_the_configured_size(fake: FakeLLMServer) -> None:
    texts = [f"note number {n} about gardens" for n in range(10)]
    embedder = client(fake, batch=4)
    vectors = await embedder.embed(texts)
    await embedder.aclose()
    assert sizes(fake) == [4, 4, 2]
    assert {r.body["model"] for r in fake.embedding_requests} == {"fake-embed"}
    assert vectors.shape == (10, 256) and vectors.dtype == np.float32
    np.testing.assert_allclose(vectors, hash_vectors(texts), atol=1e-6)


async def test_vectors_are_put_back_in_order_of_their_index(fake: FakeLLMServer) -> None:
    fake.embed_reversed = True
    texts = ["apples and pears", "the tax office", "a sailing boat"]
    embedder = client(fake)
    vectors = await embedder.embed(texts)
    await embedder.aclose()
    np.testing.assert_allclose(vectors, hash_vectors(texts), atol=1e-6)


async def test_no_texts_send_no_request(fake: FakeLLMServer) -> None:
    embedder = client(fake)
    assert (await embedder.embed([])).shape[0] == 0
    assert fake.embedding_requests == []


async def test_the_key_is_sent_as_a_bearer_token(fake: FakeLLMServer) -> None:
    embedder = client(fake, api_key="sk-test-123")
    await embedder.embed(["hello"])
    await embedder.aclose()
    assert fake.embedding_requests[0].headers["authorization"] == "Bearer sk-test-123"


async def test_a_rate_limit_is_waited_out_and_the_batch_sent_again(fake: FakeLLMServer) -> None:
    fake.fail_embeddings(2, 429, headers=FAST)
    embedder = client(fake, max_retries=3)
    vectors = await embedder.embed(["one", "two"])
    await embedder.aclose()
    assert vectors.shape == (2, 256)
    assert sizes(fake) == [2, 2, 2]


async def test_server_errors_are_retried_a_bounded_number_of_times(fake: FakeLLMServer) -> None:
    fake.fail_embeddings(5, 503, headers=FAST)
    embedder = client(fake, max_retries=2)
    with pytest.raises(EmbedError) as caught:
        await embedder.embed(["one"])
    await embedder.aclose()
    assert caught.value.retryable and "503" in str(caught.value) and "tried 3 times" in str(caught.value)
    assert len(fake.embedding_requests) == 3


async def test_a_refused_key_names_the_variable_and_is_not_retried(fake: FakeLLMServer) -> None:
    fake.fail_embeddings(1, 401)
    embedder = client(fake, max_retries=3, key_env="MY_EMBED_KEY")
    with pytest.raises(EmbedError, match="refused the key") as caught:
        await embedder.embed(["one"])
    await embedder.aclose()
    assert "set MY_EMBED_KEY" in str(caught.value) and not caught.value.retryable
    assert len(fake.embedding_requests) == 1


async def test_a_server_needing_no_variable_is_told_to_name_one(fake: FakeLLMServer) -> None:
    fake.fail_embeddings(1, 403)
    embedder = OpenAIEmbedder("m", base_url=fake.openai_base_url, name="ollama:m", key_env=None)
    with pytest.raises(EmbedError, match=r"set api_key_env in \[models\.ollama\] to a variable"):
        await embedder.embed(["one"])
    await embedder.aclose()


async def test_a_batch_too_large_says_to_lower_embed_batch(fake: FakeLLMServer) -> None:
    fake.fail_embeddings(1, 413)
    embedder = client(fake, batch=500)
    with pytest.raises(EmbedError, match=r"request of 1 texts .* lower \[memory\] embed_batch"):
        await embedder.embed(["one"])
    await embedder.aclose()


async def test_an_unknown_model_or_route_says_to_check_base_url_and_model(fake: FakeLLMServer) -> None:
    fake.fail_embeddings(1, 404)
    embedder = client(fake)
    with pytest.raises(EmbedError) as caught:
        await embedder.embed(["one"])
    await embedder.aclose()
    message = str(caught.value)
    assert "ends in /v1" in message and "'fake-embed'" in message
    assert len(fake.embedding_requests) == 1


async def test_a_web_page_instead_of_json_says_to_check_base_url(fake: FakeLLMServer) -> None:
    fake.fail_embeddings(1, 200, body="<!doctype html><html><body>Sign in</body></html>")
    embedder = client(fake)
    with pytest.raises(EmbedError) as caught:
        await embedder.embed(["one"])
    await embedder.aclose()
    message = str(caught.value)
    assert "not JSON" in message and "text/html" in message and "ends in /v1" in message


async def test_a_model_that_changes_its_dimensions_is_refused(fake: FakeLLMServer) -> None:
    embedder = client(fake)
    await embedder.embed(["first"])
    fake.embed_dim = 128
    with pytest.raises(EmbedError, match="128-value vectors where it returned 256"):
        await embedder.embed(["second"])
    await embedder.aclose()


async def test_an_unreachable_server_is_named() -> None:
    with socket.socket() as probe:  # a port nobody listens on once this closes
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    embedder = OpenAIEmbedder("m", base_url=f"http://127.0.0.1:{port}/v1", max_retries=0)
    with pytest.raises(EmbedError, match=r"cannot reach .* is the server running") as caught:
        await embedder.embed(["one"])
    await embedder.aclose()
    assert caught.value.retryable


async def test_the_fake_takes_a_single_string_as_input(fake: FakeLLMServer) -> None:
    import httpx

    async with httpx.AsyncClient() as http:
        reply = await http.post(f"{fake.openai_base_url}/embeddings", json={"model": "m", "input": "hi"})
    assert reply.status_code == 200
    assert vectors_from_reply(reply.json(), 1).shape == (1, 256)


# --- the reply itself ------------------------------------------------------------------------


def test_rows_come_back_at_unit_length() -> None:
    payload = {"data": [{"index": 0, "embedding": [3.0, 4.0]}]}
    np.testing.assert_allclose(vectors_from_reply(payload, 1), [[0.6, 0.8]], atol=1e-6)


def test_base64_embeddings_are_read() -> None:
    raw = base64.b64encode(np.asarray([0.0, 2.0], dtype="<f4").tobytes()).decode()
    np.testing.assert_allclose(vectors_from_reply({"data": [{"embedding": raw}]}, 1), [[0.0, 1.0]])


@pytest.mark.parametrize(
    ("payload", "why"),
    [
        ({"data": [{"index": 0, "embedding": [1.0]}]}, "1 vectors for 2 texts"),
        ({"data": [{"index": 0, "embedding": [1.0]}, {"index": 1, "embedding": [1.0, 2.0]}]}, "differing"),
        ({"data": [{"index": 0, "embedding": [1.0]}, {"index": 0, "embedding": [2.0]}]}, "indexes"),
        ({"result": []}, '"data"'),
        ({"data": [{"index": 0, "embedding": "x"}, {"index": 1, "embedding": [1.0]}]}, "neither"),
        ({"data": [{"index": 0, "embedding": [1.0]}, {"index": 1, "embedding": {}}]}, "neither"),
    ],
)
def test_a_reply_that_is_not_the_wire_is_refused(payload: object, why: str) -> None:
    with pytest.raises(NotTheWireError, match=why):
        vectors_from_reply(payload, 2)


async def test_the_embeddings_route_leaves_the_chat_script_alone() -> None:
    import httpx

    from steward.testing.fake_llm import FakeReply

    with FakeLLMServer([FakeReply(text="hello")]) as fake:
        async with httpx.AsyncClient() as http:
            url = f"{fake.openai_base_url}/embeddings"
            good = await http.post(url, json={"model": "m", "input": ["a", "b"]})
            bad = await http.post(url, json={"model": "m", "input": [1, 2]})
        assert fake.remaining == 1
    assert good.status_code == 200 and [d["index"] for d in good.json()["data"]] == [0, 1]
    assert bad.status_code == 400 and "array of strings" in bad.json()["error"]["message"]
