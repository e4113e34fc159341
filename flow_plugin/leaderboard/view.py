"""The leaderboard page's view of a leaderboard: what each table cell and bar shows.

One entry per displayed row (a seed group is one entry, its seeds its members). For each protocol
("all", "wmean") and view ("scores"; "raw": Δ against the raw backbone; "linear": Δ against the
best linear baseline of the same backbone, loader kwargs and fit corpus) every column (the tasks,
then "average") gets a cell: the value (the mean over seeds), its spread (sample standard deviation
over seeds), an interval where the leaderboard gives one, whether a delta is significant
(:func:`significance`), and the text the page prints, formatted as in the Markdown.

The deltas are :class:`~.units.BoardDeltas`'s: a Δ with an interval is the one computed with it, over the
same tasks (an average over fewer tasks than the board's says which it leaves out); the others are the
differences of the scores, as there described.
The view itself is plain JSON data (the page embeds it).
"""

from __future__ import annotations

from typing import Any

from flow_plugin.calibration.names import LINEAR_BASELINES
from flow_plugin.leaderboard.models import Leaderboard
from flow_plugin.leaderboard.public import display_name
from flow_plugin.leaderboard.render import _fmt, _with_spread
from flow_plugin.leaderboard.schema import is_number
from flow_plugin.leaderboard.units import AVERAGE, PROTOCOLS, BoardDeltas, DeltaCell, Stats, task_label

VIEWS = ("scores", "raw", "linear")


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


def _score_cell(stats: Stats | None) -> dict[str, Any] | None:
    """What the page shows of a score."""
    if stats is None:
        return None
    spread = stats.std if stats.n > 1 else None
    return {"value": stats.mean, "spread": spread, "n": stats.n, "text": _with_spread(_fmt(stats.mean), spread)}


def _delta_cell(found: DeltaCell | None) -> dict[str, Any] | None:
    """What the page shows of a Δ: its value and spread, its 95% interval where the leaderboard gives one,
    whether it is significant, and (an average over fewer tasks than the board's) the tasks it leaves out."""
    if found is None:
        return None
    stats = found.stats
    cell: dict[str, Any] = {"value": stats.mean, "spread": stats.std if stats.n > 1 else None, "n": stats.n}
    text = _with_spread(_fmt(stats.mean, signed=True), cell["spread"])
    ci95 = found.interval.ci95 if found.interval is not None else None
    judged = significance({"ci95": ci95})
    if ci95 is not None and judged["basis"] == "ci95":
        cell["ci95"] = [ci95[0], ci95[1]]
        text += f" [{_fmt(ci95[0], signed=True)}, {_fmt(ci95[1], signed=True)}]"
    cell.update(judged)
    if judged["significant"]:
        text += "*"
    if found.without:
        cell["without"] = list(found.without)
    cell["text"] = text + found.note()
    return cell


def page_view(board: Leaderboard) -> dict[str, Any]:
    """The page's data besides the leaderboard itself: columns and, per displayed row, its display
    columns, member row ids and a cell per protocol, view and column."""
    deltas = BoardDeltas(board)
    columns = [*deltas.tasks, AVERAGE]
    out = []
    for entry in deltas.units:
        cells: dict[str, Any] = {}
        against: dict[str, Any] = {}
        for protocol in PROTOCOLS:
            raw = deltas.cells(entry, protocol, "raw")
            linear = deltas.cells(entry, protocol, "linear")
            linear_entry = deltas.reference(entry, protocol, "linear")
            cells[protocol] = {
                "scores": {c: _score_cell(entry.score_stats(c, protocol)) for c in columns},
                "raw": {c: _delta_cell(raw.get(c)) for c in columns},
                "linear": {c: _delta_cell(linear.get(c)) for c in columns},
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
