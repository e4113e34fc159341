"""``flow-plugin leaderboard``: merge MTEB result folders into a leaderboard and rewrite its
JSON, Markdown, PNG and HTML page, and the folder's index page (the command line, and
:func:`update_leaderboard` and :func:`render_leaderboard` behind it)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flow_plugin.cli.leaderboard.merge import (
    MergeReport,
    empty_leaderboard,
    finalize,
    load_leaderboard,
    merge_results,
)
from flow_plugin.cli.leaderboard.schema import DEFAULT_TOLERANCE, SCHEMA
from flow_plugin.cli.leaderboard.units import procedure_notes
from flow_plugin.cli.leaderboard.write import folder_lock, output_paths, write_index, write_leaderboard
from flow_plugin.errors import LeaderboardError


@dataclass
class LeaderboardUpdate:
    """What :func:`update_leaderboard` wrote (JSON, Markdown, PNG or None, HTML) and merged."""

    paths: tuple[Path, Path, Path | None, Path]
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
    absent) and rewrite its JSON, Markdown, PNG and HTML, and the folder's ``index.html``.
    Nothing is written on a conflict.
    ``seeds`` keeps at most that many seeds (the lowest) in each seed group's mean ± std."""
    if seeds is not None and (isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 1):
        raise LeaderboardError(f"seeds must be a positive int, got {seeds!r}")
    json_file = output_paths(output)[0]
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
        write_index(json_file.parent)
    return LeaderboardUpdate(paths, report, board)


def render_leaderboard(json_path: str | os.PathLike[str]) -> tuple[Path, Path, Path | None, Path]:
    """Re-render a leaderboard's files from its JSON alone (no result folder is read) and rewrite
    the folder's ``index.html``. The scores and the "updated" stamp stay as they are; what the
    current code derives (deltas, seed groups, published names) is derived again."""
    json_file = output_paths(json_path)[0]
    if not json_file.is_file():
        raise LeaderboardError(f"{json_file}: no such leaderboard file; --render-only re-renders an existing one")
    with folder_lock(json_file.parent.resolve()):
        board = finalize(load_leaderboard(json_file))
        paths = write_leaderboard(board, json_file)
        write_index(json_file.parent)
    return paths


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
    print(f"confidence intervals: {report.intervals} rows in {report.interval_seconds:.1f} s"
          + (f"; {len(report.no_pairs)} results without per-pair cosines (no intervals)" if report.no_pairs else ""))
    print_notes(update.board)
    print_written(update.paths)


def print_notes(board: dict[str, Any]) -> None:
    """Flag a board computed by an older procedure (on stderr, one line per reason)."""
    for note in procedure_notes(board):
        print(f"{board['name']}: computed by an older procedure: {note}", file=sys.stderr)


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
                        "alone, reading no results")
    parser.add_argument("--schema", action="store_true", help="print the JSON schema and exit")


def run(args: argparse.Namespace) -> int:
    """Run ``flow-plugin leaderboard`` with parsed arguments."""
    if args.schema:
        print(SCHEMA)
        return 0
    if args.render_only:
        if args.results or args.output is not None:
            raise LeaderboardError("--render-only re-renders existing leaderboards: give no RESULTS_DIR or -o with it")
        for json_path in args.render_only:
            paths = render_leaderboard(json_path)
            print(f"re-rendered {paths[0]}")
            print_notes(load_leaderboard(paths[0]))
            print_written(paths)
        return 0
    if not args.results or args.output is None:
        raise LeaderboardError("give one or more RESULTS_DIR and -o NAME.json (or --render-only NAME.json, or --schema)")
    update = update_leaderboard(args.results, args.output, replace=args.replace, models=args.model, tasks=args.task,
                                name=args.name, tolerance=args.tolerance, seeds=args.seeds)
    print_update(update)
    return 0
