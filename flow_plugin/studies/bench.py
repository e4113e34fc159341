"""The bench: every calibrator of one backbone over the offline STS tasks, then the
backbone's leaderboard (``flow-plugin bench`` parses its arguments and prints the report).

    report = run_bench("minilm-l6", "../shared/data/senteval", seeds=5, leaderboard="leaderboards/minilm-l6.json")

runs ``flow_plugin/<backbone>[-sn|-natsv|-sn-natsv|-whiten|-flow]`` on SentEvalSTS12..16,
SentEvalSTSBenchmark and SentEvalSICKR (task by task, every run of a task in turn; the runs are
:func:`flow_plugin.studies.runs.expand_runs`'s plan) through
:func:`flow_plugin.integrations.mteb.evaluate.evaluate_models`, so the results are MTEB's standard
result JSON under ``<output-folder>/results/``. Then it merges them into the leaderboard
(``leaderboards/<backbone>.json`` on the command line; + ``.md``, ``.html`` and ``.png``, see
:mod:`flow_plugin.leaderboard`).

Nothing is computed twice:

* embeddings: they are kept in ``options.cache_dir``, else ``$FLOW_PLUGIN_CACHE_DIR``, else
  ``<output-folder>/embedding-cache``; each sentence goes through the backbone once, ever, for
  every registry model of the backbone and every rerun;
* results: MTEB's result cache (``overwrite_strategy="only-missing"``) skips every task
  whose result file exists with its run record, so a bench that was interrupted (Ctrl-C,
  killed, a failure) resumes where it stopped. A result file left truncated by a kill or a
  full disk (MTEB does not write it atomically) is renamed ``<Task>.json.corrupt-<time>``, and
  one without its run record ``<Task>.json.unrecorded-<time>``; both are recomputed.

A failing task is reported and the others go on, except when no other task can succeed: an
output folder that cannot be written (a full disk ...) or a backbone whose weights cannot be
loaded stops the bench at once, with an error naming the cause.

Every computed result gets a line in ``<output-folder>/flow-plugin-runs.jsonl`` saying
which hardware produced it (CPU, cores, torch, device, precision); the leaderboard shows it.
Runs are deterministic on one machine: the flow calibrator is seeded (seed 1234) and the
other calibrators are closed-form; ``overwrite=True`` recomputes everything, and the
leaderboard merge then fails if a score did not reproduce.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flow_plugin.data.fit_corpus import DEFAULT_DUPLICATES, TARGET, FitCorpus
from flow_plugin.encoding.options import EncoderOptions, disk_cache_dir
from flow_plugin.errors import OutputError, RegistryError, WeightsUnavailableError
from flow_plugin.evaluation.blas_threads import blas_threads
from flow_plugin.studies.runs import Run, check_count, expand_runs, loadable_base
from flow_plugin._io import make_output_folder
from flow_plugin._machine import resolve_device
from flow_plugin.results import ResultStore
from flow_plugin.data.tasks import OFFLINE_TASKS
from flow_plugin.catalog.registry import (MODEL_NAME_SUFFIXES, ForeignBase, get_base, is_folder, registry_models,
                                          spelled_model)
from flow_plugin.calibration import CALIBRATOR_METHODS
from flow_plugin.integrations.mteb.evaluate import evaluate_models
from flow_plugin.integrations.mteb.task_resolver import offline_data_root
from flow_plugin.leaderboard import update_leaderboard

logger = logging.getLogger(__name__)


# ------------------------------------------------------------------------- report
@dataclass
class TaskOutcome:
    model: str
    task: str
    status: str  # "computed" | "skipped" (MTEB found the result) | "failed"
    seconds: float
    score: float | None = None  # main score, points
    error: str | None = None
    path: Path | None = None
    seed: int | None = None


@dataclass
class BenchReport:
    backbone: str
    models: list[str]
    tasks: list[str]
    output_folder: Path
    cache_dir: Path
    outcomes: list[TaskOutcome] = field(default_factory=list)
    runs: tuple[Run, ...] = ()
    #: sentences a registry backbone encoded in this run / served from the embedding cache (None: a base MTEB
    #: loads, whose ``encode`` calls the call cache keeps, not counted per sentence)
    n_encoded: int | None = None
    n_cache_hits: int | None = None
    wall_seconds: float = 0.0
    quarantined: list[Path] = field(default_factory=list)
    leaderboard: Any = None  # flow_plugin.leaderboard.LeaderboardUpdate, when updated
    #: stopped by Ctrl-C: the finished results are on disk, the leaderboard was not updated
    interrupted: bool = False

    def with_status(self, status: str) -> list[TaskOutcome]:
        return [outcome for outcome in self.outcomes if outcome.status == status]

    @property
    def computed(self) -> list[TaskOutcome]:
        return self.with_status("computed")

    @property
    def skipped(self) -> list[TaskOutcome]:
        return self.with_status("skipped")

    @property
    def failed(self) -> list[TaskOutcome]:
        return self.with_status("failed")


def _log(message: str) -> None:
    logger.info("%s", message)


# ------------------------------------------------------------------------- helpers
# ------------------------------------------------------------------------- the bench
#: where ``bench`` writes a backbone's leaderboard unless told
DEFAULT_LEADERBOARD_DIR = Path("leaderboards")


def default_leaderboard(backbone: str) -> Path:
    """``leaderboards/<name>.json``: a registry backbone's name, a local folder's own name, an MTEB model name with
    ``/`` as ``__`` (as MTEB names its result folders); never a file outside ``leaderboards/``.

    >>> default_leaderboard("minilm-l6").as_posix(), default_leaderboard("intfloat/e5-small-v2").as_posix()
    ('leaderboards/minilm-l6.json', 'leaderboards/intfloat__e5-small-v2.json')
    """
    base = get_base(backbone)
    stem = base.name
    if isinstance(base, ForeignBase):
        stem = Path(base.name).name if is_folder(base.name) else base.name.replace("/", "__")
    return DEFAULT_LEADERBOARD_DIR / f"{stem}.json"


def run_bench(
    backbone: str,
    data: str | os.PathLike[str] | None = None,
    *,
    output_folder: str | os.PathLike[str] = "results",
    leaderboard: str | os.PathLike[str] | None = None,
    tasks: Sequence[str] | None = None,
    calibrators: Sequence[str] | None = None,
    options: EncoderOptions | None = None,
    seeds: int = 1,
    fit_corpus: str = TARGET,
    fit_duplicates: str = DEFAULT_DUPLICATES,
    overwrite: bool = False,
    replace: bool = False,
    fail_fast: bool = False,
    progress: Callable[[str], None] = _log,
) -> BenchReport:
    """Run the calibrators of ``backbone`` (default: the six methods; ``"all"``: the flow
    variants too) over ``tasks`` (default: the seven offline STS tasks), the seeded ones with
    ``seeds`` seeds, and, when ``leaderboard`` is a path, merge the results into it. ``data`` is the SentEval
    folder (or the data folder holding ``senteval/``; default: the data root, ``$FLOW_PLUGIN_SHARED_DATA``).
    ``progress`` gets one line per step (default: logged at INFO).

    A task that fails is reported and the others go on (``fail_fast`` stops at the first);
    the leaderboard then gets what finished. Interrupting (Ctrl-C) loses only the task
    being computed.
    """
    started = time.perf_counter()
    spec = loadable_base(backbone, options)
    methods = _bench_methods(calibrators)
    seeds = check_count("seeds", seeds, "seeds")

    parsed = FitCorpus.parse(fit_corpus)  # a clear error for a missing file or an old name, now
    if parsed.kind == "file":
        fit_corpus = str(parsed.path.resolve())  # a clear error for a missing file, now
    task_names = _bench_tasks(tasks)
    models = [spec.model_name(method) for method in methods]
    data_root = offline_data_root(data, task_names)
    options = options or EncoderOptions()
    if options.device is not None:
        resolve_device(options.device)  # a device this machine lacks: one line now, before the output folder
    output = make_output_folder(output_folder)
    cache_folder = disk_cache_dir(output, options.cache_dir)
    report = BenchReport(spec.name, models, task_names, output, cache_folder)
    report.runs = expand_runs(spec, methods, seeds=seeds, fit_corpora=[fit_corpus],
                             fit_duplicates=fit_duplicates)

    _run_tasks(report, data_root, options=options.replace(cache_dir=cache_folder), overwrite=overwrite,
               fail_fast=fail_fast, progress=progress)

    if leaderboard is not None and not report.interrupted:
        have_results = any(outcome.status != "failed" for outcome in report.outcomes)
        if have_results:
            report.leaderboard = update_leaderboard([output], leaderboard, replace=replace,
                                                    models=[spec.result_name(method) for method in methods],
                                                    tasks=task_names, seeds=seeds if seeds > 1 else None)
        else:
            progress(f"bench: no results to put in the leaderboard {leaderboard}")
    report.wall_seconds = time.perf_counter() - started
    return report


def _bench_methods(calibrators: Sequence[str] | None) -> list[str]:
    """The calibrator methods a bench runs, each once: the given ones (``["all"]``: every method and flow variant),
    else the six methods; an unknown one is a one-line error."""
    methods = list(calibrators) if calibrators else list(CALIBRATOR_METHODS)
    if methods == ["all"]:
        methods = list(MODEL_NAME_SUFFIXES)
    unknown = [method for method in methods if method not in MODEL_NAME_SUFFIXES]
    if unknown:
        raise RegistryError(f"unknown calibrator(s) {', '.join(unknown)}; choose from {', '.join(MODEL_NAME_SUFFIXES)}")
    return list(dict.fromkeys(methods))


def _bench_tasks(tasks: Sequence[str] | None) -> list[str]:
    """The offline tasks a bench runs, each once (default: all seven); an unknown one is a one-line error."""
    task_names = list(tasks) if tasks else list(OFFLINE_TASKS)
    unknown = [task for task in task_names if task not in OFFLINE_TASKS]
    if unknown:
        raise RegistryError(f"unknown task(s) {', '.join(unknown)}; choose from {', '.join(OFFLINE_TASKS)}")
    return list(dict.fromkeys(task_names))


def _run_tasks(report: BenchReport, data_root: Path, *, options: EncoderOptions, overwrite: bool, fail_fast: bool,
               progress: Callable[[str], None]) -> None:
    # torch and scikit-learn load when a bench runs, not to parse its command line
    from flow_plugin.catalog.builders import build_encoder, resolve

    output = report.output_folder
    registry = report.models[0] in registry_models()
    # the same shared encoder (same key, device and cache folder) a registry backbone's models will use
    encoder = build_encoder(resolve(report.models[0]), options) if registry else None
    encoded_before, hits_before = (encoder.n_encoded, encoder.n_cache_hits) if encoder else (0, 0)

    base_folder = report.models[0] if registry else spelled_model(report.models[0])[0]
    report.quarantined = ResultStore(output).quarantine_truncated([base_folder], report.tasks)
    for path in report.quarantined:
        progress(f"bench: {path.name[: path.name.index('.corrupt-')]} of {path.parent} was cut short (a killed run "
                 f"or a full disk): kept as {path.name}, recomputing")
    total = len(report.runs) * len(report.tasks)
    progress(f"bench: {report.backbone}: {len(report.runs)} runs ({len(report.models)} models) × {len(report.tasks)} "
             f"tasks = {total} results in {output / 'results'}; embedding cache {report.cache_dir}")
    try:
        _run_each(report, data_root, options=options, overwrite=overwrite, fail_fast=fail_fast, progress=progress)
    except KeyboardInterrupt:  # Ctrl-C: what finished is on disk; say so in one line (run() does)
        report.interrupted = True
    if encoder is not None:
        report.n_encoded = encoder.n_encoded - encoded_before
        report.n_cache_hits = encoder.n_cache_hits - hits_before


def _run_each(report: BenchReport, data_root: Path, *, options: EncoderOptions, overwrite: bool, fail_fast: bool,
              progress: Callable[[str], None]) -> None:
    output = report.output_folder
    total = len(report.runs) * len(report.tasks)
    step = 0
    precision_shown = False
    blas_threads()  # measured once per process: before the first timed run, not inside it
    for task in report.tasks:
        for bench_run in report.runs:
            model = bench_run.model
            step += 1
            prefix = f"bench [{step}/{total}] {bench_run.label} × {task}"
            progress(f"{prefix} ...")
            start = time.perf_counter()
            try:
                (evaluation,) = evaluate_models([model], data_root, [task], output, options=options,
                                                model_kwargs=bench_run.kwargs, overwrite=overwrite,
                                                command="flow-plugin bench")
                (run,) = evaluation.runs
                score = round(run.score * 100, 4)
                if not precision_shown and evaluation.precision:  # one backbone: one precision for every run
                    progress(f"bench: {report.backbone}: precision {evaluation.precision}")
                    precision_shown = True
            except Exception as error:  # noqa: BLE001 -- report, go on with the other tasks
                seconds = time.perf_counter() - start
                message = f"{type(error).__name__}: {error}"
                logger.debug("bench: %s on %s failed", model, task, exc_info=True)
                report.outcomes.append(TaskOutcome(model, task, "failed", seconds, error=message, seed=bench_run.seed))
                progress(f"{prefix}: FAILED after {seconds:.1f} s: {message}")
                if isinstance(error, OutputError):  # every other task would fail to write its result too
                    progress(f"bench: stopped: the output folder {output} cannot take results; the tasks left "
                             "were not run")
                    return
                if isinstance(error, WeightsUnavailableError):  # every other run needs the same backbone
                    progress(f"bench: stopped: the backbone of {report.backbone} cannot be loaded; the tasks left "
                             "were not run")
                    return
                if fail_fast:
                    return
                continue
            seconds = time.perf_counter() - start
            status = "computed" if run.status == "computed" else "skipped"
            report.outcomes.append(TaskOutcome(model, task, status, seconds, score=score, path=run.path,
                                               seed=bench_run.seed))
            what = "computed" if status == "computed" else f"already done ({run.date or 'earlier'}), skipped"
            progress(f"{prefix}: {what} in {seconds:.1f} s, cosine_spearman(all) {score:.2f}")


__all__ = ["BenchReport", "TaskOutcome", "run_bench"]
