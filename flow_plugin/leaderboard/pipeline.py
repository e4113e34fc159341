"""The leaderboard pipeline end to end: result folders -> ingest -> compare -> render -> write.

:func:`update_leaderboard` merges MTEB result folders into a board and rewrites its JSON, Markdown, PNG
and HTML page and the folder's index page; :func:`render_leaderboard` re-renders them from the JSON alone
(:func:`render_board`: a board of either kind). A task-types board is built by :func:`update_task_types_board`
and re-rendered by :func:`render_task_types_board`; both redraw the folder's summary picture
(:func:`render_task_types_summary`). ``flow-plugin leaderboard`` (:mod:`flow_plugin.cli.leaderboard`) calls them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from flow_plugin.errors import LeaderboardError
from flow_plugin.leaderboard.compare import Compared, compare
from flow_plugin.leaderboard.headline import board_problems
from flow_plugin.leaderboard.ingest.merge import (
    MergeReport,
    board_content,
    empty_leaderboard,
    generated_by,
    load_leaderboard,
    merge_results,
    now_iso,
)
from flow_plugin.leaderboard.models import Leaderboard, TaskTypesBoard
from flow_plugin.leaderboard.write import (
    folder_lock,
    write_task_types_board,
    output_paths,
    read_sources,
    read_task_types_board,
    write_index,
    write_leaderboard,
    write_sources,
    write_task_types_summary,
)


@dataclass
class LeaderboardUpdate:
    """What :func:`update_leaderboard` wrote (JSON, Markdown, PNG or None, HTML), merged, and the board
    written with its comparison."""

    paths: tuple[Path, Path, Path | None, Path]
    report: MergeReport
    compared: Compared

    @property
    def board(self) -> Leaderboard:
        return self.compared.board


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
    Nothing is written on a conflict. The folders merged are listed next to the board
    (:func:`~.write.sources_path`, this machine's paths, never published), and a later merge looks up
    the per-pair cosines of the rows already on the board there too, so a board built in several merges
    gets the same intervals as one built at once.
    ``seeds`` keeps at most that many seeds (the lowest) in each seed group's mean ± std."""
    if seeds is not None and (isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 1):
        raise LeaderboardError(f"seeds must be a positive int, got {seeds!r}")
    json_file = output_paths(output)[0]
    with folder_lock(json_file.parent.resolve()):
        if json_file.exists():
            board = load_leaderboard(json_file)
            if name:
                board.name = name
        else:
            board = empty_leaderboard(name or json_file.stem)
        if seeds is not None:
            board.max_seeds = seeds
        before = board_content(board)
        given = [Path(os.path.abspath(folder)) for folder in folders]
        earlier = [folder for folder in read_sources(json_file) if folder not in given] if json_file.exists() else []
        report = merge_results(board, folders, replace=replace, models=models, tasks=tasks, tolerance=tolerance,
                               pair_folders=earlier)                                     # 1. ingest
        compared = compare(board, report.pairs)                                          # 2. compare
        report.intervals, report.interval_seconds = compared.intervals_computed, compared.interval_seconds
        if board_content(board) != before:  # a rerun that changes nothing keeps the file byte for byte
            board.updated = now_iso()
        board.generated_by = generated_by()
        paths = write_leaderboard(compared, json_file)                                   # 3. render, 4. write
        write_sources(json_file, [*earlier, *given])
        write_index(json_file.parent)
    return LeaderboardUpdate(paths, report, compared)


def render_leaderboard(json_path: str | os.PathLike[str]) -> tuple[Path, Path, Path | None, Path]:
    """Re-render a leaderboard's files from its JSON alone (no result folder is read) and rewrite
    the folder's ``index.html``. The scores, the intervals and the "updated" stamp stay as they are; what
    the current code derives (deltas, seed groups, published names) is derived again."""
    return _render_sts(json_path)[0]


def _render_sts(json_path: str | os.PathLike[str]) -> tuple[tuple[Path, Path, Path | None, Path], Compared]:
    json_file = output_paths(json_path)[0]
    if not json_file.is_file():
        raise LeaderboardError(f"{json_file}: no such leaderboard file; --render-only re-renders an existing one")
    with folder_lock(json_file.parent.resolve()):
        compared = compare(load_leaderboard(json_file))
        paths = write_leaderboard(compared, json_file)
        write_index(json_file.parent)
    return paths, compared


@dataclass
class Rendered:
    """What :func:`render_board` wrote: the board's files (JSON, Markdown, PNG or None, HTML), whether it is a
    task-types board, and why an STS board was computed by an older procedure
    (:attr:`~flow_plugin.leaderboard.compare.Compared.notes`)."""

    paths: tuple[Path, Path, Path | None, Path]
    task_types: bool
    notes: list[str]


def render_board(json_path: str | os.PathLike[str], *, summary: bool = True) -> Rendered:
    """Re-render a board of either kind from its JSON alone, as its ``format`` says: an STS leaderboard
    (:func:`render_leaderboard`) or a task-types board (:func:`render_task_types_board`; ``summary=False`` leaves
    the folder's summary picture to a later :func:`render_task_types_summary`)."""
    json_file = output_paths(json_path)[0]
    if read_task_types_board(json_file) is not None:
        return Rendered(render_task_types_board(json_file, summary=summary), True, [])
    paths, compared = _render_sts(json_file)
    return Rendered(paths, False, compared.notes)


def update_task_types_board(results_folder: str | os.PathLike[str], backbone: str, json_path: str | os.PathLike[str],
                            *, tasks: Sequence[str] | None = None, calibrators: Sequence[str] | None = None,
                            study: dict[str, float] | None = None,
                            n_resamples: int | None = None
                            ) -> tuple[TaskTypesBoard, tuple[Path, Path, Path | None, Path]]:
    """Build a backbone's task-types board from a study's result folder (ingest: the labelled tasks' results and
    their per-item data; compare: scores, type averages, Δ against raw and the paired bootstrap intervals), then
    write its JSON, Markdown, heatmap (PNG, None without matplotlib) and HTML, the folder's index and the summary
    picture of its task-types boards. ``calibrators``: the rows (default: every calibrator with results).
    ``study``: the study's wall and CPU seconds, shown with the board's provenance."""
    # numpy, scipy and MTEB's result reader load when a board is built, not to import the leaderboard or the CLI
    from flow_plugin.leaderboard.compare_types import DEFAULT_RESAMPLES, compare_task_types
    from flow_plugin.leaderboard.ingest.task_items import read_task_results, run_provenance

    results = read_task_results(results_folder, backbone, list(tasks) if tasks else None,
                                calibrators=list(calibrators) if calibrators else None)
    run = run_provenance(results_folder) or {}
    run.update(study or {})
    json_file = Path(json_path)
    board = compare_task_types(results, name=json_file.stem, backbone=backbone, updated=now_iso(),
                               generated_by=generated_by(), run=run or None,
                               n_resamples=n_resamples or DEFAULT_RESAMPLES)
    with folder_lock(json_file.parent):
        paths = write_task_types_board(board, json_file, board_problems(board))
        write_index(json_file.parent)
        write_task_types_summary(json_file.parent)
    return board, paths


def render_task_types_board(json_path: str | os.PathLike[str], *,
                            summary: bool = True) -> tuple[Path, Path, Path | None, Path]:
    """Re-render a task-types board's Markdown, heatmap and HTML (and the folder's index and, unless ``summary`` is
    false, its summary picture) from its JSON alone."""

    json_file = Path(json_path)
    try:
        board = TaskTypesBoard.model_validate(json.loads(json_file.read_text(encoding="utf-8")))
    except (OSError, ValueError) as error:
        raise LeaderboardError(f"{json_file}: not a task-types board: {str(error).splitlines()[0]}") from None
    with folder_lock(json_file.parent):
        paths = write_task_types_board(board, json_file, board_problems(board))
        write_index(json_file.parent)
        if summary:
            write_task_types_summary(json_file.parent)
    return paths


def render_task_types_summary(folder: str | os.PathLike[str]) -> Path | None:
    """Redraw a leaderboards folder's summary picture (``task-types-summary.png``) from its task-types boards' JSON
    (:func:`~flow_plugin.leaderboard.write.write_task_types_summary`); None when it has none or matplotlib is
    missing."""
    folder = Path(folder)
    if not folder.is_dir():
        raise LeaderboardError(f"{folder}: no such folder; give the leaderboards folder (e.g. leaderboards/)")
    with folder_lock(folder):
        return write_task_types_summary(folder)
