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

Examples
--------
>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> gold = rng.normal(size=400)
>>> better, worse = gold + rng.normal(size=400), gold + 2 * rng.normal(size=400)
>>> interval = delta_interval([ScoredPairs([gold], [better[None]], [worse[None]])], n_resamples=500)
>>> interval.low > 0, round(interval.estimate, 3)
(True, 0.228)
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.stats import spearmanr

from flow_plugin.errors import InputError
from flow_plugin.protocols import PROTOCOLS

#: resamples per interval: over 6 resampling seeds the bounds of the minilm-l6-layer0 board's average deltas moved
#: with a standard deviation of 0.007-0.017 points (measured; docs/evidence.md)
DEFAULT_RESAMPLES = 1000
DEFAULT_CONFIDENCE = 0.95


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


def stable_key(text: str) -> int:
    """A number for ``text`` that is the same in every process (``hash`` is salted per process)."""
    return zlib.crc32(text.encode("utf-8"))


def _average_ranks(codes: np.ndarray, levels: int, picked: np.ndarray) -> np.ndarray:
    """Average ranks (ties share their mean rank, as ``scipy.stats.rankdata``) of each row of a resample.

    ``codes`` are the data's dense ranks (0 .. levels-1, equal values equal codes); ``picked`` (B, n) the
    drawn indices. Counting the drawn codes ranks a resample in O(n) rather than by sorting it."""
    drawn = codes[picked]  # (B, n)
    offsets = levels * np.arange(drawn.shape[0])[:, None]
    counts = np.bincount((drawn + offsets).ravel(), minlength=drawn.shape[0] * levels).reshape(drawn.shape[0], levels)
    below = np.cumsum(counts, axis=1) - counts
    average = below + (counts + 1) / 2.0
    return np.take_along_axis(average, drawn, axis=1)


def _centred(ranks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Ranks minus their row means, and the rows' norms."""
    ranks = ranks - ranks.mean(axis=-1, keepdims=True)
    return ranks, np.sqrt((ranks * ranks).sum(axis=-1))


def _correlations(x: np.ndarray, x_norm: np.ndarray, y: np.ndarray, y_norm: np.ndarray) -> np.ndarray:
    denominator = x_norm * y_norm
    return (x * y).sum(axis=-1) / np.where(denominator > 0, denominator, np.nan)


class SetResampler:
    """One test set's resamples of its pairs, shared by every side scored on it (paired).

    Draws, per subset, ``n_resamples`` samples of its pairs with replacement (stratified), and ranks
    the gold scores of each resample once; :meth:`scores` then gives a run's Spearman correlation on
    every resample under a protocol. ``rng`` fixes the draws: sides scored by one resampler are scored
    on the same resampled pairs."""

    def __init__(self, gold: Sequence[np.ndarray], n_resamples: int, rng: np.random.Generator) -> None:
        self.sizes = [len(g) for g in gold]
        self.starts = np.concatenate([[0], np.cumsum(self.sizes)[:-1]]).astype(np.int64)
        self.draws = [rng.integers(0, n, size=(n_resamples, n)) for n in self.sizes]
        self.pooled_draws = np.concatenate([d + start for d, start in zip(self.draws, self.starts)], axis=1)
        self.weights = np.array(self.sizes, dtype=np.float64) / sum(self.sizes)
        self._gold = [np.asarray(g, dtype=np.float64) for g in gold]
        pooled = np.concatenate(self._gold)
        self._gold_all = _centred(self._resampled_ranks(pooled, self.pooled_draws))
        self._gold_subsets = [_centred(self._resampled_ranks(g, d)) for g, d in zip(self._gold, self.draws)]

    @staticmethod
    def _resampled_ranks(values: np.ndarray, picked: np.ndarray) -> np.ndarray:
        levels, codes = np.unique(values, return_inverse=True)
        return _average_ranks(codes.ravel(), len(levels), picked)

    def scores(self, predicted: Sequence[np.ndarray], protocol: str) -> np.ndarray:
        """One run's correlation on every resample, (n_resamples,); ``predicted[i]``: subset i's predictions."""
        if protocol == "all":
            ranks = _centred(self._resampled_ranks(np.concatenate([np.asarray(p, np.float64) for p in predicted]),
                                                   self.pooled_draws))
            return _correlations(*ranks, *self._gold_all)
        per_subset = [_correlations(*_centred(self._resampled_ranks(np.asarray(p, np.float64), d)), *gold)
                      for p, d, gold in zip(predicted, self.draws, self._gold_subsets)]
        return np.tensordot(self.weights, np.stack(per_subset), axes=1)

    def point(self, predicted: Sequence[np.ndarray], protocol: str) -> float:
        """One run's correlation on the data itself."""
        if protocol == "all":
            return float(spearmanr(np.concatenate(predicted), np.concatenate(self._gold)).statistic)
        return float(sum(w * spearmanr(p, g).statistic for w, p, g in zip(self.weights, predicted, self._gold)))


def seed_draws(runs: int, n_resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Which runs (seeds) each resample uses: (n_resamples, runs) indices drawn with replacement."""
    return rng.integers(0, runs, size=(n_resamples, runs))


def side_distribution(resampler: SetResampler, runs: np.ndarray | Sequence[Sequence[np.ndarray]], draws: np.ndarray,
                      protocol: str) -> tuple[float, np.ndarray]:
    """A side's reported score (the mean over its runs) and its bootstrap distribution (n_resamples,).

    ``runs[r][i]``: run r's predictions on subset i; ``draws``: :func:`seed_draws` of this side."""
    point = float(np.mean([resampler.point(run, protocol) for run in runs]))
    resampled = np.stack([resampler.scores(run, protocol) for run in runs])  # (runs, B)
    return point, resampled[draws, np.arange(resampled.shape[1])[:, None]].mean(axis=1)


def percentile_interval(estimate: float, deltas: np.ndarray, confidence: float) -> Interval:
    """The percentile interval of resampled deltas around ``estimate``."""
    alpha = (1 - confidence) / 2
    low, high = np.nanquantile(deltas, [alpha, 1 - alpha])
    return Interval(float(estimate), float(low), float(high), confidence, int(len(deltas)))


def check_settings(protocol: str, n_resamples: int, confidence: float) -> None:
    if protocol not in PROTOCOLS:
        raise InputError(f"protocol must be one of {', '.join(PROTOCOLS)}, got {protocol!r}")
    if not 0 < confidence < 1 or isinstance(n_resamples, bool) or not isinstance(n_resamples, int) or n_resamples < 10:
        raise InputError(f"need 0 < confidence < 1 and n_resamples >= 10, got {confidence!r} and {n_resamples!r}")


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
    check_settings(protocol, n_resamples, confidence)
    if not scored_sets:
        raise InputError("no test set to compute an interval on")
    runs = {scored.runs for scored in scored_sets}
    if len(runs) != 1:
        raise InputError(f"every test set needs the same runs of each side (one per seed), got {sorted(runs)}")
    (runs_a, runs_b), = runs
    # two streams: the pairs drawn do not depend on how many seeds a side has
    rng, seed_rng = np.random.default_rng([seed, 0]), np.random.default_rng([seed, 1])
    # one seed draw per resample, shared by every set: a seed's run spans all of them
    seeds_a, seeds_b = seed_draws(runs_a, n_resamples, seed_rng), seed_draws(runs_b, n_resamples, seed_rng)
    estimate, deltas = 0.0, np.zeros(n_resamples)
    for scored in scored_sets:
        resampler = SetResampler(scored.gold, n_resamples, rng)
        a_runs = [[np.asarray(subset)[r] for subset in scored.a] for r in range(runs_a)]
        b_runs = [[np.asarray(subset)[r] for subset in scored.b] for r in range(runs_b)]
        point_a, resampled_a = side_distribution(resampler, a_runs, seeds_a, protocol)
        point_b, resampled_b = side_distribution(resampler, b_runs, seeds_b, protocol)
        estimate += point_a - point_b
        deltas += resampled_a - resampled_b
    return percentile_interval(estimate / len(scored_sets), deltas / len(scored_sets), confidence)


#: how :class:`SharedBootstrap` computes its intervals, in words (a leaderboard records it next to them)
METHOD = ("paired, stratified, two-stage percentile bootstrap over the test pairs of each subset and the seeds "
          "(flow_plugin.evaluation.intervals)")


@dataclass
class SharedBootstrap:
    """The bootstrap of many sides (a leaderboard's rows, or seed groups) scored on the same test sets, so
    that any two can be compared: every side is scored on the same resampled pairs of a set (drawn once per
    set, seeded by its name: paired), and a side's seeds are drawn once (seeded by its name) and shared by
    its sets. :meth:`add_set` scores the sides of one set, :meth:`compare` gives the intervals of A - B per
    set and averaged over the sets both have. The same names and ``seed`` give the same intervals in any
    order and any process.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> gold = rng.normal(size=300)
    >>> boot = SharedBootstrap(n_resamples=200)
    >>> boot.add_set("set", [gold], {"good": [[gold + rng.normal(size=300)]], "bad": [[gold + 3 * rng.normal(size=300)]]})
    >>> sets, per_set, average = boot.compare("good", "bad", "all", ["set", "other"])
    >>> sets, per_set["set"].significant, average == per_set["set"]
    (['set'], True, True)
    """

    n_resamples: int = DEFAULT_RESAMPLES
    confidence: float = DEFAULT_CONFIDENCE
    seed: int = 0
    #: (side, set, protocol) -> (reported score, its bootstrap distribution)
    _scored: dict[tuple[str, str, str], tuple[float, np.ndarray]] = field(default_factory=dict, repr=False)

    def _seed_draws(self, side: str, runs: int) -> np.ndarray:
        return seed_draws(runs, self.n_resamples, np.random.default_rng([self.seed, 1, stable_key(side)]))

    def add_set(self, name: str, gold: Sequence[np.ndarray], sides: Mapping[str, Sequence[Sequence[np.ndarray]]]) -> None:
        """Score ``sides`` (side -> its runs, each run its predictions per subset) on test set ``name``, whose
        subsets' gold scores are ``gold``, under every protocol."""
        resampler = SetResampler(gold, self.n_resamples, np.random.default_rng([self.seed, 0, stable_key(name)]))
        for side, runs in sides.items():
            draws = self._seed_draws(side, len(runs))
            for protocol in PROTOCOLS:
                self._scored[(side, name, protocol)] = side_distribution(resampler, runs, draws, protocol)

    def compare(self, a: str, b: str, protocol: str,
                sets: Sequence[str]) -> tuple[list[str], dict[str, Interval], Interval] | None:
        """(the sets of ``sets`` both sides were scored on, in order; set -> the interval of A - B on it; the
        interval of A - B averaged over those sets, the mean of each resample's per-set deltas), or None when
        they share no set."""
        common = [name for name in sets if (a, name, protocol) in self._scored and (b, name, protocol) in self._scored]
        if not common:
            return None
        deltas = {}
        for name in common:
            (point_a, resampled_a), (point_b, resampled_b) = self._scored[(a, name, protocol)], self._scored[(b, name, protocol)]
            deltas[name] = (point_a - point_b, resampled_a - resampled_b)
        per_set = {name: percentile_interval(float(point), resampled, self.confidence)
                   for name, (point, resampled) in deltas.items()}
        average = percentile_interval(float(np.mean([point for point, _ in deltas.values()])),
                                      np.mean([resampled for _, resampled in deltas.values()], axis=0), self.confidence)
        return common, per_set, average
