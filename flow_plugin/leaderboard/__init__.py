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

In memory the board is that typed model from load to write: :func:`load_leaderboard` validates a
file into a :class:`Leaderboard` (rows are :class:`Row`, scores :class:`TaskScore`, seed groups
:class:`SeedGroup`, intervals :class:`Comparison`), every step below reads and sets its attributes,
and the file written is its serialisation, checked against the models once more.

One job per module:

* :mod:`.models`: the file format and the board in memory, as typed pydantic models; the JSON schema is
  generated from them;
* :mod:`.schema`: the format's name and version, the points scale, the column order;
* :mod:`.read`: result folders -> score entries (mteb's classes, plus run records);
* :mod:`.describe`: backbone, calibrator and pooling of a model name;
* :mod:`.public`: what a published row may say (file names, not paths) and its display columns;
* :mod:`.merge`: load (an older file brought up to date), merge (conflicts, tolerance), finalize;
* :mod:`.seeds`: the seed groups (mean and spread over seeds);
* :mod:`.units`: the displayed rows (a seed group is one), what each is compared with, and every Δ they
  show with its interval (:class:`~.units.BoardDeltas`, which also refuses stored intervals the scores contradict);
* :mod:`.intervals`: the 95% interval of every delta, from the per-pair cosines;
* :mod:`.render`: Markdown and the PNG chart (matplotlib, the optional ``plots`` extra);
* :mod:`.view`: the HTML page's cells (values, spreads, significance) per protocol and view;
* :mod:`.html`: the self-contained HTML page and the folder's index page;
* :mod:`.write`: the four files and the index, atomically, under a folder lock;
* :mod:`.update`: :func:`update_leaderboard` and :func:`render_leaderboard` (the command line is
  :mod:`flow_plugin.cli.leaderboard`).

Importing this package imports the standard library, pydantic and the registry (mteb when results are read,
numpy when intervals are computed, matplotlib when a chart is drawn).
"""

from __future__ import annotations

from flow_plugin.catalog.tasks import OFFLINE_TASKS
from flow_plugin.leaderboard.update import (
    LeaderboardUpdate,
    render_leaderboard,
    update_leaderboard,
)
from flow_plugin.leaderboard.describe import describe_model
from flow_plugin.leaderboard.html import embedded_json, render_html, render_index
from flow_plugin.leaderboard.models import Comparison, Leaderboard, Row, SeedGroup, TaskScore
from flow_plugin.leaderboard.merge import (
    MergeReport,
    empty_leaderboard,
    finalize,
    load_leaderboard,
    merge_results,
    score_difference,
)
from flow_plugin.leaderboard.read import (
    ResultFile,
    ResultFolder,
    find_results,
    hardware_index,
    read_score,
    row_id,
    run_key,
    score_entry,
)
from flow_plugin.leaderboard.render import delta_series, render_markdown, render_png
from flow_plugin.leaderboard.schema import (
    DEFAULT_TOLERANCE,
    FORMAT,
    FORMAT_VERSION,
    task_sort_key,
)
from flow_plugin.leaderboard.public import display_columns, display_name, publish_row
from flow_plugin.leaderboard.view import page_view, significance
from flow_plugin.leaderboard.write import output_paths, write_index, write_leaderboard
from flow_plugin.errors import DataFolderError, LeaderboardConflictError, LeaderboardError

__all__ = [
    "DEFAULT_TOLERANCE",
    "FORMAT",
    "FORMAT_VERSION",
    "OFFLINE_TASKS",
    "Comparison",
    "DataFolderError",
    "Leaderboard",
    "LeaderboardConflictError",
    "LeaderboardError",
    "LeaderboardUpdate",
    "MergeReport",
    "ResultFile",
    "ResultFolder",
    "Row",
    "SeedGroup",
    "TaskScore",
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
    "render_png",
    "row_id",
    "run_key",
    "score_difference",
    "score_entry",
    "significance",
    "task_sort_key",
    "update_leaderboard",
    "write_index",
    "write_leaderboard",
]
