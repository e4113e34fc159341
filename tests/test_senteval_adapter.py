"""The SentEval adapter, driven through SentEval's call sequence on real files with real weights.

SentEval itself is not installed here (it is not on PyPI); these tests replay what its engine
does for an STS task, following facebookresearch/SentEval's ``engine.py`` and ``sts.py``:
``params`` becomes a dict with attribute access and gets ``current_task``; the task's files are
read with tokens = ``column.split()``; the pairs are sorted by (len(s1), len(s2), score);
``prepare(params, s1 + s2)`` gets every sentence of the task; then ``batcher(params, batch)``
runs over consecutive batches of ``params.batch_size`` pairs, s1 batch then s2 batch, and the
cosine of each pair is correlated with the gold score.

The data are STS-B test (1,379 pairs; the unsupervised "STS-B" that SentEval forks evaluate),
the model all-MiniLM-L6-v2 with BERT-flow.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from flow_plugin.calibration import FlowCalibrator, Identity, Whitening
from flow_plugin.errors import InputError, InputTypeError, NotFittedError, RegistryError
from flow_plugin.evaluation import paired_cosine, spearman
from flow_plugin.catalog.registry import parse_model_name
from flow_plugin.integrations.senteval import (
    NotPreparedError,
    SentEvalAdapter,
    adapter_from_params,
    batcher,
    prepare,
    tokens_to_sentence,
)

MODEL = "flow_plugin/minilm-l6-flow"
BATCH_SIZE = 64


class DotDict(dict):
    """SentEval's ``utils.dotdict``: a dict whose keys read and write as attributes."""

    __getattr__ = dict.get
    __setattr__ = dict.__setitem__
    __delattr__ = dict.__delitem__


def read_stsb_like_senteval(path: Path) -> tuple[list[list[str]], list[list[str]], list[float]]:
    """STS-B as SentEval's STSBenchmarkEval.loadFile reads it: tab columns 5, 6 split on whitespace, score 4."""
    s1, s2, gold = [], [], []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            columns = line.strip().split("\t")
            s1.append(columns[5].split())
            s2.append(columns[6].split())
            gold.append(float(columns[4]))
    return s1, s2, gold


def sort_like_senteval(s1: list, s2: list, gold: list) -> tuple[list, list, list]:
    ordered = sorted(zip(s1, s2, gold), key=lambda z: (len(z[0]), len(z[1]), z[2]))
    return [z[0] for z in ordered], [z[1] for z in ordered], [z[2] for z in ordered]


def senteval_params(senteval_dir: Path, model: object) -> DotDict:
    """What ``SE(params, ...)`` hands to the callbacks after ``se.eval("STSBenchmark")`` set the task."""
    params = DotDict(task_path=str(senteval_dir), usepytorch=True, kfold=10, batch_size=BATCH_SIZE, flow_plugin=model)
    params.seed = 1111
    params.current_task = "STSBenchmark"
    params.flow_plugin_cuda_check = False  # driven by hand: SentEval's own STS-B regressor never runs here
    return params


@pytest.fixture(scope="module")
def stsb_test(senteval_dir: Path) -> tuple[list, list, list]:
    return read_stsb_like_senteval(senteval_dir / "downstream" / "STS" / "STSBenchmark" / "sts-test.csv")


@pytest.fixture(scope="module")
def driven(senteval_dir: Path, stsb_test: tuple[list, list, list], minilm_path: Path) -> dict:
    """One full SentEval-style STS run of the flow model on STS-B test, via the module callbacks."""
    s1, s2, gold = sort_like_senteval(*stsb_test)
    params = senteval_params(senteval_dir, {"model": MODEL, "precision": "float32", "show_progress_bar": False})
    samples = s1 + s2
    prepare(params, samples)  # SentEval: self.evaluation.do_prepare(self.params, self.prepare)
    adapter = adapter_from_params(params)
    batches, scores = [], []
    for start in range(0, len(gold), params.batch_size):
        batch1, batch2 = s1[start : start + params.batch_size], s2[start : start + params.batch_size]
        enc1, enc2 = batcher(params, batch1), batcher(params, batch2)
        batches.append((batch1, enc1))
        batches.append((batch2, enc2))
        scores.extend(float(enc1[k] @ enc2[k] / (np.linalg.norm(enc1[k]) * np.linalg.norm(enc2[k])))
                      for k in range(enc2.shape[0]))
    return {"params": params, "adapter": adapter, "samples": samples, "s1": s1, "s2": s2, "gold": gold,
            "batches": batches, "scores": scores}


# ------------------------------------------------------------------------ the documented sequence
@pytest.mark.slow
def test_prepare_fits_a_fresh_calibrator_on_exactly_the_task_sentences(driven: dict) -> None:
    adapter = driven["adapter"]
    calibrator = adapter.calibrator
    assert isinstance(calibrator, FlowCalibrator) and calibrator.is_fitted
    assert calibrator.n_samples_fit_ == len(driven["samples"]) == 2 * 1379
    assert np.isfinite(calibrator.fit_log_likelihood_)
    assert adapter.prepared_task == "STSBenchmark"
    (record,) = adapter.fit_log
    assert record["task"] == "STSBenchmark" and record["n_sentences"] == 2 * 1379
    assert record["n_unique_sentences"] == len({" ".join(tokens) for tokens in driven["samples"]})
    assert "target" in record["fit_corpus"]
    assert record["fit_log_likelihood"] == pytest.approx(calibrator.fit_log_likelihood_)


def test_batcher_returns_one_float_row_per_sentence_in_batch_order(driven: dict) -> None:
    adapter = driven["adapter"]
    for batch, embeddings in driven["batches"]:
        assert isinstance(embeddings, np.ndarray) and embeddings.dtype == np.float32
        assert embeddings.shape == (len(batch), 384)
    # the shortest and the longest batches, against the backbone run one sentence at a time (no cache)
    for batch, embeddings in (driven["batches"][0], driven["batches"][-1]):
        for tokens, row in zip(batch[:12], embeddings[:12]):
            alone = adapter.calibrator.transform(adapter.encoder.backbone.encode([" ".join(tokens)]))[0]
            np.testing.assert_allclose(row, alone, rtol=1e-3, atol=1e-3)
    batch, embeddings = driven["batches"][5]
    # rows follow the batch (the flow's float32 arithmetic may differ in the last bits between batch sizes)
    np.testing.assert_allclose(batcher(driven["params"], batch[::-1]), embeddings[::-1], rtol=0, atol=1e-5)


def test_senteval_sts_spearman_is_plausible_and_independent_of_senteval_order(
    driven: dict, stsb_test: tuple[list, list, list]
) -> None:
    rho = spearman(driven["scores"], driven["gold"])
    assert 0.70 < rho < 0.95  # all-MiniLM-L6-v2 on STS-B test is about 0.82 raw
    # the same pairs in file order, through the encoder and calibrator directly: same correlation
    adapter = driven["adapter"]
    s1, s2, gold = stsb_test
    left = adapter.calibrator.transform(adapter.encoder.encode([" ".join(tokens) for tokens in s1]))
    right = adapter.calibrator.transform(adapter.encoder.encode([" ".join(tokens) for tokens in s2]))
    assert spearman(paired_cosine(left, right), gold) == pytest.approx(rho, abs=1e-6)


def test_raw_and_explicit_backbone_calibrator_share_the_cached_embeddings(driven: dict, senteval_dir: Path) -> None:
    encoder = driven["adapter"].encoder
    before = encoder.n_encoded
    raw = SentEvalAdapter("flow_plugin/minilm-l6", precision="float32")
    explicit = SentEvalAdapter(backbone="minilm-l6", calibrator="whiten", precision="float32")
    reduced = SentEvalAdapter(backbone="minilm-l6", calibrator=Whitening(n_components=128), precision="float32")
    assert raw.encoder is encoder and explicit.encoder is encoder and reduced.encoder is encoder
    assert explicit.name == "flow_plugin/minilm-l6-whiten"
    rhos = {}
    for adapter in (raw, explicit, reduced):
        params = senteval_params(senteval_dir, adapter)
        adapter.prepare(params, driven["samples"])
        left = np.vstack([adapter.batcher(params, driven["s1"][i : i + 100]) for i in range(0, len(driven["s1"]), 100)])
        right = np.vstack([adapter.batcher(params, driven["s2"][i : i + 100]) for i in range(0, len(driven["s2"]), 100)])
        assert left.shape[1] == adapter.embedding_dim
        rhos[adapter.name] = spearman(paired_cosine(left, right), driven["gold"])
    assert encoder.n_encoded == before  # every sentence was already embedded once
    assert isinstance(raw.calibrator, Identity) and isinstance(explicit.calibrator, Whitening)
    assert explicit.calibrator.n_samples_fit_ == len(driven["samples"])
    assert reduced.embedding_dim == 128
    assert all(0.70 < rho < 0.95 for rho in rhos.values()), rhos


def test_empty_token_lists_become_a_period(driven: dict) -> None:
    params = driven["params"]
    embeddings = batcher(params, [[], ["a", "man", "is", "playing", "a", "guitar", "."]])
    assert embeddings.shape == (2, 384)
    np.testing.assert_allclose(embeddings[0], batcher(params, [["."]])[0], rtol=0, atol=1e-5)
    assert batcher(params, []).shape == (0, 384)


# ------------------------------------------------------------------------ bad input
def test_batcher_before_prepare_is_a_clear_error(senteval_dir: Path) -> None:
    with pytest.raises(NotPreparedError, match="before prepare"):
        batcher(senteval_params(senteval_dir, MODEL), [["a", "man", "."]])
    adapter = SentEvalAdapter("flow_plugin/minilm-l6-whiten")
    with pytest.raises(NotFittedError, match="before prepare"):
        adapter.batcher(senteval_params(senteval_dir, adapter), [["a", "man", "."]])


def test_batcher_for_another_task_needs_its_own_prepare(driven: dict) -> None:
    params = DotDict(driven["params"])
    params.current_task = "STS12"
    with pytest.raises(NotPreparedError, match="STS12"):
        batcher(params, [["a", "man", "."]])


@pytest.mark.parametrize("name", ["flow_plugin/minilm-l6-flw", "bert-bse-flow", "flow_plugin/unknown"])
def test_unknown_model_names_give_the_registry_error(senteval_dir: Path, name: str) -> None:
    with pytest.raises(RegistryError) as expected:
        parse_model_name(name)
    with pytest.raises(RegistryError) as from_adapter:
        SentEvalAdapter(name)
    with pytest.raises(RegistryError) as from_params:
        prepare(senteval_params(senteval_dir, name), [["a", "man", "."]])
    assert str(from_adapter.value) == str(from_params.value) == str(expected.value)
    assert "unknown model" in str(expected.value)


def test_params_without_a_model_and_bad_arguments(senteval_dir: Path) -> None:
    with pytest.raises(InputError, match="flow_plugin"):
        prepare(DotDict(task_path=str(senteval_dir), current_task="STS12"), [["a"]])
    with pytest.raises(InputTypeError):
        prepare(senteval_params(senteval_dir, 42), [["a"]])
    with pytest.raises(InputError, match="either"):
        SentEvalAdapter(MODEL, backbone="minilm-l6")
    with pytest.raises(RegistryError, match="unknown backbone"):
        SentEvalAdapter(backbone="minilm-l7", calibrator="flow")
    with pytest.raises(RegistryError, match="unknown calibrator"):
        SentEvalAdapter(backbone="minilm-l6", calibrator="flows")
    with pytest.raises(InputError, match="no sentences"):
        SentEvalAdapter(MODEL).prepare(DotDict(current_task="STS12"), [])


def test_tokens_to_sentence() -> None:
    assert tokens_to_sentence(["a", "man", "."]) == "a man ."
    assert tokens_to_sentence([]) == "."
    assert tokens_to_sentence([b"caf\xc3\xa9", "au", "lait"]) == "café au lait"
    assert tokens_to_sentence("  already  joined ") == "already joined"
    with pytest.raises(InputTypeError, match="token 1"):
        tokens_to_sentence(["a", 3])
    with pytest.raises(InputTypeError):
        tokens_to_sentence(None)


def test_importing_the_adapter_imports_neither_senteval_nor_torch() -> None:
    code = ("import sys, flow_plugin.integrations.senteval, flow_plugin.cli.paper; "
            "print(sorted(m for m in ('senteval', 'torch', 'mteb', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_an_adapter_on_a_registry_backbone_leaves_mteb_unloaded() -> None:
    """MTEB loads for a base outside the registry only (its encoder wraps an MTEB model), not for a registry one."""
    code = (f"import sys; from flow_plugin.integrations.senteval import SentEvalAdapter; "
            f"adapter = SentEvalAdapter({MODEL!r}, precision='float32'); print(adapter.name, 'mteb' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.split() == [MODEL, "False"], out.stderr[-2000:]


@pytest.mark.skipif(__import__("flow_plugin._machine", fromlist=["cuda_available"]).cuda_available(),
                    reason="the check only refuses on machines without CUDA")
def test_tasks_that_would_assert_cuda_after_the_embedding_pass_are_refused_up_front() -> None:
    adapter = SentEvalAdapter(MODEL, precision="float32")
    encoded = adapter.encoder.n_encoded
    for task in ("STSBenchmark", "SICKRelatedness"):
        with pytest.raises(InputError, match=f"SentEval's {task} trains its evaluation model on CUDA only"):
            adapter.prepare(DotDict(current_task=task, usepytorch=False), [["a"], ["b"]])
    with pytest.raises(InputError, match=r"usepytorch'\] = False"):
        adapter.prepare(DotDict(current_task="MR", usepytorch=True), [["a"], ["b"]])
    assert adapter.encoder.n_encoded == encoded  # refused before a single sentence was embedded
    adapter.prepare(DotDict(current_task="MR", usepytorch=False), [["a", "man"], ["a", "dog"]])  # CPU settings work
    assert adapter.prepared_task == "MR"


# ----------------------------------------------------------------------------- a base outside the registry
#: prompts chosen by MTEB task type, as a user's model may carry them (saved in the folder)
TYPE_PROMPTS = {"Classification": "classify: ", "STS": "similar: "}
#: 512 distinct sentences (fewer than twice all-MiniLM-L6-v2's 384 dimensions: whitening shrinks its covariance)
SYNTHETIC = [f"the {who} {does} {what} today" for who in ("man", "woman", "dog", "cat", "child", "chef", "band", "team")
             for does in ("plays", "eats", "watches", "paints", "sells", "buys", "finds", "loses")
             for what in ("a guitar", "the piano", "some food", "a ball", "the news", "a car", "two books", "a map")]


@pytest.fixture(scope="module")
def prompted_folder(minilm_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """all-MiniLM-L6-v2 saved as a user's own sentence-transformers folder, with prompts by task type."""
    from sentence_transformers import SentenceTransformer

    folder = tmp_path_factory.mktemp("own-model") / "my-model"
    SentenceTransformer(str(minilm_path), prompts=TYPE_PROMPTS).save(str(folder))
    return folder


def test_a_folder_model_is_calibrated_with_its_own_loader_and_prompts(prompted_folder: Path) -> None:
    from sentence_transformers import SentenceTransformer

    name = f"flow_plugin/{prompted_folder}-whiten"
    adapter = SentEvalAdapter(name, show_progress_bar=False)
    assert adapter.name == name and adapter.method == "whiten"
    tokens = [sentence.split() for sentence in SYNTHETIC]
    params = DotDict(current_task="TREC", usepytorch=False)  # classification: the folder's "Classification" prompt
    adapter.prepare(params, tokens)
    rows = adapter.batcher(params, tokens[:8])
    model = SentenceTransformer(str(prompted_folder), device="cpu")
    expected = model.encode(SYNTHETIC, prompt="classify: ", convert_to_numpy=True)
    pooled = adapter.encoder.encode(SYNTHETIC)  # what prepare's fit read, kept for the batches
    # float32 on both sides, the same model (measured: equal; margin for other BLAS threads); the prompt moves a
    # row by 0.12
    np.testing.assert_allclose(pooled, expected, atol=1e-5)
    assert np.abs(pooled[:8] - model.encode(SYNTHETIC[:8], convert_to_numpy=True)).max() > 1e-2
    np.testing.assert_allclose(adapter.calibrator.mean_, expected.astype(np.float64).mean(axis=0), atol=1e-5)
    reference = Whitening().fit(expected)
    # the same whitening of rows equal up to the 1e-5 above, which whitening magnifies (measured: within 1e-6, on
    # rows of scale 3.6); the map fitted on the embeddings without the prompt is off by 6.8
    np.testing.assert_allclose(rows, reference.transform(expected[:8]), atol=5e-3)
    assert adapter.fit_log[-1]["task"] == "TREC" and adapter.fit_log[-1]["n_sentences"] == len(SYNTHETIC)

    params.current_task = "STS12"  # an STS task: the folder's "STS" prompt, and a fresh fit
    adapter.prepare(params, tokens[:400])
    np.testing.assert_allclose(adapter.encoder.encode(SYNTHETIC[:4]),
                               model.encode(SYNTHETIC[:4], prompt="similar: ", convert_to_numpy=True), atol=1e-5)


def test_a_base_outside_the_registry_gets_the_same_one_line_errors(prompted_folder: Path, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="apply to registry backbones only"):
        SentEvalAdapter(f"flow_plugin/{prompted_folder}-whiten", precision="bf16")
    with pytest.raises(InputError, match="no such folder"):
        SentEvalAdapter(f"flow_plugin/{tmp_path / 'missing'}-whiten")
    adapter = SentEvalAdapter(backbone=str(prompted_folder), calibrator="sn")
    with pytest.raises(NotPreparedError, match="batcher called before prepare"):
        adapter.batcher(DotDict(current_task="TREC"), [["a", "man"]])


def test_a_base_is_told_the_senteval_task_as_the_mteb_task_of_the_same_data() -> None:
    from flow_plugin.integrations.mteb.senteval_base import task_metadata

    told = {task: (task_metadata(task).name, task_metadata(task).type)
            for task in ("STS12", "SICKRelatedness", "MRPC", "SICKEntailment", "TREC")}
    assert told == {"STS12": ("SentEvalSTS12", "STS"), "SICKRelatedness": ("SentEvalSICKR", "STS"),
                    "MRPC": ("SentEvalMRPC", "PairClassification"),
                    "SICKEntailment": ("SentEvalSICKEntailment", "PairClassification"),
                    "TREC": ("SentEvalTREC", "Classification")}
