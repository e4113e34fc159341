"""Running a sweep's jobs on Ray, with progress, retries and Ctrl-C.

Each job is one Ray task asking for ``cpus_per_job`` CPUs and, when the sweep runs on CUDA,
``gpus_per_job`` GPUs (1 by default: N GPUs run N backbones at once). A worker that dies
(killed, out of memory, its node lost) is retried by Ray up to ``max_retries`` times; an
exception raised by our code is a real failure, reported and not retried. Each worker runs
one job and exits (``max_calls=1``), which frees its backbone and GPU memory.

Ctrl-C cancels the jobs (their workers are killed; nothing half-written is visible, see
:mod:`.publish`), prints what was kept and returns; a rerun resumes.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tqdm import tqdm

from flow_plugin.sweep.cluster import import_ray
from flow_plugin.sweep.job import JobOutcome, run_job
from flow_plugin.sweep.jobs import Job, Settings
from flow_plugin.sweep.progress import read_attempts
from flow_plugin.sweep.spec import ResourcesTable


@dataclass
class RunReport:
    """What the jobs did: outcomes of finished jobs, errors of failed ones."""

    outcomes: dict[str, JobOutcome] = field(default_factory=dict)
    failed_jobs: dict[str, str] = field(default_factory=dict)  # job -> error
    interrupted: bool = False
    retried: dict[str, int] = field(default_factory=dict)  # job -> attempts that died

    #: results computed by every attempt of every job (a killed attempt's included), from the progress files
    computed: int = 0

    @property
    def failed_items(self) -> list[tuple[str, str]]:
        return [failure for outcome in self.outcomes.values() for failure in outcome.failed]


class Watcher:
    """Turns the jobs' progress files into one line per event and an overall bar."""

    def __init__(self, settings: Settings, total: int, done: int, write: Callable[[str], None], bar: Any) -> None:
        self.folder = settings.progress
        self.write = write
        self.bar = bar
        self.total, self.done_before = total, done
        self.seen: dict[str, int] = {}  # job -> attempts announced
        self.last_count = (done, 0)

    def poll(self, report: RunReport) -> None:
        attempts = read_attempts(self.folder)
        finished = 0
        failed = 0
        for job, states in attempts.items():
            for number, state in enumerate(states, start=1):
                if number > self.seen.get(job, 0):
                    self._announce(job, number, state, states[number - 2] if number > 1 else None, report)
                    self.seen[job] = number
            finished += sum(state["counts"]["computed"] for state in states)
            failed += states[-1]["counts"]["failed"]
        report.computed = finished
        count = (min(self.total, self.done_before + finished), failed)
        if self.bar is not None:
            self.bar.n = count[0]
            self.bar.set_postfix_str(f"failed={failed}" if failed else "", refresh=False)
            self.bar.refresh()
        elif count != self.last_count:  # no terminal (a log file): one line per change instead of a bar
            self.write(f"sweep: {count[0]}/{self.total} results done" + (f", {failed} failed" if failed else ""))
        self.last_count = count

    def _announce(self, job: str, number: int, state: dict[str, Any], previous: dict[str, Any] | None,
                  report: RunReport) -> None:
        where = f"pid {state['pid']} on {state['host']}"
        if previous is not None and previous["status"] == "running":
            report.retried[job] = report.retried.get(job, 0) + 1
            self.write(f"sweep: job {job}: attempt {number - 1} (pid {previous['pid']} on {previous['host']}) died "
                       f"after {previous['counts']['computed']} computed results; Ray retried it: attempt {number}, {where}")
        else:
            self.write(f"sweep: job {job} started: attempt {number}, {where}")


def _remote_options(job: Job, resources: ResourcesTable, cuda: bool) -> dict[str, Any]:
    return {
        "num_cpus": resources.cpus_per_job,
        "num_gpus": resources.gpus_per_job if cuda else 0,
        "max_retries": resources.max_retries,
        "retry_exceptions": False,  # a Python exception is a real failure; only worker deaths are retried
        "name": f"flow-plugin-sweep:{job.id}",
    }


def _job_error(error: BaseException) -> str:
    """One line for a job Ray could not finish."""
    ray = import_ray()  # the optional ray extra, loaded when jobs run
    if isinstance(error, ray.exceptions.RayTaskError):
        cause = getattr(error, "cause", None)
        if cause is not None:
            return f"{type(cause).__name__}: {cause}"
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"


def _finished_line(outcome: JobOutcome) -> str:
    return (f"sweep: job {outcome.job} finished in {outcome.seconds:.1f} s on {outcome.host}: "
            f"{len(outcome.computed)} computed, {len(outcome.skipped)} already done, {len(outcome.failed)} failed; "
            f"backbone encoded {outcome.n_encoded} sentences, {outcome.n_cache_hits} from the embedding cache")


def run_jobs(jobs: list[Job], settings: Settings, resources: ResourcesTable, *, cuda: bool, total: int, done: int,
             poll_seconds: float = 1.0, show_bar: bool = True) -> RunReport:
    """Submit ``jobs`` to the connected Ray and wait for them; ``total`` and ``done`` count the
    sweep's results (all, and done before it started) for the progress bar (on a terminal;
    elsewhere, a line each time the count changes)."""
    ray = import_ray()  # the optional ray extra, loaded when jobs run
    report = RunReport()
    show_bar = show_bar and sys.stderr.isatty()
    bar = tqdm(total=total, initial=done, unit="result", desc="sweep", file=sys.stderr, dynamic_ncols=True) if show_bar else None
    write = lambda line: tqdm.write(line, file=sys.stderr)  # noqa: E731 -- lines above the bar
    watcher = Watcher(settings, total, done, write, bar)
    remote = ray.remote(max_calls=1)(run_job)  # one job per worker process: its backbone and GPU memory go with it
    pending = {remote.options(**_remote_options(job, resources, cuda)).remote(job, settings): job for job in jobs}
    try:
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=poll_seconds)
            watcher.poll(report)
            for ref in ready:
                job = pending.pop(ref)
                try:
                    outcome = ray.get(ref)
                except ray.exceptions.RayError as error:
                    report.failed_jobs[job.id] = _job_error(error)
                    write(f"sweep: job {job.id} FAILED: {report.failed_jobs[job.id]}")
                    continue
                report.outcomes[job.id] = outcome
                write(_finished_line(outcome))
                for item, message in outcome.failed:
                    write(f"sweep:   FAILED {item}: {message}")
    except KeyboardInterrupt:
        report.interrupted = True
        for ref in pending:
            ray.cancel(ref, force=True)
        time.sleep(0.5)  # let the last progress files land
    finally:
        watcher.poll(report)
        if bar is not None:
            bar.close()
    return report
