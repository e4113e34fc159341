"""The gentle calibrators: linear maps between the raw embeddings and full whitening.

Whitening-like calibrators (NATSV, whitening, BERT-flow) gain on cosine-ranking tasks but cost
sentence encoders on few-shot classification and k-means clustering, which need the spread of
variances that whitening flattens (Forooghi et al., 2024, arXiv 2407.12886; Mickus et al., 2024,
arXiv 2402.03191: strict isotropy is incompatible with cluster structure). These change less:

- :class:`Centering` (``center``): subtract the mean, ``x - mean_``.
- :class:`MeanDirectionRemoval` (``remove-mean-dir``): project every embedding off the direction
  of the mean, ``x - (x·u) u`` with ``u = mean_ / |mean_|`` (Ren, Sun & Liang, "Correcting Mean
  Bias in Text Embeddings", arXiv 2511.11041: their "R2"; centering is their "R1").
- :class:`SoftWhitening` (``soft-whiten``): centre, then rescale each principal direction by
  ``λ^(-strength/2)``: ``strength=0`` is centering, ``1`` is full whitening.

Whitening that keeps only the top k directions (Su et al., 2021) is :class:`~.linear.Whitening`
with ``n_components`` (an int, or a fraction of the dimensions: the ``whiten-third`` variant).
Each map is affine, so each exports to sentence-transformers as standard ``Dense`` layers.

Statistics are computed in float64 and stored as float32; every calibrator here refuses to fit
on samples that are all identical.

Examples
--------
>>> import numpy as np
>>> X = np.random.default_rng(0).normal(size=(500, 8)).astype(np.float32) * [1, 2, 3, 4, 5, 6, 7, 8] + 3
>>> Z = MeanDirectionRemoval().fit_transform(X)
>>> bool(np.abs(Z @ (X.mean(axis=0) / np.linalg.norm(X.mean(axis=0)))).max() < 1e-4)  # nothing left along the mean
True
>>> def condition(Z):  # the covariance's largest eigenvalue over its smallest
...     variances = np.linalg.eigvalsh(np.cov(Z, rowvar=False))
...     return variances.max() / variances.min()
>>> bool(np.isclose(condition(SoftWhitening(strength=0.5).fit_transform(X)), np.sqrt(condition(X)), rtol=1e-3))
True
"""

from __future__ import annotations

import logging

import numpy as np

from flow_plugin.calibration.base import Calibrator, half_of_span
from flow_plugin.calibration.linear import (SpectralMap, _refuse_identical_rows, covariance_spectrum,
                                          degenerate_directions)
from flow_plugin.errors import InputError

logger = logging.getLogger(__name__)

#: a mean shorter than this fraction of the embeddings' root-mean-square norm has no direction to speak of: it
#: is what float32 rounding leaves of the mean of embeddings that are already centred
_NULL_MEAN = 1e-6


class Centering(Calibrator, method="center"):
    """Subtract the mean of the fit embeddings: ``x - mean_``.

    Nothing is rescaled, so the spread of variances that few-shot classifiers and k-means rely on
    is kept; cosines are taken around the corpus's centre instead of the origin. This is the
    first renormalization of Ren, Sun & Liang ("R1", arXiv 2511.11041) and the centring step of
    every other linear calibrator.

    Attributes
    ----------
    mean_ : ndarray of shape (n_features,), float32
        The mean of the fit embeddings (computed in float64).
    n_features_in_ : int
        The embedding width seen by ``fit``.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[1.0, 2.0], [3.0, 6.0]], dtype=np.float32)
    >>> Centering().fit(X).transform(X)
    array([[-1., -2.],
           [ 1.,  2.]], dtype=float32)
    """

    def min_samples(self, n_features: int) -> int:
        return 2  # one row minus its own mean is the zero vector

    def _fit(self, X: np.ndarray) -> None:
        X64 = X.astype(np.float64)
        _refuse_identical_rows(self, X64, "centre")
        self.mean_ = X64.mean(axis=0).astype(np.float32)

    def _transform(self, X: np.ndarray) -> np.ndarray:
        return X - self.mean_

    def _inverse_transform(self, Z: np.ndarray) -> np.ndarray:
        return Z + self.mean_

    def _get_state(self) -> dict[str, np.ndarray]:
        return {"mean": self.mean_}

    def _set_state(self, state: dict[str, np.ndarray]) -> None:
        self.mean_ = state["mean"]


class MeanDirectionRemoval(Calibrator, method="remove-mean-dir"):
    """Project every embedding off the direction of the mean: ``x - (x·u) u``, ``u = mean_ / |mean_|``.

    This is the second renormalization of Ren, Sun & Liang, "Correcting Mean Bias in Text
    Embeddings" (arXiv 2511.11041, "R2"): with ``μ`` the mean of the embeddings of a set of texts,
    each embedding ``e`` becomes ``e - (e·μ̂) μ̂``. Across 38 models on MMTEB it improved retrieval most
    and classification without a significant loss, while full PCA whitening hurt every model of
    their ablation. Because ``μ`` is itself along ``u``, the map equals centering followed by
    removing the one direction ``u`` (``(x - μ) - ((x - μ)·u) u``), which is how it is computed
    here: the large common component cancels before the projection, not after (float32). The
    result has mean 0 and no variance along ``u``; nothing is rescaled. It is the mean of the
    embeddings as they come (flow-plugin's pooled embeddings, not normalised to unit length).
    The map has rank d - 1, so it has no inverse.

    Attributes
    ----------
    mean_ : ndarray of shape (n_features,), float32
        The mean of the fit embeddings (computed in float64).
    direction_ : ndarray of shape (n_features,), float32
        ``u``, the mean's unit direction, which the map removes.
    n_features_in_ : int
        The embedding width seen by ``fit``.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[3.0, 1.0], [3.0, -1.0], [5.0, 0.0]], dtype=np.float32)  # mean (11/3, 0): u = (1, 0)
    >>> MeanDirectionRemoval().fit(X).transform(X)
    array([[ 0.,  1.],
           [ 0., -1.],
           [ 0.,  0.]], dtype=float32)
    """

    def min_samples(self, n_features: int) -> int:
        return 2  # one row would lose its only direction

    def _fit(self, X: np.ndarray) -> None:
        X64 = X.astype(np.float64)
        _refuse_identical_rows(self, X64, "remove")
        mean = X64.mean(axis=0)
        length, typical = float(np.linalg.norm(mean)), float(np.sqrt(np.mean(np.einsum("ij,ij->i", X64, X64))))
        if length <= _NULL_MEAN * typical:
            raise InputError(
                f"MeanDirectionRemoval: the mean of the {X.shape[0]} embeddings is (numerically) zero ({length:.1e}, "
                f"their typical norm {typical:.1e}): there is no mean direction to remove; use the raw embeddings"
            )
        self.mean_ = mean.astype(np.float32)
        self.direction_ = (mean / length).astype(np.float32)

    def _transform(self, X: np.ndarray) -> np.ndarray:
        centred = X - self.mean_
        return centred - np.outer(centred @ self.direction_, self.direction_)

    def _get_state(self) -> dict[str, np.ndarray]:
        return {"mean": self.mean_, "direction": self.direction_}

    def _set_state(self, state: dict[str, np.ndarray]) -> None:
        self.mean_, self.direction_ = state["mean"], state["direction"]


class SoftWhitening(SpectralMap, Calibrator, method="soft-whiten"):
    """Whitening of adjustable strength: centre, then scale each principal direction of the
    covariance by ``λ^(-strength/2)``, ``(x - mean_) U Λ^(-strength/2) Uᵀ``.

    Parameters
    ----------
    strength:
        A number in [0, 1]. ``0`` is :class:`Centering` (nothing rescaled), ``1`` is full
        :class:`~.linear.Whitening` (the same cosines), and in between the variance along each
        principal direction becomes ``λ^(1 - strength)``: on a logarithmic scale the spectrum is
        flattened by that fraction, and its condition number ``λ_max / λ_min`` becomes
        ``(λ_max / λ_min)^(1 - strength)`` (0.5: its square root). The parameter is scale-free:
        embeddings scaled by c come out scaled by ``c^(1 - strength)``, with the same cosines, so one
        value means the same on every backbone. Default 0.5.

    Attributes
    ----------
    mean_ : ndarray of shape (n_features,), float32
        The mean of the fit embeddings.
    components_ : ndarray of shape (n_features, n_features), float32
        The map applied after centring, ``U Λ^(-strength/2) Uᵀ`` (symmetric; it keeps the input's
        axes, as ZCA whitening does, and is the identity at strength 0).
    inverse_components_ : ndarray of shape (n_features, n_features), float32
        ``U Λ^(strength/2) Uᵀ``, for :meth:`inverse_transform`.
    explained_variance_ : ndarray of shape (n_features,), float32
        The covariance's eigenvalues ``λ``, in decreasing order.
    n_degenerate_ : int
        Directions of (numerically) zero variance, below 1e-9 of the largest: at a strength above 0
        they map to 0, as in whitening, instead of being divided by ~0.
    covariance_estimator_ : str
        ``"empirical"`` (the sample covariance) or, by the small-sample rule, ``"ledoit-wolf"``.
    shrinkage_ : float
        The shrinkage the covariance got: 0.0, or the Ledoit-Wolf estimate.

    Notes
    -----
    Soft-ZCA (arXiv 2411.17538) writes soft whitening as ``U (Λ + εI)^(-1/2) Uᵀ``. That
    ε family is :class:`~.linear.Whitening` with ``shrinkage = ε / (ε + tr(Σ)/d)``, the same cosines
    (``(1 - s) Σ + s tr(Σ)/d I`` is ``Σ + εI`` up to a factor), so it is available there. This class
    offers the power family instead, whose extremes are exactly centering and whitening and whose
    strength reads the same whatever the scale of the spectrum. With more than half of the directions
    the distinct fit rows span to rescale (a corpus of fewer than 2d + 1 distinct rows), the covariance
    is the Ledoit-Wolf estimate, as for whitening.

    Examples
    --------
    >>> import numpy as np
    >>> X = (np.random.default_rng(0).normal(size=(400, 3)) * [1, 4, 16]).astype(np.float32)
    >>> Z = SoftWhitening(strength=0.5).fit_transform(X)  # standard deviations become their square roots
    >>> X.std(axis=0).round(1), Z.std(axis=0).round(1)
    (array([ 1. ,  3.9, 15.5], dtype=float32), array([1. , 2. , 3.9], dtype=float32))
    """

    EFFECTIVE_ATTRIBUTES = ("covariance_estimator_", "shrinkage_")

    def __init__(self, strength: float = 0.5) -> None:
        self.strength = strength

    def _check_params(self, n_features: int) -> None:
        strength = self.strength
        if (isinstance(strength, bool) or not isinstance(strength, (int, float, np.integer, np.floating))
                or not 0 <= strength <= 1):
            raise InputError(f"SoftWhitening strength must be a number in [0, 1] (0: centering, 1: whitening), "
                             f"got {strength!r}")

    def min_samples(self, n_features: int) -> int:
        return 2  # a mean and a covariance need two rows

    def _adapt_to_sample(self, n_distinct: int, n_features: int) -> str | None:
        """The sample covariance where it is sound, else Ledoit-Wolf: the rule of :class:`~.linear.Whitening`
        (at most half of the directions the distinct rows span rescaled by the sample covariance); at
        strength 0 nothing is rescaled."""
        if self.strength == 0 or n_features <= half_of_span(n_distinct):
            self.covariance_estimator_, self.shrinkage_ = "empirical", 0.0
            return None
        self.covariance_estimator_ = "ledoit-wolf"
        return (f"soft-whitening {n_features} directions needs at least {2 * n_features + 1} distinct rows (twice as "
                f"many), got {n_distinct}: Ledoit-Wolf shrinkage instead of the sample covariance")

    def _fit(self, X: np.ndarray) -> None:
        X64 = X.astype(np.float64)
        _refuse_identical_rows(self, X64, "whiten")
        n_features = X.shape[1]
        mean, eigenvalues, eigenvectors, self.shrinkage_ = covariance_spectrum(
            X64, self.covariance_estimator_, None, n_features)
        strength = float(self.strength)
        # at strength 0 nothing is rescaled, so no direction is degenerate: the map is the identity
        degenerate = degenerate_directions(eigenvalues) if strength > 0 else np.zeros(n_features, dtype=bool)
        kept = np.where(degenerate, 1.0, eigenvalues)
        scale = np.where(degenerate, 0.0, kept ** (-strength / 2))
        unscale = np.where(degenerate, 0.0, kept ** (strength / 2))
        self.mean_ = mean.astype(np.float32)
        self.components_ = ((eigenvectors * scale) @ eigenvectors.T).astype(np.float32)
        self.inverse_components_ = ((eigenvectors * unscale) @ eigenvectors.T).astype(np.float32)
        self.explained_variance_ = eigenvalues.astype(np.float32)
        self.n_degenerate_ = int(degenerate.sum())
        if self.n_degenerate_:
            logger.info("SoftWhitening: %d of %d directions have (numerically) zero variance and map to 0",
                        self.n_degenerate_, n_features)
