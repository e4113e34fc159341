"""The compare stage of the task-types board: every number it derives, computed once.

From a backbone's results on the labelled tasks (:mod:`.ingest.task_items`), :func:`compare_task_types`
builds the :class:`~.models.TaskTypesBoard`: per calibrator (a seeded one's seeds as one row) its score on
each task, the mean of each task type's tasks and the mean of the type means ("average"), with the spread
over seeds; and every Δ against raw with its 95% interval.

The interval is a paired percentile bootstrap over each task's test items (the same resampled items for every
row: items of a classification task, pairs, clustered texts, queries), combined for a seeded row with a
resampling of its seeds (drawn with replacement once per resample, shared by the tasks), so a type's or the
board's average gets its interval from the same resamples as its tasks. Each resample recomputes the task's
main score as MTEB computes it from the per-item data (:func:`resampled_scores`): accuracy (the mean over
MTEB's experiments of each item's correctness), max AP (the best average precision over MTEB's five pair
scores, ties as one threshold), V-measure (per MTEB clustering experiment, on the items it drew, then the
mean), and retrieval / reranking measures (the mean over queries). A resample is a vector of item weights
(how often each item was drawn), so every statistic is computed on it directly.

Accuracy and the retrieval measures are means over items, so their resamples are centred on the delta. V-measure
and average precision are not: on a resample with repeated items their plug-in entropies and precisions are biased,
and by more for a row that clusters worse (on minilm-l6's Banking77 clustering the resampled deltas of NATSV
averaged 0.42 points above the delta). The interval is therefore the percentile interval of the resampled
deltas shifted by the bootstrap's estimate of that bias (their mean minus the delta), the additive bias correction
of Efron and Tibshirani (An Introduction to the Bootstrap, 1993, section 10.6); for the means it changes
nothing beyond Monte Carlo noise. MTEB's clustering experiments may draw different items for two rows; the weights are of the task's items, the same in every row, so the rows stay paired.
"""

from __future__ import annotations

import hashlib
import statistics
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy import sparse
from tqdm.auto import tqdm

from flow_plugin.calibration.names import CALIBRATOR_NAMES
from flow_plugin.errors import LeaderboardError
from flow_plugin.leaderboard.models import (
    AVERAGE,
    TASK_TYPES_FORMAT,
    TASK_TYPES_FORMAT_VERSION,
    BoardTask,
    IntervalMethod,
    SeedSpread,
    TaskTypesBoard,
    TypeDelta,
    TypeRow,
    round_points,
)
from flow_plugin.results.items import ItemScores, retrieval_measure

if TYPE_CHECKING:  # pragma: no cover
    from flow_plugin.leaderboard.ingest.task_items import TaskResult

#: MTEB's task types in the board's column order
TYPE_ORDER = ("Classification", "PairClassification", "Clustering", "Reranking", "Retrieval")
METHOD = ("paired percentile bootstrap over each task's test items (the same resampled items for every row), "
          "the evaluator's seeds where MTEB's evaluator draws at random (resampled with replacement, the same draw "
          "for every row of a task), and the seeds of a seeded row (resampled with replacement, shared by its "
          "tasks); the resampled deltas re-centred on the delta (bias-corrected: the bootstrap's mean minus the "
          "delta is subtracted)")
DEFAULT_RESAMPLES = 1000
DEFAULT_CONFIDENCE = 0.95
#: resamples scored at once (bounds the memory of a (resamples, items) weight matrix)
_CHUNK = 200


# ============================================================================ one task's score on resampled items
def n_items(items: ItemScores) -> int:
    """How many test items the bootstrap of a task resamples."""
    arrays = items.arrays
    if items.task_type in ("Retrieval", "Reranking"):
        return int(arrays["query_ids"].shape[0])
    gold = arrays["gold"]
    return int(gold.shape[-1])


def _aligned(items: ItemScores) -> dict[str, np.ndarray]:
    """The arrays of a task in a fixed item order (retrieval and reranking: sorted by query id)."""
    arrays = dict(items.arrays)
    if items.task_type in ("Retrieval", "Reranking"):
        order = np.argsort(arrays["query_ids"].astype(str), kind="stable")
        arrays = {name: value[order] for name, value in arrays.items()}
    return arrays


def resampled_scores(items: ItemScores, weights: np.ndarray) -> np.ndarray:
    """The task's main score (0-1) under each row of ``weights`` ((resamples, items): how often each test item
    was drawn); a row of ones gives MTEB's own score."""
    arrays, kind, name = _aligned(items), items.task_type, str(items.meta["main_score"])
    weights = np.asarray(weights, dtype=np.float64)
    if kind == "Classification":
        correct = np.mean(arrays["predictions"] == arrays["gold"][None, :], axis=0)
        return weights @ correct / weights.sum(axis=1)
    if kind in ("Retrieval", "Reranking"):
        values = np.asarray(arrays[retrieval_measure(name)], dtype=np.float64)
        return weights @ values / weights.sum(axis=1)
    if kind == "PairClassification":
        gold = np.asarray(arrays["gold"], dtype=np.float64)
        best = np.full(weights.shape[0], -np.inf)
        for score, larger_is_closer in (("similarity", True), ("cosine", True), ("manhattan", False),
                                        ("euclidean", False), ("dot", True)):
            values = np.asarray(arrays[score], dtype=np.float64)
            best = np.maximum(best, _average_precision(values if larger_is_closer else -values, gold, weights))
        return best
    if kind == "Clustering":
        if name != "v_measure":
            raise LeaderboardError(f"{items.meta['task']}: a bootstrap of {name} is not supported (v_measure is)")
        gold, draws, assignments = arrays["gold"], arrays["draws"], arrays["assignments"]
        by_item = np.ascontiguousarray(weights.T)  # (items, resamples), shared by every experiment
        values = [_v_measure(gold[level][draws[level, run]], assignments[level, run], draws[level, run], by_item)
                  for level in range(draws.shape[0]) for run in range(draws.shape[1])]
        return np.mean(values, axis=0)
    raise LeaderboardError(f"{items.meta['task']}: unknown task type {kind!r}")


def _average_precision(scores: np.ndarray, gold: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Average precision (scikit-learn's: tied scores are one threshold) of each weighted resample."""
    order = np.argsort(-scores, kind="mergesort")
    ordered = scores[order]
    ends = np.r_[np.flatnonzero(np.diff(ordered) != 0), ordered.size - 1]  # last item of each tie block
    w = weights[:, order]
    positives = np.cumsum(w * gold[order], axis=1)[:, ends]
    drawn = np.cumsum(w, axis=1)[:, ends]
    precision = np.divide(positives, drawn, out=np.zeros_like(positives), where=drawn > 0)
    gained = np.diff(positives, axis=1, prepend=0.0)
    total = positives[:, -1]
    return np.divide((gained * precision).sum(axis=1), total, out=np.zeros_like(total), where=total > 0)


def _v_measure(gold: np.ndarray, assigned: np.ndarray, drawn: np.ndarray, by_item: np.ndarray) -> np.ndarray:
    """scikit-learn's V-measure (beta 1) of each resample of one clustering experiment: the experiment's test
    items ``drawn`` (rows of ``by_item``, (items, resamples): how often each resample drew each item), with their
    ``gold`` and ``assigned`` labels."""
    _, classes = np.unique(gold, return_inverse=True)
    _, clusters = np.unique(assigned, return_inverse=True)
    c = clusters.max() + 1
    joint, cells = np.unique(classes * c + clusters, return_inverse=True)

    def summed(groups: np.ndarray, n_groups: int, table: Any) -> np.ndarray:
        """(groups, resamples): the rows of ``table`` summed by group (an item drawn twice counts twice)."""
        return np.asarray(sparse.csr_matrix((np.ones(groups.size), (groups, np.arange(groups.size))),
                                            shape=(n_groups, groups.size)) @ table)

    counts = summed(cells, joint.size, by_item[drawn])  # (class, cluster) cells x resamples
    h_joint, h_class, h_cluster = (_entropy(table) for table in (
        counts, summed(joint // c, classes.max() + 1, counts), summed(joint % c, c, counts)))
    homogeneity = np.where(h_class > 0, 1.0 - (h_joint - h_cluster) / np.where(h_class > 0, h_class, 1.0), 1.0)
    completeness = np.where(h_cluster > 0, 1.0 - (h_joint - h_class) / np.where(h_cluster > 0, h_cluster, 1.0), 1.0)
    both = homogeneity + completeness
    return np.divide(2.0 * homogeneity * completeness, both, out=np.zeros_like(both), where=both > 0)


def _entropy(counts: np.ndarray) -> np.ndarray:
    """Each column's entropy in nats, from its counts: log N - sum(n log n) / N; exactly 0 where at most one cell
    is drawn."""
    total = counts.sum(axis=0)
    spread = counts.max(axis=0) < total
    n = np.where(spread, total, 1.0)
    n_log_n = (counts * np.log(counts, out=np.zeros_like(counts), where=counts > 0)).sum(axis=0)
    return np.where(spread, np.log(n) - n_log_n / n, 0.0)


def _same_items(task: str, first: ItemScores, other: ItemScores) -> None:
    """Refuse to pair two rows' items of a task unless they are the same test items."""
    a, b = _aligned(first), _aligned(other)
    keys = {"Retrieval": ("query_ids",), "Reranking": ("query_ids",), "Clustering": ("gold",)}.get(
        first.task_type, ("gold",))
    for key in keys:
        if a[key].shape != b[key].shape or not np.array_equal(a[key], b[key]):
            raise LeaderboardError(f"{task}: two rows were scored on different test items ({key} differs); rerun "
                                   "the study so that every row scores the same split")


# ============================================================================ the board
def _task_seed(seed: int, task: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}:{task}".encode()).digest()[:8], "little")


def _spread(values: list[float]) -> SeedSpread:
    mean = statistics.fmean(values)
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return SeedSpread(mean=round_points(mean), std=round_points(std), n=len(values),
                      values=[round_points(v) for v in values])


def compare_task_types(results: Sequence[TaskResult], *, name: str, backbone: str, updated: str, generated_by: str,
                       run: dict[str, Any] | None = None, n_resamples: int = DEFAULT_RESAMPLES,
                       confidence: float = DEFAULT_CONFIDENCE, seed: int = 0) -> TaskTypesBoard:
    """The task-types board of one backbone's ``results``: raw and each calibrator (its seeds as one row) on the
    tasks every row has, grouped by type, with each Δ against raw and its paired bootstrap interval over the
    test items, the calibrator's seeds and the evaluator's seeds."""
    by_row = _by_row(results, backbone)
    order = {method: index for index, method in enumerate(CALIBRATOR_NAMES)}
    calibrators = sorted(by_row, key=lambda cal: (order.get(cal, len(order)), cal))
    raw_runs = by_row["raw"]
    (raw,) = raw_runs.values() if len(raw_runs) == 1 else (None,)
    if raw is None:
        raise LeaderboardError(f"{backbone}: raw results of several seeds")
    types, tasks = _task_columns(by_row, raw, backbone)
    evaluator_seeds = {task: _common_evaluator_seeds(by_row, task) for task in tasks}
    first = {task: raw[task][evaluator_seeds[task][0]] for task in tasks}
    board_tasks = [BoardTask(name=task, type=first[task].task_type, main_score=first[task].main_score,
                             n_items=n_items(first[task].items), dataset_revision=first[task].dataset_revision,
                             evaluator_seeds=evaluator_seeds[task] if len(evaluator_seeds[task]) > 1 else None,
                             evaluator_sd=_evaluator_sd([raw[task][s].score for s in evaluator_seeds[task]]))
                   for task in tasks]
    resampled = _resampled(by_row, calibrators, tasks, evaluator_seeds, first, n_resamples, seed)
    alpha = (1.0 - confidence) / 2.0
    raw_seed = next(iter(raw_runs))
    raw_boot = {task: resampled["raw"][raw_seed][task] for task in tasks}
    raw_scores = {task: _score(raw[task], evaluator_seeds[task]) for task in tasks}
    rows = []
    for cal in calibrators:
        run_seeds = sorted(by_row[cal], key=lambda s: (s is None, s or 0))
        per_seed = [{task: _score(by_row[cal][s][task], evaluator_seeds[task]) for task in tasks} for s in run_seeds]
        columns = _columns(per_seed, types)
        scores = {column: _spread([values[column] for values in columns]) for column in columns[0]}
        delta = None
        if cal != "raw":
            # one draw of seeds per resample, shared by the row's tasks; its own generator, so that a row's interval
            # does not depend on which other rows the board has
            draws = np.random.default_rng(_task_seed(seed, f"seeds of {cal}")).integers(
                0, len(run_seeds), size=(n_resamples, len(run_seeds)))
            boot_tasks = {}
            for task in tasks:
                stacked = np.stack([resampled[cal][s][task] for s in run_seeds])  # (seeds, resamples)
                mean_over_drawn = stacked[draws, np.arange(n_resamples)[:, None]].mean(axis=1)
                boot_tasks[task] = (mean_over_drawn - raw_boot[task]) * 100.0
            points = _columns([{task: statistics.fmean(values[task] for values in per_seed) - raw_scores[task]
                                for task in tasks}], types)[0]
            delta = _deltas(_columns_boot(boot_tasks, types), points, alpha)
        model = by_row[cal][run_seeds[0]][tasks[0]][evaluator_seeds[tasks[0]][0]].model
        seeded = run_seeds[0] is not None
        rows.append(TypeRow(id=model + (f" (seeds {run_seeds[0]}-{run_seeds[-1]})" if len(run_seeds) > 1 else ""),
                            model=model, calibrator=cal, seeds=[int(s) for s in run_seeds] if seeded else None,
                            scores=scores, delta=delta))
    return TaskTypesBoard(format=TASK_TYPES_FORMAT, format_version=TASK_TYPES_FORMAT_VERSION, name=name,
                          backbone=backbone, updated=updated, generated_by=generated_by, scale="points",
                          tasks=board_tasks, types=types, rows=rows,
                          interval_method=IntervalMethod(method=METHOD, confidence=confidence,
                                                         n_resamples=n_resamples, seed=seed), run=run)


#: calibrator -> fit seed -> task -> evaluator seed -> result
_ByRow = dict[str, dict[Any, dict[str, dict[int, Any]]]]


def _by_row(results: Sequence[TaskResult], backbone: str) -> _ByRow:
    """The results by calibrator, fit seed, task and evaluator seed; a second result of one is an error."""
    if not results:
        raise LeaderboardError(f"{backbone}: no results of the labelled tasks to compare")
    by_row: _ByRow = {}
    for result in results:
        per_task = by_row.setdefault(result.calibrator, {}).setdefault(result.seed, {}).setdefault(result.task, {})
        if result.evaluator_seed in per_task:
            raise LeaderboardError(f"{result.path}: a second result of {result.model} (seed {result.seed}) on "
                                   f"{result.task}; keep one result folder per study")
        per_task[result.evaluator_seed] = result
    if "raw" not in by_row:
        raise LeaderboardError(f"{backbone}: no raw results: every Δ is against raw; run the study with raw")
    return by_row


def _task_columns(by_row: _ByRow, raw: dict[str, dict[int, Any]], backbone: str
                  ) -> tuple[dict[str, list[str]], list[str]]:
    """(type -> its tasks, the tasks in column order): the tasks every row has, grouped by type."""
    every = [runs for cal in by_row.values() for runs in cal.values()]
    common = set.intersection(*(set(runs) for runs in every))
    missing = sorted({task for runs in every for task in runs} - common)
    if missing:
        lacking = [cal for cal, seeds in by_row.items() if any(task not in runs for runs in seeds.values()
                                                               for task in missing)]
        raise LeaderboardError(f"{backbone}: not every row has a result of {', '.join(missing)} (rows lacking one: "
                               f"{', '.join(lacking)}); finish the study (flow-plugin task-types reuses the results "
                               "it has), or build the board of fewer rows or tasks (build_board's calibrators= or "
                               "tasks=; on the command line, --board-only with --calibrators or --tasks)")
    kind = {task: next(iter(raw[task].values())).task_type for task in common}
    types: dict[str, list[str]] = {}
    for task in sorted(common, key=lambda t: (TYPE_ORDER.index(kind[t]) if kind[t] in TYPE_ORDER else len(TYPE_ORDER),
                                              kind[t], t)):
        types.setdefault(kind[task], []).append(task)
    return types, [task for members in types.values() for task in members]


def _common_evaluator_seeds(by_row: _ByRow, task: str) -> list[int]:
    """The evaluator seeds every row has for ``task`` (the others are left out, so the rows stay paired)."""
    seeds = set.intersection(*(set(runs[task]) for cal in by_row.values() for runs in cal.values()))
    if not seeds:
        raise LeaderboardError(f"{task}: the rows share no evaluator seed; rerun the study with the same "
                               "--evaluator-seeds for every row")
    return sorted(seeds)


def _score(by_seed: dict[int, Any], evaluator_seeds: list[int]) -> float:
    """A row's score on a task, in points: the mean over the evaluator seeds."""
    return statistics.fmean(by_seed[seed].score for seed in evaluator_seeds) * 100.0


def _evaluator_sd(scores: list[float]) -> float | None:
    """The standard deviation of raw's score over the evaluator seeds, in points (None for one seed)."""
    return round_points(statistics.stdev(scores) * 100.0) if len(scores) > 1 else None


def _resampled(by_row: _ByRow, calibrators: list[str], tasks: list[str], evaluator_seeds: dict[str, list[int]],
               first: dict[str, Any], n_resamples: int, seed: int) -> dict[str, dict[Any, dict[str, Any]]]:
    """row -> fit seed -> task -> (resamples,) scores, 0-1: each resample draws the test items (the same for every
    row and evaluator seed of a task) and the evaluator seeds (with replacement, the same for every row, so the
    rows stay paired), and averages the drawn seeds' resampled scores."""
    out: dict[str, dict[Any, dict[str, Any]]] = {cal: {s: {} for s in by_row[cal]} for cal in calibrators}
    for task in tqdm(tasks, desc="board: bootstrap", unit="task", file=sys.stderr, disable=None):
        reference = first[task].items
        size = n_items(reference)
        generator = np.random.default_rng(_task_seed(seed, task))
        chunks = [generator.multinomial(size, np.full(size, 1.0 / size), size=min(_CHUNK, n_resamples - start))
                  for start in range(0, n_resamples, _CHUNK)]
        seeds = evaluator_seeds[task]
        drawn = np.random.default_rng(_task_seed(seed, f"evaluator seeds of {task}")).integers(
            0, len(seeds), size=(n_resamples, len(seeds)))
        for cal in calibrators:
            for run_seed, runs in by_row[cal].items():
                per_seed = []
                for evaluator_seed in seeds:
                    items = runs[task][evaluator_seed].items
                    _same_items(task, reference, items)
                    per_seed.append(np.concatenate([resampled_scores(items, chunk) for chunk in chunks]))
                stacked = np.stack(per_seed)  # (evaluator seeds, resamples)
                out[cal][run_seed][task] = stacked[drawn, np.arange(n_resamples)[:, None]].mean(axis=1)
    return out


def _deltas(boot: dict[str, Any], points: dict[str, float], alpha: float) -> dict[str, TypeDelta]:
    """Each column's Δ with its interval: the resampled deltas re-centred on the delta (V-measure and AP are
    biased on resamples with repeated items, the more so the worse the row clusters)."""
    delta = {}
    for column, value in points.items():
        centred = boot[column] - (boot[column].mean() - value)
        low, high = (round_points(bound) for bound in np.quantile(centred, [alpha, 1.0 - alpha]))
        delta[column] = TypeDelta(delta=round_points(value), ci95=(low, high), significant=low > 0 or high < 0)
    return delta


def _columns(per_seed: list[dict[str, float]], types: dict[str, list[str]]) -> list[dict[str, float]]:
    """Per seed: each task's value, each type's mean of its tasks, and the mean of the type means."""
    out = []
    for values in per_seed:
        row = dict(values)
        for kind, members in types.items():
            row[kind] = statistics.fmean(values[task] for task in members)
        row[AVERAGE] = statistics.fmean(row[kind] for kind in types)
        out.append(row)
    return out


def _columns_boot(values: dict[str, np.ndarray], types: dict[str, list[str]]) -> dict[str, np.ndarray]:
    """:func:`_columns` of resampled values: the same means, per resample."""
    out = dict(values)
    for kind, members in types.items():
        out[kind] = np.mean([values[task] for task in members], axis=0)
    out[AVERAGE] = np.mean([out[kind] for kind in types], axis=0)
    return out


__all__ = ["DEFAULT_CONFIDENCE", "DEFAULT_RESAMPLES", "METHOD", "TYPE_ORDER", "compare_task_types", "n_items",
           "resampled_scores"]
