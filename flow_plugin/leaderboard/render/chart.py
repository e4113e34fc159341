"""The leaderboard's PNG chart: the Δ of every calibrated row against its raw backbone (protocol "all"),
per task and on the average, as the Markdown shows them (read from the compare stage's
:class:`~flow_plugin.leaderboard.compare.Compared`). matplotlib is an optional extra
(``pip install 'flow-plugin[plots]'``).
"""

from __future__ import annotations

import io
import json
from typing import Any

from flow_plugin.data.tasks import task_label
from flow_plugin.errors import MissingExtraError
from flow_plugin.leaderboard.compare import Compared
from flow_plugin.leaderboard.models import AVERAGE, DECIMALS


def delta_series(compared: Compared) -> tuple[list[str], list[tuple[str, list[float | None]]]]:
    """(x labels, [(series label, delta per label)]) of the delta chart: tasks then "Avg", the Δ against the
    raw backbone (protocol "all") as the Markdown shows it; a series whose average leaves tasks out says so."""
    labels = [*compared.tasks, "Avg"]
    series: list[tuple[str, list[float | None]]] = []
    for unit in compared.units:
        cells = unit.deltas["all"]["raw"]
        if cells:
            values = [cells[column].stats.mean if column in cells else None for column in compared.columns]
            name = unit.name + (f" (Avg {cells[AVERAGE].left_out()})" if cells[AVERAGE].without else "")
            taken = {label for label, _ in series}
            unique, count = name, 1
            while unique in taken:  # rows differing only in what the name leaves out (weights, pooling kwargs)
                count += 1
                unique = f"{name} #{count}"
            series.append((unique, values))
    return labels, series


def render_png(compared: Compared) -> bytes:
    """A bar chart of the deltas against the raw backbone, as PNG bytes (matplotlib, Agg).

    The PNG's "Description" text chunk holds the bar heights as drawn (JSON), so the
    picture can be checked against the leaderboard. Without matplotlib (the ``plots``
    extra) this raises :class:`~flow_plugin.errors.MissingExtraError`."""
    try:  # matplotlib is an optional extra, loaded only to draw
        from matplotlib.figure import Figure  # (its PNG is drawn by Agg, without pyplot's state)
    except ImportError as error:
        raise MissingExtraError(
            f"the leaderboard chart needs matplotlib ({error}): pip install 'flow-plugin[plots]'"
        ) from error

    labels, series = delta_series(compared)
    short = [label if label == "Avg" else task_label(label) for label in labels]
    figure = Figure(figsize=(max(6.0, 1.1 * len(labels) + 2.5), 4.2), dpi=110)
    axes = figure.add_subplot(1, 1, 1)
    drawn: dict[str, Any] = {"labels": labels, "series": {}}
    if series:
        width = 0.8 / len(series)
        for index, (name, values) in enumerate(series):
            positions = [x - 0.4 + width * (index + 0.5) for x in range(len(labels))]
            heights = [0.0 if v is None else v for v in values]
            bars = axes.bar(positions, heights, width=width * 0.95, label=name, color=f"C{index % 10}")
            drawn["series"][name] = [None if v is None else round(rect.get_height(), DECIMALS)
                                     for v, rect in zip(values, bars.patches)]
        axes.axhline(0.0, color="black", linewidth=0.8)
        axes.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    else:
        axes.text(0.5, 0.5, "no calibrated variant with its raw backbone", ha="center", va="center",
                  transform=axes.transAxes)
    axes.set_xticks(range(len(labels)))
    axes.set_xticklabels(short, rotation=30, ha="right", fontsize=9)
    axes.set_ylabel("Δ Spearman × 100 vs raw")
    axes.set_title(f"{compared.board.name}: calibrator minus raw backbone (protocol all)", fontsize=10)
    axes.grid(axis="y", alpha=0.3)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", bbox_inches="tight",
                   metadata={"Description": json.dumps(drawn), "Software": None})
    return buffer.getvalue()
