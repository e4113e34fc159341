"""Calibrator properties on synthetic anisotropic data, persistence, and bad input."""

from __future__ import annotations

import numpy as np
import pytest

from flow_plugin.calibration import (
    CALIBRATOR_NAMES,
    GENTLE_CALIBRATORS,
    NATSV,
    Calibrator,
    FlowCalibrator,
    Identity,
    StandardNormalization,
    StandardNormalizationNATSV,
    Whitening,
    make_calibrator,
)
from flow_plugin.errors import CalibratorFileError, InputError, InputTypeError, NotFittedError, RegistryError

DIM = 32


def anisotropic(n: int, seed: int) -> np.ndarray:
    """Embeddings in a narrow cone: a large common offset and a fast-decaying spectrum."""
    rng = np.random.default_rng(seed)
    # the smallest scale, 0.1 of the offset's 6: whitened, these rows keep their cosine order under bf16-size
    # rounding (cosine stability 0.996; 0.989 with 0.05, below the 0.99 that fit requires)
    mixing = np.random.default_rng(123).normal(size=(DIM, DIM)) * np.geomspace(4.0, 0.1, DIM)[:, None]
    offset = np.random.default_rng(7).normal(size=DIM) * 6.0
    return (rng.normal(size=(n, DIM)) @ mixing + offset).astype(np.float32)


@pytest.fixture(scope="module")
def train() -> np.ndarray:
    return anisotropic(4000, seed=0)


@pytest.fixture(scope="module")
def heldout() -> np.ndarray:
    return anisotropic(1000, seed=1)


@pytest.fixture(scope="module")
def fitted_flow(train: np.ndarray) -> FlowCalibrator:
    return FlowCalibrator(epochs=3, show_progress_bar=False).fit(train)


def covariance_gap(Z: np.ndarray) -> float:
    """Frobenius distance between the covariance of Z and the identity."""
    return float(np.linalg.norm(np.cov(Z, rowvar=False) - np.eye(Z.shape[1])))


# ----------------------------------------------------------------- properties
def test_identity_returns_input_unchanged(train: np.ndarray) -> None:
    np.testing.assert_array_equal(Identity().fit(train).transform(train), train)


def test_sn_gives_zero_mean_and_unit_variance(train: np.ndarray) -> None:
    Z = StandardNormalization().fit_transform(train)
    np.testing.assert_allclose(Z.mean(axis=0), 0.0, atol=1e-4)
    np.testing.assert_allclose(Z.std(axis=0), 1.0, atol=1e-4)
    np.testing.assert_allclose(StandardNormalization().fit(train).inverse_transform(Z), train, rtol=1e-4, atol=1e-3)


def test_sn_leaves_constant_dimension_unscaled() -> None:
    X = np.random.default_rng(0).normal(size=(50, 4)).astype(np.float32)
    X[:, 2] = 3.0
    Z = StandardNormalization().fit_transform(X)
    assert np.isfinite(Z).all() and np.allclose(Z[:, 2], 0.0)


def test_whitening_gives_identity_covariance(train: np.ndarray) -> None:
    assert covariance_gap(train) > 10
    Z = Whitening().fit_transform(train)
    assert Z.shape == train.shape
    np.testing.assert_allclose(Z.mean(axis=0), 0.0, atol=1e-3)
    assert covariance_gap(Z) < 1e-3


def test_whitening_maps_zero_variance_directions_to_zero(train: np.ndarray) -> None:
    # LayerNorm leaves mean-pooled embeddings with a sum-to-zero constraint: one direction has no variance
    constrained = train - train.mean(axis=1, keepdims=True)
    whitening = Whitening().fit(constrained)
    Z = whitening.transform(constrained)
    assert whitening.n_degenerate_ == 1 and np.isfinite(Z).all()
    eigenvalues = np.sort(np.linalg.eigvalsh(np.cov(Z, rowvar=False)))
    np.testing.assert_allclose(eigenvalues[1:], 1.0, atol=1e-3)
    assert eigenvalues[0] < 1e-6


def test_whitening_truncation_keeps_leading_directions(train: np.ndarray) -> None:
    whitening = Whitening(n_components=8).fit(train)
    Z = whitening.transform(train)
    assert Z.shape == (len(train), 8) and whitening.n_features_out_ == 8
    assert covariance_gap(Z) < 1e-3
    assert np.all(np.diff(whitening.explained_variance_) <= 0)


def test_whitening_full_rank_is_exactly_invertible(train: np.ndarray) -> None:
    whitening = Whitening().fit(train)
    restored = whitening.inverse_transform(whitening.transform(train))
    assert np.abs(restored - train).max() / np.abs(train).max() < 1e-4


@pytest.mark.parametrize("calibrator_class", [NATSV, StandardNormalizationNATSV])
def test_natsv_leaves_no_variance_on_removed_directions(train: np.ndarray, calibrator_class: type) -> None:
    calibrator = calibrator_class(n_components=3).fit(train)
    Z = calibrator.transform(train)
    natsv = calibrator if isinstance(calibrator, NATSV) else calibrator.natsv_
    projections = Z @ natsv.components_.T
    assert projections.var(axis=0).max() < 1e-6 * Z.var(axis=0).sum()
    np.testing.assert_allclose(Z.mean(axis=0), 0.0, atol=1e-3)
    # the removed directions are the leading principal directions of the (standardised) data
    source = train if isinstance(calibrator, NATSV) else calibrator.standardize_.transform(train)
    _, _, vt = np.linalg.svd(source - source.mean(axis=0), full_matrices=False)
    np.testing.assert_allclose(np.abs(natsv.components_ @ vt[:3].T), np.eye(3), atol=1e-3)


def test_flow_raises_heldout_likelihood_over_untrained_flow(
    train: np.ndarray, heldout: np.ndarray, fitted_flow: FlowCalibrator
) -> None:
    # same architecture, same data-dependent ActNorm start, learning switched off
    untrained = FlowCalibrator(epochs=1e-9, learning_rate=1e-30, show_progress_bar=False).fit(train)
    assert fitted_flow.score(heldout) > untrained.score(heldout) + 1.0
    assert fitted_flow.fit_log_likelihood_ > fitted_flow.initial_log_likelihood_
    assert fitted_flow.fit_bits_per_dim_ == pytest.approx(
        -fitted_flow.fit_log_likelihood_ / (DIM * np.log(2)), rel=1e-9
    )
    assert fitted_flow.bits_per_dim(train) == pytest.approx(fitted_flow.fit_bits_per_dim_, rel=1e-4)


def test_flow_latent_is_much_closer_to_isotropic_than_input(heldout: np.ndarray, fitted_flow: FlowCalibrator) -> None:
    Z = fitted_flow.transform(heldout)
    assert Z.shape == heldout.shape
    # Thresholds are relative to the input's own scale. Measured over 12 fits (data seeds 0 and 10 x
    # flow seeds 1234, 1..5): covariance gap ratio 0.0049-0.0051 (limit 0.05: 10x margin); latent mean
    # over input mean 0.017-0.043 (limit 0.1: 2.3x margin). An identity map would give 1.0 for both.
    assert covariance_gap(Z) < 0.05 * covariance_gap(heldout)
    assert np.abs(Z.mean(axis=0)).max() < 0.1 * np.abs(heldout.mean(axis=0)).max()


def test_flow_is_invertible(heldout: np.ndarray, fitted_flow: FlowCalibrator) -> None:
    restored = fitted_flow.inverse_transform(fitted_flow.transform(heldout))
    assert np.abs(restored - heldout).max() / np.abs(heldout).max() < 1e-4


def test_flow_is_deterministic_for_a_seed(train: np.ndarray, heldout: np.ndarray) -> None:
    first = FlowCalibrator(seed=5, show_progress_bar=False).fit(train).transform(heldout)
    second = FlowCalibrator(seed=5, show_progress_bar=False).fit(train).transform(heldout)
    other = FlowCalibrator(seed=6, show_progress_bar=False).fit(train).transform(heldout)
    np.testing.assert_array_equal(first, second)
    assert not np.allclose(first, other)
    # a NumPy integer is the same seed (scikit-learn users pass them); a seed that is not an int >= 0 is refused
    numpy_seed = FlowCalibrator(seed=np.int64(5), show_progress_bar=False).fit(train).transform(heldout)
    np.testing.assert_array_equal(first, numpy_seed)
    for bad in ("5", -1, 5.0, True):
        with pytest.raises(InputError, match=f"FlowCalibrator seed must be an int >= 0, got {bad!r}"):
            FlowCalibrator(seed=bad).fit(train)


def test_flow_structure_follows_official_config(fitted_flow: FlowCalibrator) -> None:
    from nflows.transforms.coupling import AdditiveCouplingTransform
    from nflows.transforms.normalization import ActNorm
    from nflows.transforms.permutations import ReversePermutation

    modules = list(fitted_flow.flow_.modules())
    couplings = [m for m in modules if isinstance(m, AdditiveCouplingTransform)]
    assert len(couplings) == 3 * 3
    assert [c.features for c in couplings] == [32] * 3 + [16] * 3 + [8] * 3
    assert sum(isinstance(m, ReversePermutation) for m in modules) == 9
    assert sum(isinstance(m, ActNorm) for m in modules) >= 9
    assert couplings[0].transform_net.hidden1.out_features == 32


def test_random_permutation_flow_works(train: np.ndarray, heldout: np.ndarray) -> None:
    flow = FlowCalibrator(permutation="random", show_progress_bar=False).fit(train)
    assert flow.score(heldout) > flow.initial_log_likelihood_


# ----------------------------------------------------------------- persistence
@pytest.mark.parametrize("method", CALIBRATOR_NAMES)
def test_save_then_load_gives_identical_outputs(method: str, train: np.ndarray, heldout: np.ndarray, tmp_path) -> None:
    params = {"epochs": 0.5, "show_progress_bar": False} if method == "flow" else {}
    calibrator = make_calibrator(method, **params).fit(train)
    path = tmp_path / f"{method}.npz"
    calibrator.save(path)
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # atomic: no temporary file left
    loaded = Calibrator.load(path, n_features=DIM)
    assert type(loaded) is type(calibrator) and loaded.get_params() == calibrator.get_params()
    np.testing.assert_array_equal(loaded.transform(heldout), calibrator.transform(heldout))
    assert type(calibrator).load(path).n_features_in_ == DIM


def test_loading_another_method_is_an_error(train: np.ndarray, tmp_path) -> None:
    path = tmp_path / "sn.npz"
    StandardNormalization().fit(train).save(path)
    with pytest.raises(CalibratorFileError, match="holds a 'sn' calibrator, not 'whiten'"):
        Whitening.load(path)


def test_loading_another_dimension_is_an_error(train: np.ndarray, tmp_path) -> None:
    path = tmp_path / "whiten.npz"
    Whitening().fit(train).save(path)
    with pytest.raises(CalibratorFileError, match="fitted on 32-dimensional embeddings, but 768"):
        Calibrator.load(path, n_features=768)


@pytest.mark.parametrize("damage", ["empty", "truncated", "flipped"])
def test_a_damaged_calibrator_file_is_a_calibrator_file_error_naming_it(
    damage: str, train: np.ndarray, tmp_path
) -> None:
    path = tmp_path / "whiten.npz"
    Whitening().fit(train).save(path)
    data = path.read_bytes()
    if damage == "empty":
        path.write_bytes(b"")
    elif damage == "truncated":
        path.write_bytes(data[: len(data) // 2])
    else:  # a flipped byte inside the stored arrays: zip's CRC check catches it
        flipped = bytearray(data)
        flipped[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(flipped))
    with pytest.raises(CalibratorFileError, match=r"whiten\.npz.*not a readable flow-plugin calibrator file") as error:
        Calibrator.load(path)
    assert ("is empty" in str(error.value)) == (damage == "empty")


def test_loading_a_corrupt_or_missing_file_is_an_error(tmp_path) -> None:
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not an npz file")
    with pytest.raises(CalibratorFileError, match="not a readable"):
        Calibrator.load(bad)
    with pytest.raises(CalibratorFileError, match="does not exist"):
        Calibrator.load(tmp_path / "missing.npz")


# ----------------------------------------------------------------- bad input
@pytest.mark.parametrize("method", CALIBRATOR_NAMES)
def test_transform_before_fit_is_an_error(method: str, heldout: np.ndarray) -> None:
    with pytest.raises(NotFittedError, match="not fitted yet"):
        make_calibrator(method).transform(heldout)


@pytest.mark.parametrize("method", CALIBRATOR_NAMES)
def test_nan_or_inf_embeddings_are_an_error(method: str, train: np.ndarray) -> None:
    bad = train[:100].copy()
    bad[7, 3] = np.nan
    bad[9, 0] = np.inf
    with pytest.raises(InputError, match=r"NaN or infinite values in 2 row\(s\): 7, 9"):
        make_calibrator(method).fit(bad)
    fitted = make_calibrator(method, **({"epochs": 0.1} if method == "flow" else {})).fit(train)
    with pytest.raises(InputError, match="NaN or infinite"):
        fitted.transform(bad)


@pytest.mark.parametrize("method", CALIBRATOR_NAMES)
def test_empty_fit_is_an_error_and_empty_transform_is_empty(method: str, train: np.ndarray) -> None:
    with pytest.raises(InputError, match="empty"):
        make_calibrator(method).fit(np.empty((0, DIM), dtype=np.float32))
    fitted = make_calibrator(method, **({"epochs": 0.1} if method == "flow" else {})).fit(train)
    out = fitted.transform(np.empty((0, DIM), dtype=np.float32))
    assert out.shape == (0, fitted.n_features_out_) and out.dtype == np.float32


def test_wrong_dimension_or_shape_is_an_error(train: np.ndarray) -> None:
    fitted = StandardNormalization().fit(train)
    with pytest.raises(InputError, match="33 features per row but 32 were expected"):
        fitted.transform(np.zeros((2, 33), dtype=np.float32))
    with pytest.raises(InputError, match="2-D array"):
        fitted.transform(np.zeros(32, dtype=np.float32))
    with pytest.raises(InputTypeError, match="real numbers"):
        fitted.transform(np.array([["a"] * 32]))


def test_whitening_on_fewer_samples_than_dimensions_shrinks_and_keeps_its_hyper_parameters(
    caplog: pytest.LogCaptureFixture,
) -> None:
    small = anisotropic(20, seed=3)
    whitening = Whitening()
    with caplog.at_level("WARNING", logger="flow_plugin.calibration.base"):
        Z = whitening.fit(small).transform(small)
    assert Z.shape == (20, DIM) and np.isfinite(Z).all()
    # the data decided: Ledoit-Wolf shrinkage, said in a fitted attribute and a warning; the parameters stay as set
    assert whitening.get_params() == {"n_components": None, "shrinkage": 0.0}
    assert whitening.covariance_estimator_ == "ledoit-wolf" and 0.0 < whitening.shrinkage_ <= 1.0
    assert whitening.adapted_.startswith("whitening 32 directions needs at least 65 distinct rows (twice as many), "
                                         "got 20: Ledoit-Wolf shrinkage")
    assert whitening.adapted_ in caplog.text
    kept = Whitening(n_components=9).fit(small)  # 9 <= (20 - 1) // 2: the sample covariance, unchanged
    assert kept.transform(small).shape == (20, 9) and kept.covariance_estimator_ == "empirical" and kept.adapted_ is None
    shrunk = Whitening(shrinkage=0.1).fit(small)
    assert shrunk.covariance_estimator_ == "shrunk" and shrunk.shrinkage_ == 0.1
    assert np.isfinite(shrunk.transform(small)).all()


def test_natsv_on_few_samples_nulls_at_most_half_of_their_span_and_too_few_samples_are_errors() -> None:
    X = anisotropic(3, seed=4)
    natsv = NATSV(n_components=5).fit(X)
    assert natsv.n_components == 5 and natsv.n_components_ == 1 and natsv.components_.shape == (1, DIM)
    assert "n_components_=1" in natsv.adapted_
    with pytest.raises(InputError, match="StandardNormalization needs at least 2 samples"):
        StandardNormalization().fit(X[:1])
    with pytest.raises(InputError, match="FlowCalibrator needs at least 2 samples"):
        FlowCalibrator().fit(X[:1])


@pytest.mark.parametrize("method", ["sn", "natsv", "sn-natsv", "whiten", "flow", *GENTLE_CALIBRATORS])
def test_fitting_on_identical_rows_is_an_error(method: str) -> None:
    constant = np.tile(np.arange(DIM, dtype=np.float32), (50, 1))
    with pytest.raises(InputError, match="50 samples are all identical"):
        make_calibrator(method).fit(constant)


def test_bad_hyper_parameters_are_errors(train: np.ndarray) -> None:
    with pytest.raises(InputError, match="n_components must be an int in 0..32"):
        NATSV(n_components=40).fit(train)
    with pytest.raises(InputError, match="permutation must be one of"):
        FlowCalibrator(permutation="learned").fit(train)
    with pytest.raises(InputError, match="too small for 6 levels"):
        FlowCalibrator(n_levels=6).fit(train)


def test_unknown_calibrator_name_suggests_close_names() -> None:
    with pytest.raises(RegistryError, match="did you mean whiten"):
        make_calibrator("whitten")


def test_clone_and_params_follow_estimator_style() -> None:
    flow = FlowCalibrator(depth=2, seed=9)
    clone = flow.clone()
    assert clone is not flow and clone.get_params() == flow.get_params() and not clone.is_fitted
    assert repr(Whitening(n_components=4)) == "Whitening(n_components=4, shrinkage=0.0)"
