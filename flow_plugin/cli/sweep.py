"""``flow-plugin sweep SWEEP.toml``: backbones × calibrators × tasks × fit corpora × seeds on
Ray, into one MTEB output folder, then one leaderboard. Parses the arguments, calls
:func:`flow_plugin.sweep.driver.run_sweep` and prints its report.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from flow_plugin.cli.leaderboard import print_update
from flow_plugin.sweep.driver import SweepReport, count, run_sweep


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
                        help="the data folder holding senteval/, for offline tasks (default: the file's 'data', "
                             "else $FLOW_PLUGIN_SHARED_DATA)")
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


def run(args: argparse.Namespace) -> int:
    """Run ``flow-plugin sweep`` with parsed arguments (Ctrl-C: exit status 130, no traceback)."""
    try:
        report = run_sweep(
            args.sweep_file, address=args.address, num_cpus=args.num_cpus, output_folder=args.output_folder,
            data=args.data, cache_dir=args.cache_dir, leaderboard=args.leaderboard,
            write_leaderboard=not args.no_leaderboard, replace=args.replace, merge_only=args.merge_only,
            dry_run=args.dry_run, show_progress_bar=not args.no_progress_bar, log_to_driver=args.verbose > 0,
            progress=lambda line: print(line, flush=True), warn=lambda line: print(line, file=sys.stderr))
    except KeyboardInterrupt:
        print("sweep: interrupted; finished results are kept: rerun the same command to resume", flush=True)
        return 130
    if args.dry_run:
        _print_plan(report)
        return 0
    name, results = report.sweep.name, report.settings.output / "results"
    if report.interrupted:
        computed = report.run.computed if report.run is not None else 0
        print(f"sweep {name}: interrupted: {report.done + computed} of {report.total} results are in {results} "
              f"({computed} computed in this run); rerun the same command to resume", flush=True)
        return 130
    if report.run is None and not args.merge_only:
        print(f"sweep {name}: all {report.total} results already done; nothing to run")
    if report.leaderboard_skipped is not None:
        print(f"sweep: {report.leaderboard_skipped}")
    if report.leaderboard is not None:
        print_update(report.leaderboard)
    return 0 if args.merge_only else _summary(report)


def _print_plan(report: SweepReport) -> None:
    for job in report.jobs:
        left = [item for item in report.plans[job.id] if not item.done]
        print(f"  job {job.id}: {count(len(job.runs), 'run')} × {count(len(report.task_names), 'task')}, "
              f"{count(len(left), 'result')} to compute")
        for item in left:
            print(f"    {item.key}")


def _summary(report: SweepReport) -> int:
    run = report.run
    computed = run.computed if run is not None else 0
    failed_items = run.failed_items if run is not None else []
    failed_jobs = run.failed_jobs if run is not None else {}
    retried = sum(run.retried.values()) if run is not None else 0
    print(f"sweep {report.sweep.name}: {computed} computed, {report.done} already done, {len(failed_items)} failed"
          f"{f', {len(failed_jobs)} jobs failed' if failed_jobs else ''} of {report.total} results in "
          f"{report.seconds:.1f} s" + (f"; {count(retried, 'worker death')} retried by Ray" if retried else ""))
    for item, message in failed_items:
        print(f"  FAILED {item}: {message}")
    for job, message in failed_jobs.items():
        print(f"  FAILED job {job}: {message}")
    if failed_items or failed_jobs:
        print("rerun the same command to retry what failed (finished results are not recomputed)")
        return 1
    return 0
