"""The confidence interval of every delta a leaderboard reports, from the per-pair cosines kept
with the results (:mod:`flow_plugin.integrations.mteb.pair_scores`).

Each unit (a row, or a seed group) is compared with the raw backbone of the same weights and
loader kwargs and with the best linear baseline of the same backbone and fit corpus
(:mod:`.units`), under both protocols, per task and averaged over the tasks both have. The
interval is the paired, stratified, two-stage percentile bootstrap of
:mod:`flow_plugin.evaluation.intervals`: every unit is scored on the same resampled pairs of a
task (drawn once per task), a seeded unit's seeds are drawn with replacement (once per unit,
shared by its tasks), and the delta of two units on one resample is the difference of their
scores on it; "average" is the mean of the per-task deltas of one resample.

Stored on the unit's JSON record (the row, or its seed group)::

    "intervals": {"all": {"raw": {"against": <row id>, "delta": {task: Δ, ..., "average": Δ},
                                  "ci95": {task: [low, high], ...}, "significant": {task: bool, ...}},
                          "linear": {"against": <unit id>, "calibrator": "sn-natsv", ...}},
                  "wmean": {...}}

in points (4 decimals). The board's ``interval_method`` says how they were computed. A unit
whose pairs (or whose reference's pairs) are missing for a task gets no interval for it; one
that has none at all is listed by :func:`procedure_notes`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from flow_plugin.leaderboard.units import AVERAGE, PROTOCOLS, Unit, best_linear, board_units, linear_reference
from flow_plugin.evaluation.intervals import (
    DEFAULT_CONFIDENCE,
    DEFAULT_RESAMPLES,
    SetResampler,
    percentile_interval,
    seed_draws,
    side_distribution,
    stable_key,
)
from flow_plugin.integrations.mteb.pair_scores import PairScores

METHOD = ("paired, stratified, two-stage percentile bootstrap over the test pairs of each subset and the seeds "
          "(flow_plugin.evaluation.intervals)")


def interval_method(n_resamples: int = DEFAULT_RESAMPLES, confidence: float = DEFAULT_CONFIDENCE,
                    seed: int = 0) -> dict[str, Any]:
    return {"method": METHOD, "confidence": confidence, "n_resamples": n_resamples, "seed": seed}


def _distributions(units: list[Unit], tasks: list[str], pairs: Mapping[tuple[str, str], PairScores],
                   settings: dict[str, Any]) -> dict[tuple[str, str, str], tuple[float, np.ndarray]]:
    """(unit key, task, protocol) -> (reported score, its bootstrap distribution), for every unit whose
    members all have pairs of the task (the same gold scores as every other unit's)."""
    n_resamples, seed = settings["n_resamples"], settings["seed"]
    draws = {unit.key: seed_draws(len(unit.members), n_resamples, np.random.default_rng([seed, 1, stable_key(unit.key)]))
             for unit in units}
    out: dict[tuple[str, str, str], tuple[float, np.ndarray]] = {}
    for task in tasks:
        scored = {unit.key: [pairs.get((row["id"], task)) for row in unit.members] for unit in units}
        scored = {key: found for key, found in scored.items() if found and None not in found}
        if not scored:
            continue
        first = next(iter(scored.values()))[0]
        same_data = {key: found for key, found in scored.items()
                     if all(p.subset_sizes == first.subset_sizes and np.array_equal(p.gold, first.gold) for p in found)}
        resampler = SetResampler(first.subsets(first.gold), n_resamples, np.random.default_rng([seed, 0, stable_key(task)]))
        for key, found in same_data.items():
            runs = [p.subsets(p.cosine) for p in found]
            for protocol in PROTOCOLS:
                out[(key, task, protocol)] = side_distribution(resampler, runs, draws[key], protocol)
    return out


def _compare(unit: Unit, reference: Unit, tasks: list[str], protocol: str,
             found: dict[tuple[str, str, str], tuple[float, np.ndarray]], confidence: float) -> dict[str, Any] | None:
    common = [t for t in tasks if (unit.key, t, protocol) in found and (reference.key, t, protocol) in found]
    if not common:
        return None
    deltas = {}  # column -> (reported delta, its resampled deltas)
    for task in common:
        (point_a, a), (point_b, b) = found[(unit.key, task, protocol)], found[(reference.key, task, protocol)]
        deltas[task] = (point_a - point_b, a - b)
    deltas[AVERAGE] = (float(np.mean([d[0] for d in deltas.values()])), np.mean([d[1] for d in deltas.values()], axis=0))
    result: dict[str, Any] = {"against": reference.key, "delta": {}, "ci95": {}, "significant": {}}
    for column, (point, resampled) in deltas.items():
        interval = percentile_interval(float(point), resampled, confidence)
        estimate, low, high = interval.points()
        result["delta"][column] = estimate
        result["ci95"][column] = [low, high]
        result["significant"][column] = interval.significant
    if len(common) < len(tasks):
        result["tasks"] = common  # the average is over these only
    return result


def annotate_intervals(board: dict[str, Any], pairs: Mapping[tuple[str, str], PairScores], *,
                       n_resamples: int = DEFAULT_RESAMPLES, confidence: float = DEFAULT_CONFIDENCE,
                       seed: int = 0) -> int:
    """Compute the intervals of every unit whose pairs (and its references' pairs) are in ``pairs``
    ((row id, task) -> pairs), in place; a unit's earlier intervals are kept when none could be
    computed now and its references are the same. Returns the number of units given intervals."""
    settings = interval_method(n_resamples, confidence, seed)
    tasks = list(board["tasks"])
    units = board_units(board)
    rows = {row["id"]: row for row in board["rows"]}
    unit_of_row = {row["id"]: unit for unit in units for row in unit.members}
    found = _distributions(units, tasks, pairs, settings)
    best = {protocol: best_linear(units, protocol) for protocol in PROTOCOLS}
    computed = 0
    for unit in units:
        old = unit.record.pop("intervals", None)
        for member in unit.members:
            if member is not unit.record:
                member.pop("intervals", None)
        if unit.calibrator == "raw":
            continue
        baseline = rows.get(unit.first.get("baseline") or "")
        references = {protocol: {"raw": unit_of_row.get(baseline["id"]) if baseline else None,
                                 "linear": linear_reference(unit, best[protocol])} for protocol in PROTOCOLS}
        intervals: dict[str, Any] = {}
        for protocol in PROTOCOLS:
            for name, reference in references[protocol].items():
                compared = None if reference is None else _compare(unit, reference, tasks, protocol, found, confidence)
                if compared is not None:
                    if name == "linear":
                        compared["calibrator"] = reference.calibrator
                    intervals.setdefault(protocol, {})[name] = compared
        if intervals:
            unit.record["intervals"] = intervals
            computed += 1
        elif old and _same_references(old, references):
            unit.record["intervals"] = old
    if any("intervals" in unit.record for unit in units):
        board["interval_method"] = settings
    else:
        board.pop("interval_method", None)
    return computed


def _same_references(old: dict[str, Any], references: dict[str, dict[str, Unit | None]]) -> bool:
    for protocol, by_name in old.items():
        for name, compared in by_name.items():
            reference = references.get(protocol, {}).get(name)
            if reference is None or compared.get("against") != reference.key:
                return False
    return True
