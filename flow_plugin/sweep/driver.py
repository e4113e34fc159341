"""A whole sweep as one call: :func:`run_sweep` (``flow-plugin sweep SWEEP.toml`` parses its arguments,
calls it and prints its :class:`SweepReport`).

Order of work: read and check the sweep file, resolve its tasks, plan every job (what is already
done), take the output folder's sweep lock, start or join Ray, run the jobs that have work left, merge
the results into the leaderboard. Everything that can be wrong with the input is reported before Ray
starts.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from flow_plugin.data.roots import DATA_ENV
from flow_plugin.encoding.options import CACHE_DIR_ENV, disk_cache_dir
from flow_plugin.errors import SweepError
from flow_plugin.leaderboard.pipeline import LeaderboardUpdate, update_leaderboard
from flow_plugin.sweep import cluster
from flow_plugin.sweep.jobs import Job, Settings, default_output, expand_jobs
from flow_plugin.sweep.plan import Item, plan_job, resolve_task_refs
from flow_plugin.sweep.publish import sweep_lock
from flow_plugin.sweep.runner import RunReport, run_jobs
from flow_plugin.sweep.spec import ResourcesTable, Sweep, load_sweep

#: where a sweep's leaderboard goes when neither the command line nor the file says
DEFAULT_LEADERBOARD_DIR = Path("leaderboards")


def count(number: int | float, noun: str) -> str:
    """``3 jobs``, ``1 job``.

    >>> count(1, "backbone"), count(2, "task")
    ('1 backbone', '2 tasks')
    """
    return f"{number:g} {noun}" + ("" if number == 1 else "s")


@dataclass
class SweepReport:
    """What :func:`run_sweep` planned, ran and merged."""

    sweep: Sweep
    settings: Settings
    jobs: list[Job]
    #: job id -> its (run, task) items, each saying whether its result is already done
    plans: dict[str, list[Item]]
    task_names: list[str]
    #: results the sweep holds, and those already done before this run
    total: int = 0
    done: int = 0
    #: what the jobs did (None: nothing ran: a dry run, a merge only, or every result already done)
    run: RunReport | None = None
    #: the leaderboard update (None: not merged: --no-leaderboard, a dry run, an interrupted run, no results)
    leaderboard: LeaderboardUpdate | None = None
    #: why the leaderboard was not written, when it was meant to be
    leaderboard_skipped: str | None = None
    seconds: float = 0.0

    @property
    def interrupted(self) -> bool:
        return self.run is not None and self.run.interrupted

    @property
    def failed(self) -> bool:
        return self.run is not None and bool(self.run.failed_items or self.run.failed_jobs)


def sweep_settings(sweep: Sweep, *, output_folder: Path | None = None, data: Path | None = None,
                   cache_dir: Path | None = None) -> Settings:
    """Where a sweep writes and reads: the output folder (the command line's, else the file's, else
    ./results), the SentEval data, the embedding cache (the command line's, else $FLOW_PLUGIN_CACHE_DIR, else
    <output>/embedding-cache), and the device and precision of its jobs."""
    output = default_output(sweep, output_folder)
    data = data.expanduser().resolve() if data is not None else sweep.data
    cache = disk_cache_dir(output, cache_dir).resolve()
    device = None if sweep.resources.device == "auto" else sweep.resources.device
    return Settings(output, data, cache, device, sweep.resources.precision, sweep.resources.batch_size)


def run_sweep(
    sweep_file: str | os.PathLike[str],
    *,
    address: str | None = None,
    num_cpus: int | None = None,
    output_folder: Path | None = None,
    data: Path | None = None,
    cache_dir: Path | None = None,
    leaderboard: Path | None = None,
    write_leaderboard: bool = True,
    replace: bool = False,
    merge_only: bool = False,
    dry_run: bool = False,
    show_progress_bar: bool = True,
    log_to_driver: bool = False,
    progress: Callable[[str], None] = print,
    warn: Callable[[str], None] = print,
) -> SweepReport:
    """Run the sweep of ``sweep_file`` on Ray (``address``: a Ray cluster, else $RAY_ADDRESS, else a new
    local instance of ``num_cpus`` CPUs), then merge its results into the leaderboard (``leaderboard``,
    else the file's, else leaderboards/<name>.json; none with ``write_leaderboard=False``). ``dry_run``
    plans and returns; ``merge_only`` runs no job. ``progress`` gets the lines a sweep says as it goes,
    ``warn`` its warnings. A rerun resumes: finished results are not recomputed."""
    started = time.perf_counter()
    sweep = load_sweep(sweep_file)
    settings = sweep_settings(sweep, output_folder=output_folder, data=data, cache_dir=cache_dir)
    if not (dry_run or merge_only):
        check_cluster_arguments(sweep, address, num_cpus)
    tasks = resolve_task_refs(sweep.tasks, settings.data, sweep.source)
    task_names = [task.metadata.name for task in tasks]
    jobs = expand_jobs(sweep)
    board = None if not write_leaderboard else leaderboard or sweep.leaderboard or DEFAULT_LEADERBOARD_DIR / f"{sweep.name}.json"
    report = SweepReport(sweep, settings, jobs, {}, task_names)
    if not merge_only:
        report.plans = {job.id: plan_job(job, settings.output, tasks) for job in jobs}
        report.total = sum(len(items) for items in report.plans.values())
        report.done = sum(item.done for items in report.plans.values() for item in items)
        runs = sum(len(job.runs) for job in jobs)
        progress(f"sweep {sweep.name}: {count(len(jobs), 'backbone')}, {count(runs, 'run')} × "
                 f"{count(len(task_names), 'task')} = {count(report.total, 'result')} in {settings.output / 'results'} "
                 f"({report.done} already done); embedding cache {settings.cache_dir}")
        if dry_run:
            return report
        todo = [job for job in jobs if not all(item.done for item in report.plans[job.id])]
        if todo:
            with sweep_lock(settings.work):
                shutil.rmtree(settings.staging, ignore_errors=True)  # what killed earlier sweeps left
                shutil.rmtree(settings.progress, ignore_errors=True)  # the previous run's progress log
                report.run = _run_jobs(sweep, settings, todo, report.total, report.done, address=address,
                                       num_cpus=num_cpus, show_progress_bar=show_progress_bar,
                                       log_to_driver=log_to_driver, progress=progress, warn=warn)
        if report.interrupted:
            report.seconds = time.perf_counter() - started
            return report
    if board is not None:
        if not (settings.output / "results").is_dir():
            report.leaderboard_skipped = f"no results in {settings.output} yet; leaderboard {board} not written"
        else:
            models = sorted({run.model for job in jobs for run in job.runs})
            report.leaderboard = update_leaderboard([settings.output], board, replace=replace, models=models,
                                                    tasks=task_names)
    report.seconds = time.perf_counter() - started
    return report


def check_cluster_arguments(sweep: Sweep, address: str | None, num_cpus: int | None) -> None:
    """What can be known about the cluster before planning: an unreachable address (in
    seconds, not Ray Client's 30 s), arguments that do not go together, a local instance too small."""
    address = address or os.environ.get("RAY_ADDRESS") or None
    if address is None:
        cpus = num_cpus or os.cpu_count() or 1
        if sweep.resources.cpus_per_job > cpus:
            raise SweepError(f"{sweep.source}: key 'resources.cpus_per_job' is {sweep.resources.cpus_per_job:g} but the "
                             f"local Ray instance has {cpus} CPUs (--num-cpus)")
        return
    if num_cpus is not None:
        raise SweepError("--num-cpus sizes the local Ray instance; it cannot be used with --address or $RAY_ADDRESS")
    cluster.check_reachable(address)


def _run_jobs(sweep: Sweep, settings: Settings, todo: list[Job], total: int, done: int, *, address: str | None,
              num_cpus: int | None, show_progress_bar: bool, log_to_driver: bool,
              progress: Callable[[str], None], warn: Callable[[str], None]) -> RunReport:
    extra = {CACHE_DIR_ENV: str(settings.cache_dir), "TOKENIZERS_PARALLELISM": "false"}
    if settings.data is not None:
        extra[DATA_ENV] = str(settings.data)
    ray_cluster = cluster.connect(address, num_cpus, cluster.worker_environment(extra), log_to_driver=log_to_driver)
    try:
        resources = sweep.resources
        cuda = resources.device == "cuda" or (resources.device == "auto" and ray_cluster.gpus > 0)
        _check_resources(ray_cluster, resources, cuda, warn)
        if resources.device == "auto":
            settings = dataclasses.replace(settings, device="cuda" if cuda else "cpu")
        progress(f"sweep {sweep.name}: {count(len(todo), 'job')} on the {ray_cluster.describe()}, each asking for "
                 f"{count(resources.cpus_per_job, 'CPU')}" + (f" and {resources.gpus_per_job:g} GPU" if cuda else "")
                 + f", up to {resources.max_retries} retries after a worker dies")
        return run_jobs(todo, settings, resources, cuda=cuda, total=total, done=done, show_bar=show_progress_bar)
    finally:
        cluster.disconnect()
        if ray_cluster.local:  # its workers are gone with it: nothing can still write to staging
            shutil.rmtree(settings.staging, ignore_errors=True)


def _check_resources(ray_cluster: cluster.Cluster, resources: ResourcesTable, cuda: bool,
                     warn: Callable[[str], None]) -> None:
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
        warn(f"sweep: warning: {problem}; jobs wait until the autoscaler adds such nodes")
