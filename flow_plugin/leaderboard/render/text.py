"""How every rendering writes a number and explains the board: the cell texts (2 decimals, ± the spread
over seeds, [low, high] and * for an interval, "(without …)" for an average over fewer tasks), the
columns that name a row, and the explanations the Markdown and the page share. Text only: the numbers
are the compare stage's (:class:`~flow_plugin.leaderboard.compare.Compared`).
"""

from __future__ import annotations

from typing import Any

from flow_plugin.calibration.names import CALIBRATOR_LABELS, LINEAR_BASELINES
from flow_plugin.leaderboard.compare import CellInterval, DeltaCell, Headline, Stats, Unit
from flow_plugin.leaderboard.models import AVERAGE
from flow_plugin.protocols import PROTOCOLS

#: the columns that name a row (:func:`~flow_plugin.leaderboard.ingest.rows.display_columns`), with their titles
NAME_COLUMNS = (("backbone", "Backbone"), ("calibrator", "Calibrator"), ("pooling", "Pooling"),
                ("fit_corpus", "Fit corpus"), ("duplicates", "Duplicates"), ("options", "Options"))
#: the page's and the Markdown's views of a board: the scores, or the Δ against a reference
VIEWS = {"scores": "Scores", "raw": "Δ against raw", "linear": "Δ against best linear"}
#: what the best linear baseline is, in words
BEST_LINEAR = (f"the best linear baseline (of {', '.join(CALIBRATOR_LABELS[name] for name in LINEAR_BASELINES[:-1])} "
               f"and {CALIBRATOR_LABELS[LINEAR_BASELINES[-1]]}, the one with the highest average under the protocol) of "
               "the same backbone, loader settings and fit corpus")
#: what a protocol means, as the renderings explain it
PROTOCOL_NOTES = {name: f'"{name}": {text}' for name, text in PROTOCOLS.items()}
#: how the intervals are computed and read, as the renderings explain it
INTERVAL_NOTE = ("A Δ is shown with its 95% confidence interval [low, high] where the per-pair cosines were kept: a "
                 "paired, stratified bootstrap over the test pairs of each subset, combined with a resampling of the "
                 "seeds for seeded rows (flow_plugin.evaluation.intervals). * marks a Δ whose interval excludes 0: "
                 "only those count as differences. A Δ without an interval is undecided.")
SEEDS_NOTE = "Rows run with several seeds show the mean ± the sample standard deviation over the seeds."
#: what the board's chart (``<stem>.png``) shows, as its page and its Markdown say it
CHART_CAPTION = ("Δ against the raw backbone (Spearman × 100, protocol all) of every calibrated row, per task and on "
                 "the average. Below: who wins, the table with every number and its interval, and a chart per task "
                 "with the intervals.")
#: what a page says where the chart could not be drawn
NO_CHART = "No chart: matplotlib is missing (pip install 'flow-plugin[plots]'); the table below gives every number."


def fmt(value: float | None, signed: bool = False) -> str:
    """A score or delta as a table cell: two decimals, "—" when absent, no signed zero.

    >>> fmt(82.04412), fmt(-0.001, signed=True), fmt(1.5, signed=True), fmt(None)
    ('82.04', '0.00', '+1.50', '—')
    """
    if value is None:
        return "—"
    text = f"{value:+.2f}" if signed else f"{value:.2f}"
    return "0.00" if text in ("+0.00", "-0.00") and signed else text


def with_spread(text: str, std: float | None) -> str:
    """A cell of a seed group: the mean, then ± the standard deviation over its seeds."""
    return text if std is None else f"{text} ± {std:.2f}"


def stats_text(stats: Stats | None, signed: bool = False) -> str:
    """A displayed value with its spread over seeds ("—" when absent)."""
    return with_spread(fmt(stats.mean if stats else None, signed=signed), stats.std if stats else None)


def interval_text(text: str, found: CellInterval | None) -> str:
    """A Δ cell with its 95% interval and * when the interval excludes 0.

    >>> interval_text("+1.20", CellInterval((0.4, 2.01), True))
    '+1.20 [+0.40, +2.01]*'
    >>> interval_text("+0.10", None)
    '+0.10'
    """
    if found is None:
        return text
    return f"{text} {bracket_text(found)}"


def bracket_text(found: CellInterval) -> str:
    """A 95% interval as the cells write it, with * when it excludes 0.

    >>> bracket_text(CellInterval((-0.4, 0.2), False))
    '[-0.40, +0.20]'
    """
    low, high = found.ci95
    return f"[{fmt(low, signed=True)}, {fmt(high, signed=True)}]" + ("*" if found.significant else "")


def delta_text(found: DeltaCell | None, spread: bool = True) -> str:
    """A Δ cell: the value (± its spread over seeds, unless ``spread`` is false), its interval, and the
    tasks an average leaves out.

    >>> delta_text(DeltaCell(Stats(0.5, 0.25, 5), CellInterval((0.1, 0.9), True), ("SentEvalSICKR",)))
    '+0.50 ± 0.25 [+0.10, +0.90]* (without SICK-R)'
    >>> delta_text(DeltaCell(Stats(0.5, 0.25, 5)), spread=False), delta_text(None)
    ('+0.50', '—')
    """
    if found is None:
        return fmt(None)
    value = stats_text(found.stats, signed=True) if spread else fmt(found.stats.mean, signed=True)
    return interval_text(value, found.interval) + found.note()


def delta_parts(found: DeltaCell | None) -> dict[str, Any] | None:
    """A Δ cell in the parts a page may set on two lines: the value (± its spread), its interval with the tasks an
    average leaves out, and whether the interval excludes 0 (None for no cell).

    >>> delta_parts(DeltaCell(Stats(0.5, None, 1), CellInterval((0.1, 0.9), True)))
    {'value': '+0.50', 'interval': '[+0.10, +0.90]*', 'significant': True}
    """
    if found is None:
        return None
    interval = bracket_text(found.interval) if found.interval is not None else ""
    return {"value": stats_text(found.stats, signed=True), "interval": (interval + found.note()).strip(),
            "significant": found.interval is not None and found.interval.significant}


def hardware_text(hardware: dict[str, Any]) -> str:
    """Where a score was computed, in one line."""
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


def name_cells(unit: Unit, keys: tuple[str, ...] | None = None) -> list[str]:
    """The naming columns of a unit (all, or those of ``keys``)."""
    return [unit.columns[key] for key, _ in NAME_COLUMNS if keys is None or key in keys]


def name_header(keys: tuple[str, ...] | None = None) -> list[str]:
    """The titles of the naming columns (all, or those of ``keys``)."""
    return [title for key, title in NAME_COLUMNS if keys is None or key in keys]


def headline_text(headline: Headline) -> str:
    """One sentence that answers which calibrator wins on a backbone under a protocol, by how much against
    the raw backbone and against the best linear baseline, with the intervals."""
    best, protocol = headline.best, headline.protocol
    average = stats_text(best.scores[protocol][AVERAGE])
    if headline.raw_wins:
        text = f"{headline.backbone}, {protocol}: the raw backbone has the highest average ({average}); no calibrator beats it."
        calibrated = headline.best_calibrated
        if calibrated is not None and calibrated.deltas[protocol]["raw"]:
            text += (f" The best calibrated row, {calibrated.short_name}, is "
                     f"{delta_text(calibrated.deltas[protocol]['raw'].get(AVERAGE))} against raw.")
        return text
    text = f"{headline.backbone}, {protocol}: {best.short_name} has the highest average ({average})"
    raw = best.deltas[protocol]["raw"].get(AVERAGE)
    if raw is not None:
        text += f", {delta_text(raw)} against raw"
    linear, against = best.deltas[protocol]["linear"].get(AVERAGE), best.against[protocol]["linear"]
    if linear is not None and against is not None:
        text += f" and {delta_text(linear)} against the best linear baseline ({against.short_name})"
    elif best.calibrator in LINEAR_BASELINES:
        text += "; it is the best linear baseline itself"
    return text + "."
