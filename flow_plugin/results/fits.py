"""Fit records next to MTEB's results: what each calibrator was fitted on, per task.

Next to an MTEB task result ``<Task>.json``, flow-plugin writes the sidecar (:mod:`.sidecars`)
``flow-plugin-fits/<Task>.fits.json``: one record per fit that served the task (calibrator and
its parameters, corpus, sentences and distinct sentences, sampling cap and seed, the small-sample
adaptation, encode and fit time, log-likelihood, and every ``encode()`` call it served). Records
of other subsets (an earlier run that evaluated other subsets) are kept.

Examples
--------
>>> fits_path(Path("out/results/m/rev/STS12.json")).as_posix()
'out/results/m/rev/flow-plugin-fits/STS12.fits.json'
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from flow_plugin._io import atomic_write_json, read_json
from flow_plugin.errors import DataFolderError
from flow_plugin.results.sidecars import sidecar_path

FITS_FORMAT = "flow-plugin-fits"
FITS_VERSION = 1


def fits_path(result_path: str | os.PathLike[str]) -> Path:
    """The fit-records file of an MTEB task result file."""
    return sidecar_path(result_path, "fits")


def write_fits(result_path: str | os.PathLike[str], *, task: str, model: str, revision: str | None,
               records: list[dict[str, Any]]) -> Path:
    """Write the fit records of ``task`` next to its result file (replacing older records of the
    same subsets, keeping those of other subsets); returns the file."""
    path = fits_path(result_path)
    subsets = {record.get("hf_subset") for record in records}
    kept = []
    if path.is_file():
        try:
            kept = [record for record in read_fits(path)["fits"] if record.get("hf_subset") not in subsets]
        except DataFolderError:
            kept = []  # a damaged file is replaced by what this run knows
    atomic_write_json(path, {"format": FITS_FORMAT, "format_version": FITS_VERSION, "task": task, "model": model,
                             "revision": revision, "fits": kept + records})
    return path


#: what to do about a damaged fit-records file
FITS_REMEDY = ("rerun its task with --overwrite (the result and its fit records are computed again), or delete the file "
               "(the result then shows no fit records)")


def read_fits(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A fit-records file, checked; errors name the file."""
    data = read_json(path, "flow-plugin fit records", FITS_REMEDY)
    if not isinstance(data, dict) or data.get("format") != FITS_FORMAT or not isinstance(data.get("fits"), list):
        raise DataFolderError(f"{path}: not a {FITS_FORMAT} file (expected an object with 'format' and 'fits'); "
                              f"{FITS_REMEDY}")
    return data


def fits_of_result(result_path: str | os.PathLike[str]) -> list[dict[str, Any]] | None:
    """The fit records written next to a result file, or ``None`` when there are none."""
    path = fits_path(result_path)
    return read_fits(path)["fits"] if path.is_file() else None


#: what the leaderboard keeps of each fit record
SUMMARY_KEYS = ("hf_subset", "calibrator", "fit_corpus", "corpus_sha256", "source", "n_sentences",
                "n_unique_sentences", "adapted", "fit_seconds", "fit_log_likelihood", "member_seeds", "calls")


def summarize_fit(record: dict[str, Any]) -> dict[str, Any]:
    """The leaderboard's view of one fit record: what was fitted, on what, how many sentences,
    the sampling (corpus size, cap, seed), time and log-likelihood.

    Examples
    --------
    >>> summarize_fit({"hf_subset": "default", "calibrator": "sn", "n_sentences": 4, "sampling": {"sampled": False,
    ...                "corpus_sentences": 4, "max_fit_sentences": 10, "seed": 0}})["sampled"]
    False
    """
    summary = {key: record.get(key) for key in SUMMARY_KEYS if key in record}
    if summary.get("member_seeds") is None:  # only an ensemble has member seeds
        summary.pop("member_seeds", None)
    sampling = record.get("sampling") or {}
    for key in ("sampled", "corpus_sentences", "corpus_unique_sentences", "max_fit_sentences", "seed"):
        if key in sampling:
            summary[key] = sampling[key]
    return summary


def task_records(fit_log: list[dict[str, Any]], task: str) -> list[dict[str, Any]]:
    """The records of the fits that served ``task`` (a sentence-file fit serves every task), each with only
    the task's own calls."""
    records = []
    for record in fit_log:
        served = [call for call in record.get("served", []) if call.get("task") == task]
        if record.get("calibrator") == "raw" or not (served or record.get("task") == task):
            continue
        records.append({**record, "served": served, "calls": len(served)})
    return records


def write_task_fits(result_path: str | os.PathLike[str], model: Any, task: str) -> Path | None:
    """Write the records of a calibrated model's fits for ``task`` next to its result file (none for raw)."""
    records = task_records(getattr(model, "fit_log", []), task)
    if not records:
        return None
    meta = model.mteb_model_meta
    return write_fits(result_path, task=task, model=model.name, revision=meta.revision, records=records)
