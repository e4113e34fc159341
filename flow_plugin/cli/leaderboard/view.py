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

from flow_plugin.cli.leaderboard.merge import baseline_key
from flow_plugin.cli.leaderboard.public import display_columns, display_name
from flow_plugin.cli.leaderboard.render import _fmt, _with_spread
from flow_plugin.cli.leaderboard.schema import is_number, round_points
from flow_plugin.cli.leaderboard.seeds import spread

#: the linear baselines a calibrator is compared with in the "linear" view
LINEAR = ("sn", "natsv", "sn-natsv", "whiten")
PROTOCOLS = ("all", "wmean")
VIEWS = ("scores", "raw", "linear")
AVERAGE = "average"
_SHORT_TASKS = {"SentEvalSTSBenchmark": "STS-B", "SentEvalSICKR": "SICK-R"}


def task_label(task: str) -> str:
    """A column header: SentEval's task names without the prefix.

    >>> task_label("SentEvalSTS12"), task_label("SentEvalSTSBenchmark"), task_label("STS22")
    ('STS12', 'STS-B', 'STS22')
    """
    return _SHORT_TASKS.get(task, task.removeprefix("SentEval"))


def significance(delta: dict[str, Any]) -> dict[str, Any]:
    """Whether a delta counts, and on what basis. An interval decides where the delta carries one
    (``ci95: [lo, hi]``): significant when it excludes 0. Otherwise the spread over seeds does:
    significant when ``|mean| > std`` (two or more seeds). A single run has neither: undecided.

    >>> significance({"mean": 1.0, "std": 0.4, "n": 5, "ci95": [-0.1, 2.1]})
    {'significant': False, 'basis': 'ci95'}
    >>> significance({"mean": 1.0, "std": 0.4, "n": 5}), significance({"mean": 1.0, "n": 1})
    ({'significant': True, 'basis': 'spread'}, {'significant': None, 'basis': None})
    """
    interval = delta.get("ci95")
    if isinstance(interval, (list, tuple)) and len(interval) == 2 and all(is_number(v) for v in interval):
        return {"significant": bool(interval[0] > 0 or interval[1] < 0), "basis": "ci95"}
    if delta.get("n", 1) > 1 and is_number(delta.get("std")):
        return {"significant": bool(abs(delta["mean"]) > delta["std"]), "basis": "spread"}
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


def _value(row: dict[str, Any], column: str, protocol: str) -> float | None:
    """A member row's score (or average) under a protocol."""
    if column == AVERAGE:
        return row.get("average" if protocol == "all" else "average_wmean")
    entry = row["scores"].get(column)
    if entry is None:
        return None
    return entry.get("score" if protocol == "all" else "wmean")


def _deltas(rows: list[dict[str, Any]], baseline: dict[str, float], tasks: list[str],
            protocol: str) -> dict[str, dict[str, Any]]:
    """Per column, the stats over ``rows`` of score minus ``baseline`` (per task, 4 decimals;
    "average": the mean of each row's per-task deltas, over the tasks every row and the baseline have)."""
    common = [t for t in tasks if t in baseline and all(_value(r, t, protocol) is not None for r in rows)]
    per_row = [{t: round_points(_value(r, t, protocol) - baseline[t]) for t in common} for r in rows]
    out = {t: _stats([d[t] for d in per_row]) for t in common}
    if common:
        out[AVERAGE] = _stats([round_points(sum(d.values()) / len(d)) for d in per_row])
    return out


class _Entry:
    """A displayed row: a plain row, or a seed group (its first member's description, every member's scores)."""

    def __init__(self, first: dict[str, Any], members: list[dict[str, Any]], group: dict[str, Any] | None):
        self.first, self.members, self.group = first, members, group
        self.key = group["id"] if group else first["id"]
        self.columns = display_columns(first, group["seeds"] if group else None)
        self.name = display_name(self.columns)
        self.linear_key = baseline_key(first) + "|" + str(first.get("fit_corpus"))

    def score_stats(self, column: str, protocol: str) -> dict[str, Any] | None:
        if self.group is None:
            value = _value(self.first, column, protocol)
            return None if value is None else {"mean": value, "std": None, "n": 1}
        if column == AVERAGE:
            return self.group.get("average" if protocol == "all" else "average_wmean")
        return self.group["scores" if protocol == "all" else "wmean"].get(column)

    def means(self, tasks: list[str], protocol: str) -> dict[str, float]:
        found = {t: self.score_stats(t, protocol) for t in tasks}
        return {t: stats["mean"] for t, stats in found.items() if stats is not None}


def _raw_deltas(entry: _Entry, rows: dict[str, dict[str, Any]], tasks: list[str],
                protocol: str) -> dict[str, dict[str, Any]]:
    """Δ against the raw backbone: the JSON's own deltas for protocol "all", computed for "wmean"."""
    baseline = rows.get(entry.first.get("baseline") or "")
    if baseline is None:
        return {}
    if protocol == "all":
        if entry.group is not None:
            return dict(entry.group.get("delta") or {})
        delta, intervals = entry.first.get("delta") or {}, entry.first.get("delta_ci95") or {}
        return {c: {"mean": v, "std": None, "n": 1, **({"ci95": intervals[c]} if c in intervals else {})}
                for c, v in delta.items()}
    base = {t: v for t in tasks if (v := _value(baseline, t, protocol)) is not None}
    return _deltas(entry.members, base, tasks, protocol)


def _best_linear(entries: list[_Entry], tasks: list[str], protocol: str) -> dict[str, _Entry]:
    """linear key -> the complete linear-baseline entry with the highest average under ``protocol``."""
    best: dict[str, tuple[float, _Entry]] = {}
    for entry in entries:
        if entry.first.get("calibrator") not in LINEAR or not entry.first.get("complete"):
            continue
        average = entry.score_stats(AVERAGE, protocol)
        if average is None:
            continue
        if entry.linear_key not in best or average["mean"] > best[entry.linear_key][0]:
            best[entry.linear_key] = (average["mean"], entry)
    return {key: entry for key, (_, entry) in best.items()}


def _entries(board: dict[str, Any]) -> list[_Entry]:
    """The displayed rows in the leaderboard's order: a seed group in the place of its first member."""
    rows = {row["id"]: row for row in board["rows"]}
    member_of = {row_id: group for group in board.get("seed_groups") or [] for row_id in group["rows"]}
    entries = []
    for row in board["rows"]:
        group = member_of.get(row["id"])
        if group is None:
            entries.append(_Entry(row, [row], None))
        elif row["id"] == group["rows"][0]:
            entries.append(_Entry(row, [rows[row_id] for row_id in group["rows"]], group))
    return entries


def page_view(board: dict[str, Any]) -> dict[str, Any]:
    """The page's data besides the leaderboard itself: columns and, per displayed row, its display
    columns, member row ids and a cell per protocol, view and column."""
    tasks = list(board["tasks"])
    columns = [*tasks, AVERAGE]
    rows = {row["id"]: row for row in board["rows"]}
    entries = _entries(board)
    best = {protocol: _best_linear(entries, tasks, protocol) for protocol in PROTOCOLS}
    out = []
    for entry in entries:
        cells: dict[str, Any] = {}
        against: dict[str, Any] = {}
        for protocol in PROTOCOLS:
            raw = _raw_deltas(entry, rows, tasks, protocol)
            linear_entry = best[protocol].get(entry.linear_key) if entry.first.get("calibrator") != "raw" else None
            linear = ({} if linear_entry is None
                      else _deltas(entry.members, linear_entry.means(tasks, protocol), tasks, protocol))
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
        "linear": list(LINEAR),
        "entries": out,
    }

