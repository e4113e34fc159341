"""One step of a task-types study (a run of one calibrator on one task, at every evaluator seed), and the pool
of worker processes that runs the steps side by side.

A step is a :class:`StepJob`, plain data a worker process receives; :func:`run_step` evaluates it through
:func:`flow_plugin.integrations.mteb.evaluate.evaluate_models` (the loop our commands share, so a step's score is
the score of ``mteb run``) and returns a :class:`StudyStep` per evaluator seed. :func:`run_steps` runs jobs in
this process (one worker) or in a pool of spawned processes (:func:`process_pool`), each with one torch and one
BLAS thread so that the workers together use every core; it yields each step as it finishes. A step's numbers do not depend on the
worker that ran it: the embeddings come from the study's embedding cache, the fit from its seed, the evaluator
from its seed.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flow_plugin.catalog.labelled_tasks import labelled_tasks, unknown_task_hint
from flow_plugin.data.roots import data_root as configured
from flow_plugin.encoding.options import EncoderOptions
from flow_plugin.errors import DataFolderError, RegistryError
from flow_plugin.integrations.mteb.evaluate import evaluate_models
from flow_plugin.results.files import MTEB_SEED
from flow_plugin.results.fits import fits_path, read_fits

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


def load_task(name: str, data: str | None) -> Any:
    """The study task ``name``, its data loaded once per process: MTEB keeps data it did not load itself, so
    the task's every evaluation in this process reads the same tables instead of the files again."""
    key = (name, data)
    if key not in _TASKS:
        (task,) = study_tasks(data, [name])
        if not task.data_loaded:
            task.load_data()
        _TASKS[key] = task
    return _TASKS[key]


def study_tasks(data: str | os.PathLike[str] | None = None, names: Sequence[str] | None = None) -> list[Any]:
    """The study's MTEB task objects (every labelled task, or those of ``names``): a built-in task reads the data root
    ``data`` (default: :func:`flow_plugin.data.roots.data_root`), a user's task its own folder. The data
    root (needed by the built-in tasks) and every file the tasks read are checked here, before anything runs, and a
    user's task is loaded (what cannot be scored is refused)."""
    from flow_plugin.integrations.mteb.labelled_tasks import task_class  # heavy: loads MTEB

    entries = labelled_tasks()
    chosen = list(dict.fromkeys(names)) if names else list(entries)
    unknown = [name for name in chosen if name not in entries]
    if unknown:
        raise RegistryError(f"unknown task(s) {', '.join(unknown)}; the study's tasks: {', '.join(entries)}"
                            f"{unknown_task_hint()}")
    needed = data is not None or any(entries[name].built_in for name in chosen)
    root = _study_data_root(data) if needed else None
    tasks = [task_class(name)(data_dir=root) for name in chosen]
    for task in tasks:
        task.check_files()
        if not task.entry.built_in:  # a user's task that cannot be scored is refused now, before anything is written
            task.load_data()
    return tasks


def _study_data_root(data: str | os.PathLike[str] | None) -> Path:
    """The study's data root: ``data``, else the configured one; a missing one is a one-line error."""
    root = configured(data)
    remedy = "give the shared data folder (holding senteval/, glue/ and mteb/) with --data, or set FLOW_PLUGIN_SHARED_DATA"
    if root is None:
        raise DataFolderError(f"the study's built-in tasks read the shared data folder: {remedy}")
    if not root.is_dir():
        raise DataFolderError(f"data root {root} is not a folder: {remedy}")
    return root


def run_step(job: StepJob) -> list[StudyStep]:
    """Evaluate one job: its main result, then each further evaluator seed (same model, same fit)."""
    begin, cpu_begin = time.perf_counter(), time.process_time()
    task = load_task(job.task, job.data)
    metadata = task.metadata
    try:
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


def _init_worker(threads: int, parent: int) -> None:
    """A worker of the pool: it ends with its parent (:func:`end_with_parent`), and runs ``threads`` torch and BLAS
    threads (the workers together fill the cores)."""
    from flow_plugin.encoding.device import limit_process_threads  # heavy: loads torch

    end_with_parent(parent)
    limit_process_threads(threads)


#: Linux's prctl option that sends a signal to this process when its parent dies (linux/prctl.h)
_PR_SET_PDEATHSIG = 1
#: how often a worker looks for its parent where the kernel cannot tell it (seconds)
PARENT_CHECK_SECONDS = 1.0


def end_with_parent(parent: int) -> None:
    """End this process the moment process ``parent`` dies, however it dies (``kill -9`` included), so that no
    worker finishes a step, or writes into the study's folder, for a study nobody runs any more: on Linux the kernel
    kills it (``PR_SET_PDEATHSIG``); everywhere a daemon thread checks the parent every
    :data:`PARENT_CHECK_SECONDS` and ends the process when it is gone (also where the parent died before this ran)."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_CHECK_SECONDS)
        os._exit(1)

    if os.getppid() != parent:
        os._exit(1)
    threading.Thread(target=watch, name="flow-plugin: end with the parent", daemon=True).start()


def run_steps(jobs: Sequence[StepJob], workers: int, on_step: Callable[[list[StudyStep]], None]) -> None:
    """Run ``jobs`` (in this process with one worker, else in a :func:`process_pool` of ``workers``), calling
    ``on_step`` with each job's steps as it finishes."""
    if workers <= 1:
        for job in jobs:
            on_step(run_step(job))
        return
    with process_pool(workers) as pool:
        pending = {pool.submit(run_step, job) for job in jobs}
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                on_step(future.result())


@contextlib.contextmanager
def process_pool(workers: int, threads: int = 1) -> Iterator[Any]:
    """A pool of ``workers`` spawned processes with ``threads`` torch and BLAS threads each. Ctrl-C, or SIGTERM
    within the block, cancels the jobs not started, stops the workers (no worker outlives the block) and raises
    ``KeyboardInterrupt``; when the block ends, the workers exit and their memory goes back to the system."""
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_init_worker, initargs=(threads, os.getpid()))
    try:
        with _terminate_as_interrupt():
            yield pool
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        for worker in multiprocessing.active_children():  # a running job would otherwise go on alone
            worker.terminate()
        raise
    pool.shutdown()


@contextlib.contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM (``kill``, a job scheduler) interrupts as Ctrl-C does (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def job_order(jobs: list[StepJob], cost: Callable[[StepJob], float]) -> Iterator[StepJob]:
    """The jobs, costliest first (so the last ones to finish are short and the workers end together); among jobs
    of one cost, a task's next job comes after every task's job before it, so the workers seldom start on one task
    at once: a task's first job fills the embedding cache (a model MTEB loads: its calls), and the next read it.

    >>> jobs = [StepJob(f"m-{run}", run, None, {}, task, None, "out", {}, False) for task in "AB" for run in ("x", "y")]
    >>> [(job.task, job.label) for job in job_order(jobs, lambda job: 1.0)]
    [('A', 'x'), ('B', 'x'), ('A', 'y'), ('B', 'y')]
    """
    rank: Counter[tuple[float, str]] = Counter()
    keyed = []
    for index, job in enumerate(jobs):
        weight = cost(job)
        keyed.append(((-weight, rank[weight, job.task], index), job))
        rank[weight, job.task] += 1
    yield from (job for _, job in sorted(keyed, key=lambda pair: pair[0]))


__all__ = ["MTEB_SEED", "StepJob", "StudyStep", "job_order", "process_pool", "run_step", "run_steps", "study_tasks"]
