"""``flow-plugin sweep SWEEP.toml``: backbones × calibrators × tasks × fit corpora × seeds on
Ray, into one MTEB output folder, then one leaderboard.

Order of work: read and check the sweep file, resolve its tasks, plan every job (what is
already done), take the output folder's sweep lock, start or join Ray, run the jobs that
have work left, merge the results into the leaderboard. Everything that can be wrong with
the input is reported before Ray starts.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from flow_plugin.errors import SweepError
from flow_plugin.sweep.publish import sweep_lock

DEFAULT_LEADERBOARD_DIR = Path("leaderboards")


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """The options of ``flow-plugin sweep``."""
    parser.add_argument("sweep_file", type=Path, metavar="SWEEP.toml", help="the sweep file (see docs/sweeps.md)")
    parser.add_argument("--address", default=None,
                        help="Ray cluster: ray://HEAD:10001, HEAD:6379 or auto (default: $RAY_ADDRESS, else a new "
                             "local Ray instance)")
    parser.add_argument("--num-cpus", type=int, default=None,
                        help="CPUs of the local Ray instance (default: this machine's cores)")
    parser.add_argument("--output-folder", type=Path, default=None,
                        help="MTEB output folder, shared by all nodes (default: the file's 'output', else ./results)")
    parser.add_argument("--data", type=Path, default=None,
                        help="SentEval data folder for offline tasks (default: the file's 'data', else "
                             "$FLOW_PLUGIN_SENTEVAL_DATA)")
    parser.add_argument("--cache-dir", type=Path, default=None,
                        help="embedding cache (default: $FLOW_PLUGIN_CACHE_DIR, else <output-folder>/embedding-cache)")
    parser.add_argument("--leaderboard", type=Path, default=None, metavar="NAME.json",
                        help="leaderboard to update (default: the file's 'leaderboard', else leaderboards/<name>.json)")
    parser.add_argument("--no-leaderboard", action="store_true", help="only compute results")
    parser.add_argument("--replace", action="store_true",
                        help="let new results replace contradicting leaderboard scores (listed) instead of failing")
    parser.add_argument("--merge-only", action="store_true",
                        help="run no job: merge the results already in the output folder into the leaderboard")
    parser.add_argument("--dry-run", action="store_true", help="print the jobs and what each has left to do, run nothing")
    parser.add_argument("--no-progress-bar", action="store_true", help="only the per-job lines, no overall bar")


def _count(number: int | float, noun: str) -> str:
    """``3 jobs``, ``1 job``.

    >>> _count(1, "backbone"), _count(2, "task")
    ('1 backbone', '2 tasks')
    """
    return f"{number:g} {noun}" + ("" if number == 1 else "s")


def _settings(args: argparse.Namespace, sweep: Any) -> Any:
    from flow_plugin.sweep.jobs import Settings, default_output
    from flow_plugin.encoding.cache import CACHE_DIR_ENV

    output = default_output(sweep, args.output_folder)
    data = args.data.expanduser().resolve() if args.data is not None else sweep.data
    if args.cache_dir is not None:
        cache = args.cache_dir.expanduser().resolve()
    elif os.environ.get(CACHE_DIR_ENV):
        cache = Path(os.environ[CACHE_DIR_ENV]).expanduser().resolve()
    else:
        cache = output / "embedding-cache"
    device = None if sweep.resources.device == "auto" else sweep.resources.device
    return Settings(output, data, cache, device, sweep.resources.precision, sweep.resources.batch_size)


def _leaderboard_path(args: argparse.Namespace, sweep: Any) -> Path | None:
    if args.no_leaderboard:
        return None
    if args.leaderboard is not None:
        return args.leaderboard
    return sweep.leaderboard or DEFAULT_LEADERBOARD_DIR / f"{sweep.name}.json"


def _merge(args: argparse.Namespace, sweep: Any, jobs: list[Any], task_names: list[str], output: Path) -> None:
    board = _leaderboard_path(args, sweep)
    if board is None:
        return
    if not (output / "results").is_dir():
        print(f"sweep: no results in {output} yet; leaderboard {board} not written")
        return
    from flow_plugin.cli.leaderboard import print_update
    from flow_plugin.leaderboard import update_leaderboard

    models = sorted({run.model for job in jobs for run in job.runs})
    print_update(update_leaderboard([output], board, replace=args.replace, models=models, tasks=task_names))


def run(args: argparse.Namespace) -> int:
    """Run ``flow-plugin sweep`` with parsed arguments (Ctrl-C: exit status 130, no traceback)."""
    try:
        return _sweep(args)
    except KeyboardInterrupt:
        print("sweep: interrupted; finished results are kept: rerun the same command to resume", flush=True)
        return 130


def _sweep(args: argparse.Namespace) -> int:
    from flow_plugin.sweep.jobs import expand_jobs
    from flow_plugin.sweep.plan import plan_job, resolve_task_refs
    from flow_plugin.sweep.spec import load_sweep

    started = time.perf_counter()
    sweep = load_sweep(args.sweep_file)
    settings = _settings(args, sweep)
    if not (args.dry_run or args.merge_only):
        _check_cluster_arguments(args, sweep)
    tasks = resolve_task_refs(sweep.tasks, settings.data, sweep.source)
    task_names = [task.metadata.name for task in tasks]
    jobs = expand_jobs(sweep)
    if args.merge_only:
        _merge(args, sweep, jobs, task_names, settings.output)
        return 0
    plans = {job.id: plan_job(job, settings.output, tasks) for job in jobs}
    total = sum(len(items) for items in plans.values())
    done = sum(item.done for items in plans.values() for item in items)
    runs = sum(len(job.runs) for job in jobs)
    print(f"sweep {sweep.name}: {_count(len(jobs), 'backbone')}, {_count(runs, 'run')} × {_count(len(task_names), 'task')}"
          f" = {_count(total, 'result')} in {settings.output / 'results'} ({done} already done); "
          f"embedding cache {settings.cache_dir}", flush=True)
    if args.dry_run:
        _print_plan(jobs, plans, len(task_names))
        return 0
    todo = [job for job in jobs if not all(item.done for item in plans[job.id])]
    report = None
    if todo:
        with sweep_lock(settings.work):
            shutil.rmtree(settings.staging, ignore_errors=True)  # what killed earlier sweeps left
            shutil.rmtree(settings.progress, ignore_errors=True)  # the previous run's progress log
            report = _run(args, sweep, settings, todo, total, done)
    if report is None:
        print(f"sweep {sweep.name}: all {total} results already done; nothing to run")
    elif report.interrupted:
        print(f"sweep {sweep.name}: interrupted: {done + report.computed} of {total} results are in "
              f"{settings.output / 'results'} ({report.computed} computed in this run); rerun the same command to resume",
              flush=True)
        return 130
    _merge(args, sweep, jobs, task_names, settings.output)
    return _summary(sweep, report, total, done, time.perf_counter() - started)


def _check_cluster_arguments(args: argparse.Namespace, sweep: Any) -> None:
    """What can be known about the cluster before planning: an unreachable address (in
    seconds, not Ray Client's 30 s), flags that do not go together, a local instance too small."""
    address = args.address or os.environ.get("RAY_ADDRESS") or None
    if address is None:
        cpus = args.num_cpus or os.cpu_count() or 1
        if sweep.resources.cpus_per_job > cpus:
            raise SweepError(f"{sweep.source}: key 'resources.cpus_per_job' is {sweep.resources.cpus_per_job:g} but the "
                             f"local Ray instance has {cpus} CPUs (--num-cpus)")
        return
    if args.num_cpus is not None:
        raise SweepError("--num-cpus sizes the local Ray instance; it cannot be used with --address or $RAY_ADDRESS")
    from flow_plugin.sweep.cluster import check_reachable

    check_reachable(address)


def _print_plan(jobs: list[Any], plans: dict[str, list[Any]], n_tasks: int) -> None:
    for job in jobs:
        left = [item for item in plans[job.id] if not item.done]
        print(f"  job {job.id}: {_count(len(job.runs), 'run')} × {_count(n_tasks, 'task')}, "
              f"{_count(len(left), 'result')} to compute")
        for item in left:
            print(f"    {item.key}")


def _run(args: argparse.Namespace, sweep: Any, settings: Any, todo: list[Any], total: int, done: int) -> Any:
    from flow_plugin.sweep import cluster
    from flow_plugin.sweep.runner import run_jobs
    from flow_plugin.encoding.cache import CACHE_DIR_ENV
    from flow_plugin.integrations.mteb.tasks import DATA_ENV

    extra = {CACHE_DIR_ENV: str(settings.cache_dir), "TOKENIZERS_PARALLELISM": "false"}
    if settings.data is not None:
        extra[DATA_ENV] = str(settings.data)
    ray_cluster = cluster.connect(args.address, args.num_cpus, cluster.worker_environment(extra),
                                  log_to_driver=args.verbose > 0)
    try:
        resources = sweep.resources
        cuda = resources.device == "cuda" or (resources.device == "auto" and ray_cluster.gpus > 0)
        _check_resources(ray_cluster, resources, cuda)
        if resources.device == "auto":
            settings = dataclasses.replace(settings, device="cuda" if cuda else "cpu")
        print(f"sweep {sweep.name}: {_count(len(todo), 'job')} on the {ray_cluster.describe()}, each asking for "
              f"{_count(resources.cpus_per_job, 'CPU')}" + (f" and {resources.gpus_per_job:g} GPU" if cuda else "")
              + f", up to {resources.max_retries} retries after a worker dies", flush=True)
        return run_jobs(todo, settings, resources, cuda=cuda, total=total, done=done,
                        show_bar=not args.no_progress_bar)
    finally:
        cluster.disconnect()
        if ray_cluster.local:  # its workers are gone with it: nothing can still write to staging
            shutil.rmtree(settings.staging, ignore_errors=True)


def _check_resources(ray_cluster: Any, resources: Any, cuda: bool) -> None:
    """A job the cluster can never place would wait forever: an error on the local instance,
    a warning on a cluster (its autoscaler may add nodes)."""
    problems = []
    if ray_cluster.cpus < resources.cpus_per_job:
        problems.append(f"each job asks for {resources.cpus_per_job:g} CPUs but the cluster has {ray_cluster.cpus:g}")
    if cuda and ray_cluster.gpus < resources.gpus_per_job:
        problems.append(f"device 'cuda' needs {resources.gpus_per_job:g} GPU per job but the cluster has "
                        f"{ray_cluster.gpus:g}")
    if problems and ray_cluster.local:
        raise SweepError("; ".join(problems) + " (see [resources] in the sweep file)")
    for problem in problems:
        print(f"sweep: warning: {problem}; jobs wait until the autoscaler adds such nodes", file=sys.stderr)


def _summary(sweep: Any, report: Any, total: int, done: int, seconds: float) -> int:
    computed = report.computed if report is not None else 0
    failed_items = report.failed_items if report is not None else []
    failed_jobs = report.failed_jobs if report is not None else {}
    retried = sum(report.retried.values()) if report is not None else 0
    print(f"sweep {sweep.name}: {computed} computed, {done} already done, {len(failed_items)} failed"
          f"{f', {len(failed_jobs)} jobs failed' if failed_jobs else ''} of {total} results in {seconds:.1f} s"
          + (f"; {_count(retried, 'worker death')} retried by Ray" if retried else ""))
    for item, message in failed_items:
        print(f"  FAILED {item}: {message}")
    for job, message in failed_jobs.items():
        print(f"  FAILED job {job}: {message}")
    if failed_items or failed_jobs:
        print("rerun the same command to retry what failed (finished results are not recomputed)")
        return 1
    return 0
