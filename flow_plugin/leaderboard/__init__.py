"""Leaderboards: MTEB result folders -> leaderboard JSON, Markdown, PNG and HTML (``flow-plugin leaderboard``).

Reads the task result files that ``mteb run`` / ``mteb.evaluate`` / ``flow-plugin eval`` /
``flow-plugin bench`` write, through mteb's own ``ResultCache`` and ``TaskResult``::

    <dir>/results/<model>/<revision>/<Task>.json                       (an output folder)
    <dir>/results/<model>/<revision>/experiments/<experiment>/<Task>.json  (models run with kwargs)

(``<dir>/results`` itself may be given too), merges them into ``NAME.json`` (its format:
:class:`.models.Leaderboard`), then renders ``NAME.md``, ``NAME.png`` and ``NAME.html`` next to it, and the
folder's ``index.html``. Merging never drops a
row; a score that disagrees with the one already recorded is an error (or, with
``replace=True``, is replaced and reported); a result without its run record is not merged. The files are
written atomically.

In memory the board is that typed model from load to write, and the package is one pipeline, read
top to bottom, one module (or folder) per stage:

* :mod:`.models`: the board as typed pydantic models (``Leaderboard`` -> ``Row`` -> ``TaskScore``,
  ``SeedGroup``, ``Comparison``), the file format; the JSON schema is generated from them;
* :mod:`.ingest`: result folders -> typed rows with their provenance (:mod:`.ingest.results` reads the
  files, :mod:`.ingest.rows` names a row, :mod:`.ingest.merge` loads a board and merges into it);
* :mod:`.compare`: every derived number, computed once and stored on the row or seed group: averages,
  deltas, seed groups, the 95% intervals; and :class:`~.compare.Compared`, every cell the renderings show;
* :mod:`.render`: Markdown, the HTML page and index, the PNG chart, read from the comparison (and a row
  as an exported model's card shows it);
* :mod:`.write`: the four files and the index, atomically, under a folder lock;
* :mod:`.pipeline`: :func:`update_leaderboard` and :func:`render_leaderboard`, the stages in order (the
  command line is :mod:`flow_plugin.cli.leaderboard`).

The task-types board (every calibrator on the labelled tasks of every MTEB type) runs through the same stages:
:mod:`.ingest.task_items` (results and their per-item data) -> :mod:`.compare_types` (scores, type averages, Δ
against raw and the paired bootstrap intervals over test items and seeds) -> :mod:`.render.task_types` ->
:func:`.write.write_task_types_board`; :func:`update_task_types_board` runs them.

Importing this package imports the standard library, pydantic and the registry (mteb when results are read,
numpy and scipy when intervals are computed, matplotlib when a chart is drawn).
"""

from __future__ import annotations

from flow_plugin.data.tasks import OFFLINE_TASKS
from flow_plugin.errors import DataFolderError, LeaderboardConflictError, LeaderboardError
from flow_plugin.leaderboard.compare import Compared, compare, finalize
from flow_plugin.leaderboard.ingest.merge import (
    MergeReport,
    empty_leaderboard,
    load_leaderboard,
    merge_results,
    score_difference,
)
from flow_plugin.leaderboard.ingest.results import (
    ResultFile,
    ResultFolder,
    find_results,
    hardware_index,
    read_score,
    run_key,
    score_entry,
)
from flow_plugin.leaderboard.ingest.rows import describe_model, display_columns, display_name, publish_row, row_id
from flow_plugin.leaderboard.models import (
    DEFAULT_TOLERANCE,
    FORMAT,
    FORMAT_VERSION,
    Comparison,
    Leaderboard,
    Row,
    SeedGroup,
    TaskScore,
    TaskTypesBoard,
    task_sort_key,
)
from flow_plugin.leaderboard.pipeline import (
    LeaderboardUpdate,
    Rendered,
    render_board,
    render_leaderboard,
    render_task_types_board,
    render_task_types_summary,
    update_leaderboard,
    update_task_types_board,
)
from flow_plugin.leaderboard.render.card import benchmark_row, benchmark_scores
from flow_plugin.leaderboard.render.chart import delta_series, render_png
from flow_plugin.leaderboard.render.html import embedded_json, page_view, render_html, render_index, significance
from flow_plugin.leaderboard.render.markdown import render_markdown
from flow_plugin.leaderboard.write import (
    output_paths,
    write_index,
    write_leaderboard,
    write_task_types_board,
    write_task_types_summary,
)

__all__ = [
    "DEFAULT_TOLERANCE",
    "FORMAT",
    "FORMAT_VERSION",
    "OFFLINE_TASKS",
    "Compared",
    "Comparison",
    "DataFolderError",
    "Leaderboard",
    "LeaderboardConflictError",
    "LeaderboardError",
    "LeaderboardUpdate",
    "MergeReport",
    "ResultFile",
    "Rendered",
    "ResultFolder",
    "Row",
    "SeedGroup",
    "TaskScore",
    "TaskTypesBoard",
    "benchmark_row",
    "benchmark_scores",
    "compare",
    "delta_series",
    "describe_model",
    "display_columns",
    "display_name",
    "embedded_json",
    "empty_leaderboard",
    "finalize",
    "find_results",
    "hardware_index",
    "load_leaderboard",
    "merge_results",
    "output_paths",
    "page_view",
    "publish_row",
    "read_score",
    "render_html",
    "render_index",
    "render_leaderboard",
    "render_markdown",
    "render_board",
    "render_png",
    "render_task_types_board",
    "render_task_types_summary",
    "row_id",
    "run_key",
    "score_difference",
    "score_entry",
    "significance",
    "task_sort_key",
    "update_leaderboard",
    "update_task_types_board",
    "write_index",
    "write_leaderboard",
    "write_task_types_board",
    "write_task_types_summary",
]
