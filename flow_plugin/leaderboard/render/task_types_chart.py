"""The task-types pictures (PNG, matplotlib): a board's heatmap and the summary across boards.

* :func:`render_heatmap_png`: one board, Δ against raw of every calibrator (rows; auto first, set apart) on each
  task type and the average of the types (columns), each cell's value printed, bold with * where its 95% interval
  excludes 0, on a diverging colour scale centred on 0 (symmetric-log: gains of 1 and of 30 points both show);
* :func:`render_summary_png`: several boards, per task type (a panel each) and backbone (a line each), auto's Δ
  and the best fixed calibrator's Δ (named), with their 95% intervals.

Both read the compare stage's numbers (:class:`~flow_plugin.leaderboard.models.TaskTypesBoard` and
:class:`~flow_plugin.leaderboard.headline.TypesHeadline`) and compute none; what they draw is also in the PNG's
"Description" text chunk (JSON), so a test can hold the picture against the board. matplotlib is the optional
``plots`` extra: without it they raise :class:`~flow_plugin.errors.MissingExtraError`.
"""

from __future__ import annotations

import io
import json
import math
from typing import TYPE_CHECKING, Any

from flow_plugin.calibration.names import AUTO_CALIBRATORS
from flow_plugin.errors import MissingExtraError
from flow_plugin.leaderboard.models import AVERAGE, TaskTypesBoard, TypeDelta, TypeRow
from flow_plugin.leaderboard.render.task_types import SIGNIFICANT_MARK, row_label, type_label
from flow_plugin.leaderboard.render.text import fmt

if TYPE_CHECKING:  # pragma: no cover
    from flow_plugin.leaderboard.headline import TypesHeadline

#: the diverging colour map (red: Δ below 0, blue: above; the page's own colours run the same way)
COLOURS = "RdBu"
#: the symmetric-log scale is linear within ±this many points, logarithmic beyond
LINEAR_WITHIN = 1.0
AUTO_COLOUR, FIXED_COLOUR = "#1f5fa8", "#b3400f"


def _matplotlib() -> tuple[Any, Any]:
    """(Figure, SymLogNorm): the matplotlib classes the pictures draw with (a figure saves its PNG through Agg,
    without pyplot's state), or :class:`MissingExtraError` naming the extra."""
    try:  # matplotlib is an optional extra, loaded only to draw
        from matplotlib.colors import SymLogNorm
        from matplotlib.figure import Figure
    except ImportError as error:
        raise MissingExtraError(
            f"the task-types pictures need matplotlib ({error}): pip install 'flow-plugin[plots]'") from error
    return Figure, SymLogNorm


def column_label(column: str) -> str:
    """A column of the pictures: a task type as the board names it, or the average of the types.

    >>> column_label("PairClassification"), column_label("average")
    ('Pair classification', 'Average of the types')
    """
    return "Average of the types" if column == AVERAGE else type_label(column)


def heatmap_rows(board: TaskTypesBoard) -> list[TypeRow]:
    """The heatmap's rows: the auto rows first (set apart), then every other calibrator in the board's order (raw,
    the reference, has no Δ and no row)."""
    rows = [row for row in board.rows if row.delta is not None]
    return [row for row in rows if row.calibrator in AUTO_CALIBRATORS] + \
        [row for row in rows if row.calibrator not in AUTO_CALIBRATORS]


def _cell_text(found: TypeDelta | None) -> str:
    """A heatmap cell: the Δ, with * where its interval excludes 0.

    >>> _cell_text(TypeDelta(delta=2.5312, ci95=(1.7, 3.3), significant=True)), _cell_text(None)
    ('+2.53*', '—')
    """
    if found is None:
        return fmt(None)
    return fmt(found.delta, signed=True) + ("*" if found.significant else "")


def _ink(shade: tuple[float, ...]) -> str:
    """Black or white, whichever contrasts more with a cell of colour ``shade`` (RGB 0-1; WCAG's relative luminance).

    >>> _ink((1.0, 1.0, 1.0)), _ink((0.02, 0.19, 0.38)), _ink((0.26, 0.58, 0.76))
    ('black', 'white', 'black')
    """
    linear = [channel / 12.92 if channel <= 0.04045 else ((channel + 0.055) / 1.055) ** 2.4 for channel in shade[:3]]
    luminance = 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]
    return "black" if (luminance + 0.05) / 0.05 >= 1.05 / (luminance + 0.05) else "white"


def _png(figure: Any, drawn: dict[str, Any]) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", bbox_inches="tight", metadata={"Description": json.dumps(drawn),
                                                                         "Software": None})
    return buffer.getvalue()


def render_heatmap_png(board: TaskTypesBoard) -> bytes:
    """The board's heatmap as PNG bytes: Δ against raw, calibrator (rows) × task type and the average of the types
    (columns). Its "Description" chunk holds, per row and column, the value and the mark drawn."""
    figure_class, SymLogNorm = _matplotlib()
    rows, columns = heatmap_rows(board), [*board.types, AVERAGE]
    cells = [[(row.delta or {}).get(column) for column in columns] for row in rows]
    largest = max([abs(found.delta) for line in cells for found in line if found is not None] + [LINEAR_WITHIN])
    norm = SymLogNorm(linthresh=LINEAR_WITHIN, vmin=-largest, vmax=largest, base=10)
    figure = figure_class(figsize=(2.3 + 1.0 * len(columns) + 1.1, 1.5 + 0.3 * max(len(rows), 1)), dpi=110)
    axes = figure.add_subplot(1, 1, 1)
    values = [[math.nan if found is None else found.delta for found in line] for line in cells]
    image = axes.imshow(values, cmap=COLOURS, norm=norm, aspect="auto", interpolation="nearest")
    colormap = image.get_cmap()
    for y, line in enumerate(cells):
        for x, found in enumerate(line):
            shade = colormap(norm(found.delta)) if found is not None else (1.0, 1.0, 1.0, 1.0)
            axes.text(x, y, _cell_text(found), ha="center", va="center", fontsize=9, color=_ink(shade),
                      fontweight="bold" if found is not None and found.significant else "normal")
    axes.set_xticks(range(len(columns)))
    axes.set_xticklabels([column_label(column).replace(" of the types", "\nof the types") for column in columns],
                         fontsize=9)
    axes.xaxis.tick_top()
    axes.set_yticks(range(len(rows)))
    axes.set_yticklabels([row_label(row) for row in rows], fontsize=9)
    for label, row in zip(axes.get_yticklabels(), rows):
        if row.calibrator in AUTO_CALIBRATORS:
            label.set_fontweight("bold")
    autos = sum(row.calibrator in AUTO_CALIBRATORS for row in rows)
    if 0 < autos < len(rows):
        axes.axhline(autos - 0.5, color="black", linewidth=2.0)
    axes.axvline(len(columns) - 1.5, color="black", linewidth=1.2)  # the average apart from the types
    axes.tick_params(length=0)
    ticks = [sign * step for step in (1, 3, 10, 30, 100) if step <= largest for sign in (-1, 1)] + [0.0]
    bar = figure.colorbar(image, ax=axes, fraction=0.05, pad=0.02, ticks=sorted(ticks))
    bar.ax.set_yticklabels([fmt(tick, signed=True).replace(".00", "") for tick in sorted(ticks)])
    bar.set_label("Δ against raw, points (symmetric log scale)", fontsize=8)
    bar.ax.tick_params(labelsize=8)
    axes.set_title(f"{board.backbone}: Δ against raw per task type", fontsize=10, pad=8)
    axes.set_xlabel(f"Cells {SIGNIFICANT_MARK} (paired bootstrap over the test items"
                    f"{' and seeds' if any(row.seeds for row in rows) else ''}).", fontsize=8)
    drawn = {"backbone": board.backbone, "columns": columns, "rows": [row.calibrator for row in rows],
             "values": [[None if found is None else found.delta for found in line] for line in cells],
             "significant": [[None if found is None else found.significant for found in line] for line in cells]}
    return _png(figure, drawn)


def summary_columns(headlines: list[TypesHeadline]) -> list[str]:
    """The summary's panels: every task type of the boards in their order, then the average of the types."""
    kinds = dict.fromkeys(column for headline in headlines for column in headline.columns if column != AVERAGE)
    return [*kinds, AVERAGE]


def _point(found: TypeDelta | None) -> list[Any] | None:
    return None if found is None else [found.delta, found.ci95[0], found.ci95[1], found.significant]


def _marker(axes: Any, found: TypeDelta, y: float, name: str, colour: str, marker: str) -> None:
    """One Δ with its interval as a whisker, named at its right end; filled where the interval excludes 0."""
    low, high = found.ci95
    axes.errorbar([found.delta], [y], xerr=[[found.delta - low], [high - found.delta]], fmt=marker, color=colour,
                  markersize=5, capsize=2, linewidth=1.2, markerfacecolor=colour if found.significant else "white")
    axes.annotate(f"{name} {_cell_text(found)}", (max(high, found.delta), y), xytext=(4, 0), textcoords="offset points",
                  va="center", fontsize=7, color=colour, fontweight="bold" if found.significant else "normal")


def _summary_panel(axes: Any, headlines: list[TypesHeadline], column: str, drawn: dict[str, Any]) -> None:
    """One task type's panel: a line per backbone, auto above the best fixed calibrator, each with its interval."""
    autos, fixed = [], []
    for index, headline in enumerate(headlines):
        auto = (headline.auto.delta or {}).get(column) if headline.auto is not None else None
        best = headline.best_fixed.get(column)
        found = (best.delta or {}).get(column) if best is not None else None
        autos.append(_point(auto))
        fixed.append(None if best is None or found is None else [best.calibrator, *_point(found)])  # type: ignore[misc]
        if auto is not None:
            _marker(axes, auto, index - 0.18, "auto", AUTO_COLOUR, "o")
        if best is not None and found is not None:
            _marker(axes, found, index + 0.18, best.calibrator, FIXED_COLOUR, "D")
    drawn["auto"][column], drawn["best_fixed"][column] = autos, fixed
    axes.axvline(0.0, color="#555555", linewidth=0.8)
    left, right = axes.get_xlim()
    axes.set_xlim(min(left, 0.0), max(right, 0.0) + 0.6 * (max(right, 0.0) - min(left, 0.0)))  # room for the names
    axes.set_ylim(len(headlines) - 0.5, -0.5)
    axes.set_title(column_label(column), fontsize=9)
    axes.grid(axis="x", alpha=0.3)
    axes.tick_params(labelsize=8)


def render_summary_png(headlines: list[TypesHeadline]) -> bytes:
    """The calibration effect by task type across boards, as PNG bytes: per task type (a panel) and backbone (a
    line), auto's Δ against raw and the best fixed calibrator's (named), with their 95% intervals; a filled marker
    where the interval excludes 0. Its "Description" chunk holds what each panel draws."""
    figure_class, _ = _matplotlib()
    columns = summary_columns(headlines)
    ncols = min(3, len(columns))
    nrows = math.ceil(len(columns) / ncols)
    figure = figure_class(figsize=(3.9 * ncols, 1.2 + nrows * (0.5 * max(len(headlines), 1) + 0.8)), dpi=110)
    drawn: dict[str, Any] = {"columns": columns, "backbones": [headline.backbone for headline in headlines],
                             "auto": {}, "best_fixed": {}}
    for index, column in enumerate(columns):
        axes = figure.add_subplot(nrows, ncols, index + 1)
        _summary_panel(axes, headlines, column, drawn)
        axes.set_yticks(range(len(headlines)))
        axes.set_yticklabels([headline.backbone for headline in headlines] if index % ncols == 0 else [])
        if index >= len(columns) - ncols:
            axes.set_xlabel("Δ against raw, points", fontsize=8)
    handles = [figure.axes[0].plot([], [], "o", color=AUTO_COLOUR, label="auto (chooses per task)")[0],
               figure.axes[0].plot([], [], "D", color=FIXED_COLOUR, label="best fixed calibrator there (named)")[0],
               figure.axes[0].plot([], [], "o", color="#555555", markerfacecolor="white",
                                   label="hollow: 95% interval includes 0")[0]]
    height = figure.get_figheight()
    top = 1.0 - 0.7 / height  # the title and the legend take the top 0.7 inch
    figure.legend(handles=handles, loc="lower center", ncol=3, fontsize=8, frameon=False, bbox_to_anchor=(0.5, top))
    figure.suptitle("Does calibration help? Δ against the raw embeddings with 95% intervals, by task type",
                    fontsize=11, y=1.0 - 0.1 / height, va="top")
    # the backbones' names stand left of the figure; savefig's tight box takes them in
    figure.subplots_adjust(left=0.02, right=0.99, top=top - 0.25 / height, bottom=0.5 / height, wspace=0.1,
                           hspace=0.8 / (height / nrows))
    return _png(figure, drawn)


__all__ = ["column_label", "heatmap_rows", "render_heatmap_png", "render_summary_png",
           "summary_columns"]
