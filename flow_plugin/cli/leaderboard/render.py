"""Rendering a leaderboard: Markdown tables and a PNG bar chart of the deltas.

Pure functions of the leaderboard dict. The chart needs matplotlib, an optional extra
(``pip install 'flow-plugin[plots]'``), imported only when a chart is drawn.
"""

from __future__ import annotations

import io
import json
from typing import Any

from flow_plugin.cli.leaderboard.public import display_columns, display_name
from flow_plugin.cli.leaderboard.schema import DECIMALS
from flow_plugin.cli.leaderboard.seeds import display_rows
from flow_plugin.errors import MissingExtraError


def _fmt(value: float | None, signed: bool = False) -> str:
    """A score or delta as a table cell: two decimals, "—" when absent, no signed zero.

    >>> _fmt(82.04412), _fmt(-0.001, signed=True), _fmt(1.5, signed=True), _fmt(None)
    ('82.04', '0.00', '+1.50', '—')
    """
    if value is None:
        return "—"
    text = f"{value:+.2f}" if signed else f"{value:.2f}"
    return "0.00" if text in ("+0.00", "-0.00") and signed else text


def _best_entry(rows: list[dict[str, Any]], value: Any, std: Any) -> tuple[float, float] | None:
    """(best value of a column, the standard deviation of the row that has it; 0 without seeds)."""
    present = [(value(row), std(row) or 0.0) for row in rows if value(row) is not None]
    return max(present) if present else None


def _mark(text: str, value: float | None, best: tuple[float, float] | None) -> str:
    """Bold for the column's best; ≈ for a value within the best's spread over seeds."""
    if value is None or best is None:
        return text
    if value == best[0]:
        return f"**{text}**"
    return f"{text} ≈" if best[1] > 0 and best[0] - value <= best[1] else text


def _hardware_text(hardware: dict[str, Any]) -> str:
    parts = [str(hardware.get("cpu") or "unknown CPU")]
    if hardware.get("cpu_cores"):
        parts.append(f"{hardware['cpu_cores']} cores")
    if hardware.get("gpu"):
        parts.append(str(hardware["gpu"]))
    parts.append(f"device {hardware.get('device', '?')}")
    if hardware.get("precision"):
        parts.append(str(hardware["precision"]))
    if hardware.get("torch"):
        parts.append(f"torch {hardware['torch']}")
    return ", ".join(parts)


def _with_spread(text: str, std: float | None) -> str:
    """A cell of a seed group: the mean, then ± the standard deviation over its seeds."""
    return text if std is None else f"{text} ± {std:.2f}"


#: the columns that name a row (:func:`~flow_plugin.cli.leaderboard.public.display_columns`)
_NAME_COLUMNS = (("backbone", "Backbone"), ("calibrator", "Calibrator"), ("pooling", "Pooling"),
                 ("fit_corpus", "Fit corpus"), ("duplicates", "Duplicates"), ("options", "Options"))


def _name_cells(row: dict[str, Any], keys: tuple[str, ...] | None = None) -> list[str]:
    columns = display_columns(row, row.get("seeds"))
    return [columns[key] for key, _ in _NAME_COLUMNS if keys is None or key in keys]


def _name_header(keys: tuple[str, ...] | None = None) -> list[str]:
    return [title for key, title in _NAME_COLUMNS if keys is None or key in keys]


def _label(row: dict[str, Any]) -> str:
    """A row in one line (chart legends): backbone, calibrator and what differs from the defaults."""
    return display_name(display_columns(row, row.get("seeds")))


def render_markdown(board: dict[str, Any]) -> str:
    """The leaderboard as Markdown: scores (best per column in bold), deltas, wmean, provenance.
    A calibrator run with several seeds is one row: mean ± standard deviation over its seeds."""
    tasks = board["tasks"]
    all_rows = board["rows"]
    rows = display_rows(board)
    seeded = bool(board.get("seed_groups"))
    lines = [f"# Leaderboard: {board['name']}", ""]
    lines.append(
        "Scores are Spearman correlations × 100 between cosine similarity and the gold scores, protocol "
        "\"all\" (all test pairs pooled, as MTEB and SimCSE report), unless a column says otherwise. "
        "**Bold**: best in the column. Avg: mean over the row's tasks (a partial average shows how many)."
    )
    if seeded:
        lines.append("")
        lines.append(
            "Rows run with several seeds show the mean ± the standard deviation over the seeds. A difference "
            "counts only when it exceeds that spread: ≈ marks a score within the standard deviation of the "
            "column's best, and in the Δ table * marks a mean change larger than its standard deviation."
        )
    lines.append("")
    if not rows:
        lines.append("_No results yet._")
        return "\n".join(lines) + "\n"

    header = [*_name_header(), *tasks, "Avg"]
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|" + "|".join(["---"] * len(_NAME_COLUMNS) + ["---:"] * (len(tasks) + 1)) + "|")
    best = {task: _best_entry(rows, lambda row, t=task: row["scores"].get(t, {}).get("score"),
                              lambda row, t=task: row["scores"].get(t, {}).get("std")) for task in tasks}
    best_avg = _best_entry([row for row in rows if row["complete"]], lambda row: row["average"],
                           lambda row: row.get("average_std"))
    for row in rows:
        cells = _name_cells(row)
        for task in tasks:
            entry = row["scores"].get(task)
            value = entry["score"] if entry else None
            text = _with_spread(_fmt(value), entry.get("std") if entry else None)
            if entry and entry.get("protocol", "all") != "all":
                text += f" ({entry['protocol']})"
            cells.append(_mark(text, value, best[task]))
        average = _with_spread(_fmt(row["average"]), row.get("average_std"))
        if row["average"] is not None and not row["complete"]:
            average += f" ({row['n_tasks']}/{len(tasks)})"
        cells.append(_mark(average, row["average"], best_avg) if row["complete"] else average)
        lines.append("| " + " | ".join(cells) + " |")

    with_delta = [row for row in rows if row.get("delta")]
    lines += ["", "## Δ against the raw backbone", ""]
    if with_delta:
        lines.append("Calibrated score minus the raw backbone's score on the same task, in points.")
        lines.append("")
        keys = ("backbone", "calibrator", "fit_corpus", "duplicates", "options")
        lines.append("| " + " | ".join([*_name_header(keys), *tasks, "Avg"]) + " |")
        lines.append("|" + "|".join(["---"] * len(keys) + ["---:"] * (len(tasks) + 1)) + "|")
        for row in with_delta:
            cells = _name_cells(row, keys)
            for task in [*tasks, "average"]:
                text = _fmt(row["delta"].get(task), signed=True)
                if row.get("delta_std") and task in row["delta_std"]:
                    text = _with_spread(text, row["delta_std"][task]) + ("*" if row["delta_significant"][task] else "")
                cells.append(text)
            lines.append("| " + " | ".join(cells) + " |")
    else:
        lines.append("_No calibrated row has its raw backbone in this leaderboard._")

    wmean_rows = [row for row in rows if any(e.get("wmean") is not None for e in row["scores"].values())]
    if wmean_rows:
        lines += ["", "## wmean protocol", ""]
        lines.append(
            "The same correlations per subset, averaged weighted by pair count (SentEval's and the BERT-flow "
            "paper's \"wmean\"); — where the result does not carry it."
        )
        lines.append("")
        keys = ("backbone", "calibrator", "fit_corpus", "duplicates", "options")
        lines.append("| " + " | ".join([*_name_header(keys), *tasks, "Avg"]) + " |")
        lines.append("|" + "|".join(["---"] * len(keys) + ["---:"] * (len(tasks) + 1)) + "|")
        for row in wmean_rows:
            cells = _name_cells(row, keys)
            cells += [_with_spread(_fmt(row["scores"].get(task, {}).get("wmean")),
                                   row["scores"].get(task, {}).get("wmean_std")) for task in tasks]
            cells.append(_with_spread(_fmt(row.get("average_wmean")), row.get("average_wmean_std")))
            lines.append("| " + " | ".join(cells) + " |")

    lines += ["", "## Provenance", ""]
    entries = [entry for row in all_rows for entry in row["scores"].values()]
    versions = sorted({e.get("mteb_version") or "unknown" for e in entries})
    dates = sorted(e["date"] for e in entries if e.get("date"))
    lines.append(f"- mteb: {', '.join(versions)}")
    if dates:
        lines.append(f"- computed: {dates[0]} to {dates[-1]}" if dates[0] != dates[-1] else f"- computed: {dates[0]}")
    for task in tasks:
        revisions = sorted({row["scores"][task]["dataset_revision"] for row in all_rows if task in row["scores"]})
        lines.append(f"- {task} data: {', '.join(f'`{r}`' for r in revisions)}")
    hardware = sorted({_hardware_text(e["hardware"]) for e in entries if e.get("hardware")})
    unknown = sum(1 for e in entries if not e.get("hardware"))
    for text in hardware:
        lines.append(f"- hardware: {text}")
    if unknown:
        lines.append(f"- hardware not recorded for {unknown} of {len(entries)} scores")
    lines.append(f"- updated: {board['updated']} by {board.get('generated_by', 'flow-plugin')}")
    return "\n".join(lines) + "\n"


def delta_series(board: dict[str, Any]) -> tuple[list[str], list[tuple[str, list[float | None]]]]:
    """(x labels, [(series label, delta per label)]) of the delta chart: tasks then "Avg"."""
    labels = [*board["tasks"], "Avg"]
    series = []
    for row in display_rows(board):
        if row.get("delta"):
            values = [row["delta"].get(task) for task in board["tasks"]] + [row["delta"].get("average")]
            label = _label(row)
            taken = {name for name, _ in series}
            unique, count = label, 1
            while unique in taken:  # rows differing only in what the name leaves out (weights, pooling kwargs)
                count += 1
                unique = f"{label} #{count}"
            series.append((unique, values))
    return labels, series


def render_png(board: dict[str, Any]) -> bytes:
    """A bar chart of the deltas against the raw backbone, as PNG bytes (matplotlib, Agg).

    The PNG's "Description" text chunk holds the bar heights as drawn (JSON), so the
    picture can be checked against the leaderboard. Without matplotlib (the ``plots``
    extra) this raises :class:`~flow_plugin.errors.MissingExtraError`."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as error:
        raise MissingExtraError(
            f"the leaderboard chart needs matplotlib ({error}): pip install 'flow-plugin[plots]'"
        ) from error

    labels, series = delta_series(board)
    short = [label.removeprefix("SentEval") for label in labels]
    figure = Figure(figsize=(max(6.0, 1.1 * len(labels) + 2.5), 4.2), dpi=110)
    FigureCanvasAgg(figure)
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
    axes.set_title(f"{board['name']}: calibrator minus raw backbone (protocol all)", fontsize=10)
    axes.grid(axis="y", alpha=0.3)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", bbox_inches="tight",
                   metadata={"Description": json.dumps(drawn), "Software": None})
    return buffer.getvalue()
