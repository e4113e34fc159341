"""Every MTEB task type runs with every calibrator under the default ``fit_corpus="target"``,
with one fit per (task, subset) shared by every call of it, and every fit is recorded.

MTEB's own mock tasks (``mteb.mocks``: the mono- and multilingual grid, text only), run by the
real ``mteb.evaluate``. The full grid runs on a tiny random BERT (2 layers, 32 dims) with
all-MiniLM-L6-v2's vocabulary, so that the mock sentences tokenize to different ids; the
monolingual grid also runs on all-MiniLM-L6-v2 itself.
"""

from __future__ import annotations

import math
import os
import tracemalloc
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import mteb
import pytest
from datasets import Dataset
from mteb.abstasks import AbsTaskClassification, AbsTaskRetrieval, AbsTaskSTS
from mteb.cache import ResultCache
from mteb.mocks import MOCK_TASK_TEST_GRID, MOCK_TASK_TEST_GRID_MONOLINGUAL
from mteb.mocks.mock_tasks import MockRetrievalTask

from flow_plugin.catalog.registry import RegistryModel
from flow_plugin.data.sampling import CorpusPart, sample_corpus
from flow_plugin.errors import InputError
from flow_plugin.results.fits import fits_path, read_fits
from flow_plugin.integrations.mteb.base_models import registry_model
from flow_plugin.integrations.mteb.calibrated import CalibratedModel


#: the six calibrator methods of the paper's table (flow variants are tested elsewhere)
CALIBRATOR_METHODS = ("raw", "sn", "natsv", "sn-natsv", "whiten", "flow")
#: the text tasks of MTEB's mock grid, once each (the grid lists MockMultilingualSTSTask twice)
TEXT_GRID = list({task.metadata.name: task for task in MOCK_TASK_TEST_GRID if list(task.metadata.modalities) == ["text"]}.values())
TASK_TYPES = sorted({task.metadata.type for task in TEXT_GRID})


def run_grid(models: list[CalibratedModel], tasks: list) -> dict[tuple[str, str], float]:
    """(task, calibrator) -> main score, every task evaluated by the real mteb.evaluate."""
    scores = {}
    for model in models:
        for task in tasks:
            result = mteb.evaluate(model, task, cache=None, co2_tracker=False, show_progress_bar=False)
            scores[(task.metadata.name, model.calibrator)] = result.task_results[0].get_score()
    return scores


@pytest.fixture(scope="module")
def tiny_grid(tiny_spec, tmp_path_factory: pytest.TempPathFactory):
    os.environ.pop("FLOW_PLUGIN_CACHE_DIR", None)  # memory cache only
    models = [registry_model(RegistryModel(tiny_spec, method)) for method in CALIBRATOR_METHODS]
    return models, run_grid(models, TEXT_GRID)


@pytest.mark.slow
def test_every_task_type_runs_with_every_calibrator(tiny_grid) -> None:
    models, scores = tiny_grid
    assert {"BitextMining", "Classification", "Clustering", "InstructionReranking", "InstructionRetrieval",
            "MultilabelClassification", "PairClassification", "Regression", "Reranking", "Retrieval", "STS",
            "Summarization", "ZeroShotClassification"} <= set(TASK_TYPES)
    assert len(scores) == len(TEXT_GRID) * len(CALIBRATOR_METHODS) == len(TEXT_GRID) * 6
    bad = {key: score for key, score in scores.items() if not math.isfinite(score)}
    assert not bad, bad
    # the calibrators do change the embeddings: some task scores differently than raw with each of them
    for method in CALIBRATOR_METHODS[1:]:
        assert any(scores[(task.metadata.name, method)] != scores[(task.metadata.name, "raw")] for task in TEXT_GRID), method


def _records(model: CalibratedModel) -> dict[tuple[str, str], dict]:
    counts = Counter((record["task"], record["hf_subset"]) for record in model.fit_log)
    assert all(count == 1 for count in counts.values()), [key for key, count in counts.items() if count > 1]
    return {(record["task"], record["hf_subset"]): record for record in model.fit_log}


def test_one_fit_per_task_and_subset_serves_both_sides(tiny_grid) -> None:
    models, _ = tiny_grid
    for model in models[1:]:  # raw fits nothing
        records = _records(model)
        for task in TEXT_GRID:
            name = task.metadata.name
            subsets = ["parallel"] if getattr(task, "parallel_subsets", False) else task.hf_subsets
            for subset in subsets:
                record = records[(name, subset)]
                assert record["fit_corpus"] == "target" and record["calibrator"] == model.calibrator
                assert record["n_sentences"] >= 2 and record["fit_seconds"] >= 0, record
                served = record["served"]
                assert {call["task"] for call in served} == {name}
                if isinstance(task, AbsTaskRetrieval):  # queries and documents through one fit
                    assert {call["prompt_type"] for call in served} == {"query", "document"}, (name, served)
                    assert {part.split("/")[1] for part in record["sampling"]["parts"]} == {"queries", "corpus"}
                elif isinstance(task, AbsTaskClassification):  # train and test through one fit
                    assert {call["split"] for call in served} >= {"train", "test"}, (name, served)
                    assert {part.split("/")[1] for part in record["sampling"]["parts"]} == {task.input_column_name}
                elif isinstance(task, AbsTaskSTS):  # sentence1 and sentence2
                    assert len(served) >= 2 and {part.split("/")[1] for part in record["sampling"]["parts"]} == {
                        "sentence1", "sentence2"}
                elif task.metadata.type == "Summarization":  # the summaries MTEB encodes, not the source texts
                    assert {part.split("/")[1] for part in record["sampling"]["parts"]} == {
                        "human_summaries", "machine_summaries"}
                elif getattr(task, "parallel_subsets", False):  # every language of every pair
                    assert {call["hf_subset"] for call in served} == {"eng_Latn", "fra_Latn"}, served
        assert len(records) == sum(
            1 if getattr(task, "parallel_subsets", False) else len(task.hf_subsets) for task in TEXT_GRID)


def test_small_sample_rule_is_recorded(tiny_grid) -> None:
    models, _ = tiny_grid
    by_method = {model.calibrator: model for model in models}
    whiten = _records(by_method["whiten"])[("MockSTSTask", "default")]
    assert "Ledoit-Wolf shrinkage" in whiten["adapted"] and whiten["params"].get("shrinkage") == 0.0  # as set
    assert whiten["effective_params"]["covariance_estimator_"] == "ledoit-wolf"
    natsv = _records(by_method["natsv"])[("MockSTSTask", "default")]
    assert "n_components_=1" in natsv["adapted"]  # 4 distinct sentences span 3 directions: null at most 1
    assert natsv["params"]["n_components"] == 5 and natsv["effective_params"] == {"n_components_": 1}
    assert _records(by_method["sn"])[("MockSTSTask", "default")]["adapted"] is None


@pytest.mark.slow
def test_monolingual_grid_on_minilm_six_variants(minilm_path: Path) -> None:
    models = [mteb.get_model(f"flow_plugin/minilm-l6{'' if method == 'raw' else '-' + method}")
              for method in CALIBRATOR_METHODS]
    tasks = list({task.metadata.name: task for task in MOCK_TASK_TEST_GRID_MONOLINGUAL
                  if list(task.metadata.modalities) == ["text"]}.values())
    scores = run_grid(models, tasks)
    assert len(scores) == 6 * len(tasks) and all(math.isfinite(score) for score in scores.values())
    assert scores[("MockSTSTask", "flow")] == pytest.approx(1.0)  # 2 pairs in the right order
    for model in models[1:]:
        assert len(_records(model)) == sum(len(task.hf_subsets) for task in tasks)


def test_too_few_distinct_sentences_is_an_error_naming_task_and_remedy(tiny_spec) -> None:
    from mteb.mocks.mock_tasks import MockClassificationTask

    task = MockClassificationTask()
    task.load_data()
    same = Dataset.from_dict({"text": ["the same sentence"] * 4, "label": [0, 1, 0, 1]})
    task.dataset = {"train": same, "test": same}
    model = registry_model(RegistryModel(tiny_spec, "sn"))
    with pytest.raises(InputError, match=r"cannot fit sn for task MockClassificationTask, subset default .*"
                                         r"fit_corpus=<a text file"):
        model.prepare(task)


def test_fit_records_next_to_the_result_with_a_capped_sample(tiny_spec, tmp_path: Path) -> None:
    from flow_plugin.leaderboard.ingest.results import find_results, read_score

    model = registry_model(RegistryModel(tiny_spec, "whiten"), max_fit_sentences=3, fit_seed=7)
    mteb.evaluate(model, MockRetrievalTask(), cache=ResultCache(tmp_path), co2_tracker=False, show_progress_bar=False)
    results = find_results(tmp_path)
    (result_file,) = [file for file in results.files if file.task == "MockRetrievalTask"]
    fits = read_fits(fits_path(result_file.path))
    (record,) = fits["fits"]
    assert (fits["task"], fits["model"], record["calibrator"]) == ("MockRetrievalTask", "flow_plugin/tiny-whiten", "whiten")
    assert record["n_sentences"] == record["n_unique_sentences"] == 3
    assert record["sampling"] | {"parts": None} == {
        "corpus_sentences": 8, "corpus_unique_sentences": 4, "corpus_unique_exact": True, "sampled": True,
        "max_fit_sentences": 3, "seed": 7, "parts": None}
    assert record["calls"] == len(record["served"]) == 4  # queries and corpus of test and val
    entry = read_score(result_file)
    assert entry.fits is not None and entry.fits[0]["sampled"] is True and entry.fits[0]["seed"] == 7
    assert entry.fits[0]["fit_corpus"] == "target"


def test_misspelt_new_loader_arguments(tiny_spec) -> None:
    with pytest.raises(InputError, match=r"'max_fit_sentence' \(did you mean 'max_fit_sentences'\?\)"):
        registry_model(RegistryModel(tiny_spec, "sn"), max_fit_sentence=10)
    with pytest.raises(InputError, match="max_fit_sentences must be a positive int, got 0"):
        registry_model(RegistryModel(tiny_spec, "sn"), max_fit_sentences=0)


# ------------------------------------------------------------------ a corpus too large to fit on
def _synthetic_parts(n: int, chunk: int = 5_000) -> list[CorpusPart]:
    def chunks() -> Iterator[list[str]]:
        for start in range(0, n, chunk):
            yield [f"passage number {i} about topic {i % 97}" for i in range(start, min(n, start + chunk))]

    return [CorpusPart("test/corpus", chunks)]


def _peak_bytes(n: int, cap: int) -> tuple[int, list[str]]:
    tracemalloc.start()
    try:
        sample = sample_corpus(_synthetic_parts(n), cap=cap, seed=0)
        return tracemalloc.get_traced_memory()[1], sample.sentences
    finally:
        tracemalloc.stop()


def test_sample_cap_bounds_memory_not_the_corpus() -> None:
    small_peak, small = _peak_bytes(20_000, cap=1_000)
    large_peak, large = _peak_bytes(200_000, cap=1_000)
    assert len(small) == len(large) == len(set(large)) == 1_000
    # ten times the corpus, the same peak: the sample, its hashes and one chunk (8 bytes a sentence would be +1.4 MB)
    assert large_peak < small_peak * 1.25 + 100_000, (small_peak, large_peak)
    # seeded and independent of the order the corpus arrives in
    reverse = [CorpusPart("test/corpus", lambda: (chunk[::-1] for chunk in reversed(list(_synthetic_parts(200_000)[0].chunks()))))]
    assert sample_corpus(reverse, cap=1_000, seed=0).sentences == large
    assert sample_corpus(_synthetic_parts(200_000), cap=1_000, seed=1).sentences != large


def test_large_retrieval_corpus_is_fitted_on_a_sample(tiny_spec) -> None:
    """prepare on a retrieval task with 60,000 passages encodes only the capped sample."""
    task = MockRetrievalTask()
    task.load_data()
    corpus = Dataset.from_dict({"id": [f"d{i}" for i in range(60_000)],
                                "text": [f"passage {i} on topic {i % 89}" for i in range(60_000)],
                                "title": [""] * 60_000})
    for split in task.dataset["default"].values():
        split["corpus"] = corpus
    model = registry_model(RegistryModel(tiny_spec, "sn"), max_fit_sentences=500)
    before = model.base.encoder.n_encoded
    (record,) = model.prepare(task)
    assert record["n_sentences"] == 500 and record["sampling"]["sampled"] is True
    assert record["sampling"]["corpus_sentences"] == 2 * (60_000 + 2)  # test and val: 2 queries each
    # both splits share the corpus: about 60,000 distinct sentences, estimated from the sketch
    assert record["sampling"]["corpus_unique_exact"] is False
    assert 45_000 < record["sampling"]["corpus_unique_sentences"] < 80_000
    assert model.base.encoder.n_encoded - before <= 500  # the fit encoded the sample only


def test_model_meta_fills_what_mtebs_leaderboard_reads() -> None:
    """training_datasets from MTEB's own entry of a sentence-transformers backbone (so the zero-shot
    column is right), none for a pre-trained encoder; embedding parameters = vocabulary x width."""
    own = mteb.get_model_meta("sentence-transformers/all-MiniLM-L6-v2")
    flow = mteb.get_model_meta("flow_plugin/minilm-l6-flow")
    assert flow.adapted_from == "sentence-transformers/all-MiniLM-L6-v2"
    assert flow.training_datasets == own.training_datasets and flow.training_datasets
    assert flow.n_embedding_parameters == 30522 * 384 and flow.max_tokens == 64
    assert flow.public_training_code == "https://github.com/bohanli/BERT-flow"
    assert mteb.get_model_meta("flow_plugin/minilm-l6-sn").public_training_code is None  # no training code of ours
    bert = mteb.get_model_meta("flow_plugin/bert-base-flow")
    assert not bert.training_datasets and bert.n_embedding_parameters == 30522 * 768
