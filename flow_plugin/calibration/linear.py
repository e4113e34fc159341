"""Closed-form baselines the BERT-flow paper compares against (section 5), and whitening,
built on scikit-learn.

- :class:`Identity`: the raw embeddings.
- :class:`StandardNormalization` ("SN"): subtract the mean, divide each dimension by its
  standard deviation (``sklearn.preprocessing.StandardScaler``).
- :class:`NATSV`: "nulling away the top-k singular vectors" (Mu & Viswanath, 2018,
  *All-but-the-Top*): subtract the mean, then project out the k leading principal
  directions (``sklearn.decomposition.PCA``).
- :class:`StandardNormalizationNATSV` ("SN+NATSV"): an ``sklearn.pipeline.Pipeline`` of SN
  then NATSV.
- :class:`Whitening`: mean to 0 and covariance to I, optionally keeping only the k leading
  directions (Su et al., 2021, *Whitening Sentence Representations*); on fewer samples than
  dimensions, a shrunk covariance (``sklearn.covariance``) keeps it well defined.

Statistics are computed in float64 and stored as float32. Every calibrator refuses to fit
on samples that are all identical: there is nothing to normalise.

Examples
--------
>>> import numpy as np
>>> X = np.random.default_rng(0).normal(size=(500, 8)).astype(np.float32) * [1, 2, 3, 4, 5, 6, 7, 8]
>>> Z = Whitening().fit_transform(X)
>>> bool(np.allclose(np.cov(Z, rowvar=False), np.eye(8), atol=1e-3))
True
"""

from __future__ import annotations

import logging
import numbers

import numpy as np
from sklearn.covariance import LedoitWolf, ShrunkCovariance
from sklearn.decomposition import PCA
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler

from flow_plugin.calibration.base import Calibrator, half_of_span
from flow_plugin.errors import InputError

logger = logging.getLogger(__name__)

#: Whitening treats directions whose variance is below this fraction of the largest as
#: carrying no information (e.g. the sum-to-zero constraint LayerNorm leaves in mean-pooled
#: embeddings): they map to 0, as with a pseudo-inverse, instead of amplifying rounding noise.
_DEGENERATE_VARIANCE = 1e-9


def _check_n_components(calibrator: Calibrator, n_features: int, *, minimum: int) -> None:
    value = calibrator.n_components  # type: ignore[attr-defined]
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not minimum <= value <= n_features:
        raise InputError(
            f"{type(calibrator).__name__} n_components must be an int in {minimum}..{n_features} for "
            f"{n_features}-dimensional embeddings, got {value!r}"
        )


def _refuse_identical_rows(calibrator: Calibrator, X64: np.ndarray, what: str) -> None:
    if not np.ptp(X64, axis=0).any():
        raise InputError(
            f"{type(calibrator).__name__}: the {X64.shape[0]} samples are all identical; there is no variance to {what}"
        )


def _is_fraction(value: object) -> bool:
    """Whether a size hyper-parameter is given as a fraction (a float) rather than a count."""
    return isinstance(value, (float, np.floating))


def degenerate_directions(eigenvalues: np.ndarray) -> np.ndarray:
    """Which of the covariance's eigenvalues (in decreasing order) are (numerically) zero: at most
    :data:`_DEGENERATE_VARIANCE` of the largest."""
    return eigenvalues <= _DEGENERATE_VARIANCE * eigenvalues[0]


def covariance_spectrum(
    X64: np.ndarray, estimator: str, shrinkage: float | None, kept: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """(mean, the ``kept`` largest eigenvalues in decreasing order, their eigenvectors as columns, the
    shrinkage used) of the covariance of ``X64`` (float64) by ``estimator``: ``"empirical"`` (the sample
    covariance, by ``PCA(svd_solver="covariance_eigh")``), ``"shrunk"`` (``ShrunkCovariance`` with
    ``shrinkage``) or ``"ledoit-wolf"`` (``LedoitWolf``, which picks the shrinkage)."""
    if estimator == "empirical" and kept <= min(X64.shape):
        pca = PCA(n_components=kept, svd_solver="covariance_eigh").fit(X64)
        return pca.mean_, pca.explained_variance_, pca.components_.T, 0.0
    if estimator == "empirical":  # more directions than rows (PCA's limit): the null ones have eigenvalue 0
        location, covariance, used = X64.mean(axis=0), np.atleast_2d(np.cov(X64, rowvar=False)), 0.0
    else:
        fitted = (LedoitWolf(store_precision=False) if estimator == "ledoit-wolf"
                  else ShrunkCovariance(store_precision=False, shrinkage=shrinkage)).fit(X64)
        location, covariance = fitted.location_, fitted.covariance_
        used = float(fitted.shrinkage_) if isinstance(fitted, LedoitWolf) else float(shrinkage)
    eigenvalues, eigenvectors = np.linalg.eigh(covariance)
    order = np.argsort(eigenvalues)[::-1][:kept]
    return location, np.clip(eigenvalues[order], 0.0, None), eigenvectors[:, order], used


class Identity(Calibrator, method="raw"):
    """Leaves embeddings unchanged (the "raw" variant). Fitting only records the dimension."""


    def _fit(self, X: np.ndarray) -> None:
        pass

    def _transform(self, X: np.ndarray) -> np.ndarray:
        return X

    def _inverse_transform(self, Z: np.ndarray) -> np.ndarray:
        return Z


class StandardNormalization(Calibrator, method="sn"):
    """SN: ``(x - mean_) / scale_`` per dimension (BERT-flow paper, section 5).

    A dimension with (numerically) no variance is left unscaled, as ``StandardScaler`` does:
    a constant feature carries no information, and dividing by ~0 would only blow up noise.
    """


    def min_samples(self, n_features: int) -> int:
        return 2  # a standard deviation needs two samples

    def _fit(self, X: np.ndarray) -> None:
        X64 = X.astype(np.float64)
        _refuse_identical_rows(self, X64, "standardise")
        scaler = StandardScaler().fit(X64)
        self.mean_ = scaler.mean_.astype(np.float32)
        self.scale_ = scaler.scale_.astype(np.float32)

    def _transform(self, X: np.ndarray) -> np.ndarray:
        return (X - self.mean_) / self.scale_

    def _inverse_transform(self, Z: np.ndarray) -> np.ndarray:
        return Z * self.scale_ + self.mean_

    def _get_state(self) -> dict[str, np.ndarray]:
        return {"mean": self.mean_, "scale": self.scale_}

    def _set_state(self, state: dict[str, np.ndarray]) -> None:
        self.mean_, self.scale_ = state["mean"], state["scale"]


def _adapt_nulled_directions(calibrator: Calibrator, n_distinct: int) -> str | None:
    """NATSV and SN+NATSV on few samples: ``n`` distinct rows span at most ``n - 1`` directions;
    nulling more than half of them would leave (almost) nothing to compare, so the effective k,
    ``n_components_``, is at most ``(n - 1) // 2``."""
    requested = int(calibrator.n_components)  # type: ignore[attr-defined]
    limit = half_of_span(n_distinct)
    calibrator.n_components_ = min(requested, limit)  # type: ignore[attr-defined]
    if requested <= limit:
        return None
    return (f"nulling {requested} directions of the at most {max(n_distinct - 1, 0)} that {n_distinct} distinct "
            f"rows span would leave too little: n_components_={limit} (at most half of them)")


class NATSV(Calibrator, method="natsv"):
    """Remove the mean and the ``n_components`` top principal directions.

    Parameters
    ----------
    n_components:
        k, the number of leading directions nulled. Default 5: Mu & Viswanath (2018) suggest
        k ≈ d/100 (4 to 10 for 384- to 1024-dimensional encoders); 5 sits in that range.
    """

    EFFECTIVE_ATTRIBUTES = ("n_components_",)

    def __init__(self, n_components: int = 5) -> None:
        self.n_components = n_components

    def _check_params(self, n_features: int) -> None:
        _check_n_components(self, n_features, minimum=0)

    def min_samples(self, n_features: int) -> int:
        return getattr(self, "n_components_", self.n_components) + 1  # k directions of a centred matrix: k + 1 rows

    def min_samples_remedy(self) -> str:
        return "null fewer directions (n_components)"

    def _adapt_to_sample(self, n_distinct: int, n_features: int) -> str | None:
        return _adapt_nulled_directions(self, n_distinct)

    def _fit(self, X: np.ndarray) -> None:
        X64 = X.astype(np.float64)
        _refuse_identical_rows(self, X64, "remove")
        if self.n_components_ == 0:
            self.mean_ = X64.mean(axis=0).astype(np.float32)
            self.components_ = np.zeros((0, X.shape[1]), dtype=np.float32)
            return
        # the d x d covariance eigenproblem: O(n d^2), far cheaper than an n x d SVD for n >> d
        pca = PCA(n_components=int(self.n_components_), svd_solver="covariance_eigh").fit(X64)
        self.mean_ = pca.mean_.astype(np.float32)
        self.components_ = pca.components_.astype(np.float32)  # (k, d), orthonormal rows

    def _transform(self, X: np.ndarray) -> np.ndarray:
        centred = X - self.mean_
        return centred - (centred @ self.components_.T) @ self.components_

    def _get_state(self) -> dict[str, np.ndarray]:
        return {"mean": self.mean_, "components": self.components_}

    def _set_state(self, state: dict[str, np.ndarray]) -> None:
        self.mean_, self.components_ = state["mean"], state["components"]
        self.n_components_ = int(self.components_.shape[0])


class StandardNormalizationNATSV(Calibrator, method="sn-natsv"):
    """SN+NATSV: standardise each dimension, then null the top ``n_components`` directions
    (a scikit-learn ``Pipeline`` of :class:`StandardNormalization` and :class:`NATSV`)."""

    EFFECTIVE_ATTRIBUTES = ("n_components_",)

    def __init__(self, n_components: int = 5) -> None:
        self.n_components = n_components

    def _check_params(self, n_features: int) -> None:
        _check_n_components(self, n_features, minimum=0)

    def min_samples(self, n_features: int) -> int:
        return max(2, getattr(self, "n_components_", self.n_components) + 1)

    def min_samples_remedy(self) -> str:
        return "null fewer directions (n_components)"

    def _adapt_to_sample(self, n_distinct: int, n_features: int) -> str | None:
        return _adapt_nulled_directions(self, n_distinct)

    def _pipeline(self, n_components: int) -> Pipeline:
        return Pipeline([("sn", StandardNormalization()), ("natsv", NATSV(n_components))])

    def _fit(self, X: np.ndarray) -> None:
        self.pipeline_ = self._pipeline(self.n_components_).fit(X)

    @property
    def standardize_(self) -> StandardNormalization:
        return self.pipeline_.named_steps["sn"]

    @property
    def natsv_(self) -> NATSV:
        return self.pipeline_.named_steps["natsv"]

    def _transform(self, X: np.ndarray) -> np.ndarray:
        return self.pipeline_.transform(X)

    def _get_state(self) -> dict[str, np.ndarray]:
        return {
            "sn_mean": self.standardize_.mean_,
            "sn_scale": self.standardize_.scale_,
            "natsv_mean": self.natsv_.mean_,
            "natsv_components": self.natsv_.components_,
        }

    def _set_state(self, state: dict[str, np.ndarray]) -> None:
        dim = int(state["sn_mean"].shape[0])
        self.n_components_ = int(state["natsv_components"].shape[0])
        pipeline = self._pipeline(self.n_components_)
        pipeline.named_steps["sn"]._set_state({"mean": state["sn_mean"], "scale": state["sn_scale"]})
        pipeline.named_steps["natsv"]._set_state({"mean": state["natsv_mean"], "components": state["natsv_components"]})
        for _, step in pipeline.steps:
            step.n_features_in_ = dim
            step.n_samples_fit_ = self.n_samples_fit_
        self.pipeline_ = pipeline


class SpectralMap:
    """The fitted map of :class:`Whitening` and :class:`~.gentle.SoftWhitening`: ``(x - mean_) @ components_``,
    its inverse, and its state (mean, components and their inverse, the spectrum, the degenerate directions).
    Put it before :class:`~.base.Calibrator` in a calibrator's bases."""

    mean_: np.ndarray
    components_: np.ndarray
    inverse_components_: np.ndarray
    explained_variance_: np.ndarray
    n_degenerate_: int

    def _transform(self, X: np.ndarray) -> np.ndarray:
        return (X - self.mean_) @ self.components_

    def _inverse_transform(self, Z: np.ndarray) -> np.ndarray:
        """Exact on the directions the map keeps with nonzero variance; reduced whitening (k < d) returns the
        projection on the kept directions, and a direction of (numerically) zero variance comes back as 0."""
        return Z @ self.inverse_components_ + self.mean_

    def _get_state(self) -> dict[str, np.ndarray]:
        return {
            "mean": self.mean_,
            "components": self.components_,
            "inverse_components": self.inverse_components_,
            "explained_variance": self.explained_variance_,
            "n_degenerate": np.int64(self.n_degenerate_),
        }

    def _set_state(self, state: dict[str, np.ndarray]) -> None:
        self.mean_ = state["mean"]
        self.components_ = state["components"]
        self.inverse_components_ = state["inverse_components"]
        self.explained_variance_ = state["explained_variance"]
        self.n_degenerate_ = int(state["n_degenerate"])


class Whitening(SpectralMap, Calibrator, method="whiten"):
    """Map embeddings to mean 0 and identity covariance: ``(x - mean_) @ components_``.

    Parameters
    ----------
    n_components:
        Keep only the k leading whitened directions (``None`` keeps all d). Su et al. (2021)
        report that k = 256 often matches or beats full whitening for BERT-base. An int is k; a
        float in (0, 1) is that fraction of the embedding's d dimensions, rounded to the nearest
        whole number (at least 1), so one setting fits every backbone width: 0.5 keeps 192 of
        all-MiniLM-L6-v2's 384 and 384 of all-mpnet-base-v2's 768, and the registry name
        ``whiten-third`` (1/3) keeps 128 and 256 (unlike scikit-learn's ``PCA``, where a float is a
        fraction of the variance). ``n_components_`` is the k a fit kept.
    shrinkage:
        ``0`` (default): the sample covariance, eigen-decomposed by ``PCA(svd_solver=
        "covariance_eigh")``; fitting needs more samples than kept directions (n > k).
        A number in (0, 1]: ``sklearn.covariance.ShrunkCovariance``, ``(1 - s) Σ + s tr(Σ)/d I``.
        ``"auto"``: the Ledoit-Wolf shrinkage (``sklearn.covariance.LedoitWolf``), which picks s
        from the data. With shrinkage any n >= 2 works.

    Notes
    -----
    Directions with (numerically) zero variance, below 1e-9 of the largest, carry no
    information; they are mapped to 0 (pseudo-inverse whitening) rather than divided by ~0,
    and ``n_degenerate_`` counts them.

    The fit's effective values are fitted attributes: ``n_components_`` (the directions kept),
    ``covariance_estimator_`` (``"empirical"``, ``"shrunk"`` or ``"ledoit-wolf"``) and ``shrinkage_``
    (the shrinkage the covariance got: 0.0, the given number, or the Ledoit-Wolf estimate). With
    ``shrinkage=0`` on too few distinct rows, the small-sample rule uses Ledoit-Wolf instead.
    """

    EFFECTIVE_ATTRIBUTES = ("n_components_", "covariance_estimator_", "shrinkage_")

    def __init__(self, n_components: int | None = None, shrinkage: float | str = 0.0) -> None:
        self.n_components = n_components
        self.shrinkage = shrinkage

    def _kept(self, n_features: int) -> int:
        """How many directions whitening keeps of ``n_features``: all, ``n_components``, or that fraction of them."""
        value = self.n_components
        if value is None:
            return n_features
        if _is_fraction(value):
            return max(1, int(float(value) * n_features + 0.5))
        return int(value)

    def _check_params(self, n_features: int) -> None:
        value = self.n_components
        if _is_fraction(value):
            if not 0 < value < 1:
                raise InputError(f"Whitening n_components as a fraction of the dimensions must be in (0, 1), got "
                                 f"{value!r}; give an int in 1..{n_features} for a number of directions, or None for all")
        elif value is not None:
            _check_n_components(self, n_features, minimum=1)
        shrinkage = self.shrinkage
        if shrinkage != "auto" and (
            isinstance(shrinkage, bool) or not isinstance(shrinkage, numbers.Real) or not 0 <= shrinkage <= 1
        ):
            raise InputError(f"Whitening shrinkage must be a number in [0, 1] or 'auto', got {shrinkage!r}")

    def min_samples(self, n_features: int) -> int:
        estimator = getattr(self, "covariance_estimator_", "empirical" if self.shrinkage == 0 else "shrunk")
        if estimator != "empirical":
            return 2
        kept = getattr(self, "n_components_", self._kept(n_features))
        return kept + 1  # a centred n-row matrix has rank <= n - 1

    def min_samples_remedy(self) -> str:
        return "use shrinkage='auto' (Ledoit-Wolf) or keep fewer directions (n_components)"

    def _adapt_to_sample(self, n_distinct: int, n_features: int) -> str | None:
        """Ledoit-Wolf shrinkage where the sample covariance would rescale more than half of the
        directions the distinct rows span (measured on 100-700 STS-B pairs, all-MiniLM-L6-v2: plain
        whitening of 384 directions on 442 distinct sentences scores 64.05, shrunk 83.77)."""
        kept = self._kept(n_features)
        self.n_components_ = kept
        if self.shrinkage == "auto":
            self.covariance_estimator_ = "ledoit-wolf"
        elif self.shrinkage != 0:
            self.covariance_estimator_, self.shrinkage_ = "shrunk", float(self.shrinkage)
        elif kept <= half_of_span(n_distinct):
            self.covariance_estimator_, self.shrinkage_ = "empirical", 0.0
        else:
            self.covariance_estimator_ = "ledoit-wolf"
            return (f"whitening {kept} directions needs at least {2 * kept + 1} distinct rows (twice as many), got "
                    f"{n_distinct}: Ledoit-Wolf shrinkage instead of the sample covariance")
        return None

    def _fit(self, X: np.ndarray) -> None:
        kept = self.n_components_
        X64 = X.astype(np.float64)
        _refuse_identical_rows(self, X64, "whiten")
        mean, eigenvalues, eigenvectors, shrinkage = covariance_spectrum(
            X64, self.covariance_estimator_, getattr(self, "shrinkage_", None), kept)
        self.shrinkage_ = shrinkage
        degenerate = degenerate_directions(eigenvalues)
        if degenerate.any():
            logger.info(
                "Whitening: %d of %d directions have (numerically) zero variance and map to 0", degenerate.sum(), kept
            )
        root = np.sqrt(np.where(degenerate, 1.0, eigenvalues))
        self.mean_ = mean.astype(np.float32)
        self.components_ = np.where(degenerate, 0.0, eigenvectors / root).astype(np.float32)  # (d, k)
        self.inverse_components_ = (eigenvectors * np.where(degenerate, 0.0, root)).T.astype(np.float32)  # (k, d)
        self.explained_variance_ = eigenvalues.astype(np.float32)
        self.n_degenerate_ = int(degenerate.sum())

    def output_width(self, n_features: int) -> int:
        return self._kept(n_features)

    def _set_state(self, state: dict[str, np.ndarray]) -> None:
        super()._set_state(state)
        self.n_components_ = int(self.components_.shape[1])
