"""The gentle family (``calibration/gentle.py`` and ``whiten-third``): what each map does, its extremes, its
fitted attributes, its small-sample rule, its refusals, and its export as an affine map."""

from __future__ import annotations

import numpy as np
import pytest

from flow_plugin.calibration import (
    GENTLE_CALIBRATORS,
    Calibrator,
    Centering,
    MeanDirectionRemoval,
    SoftWhitening,
    Whitening,
    make_calibrator,
)
from flow_plugin.errors import InputError
from flow_plugin.integrations.sentence_transformers.modules import centred_affine_map

DIM = 32


def anisotropic(n: int, seed: int) -> np.ndarray:
    """Embeddings in a narrow cone (a large common offset, a fast-decaying spectrum), as in test_calibrators."""
    rng = np.random.default_rng(seed)
    mixing = np.random.default_rng(123).normal(size=(DIM, DIM)) * np.geomspace(4.0, 0.1, DIM)[:, None]
    offset = np.random.default_rng(7).normal(size=DIM) * 6.0
    return (rng.normal(size=(n, DIM)) @ mixing + offset).astype(np.float32)


@pytest.fixture(scope="module")
def train() -> np.ndarray:
    return anisotropic(4000, seed=0)


@pytest.fixture(scope="module")
def heldout() -> np.ndarray:
    return anisotropic(1000, seed=1)


def cosines(Z: np.ndarray) -> np.ndarray:
    """Every pairwise cosine similarity of the rows of Z, in float64."""
    unit = Z.astype(np.float64) / np.linalg.norm(Z.astype(np.float64), axis=1, keepdims=True)
    return unit @ unit.T


def relative_difference(ours: np.ndarray, reference: np.ndarray) -> float:
    """The largest difference in a row over that row's largest component (the export's own measure)."""
    difference = np.abs(ours.astype(np.float64) - reference.astype(np.float64)).max(axis=1)
    return float((difference / np.abs(reference.astype(np.float64)).max(axis=1)).max())


# ----------------------------------------------------------------- what each map does
def test_centering_subtracts_the_mean_and_is_exactly_invertible(train: np.ndarray, heldout: np.ndarray) -> None:
    centering = Centering().fit(train)
    np.testing.assert_allclose(centering.mean_, train.astype(np.float64).mean(axis=0), rtol=0, atol=1e-5)
    assert centering.mean_.dtype == np.float32 and centering.get_params() == {}
    Z = centering.transform(train)
    # float32 rows of scale ~40 minus a float32 mean: each element within a rounding step (4e-6) of the float64 value
    assert np.abs(Z.astype(np.float64).mean(axis=0)).max() < 1e-5
    np.testing.assert_array_equal(Z, train - centering.mean_)
    # x - mean, then + mean: two float32 roundings, at most one rounding step of the largest element (measured half)
    restored = centering.inverse_transform(centering.transform(heldout))
    assert np.abs(restored - heldout).max() <= np.spacing(np.abs(heldout).max())


def test_mean_direction_removal_leaves_nothing_along_the_mean_and_is_the_papers_projection(
    train: np.ndarray, heldout: np.ndarray
) -> None:
    removal = MeanDirectionRemoval().fit(train)
    mean = train.astype(np.float64).mean(axis=0)
    u = mean / np.linalg.norm(mean)
    np.testing.assert_allclose(removal.direction_, u, rtol=0, atol=1e-6)
    assert removal.direction_.dtype == removal.mean_.dtype == np.float32
    Z = removal.transform(heldout).astype(np.float64)
    # every row is orthogonal to u: measured at most 1.7e-7 of a row's norm (float32 rounding); margin 50x, while
    # the rows as they come have on average 0.59 of their norm along u
    assert np.abs(Z @ u).max() / np.linalg.norm(Z, axis=1).min() < 1e-5
    assert np.mean(np.abs(heldout.astype(np.float64) @ u) / np.linalg.norm(heldout.astype(np.float64), axis=1)) > 0.5
    # and the mean is 0 (μ lies along u): measured 3.8e-7 per dimension, rows of scale ~40; margin 25x
    assert np.abs(removal.transform(train).astype(np.float64).mean(axis=0)).max() < 1e-5
    # Ren et al.'s R2, e - (e·û) û, on the raw embeddings in float64: the centred form computes the same map
    # (measured 1.3e-7 of a row's largest component; margin 7x; centering alone is off by more than 0.1)
    paper = heldout.astype(np.float64) - np.outer(heldout.astype(np.float64) @ u, u)
    assert relative_difference(removal.transform(heldout), paper) < 1e-6
    assert relative_difference(Centering().fit(train).transform(heldout), paper) > 0.1
    # nothing is rescaled: the variance off u is the data's own
    centred = heldout.astype(np.float64) - mean
    np.testing.assert_allclose(Z.var(axis=0).sum(), (centred - np.outer(centred @ u, u)).var(axis=0).sum(), rtol=1e-5)


def test_soft_whitening_takes_the_spectrum_to_the_power_one_minus_strength(train: np.ndarray) -> None:
    eigenvalues = np.linalg.eigvalsh(np.cov(train.astype(np.float64), rowvar=False))[::-1]
    for strength in (0.25, 0.5, 0.75):
        soft = SoftWhitening(strength=strength).fit(train)
        # float32 storage of float64 eigenvalues: measured 5e-8 relative; margin 20x
        np.testing.assert_allclose(soft.explained_variance_, eigenvalues, rtol=1e-6)
        produced = np.linalg.eigvalsh(np.cov(soft.transform(train).astype(np.float64), rowvar=False))[::-1]
        # each variance becomes λ^(1 - strength): measured within 3.0e-7 relative (float32 map and rows); margin 30x
        np.testing.assert_allclose(produced, eigenvalues ** (1 - strength), rtol=1e-5)
        assert soft.components_.shape == (DIM, DIM) and soft.components_.dtype == np.float32
        np.testing.assert_allclose(soft.components_, soft.components_.T, rtol=0, atol=1e-6)  # ZCA form: symmetric


def test_soft_whitening_at_strength_0_is_centering_and_at_strength_1_is_whitening(
    train: np.ndarray, heldout: np.ndarray
) -> None:
    reference = {0.0: Centering().fit(train).transform(heldout), 1.0: Whitening().fit(train).transform(heldout)}
    for strength, expected in reference.items():
        soft = SoftWhitening(strength=strength).fit(train)
        Z = soft.transform(heldout)
        # every pairwise cosine: measured 0 (strength 0: the map is the identity to the last bit) and at most 3.2e-6
        # (strength 1: whitening's float32 rounding of rows whose smallest direction is 40x below the largest);
        # margin 3x, while strength 0.5 is 0.49 and 0.89 away from the two
        assert np.abs(cosines(Z) - cosines(expected)).max() < 1e-5, strength
        # the norms agree too: strength 0 is the identity after centring, strength 1 whitening up to a rotation
        np.testing.assert_allclose(np.linalg.norm(Z, axis=1), np.linalg.norm(expected, axis=1), rtol=1e-4)
    # a strength in between is neither
    middle = SoftWhitening(strength=0.5).fit(train).transform(heldout)
    assert all(np.abs(cosines(middle) - cosines(expected)).max() > 0.05 for expected in reference.values())


def test_soft_whitening_is_invertible(train: np.ndarray, heldout: np.ndarray) -> None:
    for strength in (0.0, 0.5, 1.0):
        soft = SoftWhitening(strength=strength).fit(train)
        restored = soft.inverse_transform(soft.transform(heldout))
        # measured at most 2.1e-6 of the largest element (strength 1); margin 5x
        assert np.abs(restored - heldout).max() / np.abs(heldout).max() < 1e-5


def test_soft_whitening_maps_zero_variance_directions_to_zero_above_strength_0(train: np.ndarray) -> None:
    constrained = train - train.mean(axis=1, keepdims=True)  # LayerNorm's sum-to-zero constraint: one null direction
    ones = np.ones(DIM) / np.sqrt(DIM)
    for strength, degenerate in ((0.0, 0), (0.5, 1), (1.0, 1)):
        soft = SoftWhitening(strength=strength).fit(constrained)
        Z = soft.transform(constrained)
        assert soft.n_degenerate_ == degenerate and np.isfinite(Z).all()
        # the null direction holds rounding only (measured at most 1.3e-6 of the largest element), nothing amplified
        assert np.abs(Z @ ones).max() < 1e-4 * np.abs(Z).max()


def test_whiten_third_keeps_a_third_of_every_width() -> None:
    assert make_calibrator("whiten-third").get_params() == {"n_components": 1 / 3, "shrinkage": 0.0}
    for width, kept in ((32, 11), (384, 128), (768, 256), (1024, 341), (2, 1)):
        assert make_calibrator("whiten-third").output_width(width) == kept
    assert Whitening(n_components=0.5).output_width(384) == 192 and Whitening(n_components=0.01).output_width(32) == 1
    X = anisotropic(500, seed=2)
    whitening = make_calibrator("whiten-third").fit(X)
    assert whitening.n_components == 1 / 3 and whitening.n_components_ == 11 and whitening.transform(X).shape == (500, 11)
    np.testing.assert_array_equal(whitening.transform(X), Whitening(n_components=11).fit(X).transform(X))


# ----------------------------------------------------------------- the small-sample rule and refusals
def test_soft_whitening_on_few_rows_shrinks_the_covariance_and_keeps_its_strength() -> None:
    small = anisotropic(20, seed=3)
    soft = SoftWhitening(strength=0.5).fit(small)
    assert soft.get_params() == {"strength": 0.5}
    assert soft.covariance_estimator_ == "ledoit-wolf" and 0 < soft.shrinkage_ <= 1
    assert soft.adapted_.startswith("soft-whitening 32 directions needs at least 65 distinct rows (twice as many), "
                                    "got 20: Ledoit-Wolf")
    assert soft.effective_params() == {"covariance_estimator_": "ledoit-wolf", "shrinkage_": soft.shrinkage_}
    assert np.isfinite(soft.transform(small)).all()
    centring = SoftWhitening(strength=0.0).fit(small)  # nothing rescaled: no rule
    assert centring.adapted_ is None and centring.covariance_estimator_ == "empirical"
    np.testing.assert_allclose(centring.transform(small), Centering().fit(small).transform(small), rtol=0, atol=1e-5)
    assert SoftWhitening().fit(anisotropic(65, seed=3)).covariance_estimator_ == "empirical"  # 2d + 1 rows suffice


@pytest.mark.parametrize("name", ["center", "remove-mean-dir", "soft-whiten"])
def test_one_row_is_too_few(name: str) -> None:
    with pytest.raises(InputError, match=r"needs at least 2 samples to fit 32-dimensional embeddings, got 1 sample"):
        make_calibrator(name).fit(anisotropic(1, seed=5))


def test_a_mean_of_zero_has_no_direction_to_remove() -> None:
    X = anisotropic(200, seed=4).astype(np.float64)
    centred = (X - X.mean(axis=0)).astype(np.float32)  # float32 leaves ~1e-8 of the rows' norm of the mean
    with pytest.raises(InputError, match=r"^MeanDirectionRemoval: the mean of the 200 embeddings is \(numerically\) "
                                         r"zero .*: there is no mean direction to remove; use the raw embeddings$"):
        MeanDirectionRemoval().fit(centred)
    MeanDirectionRemoval().fit(centred + 1e-3)  # a mean of 1e-3 per dimension is a direction (~1e-4 of the norm)


@pytest.mark.parametrize("strength", [-0.1, 1.5, float("nan"), "half", True, None])
def test_a_strength_outside_0_to_1_is_refused_in_one_line(strength: object) -> None:
    with pytest.raises(InputError) as error:
        SoftWhitening(strength=strength).fit(anisotropic(100, seed=6))
    assert str(error.value) == (f"SoftWhitening strength must be a number in [0, 1] (0: centering, 1: whitening), "
                                f"got {strength!r}")


@pytest.mark.parametrize("fraction", [0.0, 1.0, 1.5, -0.5])
def test_a_whitening_fraction_outside_0_to_1_is_refused_in_one_line(fraction: float) -> None:
    with pytest.raises(InputError, match=r"^Whitening n_components as a fraction of the dimensions must be in \(0, 1\), "
                                         rf"got {fraction!r}; give an int in 1\.\.32 for a number of directions, or "
                                         r"None for all$"):
        Whitening(n_components=fraction).fit(anisotropic(100, seed=6))


# ----------------------------------------------------------------- persistence and export
@pytest.mark.parametrize(("name", "params"), [("soft-whiten", {"strength": 0.3}), ("whiten-third", {}),
                                              ("remove-mean-dir", {})])
def test_save_and_load_keep_the_parameters_the_effective_values_and_the_map(
    name: str, params: dict, train: np.ndarray, heldout: np.ndarray, tmp_path
) -> None:
    fitted = make_calibrator(name, **params).fit(train[:50])  # few rows: the rule's effective values are recorded
    fitted.save(tmp_path / "gentle.npz")
    loaded = Calibrator.load(tmp_path / "gentle.npz", n_features=DIM)
    assert type(loaded) is type(fitted) and loaded.get_params() == fitted.get_params()
    assert loaded.effective_params() == fitted.effective_params() and loaded.adapted_ == fitted.adapted_
    np.testing.assert_array_equal(loaded.transform(heldout), fitted.transform(heldout))


@pytest.mark.parametrize("name", GENTLE_CALIBRATORS)
def test_every_gentle_calibrator_is_an_affine_map_the_export_writes(
    name: str, train: np.ndarray, heldout: np.ndarray
) -> None:
    calibrator = make_calibrator(name).fit(train)
    centre, weight, bias = centred_affine_map(calibrator)
    assert np.any(centre)
    mapped = (heldout.astype(np.float64) - centre) @ weight + bias
    # the float64 map of the float32 state against the float32 transform: measured at most 1.0e-6 of a row's largest
    # component (soft whitening); test_export.py holds the exported Dense layers to 1e-5; margin 10x
    assert relative_difference(calibrator.transform(heldout), mapped) < 1e-5
    # without its centre the map is another one (off by more than 1), but for the mean direction's removal, where
    # the centre lies along the removed direction: there centring changes nothing (measured 1.5e-7)
    uncentred = heldout.astype(np.float64) @ weight + bias
    assert (relative_difference(calibrator.transform(heldout), uncentred) < 1e-5) == (name == "remove-mean-dir")
