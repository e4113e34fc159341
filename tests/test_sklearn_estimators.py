"""Every calibrator is a scikit-learn transformer: sklearn's own estimator checks run on each,
and the calibrators compose with sklearn's clone, set_params and Pipeline."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn import config_context
from sklearn.base import clone
from sklearn.pipeline import make_pipeline
from sklearn.utils.estimator_checks import parametrize_with_checks

from flow_plugin.calibration import (
    CALIBRATOR_NAMES,
    NATSV,
    Centering,
    FlowCalibrator,
    Identity,
    MeanDirectionRemoval,
    SoftWhitening,
    StandardNormalization,
    StandardNormalizationNATSV,
    Whitening,
    make_calibrator,
)

ESTIMATORS = [
    Identity(),
    StandardNormalization(),
    NATSV(n_components=1),
    StandardNormalizationNATSV(n_components=1),
    Whitening(),
    Whitening(n_components=2, shrinkage="auto"),
    Whitening(n_components=0.5),
    Centering(),
    MeanDirectionRemoval(),
    SoftWhitening(),
    SoftWhitening(strength=0.0),
    FlowCalibrator(n_levels=1, depth=2, show_progress_bar=False),
]


#: the checks that fit on sklearn's standardised blobs, whose mean is exactly 0
_CENTRED_DATA_CHECKS = ("check_transformer_data_not_an_array", "check_transformer_general",
                        "check_transformer_preserve_dtypes")


def expected_failures(estimator: object) -> dict[str, str]:
    if isinstance(estimator, (Identity, StandardNormalization, Centering)):
        return {}  # elementwise arithmetic: row order cannot matter
    failures = {
        "check_methods_sample_order_invariance": (
            "float32 matrix products round differently when the rows come in another order (BLAS blocking): "
            "an element may differ in its last bit, beyond sklearn's rtol of 1e-7"
        )
    }
    if isinstance(estimator, MeanDirectionRemoval):  # (test_gentle_calibrators.py checks the refusal)
        failures |= {check: "centred data has no mean direction to remove, and fit refuses it in one line"
                     for check in _CENTRED_DATA_CHECKS}
    return failures


@parametrize_with_checks(ESTIMATORS, expected_failed_checks=expected_failures)
def test_sklearn_estimator_checks(estimator: object, check: object) -> None:
    check(estimator)


def test_clone_set_params_and_pipeline_compose_like_any_sklearn_transformer() -> None:
    X = np.random.default_rng(0).normal(size=(300, 6)).astype(np.float32) * np.arange(1, 7) + 5
    whitening = Whitening(n_components=3).set_params(n_components=4)
    assert whitening.get_params() == {"n_components": 4, "shrinkage": 0.0}
    fitted = whitening.fit(X)
    copy = clone(fitted)
    assert copy.get_params() == fitted.get_params() and not copy.is_fitted
    pipeline = make_pipeline(StandardNormalization(), NATSV(n_components=2)).fit(X)
    ours = StandardNormalizationNATSV(n_components=2).fit(X)
    np.testing.assert_allclose(pipeline.transform(X), ours.transform(X), rtol=0, atol=1e-5)

    # output feature names, as every scikit-learn transformer gives them; the embeddings stay float32 arrays even
    # where scikit-learn is set to give DataFrames (MTEB and our other routes read arrays)
    fitted = make_pipeline(StandardNormalization(), Whitening(n_components=4)).fit(X)
    assert list(fitted.get_feature_names_out()) == ["whitening0", "whitening1", "whitening2", "whitening3"]
    plain = fitted.transform(X)
    with config_context(transform_output="pandas"):
        under_pandas = Whitening(n_components=4).fit(X)
        assert isinstance(under_pandas.transform(X), np.ndarray) and under_pandas.transform(X).dtype == np.float32
        assert isinstance(StandardNormalization().fit_transform(X), np.ndarray)
    assert plain.dtype == np.float32


@pytest.mark.parametrize("name", CALIBRATOR_NAMES)
def test_numpy_numbers_as_hyper_parameters_fit_what_python_numbers_fit(name: str, tmp_path) -> None:
    """A hyper-parameter read from a NumPy array or a grid (``np.int64(3)``, ``np.float32(0.5)``) is the same value:
    accepted, the same fit bit for bit (torch takes sizes and seeds as Python ints only), and saved and loaded."""
    X = np.random.default_rng(0).normal(size=(200, 16)).astype(np.float32)
    params = make_calibrator(name).get_params()
    params.update({"n_components": 8} if params.get("n_components", 0) is None else {})
    params.update({"epochs": 0.05} if "epochs" in params else {})
    as_numpy = {key: np.int64(value) if isinstance(value, int) and not isinstance(value, bool)
                else np.float32(value) if isinstance(value, float) and key != "learning_rate"
                else value for key, value in params.items()}
    python_fit = type(make_calibrator(name))(**params).fit(X).transform(X)
    fitted = type(make_calibrator(name))(**as_numpy).fit(X)
    np.testing.assert_array_equal(fitted.transform(X), python_fit)
    fitted.save(tmp_path / "numpy.npz")
    loaded = type(fitted).load(tmp_path / "numpy.npz")
    assert loaded.get_params() == {key: getattr(value, "item", lambda: value)() for key, value in as_numpy.items()}
    np.testing.assert_array_equal(loaded.transform(X), python_fit)
