"""``flow-plugin leaderboard``: parses the arguments, calls
:func:`flow_plugin.leaderboard.update_leaderboard` (or :func:`~flow_plugin.leaderboard.pipeline.render_board`,
:func:`~flow_plugin.leaderboard.pipeline.render_task_types_summary`, or prints the JSON schema generated from
:class:`flow_plugin.leaderboard.models.Leaderboard`) and prints what was written."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from flow_plugin.errors import LeaderboardError
from flow_plugin.leaderboard.compare import Compared
from flow_plugin.leaderboard.models import DEFAULT_TOLERANCE, schema_text
from flow_plugin.leaderboard.pipeline import (
    LeaderboardUpdate,
    render_board,
    render_task_types_summary,
    update_leaderboard,
)


def print_update(update: LeaderboardUpdate) -> None:
    """Print what an update did (replacements first, then one summary line and the files)."""
    report = update.report
    for line in report.replaced:
        print(f"replaced: {line}")
    print(
        f"leaderboard {update.paths[0]}: {len(update.board.rows)} rows, {len(update.board.tasks)} tasks; "
        f"read {report.files_read} result files: {len(report.rows_added)} new rows, "
        f"{len(report.scores_added)} new scores, {len(report.unchanged)} unchanged, {len(report.replaced)} replaced"
        + (f", {len(report.recorded)} now with their run records" if report.recorded else "")
        + (f"; {len(report.unrecorded)} without run records not merged (warned above)" if report.unrecorded else "")
    )
    print(f"confidence intervals: {report.intervals} rows in {report.interval_seconds:.1f} s"
          + (f"; {len(report.no_pairs)} results without per-pair cosines (no intervals)" if report.no_pairs else ""))
    print_notes(update.compared)
    print_written(update.paths)


def print_notes(compared: Compared) -> None:
    """Flag a board computed by an older procedure (on stderr, one line per reason)."""
    for note in compared.notes:
        print(f"{compared.board.name}: computed by an older procedure: {note}", file=sys.stderr)


def print_written(paths: tuple[Path, Path, Path | None, Path]) -> None:
    """One line naming the files written besides the JSON."""
    markdown, png, page = paths[1], paths[2], paths[3]
    index = page.parent / "index.html"
    print(f"wrote {markdown}, {png}, {page} and {index}" if png is not None
          else f"wrote {markdown}, {page} and {index} (no chart: matplotlib is missing)")


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """The options of ``flow-plugin leaderboard``."""
    parser.add_argument("results", nargs="*", type=Path, metavar="RESULTS_DIR",
                        help="MTEB output folder (containing results/) or its results/ folder; several are merged in order")
    parser.add_argument("-o", "--output", type=Path, metavar="NAME.json",
                        help="leaderboard JSON to create or update; NAME.md, NAME.png and NAME.html (and the "
                        "folder's index.html) are written next to it")
    parser.add_argument("--replace", action="store_true",
                        help="replace recorded scores that new results contradict (and list them) instead of failing")
    parser.add_argument("-m", "--model", action="append", metavar="MODEL", help="only these models (repeatable)")
    parser.add_argument("-t", "--task", action="append", metavar="TASK", help="only these tasks (repeatable)")
    parser.add_argument("--name", default=None, help="leaderboard title (default: the file's stem)")
    parser.add_argument("--tolerance", type=float, default=None,
                        help=f"largest score difference in points still counted as identical (default {DEFAULT_TOLERANCE})")
    parser.add_argument("--seeds", type=int, default=None, metavar="N",
                        help="show seeded calibrators (run with several seeds) as mean ± standard deviation over "
                        "their first N seeds (default: every seed found)")
    parser.add_argument("--render-only", nargs="+", type=Path, metavar="NAME.json",
                        help="re-render these leaderboards' Markdown, PNG and HTML (and index.html) from their JSON "
                        "alone, reading no results; a task-types board also redraws the folder's "
                        "task-types-summary.png")
    parser.add_argument("--task-types-summary", type=Path, metavar="FOLDER",
                        help="draw FOLDER/task-types-summary.png from the task-types boards in FOLDER (per task type "
                        "and backbone, auto's and the best fixed calibrator's Δ against raw with 95%% intervals)")
    parser.add_argument("--schema", action="store_true", help="print the JSON schema of a leaderboard file (generated from its typed models) and exit")


def run(args: argparse.Namespace) -> int:
    """Run ``flow-plugin leaderboard`` with parsed arguments."""
    if args.schema:
        print(schema_text())
        return 0
    if args.render_only or args.task_types_summary is not None:
        if args.results or args.output is not None:
            raise LeaderboardError("--render-only and --task-types-summary draw from existing boards: give no "
                                   "RESULTS_DIR or -o with them")
        folders = [args.task_types_summary] if args.task_types_summary is not None else []
        for json_path in args.render_only or []:
            rendered = render_board(json_path, summary=False)
            print(f"re-rendered {rendered.paths[0]}")
            for note in rendered.notes:
                print(f"{rendered.paths[0].stem}: computed by an older procedure: {note}", file=sys.stderr)
            print_written(rendered.paths)
            if rendered.task_types and rendered.paths[0].parent not in folders:
                folders.append(rendered.paths[0].parent)
        for folder in folders:  # the summary picture once per folder, after its boards
            summary = render_task_types_summary(folder)
            print(f"wrote {summary}" if summary is not None else
                  f"no summary picture: {folder} has no task-types board, or matplotlib is missing")
        return 0
    if not args.results or args.output is None:
        raise LeaderboardError("give one or more RESULTS_DIR and -o NAME.json (or --render-only NAME.json, or --schema)")
    update = update_leaderboard(args.results, args.output, replace=args.replace, models=args.model, tasks=args.task,
                                name=args.name, tolerance=args.tolerance, seeds=args.seeds)
    print_update(update)
    return 0
