"""One step of a task-types study (a run of one calibrator on one task, at every evaluator seed), and the pool
of worker processes that runs the steps side by side.

A step is a :class:`StepJob`, plain data a worker process receives; :func:`run_step` evaluates it through
:func:`flow_plugin.integrations.mteb.evaluate.evaluate_models` (the loop our commands share, so a step's score is
the score of ``mteb run``) and returns a :class:`StudyStep` per evaluator seed. :func:`run_steps` runs jobs in
this process (one worker) or in a pool of spawned processes, each with one torch and one BLAS thread so that the
workers together use every core; it yields each step as it finishes. A step's numbers do not depend on the
worker that ran it: the embeddings come from the study's embedding cache, the fit from its seed, the evaluator
from its seed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flow_plugin.integrations.mteb.evaluate import MTEB_SEED

logger = logging.getLogger(__name__)



@dataclass
class StudyStep:
    """One (run, task, evaluator seed): its main score (0-1), seconds, and the fit that served it."""

    model: str
    label: str
    seed: int | None
    task: str
    task_type: str
    main_score: str
    score: float | None
    status: str  # "computed" | "reused" | "failed"
    seconds: float
    #: CPU seconds the worker spent on the step (all its threads): on a shared machine, wall time also counts the
    #: other processes' turns
    cpu_seconds: float = 0.0
    error: str | None = None
    fit: dict[str, Any] | None = None
    #: the MTEB result file (its per-item data: ``flow-plugin-items/<Task>.items.npz`` beside it)
    result_path: str | None = None
    #: the evaluator's seed (MTEB's task seed; 42 is MTEB's own)
    evaluator_seed: int = MTEB_SEED
    #: wall and CPU seconds per stage: "encode", "fit", "evaluate" (the step's first seed carries them all)
    times: dict[str, dict[str, float]] = field(default_factory=dict)


@dataclass(frozen=True)
class StepJob:
    """What a worker needs to run one step: plain, picklable data."""

    model: str
    label: str
    seed: int | None
    kwargs: dict[str, Any]
    task: str
    data: str | None
    output: str
    options: dict[str, Any]
    overwrite: bool
    evaluator_seeds: tuple[int, ...] = ()


_TASKS: dict[tuple[str, str | None], Any] = {}  # (task, data root) -> the task object this process loaded


def _task(name: str, data: str | None) -> Any:
    """The study task ``name`` (loaded once per process)."""
    from flow_plugin.studies.task_types import study_tasks

    key = (name, data)
    if key not in _TASKS:
        (_TASKS[key],) = study_tasks(data, [name])
    return _TASKS[key]


def run_step(job: StepJob) -> list[StudyStep]:
    """Evaluate one job: its main result, then each further evaluator seed (same model, same fit)."""
    from flow_plugin.encoding.options import EncoderOptions
    from flow_plugin.evaluation.blas_threads import evaluator_threads
    from flow_plugin.integrations.mteb.evaluate import evaluate_models

    begin, cpu_begin = time.perf_counter(), time.process_time()
    task = _task(job.task, job.data)
    metadata = task.metadata
    try:
        with evaluator_threads():  # MTEB's logistic regressions and k-means: the faster BLAS thread count here
            (evaluation,) = evaluate_models([job.model], None, [task], Path(job.output),
                                            options=EncoderOptions(**job.options), model_kwargs=job.kwargs,
                                            overwrite=job.overwrite, command="flow-plugin task-types",
                                            evaluator_seeds=job.evaluator_seeds)
    except Exception as error:  # noqa: BLE001 -- report it, go on with the other steps
        logger.debug("task types: %s on %s failed", job.label, metadata.name, exc_info=True)
        return [StudyStep(job.model, job.label, job.seed, metadata.name, str(metadata.type), metadata.main_score, None,
                          "failed", time.perf_counter() - begin, time.process_time() - cpu_begin,
                          error=f"{type(error).__name__}: {error}")]
    seconds, cpu = time.perf_counter() - begin, time.process_time() - cpu_begin
    runs = [(MTEB_SEED, evaluation.runs[0]), *((seed, runs[0]) for seed, runs in evaluation.seed_runs.items())]
    return [StudyStep(job.model, job.label, job.seed, metadata.name, str(metadata.type), metadata.main_score,
                      result.score, result.status, seconds if index == 0 else 0.0, cpu if index == 0 else 0.0,
                      fit=_fit_summary(result.path), result_path=str(result.path) if result.path else None,
                      evaluator_seed=seed, times=evaluation.times if index == 0 else {})
            for index, (seed, result) in enumerate(runs)]


def _fit_summary(result_path: Path | None) -> dict[str, Any] | None:
    """What the study keeps of the fit record next to a result (None for raw)."""
    from flow_plugin.integrations.mteb.fit_records import fits_path, read_fits

    if result_path is None or not fits_path(result_path).is_file():
        return None
    records = read_fits(fits_path(result_path)).get("fits", [])
    if not records:
        return None
    record = records[-1]
    fit = {key: record.get(key) for key in ("calibrator", "n_sentences", "n_unique_sentences", "encode_seconds",
                                            "fit_seconds", "adapted", "effective_params")}
    fit["sampled"] = (record.get("sampling") or {}).get("sampled")
    return fit


def _init_worker(threads: int) -> None:
    """A worker of the pool: ``threads`` torch and BLAS threads (the workers together fill the cores)."""
    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(threads)
    _init_worker.limits = threadpool_limits(limits=threads)  # type: ignore[attr-defined]  # held for the process


def run_steps(jobs: Sequence[StepJob], workers: int, on_step: Callable[[list[StudyStep]], None]) -> None:
    """Run ``jobs`` (in this process with one worker, else in a pool of ``workers`` spawned processes), calling
    ``on_step`` with each job's steps as it finishes. Ctrl-C cancels the jobs not started and re-raises."""
    if workers <= 1:
        for job in jobs:
            on_step(run_step(job))
        return
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_init_worker, initargs=(1,))
    try:
        pending = {pool.submit(run_step, job) for job in jobs}
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                on_step(future.result())
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()


def job_order(jobs: list[StepJob], cost: Callable[[StepJob], float]) -> Iterator[StepJob]:
    """The jobs, costliest first (so the last ones to finish are short and the workers end together)."""
    yield from sorted(jobs, key=lambda job: -cost(job))


__all__ = ["MTEB_SEED", "StepJob", "StudyStep", "job_order", "run_step", "run_steps"]
