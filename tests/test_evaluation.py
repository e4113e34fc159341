"""Tests of flow_plugin.evaluation: STS aggregates, ROC AUC, lexical analysis, isotropy."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from flow_plugin.errors import InputError, InputTypeError, MissingExtraError
from flow_plugin.evaluation import (
    effective_rank,
    evaluate_sts,
    isotropy_report,
    isotropy_score,
    lexical_similarity_correlations,
    paired_cosine,
    pearson,
    plot_spectra,
    roc_auc,
    spearman,
    to_points,
    top_k_variance_share,
    word_edit_distance,
)

# --------------------------------------------------------------------------- STS


def test_paired_cosine_known_values_and_zero_rows() -> None:
    a = np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 0.0], [3.0, 4.0], [1e200, 1e200]])
    b = np.array([[0.0, 2.0], [2.0, 2.0], [1.0, 1.0], [-3.0, -4.0], [1e200, 0.0]])
    got = paired_cosine(a, b)
    np.testing.assert_allclose(got, [0.0, 1.0, 0.0, -1.0, 1 / math.sqrt(2)], atol=1e-12)
    assert got.dtype == np.float64 and got.shape == (5,)


def test_paired_cosine_rejects_bad_input() -> None:
    with pytest.raises(InputError, match=r"\(2, 3\) and \(2, 4\)"):
        paired_cosine(np.ones((2, 3)), np.ones((2, 4)))
    with pytest.raises(InputError, match="a must be a 2-D"):
        paired_cosine(np.ones(3), np.ones(3))
    with pytest.raises(InputError, match="b contains 1 NaN"):
        paired_cosine(np.ones((2, 2)), np.array([[1.0, np.nan], [1.0, 1.0]]))
    with pytest.raises(InputTypeError, match="real numbers"):
        paired_cosine(np.array([["x", "y"]]), np.ones((1, 2)))


def test_spearman_pearson_match_scipy_with_ties() -> None:
    rng = np.random.default_rng(1)
    x = rng.integers(0, 5, size=200).astype(float)
    y = x + rng.normal(size=200)
    assert spearman(x, y) == pytest.approx(stats.spearmanr(x, y).statistic, abs=1e-12)
    assert pearson(x, y) == pytest.approx(stats.pearsonr(x, y).statistic, abs=1e-12)
    with pytest.raises(InputError, match="constant"):
        spearman([1, 1, 1], [1, 2, 3])
    with pytest.raises(InputError, match="x has 3 values but y has 2"):
        pearson([1, 2, 3], [1, 2])
    with pytest.raises(InputError, match="inf"):
        pearson([1, 2, np.inf], [1, 2, 3])


def test_sts_aggregates_hand_checked() -> None:
    # Subset A: perfectly increasing (rho = r = 1), 4 pairs.
    # Subset B: perfectly decreasing (rho = r = -1), 3 pairs.
    gold_a, pred_a = [1, 2, 3, 4], [0.1, 0.2, 0.3, 0.4]
    gold_b, pred_b = [1, 2, 3], [0.3, 0.2, 0.1]
    result = evaluate_sts({"A": (gold_a, pred_a), "B": (gold_b, pred_b)})
    assert [(s.name, s.n) for s in result.subsets] == [("A", 4), ("B", 3)]
    assert result.subsets[0].spearman == pytest.approx(1.0)
    assert result.subsets[1].spearman == pytest.approx(-1.0)
    assert result.spearman_wmean == pytest.approx((4 * 1 + 3 * -1) / 7)
    assert result.spearman_mean == pytest.approx(0.0)
    assert result.pearson_wmean == pytest.approx(1 / 7)
    # Pooled: gold ranks [1.5,3.5,5.5,7,1.5,3.5,5.5], pred ranks [1.5,3.5,5.5,7,5.5,3.5,1.5];
    # centred (mean 4) cross products sum to 10.5, each sum of squares is 26.5.
    assert result.spearman_all == pytest.approx(10.5 / 26.5)
    g = np.array(gold_a + gold_b, dtype=float)
    p = np.array(pred_a + pred_b)
    r_all = np.sum((g - g.mean()) * (p - p.mean())) / math.sqrt(np.sum((g - g.mean()) ** 2) * np.sum((p - p.mean()) ** 2))
    assert result.pearson_all == pytest.approx(r_all)
    assert result.n_pairs == 7

    d = result.to_dict()
    assert json.loads(json.dumps(d)) == d
    assert set(d["protocols"]) == {"all", "wmean", "mean"}
    assert d["spearman"]["wmean"] == pytest.approx(1 / 7)
    assert d["subsets"]["B"] == {"n": 3, "spearman": pytest.approx(-1.0), "pearson": pytest.approx(-1.0)}
    points = result.to_dict(points=True)
    assert points["spearman"]["all"] == pytest.approx(100 * 10.5 / 26.5)
    assert points["scale"].startswith("points")
    assert to_points(0.7723) == pytest.approx(77.23)


def test_sts_single_subset_protocols_agree() -> None:
    rng = np.random.default_rng(0)
    gold = rng.uniform(0, 5, 50)
    pred = gold + rng.normal(size=50)
    result = evaluate_sts({"default": (gold, pred)})
    assert result.spearman_all == pytest.approx(result.spearman_wmean) == pytest.approx(result.spearman_mean)
    assert result.aggregate("pearson", "mean") == pytest.approx(stats.pearsonr(gold, pred).statistic)


def test_evaluate_sts_rejects_bad_input() -> None:
    with pytest.raises(InputError, match="empty"):
        evaluate_sts({})
    with pytest.raises(InputError, match="subset 'x'"):
        evaluate_sts({"x": ([1, 2, 3], [1, 2])})
    with pytest.raises(InputTypeError):
        evaluate_sts({"x": [1, 2, 3]})


# --------------------------------------------------------------------------- AUC


def test_roc_auc_known_cases() -> None:
    assert roc_auc([0, 0, 1, 1], [0.1, 0.2, 0.8, 0.9]) == 1.0
    assert roc_auc([1, 1, 0, 0], [0.1, 0.2, 0.8, 0.9]) == 0.0
    assert roc_auc([0, 1, 0, 1, 1], [0.5] * 5) == 0.5
    # pos 0.8 vs neg 0.8: 1/2; pos 0.8 vs neg 0.1: 1; pos 0.3 vs neg 0.8: 0; pos 0.3 vs neg 0.1: 1 -> 2.5 / 4
    assert roc_auc([1, 0, 1, 0], [0.8, 0.8, 0.3, 0.1]) == pytest.approx(0.625)
    assert roc_auc(np.array([True, False]), [2.0, 1.0]) == 1.0


def test_roc_auc_matches_sklearn() -> None:
    sklearn_metrics = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(3)
    for _ in range(5):
        labels = rng.integers(0, 2, size=300)
        scores = np.round(rng.normal(size=300) + 0.5 * labels, 1)  # rounding creates ties
        assert roc_auc(labels, scores) == pytest.approx(sklearn_metrics.roc_auc_score(labels, scores), abs=1e-12)


def test_roc_auc_errors() -> None:
    with pytest.raises(InputError, match="both classes"):
        roc_auc([1, 1, 1], [0.1, 0.2, 0.3])
    with pytest.raises(InputError, match="labels has 3 values but scores has 2"):
        roc_auc([0, 1, 1], [0.1, 0.2])
    with pytest.raises(InputError, match="NaN"):
        roc_auc([0, 1], [0.1, np.nan])
    with pytest.raises(InputError, match="0 or 1"):
        roc_auc([0, 2], [0.1, 0.2])


# --------------------------------------------------------------------------- lexical


def test_word_edit_distance_known_answers() -> None:
    assert word_edit_distance(["a", "b", "c"], ["a", "b", "c"]) == 0
    assert word_edit_distance(["the", "cat", "sat"], ["the", "dog", "sat"]) == 1  # substitution
    assert word_edit_distance(["a", "c"], ["a", "b", "c"]) == 1  # insertion
    assert word_edit_distance(["a", "b", "c"], ["a", "c"]) == 1  # deletion
    assert word_edit_distance(["a", "b"], ["b", "a"]) == 2
    assert word_edit_distance([], []) == 0
    assert word_edit_distance([], ["a", "b", "c"]) == 3
    assert word_edit_distance(list("kitten"), list("sitting")) == 3
    with pytest.raises(InputTypeError, match="split"):
        word_edit_distance("a b", ["a"])


def test_lexical_similarity_correlations_tiny() -> None:
    s1 = ["a b c", "a b c", "a b", "a", "x y"]
    s2 = ["a b c", "a b d", "c d e f", "b c d e f g", "x y z"]  # edit distances 0, 1, 4, 6, 1
    gold = [5.0, 4.0, 2.0, 0.0, 3.0]
    cos = [0.9, 0.7, 0.75, 0.1, 0.8]
    out = lexical_similarity_correlations(s1, s2, gold, {"cos": np.array(cos)})
    assert out["n_pairs"] == {"all": 5, "small_edit": 4}
    assert out["max_edit_distance"] == 4
    # all pairs: distance ranks [1, 2.5, 4, 5, 2.5], gold ranks [5, 4, 2, 1, 3] -> -9.5 / sqrt(9.5 * 10)
    assert out["spearman"]["gold"]["all"] == pytest.approx(-9.5 / math.sqrt(95))
    # distance <= 4 (pairs 0, 1, 2, 4): -4.5 / sqrt(4.5 * 5)
    assert out["spearman"]["gold"]["small_edit"] == pytest.approx(-4.5 / math.sqrt(22.5))
    dist = np.array([0, 1, 4, 6, 1])
    assert out["spearman"]["cos"]["all"] == pytest.approx(stats.spearmanr(cos, dist).statistic)
    keep = dist <= 4
    assert out["spearman"]["cos"]["small_edit"] == pytest.approx(stats.spearmanr(np.array(cos)[keep], dist[keep]).statistic)
    assert json.loads(json.dumps(out)) == out
    # a threshold that leaves one pair: undefined -> None
    assert lexical_similarity_correlations(s1, s2, gold, {}, max_edit_distance=0)["spearman"]["gold"]["small_edit"] is None
    with pytest.raises(InputError, match="has 4 values but there are 5"):
        lexical_similarity_correlations(s1, s2, gold, {"cos": cos[:4]})


# --------------------------------------------------------------------------- isotropy


def test_isotropy_of_isotropic_gaussian() -> None:
    rng = np.random.default_rng(0)
    X = rng.standard_normal((5000, 8))
    report = isotropy_report(X, seed=0, n_pairs=5000)
    assert abs(report["mean_random_cosine"]) < 0.03
    assert report["isotropy_score"] > 0.85
    assert report["effective_rank"] > 0.97 * 8
    assert report["top_k_variance_share"]["1"] < 0.2
    assert report["top_k_variance_share"]["10"] == pytest.approx(1.0)  # k capped at d
    assert len(report["singular_values"]) == 8
    assert json.loads(json.dumps(report)) == report
    # the seed fixes the random pairs
    assert isotropy_report(X, seed=0, n_pairs=5000)["mean_random_cosine"] == report["mean_random_cosine"]


def test_isotropy_of_anisotropic_data() -> None:
    rng = np.random.default_rng(0)
    X = rng.standard_normal((5000, 8))
    X[:, 0] *= 5.0  # one dominant direction
    X += 4.0  # a large common mean vector
    report = isotropy_report(X, seed=0)
    assert report["mean_random_cosine"] > 0.7
    assert report["isotropy_score"] < 1e-3
    assert report["top_k_variance_share"]["1"] > 0.7
    assert report["effective_rank"] < 7.0
    assert report["mean_vector_norm_ratio"] > 0.8


def test_spectrum_helpers() -> None:
    assert effective_rank(np.ones(10)) == pytest.approx(10.0)
    assert effective_rank(np.array([3.0, 0.0, 0.0])) == pytest.approx(1.0)
    assert top_k_variance_share(np.array([2.0, 1.0, 1.0]), (1, 2)) == {1: pytest.approx(4 / 6), 2: pytest.approx(5 / 6)}
    # rows on the +/- coordinate axes: Z(c) is the same for every eigenvector and sign
    X = np.vstack([np.eye(3), -np.eye(3)])
    assert isotropy_score(X) == pytest.approx(1.0)
    with pytest.raises(InputError, match="NaN"):
        isotropy_report(np.array([[1.0, np.nan], [0.0, 1.0]]))


def test_plot_spectra_writes_png_atomically(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    spectra = {
        "isotropic": np.linalg.svd(rng.standard_normal((200, 16)), compute_uv=False),
        "anisotropic": np.array([100.0, 10.0, 1.0, 0.1, 0.0]),
    }
    target = tmp_path / "plots" / "spectra.png"
    assert plot_spectra(spectra, target, title="test") == target
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in target.parent.iterdir()) == ["spectra.png"]
    with pytest.raises(InputError, match=r"\.png"):
        plot_spectra(spectra, tmp_path / "spectra.pdf")


def test_plot_spectra_without_matplotlib_says_which_extra_to_install(tmp_path: Path, without_matplotlib: None) -> None:
    target = tmp_path / "spectra.png"
    with pytest.raises(ImportError, match=r"pip install 'flow-plugin\[plots\]'") as caught:
        plot_spectra({"line": np.array([3.0, 2.0, 1.0])}, target)
    assert isinstance(caught.value, MissingExtraError)
    assert list(tmp_path.iterdir()) == []


def test_evaluation_imports_no_torch_or_mteb() -> None:
    import subprocess

    # Import the parent package first: only what flow_plugin.evaluation itself pulls in is checked.
    code = (
        "import sys, flow_plugin; before = set(sys.modules); import flow_plugin.evaluation; "
        "new = {m.split('.')[0] for m in set(sys.modules) - before}; print('torch' in new, 'mteb' in new)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[1])
    assert out.stdout.split() == ["False", "False"]
