"""Ingest for the task-types board: a study's MTEB results of the labelled tasks, each with its per-item data.

:func:`read_task_results` lists the result files of one backbone's models in a result folder (through mteb's
own ``ResultCache``, as the STS boards do), keeps those of the labelled tasks
(:mod:`flow_plugin.catalog.labelled_tasks`), reads each main score and the per-item file kept next to it
(``flow-plugin-items/<Task>.items.npz``), checked to reproduce that score
(:func:`~flow_plugin.results.items.items_of_result`). A result without usable per-item data is
an error naming the file: the board never shows a Δ without its interval.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flow_plugin.calibration import default_seed
from flow_plugin.calibration.names import CALIBRATOR_NAMES
from flow_plugin.catalog.labelled_tasks import labelled_task_names
from flow_plugin.catalog.registry import get_base
from flow_plugin.errors import LeaderboardError
from flow_plugin.results.items import ItemScores, items_of_result
from flow_plugin.results import ResultStore
from flow_plugin.results.files import EVALUATOR_SEEDS_FOLDER, MTEB_SEED, load_task_result, result_identity


@dataclass(frozen=True)
class TaskResult:
    """One (calibrator, seed, task, evaluator seed) result of a study: its main score (0-1) and its per-item data."""

    model: str
    calibrator: str
    seed: int | None
    task: str
    task_type: str
    main_score: str
    score: float
    dataset_revision: str
    items: ItemScores
    path: Path
    #: the evaluator's seed (MTEB's task seed; 42, MTEB's own, for a task whose evaluator draws nothing at random)
    evaluator_seed: int = MTEB_SEED


def _calibrator_of(model: str, base: Any) -> str | None:
    """The calibrator name of one of the base's model names as its results read back (None for another model)."""
    return next((name for name in CALIBRATOR_NAMES if base.result_name(name) == model), None)


def read_task_results(folder: str | os.PathLike[str], backbone: str, tasks: list[str] | None = None, *,
                      calibrators: list[str] | None = None) -> list[TaskResult]:
    """Every result of ``backbone``'s models (or those of ``calibrators``; raw is always read, every Δ is against it)
    on the labelled tasks (or those of ``tasks``) in the MTEB output folder ``folder`` and in its further evaluator
    seeds' folders (``evaluator-seeds/<seed>/``), with its per-item data. A result whose per-item data is missing
    or does not reproduce its score is a :class:`~flow_plugin.errors.LeaderboardError` naming the file and the
    remedy."""
    base = get_base(backbone)
    wanted = set(tasks or labelled_task_names())
    found = _read_folder(Path(folder), base, wanted, calibrators, MTEB_SEED)
    seeds_folder = Path(folder) / EVALUATOR_SEEDS_FOLDER
    for seed_folder in sorted(seeds_folder.iterdir()) if seeds_folder.is_dir() else []:
        if seed_folder.name.isdigit():
            found += _read_folder(seed_folder, base, wanted, calibrators, int(seed_folder.name))
    return found


def _read_folder(folder: Path, base: Any, wanted: set[str], calibrators: list[str] | None,
                 evaluator_seed: int) -> list[TaskResult]:
    """The results of one output folder (one evaluator seed)."""
    if not (folder / "results").is_dir():
        return []
    found: list[TaskResult] = []
    for path in ResultStore.existing(folder).task_result_paths():
        if path.stem not in wanted:
            continue
        identity = result_identity(path)
        calibrator = _calibrator_of(identity.model, base)
        if calibrator is None or (calibrators is not None and calibrator != "raw" and calibrator not in calibrators):
            continue
        result = load_task_result(path)
        splits = list(result.scores)
        if len(splits) != 1 or len(result.scores[splits[0]]) != 1:
            raise LeaderboardError(f"{path}: a labelled task has one split and one subset; this result has "
                                   f"{len(splits)} split(s)")
        subset = result.scores[splits[0]][0]
        score = float(subset["main_score"])
        items, why = items_of_result(path, main_score=score, dataset_revision=result.dataset_revision)
        if items is None:
            raise LeaderboardError(f"{path}: no usable per-item data ({why}); rerun the study for this result "
                                   "(flow-plugin task-types ... --overwrite) to get its interval")
        params = identity.experiment_kwargs.get("calibrator_params") or {}
        seed = params.get("seed", default_seed(calibrator))
        found.append(TaskResult(identity.model, calibrator, seed, path.stem, items.task_type,
                                str(items.meta["main_score"]), score, result.dataset_revision, items, path,
                                evaluator_seed))
    return found


#: what the board says about where its results were computed (the run records hold more: flags, probe times)
_PROVENANCE_KEYS = ("cpu", "cpu_cores", "device", "gpu", "precision", "bf16_kernels", "torch", "python")


def run_provenance(folder: str | os.PathLike[str]) -> dict[str, Any] | None:
    """Where a study's results were computed, from the run records of the folder: the distinct hardware
    descriptions (CPU, cores, device, precision, torch), or None when the folder has no run records."""
    store = ResultStore(folder)
    if not store.runs_file.is_file():
        return None
    seen: list[dict[str, Any]] = []
    for record in store.run_records():
        hardware = record.get("hardware")
        if isinstance(hardware, dict):
            summary = {key: hardware.get(key) for key in _PROVENANCE_KEYS if hardware.get(key) is not None}
            if summary not in seen:
                seen.append(summary)
    return {"hardware": seen} if seen else None


__all__ = ["TaskResult", "read_task_results", "run_provenance"]
