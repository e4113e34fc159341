"""The write stage: a leaderboard's files, ``NAME.json``, ``NAME.md``, ``NAME.png`` and ``NAME.html`` (a task-types
board's too, its PNG the heatmap), the folder's ``index.html`` and the summary picture of its task-types boards
(``task-types-summary.png``); the list of result folders merged into a board; the folder's lock.

The board is checked (its format, and that its stored intervals describe its scores), everything is
rendered in memory, then each file is written atomically (see :mod:`flow_plugin._io`), the JSON last
since it is the record. A folder or file that cannot be
written is an :class:`~flow_plugin.errors.OutputError` naming it and the cause. Without matplotlib a
picture is skipped with one warning; the other files are written all the same (the pages say there is no picture).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from flow_plugin._io import atomic_write_bytes, atomic_write_json, atomic_write_text, file_lock, make_output_folder
from flow_plugin.errors import LeaderboardError, MissingExtraError
from flow_plugin.leaderboard.compare import Compared, compare
from flow_plugin.leaderboard.headline import types_headline
from flow_plugin.leaderboard.ingest.merge import load_leaderboard
from flow_plugin.leaderboard.models import FORMAT, TASK_TYPES_FORMAT, TaskTypesBoard, validation_problems
from flow_plugin.leaderboard.render.chart import render_png
from flow_plugin.leaderboard.render.html import board_summary, render_html, render_index
from flow_plugin.leaderboard.render.markdown import render_markdown
from flow_plugin.leaderboard.render.task_types import index_summary, render_task_types_html, render_task_types_markdown
from flow_plugin.leaderboard.render.task_types_chart import render_heatmap_png, render_summary_png

logger = logging.getLogger(__name__)


INDEX = "index.html"
#: the lock file of a leaderboards folder (hidden; left in place, like every lock file)
LOCK_FILE = ".flow-plugin-leaderboards.lock"


def output_paths(json_path: str | os.PathLike[str]) -> tuple[Path, Path, Path, Path]:
    """The JSON, Markdown, PNG and HTML files of a leaderboard.

    Examples
    --------
    >>> [path.name for path in output_paths("leaderboards/minilm-l6.json")]
    ['minilm-l6.json', 'minilm-l6.md', 'minilm-l6.png', 'minilm-l6.html']
    """
    path = Path(json_path)
    if path.suffix != ".json":
        raise LeaderboardError(f"the leaderboard file must end in .json, got {path}")
    return path, path.with_suffix(".md"), path.with_suffix(".png"), path.with_suffix(".html")


def write_leaderboard(compared: Compared,
                      json_path: str | os.PathLike[str]) -> tuple[Path, Path, Path | None, Path]:
    """Render all four files of a compared board in memory, then write each atomically (JSON last: it is
    the record). Returns their paths; the PNG's is None when matplotlib is missing. A board changed in
    memory into something the typed format does not allow, or whose stored intervals do not describe
    its scores (:meth:`~flow_plugin.leaderboard.compare.Compared.check`), is a :class:`LeaderboardError`
    and nothing is written."""
    json_file, md_file, png_file, html_file = output_paths(json_path)
    text = compared.board.file_text(str(json_file))
    compared.check(str(json_file))
    png = _drawn(render_png, compared, png_file, "the chart")
    picture = png is not None or png_file.exists()
    markdown = render_markdown(compared, json_file.stem, picture)
    page = render_html(compared, json_file.stem, picture)
    return _write_files((json_file, md_file, png_file, html_file), text, markdown, png, page)


def _write_files(paths: tuple[Path, Path, Path, Path], text: str, markdown: str, png: bytes | None, page: str
                 ) -> tuple[Path, Path, Path | None, Path]:
    """Write a board's rendered files atomically, its JSON (the record) last; the PNG's path is None when it was not
    drawn."""
    json_file, md_file, png_file, html_file = paths
    if png is not None:
        atomic_write_bytes(png_file, png)
    atomic_write_text(md_file, markdown)
    atomic_write_text(html_file, page)
    atomic_write_text(json_file, text)
    return json_file, md_file, png_file if png is not None else None, html_file


def _drawn(draw: Callable[[Any], bytes], what: Any, png_file: Path, name: str) -> bytes | None:
    """``draw(what)``'s PNG bytes, or None with one warning naming ``png_file`` where matplotlib is missing."""
    try:
        return draw(what)
    except MissingExtraError as error:
        stale = f"; {name} already there is left as it was (out of date)" if png_file.exists() else ""
        logger.warning("%s not drawn: %s%s", png_file, error, stale)
        return None


def write_task_types_board(board: TaskTypesBoard, json_path: str | os.PathLike[str],
                           problems: list[str] | None = None) -> tuple[Path, Path, Path | None, Path]:
    """Render a task-types board's Markdown, heatmap (PNG) and HTML in memory, then write them and its JSON
    atomically (JSON last). Returns their paths (JSON, Markdown, PNG, HTML); the PNG's is None when matplotlib is
    missing (one warning; the pages then say so). ``problems`` (the compare stage's check of the board,
    :func:`~flow_plugin.leaderboard.compare_types.board_problems`): when there are any, nothing is written and the
    first is a :class:`LeaderboardError`."""
    json_file, md_file, png_file, html_file = output_paths(json_path)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise LeaderboardError(f"{json_file}: the board does not describe its scores: {problems[0]}{more}")
    text = board.file_text(str(json_file))
    png = _drawn(render_heatmap_png, board, png_file, "the picture")
    picture = png is not None or png_file.exists()
    markdown = render_task_types_markdown(board, json_file.stem, picture)
    page = render_task_types_html(board, json_file.stem, picture)
    return _write_files((json_file, md_file, png_file, html_file), text, markdown, png, page)


def read_task_types_board(path: Path) -> TaskTypesBoard | None:
    """The task-types board in ``path`` (None for any other JSON file, or a file that cannot be read); a file of that
    format that does not fit it is a one-line :class:`LeaderboardError` naming it."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(data, dict) or data.get("format") != TASK_TYPES_FORMAT:
        return None
    try:
        return TaskTypesBoard.model_validate(data)
    except ValidationError as error:
        raise LeaderboardError(f"{path}: does not fit the task-types board format: {validation_problems(error)}; "
                               "rebuild it (flow-plugin task-types ... --board-only)") from None


def _task_types_boards(folder: Path, what: str) -> list[tuple[Path, TaskTypesBoard]]:
    """The task-types boards of a folder by file name; one that does not fit the format is left out of ``what`` with
    a warning naming it."""
    found = []
    for path in sorted(folder.glob("*.json")):
        try:
            board = read_task_types_board(path)
        except LeaderboardError as error:
            logger.warning("%s: not in %s: %s", path, what, error)
            continue
        if board is not None:
            found.append((path, board))
    return found


#: the summary picture of a folder's task-types boards
SUMMARY_PICTURE = "task-types-summary.png"


def write_task_types_summary(folder: str | os.PathLike[str]) -> Path | None:
    """Draw ``task-types-summary.png`` in a leaderboards folder from its task-types boards (their JSON, by file name):
    per task type and backbone, auto's and the best fixed calibrator's Δ against raw with their 95% intervals
    (:func:`~flow_plugin.leaderboard.render.task_types_chart.render_summary_png`). Returns its path; None when the
    folder has no task-types board, or matplotlib is missing (one warning)."""

    folder = Path(folder)
    boards = [board for _, board in _task_types_boards(folder, SUMMARY_PICTURE)]
    if not boards:
        return None
    target = folder / SUMMARY_PICTURE
    png = _drawn(render_summary_png, [types_headline(board) for board in boards], target, "the summary picture")
    return None if png is None else atomic_write_bytes(target, png)


def _not_an_sts_board(path: Path) -> bool:
    """A JSON file flow-plugin writes that is no STS board: a task-types board (listed on its own) or another of its
    files (a study file ...)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    kind = data.get("format") if isinstance(data, dict) else None
    return isinstance(kind, str) and kind.startswith("flow-plugin-") and kind != FORMAT


def write_index(folder: str | os.PathLike[str]) -> Path:
    """Rewrite ``index.html`` of a leaderboards folder: every leaderboard JSON in it (another file of
    flow-plugin's, such as a study file, is left out; any other JSON file too, with a warning naming it and why)."""
    folder = Path(folder)
    summaries = [index_summary(board, path.stem, path.with_suffix(".png").exists())
                 for path, board in _task_types_boards(folder, INDEX)]
    for path in sorted(folder.glob("*.json")):
        if _not_an_sts_board(path):
            continue
        try:
            board = load_leaderboard(path)
        except LeaderboardError as error:
            logger.warning("%s: not listed in %s: %s", path, INDEX, error)
            continue
        summaries.append(board_summary(compare(board), path.stem, path.with_suffix(".png").exists()))
    return atomic_write_text(folder / INDEX, render_index(summaries))


#: the format of a board's sources file (:func:`sources_path`)
SOURCES_FORMAT = "flow-plugin-leaderboard-sources"


def sources_path(json_path: str | os.PathLike[str]) -> Path:
    """Where the result folders merged into a board on this machine are listed: a hidden file next to it,
    never published (it names machine paths; ``.gitignore`` leaves it out).

    >>> sources_path("leaderboards/minilm-l6.json").as_posix()
    'leaderboards/.minilm-l6.json.sources'
    """
    path = Path(json_path)
    return path.with_name(f".{path.name}.sources")


def read_sources(json_path: str | os.PathLike[str]) -> list[Path]:
    """The result folders merged into a board before (absolute paths; [] when none are listed, or the list
    cannot be read: it only helps find per-pair cosines)."""
    try:
        data = json.loads(sources_path(json_path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return []
    if not isinstance(data, dict) or data.get("format") != SOURCES_FORMAT or not isinstance(data.get("folders"), list):
        return []
    return [Path(folder) for folder in data["folders"] if isinstance(folder, str)]


def write_sources(json_path: str | os.PathLike[str], folders: list[Path]) -> Path:
    """List ``folders`` (absolute, each once, in order) as the result folders merged into a board, atomically."""
    unique = list(dict.fromkeys(str(Path(os.path.abspath(folder))) for folder in folders))
    return atomic_write_json(sources_path(json_path), {"format": SOURCES_FORMAT, "folders": unique})


@contextlib.contextmanager
def folder_lock(folder: Path) -> Iterator[None]:
    """Serialise read-merge-write of the leaderboards of one folder (its :data:`LOCK_FILE`, see
    :func:`flow_plugin._io.file_lock`)."""
    make_output_folder(folder, "leaderboard folder")
    with file_lock(folder / LOCK_FILE):
        yield
