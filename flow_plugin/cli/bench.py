"""``flow-plugin bench``: every calibrator of one backbone over the offline STS tasks,
then the backbone's leaderboard.

    flow-plugin bench -b minilm-l6 --data ../shared/data/senteval

runs ``flow_plugin/<backbone>[-sn|-natsv|-sn-natsv|-whiten|-flow]`` on SentEvalSTS12..16,
SentEvalSTSBenchmark and SentEvalSICKR (task by task, all six variants of a task in turn),
through :func:`flow_plugin.integrations.mteb.evaluate.evaluate_models`, so the results are MTEB's
standard result JSON under ``<output-folder>/results/``. Then it merges them into
``leaderboards/<backbone>.json`` (+ ``.md`` and ``.png``, see :mod:`flow_plugin.leaderboard`).

Nothing is computed twice:

* embeddings: they are kept in ``--cache-dir``, else ``$FLOW_PLUGIN_CACHE_DIR``, else
  ``<output-folder>/embedding-cache`` (passed down as ``EncoderOptions.cache_dir``); each
  sentence goes through the backbone once, ever, for all six registry models and every rerun;
* results: MTEB's result cache (``overwrite_strategy="only-missing"``) skips every task
  whose result file exists with its run record, so a bench that was interrupted (Ctrl-C,
  killed, a failure) resumes where it stopped. A result file left truncated by a kill or a
  full disk (MTEB does not write it atomically) is renamed ``<Task>.json.corrupt-<time>``, and
  one without its run record ``<Task>.json.unrecorded-<time>``; both are recomputed.

An output folder that cannot be written (a full disk ...) stops the bench, with an error naming
the folder and the cause.

Every computed result gets a line in ``<output-folder>/flow-plugin-runs.jsonl`` saying
which hardware produced it (CPU, cores, torch, device, precision); the leaderboard shows it.
Runs are deterministic on one machine: the flow calibrator is seeded (seed 1234) and the
other calibrators are closed-form; ``--overwrite`` recomputes everything, and the
leaderboard merge then fails if a score did not reproduce.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flow_plugin.catalog.tasks import offline_tasks_help
from flow_plugin.cli._options import add_encoder_arguments, encoder_options
from flow_plugin.encoding.options import EncoderOptions
from flow_plugin.data.fit_corpus import DEFAULT_DUPLICATES, DUPLICATE_POLICIES, TARGET
from flow_plugin.studies.runs import Run, expand_runs

from flow_plugin._io import make_output_folder
from flow_plugin.errors import OutputError, RegistryError
from flow_plugin.integrations.mteb.results import quarantine_truncated_results

logger = logging.getLogger(__name__)

DEFAULT_LEADERBOARD_DIR = Path("leaderboards")
CACHE_SUBFOLDER = "embedding-cache"


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
    #: sentences the backbone encoded in this run / served from the embedding cache
    n_encoded: int = 0
    n_cache_hits: int = 0
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


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# ------------------------------------------------------------------------- helpers
def default_cache_dir(output_folder: Path, cache_dir: str | os.PathLike[str] | None) -> Path:
    """``cache_dir``, else ``$FLOW_PLUGIN_CACHE_DIR``, else ``<output_folder>/embedding-cache``."""
    from flow_plugin.encoding.cache import CACHE_DIR_ENV

    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    if os.environ.get(CACHE_DIR_ENV):
        return Path(os.environ[CACHE_DIR_ENV]).expanduser()
    return output_folder / CACHE_SUBFOLDER


# ------------------------------------------------------------------------- the bench
def run_bench(
    backbone: str,
    data: str | os.PathLike[str],
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
    progress: Callable[[str], None] = _stderr,
) -> BenchReport:
    """Run the calibrators of ``backbone`` (default: the six methods; ``"all"``: the flow
    variants too) over ``tasks`` (default: the seven offline STS tasks), the seeded ones with
    ``seeds`` seeds, and, when ``leaderboard`` is a path, merge the results into it.

    A task that fails is reported and the others go on (``fail_fast`` stops at the first);
    the leaderboard then gets what finished. Interrupting (Ctrl-C) loses only the task
    being computed.
    """
    from flow_plugin.catalog.tasks import OFFLINE_TASKS
    from flow_plugin.catalog.registry import MODEL_NAME_SUFFIXES, get_backbone
    from flow_plugin.data.senteval import resolve_senteval_root

    from flow_plugin.calibration import CALIBRATOR_METHODS

    started = time.perf_counter()
    spec = get_backbone(backbone)
    methods = list(calibrators) if calibrators else list(CALIBRATOR_METHODS)
    if methods == ["all"]:
        methods = list(MODEL_NAME_SUFFIXES)
    unknown = [method for method in methods if method not in MODEL_NAME_SUFFIXES]
    if unknown:
        raise RegistryError(f"unknown calibrator(s) {', '.join(unknown)}; choose from {', '.join(MODEL_NAME_SUFFIXES)}")
    if isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 1:
        raise RegistryError(f"seeds must be a positive int, got {seeds!r}")
    from flow_plugin.data.fit_corpus import FitCorpus

    parsed = FitCorpus.parse(fit_corpus)  # a clear error for a missing file or an old name, now
    if parsed.kind == "file":
        fit_corpus = str(parsed.path.resolve())  # a clear error for a missing file, now
    task_names = list(tasks) if tasks else list(OFFLINE_TASKS)
    unknown = [task for task in task_names if task not in OFFLINE_TASKS]
    if unknown:
        raise RegistryError(f"unknown task(s) {', '.join(unknown)}; choose from {', '.join(OFFLINE_TASKS)}")
    models = [spec.model_name(method) for method in dict.fromkeys(methods)]
    task_names = list(dict.fromkeys(task_names))
    data_root = resolve_senteval_root(data)
    output = make_output_folder(output_folder)
    options = options or EncoderOptions()
    cache_folder = default_cache_dir(output, options.cache_dir)
    report = BenchReport(spec.name, models, task_names, output, cache_folder)
    report.runs = expand_runs(spec, list(dict.fromkeys(methods)), seeds=seeds, fit_corpora=[fit_corpus],
                             fit_duplicates=fit_duplicates)

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # (Hugging Face tokenizers' own setting)
    _run_tasks(report, data_root, options=options.replace(cache_dir=cache_folder), overwrite=overwrite,
               fail_fast=fail_fast, progress=progress)

    if leaderboard is not None and not report.interrupted:
        have_results = any(outcome.status != "failed" for outcome in report.outcomes)
        if have_results:
            from flow_plugin.leaderboard import update_leaderboard

            report.leaderboard = update_leaderboard([output], leaderboard, replace=replace, models=models,
                                                    tasks=task_names, seeds=seeds if seeds > 1 else None)
        else:
            progress(f"bench: no results to put in the leaderboard {leaderboard}")
    report.wall_seconds = time.perf_counter() - started
    return report


def _run_tasks(report: BenchReport, data_root: Path, *, options: EncoderOptions, overwrite: bool, fail_fast: bool,
               progress: Callable[[str], None]) -> None:
    from flow_plugin.catalog.builders import build_encoder, resolve

    output = report.output_folder
    # the same shared encoder (same key, device and cache folder) the six models will use
    encoder = build_encoder(resolve(report.models[0]), options)
    encoded_before, hits_before = encoder.n_encoded, encoder.n_cache_hits

    report.quarantined = quarantine_truncated_results(output, report.models, report.tasks)
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
    report.n_encoded = encoder.n_encoded - encoded_before
    report.n_cache_hits = encoder.n_cache_hits - hits_before


def _run_each(report: BenchReport, data_root: Path, *, options: EncoderOptions, overwrite: bool, fail_fast: bool,
              progress: Callable[[str], None]) -> None:
    from flow_plugin.integrations.mteb.evaluate import evaluate_models

    output = report.output_folder
    total = len(report.runs) * len(report.tasks)
    step = 0
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
                if fail_fast:
                    return
                continue
            seconds = time.perf_counter() - start
            status = "computed" if run.status == "computed" else "skipped"
            report.outcomes.append(TaskOutcome(model, task, status, seconds, score=score, path=run.path,
                                               seed=bench_run.seed))
            what = "computed" if status == "computed" else f"already done ({run.date or 'earlier'}), skipped"
            progress(f"{prefix}: {what} in {seconds:.1f} s, cosine_spearman(all) {score:.2f}")


# ------------------------------------------------------------------------- command line
def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-b", "--backbone", required=True, help="registry backbone, e.g. minilm-l6 (registry/*.toml)")
    parser.add_argument("--data", required=True, type=Path, help="SentEval data folder (the one containing downstream/)")
    parser.add_argument("--output-folder", type=Path, default=Path("results"),
                        help="MTEB output folder; results go to <folder>/results (default: results)")
    parser.add_argument("--leaderboard", type=Path, default=None, metavar="NAME.json",
                        help="leaderboard to update (default: leaderboards/<backbone>.json)")
    parser.add_argument("--no-leaderboard", action="store_true", help="only compute results")
    parser.add_argument("--tasks", nargs="+", metavar="TASK",
                        help=offline_tasks_help())
    parser.add_argument("--calibrators", nargs="+", metavar="NAME",
                        help="raw sn natsv sn-natsv whiten flow (the default: these six), or flow variants "
                        "(flow-lu flow-affine flow-glow flow-white flow-es flow-ens), or 'all'")
    parser.add_argument("--seeds", type=int, default=1, metavar="N",
                        help="run each seeded calibrator (the flow and its variants) with N seeds: its default "
                        "(1234) and the next N-1; the leaderboard shows their mean ± standard deviation")
    parser.add_argument("--fit-corpus", default=TARGET,
                        help="what the calibrators are fitted on: 'target' (each task's own sentences, the default), "
                        "'per-call' (each encode() call on its own; warns), or a text file with one sentence per line (e.g. NLI sentences: the paper's "
                        "'flow (NLI)')")
    parser.add_argument("--fit-duplicates", default=DEFAULT_DUPLICATES, choices=DUPLICATE_POLICIES,
                        help="fit on every occurrence of a sentence (keep, the official code's way) or on each "
                        "distinct sentence once (unique)")
    add_encoder_arguments(parser)  # --cache-dir defaults to $FLOW_PLUGIN_CACHE_DIR, else <output-folder>/embedding-cache
    parser.add_argument("--overwrite", action="store_true",
                        help="recompute finished results (the leaderboard merge then checks they reproduce)")
    parser.add_argument("--replace", action="store_true",
                        help="let new results replace contradicting leaderboard scores (listed) instead of failing")
    parser.add_argument("--fail-fast", action="store_true", help="stop at the first failing task")


def run(args: argparse.Namespace) -> int:
    leaderboard = None if args.no_leaderboard else (args.leaderboard or DEFAULT_LEADERBOARD_DIR / f"{args.backbone}.json")
    report = run_bench(
        args.backbone, args.data, output_folder=args.output_folder, leaderboard=leaderboard, tasks=args.tasks,
        calibrators=args.calibrators, options=encoder_options(args), seeds=args.seeds, fit_corpus=args.fit_corpus,
        fit_duplicates=args.fit_duplicates, overwrite=args.overwrite, replace=args.replace, fail_fast=args.fail_fast,
    )
    if report.interrupted:
        kept = len(report.computed) + len(report.skipped)
        print(f"bench {report.backbone}: interrupted; {kept} of {len(report.runs) * len(report.tasks)} results are "
              f"kept in {report.output_folder / 'results'} ({len(report.computed)} computed this run), the one being "
              "computed was dropped, the leaderboard was not updated; rerun the same command to resume",
              file=sys.stderr)
        return 130
    print(
        f"bench {report.backbone}: {len(report.computed)} computed, {len(report.skipped)} already done, "
        f"{len(report.failed)} failed in {report.wall_seconds:.1f} s; backbone encoded {report.n_encoded} "
        f"sentences, {report.n_cache_hits} served from the embedding cache ({report.cache_dir})"
    )
    for outcome in report.failed:
        print(f"  FAILED {outcome.model} × {outcome.task}: {outcome.error}")
    if report.leaderboard is not None:
        from flow_plugin.cli.leaderboard import print_update

        print_update(report.leaderboard)
    if report.failed:
        print("rerun the same command to retry the failed tasks (finished ones are not recomputed)")
        return 1
    return 0


__all__ = ["BenchReport", "TaskOutcome", "configure_parser", "run", "run_bench"]
