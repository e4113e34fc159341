"""The confidence intervals of score differences (flow_plugin.evaluation.intervals): they cover a known
difference at about the nominal rate, agree with scipy's bootstrap where that applies, and widen with the
seed spread."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from flow_plugin.errors import InputError
from flow_plugin.evaluation.intervals import ScoredPairs, delta_interval


def population_spearman(noise_variance: float) -> float:
    """Spearman correlation of gold ~ N(0, 1) with gold + N(0, noise_variance): (6/pi) asin(r/2)."""
    return 6 / math.pi * math.asin(1 / math.sqrt(1 + noise_variance) / 2)


def draw(rng: np.random.Generator, n: int, runs: int, seed_noise: float) -> ScoredPairs:
    """A test set of n pairs: side A = gold + N(0, 1) shared by its runs + N(0, seed_noise^2) per run;
    side B = gold + N(0, 1.3^2)."""
    gold = rng.normal(size=n)
    shared = rng.normal(size=n)
    a = np.stack([gold + shared + seed_noise * rng.normal(size=n) for _ in range(runs)])
    return ScoredPairs([gold], [a], [(gold + 1.3 * rng.normal(size=n))[None]])


@pytest.mark.parametrize(("runs", "seed_noise", "repetitions"), [(1, 0.0, 200), (5, 1.0, 120)])
def test_the_interval_covers_a_known_difference_at_about_the_nominal_rate(runs: int, seed_noise: float,
                                                                          repetitions: int) -> None:
    true_delta = population_spearman(1.0 + seed_noise**2) - population_spearman(1.3**2)
    rng = np.random.default_rng(7)
    covered = []
    for repetition in range(repetitions):
        interval = delta_interval([draw(rng, 200, runs, seed_noise)], n_resamples=300, seed=repetition)
        covered.append(interval.low <= true_delta <= interval.high)
    # 95 % nominal; measured 0.953 (pairs) and 0.963 (5 seeds) over 300 repetitions of 300-400 resamples.
    # The binomial spread of a rate over 120-200 repetitions is 1.5-2 points: the band allows 2.5 of them.
    assert 0.90 <= np.mean(covered) <= 0.995, np.mean(covered)


def test_pairs_only_it_is_scipys_percentile_bootstrap() -> None:
    data = draw(np.random.default_rng(3), 400, 1, 0.0)
    gold, a, b = data.gold[0], data.a[0][0], data.b[0][0]

    def delta(g: np.ndarray, x: np.ndarray, y: np.ndarray) -> float:
        return stats.spearmanr(x, g).statistic - stats.spearmanr(y, g).statistic

    reference = stats.bootstrap((gold, a, b), delta, paired=True, vectorized=False, n_resamples=2000,
                                method="percentile", random_state=np.random.default_rng(0)).confidence_interval
    ours = delta_interval([data], n_resamples=2000)
    assert ours.estimate == pytest.approx(delta(gold, a, b), abs=1e-12)
    # two Monte Carlo estimates of the same percentiles (2,000 resamples each): measured 0.003 apart
    assert ours.low == pytest.approx(reference.low, abs=0.01) and ours.high == pytest.approx(reference.high, abs=0.01)


def test_the_seed_stage_widens_the_interval_by_the_seed_spread() -> None:
    rng = np.random.default_rng(11)
    agreeing = draw(rng, 300, 5, 0.0)  # five identical runs: no seed spread
    base = agreeing.a[0]
    # runs of very different quality (noise 0 to 2): their scores spread far more than the pairs' sampling moves one
    spread = np.stack([row + 0.5 * run * np.random.default_rng(run).normal(size=row.shape) for run, row in enumerate(base)])
    one = delta_interval([agreeing], n_resamples=400)
    single_run = delta_interval([ScoredPairs(agreeing.gold, [base[:1]], agreeing.b)], n_resamples=400)
    assert one.low == pytest.approx(single_run.low, abs=1e-9) and one.high == pytest.approx(single_run.high, abs=1e-9)
    varied = delta_interval([ScoredPairs(agreeing.gold, [spread], agreeing.b)], n_resamples=400)
    assert varied.high - varied.low > 1.2 * (one.high - one.low)


def test_protocols_and_averages_over_sets() -> None:
    rng = np.random.default_rng(5)
    sets = [draw(rng, 150, 1, 0.0) for _ in range(3)]
    single = [delta_interval([s], n_resamples=300) for s in sets]
    average = delta_interval(sets, n_resamples=300)
    assert average.estimate == pytest.approx(np.mean([i.estimate for i in single]), abs=1e-12)
    assert average.high - average.low < min(i.high - i.low for i in single)  # three sets tell more than one
    # one subset: "all" and "wmean" are the same correlation
    assert delta_interval([sets[0]], protocol="wmean", n_resamples=300) == delta_interval([sets[0]], n_resamples=300)
    # subsets: "wmean" weighs their correlations by size, "all" pools them
    joined = ScoredPairs([s.gold[0] for s in sets], [s.a[0] for s in sets], [s.b[0] for s in sets])
    weighted = delta_interval([joined], protocol="wmean", n_resamples=300)
    assert weighted.estimate == pytest.approx(average.estimate, abs=1e-12)  # equal sizes: the plain mean
    assert delta_interval([joined], protocol="all", n_resamples=300).estimate != pytest.approx(weighted.estimate)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda s: delta_interval([s], protocol="mean"), "protocol must be one of all, wmean"),
        (lambda s: delta_interval([]), "no test set"),
        (lambda s: delta_interval([s], n_resamples=5), "n_resamples >= 10"),
        (lambda s: ScoredPairs(s.gold, [s.a[0][:, :5]], s.b), r"must be \(runs, 50\)"),
        (lambda s: ScoredPairs([s.gold[0][:2]], [s.a[0][:, :2]], [s.b[0][:, :2]]), "at least 3 pairs"),
    ],
)
def test_bad_input_is_one_line(call, message: str) -> None:
    with pytest.raises(InputError, match=message):
        call(draw(np.random.default_rng(0), 50, 2, 0.1))


@pytest.mark.parametrize("protocol", ["all", "wmean"])
def test_a_resample_is_scored_as_scipy_scores_the_drawn_pairs(protocol: str) -> None:
    """The counted ranks (ties included: gold on a 0-5 grid, predictions rounded) are scipy's Spearman."""
    from flow_plugin.evaluation.intervals import SetResampler

    rng = np.random.default_rng(2)
    gold = [np.round(rng.uniform(0, 5, size=n) * 5) / 5 for n in (40, 25)]
    predicted = [np.round(g + rng.normal(size=len(g)), 1) for g in gold]
    resampler = SetResampler(gold, 20, np.random.default_rng(0))
    scores = resampler.scores(predicted, protocol)
    for b in range(20):
        picked_gold = [g[d[b]] for g, d in zip(gold, resampler.draws)]
        picked = [p[d[b]] for p, d in zip(predicted, resampler.draws)]
        if protocol == "all":
            expected = stats.spearmanr(np.concatenate(picked), np.concatenate(picked_gold)).statistic
        else:
            expected = sum(len(g) * stats.spearmanr(p, g).statistic for p, g in zip(picked, picked_gold)) / 65
        assert scores[b] == pytest.approx(expected, abs=1e-12)
