"""Seeded calibrators (the flow and its variants) run with several seeds: each seed is its own
row (an MTEB experiment ``calibrator_params={"seed": s}``); this module groups the rows that
differ only in the seed and gives each group's mean and standard deviation over seeds.

Whether a difference is significant is not decided here: only a confidence interval that
excludes 0 decides it (:mod:`.intervals`), which a group keeps across re-derivations.

>>> spread([80.0, 81.0, 82.0])
(81.0, 1.0)
>>> spread([80.0])
(80.0, 0.0)
"""

from __future__ import annotations

import functools
import json
import statistics
from typing import Any

from flow_plugin.leaderboard.schema import round_points
from flow_plugin.catalog.registry import MODEL_PREFIX


def spread(values: list[float]) -> tuple[float, float]:
    """(mean, sample standard deviation) of ``values`` (the deviation of one value is 0)."""
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


@functools.lru_cache(maxsize=None)
def _default_seed(calibrator: str) -> int | None:
    """The seed a calibrator uses when none is given (``None`` for unseeded or unknown ones)."""
    from flow_plugin.calibration import CALIBRATOR_NAMES, default_seed

    return default_seed(calibrator) if calibrator in CALIBRATOR_NAMES else None


def row_seed(row: dict[str, Any]) -> int | None:
    """The seed a row's calibrator ran with, ``None`` for a calibrator without one."""
    seed = (row.get("calibrator_params") or {}).get("seed")
    if seed is None and row.get("model", "").startswith(MODEL_PREFIX):
        seed = _default_seed(row.get("calibrator", ""))
    return seed


def _group_key(row: dict[str, Any]) -> str:
    kwargs = json.loads(json.dumps(row.get("experiment_kwargs") or {}))
    params = kwargs.get("calibrator_params")
    if isinstance(params, dict):
        params.pop("seed", None)
        if not params:
            kwargs.pop("calibrator_params")
    return json.dumps([row["model"], row["revision"], kwargs], sort_keys=True)


def _stats(values: list[float]) -> dict[str, Any]:
    mean, std = spread(values)
    return {"mean": round_points(mean), "std": round_points(std), "n": len(values), "values": values}


def seed_groups(board: dict[str, Any], max_seeds: int | None = None) -> list[dict[str, Any]]:
    """The groups of two or more rows that differ only in their seed (at most ``max_seeds``
    seeds each, the lowest first), with mean and standard deviation of every score, average
    and Δ against the raw backbone."""
    grouped: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    for row in board["rows"]:
        seed = row_seed(row)
        if seed is not None:
            grouped.setdefault(_group_key(row), []).append((seed, row))
    groups = []
    for members in grouped.values():
        members.sort(key=lambda item: item[0])
        members = members[:max_seeds] if max_seeds else members
        if len(members) < 2:
            continue
        rows = [row for _, row in members]
        tasks = [task for task in board["tasks"] if all(task in row["scores"] for row in rows)]
        group: dict[str, Any] = {
            "id": f"{rows[0]['id']} (seeds {members[0][0]}-{members[-1][0]})",
            "model": rows[0]["model"],
            "calibrator": rows[0].get("calibrator"),
            "seeds": [seed for seed, _ in members],
            "rows": [row["id"] for row in rows],
            "scores": {task: _stats([row["scores"][task]["score"] for row in rows]) for task in tasks},
            "wmean": {task: _stats([row["scores"][task]["wmean"] for row in rows]) for task in tasks
                      if all(row["scores"][task].get("wmean") is not None for row in rows)},
        }
        if tasks and all(row.get("average") is not None for row in rows):
            group["average"] = _stats([round_points(sum(row["scores"][t]["score"] for t in tasks) / len(tasks))
                                       for row in rows])
        if len(group["wmean"]) == len(tasks) and tasks:
            group["average_wmean"] = _stats([round_points(sum(row["scores"][t]["wmean"] for t in tasks) / len(tasks))
                                             for row in rows])
        if all(row.get("delta") for row in rows) and len({row["baseline"] for row in rows}) == 1:
            group["baseline"] = rows[0]["baseline"]
            group["delta"] = {}
            for task in [*tasks, "average"]:
                if all(task in row["delta"] for row in rows):
                    group["delta"][task] = _stats([row["delta"][task] for row in rows])
        groups.append(group)
    return groups


def annotate(board: dict[str, Any], max_seeds: int | None = None) -> None:
    """Set ``board["seed_groups"]`` (left out when no calibrator ran with several seeds)."""
    groups = seed_groups(board, max_seeds)
    earlier = {group["id"]: group for group in board.get("seed_groups") or []}
    for group in groups:  # the intervals are computed from the pairs, which only a merge reads
        kept = earlier.get(group["id"], {})
        if "intervals" in kept and kept.get("rows") == group["rows"]:
            group["intervals"] = kept["intervals"]
    if groups:
        board["seed_groups"] = groups
        if max_seeds:
            board["max_seeds"] = max_seeds
    else:
        board.pop("seed_groups", None)
        board.pop("max_seeds", None)


def display_rows(board: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows to show: every seed group as one row (its means, with their standard
    deviations), in the place of its first member; other rows as they are."""
    groups = board.get("seed_groups") or []
    member_of = {row_id: group for group in groups for row_id in group["rows"]}
    shown: list[dict[str, Any]] = []
    for row in board["rows"]:
        group = member_of.get(row["id"])
        if group is None:
            shown.append(row)
        elif row["id"] == group["rows"][0]:
            shown.append(_group_row(row, group))
    return shown


def _group_row(first: dict[str, Any], group: dict[str, Any]) -> dict[str, Any]:
    row = {key: value for key, value in first.items() if key not in ("scores", "delta")}
    row["label"] = f"{first['model']} ({len(group['seeds'])} seeds)"
    row["seeds"] = group["seeds"]
    row["scores"] = {
        task: {**first["scores"][task], "score": stats["mean"], "std": stats["std"],
               "wmean": group["wmean"].get(task, {}).get("mean"), "wmean_std": group["wmean"].get(task, {}).get("std")}
        for task, stats in group["scores"].items()
    }
    row["average"] = group.get("average", {}).get("mean")
    row["average_std"] = group.get("average", {}).get("std")
    row["average_wmean"] = group.get("average_wmean", {}).get("mean")
    row["average_wmean_std"] = group.get("average_wmean", {}).get("std")
    row["complete"] = first["complete"] and len(group["scores"]) == len(first["scores"])
    if "intervals" in group:
        row["intervals"] = group["intervals"]
    if group.get("delta"):
        row["delta"] = {task: stats["mean"] for task, stats in group["delta"].items()}
        row["delta_std"] = {task: stats["std"] for task, stats in group["delta"].items()}
    else:
        row["delta"] = None
    return row
