"""The linear calibrators as a centring followed by an affine projection, ``z = (x - c) W + b``.

Every closed-form calibrator (raw, SN, NATSV, SN+NATSV, whitening, and the gentle family: centering,
mean-direction removal, soft whitening) is affine in the embedding.
It is written here as the calibrator computes it: first subtract its centre ``c`` (the fitted
mean), then project (``W``, with a bias ``b`` that is 0 but for SN+NATSV, where it is the
small mean left after standardising). Folding the centre into one bias, ``x W + (b - c W)``,
is the same map in exact arithmetic but not in float32: the embeddings share a large common
mean that the calibrators remove, so ``x W`` and ``-c W`` are both large and their sum cancels
(measured for SN+NATSV on all-MiniLM-L6-v2, 1,000 SICK sentences, float32: 9.8e-6 of an
embedding's scale folded, 1.2e-6 centred). The maps are computed here in float64 from the fitted state (which the calibrators
store in float32) and handed over as float64; the caller stores them in the precision its
layers run in.

Examples
--------
>>> import numpy as np
>>> from flow_plugin.calibration import make_calibrator
>>> X = np.random.default_rng(0).normal(size=(200, 6)).astype(np.float32) * [1, 2, 3, 4, 5, 6] + 3
>>> whitening = make_calibrator("whiten").fit(X)
>>> linear = centred_affine_map(whitening)
>>> linear.centre.shape, linear.projection.weight.shape, linear.projection.bias.shape
((6,), (6, 6), (6,))
>>> bool(np.allclose((X - linear.centre) @ linear.projection.weight, whitening.transform(X), atol=1e-5))
True
>>> bool(np.allclose(X @ affine_map(whitening).weight + affine_map(whitening).bias, whitening.transform(X), atol=1e-5))
True
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from flow_plugin.calibration import Calibrator
from flow_plugin.calibration.names import GENTLE_CALIBRATORS, LINEAR_BASELINES, calibrator_method
from flow_plugin.errors import InputError

#: the calibrator methods that are affine maps (every method but the flow)
LINEAR_METHODS: tuple[str, ...] = tuple(dict.fromkeys(
    ["raw", *LINEAR_BASELINES, *(calibrator_method(name) for name in GENTLE_CALIBRATORS)]))


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


@dataclass(frozen=True)
class CentredAffineMap:
    """``z = (x - centre) @ projection.weight + projection.bias`` (float64)."""

    centre: np.ndarray
    projection: AffineMap

    @property
    def is_centred(self) -> bool:
        """Whether there is a centre to subtract (raw has none)."""
        return bool(np.any(self.centre))

    def folded(self) -> AffineMap:
        """The same map as one ``z = x W + b``: exact in float64, cancelling in float32."""
        weight = self.projection.weight
        return AffineMap(weight, self.projection.bias - self.centre @ weight)


def _f64(array: np.ndarray) -> np.ndarray:
    return np.asarray(array, dtype=np.float64)


def _linear(weight: np.ndarray) -> AffineMap:
    return AffineMap(weight, np.zeros(weight.shape[1]))


def _null_projection(components: np.ndarray) -> np.ndarray:
    """NATSV's ``c - (c C^T) C`` as one matrix: the projection off the rows of ``C``."""
    components = _f64(components)
    return np.eye(components.shape[1]) - components.T @ components


def centred_affine_map(calibrator: Calibrator) -> CentredAffineMap:
    """The fitted linear ``calibrator`` as ``z = (x - c) W + b`` (float64). A flow is not affine:
    :class:`InputError`."""
    calibrator._check_is_fitted()
    method = calibrator.method
    n_features = int(calibrator.n_features_in_)
    if method == "raw":
        return CentredAffineMap(np.zeros(n_features), _linear(np.eye(n_features)))
    if method == "sn":  # (x - mean) / scale
        return CentredAffineMap(_f64(calibrator.mean_), _linear(np.diag(1.0 / _f64(calibrator.scale_))))
    if method == "natsv":  # c - (c C^T) C with c = x - mean
        return CentredAffineMap(_f64(calibrator.mean_), _linear(_null_projection(calibrator.components_)))
    if method == "sn-natsv":  # s = (x - sn mean) / scale, then NATSV of s: (s - natsv mean) P
        sn, natsv = calibrator.standardize_, calibrator.natsv_
        projection = AffineMap(np.diag(1.0 / _f64(sn.scale_)), -_f64(natsv.mean_)).then(
            _linear(_null_projection(natsv.components_)))
        return CentredAffineMap(_f64(sn.mean_), projection)
    if method in ("whiten", "soft-whiten"):  # (x - mean) @ components: U Λ^(-1/2) (whiten), U Λ^(-s/2) Uᵀ (soft)
        return CentredAffineMap(_f64(calibrator.mean_), _linear(_f64(calibrator.components_)))
    if method == "center":  # x - mean
        return CentredAffineMap(_f64(calibrator.mean_), _linear(np.eye(n_features)))
    if method == "remove-mean-dir":  # c - (c u) u with c = x - mean: the projection off the mean's direction u
        return CentredAffineMap(_f64(calibrator.mean_), _linear(_null_projection(calibrator.direction_[None, :])))
    raise InputError(
        f"a {method!r} calibrator is not an affine map; only {', '.join(LINEAR_METHODS)} export as Dense layers"
    )


def affine_map(calibrator: Calibrator) -> AffineMap:
    """The fitted linear ``calibrator`` as one ``z = x W + b`` (float64): :func:`centred_affine_map` folded."""
    return centred_affine_map(calibrator).folded()
