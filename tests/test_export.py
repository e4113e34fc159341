"""``flow-plugin export``: a registry model or a local folder with its fitted calibrator as a sentence-transformers
folder.

Real sentence-transformers, the real all-MiniLM-L6-v2 weights. Every route is exported from one small sentence file
and its folder loaded with ``SentenceTransformer``: each of the six methods, the gentle family and auto of a registry
model, a local folder with its own modules and prompts, a saved calibrator file, the registry's poolings. Each
folder's embeddings are compared with flow-plugin's own calibrated embeddings (its backbone in float32 and in bf16),
and in two parts: the modules before the calibrator, then the calibration modules on the same input (the figures
and measures of ``benchmarks/export_agreement.py``). The linear exports load in a process that cannot import
flow_plugin; one exported whitening model is scored by ``mteb.evaluate`` like the plugin's model fitted on the same
file.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from sentence_transformers import SentenceTransformer

from benchmarks.export_agreement import cosine_difference, folder_parts, relative_difference
from flow_plugin.calibration import CALIBRATOR_METHODS, GENTLE_CALIBRATORS, make_calibrator
from flow_plugin.calibration.auto import RULES
from flow_plugin.catalog.builders import build_encoder
from flow_plugin.catalog.registry import RegistryModel, parse_backbone_file, parse_model_name
from flow_plugin.encoding.options import EncoderOptions
from flow_plugin.errors import CalibratorFileError, DataFolderError, InputError, LeaderboardError, OutputError, RegistryError
from flow_plugin.leaderboard import Leaderboard, Row, TaskScore, benchmark_row, empty_leaderboard
from flow_plugin.integrations.sentence_transformers import export_model
from flow_plugin.integrations.sentence_transformers import export as export_module

# ------------------------------------------------------------------ the sentences
_SUBJECTS = ("A man", "A woman", "Two children", "The old dog", "A young girl", "Three students", "The chef",
             "A street musician", "The farmer", "A police officer")
_VERBS = ("is playing with", "is cleaning", "is painting", "is carrying", "is looking at")
_OBJECTS = ("a guitar", "the kitchen floor", "a large red barn", "a basket of apples")
_TAILS = ("", " in the park", " while it rains outside", " before the sun goes down behind the hills",
          " and nobody in the crowded room seems to notice what is happening")

#: sentences none of the fits saw, from 3 to past 64 word pieces (padded batches, one truncated sentence)
PROBES = [
    "Dogs run.",
    "A cat sleeps on the warm windowsill.",
    "Someone is slicing tomatoes for a salad.",
    "The stock market fell sharply on Monday morning.",
    "Two men are arguing about the price of a second-hand bicycle at the weekend market.",
    "A boy throws a frisbee to his dog on the beach.",
    "The orchestra tuned their instruments before the concert began.",
    "She forgot her umbrella at the office again.",
    "Heavy snow closed the mountain pass for three days.",
    "A child is drawing a house with a red roof and a yellow sun in the corner of the page.",
    "The committee postponed its decision until next year.",
    "Fresh bread smells wonderful in the early morning.",
    "An old woman feeds pigeons in the square every afternoon, talking softly to each bird as if it were an old "
    "friend, while tourists stop to take photographs and the church bells ring out across the rooftops of the "
    "sleepy town on a bright and windy spring day.",
    "The train was late.",
    "Scientists discovered a new species of frog in the rainforest.",
    "He plays the piano beautifully.",
]


def corpus_sentences() -> list[str]:
    """200 distinct sentences of varied length; with 20 repeated, the fit corpus of the tests."""
    sentences = []
    for i, subject in enumerate(_SUBJECTS):
        for j, verb in enumerate(_VERBS):
            for k, obj in enumerate(_OBJECTS):
                sentences.append(f"{subject} {verb} {obj}{_TAILS[(i + 2 * j + 3 * k) % len(_TAILS)]}.")
    return sentences + sentences[:20]


# The tolerances below are measured differences times a margin, all as relative_difference (the largest difference
# in a row over that row's largest component) on PROBES with the fit corpus below, float32 unless said otherwise.
# Measured on an AMD EPYC with AVX512-BF16 (2 threads; the six methods and the gentle family, PROBES and 64 sentences
# of the fit corpus) and on an AMD EPYC with AVX2 only (family 25 model 1, 2 threads, torch 2.13.0, 2026-11-28:
# every route, PROBES); each figure is the larger of the two.
#: End to end, the folder against flow-plugin's backbone and calibrator: raw 1.0e-6, sn 5.1e-6, natsv 1.8e-6,
#: sn-natsv 5.4e-6, whitening 4.9e-6, flow 4.9e-6 (AVX2 only: 7.6e-7, 1.5e-6, 1.2e-6, 1.9e-6, 1.1e-6, 2.0e-6). Mostly
#: the folder's padded batches, which move the pooled embeddings by ~1e-6, stretched by the calibrator (SN divides by
#: small spreads). Margin 5x.
RELATIVE_F32 = {method: 5 * measured for method, measured in
                {"raw": 1.0e-6, "sn": 5.1e-6, "natsv": 1.8e-6, "sn-natsv": 5.4e-6, "whiten": 4.9e-6, "flow": 4.9e-6}.items()}
#: The backbone and pooling modules alone against flow-plugin's pooled embeddings: 1.1e-6 (AVX2 only: 7.6e-7), the
#: padded batches; margin 5x (a wrong layer, pooling or truncation is off by far more).
POOLED_F32 = 5 * 1.1e-6
#: The calibration modules alone against the calibrator on the same pooled input: at most 2.3e-6 (whitening; AVX2
#: only: 1.1e-6, NATSV); the flow's module runs the calibrator's own transform (0 measured). Margin 4x. One folded
#: Dense x W + b was 9.8e-6 for SN+NATSV on 1,000 SICK sentences, from float32 cancellation of the large common mean.
CALIBRATION_F32 = 1e-5
#: bf16 backbone in flow-plugin against the float32 folder: the largest difference of a cosine similarity between
#: PROBES, 1.2e-3 to 1.5e-3 for the six methods (AVX2 only, emulated bf16: 1.1e-3 to 1.4e-3; bf16 rounds the
#: backbone's activations). Margin 4x (AMX kernels, not available on either, round differently again).
COSINE_BF16 = 4 * 1.5e-3
#: The gentle family and auto (whitening chosen) end to end: at most 3.0e-6 (whiten-third, on 64 sentences of the fit
#: corpus; AVX2 only, PROBES: at most 1.0e-6, soft-whiten); margin 5x.
GENTLE_RELATIVE_F32 = 5 * 3.0e-6
#: A local folder's export against the folder's own model with the calibrator, any prompt: at most 9.4e-7 (SN+NATSV;
#: whitening 6.3e-7, the flow 0; both sides run the same modules, so this is the Dense layers' float32). Margin 10x.
FOLDER_F32 = 1e-5
#: The registry's other poolings, exported raw: at most 3.9e-7 (first-last-avg and 1,-1 through WeightedLayerPooling;
#: cls 1.9e-7, layer 2 1.7e-7, layer 0 0; AVX2 only), below raw's 1.0e-6 above; margin 5x of that.
POOLINGS_F32 = 5 * 1.0e-6
@pytest.fixture(scope="module")
def fit_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "fit-sentences.txt"
    path.write_text("\n".join(corpus_sentences()) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def exports(minilm_path: Path, fit_corpus: Path, tmp_path_factory: pytest.TempPathFactory):
    """Each of the six methods of flow_plugin/minilm-l6, fitted on the corpus and exported."""
    folder = tmp_path_factory.mktemp("exports")
    return {method: export_model(parse_model_name("flow_plugin/minilm-l6").backbone.model_name(method),
                                 folder / method, fit_corpus=fit_corpus, show_progress_bar=False)
            for method in CALIBRATOR_METHODS}


def pooled(model: str | RegistryModel, precision: str) -> np.ndarray:
    variant = model if isinstance(model, RegistryModel) else parse_model_name(model)
    encoder = build_encoder(variant, EncoderOptions(precision=precision, device="cpu", show_progress_bar=False))
    return encoder.encode(PROBES)


# ------------------------------------------------------------------ the six methods
@pytest.mark.slow
def test_each_method_gives_flow_plugins_embeddings_in_float32_and_bf16(exports) -> None:
    float32, bf16 = pooled("flow_plugin/minilm-l6", "float32"), pooled("flow_plugin/minilm-l6", "bf16")
    for method, result in exports.items():
        parts = folder_parts(result.path, result.calibrator, PROBES)
        theirs = parts["embeddings"]
        assert theirs.shape == (len(PROBES), 384) and theirs.dtype == np.float32
        assert relative_difference(result.calibrator.transform(float32), theirs) <= RELATIVE_F32[method], method
        assert cosine_difference(result.calibrator.transform(bf16), theirs) <= COSINE_BF16, method
        # its two parts: the backbone and pooling modules, then the calibration modules on the same input
        assert relative_difference(float32, parts["pooled"]) <= POOLED_F32, method
        assert relative_difference(parts["calibrated"], theirs) <= CALIBRATION_F32, method
        if method != "raw":  # a different calibrator is far off: the comparison can fail
            assert relative_difference(exports["raw"].calibrator.transform(float32), theirs) > 1e-2


def test_linear_methods_are_standard_dense_layers_and_the_flow_one_flow_plugin_module(exports) -> None:
    for method, result in exports.items():
        modules = json.loads((result.path / "modules.json").read_text(encoding="utf-8"))
        types = [module["type"].rsplit(".", 1)[-1] for module in modules]
        assert len(result.modules) == len(modules) and result.needs_flow_plugin == (method == "flow")
        if method == "flow":
            assert types == ["Transformer", "Pooling", "FlowCalibration"]
            assert modules[-1]["type"] == "flow_plugin.integrations.sentence_transformers.flow_module.FlowCalibration"
            assert (result.path / "2_FlowCalibration" / "calibrator.npz").is_file()
        else:
            # raw is one identity Dense; the others a centring Dense (x - mean), then the projection Dense
            dense_folders = ["2_Dense"] if method == "raw" else ["2_Dense", "3_Dense"]
            assert types == ["Transformer", "Pooling", *["Dense"] * len(dense_folders)]
            assert all(module["type"].startswith("sentence_transformers.") for module in modules)
            for name in dense_folders:
                dense = json.loads((result.path / name / "config.json").read_text(encoding="utf-8"))
                assert dense["activation_function"] == "torch.nn.modules.linear.Identity" and dense["bias"] is True
            if method != "raw":
                centring = SentenceTransformer(str(result.path), device="cpu")[2].linear
                mean = (result.calibrator.standardize_ if method == "sn-natsv" else result.calibrator).mean_
                assert np.array_equal(centring.weight.detach().numpy(), np.eye(384, dtype=np.float32))
                assert np.array_equal(centring.bias.detach().numpy(), -mean)
        assert json.loads((result.path / "tokenizer_config.json").read_text(encoding="utf-8"))["model_max_length"] == 64


@pytest.mark.slow
def test_linear_exports_load_where_flow_plugin_cannot_be_imported(exports, tmp_path: Path) -> None:
    linear = [method for method in CALIBRATOR_METHODS if method != "flow"]
    script = tmp_path / "load.py"
    script.write_text(
        "import importlib.abc, json, sys\n"
        "import numpy as np\n"
        "class Blocker(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'flow_plugin':\n"
        "            raise ModuleNotFoundError(f'{name} is blocked')\n"
        "sys.meta_path.insert(0, Blocker())\n"
        "def loaded():\n"
        "    return sorted(name for name in sys.modules if name.split('.')[0] == 'flow_plugin')\n"
        "assert loaded() == [], loaded()\n"
        "from sentence_transformers import SentenceTransformer\n"
        "probes, pairs = json.loads(sys.argv[1]), json.loads(sys.argv[2])\n"
        "for folder, output in pairs:\n"
        "    np.save(output, SentenceTransformer(folder, device='cpu').encode(probes, convert_to_numpy=True))\n"
        "print(json.dumps(loaded()))\n",
        encoding="utf-8",
    )
    pairs = [(str(exports[method].path), str(tmp_path / f"{method}.npy")) for method in linear]
    env = {**os.environ, "FLOW_PLUGIN_DISABLE_MTEB_HOOK": "1", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, str(script), json.dumps(PROBES), json.dumps(pairs)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []  # flow_plugin was never imported
    float32 = pooled("flow_plugin/minilm-l6", "float32")
    for method in linear:
        theirs = np.load(tmp_path / f"{method}.npy")
        assert relative_difference(exports[method].calibrator.transform(float32), theirs) <= RELATIVE_F32[method]


# ------------------------------------------------------------------ the gentle family and auto
@pytest.fixture(scope="module")
def gentle_exports(minilm_path: Path, fit_corpus: Path, tmp_path_factory: pytest.TempPathFactory):
    """Each calibrator of the gentle family of flow_plugin/minilm-l6, and auto, fitted on the corpus and exported."""
    folder = tmp_path_factory.mktemp("gentle-exports")
    return {name: export_model(f"flow_plugin/minilm-l6-{name}", folder / name, fit_corpus=fit_corpus,
                               show_progress_bar=False)
            for name in GENTLE_CALIBRATORS} | {"auto": export_model(  # a task type for which auto calibrates
                "flow_plugin/minilm-l6-auto", folder / "auto", fit_corpus=fit_corpus, show_progress_bar=False,
                calibrator_params={"task_type": "Retrieval"})}  # (minilm-l6 is isotropic)


@pytest.mark.slow
def test_the_gentle_family_and_auto_export_as_standard_dense_layers_that_agree_with_flow_plugin(gentle_exports) -> None:
    float32 = pooled("flow_plugin/minilm-l6", "float32")
    for name, result in gentle_exports.items():
        modules = json.loads((result.path / "modules.json").read_text(encoding="utf-8"))
        assert [module["type"].rsplit(".", 1)[-1] for module in modules] == ["Transformer", "Pooling", "Dense", "Dense"]
        assert all(module["type"].startswith("sentence_transformers.") for module in modules)
        assert not result.needs_flow_plugin
        parts = folder_parts(result.path, result.calibrator, PROBES)
        theirs = parts["embeddings"]
        assert theirs.shape == (len(PROBES), 128 if name == "whiten-third" else 384)
        assert relative_difference(result.calibrator.transform(float32), theirs) <= GENTLE_RELATIVE_F32, name
        assert relative_difference(parts["calibrated"], theirs) <= CALIBRATION_F32, name
        if name != "center":  # a different calibrator is far off: the comparison can fail
            assert relative_difference(gentle_exports["center"].calibrator.transform(float32)[:, :theirs.shape[1]],
                                       theirs) > 1e-2, name
    assert gentle_exports["whiten-third"].calibrator.effective_params()["n_components_"] == 128
    readme = (gentle_exports["soft-whiten"].path / "README.md").read_text(encoding="utf-8")
    assert "**soft-whiten**" in readme and "`strength`=`0.5`" in readme
    # auto exports the calibrator it chose, and its README says which and why
    auto = gentle_exports["auto"]
    readme = (auto.path / "README.md").read_text(encoding="utf-8")
    chose = auto.calibrator.choice_  # the ranking rule's entry for a sentence encoder
    assert chose == RULES["ranking"][0] and f'`choice_`=`"{chose}"`' in readme and f"auto chose {chose}" in readme


def test_the_flow_needs_trust_remote_code(exports) -> None:
    with pytest.raises(ValueError, match="trust_remote_code"):
        SentenceTransformer(str(exports["flow"].path), device="cpu")


@pytest.mark.slow
def test_a_saved_calibrator_exports_the_same_folder(exports, tmp_path: Path) -> None:
    saved = tmp_path / "whiten.npz"
    exports["whiten"].calibrator.save(saved)
    result = export_model("flow_plugin/minilm-l6-whiten", tmp_path / "from-file", calibrator_path=saved)
    assert result.fit is None
    ours = SentenceTransformer(str(result.path), device="cpu").encode(PROBES)
    theirs = SentenceTransformer(str(exports["whiten"].path), device="cpu").encode(PROBES)
    np.testing.assert_array_equal(ours, theirs)
    readme = (result.path / "README.md").read_text(encoding="utf-8")
    assert f"the calibrator file `whiten.npz` (sha256 `{hashlib.sha256(saved.read_bytes()).hexdigest()}`)" in readme


# ------------------------------------------------------------------ the model card
def test_the_readme_says_what_the_folder_is_how_it_was_fitted_and_how_to_load_it(exports, fit_corpus: Path) -> None:
    from flow_plugin import __version__

    readme = (exports["whiten"].path / "README.md").read_text(encoding="utf-8")
    assert readme.startswith("---\nlibrary_name: sentence-transformers\n")
    assert "base_model: sentence-transformers/all-MiniLM-L6-v2" in readme and "'last-avg' pooling" in readme
    assert "**whiten**" in readme and "`shrinkage`=`0.0`" in readme
    assert '`covariance_estimator_`=`"ledoit-wolf"`' in readme  # the value the fit ran with (200 distinct < 384)
    assert f"`{fit_corpus.name}`: 220 sentences (200 distinct)" in readme
    assert hashlib.sha256(fit_corpus.read_bytes()).hexdigest() in readme
    assert 'SentenceTransformer("path/to/this/folder")' in readme and "loads without flow-plugin" in readme
    assert f"flow-plugin {__version__}" in readme and str(fit_corpus.parent) not in readme
    assert [line for line in readme.splitlines() if line[:3] in ("0. ", "3. ")] == [
        f"{index}. {exports['whiten'].modules[index]}" for index in (0, 3)]
    flow_readme = (exports["flow"].path / "README.md").read_text(encoding="utf-8")
    assert "trust_remote_code=True" in flow_readme and f"flow-plugin>={__version__}" in flow_readme
    assert "log-likelihood" in flow_readme
    raw_readme = (exports["raw"].path / "README.md").read_text(encoding="utf-8")
    assert "raw embeddings need no fit" in raw_readme and "sha256" not in raw_readme


def _board(variant: RegistryModel) -> Leaderboard:
    score = TaskScore(score=81.25, metric="cosine_spearman", protocol="all", wmean=80.5, split="test",
                      hf_subsets=["default"], dataset_revision="sha256:0")
    board = empty_leaderboard("demo")
    board.tasks = ["SentEvalSTS16"]
    board.rows = [Row(id=f"{variant.name}@{variant.revision}", model=variant.name, revision=variant.revision,
                      experiment=None, experiment_kwargs={}, backbone=variant.backbone.name,
                      backbone_model=variant.backbone.hub_id, calibrator=variant.calibrator, calibrator_params={},
                      pooling=variant.backbone.pooling, max_seq_length=variant.backbone.max_seq_length,
                      fit_corpus="target", metadata_source="registry", scores={"SentEvalSTS16": score}, n_tasks=1,
                      average=81.25, average_wmean=80.5, complete=True, baseline=None, delta=None)]
    return board


def test_cli_export_with_leaderboard_scores(minilm_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from flow_plugin.cli.main import main

    variant = parse_model_name("flow_plugin/minilm-l6-layer0")
    board = tmp_path / "demo.json"
    board.write_text(_board(variant).file_text(), encoding="utf-8")
    out = tmp_path / "layer0"
    assert main(["export", variant.name, "--out", str(out), "--leaderboard", str(board)]) == 0
    printed = capsys.readouterr().out
    assert f"wrote {out}" in printed and f'SentenceTransformer("{out}")' in printed
    card = (out / "README.md").read_text(encoding="utf-8")
    assert "| SentEvalSTS16 | 81.25 | cosine_spearman | all | 80.50 |" in card and "`demo.json`" in card
    assert "raw embeddings need no fit" in card
    # another model's row is refused
    other = _board(parse_model_name("flow_plugin/minilm-l6-layer0-sn"))
    with pytest.raises(LeaderboardError, match="no row for flow_plugin/minilm-l6-layer0"):
        benchmark_row(other, variant.name)
    # a local folder's export takes no row (no registry revision ties one to it): one line, not "unknown model"
    assert main(["export", f"flow_plugin/{minilm_path}-whiten", "--out", str(tmp_path / "own"), "--leaderboard",
                 str(board)]) == 2
    said = capsys.readouterr().err
    assert said.count("\n") == 1 and "a model card takes the scores of a registry model's row" in said, said


# ------------------------------------------------------------------ poolings
def _registry_variant(folder: Path, weights: Path, pooling: str, method: str = "raw") -> RegistryModel:
    path = folder / f"minilm-{pooling.replace(',', '-')}.toml"
    path.write_text(f'hub_id = "{weights}"\npooling = "{pooling}"\nmax_seq_length = 64\nembedding_dim = 384\n'
                    'n_parameters = 1\nlicense = "apache-2.0"\nrelease_date = "2021-08-30"\n'
                    'reference = "https://example.org"\n', encoding="utf-8")
    return RegistryModel(parse_backbone_file(path), method)


@pytest.mark.parametrize(
    ("pooling", "types", "layers_kept"),
    [
        ("first-last-avg", ["Transformer", "WeightedLayerPooling", "Pooling", "Dense"], 6),
        ("cls", ["Transformer", "Pooling", "Dense"], 6),
        ("2", ["Transformer", "Pooling", "Dense"], 2),
    ],
)
def test_registry_poolings_as_standard_modules(pooling: str, types: list[str], layers_kept: int, minilm_path: Path,
                                               tmp_path: Path) -> None:
    variant = _registry_variant(tmp_path, minilm_path, pooling)
    result = export_model(variant, tmp_path / "out")
    modules = json.loads((result.path / "modules.json").read_text(encoding="utf-8"))
    assert [module["type"].rsplit(".", 1)[-1] for module in modules] == types
    assert all(module["type"].startswith("sentence_transformers.") for module in modules)
    assert json.loads((result.path / "config.json").read_text(encoding="utf-8"))["num_hidden_layers"] == layers_kept
    theirs = SentenceTransformer(str(result.path), device="cpu").encode(PROBES)
    assert relative_difference(pooled(variant, "float32"), theirs) <= POOLINGS_F32


def test_embedding_layer_pooling_keeps_no_transformer_layer(minilm_path: Path, tmp_path: Path) -> None:
    result = export_model("flow_plugin/minilm-l6-layer0", tmp_path / "layer0")
    parts = folder_parts(result.path, result.calibrator, PROBES)
    assert relative_difference(pooled("flow_plugin/minilm-l6-layer0", "float32"), parts["pooled"]) <= POOLINGS_F32
    assert json.loads((result.path / "config.json").read_text(encoding="utf-8"))["num_hidden_layers"] == 0
    assert result.size_bytes < 60 * 2**20  # the embedding matrix, no transformer layer


# ------------------------------------------------------------------ MTEB scores the export like the plugin
@pytest.mark.slow
def test_mteb_scores_an_exported_whitening_like_the_plugin(minilm_path: Path, fit_corpus: Path, senteval_dir: Path,
                                                            tmp_path: Path) -> None:
    import mteb

    from flow_plugin.integrations.mteb.sts_tasks import get_offline_task

    # all of STS16 (2,372 sentences), through both models; all-MiniLM-L6-v2 pooled after its first layer
    # (minilm-l6-layer1) keeps that to seconds, a sixth of the six-layer model's cost
    name = "flow_plugin/minilm-l6-layer1-whiten"
    result = export_model(name, tmp_path / "whiten", fit_corpus=fit_corpus)
    task = get_offline_task("SentEvalSTS16", data_dir=senteval_dir)
    plugin = mteb.get_model(name, fit_corpus=str(fit_corpus), precision="float32", device="cpu",
                            show_progress_bar=False)
    plugin_scores = mteb.evaluate(plugin, task, cache=None, co2_tracker=False).task_results[0].scores["test"][0]
    exported = SentenceTransformer(str(result.path), device="cpu")
    export_scores = mteb.evaluate(exported, task, cache=None, co2_tracker=False).task_results[0].scores["test"][0]
    # the same fit: the plugin's calibrator is the exported one, to the last bit
    probes = pooled(name, "float32")
    assert np.array_equal(plugin.calibrator_for("SentEvalSTS16").transform(probes), result.calibrator.transform(probes))
    # measured: the same scores to the last bit, here and with the six-layer minilm-l6-whiten (the embeddings agree
    # to 1e-6 of their scale; Spearman moves only where two pairs' cosines are that close); 1e-5 leaves room for
    # other kernels
    assert export_scores["cosine_spearman"] == pytest.approx(plugin_scores["cosine_spearman"], abs=1e-5)
    assert export_scores["cosine_spearman_wmean"] == pytest.approx(plugin_scores["cosine_spearman_wmean"], abs=1e-5)
    assert 0.3 < export_scores["cosine_spearman"] < 0.9


# ------------------------------------------------------------------ a local sentence-transformers folder
FOLDER_PROMPTS = {"query": "query: ", "document": "passage: "}


@pytest.fixture(scope="module")
def own_folder(minilm_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """all-MiniLM-L6-v2 as a user's own folder: its Normalize module, e5-style prompts, "document" the default."""
    folder = tmp_path_factory.mktemp("own") / "my-encoder"
    shutil.copytree(minilm_path, folder)
    config = folder / "config_sentence_transformers.json"
    settings = json.loads(config.read_text(encoding="utf-8"))
    settings.update(prompts=FOLDER_PROMPTS, default_prompt_name="document")
    config.write_text(json.dumps(settings), encoding="utf-8")
    return folder


@pytest.mark.slow
@pytest.mark.parametrize("method", ["whiten", "flow"])
def test_a_local_folder_exports_its_own_modules_and_prompts_then_the_calibrator(method: str, own_folder: Path,
                                                                              fit_corpus: Path, tmp_path: Path) -> None:
    result = export_model(f"flow_plugin/{own_folder}-{method}", tmp_path / "out", fit_corpus=fit_corpus,
                          show_progress_bar=False)
    base = SentenceTransformer(str(own_folder), device="cpu")
    exported = SentenceTransformer(str(tmp_path / "out"), device="cpu", trust_remote_code=method == "flow")
    assert [type(module).__name__ for module in exported][:3] == ["Transformer", "Pooling", "Normalize"]
    assert exported.prompts == FOLDER_PROMPTS and exported.default_prompt_name == "document"
    for prompt in ("query", None):  # the folder computes the calibrator on the base's embeddings, any prompt
        ours = result.calibrator.transform(base.encode(PROBES, prompt_name=prompt))
        assert relative_difference(ours, exported.encode(PROBES, prompt_name=prompt)) <= FOLDER_F32, prompt
    if method == "whiten":  # fitted on the default prompt's embeddings ("passage: "), not on unprompted ones
        prompted = base.encode(corpus_sentences()).astype(np.float64).mean(axis=0)
        unprompted = base.encode(corpus_sentences(), prompt="").astype(np.float64).mean(axis=0)
        assert np.abs(result.calibrator.mean_ - prompted).max() < 1e-5 < np.abs(prompted - unprompted).max()
    assert result.model == f"flow_plugin/./my-encoder-{method}"
    readme = (tmp_path / "out" / "README.md").read_text(encoding="utf-8")
    assert f"# {result.model} " in readme and "`my-encoder`" in readme and str(own_folder.parent) not in readme
    assert "`query` = 'query: '" in readme and "embedded with the default prompt `document`" in readme


def test_a_local_folder_takes_no_registry_encoder_options_and_an_mteb_name_is_not_exported(
        own_folder: Path, fit_corpus: Path, tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"precision applies to registry backbones only; a folder's model runs in"):
        export_model(f"flow_plugin/{own_folder}-whiten", tmp_path / "a", fit_corpus=fit_corpus, precision="bf16")
    with pytest.raises(InputError, match=re.escape("not a model MTEB loads by name; save it first (SentenceTransformer"
                                                   "('intfloat/e5-small-v2').save('my-model')) and export "
                                                   "flow_plugin/./my-model-whiten")):
        export_model("flow_plugin/intfloat/e5-small-v2-whiten", tmp_path / "b", fit_corpus=fit_corpus)
    unknown_module = tmp_path / "custom"
    unknown_module.mkdir()
    (unknown_module / "modules.json").write_text('[{"idx": 0, "name": "0", "path": "", "type": "my.Module"}]')
    with pytest.raises(InputError, match=r"flow_plugin/./custom-whiten: sentence-transformers cannot load .*my\.Module"
                                         r".*\); give a folder that SentenceTransformer\(folder\) loads$"):
        export_model(f"flow_plugin/{unknown_module}-whiten", tmp_path / "c", fit_corpus=fit_corpus)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists() and not (tmp_path / "c").exists()


# ------------------------------------------------------------------ bad input, one line each
def test_bad_input_is_a_one_line_error_naming_the_remedy(minilm_path: Path, exports, fit_corpus: Path,
                                                         tmp_path: Path) -> None:
    out = tmp_path / "out"
    cases = [
        (RegistryError, "Close names: flow_plugin/minilm-l6-whiten",
         dict(model="flow_plugin/minilm-l6-whitn", fit_corpus=fit_corpus)),
        (DataFolderError, "does not exist; --fit-corpus", dict(fit_corpus=tmp_path / "missing.txt")),
        (InputError, "pass a fit corpus", dict()),
        (InputError, "not both", dict(fit_corpus=fit_corpus, calibrator_path=tmp_path / "x.npz")),
    ]
    empty = tmp_path / "empty.txt"
    empty.write_text("", encoding="utf-8")
    cases.append((DataFolderError, "is empty; --fit-corpus", dict(fit_corpus=empty)))
    small = tmp_path / "small.npz"
    make_calibrator("whiten").fit(np.random.default_rng(0).normal(size=(50, 8)).astype(np.float32)).save(small)
    cases.append((CalibratorFileError, "8-dimensional embeddings, but 384", dict(calibrator_path=small)))
    flow_file = tmp_path / "flow.npz"
    exports["flow"].calibrator.save(flow_file)
    cases.append((CalibratorFileError, "holds a 'flow' calibrator, not 'whiten'", dict(calibrator_path=flow_file)))
    for error, message, kwargs in cases:
        model = kwargs.pop("model", "flow_plugin/minilm-l6-whiten")
        with pytest.raises(error, match=message) as raised:
            export_model(model, out, **kwargs)
        assert "\n" not in str(raised.value)
        assert not out.exists()
    existing = exports["sn"].path
    with pytest.raises(InputError, match="exists and is not empty; pass --overwrite"):
        export_model("flow_plugin/minilm-l6-whiten", existing, fit_corpus=fit_corpus)
    with pytest.raises(InputError, match="holds no sentence-transformers model"):
        export_model("flow_plugin/minilm-l6-whiten", fit_corpus.parent, fit_corpus=fit_corpus, overwrite=True)
    assert fit_corpus.is_file()
    under_a_file = fit_corpus / "x" / "out"  # before any fit, not a FileExistsError after it
    with pytest.raises(OutputError, match=f"cannot write the export folder {under_a_file}: {fit_corpus} is a file"):
        export_model("flow_plugin/minilm-l6-whiten", under_a_file, fit_corpus=fit_corpus)


def test_cli_errors_are_one_line(minilm_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from flow_plugin.cli.main import main

    assert main(["export", "flow_plugin/minilm-l6-sn", "--out", str(tmp_path / "o"),
                 "--fit-corpus", str(tmp_path / "missing.txt")]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "flow-plugin export: error: fit corpus file" in error
    assert not (tmp_path / "o").exists()


# ------------------------------------------------------------------ atomic write
def test_an_interrupted_export_leaves_no_folder(minilm_path: Path, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "model"
    seen: dict[str, object] = {}

    def killed(facts: dict) -> str:
        # the modules are written by now, and --out does not exist yet: a kill here leaves no --out
        seen["out_exists"] = out.exists()
        seen["written"] = sorted(path.name for path in tmp_path.glob(".model.*.partial/*"))
        raise KeyboardInterrupt

    monkeypatch.setattr(export_module, "render_readme", killed)
    with pytest.raises(KeyboardInterrupt):
        export_model("flow_plugin/minilm-l6-layer0", out)
    assert seen["out_exists"] is False and "model.safetensors" in seen["written"] and "modules.json" in seen["written"]
    assert sorted(tmp_path.iterdir()) == []  # neither --out nor the staging folder remains

    monkeypatch.undo()
    export_model("flow_plugin/minilm-l6-layer0", out)
    (out / "README.md").write_text("the first export", encoding="utf-8")
    monkeypatch.setattr(export_module, "render_readme", killed)
    with pytest.raises(KeyboardInterrupt):
        export_model("flow_plugin/minilm-l6-layer0", out, overwrite=True)
    assert (out / "README.md").read_text(encoding="utf-8") == "the first export"  # the old folder, untouched
    assert sorted(path.name for path in tmp_path.iterdir()) == ["model"]
    monkeypatch.undo()
    export_model("flow_plugin/minilm-l6-layer0", out, overwrite=True)
    assert (out / "README.md").read_text(encoding="utf-8").startswith("---\n")  # replaced, whole
    assert sorted(path.name for path in tmp_path.iterdir()) == ["model"]
    assert oct(out.stat().st_mode & 0o777) == oct(0o777 & ~_umask())


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_a_killed_export_never_leaves_a_half_written_folder(tmp_path: Path) -> None:
    """kill -9 in mid-write leaves only the hidden staging sibling (the next export to that --out is not disturbed
    by it)."""
    import signal

    out = tmp_path / "model"
    child = ("import sys, time\n"
             "from flow_plugin._io import atomic_folder\n"
             "with atomic_folder(sys.argv[1]) as stage:\n"
             "    (stage / 'modules.json').write_text('[]')\n"
             "    print(stage, flush=True)\n"
             "    time.sleep(600)\n")
    killed = subprocess.Popen([sys.executable, "-c", child, str(out)], stdout=subprocess.PIPE, text=True)
    try:
        stage = Path(killed.stdout.readline().strip())
        assert (stage / "modules.json").is_file()
    finally:
        killed.send_signal(signal.SIGKILL)
        killed.wait(timeout=60)
    assert not out.exists() and stage.parent == tmp_path and stage.name.startswith(".model.")
    from flow_plugin._io import atomic_folder

    with atomic_folder(out) as again:
        (again / "modules.json").write_text("[]")
    assert (out / "modules.json").is_file() and sorted(path.name for path in tmp_path.iterdir()) == [stage.name, "model"]
