"""Rendering a leaderboard: Markdown tables and a PNG bar chart of the deltas.

Pure functions of the leaderboard (:class:`~.models.Leaderboard`); a seed group is one row, a unit
(:mod:`.units`). The chart needs matplotlib, an optional extra
(``pip install 'flow-plugin[plots]'``), imported only when a chart is drawn.
"""

from __future__ import annotations

import io
import json
from typing import Any

from flow_plugin.leaderboard.models import Leaderboard, ProtocolName
from flow_plugin.leaderboard.schema import DECIMALS
from flow_plugin.leaderboard.units import (
    AVERAGE,
    PROTOCOLS,
    BoardDeltas,
    CellInterval,
    DeltaCell,
    Stats,
    Unit,
    procedure_notes,
)
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


def _best(values: list[float | None]) -> float | None:
    """The best value of a column."""
    present = [value for value in values if value is not None]
    return max(present) if present else None


def _mark(text: str, value: float | None, best: float | None) -> str:
    """Bold for the column's best (whether it is better than the runner-up, only a Δ's interval says)."""
    return f"**{text}**" if value is not None and value == best else text


def _interval_text(text: str, found: CellInterval | None) -> str:
    """A Δ cell with its 95% interval and * when the interval excludes 0.

    >>> _interval_text("+1.20", CellInterval((0.4, 2.01), True))
    '+1.20 [+0.40, +2.01]*'
    >>> _interval_text("+0.10", None)
    '+0.10'
    """
    if found is None:
        return text
    low, high = found.ci95
    return f"{text} [{_fmt(low, signed=True)}, {_fmt(high, signed=True)}]" + ("*" if found.significant else "")


def _delta_text(found: DeltaCell | None) -> str:
    """A Δ cell: the value (± its spread over seeds), its interval, and the tasks an average leaves out.

    >>> _delta_text(DeltaCell(Stats(0.5, None, 1), CellInterval((0.1, 0.9), True), ("SentEvalSICKR",)))
    '+0.50 [+0.10, +0.90]* (without SICK-R)'
    """
    if found is None:
        return _fmt(None)
    return _interval_text(_stats_text(found.stats, signed=True), found.interval) + found.note()


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


def _stats_text(stats: Stats | None, signed: bool = False) -> str:
    """A displayed value with its spread over seeds ("—" when absent)."""
    return _with_spread(_fmt(stats.mean if stats else None, signed=signed), stats.std if stats else None)


#: the columns that name a row (:func:`~flow_plugin.leaderboard.public.display_columns`)
_NAME_COLUMNS = (("backbone", "Backbone"), ("calibrator", "Calibrator"), ("pooling", "Pooling"),
                 ("fit_corpus", "Fit corpus"), ("duplicates", "Duplicates"), ("options", "Options"))


def _name_cells(unit: Unit, keys: tuple[str, ...] | None = None) -> list[str]:
    return [unit.columns[key] for key, _ in _NAME_COLUMNS if keys is None or key in keys]


def _name_header(keys: tuple[str, ...] | None = None) -> list[str]:
    return [title for key, title in _NAME_COLUMNS if keys is None or key in keys]


def _mean(stats: Stats | None) -> float | None:
    return stats.mean if stats is not None else None


def render_markdown(board: Leaderboard) -> str:
    """The leaderboard as Markdown: scores (best per column in bold), deltas, wmean, provenance.
    A calibrator run with several seeds is one row: mean ± standard deviation over its seeds."""
    tasks = board.tasks
    deltas = BoardDeltas(board)
    units = deltas.units
    lines = [f"# Leaderboard: {board.name}", ""]
    lines.append(
        "Scores are Spearman correlations × 100 between cosine similarity and the gold scores, protocol "
        "\"all\" (all test pairs pooled, as MTEB and SimCSE report), unless a column says otherwise. "
        "**Bold**: best in the column. Avg: mean over the row's tasks (a partial average shows how many)."
    )
    if board.seed_groups:
        lines.append("")
        lines.append(
            "Rows run with several seeds show the mean ± the sample standard deviation over the seeds."
        )
    lines.append("")
    lines.append(
        "A Δ is shown with its 95% confidence interval [low, high] where the per-pair cosines were kept: a "
        "paired, stratified bootstrap over the test pairs of each subset, combined with a resampling of the "
        "seeds for seeded rows (flow_plugin.evaluation.intervals). * marks a Δ whose interval excludes 0: only "
        "those count as differences. A Δ without an interval is undecided."
    )
    notes = procedure_notes(board)
    if notes:
        lines.append("")
        lines.append("**Computed by an older procedure:** " + "; ".join(notes) + ".")
    lines.append("")
    if not units:
        lines.append("_No results yet._")
        return "\n".join(lines) + "\n"

    header = [*_name_header(), *tasks, "Avg"]
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|" + "|".join(["---"] * len(_NAME_COLUMNS) + ["---:"] * (len(tasks) + 1)) + "|")
    best = {task: _best([_mean(unit.score_stats(task, "all")) for unit in units]) for task in tasks}
    best_avg = _best([_mean(unit.score_stats(AVERAGE, "all")) for unit in units if unit.complete])
    for unit in units:
        cells = _name_cells(unit)
        for task in tasks:
            stats = unit.score_stats(task, "all")
            text = _stats_text(stats)
            protocol = unit.first.scores[task].protocol if stats is not None else "all"
            if protocol != "all":
                text += f" ({protocol})"
            cells.append(_mark(text, _mean(stats), best[task]))
        stats = unit.score_stats(AVERAGE, "all")
        average = _stats_text(stats)
        if stats is not None and not unit.complete:
            average += f" ({unit.first.n_tasks}/{len(tasks)})"
        cells.append(_mark(average, _mean(stats), best_avg) if unit.complete else average)
        lines.append("| " + " | ".join(cells) + " |")

    with_delta = [(unit, cells) for unit in units if (cells := deltas.cells(unit, "all", "raw"))]
    lines += ["", "## Δ against the raw backbone", ""]
    if with_delta:
        lines.append("Calibrated score minus the raw backbone's score on the same task, in points.")
        lines.append("")
        keys = ("backbone", "calibrator", "fit_corpus", "duplicates", "options")
        lines.append("| " + " | ".join([*_name_header(keys), *tasks, "Avg"]) + " |")
        lines.append("|" + "|".join(["---"] * len(keys) + ["---:"] * (len(tasks) + 1)) + "|")
        for unit, found in with_delta:
            cells = _name_cells(unit, keys) + [_delta_text(found.get(column)) for column in [*tasks, AVERAGE]]
            lines.append("| " + " | ".join(cells) + " |")
    else:
        lines.append("_No calibrated row has its raw backbone in this leaderboard._")
    for protocol in PROTOCOLS:
        lines += _linear_table(deltas, protocol)

    wmean_units = [unit for unit in units if any(unit.score_stats(task, "wmean") is not None for task in tasks)]
    if wmean_units:
        lines += ["", "## wmean protocol", ""]
        lines.append(
            "The same correlations per subset, averaged weighted by pair count (SentEval's and the BERT-flow "
            "paper's \"wmean\"); — where the result does not carry it."
        )
        lines.append("")
        keys = ("backbone", "calibrator", "fit_corpus", "duplicates", "options")
        lines.append("| " + " | ".join([*_name_header(keys), *tasks, "Avg"]) + " |")
        lines.append("|" + "|".join(["---"] * len(keys) + ["---:"] * (len(tasks) + 1)) + "|")
        for unit in wmean_units:
            cells = _name_cells(unit, keys)
            cells += [_stats_text(unit.score_stats(column, "wmean")) for column in [*tasks, AVERAGE]]
            lines.append("| " + " | ".join(cells) + " |")

    lines += ["", "## Provenance", ""]
    entries = [entry for row in board.rows for entry in row.scores.values()]
    versions = sorted({e.mteb_version or "unknown" for e in entries})
    dates = sorted(e.date for e in entries if e.date)
    lines.append(f"- mteb: {', '.join(versions)}")
    if dates:
        lines.append(f"- computed: {dates[0]} to {dates[-1]}" if dates[0] != dates[-1] else f"- computed: {dates[0]}")
    for task in tasks:
        revisions = sorted({row.scores[task].dataset_revision for row in board.rows if task in row.scores})
        lines.append(f"- {task} data: {', '.join(f'`{r}`' for r in revisions)}")
    hardware = sorted({_hardware_text(e.hardware) for e in entries if e.hardware})
    unknown = sum(1 for e in entries if not e.hardware)
    for text in hardware:
        lines.append(f"- hardware: {text}")
    if unknown:
        lines.append(f"- hardware not recorded for {unknown} of {len(entries)} scores")
    lines.append(f"- updated: {board.updated} by {board.generated_by}")
    return "\n".join(lines) + "\n"


def _linear_table(deltas: BoardDeltas, protocol: ProtocolName) -> list[str]:
    """The table of Δ against the best linear baseline (with intervals), for the rows that have one."""
    shown = [(unit, reference, cells) for unit in deltas.units
             if (reference := deltas.reference(unit, protocol, "linear")) is not None
             and (cells := deltas.cells(unit, protocol, "linear"))]
    if not shown:
        return []
    tasks = deltas.tasks
    lines = ["", f"## Δ against the best linear baseline ({protocol})", "",
             "Score minus the score of the best linear baseline (of SN, NATSV, SN+NATSV and whitening, the highest "
             f"average under protocol \"{protocol}\") of the same backbone, loader settings and fit corpus, in "
             "points: the mean over seeds of the row minus the baseline's.", ""]
    keys = ("backbone", "calibrator", "fit_corpus", "duplicates", "options")
    lines.append("| " + " | ".join([*_name_header(keys), "Against", *tasks, "Avg"]) + " |")
    lines.append("|" + "|".join(["---"] * (len(keys) + 1) + ["---:"] * (len(tasks) + 1)) + "|")
    for unit, reference, cells in shown:
        row = [*_name_cells(unit, keys), reference.calibrator]
        row += [_interval_text(_fmt(_mean(cells[c].stats) if c in cells else None, signed=True),
                               cells[c].interval if c in cells else None) + (cells[c].note() if c in cells else "")
                for c in [*tasks, AVERAGE]]
        lines.append("| " + " | ".join(row) + " |")
    return lines


def delta_series(board: Leaderboard) -> tuple[list[str], list[tuple[str, list[float | None]]]]:
    """(x labels, [(series label, delta per label)]) of the delta chart: tasks then "Avg", the Δ against the
    raw backbone (protocol "all") as the Markdown shows it; a series whose average leaves tasks out says so."""
    labels = [*board.tasks, "Avg"]
    series: list[tuple[str, list[float | None]]] = []
    deltas = BoardDeltas(board)
    for unit in deltas.units:
        cells = deltas.cells(unit, "all", "raw")
        if cells:
            values = [_mean(cells[column].stats) if column in cells else None for column in [*board.tasks, AVERAGE]]
            name = unit.name + (f" (Avg {cells[AVERAGE].left_out()})" if cells[AVERAGE].without else "")
            taken = {label for label, _ in series}
            unique, count = name, 1
            while unique in taken:  # rows differing only in what the name leaves out (weights, pooling kwargs)
                count += 1
                unique = f"{name} #{count}"
            series.append((unique, values))
    return labels, series


def render_png(board: Leaderboard) -> bytes:
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
    axes.set_title(f"{board.name}: calibrator minus raw backbone (protocol all)", fontsize=10)
    axes.grid(axis="y", alpha=0.3)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", bbox_inches="tight",
                   metadata={"Description": json.dumps(drawn), "Software": None})
    return buffer.getvalue()
