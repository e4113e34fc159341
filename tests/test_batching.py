"""The batch plan (no padding) and what it buys: an embedding does not depend on its batch mates."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from flow_plugin.encoding.backbone import Backbone
from flow_plugin.encoding.batching import BATCH_PLAN, length_exact_batches

SHORT = ["A man is playing a guitar.", "Two dogs run in a park.", "The cat sleeps.", "A woman slices an onion."]
LONG = ("The stock market fell sharply today after the central bank raised interest rates again, "
        "surprising analysts who had expected a pause until the end of the year.")


@pytest.mark.parametrize("batch_size", [1, 2, 3, 64])
def test_every_batch_holds_one_length_and_every_sentence_once(batch_size: int) -> None:
    lengths = np.random.default_rng(0).integers(3, 30, size=500)
    batches = length_exact_batches(lengths, batch_size)
    assert all(len(set(lengths[batch].tolist())) == 1 and 1 <= len(batch) <= batch_size for batch in batches)
    assert sorted(np.concatenate(batches).tolist()) == list(range(500))
    assert [int(lengths[batch[0]]) for batch in batches] == sorted((int(lengths[b[0]]) for b in batches), reverse=True)


def test_an_embedding_does_not_depend_on_its_batch_mates(minilm_path: Path, precision: str) -> None:
    backbone = Backbone(minilm_path, pooling="last-avg", precision=precision, show_progress_bar=False)
    alone = np.stack([backbone.encode([sentence], batch_size=1)[0] for sentence in SHORT])
    with_long = backbone.encode([LONG, *SHORT, *SHORT[::-1]], batch_size=64)
    scale = np.abs(alone).max()
    # Before the plan, a long batch mate padded the others: in bf16 they moved by 5.5e-3 of the scale
    # (3.5e-3 on the AMX machine). Without padding: measured 0 in bf16 and 6e-7 in float32 (the matrix
    # kernels block the rows differently for another batch size); the limit is 50x that.
    np.testing.assert_allclose(with_long[1:5], alone, rtol=0, atol=3e-5 * scale)
    np.testing.assert_allclose(with_long[5:], alone[::-1], rtol=0, atol=3e-5 * scale)


def test_the_key_names_the_kernels_and_the_batch_plan(tiny_bert_dir: Path) -> None:
    float32 = Backbone(tiny_bert_dir, precision="float32", device="cpu").key
    bf16 = Backbone(tiny_bert_dir, precision="bf16", device="cpu").key
    assert float32.batch_plan == bf16.batch_plan == BATCH_PLAN == "length-exact"
    assert float32.kernels == "cpu-float32"
    assert bf16.kernels.startswith("cpu-bf16-") and bf16.kernels.split("-")[2].split("+")[0] in ("amx", "avx512", "emulated")
    assert float32.as_dict()["kernels"] != bf16.as_dict()["kernels"]
