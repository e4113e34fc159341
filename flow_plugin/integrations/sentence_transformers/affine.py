"""The linear calibrators as one affine map ``z = x W + b``, the form of a ``Dense`` layer.

Every closed-form calibrator (raw, SN, NATSV, SN+NATSV, whitening) is affine in the embedding,
so one matrix and one bias express it exactly. They are computed here in float64 from the
fitted state (which the calibrators store in float32) and handed over as float64; the caller
stores them in the precision its layer runs in.

>>> import numpy as np
>>> from flow_plugin.calibration import make_calibrator
>>> X = np.random.default_rng(0).normal(size=(200, 6)).astype(np.float32) * [1, 2, 3, 4, 5, 6] + 3
>>> whitening = make_calibrator("whiten").fit(X)
>>> affine = affine_map(whitening)
>>> affine.weight.shape, affine.bias.shape
((6, 6), (6,))
>>> bool(np.allclose(X @ affine.weight + affine.bias, whitening.transform(X), atol=1e-5))
True
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from flow_plugin.calibration import Calibrator
from flow_plugin.calibration.names import LINEAR_BASELINES
from flow_plugin.errors import InputError

#: the calibrator methods that are affine maps (every method but the flow)
LINEAR_METHODS: tuple[str, ...] = ("raw", *LINEAR_BASELINES)


@dataclass(frozen=True)
class AffineMap:
    """``z = x @ weight + bias``: ``weight`` is (n_features_in, n_features_out), float64."""

    weight: np.ndarray
    bias: np.ndarray

    @property
    def n_features_in(self) -> int:
        return int(self.weight.shape[0])

    @property
    def n_features_out(self) -> int:
        return int(self.weight.shape[1])

    def then(self, other: AffineMap) -> AffineMap:
        """This map followed by ``other``: ``(x W1 + b1) W2 + b2``."""
        return AffineMap(self.weight @ other.weight, self.bias @ other.weight + other.bias)


def _f64(array: np.ndarray) -> np.ndarray:
    return np.asarray(array, dtype=np.float64)


def _centre(mean: np.ndarray) -> AffineMap:
    """``x - mean``."""
    return AffineMap(np.eye(mean.shape[0]), -_f64(mean))


def _standardize(mean: np.ndarray, scale: np.ndarray) -> AffineMap:
    """SN: ``(x - mean) / scale``."""
    inverse = 1.0 / _f64(scale)
    return AffineMap(np.diag(inverse), -_f64(mean) * inverse)


def _null_directions(mean: np.ndarray, components: np.ndarray) -> AffineMap:
    """NATSV: ``c - (c C^T) C`` with ``c = x - mean``: the projection off the rows of ``C``."""
    components = _f64(components)
    projection = np.eye(mean.shape[0]) - components.T @ components
    return _centre(mean).then(AffineMap(projection, np.zeros(mean.shape[0])))


def affine_map(calibrator: Calibrator) -> AffineMap:
    """The fitted linear ``calibrator`` as ``z = x W + b`` (float64). A flow is not affine:
    :class:`InputError`."""
    calibrator._check_is_fitted()
    method = calibrator.method
    n_features = int(calibrator.n_features_in_)
    if method == "raw":
        return AffineMap(np.eye(n_features), np.zeros(n_features))
    if method == "sn":
        return _standardize(calibrator.mean_, calibrator.scale_)
    if method == "natsv":
        return _null_directions(calibrator.mean_, calibrator.components_)
    if method == "sn-natsv":
        sn, natsv = calibrator.standardize_, calibrator.natsv_
        return _standardize(sn.mean_, sn.scale_).then(_null_directions(natsv.mean_, natsv.components_))
    if method == "whiten":
        components = _f64(calibrator.components_)  # (d, k): eigenvectors / sqrt(eigenvalues), 0 for null directions
        return AffineMap(components, -_f64(calibrator.mean_) @ components)
    raise InputError(
        f"a {method!r} calibrator is not an affine map; only {', '.join(LINEAR_METHODS)} export as a Dense layer"
    )
