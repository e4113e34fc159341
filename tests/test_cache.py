"""The embedding cache: one backbone pass per sentence, trustworthy on-disk shards."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from flow_plugin.encoding.cache import CachedEncoder, clear_shared_encoders, shared_encoder
from flow_plugin.encoding.backbone import Backbone
from flow_plugin.errors import InputError

SENTENCES = ["the man plays guitar .", "a dog runs in the park", "the man plays guitar .", "rain today"]


def make_encoder(folder: Path, cache_dir: Path | None, **kwargs) -> CachedEncoder:
    return CachedEncoder(Backbone(folder, precision="float32", **kwargs), cache_dir)


def test_each_unique_sentence_is_encoded_once(tiny_bert_dir: Path) -> None:
    encoder = make_encoder(tiny_bert_dir, None)
    first = encoder.encode(SENTENCES)
    assert encoder.n_encoded == 3 and encoder.n_cache_hits == 1
    second = encoder.encode(SENTENCES[::-1] + ["sun tomorrow"])
    assert encoder.n_encoded == 4 and encoder.n_cache_hits == 1 + 4
    np.testing.assert_array_equal(second[:4], first[::-1])
    np.testing.assert_array_equal(first[0], first[2])
    # another batch composition: float32 GEMM blocking may differ by rounding (measured <= 1e-6 of the scale)
    direct = encoder.backbone.encode(SENTENCES)
    np.testing.assert_allclose(first, direct, rtol=0, atol=2e-5 * np.abs(direct).max())


def test_disk_cache_is_reused_without_loading_weights(tiny_bert_dir: Path, tmp_path: Path) -> None:
    writer = make_encoder(tiny_bert_dir, tmp_path)
    expected = writer.encode(SENTENCES)
    folder = writer.key_folder
    assert folder is not None and (folder / "key.json").is_file()
    assert len(list(folder.glob("shard-*.npz"))) == 1
    assert not list(folder.glob("*.tmp"))

    reader = make_encoder(tiny_bert_dir, tmp_path)
    np.testing.assert_array_equal(reader.encode(SENTENCES), expected)
    assert reader.n_encoded == 0 and not reader.backbone.is_loaded


def test_another_key_does_not_read_the_shards(tiny_bert_dir: Path, tmp_path: Path) -> None:
    make_encoder(tiny_bert_dir, tmp_path).encode(SENTENCES)
    other = make_encoder(tiny_bert_dir, tmp_path, pooling="cls")
    other.encode(SENTENCES)
    assert other.n_encoded == 3 and other.key_folder != make_encoder(tiny_bert_dir, tmp_path).key_folder


@pytest.mark.parametrize("damage", ["truncate", "flip", "foreign-key"])
def test_corrupt_or_mismatched_shard_is_recomputed(
    damage: str, tiny_bert_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    writer = make_encoder(tiny_bert_dir, tmp_path)
    expected = writer.encode(SENTENCES)
    shard = next(writer.key_folder.glob("shard-*.npz"))
    if damage == "truncate":
        shard.write_bytes(shard.read_bytes()[:200])
    elif damage == "flip":
        raw = bytearray(shard.read_bytes())
        raw[-300] ^= 0xFF  # inside the stored embeddings
        shard.write_bytes(bytes(raw))
    else:  # a shard of another backbone key placed in this key's folder
        foreign = make_encoder(tiny_bert_dir, tmp_path / "other", pooling="cls")
        foreign.encode(SENTENCES)
        shard.unlink()
        shard = next(foreign.key_folder.glob("shard-*.npz")).rename(writer.key_folder / "shard-foreign.npz")

    reader = make_encoder(tiny_bert_dir, tmp_path)
    with caplog.at_level(logging.WARNING, logger="flow_plugin.encoding.cache"):
        result = reader.encode(SENTENCES)
    assert reader.n_encoded == 3  # recomputed, not trusted
    np.testing.assert_allclose(result, expected, rtol=0, atol=2e-5 * np.abs(expected).max())
    assert "ignored and removed" in caplog.text and shard.name in caplog.text
    assert not shard.exists()


def test_shared_encoder_is_one_per_backbone_key(tiny_bert_dir: Path) -> None:
    clear_shared_encoders()
    try:
        first = shared_encoder(str(tiny_bert_dir), pooling="first-last-avg", precision="float32")
        same = shared_encoder(str(tiny_bert_dir), pooling=[1, -1], precision="float32")
        other = shared_encoder(str(tiny_bert_dir), pooling="cls", precision="float32")
        assert first is same and first is not other
        built = Backbone(str(tiny_bert_dir), pooling="first-last-avg", precision="float32")
        assert shared_encoder(built) is first  # a built backbone of the same key: the same encoder
        with pytest.raises(InputError, match="apply to a model name or folder, not to a Backbone already built"):
            shared_encoder(built, pooling="cls")
    finally:
        clear_shared_encoders()


def test_a_cache_folder_that_cannot_be_written_degrades_to_memory(
    tiny_bert_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the cache folder should be", encoding="utf-8")  # mkdir fails, even as root
    encoder = make_encoder(tiny_bert_dir, blocked / "cache")
    with caplog.at_level(logging.WARNING, logger="flow_plugin.encoding.cache"):
        first = encoder.encode(SENTENCES)
        again = encoder.encode(SENTENCES + ["sun tomorrow"])
    assert "cannot be written" in caplog.text and "memory only" in caplog.text
    assert caplog.text.count("cannot be written") == 1  # said once, not per call
    np.testing.assert_array_equal(again[: len(SENTENCES)], first)  # the work is kept, in memory
    assert encoder.n_encoded == 4 and encoder.n_cache_hits == 1 + 4


def test_a_bad_shard_that_cannot_be_removed_is_ignored_with_a_warning(
    tiny_bert_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    writer = make_encoder(tiny_bert_dir, tmp_path)
    expected = writer.encode(SENTENCES)
    shard = next(writer.key_folder.glob("shard-*.npz"))
    shard.unlink()
    shard.mkdir()  # a "shard" that is a folder: unreadable, and unlink() fails on it
    reader = make_encoder(tiny_bert_dir, tmp_path)
    with caplog.at_level(logging.WARNING, logger="flow_plugin.encoding.cache"):
        result = reader.encode(SENTENCES)
    assert "cannot be removed" in caplog.text and reader.n_encoded == 3
    np.testing.assert_allclose(result, expected, rtol=0, atol=2e-5 * np.abs(expected).max())


def test_a_bad_batch_size_is_refused_before_anything_enters_the_cache(tiny_bert_dir: Path, tmp_path: Path) -> None:
    """``batch_size=-1`` used to encode nothing and return (and store on disk) uninitialised memory."""

    encoder = make_encoder(tiny_bert_dir, tmp_path)
    with pytest.raises(InputError, match="batch_size must be a positive int, got -1"):
        encoder.encode(SENTENCES, batch_size=-1)
    assert not list(tmp_path.rglob("shard-*.npz")) and len(encoder) == 0
    expected = encoder.encode(SENTENCES, batch_size=2)
    with pytest.raises(InputError, match="batch_size must be a positive int, got 0"):
        encoder.encode(SENTENCES, batch_size=0)  # refused even when every sentence is cached
    reader = make_encoder(tiny_bert_dir, tmp_path)
    np.testing.assert_array_equal(reader.encode(SENTENCES), expected)
    assert reader.n_encoded == 0 and np.isfinite(expected).all() and np.abs(expected).max() < 100


@pytest.mark.parametrize(
    ("damage", "problem"),
    [("nan", "non-finite"), ("inf", "non-finite"), ("width", "do not fit 32-dimensional"),
     ("rows", "do not fit 32-dimensional"), ("float64", "float32")],
)
def test_nothing_invalid_is_written_to_the_disk_cache(tiny_bert_dir: Path, tmp_path: Path, damage: str,
                                                      problem: str) -> None:
    """The one function that keeps a block checks what it keeps as the reader checks what it reads."""

    encoder = make_encoder(tiny_bert_dir, tmp_path)
    texts = ["one", "two", "three"]
    embeddings = np.ones((3, 32), dtype=np.float32)
    if damage in ("nan", "inf"):
        embeddings[1, 5] = np.nan if damage == "nan" else np.inf
    elif damage == "width":
        embeddings = embeddings[:, :31]
    elif damage == "rows":
        embeddings = embeddings[:2]
    else:
        embeddings = embeddings.astype(np.float64)
    with pytest.raises(InputError, match=f"not written to the embedding cache.*{problem}"):
        encoder.cache.embed(texts, lambda new: embeddings)
    assert not list(tmp_path.rglob("shard-*.npz")) and len(encoder) == 0
    encoder.cache.embed(texts, lambda new: np.ones((3, 32), dtype=np.float32))  # valid arrays are written
    assert len(list(tmp_path.rglob("shard-*.npz"))) == 1


# ------------------------------------------------------------------ the one store, any model: contexts and calls
def _rows_of(texts: list[str]) -> np.ndarray:
    """A model's rows for ``texts``: each text's own, whatever the batch (the counts say what was computed)."""
    return np.stack([np.full(4, float(len(text)), dtype=np.float32) + np.arange(4, dtype=np.float32)
                     for text in texts])


def test_a_context_is_another_entry_and_memory_keeps_the_latest_tasks(tmp_path: Path) -> None:
    from flow_plugin.encoding.cache import EmbeddingCache

    computed: list[str] = []

    def compute(texts: list[str]) -> np.ndarray:
        computed.extend(texts)
        return _rows_of(texts)

    cache = EmbeddingCache({"model": "m"}, tmp_path, owner="m", memory_tasks=2)
    query = {"task": "A", "subset": "default", "side": "query"}
    document = {**query, "side": "document"}
    cache.embed(["x", "y"], compute, query)
    cache.embed(["x", "y"], compute, document)  # another prompt: computed again
    assert computed == ["x", "y", "x", "y"] and cache.get(["y", "x"], query) is not None
    for task in ("B", "C"):  # two newer tasks push task A out of memory ...
        cache.embed(["z"], compute, {**query, "task": task})
    assert len(cache) == 2
    computed.clear()
    np.testing.assert_array_equal(cache.embed(["y", "x"], compute, query), _rows_of(["y", "x"]))
    assert computed == []  # ... and its folder gives it back
    memory_only = EmbeddingCache({"model": "m"}, None, owner="m", memory_tasks=1)
    memory_only.embed(["x"], compute, query)
    memory_only.embed(["x"], compute, {**query, "task": "B"})
    assert memory_only.get(["x"], query) is None  # without a folder, an evicted task is computed again


def test_a_call_is_served_only_to_the_same_call_and_a_shard_only_to_its_context(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from flow_plugin.encoding.cache import EmbeddingCache, key_digest

    context = {"task": "A", "subset": "default", "side": None}
    writer = EmbeddingCache({"model": "m"}, tmp_path, owner="m")
    returned = _rows_of(["a", "bb"]) + np.float32(1e-7)  # what the model returned for this very call
    writer.put_call("call-1", ["a", "bb"], returned, context)
    reader = EmbeddingCache({"model": "m"}, tmp_path, owner="m")
    served = reader.get_call("call-1", 2, context)
    np.testing.assert_array_equal(served, returned)  # bit for bit
    served *= 0  # what a caller does with its rows (normalising them in place, say) never reaches the cache
    returned *= 0
    np.testing.assert_array_equal(reader.get_call("call-1", 2, context), _rows_of(["a", "bb"]) + np.float32(1e-7))
    writer_served = writer.get_call("call-1", 2, context)
    np.testing.assert_array_equal(writer_served, _rows_of(["a", "bb"]) + np.float32(1e-7))
    assert reader.get_call("call-2", 2, context) is None and reader.get(["a", "bb"], context) is None
    assert reader.get_call("call-1", 2, {**context, "task": "B"}) is None
    shard = next(writer.folder.rglob("shard-*.npz"))
    other = {**context, "side": "query"}
    moved = writer.folder / key_digest(other)
    moved.mkdir()
    shard = shard.rename(moved / shard.name)  # a shard of one context placed in another's folder
    with caplog.at_level(logging.WARNING, logger="flow_plugin.encoding.cache"):
        assert EmbeddingCache({"model": "m"}, tmp_path, owner="m").get_call("call-1", 2, other) is None
    assert "another key" in caplog.text and not shard.exists()


def test_folders_of_a_layout_no_longer_read_are_pointed_out_once(tmp_path: Path,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    from flow_plugin.encoding.cache import EmbeddingCache

    (tmp_path / "calls-0123abcd").mkdir()  # whole calls of a model MTEB loads, as an earlier version kept them
    (tmp_path / "calls-0123abcd" / "key.json").write_text("{}")
    with caplog.at_level(logging.WARNING, logger="flow_plugin.encoding.cache"):
        for _ in range(2):  # two caches on the folder, one process: one warning
            EmbeddingCache({"model": "m"}, tmp_path, owner="m").embed(["a"], _rows_of)
    assert caplog.text.count("does not read") == 1 and "calls-0123abcd" in caplog.text
    assert "delete them" in caplog.text and (tmp_path / "calls-0123abcd").is_dir()  # pointed out, not removed
