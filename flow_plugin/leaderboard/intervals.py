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

Stored as the unit's ``intervals`` (its :class:`~.models.Row`, or its :class:`~.models.SeedGroup`):
protocol -> reference -> a :class:`~.models.Comparison`, which the file writes as::

    "intervals": {"all": {"raw": {"against": <row id>, "delta": {task: Δ, ..., "average": Δ},
                                  "ci95": {task: [low, high], ...}, "significant": {task: bool, ...}},
                          "linear": {"against": <unit id>, ..., "calibrator": "sn-natsv"}},
                  "wmean": {...}}

in points (4 decimals). The board's ``interval_method`` (:class:`~.models.IntervalMethod`) says how they
were computed. A unit
whose pairs (or whose reference's pairs) are missing for a task gets no interval for it; one
that has none at all is listed by :func:`procedure_notes`.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from flow_plugin.leaderboard.models import Comparison, Intervals, IntervalMethod, Leaderboard, ProtocolName, ReferenceName
from flow_plugin.leaderboard.units import (
    AVERAGE,
    DELTA_TOLERANCE,
    PROTOCOLS,
    Unit,
    best_linear,
    board_units,
    linear_reference,
)
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
                    seed: int = 0) -> IntervalMethod:
    return IntervalMethod(method=METHOD, confidence=confidence, n_resamples=n_resamples, seed=seed)


def _distributions(units: list[Unit], tasks: list[str], pairs: Mapping[tuple[str, str], PairScores],
                   settings: IntervalMethod) -> dict[tuple[str, str, str], tuple[float, np.ndarray]]:
    """(unit key, task, protocol) -> (reported score, its bootstrap distribution), for every unit whose
    members all have pairs of the task (the same gold scores as every other unit's)."""
    n_resamples, seed = settings.n_resamples, settings.seed
    draws = {unit.key: seed_draws(len(unit.members), n_resamples, np.random.default_rng([seed, 1, stable_key(unit.key)]))
             for unit in units}
    out: dict[tuple[str, str, str], tuple[float, np.ndarray]] = {}
    for task in tasks:
        scored = {unit.key: [pairs.get((row.id, task)) for row in unit.members] for unit in units}
        found = {key: [p for p in runs if p is not None] for key, runs in scored.items() if runs and None not in runs}
        if not found:
            continue
        first = next(iter(found.values()))[0]
        same_data = {key: runs for key, runs in found.items()
                     if all(p.subset_sizes == first.subset_sizes and np.array_equal(p.gold, first.gold) for p in runs)}
        resampler = SetResampler(first.subsets(first.gold), n_resamples, np.random.default_rng([seed, 0, stable_key(task)]))
        for key, runs in same_data.items():
            cosines = [p.subsets(p.cosine) for p in runs]
            for protocol in PROTOCOLS:
                out[(key, task, protocol)] = side_distribution(resampler, cosines, draws[key], protocol)
    return out


def _compare(unit: Unit, reference: Unit, tasks: list[str], protocol: ProtocolName,
             found: dict[tuple[str, str, str], tuple[float, np.ndarray]], confidence: float) -> Comparison | None:
    common = [t for t in tasks if (unit.key, t, protocol) in found and (reference.key, t, protocol) in found]
    if not common:
        return None
    deltas = {}  # column -> (reported delta, its resampled deltas)
    for task in common:
        (point_a, a), (point_b, b) = found[(unit.key, task, protocol)], found[(reference.key, task, protocol)]
        deltas[task] = (point_a - point_b, a - b)
    deltas[AVERAGE] = (float(np.mean([d[0] for d in deltas.values()])), np.mean([d[1] for d in deltas.values()], axis=0))
    compared = Comparison(against=reference.key, delta={}, ci95={}, significant={},
                          tasks=common if len(common) < len(tasks) else None)  # the average is over these only
    for column, (point, resampled) in deltas.items():
        interval = percentile_interval(float(point), resampled, confidence)
        estimate, low, high = interval.points()
        compared.delta[column] = estimate
        compared.ci95[column] = (low, high)
        compared.significant[column] = interval.significant
    return compared


def annotate_intervals(board: Leaderboard, pairs: Mapping[tuple[str, str], PairScores], *,
                       n_resamples: int = DEFAULT_RESAMPLES, confidence: float = DEFAULT_CONFIDENCE,
                       seed: int = 0) -> int:
    """Compute the intervals of every unit whose pairs (and its references' pairs) are in ``pairs``
    ((row id, task) -> pairs), in place. A comparison that cannot be computed now (its pairs or its
    reference's pairs are not in ``pairs``) keeps its earlier value when that was against the same
    reference and its deltas still match the board's scores. Returns the number of units given
    at least one newly computed interval."""
    settings = interval_method(n_resamples, confidence, seed)
    tasks = list(board.tasks)
    units = board_units(board)
    unit_of_row = {row.id: unit for unit in units for row in unit.members}
    found = _distributions(units, tasks, pairs, settings)
    best = {protocol: best_linear(units, protocol) for protocol in PROTOCOLS}
    computed = 0
    for unit in units:
        old, unit.record.intervals = unit.record.intervals, None
        for member in unit.members:
            if member is not unit.record:
                member.intervals = None
        if unit.calibrator == "raw":
            continue
        raw = unit_of_row.get(unit.first.baseline or "")  # the raw backbone's unit
        references: dict[ProtocolName, dict[ReferenceName, Unit | None]] = {
            protocol: {"raw": raw, "linear": linear_reference(unit, best[protocol])} for protocol in PROTOCOLS}
        intervals: Intervals = {}
        fresh = False
        for protocol in PROTOCOLS:
            for name, reference in references[protocol].items():
                if reference is None:
                    continue
                compared = _compare(unit, reference, tasks, protocol, found, confidence)
                if compared is not None:
                    fresh = True
                    if name == "linear":
                        compared.calibrator = reference.calibrator
                else:
                    earlier = (old or {}).get(protocol, {}).get(name)
                    if earlier is not None and _still_true(earlier, unit, reference, tasks, protocol):
                        compared = earlier
                        covered = [t for t in earlier.delta if t != AVERAGE]  # the board may have more tasks now
                        compared.tasks = covered if covered != tasks else None
                if compared is not None:
                    intervals.setdefault(protocol, {})[name] = compared
        unit.record.intervals = intervals or None
        computed += fresh
    board.interval_method = settings if any(unit.record.intervals is not None for unit in units) else None
    return computed


def _still_true(earlier: Comparison, unit: Unit, reference: Unit, tasks: list[str], protocol: ProtocolName) -> bool:
    """Whether an earlier comparison still describes the board: against the same reference, and each
    per-task delta equal to the board's mean scores' difference (within :data:`~.units.DELTA_TOLERANCE`)."""
    if earlier.against != reference.key:
        return False
    mine, theirs = unit.means(tasks, protocol), reference.means(tasks, protocol)
    return all(task in mine and task in theirs and abs(mine[task] - theirs[task] - delta) <= DELTA_TOLERANCE
               for task, delta in earlier.delta.items() if task != AVERAGE)
