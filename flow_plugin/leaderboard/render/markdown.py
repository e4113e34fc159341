"""The leaderboard as Markdown: who wins, the scores (best per column in bold), the deltas against the raw
backbone and the best linear baseline with their intervals, the "wmean" protocol, and the provenance.

Reads the compare stage's :class:`~flow_plugin.leaderboard.compare.Compared` and computes nothing; a seed
group is one row (mean ± standard deviation over its seeds).
"""

from __future__ import annotations

from flow_plugin.leaderboard.compare import Compared
from flow_plugin.leaderboard.models import AVERAGE, Leaderboard, ProtocolName
from flow_plugin.leaderboard.render.text import (
    BEST_LINEAR,
    CHART_CAPTION,
    INTERVAL_NOTE,
    NAME_COLUMNS,
    NO_CHART,
    PROTOCOL_NOTES,
    SEEDS_NOTE,
    delta_text,
    hardware_text,
    headline_text,
    name_cells,
    name_header,
    stats_text,
)
from flow_plugin.protocols import PROTOCOLS

#: the naming columns of the Δ and wmean tables (the scores table shows them all)
_DELTA_KEYS = ("backbone", "calibrator", "fit_corpus", "duplicates", "options")


def _mark(text: str, value: float | None, best: float | None) -> str:
    """Bold for the column's best (whether it is better than the runner-up, only a Δ's interval says)."""
    return f"**{text}**" if value is not None and value == best else text


def render_markdown(compared: Compared, stem: str | None = None, picture: bool = True) -> str:
    """The leaderboard as Markdown: its chart (``<stem>.png``, unless ``picture`` is false), who wins, scores (best
    per column in bold), deltas, wmean, provenance. A calibrator run with several seeds is one row: mean ± standard
    deviation over its seeds."""
    board, units, tasks = compared.board, compared.units, compared.tasks
    lines = [f"# Leaderboard: {board.name}", ""]
    lines += ([f"![Δ against the raw backbone per task, {board.name}]({stem or board.name}.png)", "",
               CHART_CAPTION] if picture else [NO_CHART]) + [""]
    if compared.headlines:
        lines += [f"- {headline_text(headline)}" for headline in compared.headlines]
        lines.append("")
    lines.append(
        f"Scores are Spearman correlations × 100 between cosine similarity and the gold scores, protocol "
        f"{PROTOCOL_NOTES['all']}, unless a column says otherwise. "
        "**Bold**: best in the column. Avg: mean over the row's tasks (a partial average shows how many)."
    )
    if board.seed_groups:
        lines += ["", SEEDS_NOTE]
    lines += ["", INTERVAL_NOTE]
    if compared.notes:
        lines += ["", "**Computed by an older procedure:** " + "; ".join(compared.notes) + "."]
    lines.append("")
    if not units:
        lines.append("_No results yet._")
        return "\n".join(lines) + "\n"

    lines += _scores_table(compared)
    lines += _delta_table(compared)
    for protocol in PROTOCOLS:
        lines += _linear_table(compared, protocol)
    lines += _wmean_table(compared)
    lines += _provenance(board, tasks)
    return "\n".join(lines) + "\n"


def _scores_table(compared: Compared) -> list[str]:
    """The scores, best per column in bold; a partial average says how many tasks it covers."""
    units, tasks, best = compared.units, compared.tasks, compared.best["all"]
    lines = ["| " + " | ".join([*name_header(), *tasks, "Avg"]) + " |",
             "|" + "|".join(["---"] * len(NAME_COLUMNS) + ["---:"] * (len(tasks) + 1)) + "|"]
    for unit in units:
        cells = name_cells(unit)
        for task in tasks:
            stats = unit.scores["all"][task]
            text = stats_text(stats)
            protocol = unit.first.scores[task].protocol if stats is not None else "all"
            if protocol != "all":
                text += f" ({protocol})"
            cells.append(_mark(text, stats.mean if stats else None, best[task]))
        stats = unit.scores["all"][AVERAGE]
        average = stats_text(stats)
        if stats is not None and not unit.complete:
            average += f" ({unit.first.n_tasks}/{len(tasks)})"
        cells.append(_mark(average, stats.mean if stats else None, best[AVERAGE]) if unit.complete else average)
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _delta_table(compared: Compared) -> list[str]:
    """Δ against the raw backbone, for the rows whose raw backbone is on the board."""
    tasks = compared.tasks
    with_delta = [unit for unit in compared.units if unit.deltas["all"]["raw"]]
    lines = ["", "## Δ against the raw backbone", ""]
    if not with_delta:
        return [*lines, "_No calibrated row has its raw backbone in this leaderboard._"]
    lines += ["Calibrated score minus the raw backbone's score on the same task, in points.", ""]
    lines.append("| " + " | ".join([*name_header(_DELTA_KEYS), *tasks, "Avg"]) + " |")
    lines.append("|" + "|".join(["---"] * len(_DELTA_KEYS) + ["---:"] * (len(tasks) + 1)) + "|")
    for unit in with_delta:
        found = unit.deltas["all"]["raw"]
        cells = name_cells(unit, _DELTA_KEYS) + [delta_text(found.get(column)) for column in compared.columns]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _wmean_table(compared: Compared) -> list[str]:
    """The scores under the wmean protocol, for the rows whose results carry it (none: no table)."""
    tasks = compared.tasks
    wmean_units = [unit for unit in compared.units if any(unit.scores["wmean"][task] is not None for task in tasks)]
    if not wmean_units:
        return []
    lines = ["", "## wmean protocol", "",
             f"The same correlations under protocol {PROTOCOL_NOTES['wmean']}; — where the result does not carry it.",
             ""]
    lines.append("| " + " | ".join([*name_header(_DELTA_KEYS), *tasks, "Avg"]) + " |")
    lines.append("|" + "|".join(["---"] * len(_DELTA_KEYS) + ["---:"] * (len(tasks) + 1)) + "|")
    for unit in wmean_units:
        cells = name_cells(unit, _DELTA_KEYS)
        cells += [stats_text(unit.scores["wmean"][column]) for column in compared.columns]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _provenance(board: Leaderboard, tasks: list[str]) -> list[str]:
    """Where the scores come from: mteb versions, dates, each task's data revisions, hardware, the update."""
    lines = ["", "## Provenance", ""]
    entries = [entry for row in board.rows for entry in row.scores.values()]
    versions = sorted({e.mteb_version or "unknown" for e in entries})
    dates = sorted(e.date for e in entries if e.date)
    lines.append(f"- mteb: {', '.join(versions)}")
    if dates:
        lines.append(f"- computed: {dates[0]} to {dates[-1]}" if dates[0] != dates[-1] else f"- computed: {dates[0]}")
    for task in tasks:
        revisions = sorted({row.scores[task].dataset_revision for row in board.rows if task in row.scores})
        lines.append(f"- {task} data: {', '.join(f'`{r}`' for r in revisions)}")
    hardware = sorted({hardware_text(e.hardware) for e in entries if e.hardware})
    unknown = sum(1 for e in entries if not e.hardware)
    for text in hardware:
        lines.append(f"- hardware: {text}")
    if unknown:
        lines.append(f"- hardware not recorded for {unknown} of {len(entries)} scores")
    lines.append(f"- updated: {board.updated} by {board.generated_by}")
    return lines


def _linear_table(compared: Compared, protocol: ProtocolName) -> list[str]:
    """The table of Δ against the best linear baseline (with intervals), for the rows that have one."""
    shown = [unit for unit in compared.units if unit.deltas[protocol]["linear"]]
    if not shown:
        return []
    lines = ["", f"## Δ against the best linear baseline ({protocol})", "",
             f"Score minus the score of {BEST_LINEAR} (here protocol \"{protocol}\"), in points: the mean over "
             "seeds of the row minus the baseline's.", ""]
    lines.append("| " + " | ".join([*name_header(_DELTA_KEYS), "Against", *compared.tasks, "Avg"]) + " |")
    lines.append("|" + "|".join(["---"] * (len(_DELTA_KEYS) + 1) + ["---:"] * (len(compared.tasks) + 1)) + "|")
    for unit in shown:
        cells = unit.deltas[protocol]["linear"]
        against = unit.against[protocol]["linear"]
        row = [*name_cells(unit, _DELTA_KEYS), against.calibrator if against is not None else "—"]
        row += [delta_text(cells.get(column), spread=False) for column in compared.columns]
        lines.append("| " + " | ".join(row) + " |")
    return lines
