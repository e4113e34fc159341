"""One model's evaluation through ``mteb.evaluate``: the heavy half of :mod:`.evaluate`, imported when a model is
evaluated (it imports MTEB, and torch through the model).

:func:`load_model` has MTEB build the model a name spells; :func:`evaluate_with_seeds` evaluates it over
the tasks, each with a fresh evaluator state and its fit reading that task object's text, into a locked result
cache, then writes the fit and run records beside every result computed now.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mteb

from flow_plugin._machine import StageTimes, describe_machine
from flow_plugin.catalog.registry import MODEL_PREFIX
from flow_plugin.encoding.cpu_kernels import precision_of
from flow_plugin.encoding.options import EncoderOptions
from flow_plugin.errors import DatasetUnavailableError
from flow_plugin.evaluation.blas_threads import evaluator_threads
from flow_plugin.integrations.mteb.base_encoders import loaded_base
from flow_plugin.integrations.mteb.calibrated import CalibratedModel
from flow_plugin.integrations.mteb.compat import (HUB_DATA_ERRORS, evaluator_is_random, fresh_evaluator_state,
                                                  locked_result_cache, reseeded, track_task)
from flow_plugin.results import ResultStore
from flow_plugin.results.files import EVALUATOR_SEEDS_FOLDER
from flow_plugin.results.fits import write_task_fits


@dataclass
class TaskRun:
    """One (model, task) of an evaluation: computed now, or an earlier result reused."""

    model: str
    task: str
    status: str  # "computed" | "reused"
    score: float  # the task's main score (0-1 scale)
    path: Path | None  # the result file
    date: str | None  # when the result was computed (ISO 8601, UTC)


@dataclass
class ModelEvaluation:
    """What ``mteb.evaluate`` returned for one model, and where each result came from."""

    model: str
    result: Any  # mteb's ModelResult
    runs: list[TaskRun] = field(default_factory=list)
    #: how the backbone's precision was chosen (``PrecisionChoice.describe()``: "auto -> float32 (bf16 0.52x ...)")
    precision: str | None = None
    #: the runs of each further evaluator seed (the tasks whose evaluator draws at random, each in
    #: ``<output>/evaluator-seeds/<seed>/``)
    seed_runs: dict[int, list[TaskRun]] = field(default_factory=dict)
    #: wall and CPU seconds per stage: "encode" (the base model), "fit", "evaluate" (MTEB's evaluator, the rest)
    times: dict[str, dict[str, float]] = field(default_factory=dict)


def load_model(model_name: str, options: EncoderOptions, model_kwargs: dict[str, Any] | None = None) -> Any:
    """The calibrated model a name spells (a plain MTEB model name: its raw calibration), loaded by MTEB with
    ``options`` (:meth:`~flow_plugin.encoding.options.EncoderOptions.loader_kwargs`) and ``model_kwargs``."""
    if not model_name.startswith(MODEL_PREFIX):
        return CalibratedModel(loaded_base(mteb.get_model(model_name, device=options.device), options.cache_dir),
                               "raw")
    # the cache folder names no result: CalibratedModel leaves it out of the experiment MTEB files results under
    cache = {} if options.cache_dir is None else {"cache_dir": str(options.cache_dir)}
    return mteb.get_model(model_name, device=options.device, **{**(model_kwargs or {}), **options.loader_kwargs()},
                          **cache)


def evaluate_with_seeds(model_name: str, model: Any, tasks: Sequence[Any], output: Path, overwrite: bool,
                        batch_size: int, command: str, evaluator_seeds: Sequence[int]) -> ModelEvaluation:
    """One model over ``tasks`` with their own evaluator seed, then over the random ones' other seeds."""
    times = StageTimes()
    with times.measure("total"):
        evaluation = _evaluate_model(model_name, model, tasks, output, overwrite, batch_size, command)
        random_tasks = [task for task in tasks if evaluator_is_random(task)]
        for seed in dict.fromkeys(seed for seed in evaluator_seeds if random_tasks):
            twins = [reseeded(task, seed) for task in random_tasks if task.seed != seed]
            if twins:
                folder = output / EVALUATOR_SEEDS_FOLDER / str(seed)
                evaluation.seed_runs[seed] = _evaluate_model(model_name, model, twins, folder, overwrite,
                                                             batch_size, command).runs
    evaluation.times = _stage_times(times, model.fits.times)
    return evaluation


def _stage_times(total: Any, stages: Any) -> dict[str, dict[str, float]]:
    """The model's "encode" and "fit" seconds, and "evaluate": the rest of the evaluation (MTEB's evaluator)."""
    found = stages.as_dict()
    spent = total.as_dict()["total"]
    found["evaluate"] = {key: round(max(0.0, spent[key] - sum(stage[key] for stage in found.values())), 3)
                         for key in ("wall", "cpu")}
    return found


def _evaluate_model(model_name: str, model: Any, tasks: Sequence[Any], output: Path, overwrite: bool,
                    batch_size: int, command: str) -> ModelEvaluation:
    """One model over ``tasks`` into ``output``: the folder made ready, MTEB's evaluation, the records."""
    meta = model.mteb_model_meta
    store = ResultStore(output)
    store.prepare(meta, tasks, overwrite=overwrite)
    paths = {task.metadata.name: store.result_path(meta, task.metadata.name) for task in tasks}
    before = {task: _stamp(path) for task, path in paths.items()}
    for task in tasks:  # each model's evaluation draws as a fresh `mteb run` of the task would
        fresh_evaluator_state(task)
        model.fits.remember(task)  # its fit reads this task object's text
        track_task(task)  # what MTEB saves for this task's name has this object's per-item data beside it
    try:
        with evaluator_threads():  # MTEB's logistic regressions and k-means: the faster BLAS thread count here
            result = mteb.evaluate(model, list(tasks), cache=locked_result_cache(output, store.writing),
                                   overwrite_strategy="always" if overwrite else "only-missing",
                                   encode_kwargs={"batch_size": batch_size}, co2_tracker=False,
                                   show_progress_bar=True)
    except BaseException as error:  # failed or interrupted: what it wrote has no run record, so it is no result
        with contextlib.suppress(Exception):  # (the next run sets aside what this cannot)
            store.discard([path for task, path in paths.items() if _stamp(path) != before[task]])
        if isinstance(error, HUB_DATA_ERRORS) and not isinstance(error, DatasetUnavailableError):
            raise _hub_unreachable(error, tasks) from error
        raise
    computed = {task: path for task, path in paths.items() if _stamp(path) != before[task]}
    evaluation = ModelEvaluation(model_name, result, precision=_precision(model))
    _record(store, model, computed, batch_size, command)
    for task_result in result.task_results:
        task = task_result.task_name
        date = task_result.date.isoformat(timespec="seconds") if getattr(task_result, "date", None) else None
        evaluation.runs.append(TaskRun(model_name, task, "computed" if task in computed else "reused",
                                       float(task_result.get_score()), paths.get(task), date))
    return evaluation


def _hub_unreachable(error: Exception, tasks: Sequence[Any]) -> DatasetUnavailableError:
    """MTEB could not fetch a task's data from the Hugging Face Hub: one line naming the task and the ways on."""
    said = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    named = [task.metadata.name for task in tasks if str(task.metadata.dataset.get("path", "")) in said]
    which = f"task {named[0]}" if named else "a task"
    return DatasetUnavailableError(
        f"{which}: its data could not be fetched from the Hugging Face Hub ({said}); run it where the Hub is "
        "reachable (once fills the datasets cache), or evaluate the offline tasks on the shared data folder "
        "(flow-plugin eval --data DIR; docs/tasks.md)")


def _stamp(path: Path) -> tuple[int, int] | None:
    """(mtime_ns, size) of a result file, or None where there is none."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_mtime_ns, stat.st_size


def _record(store: ResultStore, model: Any, computed: dict[str, Path], batch_size: int, command: str) -> None:
    """The fit records next to each result computed now, then their run records (hardware, encoder)."""
    for task, path in computed.items():
        write_task_fits(path, model, task)
    settings: dict[str, Any] = {"batch_size": batch_size, "command": command}
    backbone = getattr(getattr(model.base, "encoder", None), "backbone", None)
    if backbone is not None:  # a registry backbone: its device, precision and kernels
        hardware = backbone.hardware()
        settings.update(encoder=backbone.key.as_dict(), oom_halvings=backbone.oom_halvings)
    else:  # a model MTEB loads: its own loader decides how it runs, and its torch module says where
        hardware = describe_machine(*_loaded_device_precision(model.base))
        settings.update(encoder={"model": model.mteb_model_meta.name, "loader": "MTEB's"})
    store.record(list(computed.values()), hardware, settings)  # or set them aside, and say why


def _loaded_device_precision(base: Any) -> tuple[str | None, str | None]:
    """The device and precision of a model MTEB loaded, read from the module its wrapper holds (a
    sentence-transformers model's ``device`` and ``dtype``); (None, None) for one without (a mock encoder)."""
    module = getattr(base, "model", None)
    device, dtype = getattr(module, "device", None), getattr(module, "dtype", None)
    return (None if device is None else str(device)), precision_of(dtype)


def _precision(model: Any) -> str | None:
    """How the base ran its forward pass: a registry backbone's precision choice, else the dtype of the module a
    loaded model holds, else None (a mock encoder)."""
    backbone = getattr(getattr(model.base, "encoder", None), "backbone", None)
    return backbone.precision_choice.describe() if backbone is not None else _loaded_device_precision(model.base)[1]


__all__ = ["ModelEvaluation", "TaskRun", "evaluate_with_seeds", "load_model"]
