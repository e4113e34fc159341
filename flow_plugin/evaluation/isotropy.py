"""Isotropy diagnostics of an (n, d) embedding matrix, and a plot of singular-value spectra.

BERT-flow's motivation (section 2 of the paper) is that BERT sentence embeddings are
anisotropic: they occupy a narrow cone, so random pairs have a high cosine and a few
directions carry most of the variance. These numbers measure that:

* ``mean_random_cosine``: mean cosine of random pairs of distinct rows (seeded).
* ``singular_values`` of the centred matrix and the share of variance of the top-k.
* ``isotropy_score``: I = min_c Z(c) / max_c Z(c), Z(c) = sum_i exp(c . x_i), over the
  unit eigenvectors c of X^T X (uncentred X), as in Mu & Viswanath (2018, "All-but-the-
  top"), after Arora et al. (2016). 1 = isotropic, near 0 = strongly anisotropic.
  Computed in log space (log-sum-exp). An eigenvector's sign is arbitrary and Z(c) !=
  Z(-c), so by default both c and -c are used, which makes the score independent of
  the sign the eigen-solver returns (``both_signs=False`` uses the solver's signs only).
  Z uses raw dot products, so I depends on the scale of X: a large common mean or
  large norms drive it towards 0. Compare matrices of similar norm (or unit rows).
* ``effective_rank`` (Roy & Vetterli, 2007): exp of the Shannon entropy of the
  singular values normalised to sum 1, computed on the centred matrix.
"""

from __future__ import annotations

import io
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from scipy.special import logsumexp

from flow_plugin._io import atomic_write_bytes
from flow_plugin.errors import InputError, InputTypeError, MissingExtraError
from flow_plugin.evaluation._checks import float_matrix, float_vector
from flow_plugin.evaluation.sts import paired_cosine

__all__ = [
    "mean_random_cosine",
    "singular_values",
    "top_k_variance_share",
    "isotropy_score",
    "effective_rank",
    "isotropy_report",
    "plot_spectra",
]


def _check_positive_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise InputTypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 1:
        raise InputError(f"{name} must be >= 1, got {value}")
    return int(value)


def mean_random_cosine(X: Any, *, n_pairs: int = 10000, seed: int = 0) -> float:
    """Mean cosine of ``n_pairs`` random pairs (i, j), i != j, drawn with replacement (seeded).

    Zero rows have cosine 0 with everything (see :func:`paired_cosine`).
    """
    X = float_matrix(X, "X", min_rows=2)
    n_pairs = _check_positive_int(n_pairs, "n_pairs")
    rng = np.random.default_rng(seed)
    n = X.shape[0]
    i = rng.integers(0, n, size=n_pairs)
    j = rng.integers(0, n - 1, size=n_pairs)
    j = j + (j >= i)  # uniform over the indices other than i
    return float(np.mean(paired_cosine(X[i], X[j])))


def singular_values(X: Any, *, center: bool = True) -> np.ndarray:
    """Singular values of X (minus its column mean when ``center``), descending."""
    X = float_matrix(X, "X", min_rows=1)
    if center:
        X = X - X.mean(axis=0, keepdims=True)
    return np.linalg.svd(X, compute_uv=False)


def _spectrum(values: Any, name: str) -> np.ndarray:
    s = float_vector(values, name, min_len=1)
    if np.any(s < 0):
        raise InputError(f"{name} must be non-negative singular values")
    return s


def top_k_variance_share(spectrum: Any, ks: Sequence[int] = (1, 5, 10)) -> dict[int, float]:
    """Share of the total variance (sum of squared singular values) in the top-k directions.

    ``k`` larger than the spectrum is capped (share 1.0). A zero spectrum gives 0.0.
    """
    s = np.sort(_spectrum(spectrum, "spectrum"))[::-1]
    var = s**2
    total = float(var.sum())
    out: dict[int, float] = {}
    for k in ks:
        k = _check_positive_int(k, "k")
        out[k] = float(var[:k].sum() / total) if total > 0 else 0.0
    return out


def isotropy_score(X: Any, *, both_signs: bool = True) -> float:
    """Isotropy I = min_c Z(c) / max_c Z(c) over the eigenvectors c of X^T X (see module docs)."""
    X = float_matrix(X, "X", min_rows=1)
    _, eigvecs = np.linalg.eigh(X.T @ X)  # columns: unit eigenvectors
    proj = X @ eigvecs  # (n, d): c . x_i for every eigenvector c
    log_z = logsumexp(proj, axis=0)
    if both_signs:
        log_z = np.concatenate([log_z, logsumexp(-proj, axis=0)])
    return float(np.exp(np.min(log_z) - np.max(log_z)))


def effective_rank(spectrum: Any) -> float:
    """exp(entropy) of the singular values normalised to sum 1 (Roy & Vetterli 2007).

    Between 1 (one direction) and the number of values (flat spectrum); 0 for an all-zero spectrum.
    """
    s = _spectrum(spectrum, "spectrum")
    total = float(s.sum())
    if total == 0.0:
        return 0.0
    p = s[s > 0] / total
    return float(np.exp(-np.sum(p * np.log(p))))


def isotropy_report(X: Any, *, seed: int = 0, n_pairs: int = 10000, top_k: Sequence[int] = (1, 5, 10)) -> dict[str, Any]:
    """All isotropy diagnostics of X as a JSON-serialisable dict.

    Keys: ``n``, ``d``, ``mean_norm`` (mean row norm), ``mean_vector_norm_ratio``
    (norm of the mean row / mean row norm; near 1 = all rows share one direction),
    ``mean_random_cosine``, ``n_random_pairs``, ``seed``, ``top_k_variance_share``
    (keys are str(k)), ``isotropy_score``, ``effective_rank`` and ``singular_values``
    (of the centred matrix, descending, as a list).
    """
    X = float_matrix(X, "X", min_rows=2)
    spectrum = singular_values(X, center=True)
    norms = np.linalg.norm(X, axis=1)
    mean_norm = float(norms.mean())
    mean_vec_norm = float(np.linalg.norm(X.mean(axis=0)))
    return {
        "n": int(X.shape[0]),
        "d": int(X.shape[1]),
        "mean_norm": mean_norm,
        "mean_vector_norm_ratio": mean_vec_norm / mean_norm if mean_norm > 0 else 0.0,
        "mean_random_cosine": mean_random_cosine(X, n_pairs=n_pairs, seed=seed),
        "n_random_pairs": int(n_pairs),
        "seed": int(seed),
        "top_k_variance_share": {str(k): v for k, v in top_k_variance_share(spectrum, top_k).items()},
        "isotropy_score": isotropy_score(X),
        "effective_rank": effective_rank(spectrum),
        "singular_values": [float(v) for v in spectrum],
    }


def plot_spectra(
    spectra: Mapping[str, Any],
    path: str | os.PathLike[str],
    title: str = "Singular-value spectra (normalised by the largest)",
) -> Path:
    """Plot each spectrum, divided by its largest value, on a log scale against its index.

    One line per label. Zero values cannot be shown on a log scale and are left out.
    The PNG is rendered in memory (matplotlib's Agg backend, no pyplot state) and
    written atomically to ``path`` (which must end in ``.png``). Returns the path.
    matplotlib is the optional ``plots`` extra: without it this raises
    :class:`~flow_plugin.errors.MissingExtraError` (an ``ImportError``) and writes nothing.
    """
    if not isinstance(spectra, Mapping) or not spectra:
        raise InputError("spectra must be a non-empty mapping label -> singular values")
    if not isinstance(path, (str, os.PathLike)):
        raise InputTypeError(f"path must be a path, got {type(path).__name__}")
    target = Path(path)
    if target.suffix.lower() != ".png":
        raise InputError(f"path must end in .png, got {target}")
    curves: dict[str, np.ndarray] = {}
    for label, values in spectra.items():
        if not isinstance(label, str):
            raise InputTypeError(f"spectrum labels must be str, got {type(label).__name__}")
        s = np.sort(_spectrum(values, f"spectra[{label!r}]"))[::-1]
        if s[0] == 0:
            raise InputError(f"spectra[{label!r}] is all zeros and cannot be normalised")
        curves[label] = s / s[0]

    try:  # matplotlib is the optional plots extra, loaded only to draw
        from matplotlib.figure import Figure  # (its PNG is drawn by Agg, without pyplot's state)
    except ImportError as error:
        raise MissingExtraError(f"plot_spectra needs matplotlib ({error}): pip install 'flow-plugin[plots]'") from error

    fig = Figure(figsize=(6.4, 4.2), dpi=120)
    ax = fig.add_subplot(1, 1, 1)
    for label, s in curves.items():
        idx = np.arange(1, s.shape[0] + 1)
        keep = s > 0
        ax.plot(idx[keep], s[keep], label=label, linewidth=1.5)
    ax.set_yscale("log")
    ax.set_xlabel("index (descending singular value)")
    ax.set_ylabel("singular value / largest")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return atomic_write_bytes(target, buffer.getvalue())
