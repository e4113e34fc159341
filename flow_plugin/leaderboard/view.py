"""The leaderboard page's view of a leaderboard: what each table cell and bar shows.

One entry per displayed row (a seed group is one entry, its seeds its members). For each protocol
("all", "wmean") and view ("scores"; "raw": Δ against the raw backbone; "linear": Δ against the
best linear baseline of the same backbone, loader kwargs and fit corpus) every column (the tasks,
then "average") gets a cell: the value (the mean over seeds), its spread (sample standard deviation
over seeds), an interval where the leaderboard gives one, whether a delta is significant
(:func:`significance`), and the text the page prints, formatted as in the Markdown.

Deltas the leaderboard holds (protocol "all" against raw: ``Row.delta``, ``SeedGroup.delta``) are
taken from it; the others are computed the same way: per member row, score minus baseline score per
task (4 decimals), "average" the mean of those per-task deltas, then mean and spread over the members.
The view itself is plain JSON data (the page embeds it).
"""

from __future__ import annotations

from typing import Any

from flow_plugin.calibration.names import LINEAR_BASELINES
from flow_plugin.leaderboard.models import Leaderboard, ProtocolName, ReferenceName, Row
from flow_plugin.leaderboard.public import display_name
from flow_plugin.leaderboard.render import _fmt, _with_spread
from flow_plugin.leaderboard.schema import is_number, round_points
from flow_plugin.leaderboard.seeds import spread
from flow_plugin.leaderboard.units import (
    AVERAGE,
    PROTOCOLS,
    Stats,
    Unit,
    best_linear,
    board_units,
    linear_reference,
    member_value,
    unit_interval,
)

VIEWS = ("scores", "raw", "linear")
_SHORT_TASKS = {"SentEvalSTSBenchmark": "STS-B", "SentEvalSICKR": "SICK-R"}


def task_label(task: str) -> str:
    """A column header: SentEval's task names without the prefix.

    >>> task_label("SentEvalSTS12"), task_label("SentEvalSTSBenchmark"), task_label("STS22")
    ('STS12', 'STS-B', 'STS22')
    """
    return _SHORT_TASKS.get(task, task.removeprefix("SentEval"))


def significance(delta: dict[str, Any]) -> dict[str, Any]:
    """Whether a delta counts: only its 95% interval (``ci95: [lo, hi]``) decides, significant when it
    excludes 0. Without an interval (its per-pair cosines were not kept) it is undecided, whatever
    the spread over seeds.

    >>> significance({"mean": 1.0, "std": 0.4, "n": 5, "ci95": [-0.1, 2.1]})
    {'significant': False, 'basis': 'ci95'}
    >>> significance({"mean": 1.0, "std": 0.4, "n": 5, "ci95": [0.2, 1.9]})
    {'significant': True, 'basis': 'ci95'}
    >>> significance({"mean": 1.0, "std": 0.1, "n": 5})
    {'significant': None, 'basis': None}
    """
    interval = delta.get("ci95")
    if isinstance(interval, (list, tuple)) and len(interval) == 2 and all(is_number(v) for v in interval):
        return {"significant": bool(interval[0] > 0 or interval[1] < 0), "basis": "ci95"}
    return {"significant": None, "basis": None}


def _stats(values: list[float]) -> Stats:
    """Mean and spread of one value per member (no spread for a single run)."""
    mean, std = spread(values)
    return Stats(round_points(mean), round_points(std) if len(values) > 1 else None, len(values))


def _cell(stats: Stats | None, delta: bool, ci95: tuple[float, float] | None = None) -> dict[str, Any] | None:
    """What the page shows of a value (a delta with its 95% interval ``ci95`` where the leaderboard gives one)."""
    if stats is None:
        return None
    cell: dict[str, Any] = {"value": stats.mean, "spread": stats.std if stats.n > 1 else None, "n": stats.n}
    text = _with_spread(_fmt(stats.mean, signed=delta), cell["spread"])
    if delta:
        judged = significance({"ci95": ci95})
        if ci95 is not None and judged["basis"] == "ci95":
            cell["ci95"] = [ci95[0], ci95[1]]
            text += f" [{_fmt(ci95[0], signed=True)}, {_fmt(ci95[1], signed=True)}]"
        cell.update(judged)
        if judged["significant"]:
            text += "*"
    cell["text"] = text
    return cell


def _deltas(rows: list[Row], baseline: dict[str, float], tasks: list[str], protocol: ProtocolName) -> dict[str, Stats]:
    """Per column, the stats over ``rows`` of score minus ``baseline`` (per task, 4 decimals;
    "average": the mean of each row's per-task deltas, over the tasks every row and the baseline have)."""
    values = {t: [v for r in rows if (v := member_value(r, t, protocol)) is not None] for t in tasks if t in baseline}
    common = [t for t, found in values.items() if len(found) == len(rows)]
    per_row = [{t: round_points(values[t][i] - baseline[t]) for t in common} for i in range(len(rows))]
    out = {t: _stats([d[t] for d in per_row]) for t in common}
    if common:
        out[AVERAGE] = _stats([round_points(sum(d.values()) / len(d)) for d in per_row])
    return out


def _raw_deltas(entry: Unit, rows: dict[str, Row], tasks: list[str], protocol: ProtocolName) -> dict[str, Stats]:
    """Δ against the raw backbone: the leaderboard's own deltas for protocol "all", computed for "wmean"."""
    baseline = rows.get(entry.first.baseline or "")
    if baseline is None:
        return {}
    if protocol == "all":
        return entry.recorded_deltas()
    base = {t: v for t in tasks if (v := member_value(baseline, t, protocol)) is not None}
    return _deltas(entry.members, base, tasks, protocol)


def _ci95(entry: Unit, protocol: ProtocolName, reference: ReferenceName, column: str) -> tuple[float, float] | None:
    """The leaderboard's 95% interval of a delta (see :mod:`.intervals`), None where it gives none."""
    found = unit_interval(entry, protocol, reference, column)
    return None if found is None else found.ci95


def page_view(board: Leaderboard) -> dict[str, Any]:
    """The page's data besides the leaderboard itself: columns and, per displayed row, its display
    columns, member row ids and a cell per protocol, view and column."""
    tasks = list(board.tasks)
    columns = [*tasks, AVERAGE]
    rows = {row.id: row for row in board.rows}
    entries = board_units(board)
    best = {protocol: best_linear(entries, protocol) for protocol in PROTOCOLS}
    out = []
    for entry in entries:
        cells: dict[str, Any] = {}
        against: dict[str, Any] = {}
        for protocol in PROTOCOLS:
            raw = _raw_deltas(entry, rows, tasks, protocol)
            linear_entry = linear_reference(entry, best[protocol])
            linear = {} if linear_entry is None else _deltas(entry.members, linear_entry.means(tasks, protocol), tasks,
                                                             protocol)
            cells[protocol] = {
                "scores": {c: _cell(entry.score_stats(c, protocol), delta=False) for c in columns},
                "raw": {c: _cell(raw.get(c), True, _ci95(entry, protocol, "raw", c)) for c in columns},
                "linear": {c: _cell(linear.get(c), True, _ci95(entry, protocol, "linear", c)) for c in columns},
            }
            against[protocol] = {
                "raw": "raw" if raw else None,
                "linear": linear_entry.columns["calibrator"] if linear_entry is not None and linear else None,
            }
        out.append({"key": entry.key, "rows": [row.id for row in entry.members], "columns": entry.columns,
                    "name": entry.name, "short_name": display_name(entry.columns, backbone=False),
                    "seeds": entry.group.seeds if entry.group else None, "against": against, "cells": cells})
    return {
        "columns": [{"key": c, "label": "Avg" if c == AVERAGE else task_label(c),
                     "title": "Average over the tasks" if c == AVERAGE else c} for c in columns],
        "protocols": list(PROTOCOLS),
        "views": list(VIEWS),
        "linear": list(LINEAR_BASELINES),
        "entries": out,
    }
