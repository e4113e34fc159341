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

from flow_plugin.leaderboard.models import Leaderboard, Row, SeedGroup, SeedSpread
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


def row_seed(row: Row) -> int | None:
    """The seed a row's calibrator ran with, ``None`` for a calibrator without one."""
    seed: int | None = row.calibrator_params.get("seed")
    if seed is None and row.model.startswith(MODEL_PREFIX):
        seed = _default_seed(row.calibrator)
    return seed


def _group_key(row: Row) -> str:
    kwargs = json.loads(json.dumps(row.experiment_kwargs))
    params = kwargs.get("calibrator_params")
    if isinstance(params, dict):
        params.pop("seed", None)
        if not params:
            kwargs.pop("calibrator_params")
    # the fit corpus label carries a sentence file's hash: two files of one name are two groups
    return json.dumps([row.model, row.revision, kwargs, row.fit_corpus], sort_keys=True)


def _stats(values: list[float]) -> SeedSpread:
    mean, std = spread(values)
    return SeedSpread(mean=round_points(mean), std=round_points(std), n=len(values), values=values)


def seed_groups(board: Leaderboard, max_seeds: int | None = None) -> list[SeedGroup]:
    """The groups of two or more rows that differ only in their seed (at most ``max_seeds``
    seeds each, the lowest first), with mean and standard deviation of every score, average
    and Δ against the raw backbone."""
    grouped: dict[str, list[tuple[int, Row]]] = {}
    for row in board.rows:
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
        tasks = [task for task in board.tasks if all(task in row.scores for row in rows)]
        wmeans = {task: [w for row in rows if (w := row.scores[task].wmean) is not None] for task in tasks}
        group = SeedGroup(
            id=f"{rows[0].id} (seeds {members[0][0]}-{members[-1][0]})",
            model=rows[0].model,
            calibrator=rows[0].calibrator,
            seeds=[seed for seed, _ in members],
            rows=[row.id for row in rows],
            scores={task: _stats([row.scores[task].score for row in rows]) for task in tasks},
            wmean={task: _stats(values) for task, values in wmeans.items() if len(values) == len(rows)},
        )
        if tasks and all(row.average is not None for row in rows):
            group.average = _stats([round_points(sum(row.scores[t].score for t in tasks) / len(tasks)) for row in rows])
        if tasks and len(group.wmean) == len(tasks):
            group.average_wmean = _stats([round_points(sum(wmeans[t][i] for t in tasks) / len(tasks))
                                          for i in range(len(rows))])
        deltas = [row.delta for row in rows if row.delta]
        if len(deltas) == len(rows) and len({row.baseline for row in rows}) == 1:
            group.baseline = rows[0].baseline
            group.delta = {task: _stats([delta[task] for delta in deltas]) for task in [*tasks, "average"]
                           if all(task in delta for delta in deltas)}
        groups.append(group)
    return groups


def annotate(board: Leaderboard, max_seeds: int | None = None) -> None:
    """Set ``board.seed_groups`` (None, left out of the file, when no calibrator ran with several seeds)."""
    groups = seed_groups(board, max_seeds)
    earlier = {group.id: group for group in board.seed_groups or []}
    for group in groups:  # the intervals are computed from the pairs, which only a merge reads
        kept = earlier.get(group.id)
        if kept is not None and kept.intervals is not None and kept.rows == group.rows:
            group.intervals = kept.intervals
    if groups:
        board.seed_groups = groups
        if max_seeds:
            board.max_seeds = max_seeds
    else:
        board.seed_groups = None
        board.max_seeds = None
