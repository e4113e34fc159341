"""The MTEB plugin, offline: start-up hook, ModelMeta, lazy per-task fitting, offline tasks,
the real ``mteb run`` CLI and ``flow-plugin eval``."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import mteb
import numpy as np
import pytest

from flow_plugin.encoding.cache import clear_shared_encoders
from flow_plugin.errors import DataFolderError, InputError
from flow_plugin.integrations.mteb.base_models import registry_model
from flow_plugin.integrations.mteb.calibrated import CalibratedModel
from flow_plugin.integrations.mteb.corpus import TaskCorpusError
from flow_plugin.integrations.mteb.sts_tasks import TASK_NAMES, SentEvalSTS13, get_offline_task
from flow_plugin.catalog.registry import MODEL_NAME_SUFFIXES, parse_model_name
from flow_plugin.calibration import CALIBRATOR_METHODS, GENTLE_CALIBRATORS
from flow_plugin.data.senteval import task_sentences

from conftest import result_file

REPO = Path(__file__).resolve().parents[1]
MINILM_VARIANTS = [f"flow_plugin/minilm-l6{MODEL_NAME_SUFFIXES[name]}" for name in CALIBRATOR_METHODS]  # the six methods


def run_python(code: str, env: dict[str, str] | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=full_env, timeout=timeout, cwd=REPO)


def result_json(output: Path, model: str, task: str) -> dict:
    return json.loads(result_file(output, model, task).read_text())


# ------------------------------------------------------------------ start-up hook and ModelMeta
def test_startup_hook_is_installed_and_imports_nothing_heavy() -> None:
    result = run_python(
        """
        import sys
        heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'mteb', 'numpy', 'transformers'))
        print(repr((heavy, sorted(m for m in sys.modules if m.startswith('flow_plugin')))))
        """
    )
    assert result.returncode == 0, result.stderr
    heavy, ours = eval(result.stdout.strip())  # noqa: S307 -- our own repr
    assert heavy == [] and ours == [
        "flow_plugin", "flow_plugin.integrations", "flow_plugin.integrations.mteb", "flow_plugin.integrations.mteb.hook"
    ]


@pytest.mark.slow
def test_model_meta_without_weights_and_hook_can_be_turned_off() -> None:
    code = """
        import mteb
        meta = mteb.get_model_meta('flow_plugin/bert-base-flow')
        print(meta.name, meta.revision, meta.experiment_name, meta.embed_dim, meta.n_parameters,
              meta.similarity_fn_name.value)
        print('SentEvalSTSBenchmark' in [t.metadata.name for t in mteb.get_tasks(tasks=['SentEvalSTSBenchmark'])])
    """
    # bert-base-uncased's weights are not on this machine and the hub is offline: reading the
    # metadata must not try to load them
    on = run_python(code)
    assert on.returncode == 0, on.stderr
    # the backbone's name and revision (the weights' pinned commit, then the digest of the registry configuration),
    # the calibrator as MTEB's experiment: results land in experiments/calibrator_flow/ under the backbone's folder
    assert on.stdout.split() == [
        "flow_plugin/bert-base", parse_model_name("flow_plugin/bert-base").revision, "calibrator_flow", "768",
        "109482240", "cosine", "True",
    ]
    assert on.stdout.split()[1].startswith("86b5e0934494bd15c9632b12f734a8a67f723594-")
    off = run_python(code, env={"FLOW_PLUGIN_DISABLE_MTEB_HOOK": "1"})
    assert off.returncode != 0 and "not found in MTEB registry" in off.stderr
    manual = run_python("import mteb, flow_plugin.integrations.mteb.hook as h; h.register(); print(mteb.get_model_meta('flow_plugin/minilm-l6').name)",
                        env={"FLOW_PLUGIN_DISABLE_MTEB_HOOK": "1"})
    assert manual.returncode == 0 and manual.stdout.strip() == "flow_plugin/minilm-l6", manual.stderr


def test_every_registry_model_is_in_mtebs_registry() -> None:
    for backbone in ("bert-base", "bert-large", "roberta-base", "minilm-l6", "mpnet-base"):
        for suffix in MODEL_NAME_SUFFIXES.values():
            meta = mteb.get_model_meta(f"flow_plugin/{backbone}{suffix}")
            assert meta.loader is not None and meta.open_weights
    assert "BERT-flow" not in (mteb.get_model_meta("flow_plugin/bert-base").citation or "")
    assert "li2020bertflow" in mteb.get_model_meta("flow_plugin/bert-base-flow").citation


@pytest.mark.parametrize("calibrator", ["flow", "flow-lu", "flow-affine", "flow-glow", "flow-white", "flow-es", "flow-ens"])
def test_the_flow_and_each_flow_variant_cite_bert_flow_and_link_its_training_code(calibrator: str) -> None:
    meta = mteb.get_model_meta(f"flow_plugin/minilm-l6-{calibrator}")
    assert "li2020bertflow" in (meta.citation or "")
    assert meta.public_training_code == "https://github.com/bohanli/BERT-flow"


@pytest.mark.parametrize("calibrator", ["sn", "natsv", "sn-natsv", "whiten", *GENTLE_CALIBRATORS])
def test_linear_calibrators_do_not_cite_bert_flow(calibrator: str) -> None:
    meta = mteb.get_model_meta(f"flow_plugin/minilm-l6-{calibrator}")
    assert "li2020bertflow" not in (meta.citation or "")
    assert meta.public_training_code != "https://github.com/bohanli/BERT-flow"
    # the width MTEB is told: all 384 dimensions, but a third of them for whiten-third
    assert meta.embed_dim == (128 if calibrator == "whiten-third" else 384)
    with pytest.raises(KeyError, match="Did you mean: 'flow_plugin/bert-base-flow'"):
        mteb.get_model_meta("flow_plugin/bert-bse-flow")


@pytest.mark.slow
def test_extra_registry_folder_adds_a_backbone_to_mteb(tmp_path: Path, tiny_bert_dir: Path) -> None:
    (tmp_path / "tiny.toml").write_text(
        f'hub_id = "{tiny_bert_dir}"\npooling = "cls"\nmax_seq_length = 16\nembedding_dim = 32\n'
        'n_parameters = 1\nlicense = "mit"\nrelease_date = "2024-01-01"\nreference = "https://example.org"\n'
    )
    result = run_python(
        "import mteb; m = mteb.get_model('flow_plugin/tiny-sn'); print(type(m).__name__, m.base.encoder.embedding_dim)",
        env={"FLOW_PLUGIN_REGISTRY": str(tmp_path)},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["CalibratedModel", "32"]


# ------------------------------------------------------------------ mteb.evaluate on MTEB's own mock task
def test_mteb_evaluate_on_mtebs_mock_sts_task(minilm_path: Path, tmp_path: Path) -> None:
    from mteb.cache import ResultCache
    from mteb.mocks.mock_tasks.sts import MockSTSTask

    task = MockSTSTask()
    clear_shared_encoders()  # an earlier test may have loaded the shared MiniLM backbone
    model = mteb.get_model("flow_plugin/minilm-l6-sn")
    assert isinstance(model, CalibratedModel) and not model.base.encoder.backbone.is_loaded  # weights load lazily
    # a task object outside MTEB's registry: the model finds the task being evaluated, no prepare needed
    result = mteb.evaluate(model, task, cache=ResultCache(tmp_path), co2_tracker=False)
    scores = result.task_results[0].scores["test"][0]
    assert scores["main_score"] == scores["cosine_spearman"] == pytest.approx(1.0)  # 2 pairs, right order
    assert [record["n_sentences"] for record in model.fit_log] == [4]  # both sentence columns of the split
    with pytest.warns(UserWarning, match="different spaces"):
        per_call = mteb.get_model("flow_plugin/minilm-l6-sn", fit_corpus="per-call")
    mteb.evaluate(per_call, MockSTSTask(), cache=None, co2_tracker=False)
    assert [record["n_sentences"] for record in per_call.fit_log] == [2, 2]  # sentence1, then sentence2
    with pytest.raises(InputError, match="fit_corpus='inputs' is now named 'per-call'"):
        mteb.get_model("flow_plugin/minilm-l6-sn", fit_corpus="inputs")


def test_target_corpus_is_per_subset_on_a_multilingual_task(minilm_path: Path) -> None:
    from mteb.mocks.mock_tasks.sts import MockMultilingualSTSTask

    task = MockMultilingualSTSTask()
    model = mteb.get_model("flow_plugin/minilm-l6-sn")
    model.prepare(task)
    result = mteb.evaluate(model, task, cache=None, co2_tracker=False).task_results[0]
    assert sorted(score["hf_subset"] for score in result.scores["test"]) == ["eng", "fra"]
    assert sorted((r["task"], r["hf_subset"], r["n_sentences"]) for r in model.fit_log) == [
        ("MockMultilingualSTSTask", "eng", 4),
        ("MockMultilingualSTSTask", "fra", 4),
    ]


# ------------------------------------------------------------------ lazy fit, one backbone pass
@pytest.fixture(scope="module")
def sts13_six_variants(senteval_dir: Path, minilm_path: Path):
    clear_shared_encoders()
    models = [mteb.get_model(name) for name in MINILM_VARIANTS]
    task = SentEvalSTS13(data_dir=senteval_dir)
    results = {}
    for model in models:
        results[model.name] = mteb.evaluate(model, task, cache=None, co2_tracker=False).task_results[0]
    yield models, results
    clear_shared_encoders()


def test_each_task_is_fitted_once_and_the_backbone_runs_once_per_sentence(sts13_six_variants, senteval_dir: Path) -> None:
    models, _ = sts13_six_variants
    encoder = models[0].base.encoder
    assert all(model.base.encoder is encoder for model in models)  # one shared backbone
    unique = set(task_sentences(senteval_dir, "STS13"))
    assert encoder.n_encoded == len(unique)  # every unique sentence through the backbone once, for all six
    for model in models:
        assert len(model.fit_log) == (0 if model.calibrator == "raw" else 1)  # raw fits nothing
        if model.calibrator == "raw":
            continue
        record = model.fit_log[0]
        assert (record["task"], record["hf_subset"]) == ("SentEvalSTS13", "default")
        if model.calibrator != "raw":
            assert record["n_sentences"] == 2 * 1500 and record["source"].startswith("target")


def test_six_variants_score_plausibly_with_both_protocols(sts13_six_variants) -> None:
    _, results = sts13_six_variants
    for name, result in results.items():
        scores = result.scores["test"][0]
        assert 0.5 < scores["cosine_spearman"] < 0.95, name
        assert set(scores["subsets"]) == {"FNWN", "headlines", "OnWN"}
        weighted = sum(s["n_pairs"] * s["cosine_spearman"] for s in scores["subsets"].values()) / 1500
        assert scores["cosine_spearman_wmean"] == pytest.approx(weighted, abs=1e-6)
        assert scores["protocols"]["cosine_spearman"].startswith("all")
        assert result.dataset_revision.startswith("sha256:")
    # all-MiniLM-L6-v2 scores about 0.8 on STS13 with raw cosine
    assert results["flow_plugin/minilm-l6"].scores["test"][0]["cosine_spearman"] > 0.75


# ------------------------------------------------------------------ fit corpora
def test_fit_on_an_external_sentence_file(tmp_path: Path, minilm_path: Path) -> None:
    corpus = tmp_path / "nli.txt"
    corpus.write_text("A man plays guitar.\nA woman cooks.\nTwo dogs run.\nKids play football.\n", encoding="utf-8")
    from mteb.mocks.mock_tasks.sts import MockMultilingualSTSTask, MockSTSTask

    model = registry_model("flow_plugin/minilm-l6-sn", fit_corpus=corpus)
    first = model.calibrator_for(MockSTSTask())
    assert model.calibrator_for(MockMultilingualSTSTask(), "fra") is first  # one fit for every task
    assert model.fit_log[0]["n_sentences"] == 4 and model.fit_log[0]["source"] == f"file {corpus}, all 4 sentences"
    blank = tmp_path / "blank.txt"
    blank.write_text("one\n\nthree\n", encoding="utf-8")
    with pytest.raises(DataFolderError, match="blank line"):
        registry_model("flow_plugin/minilm-l6-sn", fit_corpus=blank).calibrator_for(MockSTSTask())
    with pytest.raises(InputError, match="neither a known policy nor an existing file"):
        registry_model("flow_plugin/minilm-l6-sn", fit_corpus="tagret")


def test_eval_splits_fits_on_the_scored_splits_only(minilm_path: Path) -> None:
    from mteb.mocks import MockClassificationTask

    fitted = {}
    for policy in ("target", "eval-splits"):
        model = mteb.get_model("flow_plugin/minilm-l6-sn", fit_corpus=policy)
        result = mteb.evaluate(model, MockClassificationTask(), cache=None, co2_tracker=False).task_results[0]
        assert 0 <= result.scores["test"][0]["main_score"] <= 1
        (record,) = model.fit_log
        fitted[policy] = (record["n_sentences"], record["source"].split(",")[0])
    # the mock task's train and test splits hold two sentences each; MTEB scores the test split
    assert fitted == {"target": (4, "target: MockClassificationTask/default (test/text"),
                      "eval-splits": (2, "eval-splits: MockClassificationTask/default (test/text)")}
    with pytest.raises(InputError, match="did you mean 'eval-splits'"):
        registry_model("flow_plugin/minilm-l6-sn", fit_corpus="eval-split")


def test_eval_splits_fits_on_the_queries_mteb_scores(minilm_path: Path) -> None:
    from datasets import Dataset
    from mteb.mocks import MockRetrievalTask

    task = MockRetrievalTask()
    task.load_data()
    split = task.dataset["default"]["test"] if "default" in task.dataset else task.dataset["test"]
    # a third query without a relevant document: MTEB's evaluation drops it before encoding
    split["queries"] = Dataset.from_dict({"id": [*split["queries"]["id"], "q-unjudged"],
                                          "text": [*split["queries"]["text"], "A query nobody judged"]})
    sources = {}
    for policy in ("target", "eval-splits"):
        model = registry_model("flow_plugin/minilm-l6-sn", fit_corpus=policy)
        model.calibrator_for(task)
        sources[policy] = model.fit_log[0]["n_sentences"]
    splits = task.dataset["default"] if "default" in task.dataset else task.dataset
    everything = sum(len(data["queries"]) + len(data["corpus"]) for data in splits.values())
    unjudged = sum(not data["relevant_docs"].get(query) for data in splits.values() for query in data["queries"]["id"])
    assert unjudged >= 1  # (the mock's splits may share one table: then each holds the added query)
    assert sources == {"target": everything, "eval-splits": everything - unjudged}


def test_fit_is_logged(minilm_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from mteb.mocks.mock_tasks.sts import MockSTSTask

    with pytest.warns(UserWarning, match="different spaces"):
        model = mteb.get_model("flow_plugin/minilm-l6-natsv", fit_corpus="per-call",
                               calibrator_params={"n_components": 1})
    with caplog.at_level(logging.INFO, logger="flow_plugin.integrations.mteb.fits"):
        mteb.evaluate(model, MockSTSTask(), cache=None, co2_tracker=False)
    assert "fitted natsv for MockSTSTask/default on 2 sentences (2 unique)" in caplog.text
    assert "from per-call: the sentences of this encode() call" in caplog.text


# ------------------------------------------------------------------ offline tasks
def test_offline_tasks_need_a_configured_folder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for variable in ("FLOW_PLUGIN_SHARED_DATA", "FLOW_PLUGIN_SENTEVAL_DATA", "FLOW_PLUGIN_GLUE_DATA"):
        monkeypatch.delenv(variable, raising=False)
    with pytest.raises(DataFolderError, match="FLOW_PLUGIN_SHARED_DATA"):
        get_offline_task("SentEvalSTSBenchmark").load_data()
    (tmp_path / "downstream" / "STS" / "STSBenchmark").mkdir(parents=True)
    with pytest.raises(DataFolderError, match="sts-train.csv"):
        get_offline_task("SentEvalSTSBenchmark", data_dir=tmp_path).load_data()
    assert set(TASK_NAMES) <= set(t.metadata.name for t in mteb.get_tasks(tasks=list(TASK_NAMES)))


# ------------------------------------------------------------------ the real CLIs
@pytest.mark.slow
def test_real_mteb_run_cli_offline(senteval_dir: Path, minilm_path: Path, tmp_path: Path) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "FLOW_PLUGIN_SHARED_DATA": str(senteval_dir.parent),
           "FLOW_PLUGIN_CACHE_DIR": str(tmp_path / "cache")}
    output = tmp_path / "out"
    for model in ("flow_plugin/minilm-l6", "flow_plugin/minilm-l6-flow"):
        # the timeout guards against a hang, it is no speed target: both runs took 357 s on an idle 2-core
        # AMD EPYC, and the flow run alone passed 1200 s there with both cores kept busy by other processes
        done = subprocess.run(
            ["mteb", "run", "-m", model, "-t", "SentEvalSTSBenchmark", "--output-folder", str(output), "--no-co2-tracker"],
            capture_output=True, text=True, env=env, timeout=3600, cwd=tmp_path,
        )
        assert done.returncode == 0, done.stderr[-3000:]
    raw = result_json(output, "flow_plugin/minilm-l6", "SentEvalSTSBenchmark")["scores"]["test"][0]
    flow = result_json(output, "flow_plugin/minilm-l6-flow", "SentEvalSTSBenchmark")["scores"]["test"][0]
    assert raw["main_score"] == pytest.approx(0.82, abs=0.02)  # all-MiniLM-L6-v2 on STS-B test
    assert raw["n_pairs"] == flow["n_pairs"] == 1379
    assert 0.70 < flow["main_score"] < 0.90
    meta = json.loads((result_file(output, "flow_plugin/minilm-l6-flow", "SentEvalSTSBenchmark").parent
                       / "model_meta.json").read_text())
    # the precision "auto" resolved to on this machine names the result too (float32 or bf16, by CPU family)
    assert meta["name"] == "flow_plugin/minilm-l6" and meta["experiment_kwargs"]["calibrator"] == "flow"
    assert set(meta["experiment_kwargs"]) == {"calibrator", "precision"}
    assert meta["experiment_kwargs"]["precision"] in ("float32", "bf16")
    # across both processes every unique sentence went through the backbone once: the flow run read the
    # test sentences from the raw run's on-disk cache and encoded only the train/dev ones
    shards = list((tmp_path / "cache").glob("*/shard-*.npz"))
    rows = sum(len(np.load(shard)["hashes"]) for shard in shards)
    assert len(shards) == 3 and rows == len(set(task_sentences(senteval_dir, "STSBenchmark")))


def test_flow_plugin_eval_cli(senteval_dir: Path, minilm_path: Path, tmp_path: Path) -> None:
    from flow_plugin.cli.main import main

    code = main(["eval", "-m", "flow_plugin/minilm-l6-natsv", "--data", str(senteval_dir), "-t", "SentEvalSTS13",
                 "--output-folder", str(tmp_path)])
    assert code == 0
    scores = result_json(tmp_path, "flow_plugin/minilm-l6-natsv", "SentEvalSTS13")["scores"]["test"][0]
    assert 0.5 < scores["cosine_spearman"] < 0.95 and "cosine_spearman_wmean" in scores
    assert main(["eval", "-m", "flow_plugin/minilm-l6", "--data", str(tmp_path), "--output-folder", str(tmp_path)]) == 2
    assert main(["eval", "-m", "flow_plugin/nope", "--data", str(senteval_dir), "-t", "SentEvalSTS13",
                 "--output-folder", str(tmp_path)]) == 2


def test_eval_keeps_embeddings_in_its_cache_folder_and_names_no_result_by_it(
        senteval_dir: Path, minilm_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--cache-dir`` reaches a registry backbone and a base MTEB loads as a loader argument, which MTEB would
    make an experiment of its own: no result is filed by where its embeddings were kept."""
    import shutil

    from flow_plugin.cli.main import main

    monkeypatch.delenv("FLOW_PLUGIN_CACHE_DIR", raising=False)
    folder, cache, output = tmp_path / "my-model", tmp_path / "cache", tmp_path / "out"
    shutil.copytree(minilm_path, folder)
    models = ["flow_plugin/minilm-l6-sn", f"flow_plugin/{folder}-sn"]
    code = main(["eval", *[part for model in models for part in ("-m", model)], "--data", str(senteval_dir),
                 "-t", "SentEvalSTS13", "--output-folder", str(output), "--cache-dir", str(cache)])
    assert code == 0 and "FLOW_PLUGIN_CACHE_DIR" not in os.environ
    for model in models:
        path = result_file(output, model, "SentEvalSTS13")
        meta = json.loads((path.parent / "model_meta.json").read_text())
        assert "cache" not in str(path.relative_to(output)) and "cache_dir" not in meta["experiment_kwargs"]
        assert "cache_dir" not in (meta.get("loader_kwargs") or {})
    assert list(cache.glob("*/shard-*.npz"))  # the backbone's sentences
    assert list(cache.glob("*/*/shard-*.npz"))  # the folder's, per task, subset and side


def test_transform_output_matches_library_path(sts13_six_variants, senteval_dir: Path) -> None:
    """The MTEB wrapper is a thin layer: its embeddings equal backbone -> fitted calibrator."""
    models, _ = sts13_six_variants
    flow_model = next(model for model in models if model.calibrator == "flow")
    sentences = ["a man is playing a guitar .", "a woman is slicing an onion ."]
    calibrator = flow_model.calibrator_for(SentEvalSTS13(data_dir=senteval_dir))  # the fit mteb.evaluate made
    direct = calibrator.transform(flow_model.base.encoder.encode(sentences))
    from mteb.abstasks.task_metadata import TaskMetadata  # noqa: F401 -- the wrapper takes any metadata

    via_wrapper = flow_model.encode(sentences, task_metadata=SentEvalSTS13.metadata, hf_split="test", hf_subset="default")
    np.testing.assert_array_equal(via_wrapper, direct)


def test_misspelt_loader_arguments_are_errors_with_the_right_name(minilm_path: Path) -> None:
    with pytest.raises(InputError, match=r"unknown loader argument\(s\) 'fit_corpsu' \(did you mean 'fit_corpus'\?\)"):
        mteb.get_model("flow_plugin/minilm-l6-sn", fit_corpsu="inputs")
    with pytest.raises(InputError, match=r"'precison' \(did you mean 'precision'\?\)"):
        registry_model("flow_plugin/minilm-l6", precison="float32")
    with pytest.raises(InputError, match="batch_size must be a positive int, got 0"):
        registry_model("flow_plugin/minilm-l6", batch_size=0)


def _modules_at_start(env: dict[str, str]) -> set[str]:
    result = run_python("import sys; print('\\n'.join(sorted(sys.modules)))", env=env)
    assert result.returncode == 0, result.stderr
    return set(result.stdout.split())


def test_the_startup_hook_costs_nothing_when_disabled_and_four_small_modules_otherwise() -> None:
    enabled = _modules_at_start({})
    disabled = _modules_at_start({"FLOW_PLUGIN_DISABLE_MTEB_HOOK": "1"})
    ours = {"flow_plugin", "flow_plugin.integrations", "flow_plugin.integrations.mteb", "flow_plugin.integrations.mteb.hook"}
    assert not any(name.startswith("flow_plugin") for name in disabled)  # the .pth line reads the variable first
    extra = enabled - disabled
    assert ours <= extra
    # before: 75 extra standard-library modules (logging, typing, importlib.abc, ...); now ours and at most the
    # two the import system itself loads for a first source file (marshal, time)
    assert extra - ours <= {"marshal", "time", "_io", "__future__"}, sorted(extra - ours)
