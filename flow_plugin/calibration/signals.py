"""What a task's unlabeled text says about its embeddings, measured without a label: the figures ``auto`` chooses by.

- :func:`anisotropy`: the mean cosine between two embeddings (near 0 for a sentence encoder, near 1 for the first
  layers of a masked-LM encoder).
- :func:`spectrum_flatness`: how evenly the covariance's variance spreads over the directions (the participation
  ratio over the width: 1 for a flat spectrum, 1/d for one direction).
- :func:`neighbour_overlap`: how many of a sentence's nearest neighbours (by cosine) two embeddings of the same
  sentences agree on. :func:`measure` applies it to whitening fitted on two halves of the text (the whitened
  neighbourhoods that the text itself cannot pin down, a noise floor in the spectrum or too few sentences per
  direction, disagree between the halves), and to the raw and the whitened embeddings (how much of the raw
  neighbourhoods whitening keeps).

Every figure is computed in float64 from a seeded sample, so it is the same number on every machine up to
rounding.

Examples
--------
>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> iso = rng.normal(size=(600, 16))
>>> round(anisotropy(iso), 2), spectrum_flatness(iso) > 0.9
(0.0, True)
>>> cone = iso * np.linspace(0.1, 3, 16) + 10.0
>>> anisotropy(cone) > 0.9, spectrum_flatness(cone) < 0.6
(True, True)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

#: neighbours compared per sentence by :func:`neighbour_overlap`
NEIGHBOURS = 10
#: sentences whose neighbourhoods are compared (a seeded sample), and the pool they are looked for in
PROBES, POOL = 500, 4000
#: the seed of every sample drawn here (SentEval's 1111)
SEED = 1111


def anisotropy(X: np.ndarray) -> float:
    """The mean cosine between two distinct rows of ``X`` (exact, from the mean unit vector: for n unit rows
    with mean m, the mean over the n(n-1) ordered pairs is (n²|m|² - n) / (n(n-1))).

    >>> round(anisotropy(np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32)), 3)
    0.0
    """
    X64 = np.asarray(X, dtype=np.float64)
    norms = np.linalg.norm(X64, axis=1, keepdims=True)
    units = X64[norms[:, 0] > 0] / norms[norms[:, 0] > 0]
    n = units.shape[0]
    if n < 2:
        return 0.0
    total = float(np.square(units.sum(axis=0)).sum())  # n² |m|²
    return (total - n) / (n * (n - 1))


@dataclass(frozen=True)
class Moments:
    """The first and second moments of a set of rows (float64): what every whitening here is computed from."""

    n: int
    total: np.ndarray
    products: np.ndarray

    @classmethod
    def of(cls, X64: np.ndarray) -> Moments:
        return cls(len(X64), X64.sum(axis=0), X64.T @ X64)

    def __add__(self, other: Moments) -> Moments:
        return Moments(self.n + other.n, self.total + other.total, self.products + other.products)

    @property
    def mean(self) -> np.ndarray:
        return self.total / self.n

    def spectrum(self) -> tuple[np.ndarray, np.ndarray]:
        """(eigenvalues, eigenvectors as columns) of the sample covariance."""
        covariance = (self.products - self.n * np.outer(self.mean, self.mean)) / max(self.n - 1, 1)
        variances, vectors = np.linalg.eigh(covariance)
        return np.clip(variances, 0.0, None), vectors

    def whitener(self) -> np.ndarray:
        """The map to unit variance along every direction the rows span."""
        variances, vectors = self.spectrum()
        kept = variances > variances.max() * 1e-10
        return vectors[:, kept] / np.sqrt(variances[kept])


def spectrum_flatness(X: np.ndarray) -> float:
    """The participation ratio of the covariance's eigenvalues over the width, (Σλ)² / (d Σλ²): 1 when every
    direction holds the same variance, 1/d when one holds all of it."""
    return _flatness(Moments.of(np.asarray(X, dtype=np.float64)).spectrum()[0])


def _flatness(variances: np.ndarray) -> float:
    total = float(variances.sum())
    return 0.0 if total <= 0.0 else total * total / (len(variances) * float(np.square(variances).sum()))


def _neighbours(Z: np.ndarray, probes: np.ndarray) -> np.ndarray:
    """The indices of each probe row's :data:`NEIGHBOURS` nearest rows of ``Z`` by cosine (itself left out)."""
    units = Z / np.maximum(np.linalg.norm(Z, axis=1, keepdims=True), 1e-12)
    cosines = units[probes] @ units.T
    cosines[np.arange(len(probes)), probes] = -np.inf
    return np.argpartition(-cosines, NEIGHBOURS, axis=1)[:, :NEIGHBOURS]


def neighbour_overlap(A: np.ndarray, B: np.ndarray, probes: np.ndarray) -> float:
    """The mean share of each probe's :data:`NEIGHBOURS` nearest rows that the embeddings ``A`` and ``B`` of the
    same rows agree on."""
    first, second = _neighbours(A, probes), _neighbours(B, probes)
    return float(np.mean([len(np.intersect1d(a, b)) / NEIGHBOURS for a, b in zip(first, second)]))


@dataclass(frozen=True)
class Signals:
    """The label-free figures of one set of fit embeddings (module doc)."""

    anisotropy: float
    flatness: float
    #: neighbour agreement of whitening fitted on two seeded halves of the rows (1: the text pins it down)
    whitening_stability: float
    #: share of the raw nearest neighbours whitening keeps
    whitening_change: float

    def as_dict(self) -> dict[str, float]:
        return {key: round(value, 4) for key, value in dataclasses.asdict(self).items()}


def measure(X: np.ndarray) -> Signals:
    """Every figure of :class:`Signals` for the rows of ``X`` (from one pass over the rows' moments)."""
    X64 = np.asarray(X, dtype=np.float64)
    rng = np.random.default_rng(SEED)
    halves = [Moments.of(X64[half]) for half in np.array_split(rng.permutation(len(X64)), 2)]
    whole = halves[0] + halves[1]
    pool = X64[rng.permutation(len(X64))[:POOL]]
    probes = rng.permutation(len(pool))[:PROBES]
    maps = [half.whitener() for half in halves]
    stable = 0.0 if maps[0].shape[1] != maps[1].shape[1] else neighbour_overlap(
        (pool - halves[0].mean) @ maps[0], (pool - halves[1].mean) @ maps[1], probes)
    change = neighbour_overlap(pool, (pool - whole.mean) @ whole.whitener(), probes)
    return Signals(anisotropy(X64), _flatness(whole.spectrum()[0]), stable, change)


__all__ = ["NEIGHBOURS", "Moments", "Signals", "anisotropy", "measure", "neighbour_overlap", "spectrum_flatness"]
