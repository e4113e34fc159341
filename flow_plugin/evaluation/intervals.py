"""Confidence intervals of STS score differences: a paired, stratified, two-stage bootstrap.

A leaderboard's deltas (a calibrator against raw, or against the best linear baseline) are
differences of Spearman correlations measured on one finite test set, and, for seeded calibrators,
on a few training runs. Both are samples: the test pairs of a set, and the seeds. The interval of a
delta comes from resampling both, in the standard way for two-stage sampling (Davison & Hinkley,
*Bootstrap Methods and their Application*, 1997, section 3.8):

1. **Seeds.** Each resample draws the seeds of a seeded side with replacement (as many as it has),
   and uses the mean over the drawn seeds, which is what the leaderboard reports for that side. A
   deterministic side has one "seed". Seeds must be independent runs (see
   :func:`flow_plugin.calibration.member_seeds`).
2. **Test pairs.** Each resample draws the pairs of every subset with replacement, separately per
   subset (stratified: a subset keeps its size, so "wmean" keeps its weights), and **the same pairs
   for both sides** (paired: the two calibrators are scored on the same resampled test set, so the
   part of the sampling noise they share cancels, as in a paired test).
3. The score of a side on a resample is its protocol's aggregate ("all": Spearman over the pooled
   pairs; "wmean": the per-subset Spearman correlations weighted by pair count), averaged over the
   drawn seeds; the delta is A's minus B's. An average over several sets (the leaderboard's "avg")
   resamples each set on its own and averages the per-set deltas of one resample.
4. The interval is the percentile interval of the resampled deltas (2.5th and 97.5th percentiles
   for 95 %). A delta is significant when its interval excludes 0.

Why this is sound: the seed draw and the pair draw are the two independent sources of variation of
the reported number (a mean over seeds of a score on a sample of pairs), and drawing both reproduces
the sampling distribution of that number, with the seed spread and the pair sampling combined
rather than added by hand. With 5 seeds the seed stage is coarse (it cannot show more spread than 5
runs show), so an interval of a seeded delta is as good as its seeds are many; the leaderboard says
how many.

scipy's ``scipy.stats.bootstrap`` gives the same percentile interval for the pairs-only case (the
tests check it), but it resamples neither within strata nor over a second stage, hence this function.

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> gold = rng.normal(size=400)
>>> better, worse = gold + rng.normal(size=400), gold + 2 * rng.normal(size=400)
>>> interval = delta_interval([ScoredPairs([gold], [better[None]], [worse[None]])], n_resamples=500)
>>> interval.low > 0, round(interval.estimate, 3)
(True, 0.228)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import rankdata

from flow_plugin.errors import InputError

#: resamples per interval (the percentile of 1,000 draws moves by about 0.01 points on STS; README)
DEFAULT_RESAMPLES = 1000
DEFAULT_CONFIDENCE = 0.95
#: the protocols an interval can be computed for (see :mod:`flow_plugin.evaluation.sts`)
PROTOCOLS = ("all", "wmean")


@dataclass(frozen=True)
class ScoredPairs:
    """One test set's gold scores and two sides' predictions, subset by subset.

    ``gold[i]`` is subset i's gold scores (n_i,); ``a[i]`` and ``b[i]`` are the predicted similarities
    of each side's runs, shape (runs, n_i): several rows for a seeded calibrator (one per seed, the same
    order in every subset), one row otherwise.
    """

    gold: Sequence[np.ndarray]
    a: Sequence[np.ndarray]
    b: Sequence[np.ndarray]

    def __post_init__(self) -> None:
        if not self.gold or not (len(self.gold) == len(self.a) == len(self.b)):
            raise InputError("a test set needs the same number (>= 1) of subsets of gold, a and b")
        runs = {side: {np.shape(x)[0] for x in getattr(self, side)} for side in ("a", "b")}
        for side, counts in runs.items():
            if len(counts) != 1:
                raise InputError(f"side {side} has a different number of runs in different subsets: {sorted(counts)}")
        for gold, a, b in zip(self.gold, self.a, self.b):
            if np.ndim(a) != 2 or np.ndim(b) != 2 or np.shape(a)[1] != len(gold) or np.shape(b)[1] != len(gold):
                raise InputError(f"each subset's predictions must be (runs, {len(gold)}), got {np.shape(a)} and {np.shape(b)}")
            if len(gold) < 3:
                raise InputError(f"a subset needs at least 3 pairs for a correlation, got {len(gold)}")

    @property
    def runs(self) -> tuple[int, int]:
        return int(np.shape(self.a[0])[0]), int(np.shape(self.b[0])[0])


@dataclass(frozen=True)
class Interval:
    """A delta (A - B, correlation scale), its percentile interval, and how it was computed."""

    estimate: float
    low: float
    high: float
    confidence: float
    n_resamples: int

    @property
    def significant(self) -> bool:
        """The interval excludes 0."""
        return self.low > 0 or self.high < 0

    def points(self) -> tuple[float, float, float]:
        """(estimate, low, high) x 100, rounded to 4 decimals, as the leaderboard stores scores."""
        return tuple(round(100 * value, 4) for value in (self.estimate, self.low, self.high))  # type: ignore[return-value]


def _spearman_rows(gold: np.ndarray, predicted: np.ndarray) -> np.ndarray:
    """Spearman correlation of each row of ``predicted`` (m, n) with the matching row of ``gold`` (m, n)."""
    x = rankdata(predicted, axis=-1)
    y = rankdata(gold, axis=-1)
    x -= x.mean(axis=-1, keepdims=True)
    y -= y.mean(axis=-1, keepdims=True)
    denominator = np.sqrt((x * x).sum(axis=-1) * (y * y).sum(axis=-1))
    return (x * y).sum(axis=-1) / np.where(denominator > 0, denominator, np.nan)


#: resamples ranked at once (bounds memory: 5 runs x 200 resamples x 4,927 SICK-R pairs is 40 MB a copy)
_CHUNK = 200


def _scores(gold: Sequence[np.ndarray], runs: Sequence[np.ndarray], draws: Sequence[np.ndarray] | None,
            protocol: str) -> np.ndarray:
    """Score of every run on every resample of the pairs: (runs, resamples); ``draws`` None: the data itself."""
    if draws is not None and draws[0].shape[0] > _CHUNK:
        return np.concatenate([_scores(gold, runs, [d[start:start + _CHUNK] for d in draws], protocol)
                               for start in range(0, draws[0].shape[0], _CHUNK)], axis=1)
    n_runs = np.shape(runs[0])[0]
    picked_gold, picked = [], []
    for subset, (g, r) in enumerate(zip(gold, runs)):
        index = draws[subset] if draws is not None else np.arange(len(g))[None]  # (resamples, n_i)
        picked_gold.append(np.asarray(g, dtype=np.float64)[index])
        picked.append(np.asarray(r, dtype=np.float64)[:, index])  # (runs, resamples, n_i)
    n_resamples = picked_gold[0].shape[0]
    if protocol == "all":
        pooled_gold = np.concatenate(picked_gold, axis=-1)
        pooled = np.concatenate(picked, axis=-1)
        return np.stack([_spearman_rows(pooled_gold, pooled[run]) for run in range(n_runs)])
    weights = np.array([len(g) for g in gold], dtype=np.float64)
    per_subset = np.stack([np.stack([_spearman_rows(g, p[run]) for run in range(n_runs)])
                           for g, p in zip(picked_gold, picked)])  # (subsets, runs, resamples)
    assert per_subset.shape[2] == n_resamples
    return np.tensordot(weights / weights.sum(), per_subset, axes=1)


def _seed_means(scores: np.ndarray, seed_draws: np.ndarray) -> np.ndarray:
    """Per resample b, the mean of ``scores[seed, b]`` over the seeds drawn for b: (resamples,)."""
    return scores[seed_draws, np.arange(scores.shape[1])[:, None]].mean(axis=1)


def delta_interval(
    scored_sets: Sequence[ScoredPairs],
    *,
    protocol: str = "all",
    n_resamples: int = DEFAULT_RESAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = 0,
) -> Interval:
    """The interval of (A - B), averaged over ``scored_sets`` (one set: its delta), by the two-stage paired
    stratified bootstrap of the module docstring. ``seed`` fixes the resampling."""
    if protocol not in PROTOCOLS:
        raise InputError(f"protocol must be one of {', '.join(PROTOCOLS)}, got {protocol!r}")
    if not scored_sets:
        raise InputError("no test set to compute an interval on")
    if not 0 < confidence < 1 or isinstance(n_resamples, bool) or not isinstance(n_resamples, int) or n_resamples < 10:
        raise InputError(f"need 0 < confidence < 1 and n_resamples >= 10, got {confidence!r} and {n_resamples!r}")
    runs = {scored.runs for scored in scored_sets}
    if len(runs) != 1:
        raise InputError(f"every test set needs the same runs of each side (one per seed), got {sorted(runs)}")
    (runs_a, runs_b), = runs
    # two streams: the pairs drawn do not depend on how many seeds a side has
    rng, seed_rng = np.random.default_rng([seed, 0]), np.random.default_rng([seed, 1])
    # one seed draw per resample, shared by every set: a seed's run spans all of them
    seeds_a = seed_rng.integers(0, runs_a, size=(n_resamples, runs_a))
    seeds_b = seed_rng.integers(0, runs_b, size=(n_resamples, runs_b))
    estimate, deltas = 0.0, np.zeros(n_resamples)
    for scored in scored_sets:
        draws = [rng.integers(0, len(g), size=(n_resamples, len(g))) for g in scored.gold]
        estimate += float(_scores(scored.gold, scored.a, None, protocol).mean()
                          - _scores(scored.gold, scored.b, None, protocol).mean())
        deltas += (_seed_means(_scores(scored.gold, scored.a, draws, protocol), seeds_a)
                   - _seed_means(_scores(scored.gold, scored.b, draws, protocol), seeds_b))
    deltas /= len(scored_sets)
    alpha = (1 - confidence) / 2
    low, high = np.nanquantile(deltas, [alpha, 1 - alpha])
    return Interval(estimate / len(scored_sets), float(low), float(high), confidence, n_resamples)
