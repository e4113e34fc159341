"""``flow-plugin leaderboard``: merge MTEB result folders into a leaderboard and rewrite its
JSON, Markdown and PNG (the command line, and :func:`update_leaderboard` behind it)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flow_plugin.cli.leaderboard.merge import MergeReport, empty_leaderboard, load_leaderboard, merge_results
from flow_plugin.cli.leaderboard.schema import DEFAULT_TOLERANCE, SCHEMA
from flow_plugin.cli.leaderboard.write import folder_lock, output_paths, write_leaderboard
from flow_plugin.errors import LeaderboardError


@dataclass
class LeaderboardUpdate:
    """What :func:`update_leaderboard` wrote (JSON, Markdown, PNG or None) and merged."""

    paths: tuple[Path, Path, Path | None]
    report: MergeReport
    board: dict[str, Any]


def update_leaderboard(
    folders: Sequence[str | os.PathLike[str]],
    output: str | os.PathLike[str],
    *,
    replace: bool = False,
    models: Iterable[str] | None = None,
    tasks: Iterable[str] | None = None,
    name: str | None = None,
    tolerance: float | None = None,
    seeds: int | None = None,
) -> LeaderboardUpdate:
    """Merge the results under ``folders`` into the leaderboard at ``output`` (created if
    absent) and rewrite its JSON, Markdown and PNG. Nothing is written on a conflict.
    ``seeds`` keeps at most that many seeds (the lowest) in each seed group's mean ± std."""
    if seeds is not None and (isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 1):
        raise LeaderboardError(f"seeds must be a positive int, got {seeds!r}")
    json_file, _, _ = output_paths(output)
    with folder_lock(json_file.parent.resolve()):
        if json_file.exists():
            board = load_leaderboard(json_file)
            if name:
                board["name"] = name
        else:
            board = empty_leaderboard(name or json_file.stem)
        if seeds is not None:
            board["max_seeds"] = seeds
        report = merge_results(board, folders, replace=replace, models=models, tasks=tasks, tolerance=tolerance)
        from flow_plugin import __version__

        board["generated_by"] = f"flow-plugin {__version__}"
        paths = write_leaderboard(board, json_file)
    return LeaderboardUpdate(paths, report, board)


def print_update(update: LeaderboardUpdate) -> None:
    """Print what an update did (replacements first, then one summary line and the files)."""
    report = update.report
    for line in report.replaced:
        print(f"replaced: {line}")
    print(
        f"leaderboard {update.paths[0]}: {len(update.board['rows'])} rows, {len(update.board['tasks'])} tasks; "
        f"read {report.files_read} result files: {len(report.rows_added)} new rows, "
        f"{len(report.scores_added)} new scores, {len(report.unchanged)} unchanged, {len(report.replaced)} replaced"
    )
    markdown, png = update.paths[1], update.paths[2]
    print(f"wrote {markdown} and {png}" if png is not None else f"wrote {markdown} (no chart: matplotlib is missing)")


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """The options of ``flow-plugin leaderboard``."""
    parser.add_argument("results", nargs="*", type=Path, metavar="RESULTS_DIR",
                        help="MTEB output folder (containing results/) or its results/ folder; several are merged in order")
    parser.add_argument("-o", "--output", type=Path, metavar="NAME.json",
                        help="leaderboard JSON to create or update; NAME.md and NAME.png are written next to it")
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
    parser.add_argument("--schema", action="store_true", help="print the JSON schema and exit")


def run(args: argparse.Namespace) -> int:
    """Run ``flow-plugin leaderboard`` with parsed arguments."""
    if args.schema:
        print(SCHEMA)
        return 0
    if not args.results or args.output is None:
        raise LeaderboardError("give one or more RESULTS_DIR and -o NAME.json (or --schema)")
    update = update_leaderboard(args.results, args.output, replace=args.replace, models=args.model, tasks=args.task,
                                name=args.name, tolerance=args.tolerance, seeds=args.seeds)
    print_update(update)
    return 0
