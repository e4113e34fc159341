"""Does calibration help beyond STS? One backbone × calibrators × the offline tasks of every MTEB type.

:func:`run_task_types` evaluates, through ``mteb.evaluate``, each calibrator of a backbone (raw, SN, NATSV,
SN+NATSV, whitening, the flow and its variants, the flow ensemble; a seeded one over several seeds) on the
labelled tasks (:mod:`flow_plugin.catalog.labelled_tasks`: classification, pair classification, clustering,
reranking, retrieval), and writes:

* MTEB's result files, ``<output>/results/<model>/<revision>/[experiments/<kwargs>/]<Task>.json``;
* next to each, the fit records (``flow-plugin-fits/``) and the per-item data a paired bootstrap resamples
  (``flow-plugin-items/<Task>.items.npz``, :mod:`flow_plugin.results.items`);
* ``<output>/task-types-study.json``: every step's score, time and fit, and the totals.

Tasks run one after the other, every calibrator on a task before the next task, so the backbone encodes a
task's sentences once (the first run) and every later run reads them from the embedding cache (in memory
and, with a cache folder, on disk); each calibrator is fitted once per task (the "target" fit on the task's
unlabeled text). A study fits on at most ``max_fit_sentences`` distinct sentences per task
(:data:`STUDY_MAX_FIT_SENTENCES`, a seeded sample above it): only SST-2 (70,042 sentences) is above it; the
fit records say so.

Example::

    from flow_plugin.studies.task_types import run_task_types

    report = run_task_types("minilm-l6", "../shared/data", calibrators=["raw", "whiten", "flow"], seeds=3,
                            output_folder="results/task-types")
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from flow_plugin._io import atomic_write_json, make_output_folder
from flow_plugin._machine import StageTimes, resolve_device
from flow_plugin.calibration.names import STUDY_CALIBRATORS
from flow_plugin.catalog.registry import MODEL_NAME_SUFFIXES, BackboneSpec, RegistryModel, get_base
from flow_plugin.data.sampling import DEFAULT_MAX_FIT_SENTENCES, check_cap
from flow_plugin.encoding.options import EncoderOptions, disk_cache_dir
from flow_plugin.errors import DataFolderError, OutputError, RegistryError, WeightsUnavailableError
from flow_plugin.leaderboard.pipeline import update_task_types_board
from flow_plugin.studies.runs import check_count, expand_runs, loadable_base
from flow_plugin.studies.study_steps import (MTEB_SEED, StepJob, StudyStep, job_order, load_task, process_pool,
                                             run_step, run_steps, study_tasks)

logger = logging.getLogger(__name__)

#: most distinct sentences a study's calibrator is fitted on per task; larger corpora (SST-2's 70,042) are sampled
#: (seeded). 20,000 is above every other task's text (the largest: STS-B sources, 15,439) and keeps the
#: backbone's pass over SST-2 at 20,000 + 2,000 scored sentences instead of 70,042
STUDY_MAX_FIT_SENTENCES = 20_000
STUDY_FILE = "task-types-study.json"
#: evaluator seeds of a study (MTEB's 42 and the next ones) for the task types whose evaluator draws at random:
#: their spread enters each interval (docs/results.md)
DEFAULT_EVALUATOR_SEEDS = 3
# a failed step whose error is one of these stops the study: every step left would fail the same way
_STOPPING = {error.__name__: error for error in (OutputError, WeightsUnavailableError)}


@dataclass
class StudyReport:
    backbone: str
    output_folder: Path
    tasks: list[str]
    runs: list[str]
    max_fit_sentences: int
    steps: list[StudyStep] = field(default_factory=list)
    wall_seconds: float = 0.0
    cpu_seconds: float = 0.0
    interrupted: bool = False
    senteval: Any = None
    #: the earlier runs of the study in the same output folder (a resumed or extended study): their runs, wall and
    #: CPU seconds, and how many results each computed, oldest first
    earlier_runs: list[dict[str, Any]] = field(default_factory=list)
    #: the embedding cache's warm-up before the workers start (a registry backbone): its wall and CPU seconds
    warm_up: dict[str, dict[str, float]] = field(default_factory=dict)
    #: CPU seconds of the steps the worker processes ran (this process's own are its process time)
    worker_cpu_seconds: float = 0.0

    def stages(self) -> dict[str, dict[str, float]]:
        """Wall and CPU seconds of this run per stage, summed over its steps (each in the process that ran it) and
        the warm-up: "encode" (the backbone), "fit" (the calibrators), "evaluate" (MTEB's evaluators)."""
        totals: dict[str, dict[str, float]] = {}
        for times in [self.warm_up, *(step.times for step in self.steps)]:
            for stage, spent in times.items():
                for key, value in spent.items():
                    totals.setdefault(stage, {"wall": 0.0, "cpu": 0.0})[key] += value
        return {stage: {key: round(value, 1) for key, value in spent.items()} for stage, spent in totals.items()}

    def summary(self) -> dict[str, Any]:
        """This run as one entry of a later run's :attr:`earlier_runs`."""
        return _run_entry(self.runs, self.wall_seconds, self.cpu_seconds, [step.status for step in self.steps],
                          self.interrupted, self.stages())

    def totals(self) -> dict[str, Any]:
        """Wall and CPU seconds of every run of the study in this folder, this one included, and per stage."""
        entries = [*self.earlier_runs, self.summary()]
        totals: dict[str, Any] = {key: round(sum(entry[key] for entry in entries), 1)
                                  for key in ("wall_seconds", "cpu_seconds")}
        stages: dict[str, dict[str, float]] = {}
        for entry in entries:
            for stage, spent in (entry.get("stages") or {}).items():
                for key, value in spent.items():
                    spent_so_far = stages.setdefault(stage, {"wall": 0.0, "cpu": 0.0})
                    spent_so_far[key] = round(spent_so_far[key] + value, 1)
        if stages:
            totals["stages"] = stages
        return totals

    def scores(self) -> dict[str, dict[str, float | None]]:
        """task -> run label -> main score (0-1) at MTEB's own evaluator seed."""
        table: dict[str, dict[str, float | None]] = {}
        for step in self.steps:
            if step.evaluator_seed == MTEB_SEED:
                table.setdefault(step.task, {})[step.label] = step.score
        return table

    def as_dict(self) -> dict[str, Any]:
        data = {"format": "flow-plugin-task-types-study", "format_version": 1, "backbone": self.backbone,
                "tasks": self.tasks, "runs": self.runs, "max_fit_sentences": self.max_fit_sentences,
                "wall_seconds": round(self.wall_seconds, 1), "cpu_seconds": round(self.cpu_seconds, 1),
                "machine": _machine_note(), "interrupted": self.interrupted,
                "earlier_runs": self.earlier_runs, "total": self.totals(), "stages": self.stages(),
                "steps": [asdict(step) for step in self.steps]}
        if self.senteval is not None:
            data["senteval"] = self.senteval.as_dict()
        return data


def run_task_types(
    backbone: str,
    data: str | os.PathLike[str] | None = None,
    *,
    output_folder: str | os.PathLike[str] = "results/task-types",
    calibrators: Sequence[str] = STUDY_CALIBRATORS,
    seeds: int = 1,
    tasks: Sequence[str] | None = None,
    max_fit_sentences: int = STUDY_MAX_FIT_SENTENCES,
    evaluator_seeds: int = DEFAULT_EVALUATOR_SEEDS,
    workers: int | None = None,
    options: Any = None,
    overwrite: bool = False,
    senteval: dict[str, Any] | None = None,
    progress: Callable[[str], None] = logger.info,
    show_progress_bar: bool = True,
) -> StudyReport:
    """Run ``calibrators`` of ``backbone`` (a registry backbone, an MTEB model name or a local folder; a seeded
    calibrator with ``seeds`` seeds) over the study's tasks (:func:`study_tasks`), writing MTEB results, fit
    records and per-item data under ``output_folder``.

    The tasks whose evaluator draws at random (classification, clustering) are evaluated with ``evaluator_seeds``
    seeds: MTEB's own (42) and the next ones, each further seed in ``<output>/evaluator-seeds/<seed>/``.

    A registry backbone first encodes every task's text once, with every core, into the study's embedding cache
    (its raw runs, and the fit sample every calibrator draws; with more than one worker, in a process of its own
    that exits before the workers start, taking the model along); then the other runs go to ``workers`` processes
    (default: one per core, at most 4) that read the embeddings from the cache. Finished results are reused unless
    ``overwrite``. A failing step is reported and the others go on. With ``senteval`` (keyword arguments of
    :func:`flow_plugin.studies.senteval_transfer.run_transfer`, at least ``task_path``), SentEval's transfer tasks
    run too, written to ``senteval-transfer.json``.
    """
    started, cpu_started = time.perf_counter(), time.process_time()
    spec = loadable_base(backbone, options)
    evaluator_seeds, workers = _checked_settings(calibrators, max_fit_sentences, evaluator_seeds, workers, options)
    runs = expand_runs(spec, list(dict.fromkeys(calibrators)), seeds=seeds)
    task_objects = study_tasks(data, tasks)
    output = make_output_folder(output_folder)
    options = options or EncoderOptions()
    options = options.replace(cache_dir=disk_cache_dir(output, options.cache_dir))
    report = StudyReport(spec.name, output, [task.metadata.name for task in task_objects], [run.label for run in runs],
                         max_fit_sentences, earlier_runs=_earlier_runs(output / STUDY_FILE, spec.name))
    plan = _Plan(spec, runs, task_objects, data, output, options, max_fit_sentences, overwrite,
                 tuple(range(MTEB_SEED + 1, MTEB_SEED + evaluator_seeds)))
    progress(f"task types: {spec.name}: {len(runs)} runs × {len(task_objects)} tasks = {len(plan.jobs)} results "
             f"({evaluator_seeds} evaluator seeds where MTEB's evaluator draws at random) in {output / 'results'}; "
             f"{workers} worker(s); embedding cache {options.cache_dir}")
    try:
        _run_plan(plan, report, workers, progress, show_progress_bar, (started, cpu_started))
    except KeyboardInterrupt:
        report.interrupted = True
    if senteval is not None and not report.interrupted:
        from flow_plugin.studies.senteval_transfer import run_transfer  # numpy: not to parse

        arguments = {"calibrators": calibrators, "seeds": seeds, "output": output / "senteval-transfer.json",
                     "progress": progress, **senteval}
        report.senteval = run_transfer(spec.name, arguments.pop("task_path"), **arguments)
    _save(report, started, cpu_started)
    return report


def _checked_settings(calibrators: Sequence[str], max_fit_sentences: int, evaluator_seeds: int, workers: int | None,
                      options: Any) -> tuple[int, int]:
    """A study's settings checked before anything runs (each bad one is a one-line error): the evaluator seeds, and
    the workers (default: :func:`default_workers`)."""
    unknown = [name for name in calibrators if name not in MODEL_NAME_SUFFIXES]
    if unknown:
        raise RegistryError(f"unknown calibrator(s) {', '.join(unknown)}; choose from {', '.join(MODEL_NAME_SUFFIXES)}")
    check_cap(max_fit_sentences, 0)
    if options is not None and options.device is not None:
        resolve_device(options.device)  # a device this machine lacks: one line now, not at the first encoding
    evaluator_seeds = check_count("evaluator_seeds", evaluator_seeds, "seeds")
    if workers is None:
        return evaluator_seeds, default_workers()
    return evaluator_seeds, check_count("workers", workers, "processes (1 runs every step in this process)")


def default_workers() -> int:
    """Worker processes of a study: one per core, at most 4 (each holds MTEB, the task data and its embeddings)."""
    return max(1, min(os.cpu_count() or 1, 4))


@dataclass
class _Plan:
    """A study's jobs: the raw runs (and the cache warm-up) in this process first for a registry backbone, then
    every other (run, task) in the workers, costliest first."""

    spec: Any
    runs: Sequence[Any]
    tasks: Sequence[Any]
    data: Any
    output: Path
    options: Any
    max_fit_sentences: int
    overwrite: bool
    evaluator_seeds: tuple[int, ...]

    def job(self, run: Any, task: Any) -> StepJob:
        kwargs = dict(run.kwargs)
        if run.model != self.spec.model_name("raw") and self.max_fit_sentences != DEFAULT_MAX_FIT_SENTENCES:
            kwargs["max_fit_sentences"] = self.max_fit_sentences
        return StepJob(run.model, run.label, run.seed, kwargs, task.metadata.name, self.data_root, str(self.output),
                       asdict(self.options), self.overwrite, self.evaluator_seeds)

    @property
    def jobs(self) -> list[StepJob]:
        return [self.job(run, task) for task in self.tasks for run in self.runs]

    @property
    def warm_up_arguments(self) -> tuple[Any, ...]:
        """:func:`warm_fit_samples`' arguments, plain and picklable."""
        return (self.spec.name, [task.metadata.name for task in self.tasks], self.data_root, asdict(self.options),
                self.max_fit_sentences)

    @property
    def data_root(self) -> str | None:
        """The data root as a worker receives it (a step's job, the warm-up)."""
        return None if self.data is None else str(self.data)

    @property
    def first(self) -> list[StepJob]:
        """The jobs this process runs before the workers start: a registry backbone's raw runs."""
        raw = self.spec.model_name("raw")
        return [job for job in self.jobs if job.model == raw] if isinstance(self.spec, BackboneSpec) else []


def _run_plan(plan: _Plan, report: StudyReport, workers: int, progress: Callable[[str], None], bar_shown: bool,
              clocks: tuple[float, float]) -> None:
    """The raw runs and the cache warm-up here, then every other job in the workers; each step lands in the
    report and the study file as it finishes."""
    first = plan.first
    rest = [job for job in plan.jobs if job not in first]
    bar = tqdm(total=len(plan.jobs), desc=f"task types ({plan.spec.name})", unit="result", disable=not bar_shown)

    def landed(steps: list[StudyStep], in_workers: bool = False) -> None:
        report.steps.extend(steps)
        report.worker_cpu_seconds += sum(step.cpu_seconds for step in steps) if in_workers else 0.0
        bar.update(1)
        step = steps[0]
        bar.set_postfix_str(f"{step.task} × {step.label.removeprefix('flow_plugin/')}")
        shown = (" ".join(f"{s.score:.4f}" for s in steps) if step.score is not None else f"FAILED: {step.error}")
        progress(f"task types [{bar.n}/{len(plan.jobs)}] {step.label} × {step.task}: {step.main_score} {shown} "
                 f"({step.status}, {step.seconds:.1f} s)")
        _save(report, *clocks)
        kind, _, message = (step.error or "").partition(": ")
        if step.status == "failed" and kind in _STOPPING:
            raise _STOPPING[kind](f"{message}; the study stopped there (rerun it to resume)")

    try:
        if first and workers > 1:
            _run_first_apart(plan, first, report, landed)
        elif first:
            run_steps(first, 1, landed)
            report.warm_up = warm_fit_samples(*plan.warm_up_arguments)
        run_steps(list(job_order(rest, _cost)), workers, lambda steps: landed(steps, workers > 1))
    finally:
        bar.close()


def _run_first_apart(plan: _Plan, first: list[StepJob], report: StudyReport, landed: Callable[..., None]) -> None:
    """The raw runs and the warm-up in one spawned process with this process's torch threads (as many as it would
    use itself): the backbone, the tasks' data and their embeddings leave with that process, so the workers start
    beside a small parent instead of one still holding all of it."""
    from flow_plugin.encoding.device import process_threads  # heavy: loads torch

    with process_pool(1, threads=process_threads()) as pool:
        for future in [pool.submit(run_step, job) for job in first]:  # one process: they run in this order
            landed(future.result(), True)
        report.warm_up = pool.submit(warm_fit_samples, *plan.warm_up_arguments).result()
    report.worker_cpu_seconds += sum(spent["cpu"] for spent in report.warm_up.values())


def warm_fit_samples(backbone: str, tasks: Sequence[str], data: str | None, options: dict[str, Any],
                     max_fit_sentences: int) -> dict[str, dict[str, float]]:
    """Encode the fit sample of every task (the one every calibrator draws: same cap, same seed) of the registry
    ``backbone`` into the study's embedding cache (``options``' cache folder) with this process's threads, so
    the workers read their fits' embeddings instead of loading the model; the wall and CPU seconds it took."""
    # torch and MTEB load when the fits are warmed, not to parse the command line
    from flow_plugin.encoding.cache import clear_shared_encoders
    from flow_plugin.integrations.mteb.base_models import registry_model

    spec, times = get_base(backbone), StageTimes()
    with times.measure("encode"):
        for name in tasks:
            model = registry_model(RegistryModel(spec, "sn"), max_fit_sentences=max_fit_sentences,
                                   **{key: value for key, value in options.items() if value is not None})
            model.prepare(load_task(name, data))
    clear_shared_encoders()  # the workers read the cache; this process lets its copy go
    return times.as_dict()


def _cost(job: StepJob) -> float:
    """A rough cost of a job, to start the costliest first: the flows take longest, an ensemble five times."""
    calibrator = job.model.rsplit("-", 1)[-1]
    return {"ens": 10.0, "flow": 2.0, "es": 4.0, "glow": 3.0, "affine": 2.5, "lu": 2.5, "white": 2.0}.get(calibrator, 1.0)


def _save(report: StudyReport, started: float, cpu_started: float) -> None:
    report.wall_seconds = time.perf_counter() - started
    report.cpu_seconds = time.process_time() - cpu_started + report.worker_cpu_seconds
    atomic_write_json(report.output_folder / STUDY_FILE, report.as_dict())


def build_board(output_folder: str | os.PathLike[str], backbone: str, board: str | os.PathLike[str], *,
                tasks: Sequence[str] | None = None, calibrators: Sequence[str] | None = None,
                study: dict[str, float] | None = None) -> tuple[Any, tuple[Path, ...]]:
    """The backbone's task-types board (:func:`flow_plugin.leaderboard.pipeline.update_task_types_board`) from a
    study's output folder, written to ``board`` (``leaderboards/task-types-<backbone>.json``) with its Markdown and
    HTML; ``calibrators``: the rows (default: every calibrator with results); ``study``: the study's ``wall_seconds`` and ``cpu_seconds`` (default: its ``task-types-study.json``'s
    total over every run in that folder)."""
    if study is None:
        recorded = _read_study_file(Path(output_folder) / STUDY_FILE)
        if recorded is not None:
            study = recorded.get("total") or {key: recorded[key] for key in ("wall_seconds", "cpu_seconds") if key in recorded}
    return update_task_types_board(output_folder, backbone, board, tasks=tasks, calibrators=calibrators, study=study)


def _run_entry(runs: Sequence[str], wall_seconds: float, cpu_seconds: float, statuses: Sequence[str | None],
               interrupted: bool | None, stages: dict[str, Any] | None = None) -> dict[str, Any]:
    """One run of a study as the study file keeps it in ``earlier_runs``: its runs, wall and CPU seconds (and per
    stage), how many results it computed (of its steps' ``statuses``) and whether it was interrupted."""
    entry = {"runs": list(runs), "wall_seconds": round(float(wall_seconds), 1),
             "cpu_seconds": round(float(cpu_seconds), 1), "computed": sum(status == "computed" for status in statuses),
             "interrupted": bool(interrupted)}
    if stages:
        entry["stages"] = stages
    return entry


def _read_study_file(path: Path) -> dict[str, Any] | None:
    """A study file's content (None where there is none); one that cannot be read as one is a one-line error
    naming it."""
    if not path.is_file():
        return None
    try:
        recorded = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(recorded, dict) or recorded.get("format") != "flow-plugin-task-types-study":
            raise ValueError("not a task-types study file")
        return recorded
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise DataFolderError(f"unreadable study file {path} ({error}); delete it and rerun") from None


def _earlier_runs(path: Path, backbone: str) -> list[dict[str, Any]]:
    """The runs recorded in a study file of ``backbone`` already in the output folder (its earlier runs, then it);
    none where there is no such file. A damaged file, or one of another backbone, is an error naming it."""
    recorded = _read_study_file(path)
    if recorded is None:
        return []
    if recorded.get("backbone") != backbone:
        raise DataFolderError(f"{path}: a study of {recorded.get('backbone')}, not {backbone}; give the study an output "
                              "folder of its own")
    try:
        last = _run_entry(recorded["runs"], recorded["wall_seconds"], recorded["cpu_seconds"],
                          [step.get("status") for step in recorded["steps"]], recorded.get("interrupted"),
                          recorded.get("stages"))
        return [*recorded.get("earlier_runs", []), last]
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise DataFolderError(f"unreadable study file {path} ({type(error).__name__}: {error}); delete it and "
                              "rerun") from None


def _machine_note() -> dict[str, Any]:
    """What a runtime depends on here: CPUs, the load average (other processes' share), torch's threads."""
    note: dict[str, Any] = {"cpus": os.cpu_count()}
    if hasattr(os, "getloadavg"):
        note["load_average_1_5_15"] = [round(value, 2) for value in os.getloadavg()]
    note["OMP_NUM_THREADS"] = os.environ.get("OMP_NUM_THREADS")
    return note


__all__ = ["DEFAULT_EVALUATOR_SEEDS", "STUDY_MAX_FIT_SENTENCES", "StudyReport", "StudyStep", "build_board",
           "default_workers", "run_task_types", "study_tasks"]
