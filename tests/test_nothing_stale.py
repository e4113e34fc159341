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
from flow_plugin.errors import EncoderOutputError
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
    from flow_plugin.integrations.mteb.base_models import with_call_cache

    cached = with_call_cache(FaultyBase("one row more"), tmp_path / "cache")
    with pytest.raises(EncoderOutputError):
        mteb.evaluate(flow_plugin.calibrate(cached, "raw"), [task_class(PAIRS)(data_dir=subset_root)], cache=None,
                      co2_tracker=False, show_progress_bar=False)
    assert not [path for path in (tmp_path / "cache").rglob("*") if path.is_file() and path.suffix == ".npy"]


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
