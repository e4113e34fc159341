"""The leaderboard page's view of a leaderboard: what each table cell and bar shows.

One entry per displayed row (a seed group is one entry, its seeds its members). For each protocol
("all", "wmean") and view ("scores"; "raw": Δ against the raw backbone; "linear": Δ against the
best linear baseline of the same backbone, loader kwargs and fit corpus) every column (the tasks,
then "average") gets a cell: the value (the mean over seeds), its spread (sample standard deviation
over seeds), an interval where the leaderboard gives one, whether a delta is significant
(:func:`significance`), and the text the page prints, formatted as in the Markdown.

Deltas the leaderboard JSON holds (protocol "all" against raw: ``rows[].delta``,
``seed_groups[].delta``) are taken from it; the others are computed the same way: per member row,
score minus baseline score per task (4 decimals), "average" the mean of those per-task deltas, then
mean and spread over the members. Standard library only.
"""

from __future__ import annotations

from typing import Any

from flow_plugin.calibration.names import LINEAR_BASELINES
from flow_plugin.leaderboard.public import display_name
from flow_plugin.leaderboard.render import _fmt, _with_spread
from flow_plugin.leaderboard.schema import is_number, round_points
from flow_plugin.leaderboard.seeds import spread
from flow_plugin.leaderboard.units import (
    AVERAGE,
    PROTOCOLS,
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


def _stats(values: list[float]) -> dict[str, Any]:
    """Mean and spread of one value per member (no spread for a single run)."""
    mean, std = spread(values)
    return {"mean": round_points(mean), "std": round_points(std) if len(values) > 1 else None, "n": len(values)}


def _cell(stats: dict[str, Any] | None, delta: bool) -> dict[str, Any] | None:
    if stats is None:
        return None
    cell = {"value": stats["mean"], "spread": stats.get("std") if stats.get("n", 1) > 1 else None, "n": stats.get("n", 1)}
    text = _with_spread(_fmt(cell["value"], signed=delta), cell["spread"])
    if delta:
        interval = stats.get("ci95")
        judged = significance(stats)
        if judged["basis"] == "ci95":
            cell["ci95"] = [interval[0], interval[1]]
            text += f" [{_fmt(interval[0], signed=True)}, {_fmt(interval[1], signed=True)}]"
        cell.update(judged)
        if judged["significant"]:
            text += "*"
    cell["text"] = text
    return cell


def _deltas(rows: list[dict[str, Any]], baseline: dict[str, float], tasks: list[str],
            protocol: str) -> dict[str, dict[str, Any]]:
    """Per column, the stats over ``rows`` of score minus ``baseline`` (per task, 4 decimals;
    "average": the mean of each row's per-task deltas, over the tasks every row and the baseline have)."""
    common = [t for t in tasks if t in baseline and all(member_value(r, t, protocol) is not None for r in rows)]
    per_row = [{t: round_points(member_value(r, t, protocol) - baseline[t]) for t in common} for r in rows]
    out = {t: _stats([d[t] for d in per_row]) for t in common}
    if common:
        out[AVERAGE] = _stats([round_points(sum(d.values()) / len(d)) for d in per_row])
    return out


def _raw_deltas(entry: Unit, rows: dict[str, dict[str, Any]], tasks: list[str],
                protocol: str) -> dict[str, dict[str, Any]]:
    """Δ against the raw backbone: the JSON's own deltas for protocol "all", computed for "wmean"."""
    baseline = rows.get(entry.first.get("baseline") or "")
    if baseline is None:
        return {}
    if protocol == "all":
        if entry.group is not None:
            return {c: dict(stats) for c, stats in (entry.group.get("delta") or {}).items()}
        return {c: {"mean": v, "std": None, "n": 1} for c, v in (entry.first.get("delta") or {}).items()}
    base = {t: v for t in tasks if (v := member_value(baseline, t, protocol)) is not None}
    return _deltas(entry.members, base, tasks, protocol)


def _with_intervals(deltas: dict[str, dict[str, Any]], entry: Unit, protocol: str,
                    reference: str) -> dict[str, dict[str, Any]]:
    """The deltas with the leaderboard's 95% interval of each column added (see :mod:`.intervals`)."""
    for column, stats in deltas.items():
        found = unit_interval(entry, protocol, reference, column)
        if found is not None:
            stats["ci95"] = found["ci95"]
    return deltas


def page_view(board: dict[str, Any]) -> dict[str, Any]:
    """The page's data besides the leaderboard itself: columns and, per displayed row, its display
    columns, member row ids and a cell per protocol, view and column."""
    tasks = list(board["tasks"])
    columns = [*tasks, AVERAGE]
    rows = {row["id"]: row for row in board["rows"]}
    entries = board_units(board)
    best = {protocol: best_linear(entries, protocol) for protocol in PROTOCOLS}
    out = []
    for entry in entries:
        cells: dict[str, Any] = {}
        against: dict[str, Any] = {}
        for protocol in PROTOCOLS:
            raw = _with_intervals(_raw_deltas(entry, rows, tasks, protocol), entry, protocol, "raw")
            linear_entry = linear_reference(entry, best[protocol])
            linear = ({} if linear_entry is None
                      else _with_intervals(_deltas(entry.members, linear_entry.means(tasks, protocol), tasks, protocol),
                                           entry, protocol, "linear"))
            cells[protocol] = {
                "scores": {c: _cell(entry.score_stats(c, protocol), delta=False) for c in columns},
                "raw": {c: _cell(raw.get(c), delta=True) for c in columns},
                "linear": {c: _cell(linear.get(c), delta=True) for c in columns},
            }
            against[protocol] = {
                "raw": "raw" if raw else None,
                "linear": linear_entry.columns["calibrator"] if linear_entry is not None and linear else None,
            }
        out.append({"key": entry.key, "rows": [row["id"] for row in entry.members], "columns": entry.columns,
                    "name": entry.name, "short_name": display_name(entry.columns, backbone=False), "seeds": entry.group["seeds"] if entry.group else None,
                    "against": against, "cells": cells})
    return {
        "columns": [{"key": c, "label": "Avg" if c == AVERAGE else task_label(c),
                     "title": "Average over the tasks" if c == AVERAGE else c} for c in columns],
        "protocols": list(PROTOCOLS),
        "views": list(VIEWS),
        "linear": list(LINEAR_BASELINES),
        "entries": out,
    }

