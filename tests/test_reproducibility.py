"""Same numbers however a run is made: fits do not depend on sentence order, a result of other
data or another configuration is never reused, and what changes embeddings is in their key."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from flow_plugin.calibration import FlowCalibrator, Whitening
from flow_plugin.catalog.fitting import fit_calibrator
from flow_plugin.catalog.registry import RegistryModel, load_registry
from flow_plugin.cli.main import main as cli_main
from flow_plugin.data.senteval import load_split, task_sentences
from flow_plugin.encoding.backbone import Backbone
from flow_plugin.encoding.cache import CachedEncoder, clear_shared_encoders
from flow_plugin.integrations.senteval import SentEvalAdapter

REPO_REGISTRY = Path(__file__).resolve().parents[1] / "registry"


# ------------------------------------------------------------------ sentence order
def test_a_seeded_fit_does_not_depend_on_the_order_sentences_arrive_in(tiny_bert_dir: Path) -> None:
    encoder = CachedEncoder(Backbone(tiny_bert_dir, precision="float32", show_progress_bar=False))
    words = "the man woman dog cat plays eats runs in on park guitar piano food sun rain today".split()
    rng = np.random.default_rng(0)
    sentences = [" ".join(rng.choice(words, size=rng.integers(3, 9))) for _ in range(600)]
    template = FlowCalibrator(n_levels=2, show_progress_bar=False)
    probe = encoder.encode(sentences[:50])
    first, _ = fit_calibrator(encoder, template, sentences, model="tiny", source="file order")
    second, _ = fit_calibrator(encoder, template, sentences[::-1], model="tiny", source="reversed")
    third, _ = fit_calibrator(encoder, template, sorted(sentences, key=len), model="tiny", source="by length")
    np.testing.assert_array_equal(first.transform(probe), second.transform(probe))
    np.testing.assert_array_equal(first.transform(probe), third.transform(probe))


def test_senteval_and_our_evaluator_fit_the_same_flow(senteval_dir: Path, minilm_path: Path, precision: str) -> None:
    """SentEval hands a task's sentences sorted by length, as token lists; our readers give them in
    file order. Both routes must fit the same flow (before, STS15 scored 82.20 vs 82.76), in float32 and
    in bf16: the batch plan makes an embedding independent of its batch mates at both precisions."""
    clear_shared_encoders()
    ours = SentEvalAdapter("flow_plugin/minilm-l6-flow", precision=precision, show_progress_bar=False)
    sentences = task_sentences(senteval_dir, "STS16")  # our evaluator's fit corpus, file order
    pairs = load_split(senteval_dir, "STS16", "test")
    s1 = [s.split() for p in pairs for s in p.sentences1]
    s2 = [s.split() for p in pairs for s in p.sentences2]
    ordered = sorted(zip(s1, s2), key=lambda z: (len(z[0]), len(z[1])))  # SentEval's sts.py ordering
    samples = [z[0] for z in ordered] + [z[1] for z in ordered]
    ours.prepare({"current_task": "STS16"}, samples)  # the SentEval route
    theirs, _ = fit_calibrator(ours.encoder, ours._template, sentences, model="mine", source="file order")
    probe = ours.encoder.encode(sentences[:100])
    np.testing.assert_allclose(ours.calibrator.transform(probe), theirs.transform(probe), rtol=0, atol=1e-4)
    assert ours.calibrator.fit_log_likelihood_ == pytest.approx(theirs.fit_log_likelihood_, abs=1e-4)


# ------------------------------------------------------------------ result identity
def test_the_registry_configuration_is_part_of_a_result_revision(tmp_path: Path) -> None:
    registry = load_registry([REPO_REGISTRY])
    spec = registry["minilm-l6"]
    base = RegistryModel(spec, "whiten")
    other_pooling = RegistryModel(spec.model_copy(update={"pooling": "cls"}), "whiten")
    other_params = RegistryModel(spec.model_copy(update={"calibrators": {"whiten": {"n_components": 64}}}), "whiten")
    revisions = {base.revision, other_pooling.revision, other_params.revision, RegistryModel(spec, "sn").revision}
    assert len(revisions) == 4 and all(r.startswith(spec.revision + "-") for r in revisions)
    assert base.revision == RegistryModel(spec, "whiten").revision  # a function of the configuration only
    assert base.configuration["calibrator_params"] == Whitening().result_params()


def _copy_sts16(source: Path, target: Path) -> Path:
    folder = target / "downstream" / "STS" / "STS16-en-test"
    shutil.copytree(source / "downstream" / "STS" / "STS16-en-test", folder)
    return target


@pytest.mark.slow
def test_a_result_of_other_data_is_recomputed_never_reused(
    senteval_dir: Path, minilm_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _copy_sts16(senteval_dir, tmp_path / "data")
    out = tmp_path / "out"
    argv = ["eval", "-m", "flow_plugin/minilm-l6", "--data", str(data), "-t", "SentEvalSTS16",
            "--output-folder", str(out), "--precision", "float32"]
    assert cli_main(argv) == 0
    first = capsys.readouterr().out
    assert "(computed now)" in first
    assert cli_main(argv) == 0
    assert "(reused: computed" in capsys.readouterr().out  # same data: reused, and said so
    gold = data / "downstream" / "STS" / "STS16-en-test" / "STS.gs.headlines.txt"
    lines = gold.read_text(encoding="utf-8").splitlines()
    scored = [i for i, line in enumerate(lines) if line.strip()]
    for i in scored[:40]:  # other gold scores: another dataset_revision
        lines[i] = "0" if lines[i].strip() != "0" else "5"
    gold.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert cli_main(argv) == 0
    captured = capsys.readouterr()
    assert "(computed now)" in captured.out and "reused" not in captured.out
    (stale,) = list(out.rglob("SentEvalSTS16.json.stale-*"))
    (fresh,) = list(out.rglob("SentEvalSTS16.json"))
    assert json.loads(stale.read_text())["dataset_revision"] != json.loads(fresh.read_text())["dataset_revision"]
    score = lambda path: json.loads(path.read_text())["scores"]["test"][0]["main_score"]  # noqa: E731
    assert score(stale) != score(fresh)


def test_a_wrong_embedding_dim_is_caught_when_the_weights_load(tiny_bert_dir: Path, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from flow_plugin.catalog.registry import default_registry
    from flow_plugin.catalog.builders import build_encoder, resolve
    from flow_plugin.errors import InputError

    (tmp_path / "tiny-wide.toml").write_text(
        f'hub_id = "{tiny_bert_dir}"\npooling = "last-avg"\nmax_seq_length = 16\nembedding_dim = 64\n'
        'n_parameters = 1000\nlicense = "mit"\nrelease_date = "2024-01-02"\nreference = "https://example.org/tiny"\n',
        encoding="utf-8",
    )
    monkeypatch.setenv("FLOW_PLUGIN_REGISTRY", str(tmp_path))
    default_registry(refresh=True)
    try:
        encoder = build_encoder(resolve("flow_plugin/tiny-wide"))
        with pytest.raises(InputError, match=r"tiny-wide\.toml: embedding_dim is 64, but the weights .* give 32"):
            encoder.encode(["the man plays"])
    finally:
        monkeypatch.delenv("FLOW_PLUGIN_REGISTRY")
        default_registry(refresh=True)
        clear_shared_encoders()
