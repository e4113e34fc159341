"""A number belongs to what produced it: a base model's output is checked where it enters, a changed model folder or
task file never gets an old score back, a killed study leaves no process behind, and one model at one precision is
one leaderboard row.

The base models are real: MTEB's own random encoder (no weights) and all-MiniLM-L6-v2 saved as a local
sentence-transformers folder; a faulty base is a user's object wrapping MTEB's encoder, as a hand-written MTEB
encoder would. The tasks are real labelled tasks on a small copy of the shared data.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mteb
import numpy as np
import pytest

import flow_plugin
from flow_plugin.calibration import auto
from flow_plugin.catalog.registry import parse_model_name
from flow_plugin.errors import EncoderOutputError
from flow_plugin.integrations.mteb.base_models import registry_model
from flow_plugin.integrations.mteb.meta import calibrated_meta
from flow_plugin.integrations.mteb.labelled_tasks import task_class

from conftest import ONE_PER_TYPE

PAIRS = ONE_PER_TYPE["PairClassification"]


class FaultyBase:
    """MTEB's random encoder whose ``encode`` returns what ``fault`` makes of its output (a user's encoder gone
    wrong)."""

    def __init__(self, fault: str) -> None:
        self.base = mteb.get_model("mteb/baseline-random-encoder")
        self.mteb_model_meta = self.base.mteb_model_meta
        self.fault = fault

    def encode(self, inputs: Any, **kwargs: Any) -> Any:
        rows = np.asarray(self.base.encode(inputs, **kwargs))
        if self.fault == "one row fewer":
            return rows[:-1]
        if self.fault == "one row more":
            return np.concatenate([rows, rows[:1]])
        if self.fault == "strings":
            return np.full(rows.shape, "x", dtype=object)
        if self.fault in ("nan", "inf"):
            rows = rows.astype(np.float32)
            rows[len(rows) // 2, 0] = np.nan if self.fault == "nan" else np.inf
        return rows


@pytest.mark.parametrize("calibrator", ["raw", "whiten"])
@pytest.mark.parametrize("fault, said", [("one row fewer", "shape"), ("one row more", "shape"),
                                         ("strings", "not numbers"), ("nan", "NaN or inf"), ("inf", "NaN or inf")])
def test_a_base_models_output_is_checked_where_it_enters_on_every_calibrator(fault: str, said: str, calibrator: str,
                                                                             subset_root: Path) -> None:
    model = flow_plugin.calibrate(FaultyBase(fault), calibrator)
    with pytest.raises(EncoderOutputError) as caught:
        mteb.evaluate(model, [task_class(PAIRS)(data_dir=subset_root)], cache=None, co2_tracker=False,
                      show_progress_bar=False)
    message = str(caught.value)
    assert "\n" not in message
    assert "mteb/baseline-random-encoder" in message and PAIRS in message and said in message
    assert "fit" not in message.split(":")[0]  # the encoder is blamed, not the fit corpus


def test_a_faulty_base_behind_a_cache_folder_leaves_nothing_in_the_cache(subset_root: Path, tmp_path: Path) -> None:
    from flow_plugin.integrations.mteb.base_encoders import loaded_base

    def run(fault: str, folder: Path) -> None:
        mteb.evaluate(flow_plugin.calibrate(loaded_base(FaultyBase(fault), folder), "raw"),
                      [task_class(PAIRS)(data_dir=subset_root)], cache=None, co2_tracker=False, show_progress_bar=False)

    with pytest.raises(EncoderOutputError):
        run("one row more", tmp_path / "cache")
    assert not list((tmp_path / "cache").rglob("shard-*.npz"))
    run("none", tmp_path / "sound")  # the same base without the fault: each of its calls is kept
    assert list((tmp_path / "sound").rglob("shard-*.npz"))


# ------------------------------------------------------------------ a changed local model folder
@pytest.fixture()
def own_folder(minilm_path: Path, tmp_path: Path) -> Path:
    """all-MiniLM-L6-v2 saved as a user's local sentence-transformers folder."""
    import shutil

    folder = tmp_path / "my-model"
    shutil.copytree(minilm_path, folder)
    return folder


def _retrain(folder: Path) -> None:
    """The folder's model changed in place: one layer's weights moved (as a fine-tuning run would)."""
    import torch
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(folder), device="cpu")
    with torch.no_grad():
        for parameter in model[0].auto_model.encoder.layer[-1].parameters():
            parameter.mul_(0.5)
    model.save(str(folder))


@pytest.mark.slow
def test_a_changed_local_folder_files_its_results_apart_and_never_gets_the_old_score(own_folder: Path,
                                                                                   subset_root: Path,
                                                                                   tmp_path: Path) -> None:
    from flow_plugin.integrations.mteb.evaluate import evaluate_models

    model, out = f"flow_plugin/{own_folder}-whiten", tmp_path / "out"
    task = lambda: [task_class(PAIRS)(data_dir=subset_root)]  # noqa: E731 -- a fresh task object per run
    (first,) = evaluate_models([model], None, task(), out)
    (again,) = evaluate_models([model], None, task(), out)
    assert [run.status for run in again.runs] == ["reused"]
    _retrain(own_folder)
    (changed,) = evaluate_models([model], None, task(), out)
    assert [run.status for run in changed.runs] == ["computed"]
    assert changed.runs[0].score != first.runs[0].score
    assert changed.runs[0].path != first.runs[0].path and first.runs[0].path.is_file()  # filed apart, kept
    revision = first.runs[0].path.parents[2].name  # results/<model>/<revision>/experiments/calibrator_whiten/
    assert revision.startswith("sha256-")  # the content's
    # MTEB's own route (`mteb run`, mteb.evaluate with a result folder) files it under the same revision
    from mteb.cache import ResultCache

    calibrated = mteb.get_model(model)
    result = mteb.evaluate(calibrated, task(), cache=ResultCache(out), co2_tracker=False, show_progress_bar=False)
    assert result.task_results[0].get_score() == pytest.approx(changed.runs[0].score, abs=1e-6)  # (files round to 6)


def test_a_misspelt_calibrator_after_an_existing_folder_names_the_calibrator(own_folder: Path) -> None:
    from flow_plugin.errors import InputError
    from flow_plugin.integrations.mteb.base_models import load_calibrated
    from flow_plugin.catalog.registry import spelled_model

    base, calibrator = spelled_model(f"flow_plugin/{own_folder}-whitne")
    with pytest.raises(InputError, match=r"'whitne' is no calibrator \(did you mean 'whiten'\?\) after the folder"):
        load_calibrated(base, calibrator=calibrator)


# ------------------------------------------------------------------ a user task whose data changed
def _user_pairs(folder: Path, flipped: bool = False) -> Path:
    """A user's pair-classification task (TOML + TSV), its labels flipped when ``flipped``; returns the TOML file."""
    words = "good bad film plot actor great awful boring fun story music scene slow fast".split()
    rows = []
    for number in range(40):
        first = " ".join(words[(number * 7 + k * 3) % len(words)] for k in range(4)) + f" {number}"
        label = (number % 2) ^ int(flipped)
        rows.append(f"{first}\t{first if label else first[::-1]}\t{label}\n")
    (folder / "data").mkdir(parents=True, exist_ok=True)
    (folder / "data" / "test.tsv").write_text("s1\ts2\tlabel\n" + "".join(rows), encoding="utf-8")
    toml = folder / "tasks.toml"
    toml.write_text('[[task]]\nname = "MyPairsPairClassification"\ntype = "PairClassification"\ndescription = "d"\n'
                    'reference = "https://example.org"\ndate = ["2024-01-01", "2024-12-31"]\ndata_dir = "data"\n'
                    '[task.source]\nformat = "delimited"\ndelimiter = "\\t"\nquoting = "none"\n'
                    'columns = { text1 = "s1", text2 = "s2", label = "label" }\nsplits = { test = "test.tsv" }\n',
                    encoding="utf-8")
    return toml


def _revisions(out: Path) -> tuple[list[str], list[Path]]:
    import json

    results = sorted(out.rglob("MyPairsPairClassification.json"))
    return [json.loads(path.read_text())["dataset_revision"] for path in results], sorted(
        out.rglob("MyPairsPairClassification.json.stale-*"))


def test_mteb_evaluate_recomputes_a_user_task_whose_data_changed(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch,
                                                                   restored_task_registry: None) -> None:
    from mteb.cache import ResultCache

    from flow_plugin.catalog.labelled_tasks import TASKS_ENV

    toml = _user_pairs(tmp_path / "mine")
    monkeypatch.setenv(TASKS_ENV, str(toml))
    model, out = mteb.get_model("mteb/baseline-random-encoder"), tmp_path / "out"
    task = lambda: task_class("MyPairsPairClassification")()  # noqa: E731 -- a fresh task object, as each run builds
    mteb.evaluate(model, [task()], cache=ResultCache(out), co2_tracker=False, show_progress_bar=False)
    (before,), stale = _revisions(out)
    assert not stale
    _user_pairs(tmp_path / "mine", flipped=True)
    mteb.evaluate(model, [task()], cache=ResultCache(out), co2_tracker=False, show_progress_bar=False)
    (after,), (kept,) = _revisions(out)
    assert after != before  # recomputed from the data as it is now; the old result set aside, not deleted
    assert __import__("json").loads(kept.read_text())["dataset_revision"] == before


@pytest.mark.slow
def test_mteb_run_recomputes_a_user_task_whose_data_changed(tmp_path: Path) -> None:
    import os
    import subprocess

    toml = _user_pairs(tmp_path / "mine")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "FLOW_PLUGIN_TASKS": str(toml)}
    command = ["mteb", "run", "-m", "mteb/baseline-random-encoder", "-t", "MyPairsPairClassification",
               "--output-folder", str(tmp_path / "out"), "--no-co2-tracker"]
    assert subprocess.run(command, capture_output=True, text=True, env=env, timeout=600).returncode == 0
    (before,), _ = _revisions(tmp_path / "out")
    _user_pairs(tmp_path / "mine", flipped=True)
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    (after,), (kept,) = _revisions(tmp_path / "out")
    assert after != before and "was computed from other data" in done.stderr


# ------------------------------------------------------------------ one row per model, precision and settings
def test_auto_and_the_precision_it_resolves_to_are_one_result_and_one_row(tiny_backbone: str, senteval_dir: Path,
                                                                          tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from flow_plugin import leaderboard as lb
    from flow_plugin.encoding.options import AUTO_PRECISION_ENV, EncoderOptions
    from flow_plugin.integrations.mteb.evaluate import evaluate_models

    model, out = f"flow_plugin/{tiny_backbone}-whiten", tmp_path / "out"
    (spelled,) = evaluate_models([model], senteval_dir, ["SentEvalSTS13"], out,
                                 options=EncoderOptions(precision="float32"))
    monkeypatch.setenv(AUTO_PRECISION_ENV, "float32")  # what `auto` means on a CPU without fast bf16
    (auto,) = evaluate_models([model], senteval_dir, ["SentEvalSTS13"], out, options=EncoderOptions(precision="auto"))
    assert [run.status for run in auto.runs] == ["reused"] and auto.runs[0].path == spelled.runs[0].path
    board = lb.update_leaderboard([out], tmp_path / "board.json").board
    assert [row.experiment_kwargs for row in board.rows] == [{"precision": "float32"}]


def test_a_rerun_adds_to_the_row_of_auto_filed_before_runs_named_its_precision(tiny_backbone: str,
                                                                               senteval_dir: Path, tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A published board holds rows of ``auto`` runs whose experiment does not name the precision they ran at
    (mpnet-base's, in bf16): a rerun, filed under its precision, lands in that row, which keeps its id."""
    import json

    from flow_plugin import leaderboard as lb
    from flow_plugin.encoding.options import AUTO_PRECISION_ENV
    from flow_plugin.integrations.mteb.evaluate import evaluate_models

    monkeypatch.setenv(AUTO_PRECISION_ENV, "float32")
    evaluate_models([f"flow_plugin/{tiny_backbone}-whiten"], senteval_dir, ["SentEvalSTS13"], tmp_path / "out")
    first = lb.update_leaderboard([tmp_path / "out"], tmp_path / "board.json").board
    (row,) = first.rows
    data = json.loads((tmp_path / "board.json").read_text())  # as a board of an earlier flow-plugin holds it
    legacy_id = f"{row.model}@{row.revision}"
    data["rows"][0].update(id=legacy_id, experiment=None, experiment_kwargs={})
    (tmp_path / "old.json").write_text(json.dumps(data))
    merged = lb.update_leaderboard([tmp_path / "out"], tmp_path / "old.json").board
    assert [row.id for row in merged.rows] == [legacy_id]


# ------------------------------------------------------------------ damaged files say what to do
def test_a_damaged_leaderboard_or_fit_record_file_names_its_remedy(tmp_path: Path) -> None:
    """(Before, each was named, with its problem, but not what to do about it.)"""
    from flow_plugin import leaderboard as lb
    from flow_plugin.errors import DataFolderError
    from flow_plugin.results.fits import read_fits

    published = Path(__file__).resolve().parents[1] / "leaderboards" / "minilm-l6.json"
    cut = tmp_path / "board.json"
    cut.write_text(published.read_text()[:500])  # a write cut short
    with pytest.raises(lb.LeaderboardError, match=r"board\.json: leaderboard is not valid JSON: .*; restore it "
                                                  r"\(git checkout -- .*\), or rebuild it from its result folders"):
        lb.load_leaderboard(cut)
    fits = tmp_path / "SentEvalSTS12.fits.json"
    fits.write_text('{"format": "flow-plugin-fits"')
    with pytest.raises(DataFolderError, match=r"not valid JSON: .*; rerun its task with --overwrite"):
        read_fits(fits)


def test_a_result_of_another_auto_rule_is_filed_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    """auto's score depends on its table and thresholds, not on the hyper-parameters a user set alone: a changed rule
    (a new flow-plugin release, or a user's own threshold) names another MTEB experiment, so MTEB never reuses the
    old rule's score as this one's."""
    base = mteb.get_model_meta("flow_plugin/minilm-l6")
    name = calibrated_meta(base, "auto").experiment_name
    assert name == mteb.get_model_meta("flow_plugin/minilm-l6-auto").experiment_name and "rule_" in name
    assert calibrated_meta(base, "auto", {"threshold": 0.5}).experiment_name != name
    monkeypatch.setitem(auto.RULES, "ranking", ("whiten", "whiten"))
    assert calibrated_meta(base, "auto").experiment_name != name
    assert calibrated_meta(base, "whiten").experiment_name == "calibrator_whiten"  # the others are named as before


def test_what_the_fit_read_names_the_result_on_every_route() -> None:
    """A capped or seeded fit is another result: the Python loader files it where ``mteb.get_model`` with the same
    arguments does, and apart from the default fit (a capped run's score never comes back for the uncapped one)."""
    name = "flow_plugin/minilm-l6-layer0-whiten"
    capped = registry_model(parse_model_name(name), max_fit_sentences=3, fit_seed=7).mteb_model_meta.experiment_name
    assert capped == mteb.get_model(name, max_fit_sentences=3, fit_seed=7).mteb_model_meta.experiment_name
    assert capped != registry_model(parse_model_name(name)).mteb_model_meta.experiment_name
