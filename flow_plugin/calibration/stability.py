"""Whether a fitted calibrator's cosines mean anything: their stability under rounding.

A calibrator can fit without error and still produce a space whose cosines are noise: when it
rescales directions the fit corpus barely spans (too few sentences for the width, or directions a
backbone never uses), the rounding error of the embeddings in those directions is blown up until it
dominates every cosine. Such a space still gives a "score", which is a number of the rounding, not of
the model.

:func:`cosine_stability` measures it directly. It pairs up to 2,000 distinct fit rows, computes the
calibrated cosine of each pair, rounds every input element by a relative error of up to 2⁻⁸ (bf16 keeps 8
significant bits: its rounding error is at most 2⁻⁹, and kernels add a little) and computes the cosines
again. The Spearman correlation between the two lists is 1 when rounding does not reorder the pairs;
in a space dominated by near-null directions it falls towards 0. The same perturbation is used
whatever precision the embeddings were computed in, so the verdict does not depend on the CPU.

Measured (AMD EPYC, float32 and bf16): every calibrator name on all-MiniLM-L6-v2 and its layer-0 and
layer-1 testbeds keeps a correlation of 0.99967 or more, on 100 and 200 STS-B pairs (after the small-sample
rule) and on all 1,379; so does a tiny random BERT with a real vocabulary on STS16 (0.9998). The spaces that
score noise fall to 0.86 (177 sentences whitened on all 176 directions they span before a flow: score
-16), 0.52 (whitening a random BERT whose sentences are nearly all [UNK]) and below 0.1 (a whitening-first
flow that shrank unspanned directions instead of dropping them: score 3.3; 0.10 on all 1,379
pairs of the layer-0 testbed). :data:`MIN_COSINE_STABILITY` (0.99) sits in that gap, 30x the largest
legitimate loss (3.3e-4) away from it.

:func:`is_rounding_noise` is the verdict ``Calibrator.fit`` applies: a calibrated space is refused when
its correlation is below :data:`MIN_COSINE_STABILITY` *and* more than ``1 - MIN_COSINE_STABILITY`` below
the raw embeddings' own. Inputs whose raw cosines already crowd together (all-positive two-dimensional
data keeps 0.84 raw) are not the calibrator's doing, and the identity is never refused.

Examples
--------
>>> import numpy as np
>>> from flow_plugin.calibration import make_calibrator
>>> X = np.random.default_rng(0).normal(size=(300, 8)).astype(np.float32)
>>> round(cosine_stability(make_calibrator("whiten").fit(X), X), 3)
1.0
>>> cosine_stability(make_calibrator("raw").fit(X[:10]), X[:10]) is None  # too few pairs to tell
True
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.stats import spearmanr

#: the relative rounding every input element gets (bf16's resolution: 8 significant bits)
ROUNDING = 2.0**-8
#: pairs of distinct rows compared at most
MAX_PAIRS = 1000
#: fewer pairs than this and the correlation says too little: no verdict
MIN_PAIRS = 20
#: the lowest correlation a calibrated space may keep (see the module docstring for the measured gap)
MIN_COSINE_STABILITY = 0.99


def _paired_cosines(Z: np.ndarray) -> np.ndarray:
    left, right = Z[0::2].astype(np.float64), Z[1::2].astype(np.float64)
    norms = np.linalg.norm(left, axis=1) * np.linalg.norm(right, axis=1)
    return np.einsum("ij,ij->i", left, right) / np.maximum(norms, 1e-30)


def cosine_stability(calibrator: Any, X: np.ndarray, *, seed: int = 0) -> float | None:
    """Spearman correlation between the calibrated cosines of pairs of distinct rows of ``X`` and
    the same cosines after a relative rounding of :data:`ROUNDING` of every input element
    (``None`` when ``X`` has fewer than ``2 * MIN_PAIRS`` distinct rows). ``calibrator=None``
    measures the raw embeddings, with the same pairs and the same rounding."""
    rng = np.random.default_rng(seed)
    sample = X[rng.permutation(X.shape[0])[: 8 * MAX_PAIRS]]
    _, first = np.unique(sample, axis=0, return_index=True)
    rows = sample[np.sort(first)][: 2 * MAX_PAIRS]
    rows = rows[: rows.shape[0] - rows.shape[0] % 2]
    if rows.shape[0] < 2 * MIN_PAIRS:
        return None
    rounded = (rows * (1.0 + ROUNDING * rng.uniform(-1.0, 1.0, size=rows.shape))).astype(np.float32)
    transform = (lambda Z: Z) if calibrator is None else calibrator.transform
    before = _paired_cosines(transform(rows))
    after = _paired_cosines(transform(rounded))
    if np.unique(np.round(before, 10)).shape[0] < MIN_PAIRS:
        # the pairs share a handful of cosines up to float64 rounding (a space of one direction: +-1): no order to
        # keep. Cosines that differ by float32 rounding only (rows at equal distances) stay apart: they are noise
        return None
    return float(spearmanr(before, after).statistic)


def is_rounding_noise(calibrator: Any, X: np.ndarray) -> tuple[bool, float | None, float | None]:
    """``(refused, calibrated stability, raw stability)`` for a calibrator fitted on ``X``: refused when
    its cosines lose their order under rounding (below :data:`MIN_COSINE_STABILITY`) by more than
    ``1 - MIN_COSINE_STABILITY`` beyond what the raw embeddings lose. The raw figure is measured only
    when the calibrated one is low (``None`` otherwise).

    Examples
    --------
    >>> from flow_plugin.calibration import make_calibrator
    >>> X = (100 + np.random.default_rng(0).normal(size=(200, 2))).astype(np.float32)  # a narrow cone
    >>> refused, calibrated, raw = is_rounding_noise(make_calibrator("raw").fit(X), X)
    >>> refused, calibrated < 0.99, calibrated == raw  # raw cosines lose their order: not the identity's doing
    (False, True, True)
    """
    calibrated = cosine_stability(calibrator, X)
    if calibrated is None or calibrated >= MIN_COSINE_STABILITY:
        return False, calibrated, None
    raw = cosine_stability(None, X)
    return raw is None or calibrated < raw - (1.0 - MIN_COSINE_STABILITY), calibrated, raw
