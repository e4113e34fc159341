"""ROC AUC (scikit-learn's ``roc_auc_score``, after our input checks).

Used for the BERT-flow paper's QNLI experiment (table 4): QNLI as unsupervised
question-answer entailment, scored by the AUC of cosine(question, sentence) against
the entailment label.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from flow_plugin.errors import InputError, InputTypeError
from flow_plugin.evaluation._checks import float_vector, same_length

__all__ = ["roc_auc"]


def _binary_labels(labels: Any) -> np.ndarray:
    if isinstance(labels, (str, bytes)):
        raise InputTypeError(f"labels must be an array of 0/1 or bool, got {type(labels).__name__}")
    arr = np.asarray(labels)
    if arr.ndim != 1:
        raise InputError(f"labels must be 1-D, got shape {arr.shape}")
    if arr.dtype == np.bool_:
        return arr
    if not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)):
        raise InputTypeError(f"labels must be 0/1 or bool, got dtype {arr.dtype}")
    if np.issubdtype(arr.dtype, np.floating) and not np.all(np.isfinite(arr)):
        raise InputError("labels contain NaN or infinite values")
    bad = ~np.isin(arr, (0, 1))
    if np.any(bad):
        raise InputError(f"labels must be 0 or 1; found {arr[bad][0]!r} at index {int(np.argmax(bad))}")
    return arr.astype(bool)


def roc_auc(labels: Any, scores: Any) -> float:
    """Area under the ROC curve of ``scores`` for the positive class ``labels == 1``.

    The probability that a random positive scores higher than a random negative, ties
    counting one half (scikit-learn's ``roc_auc_score``). Both classes must be present;
    scores must be finite.
    """
    y = _binary_labels(labels)
    s = float_vector(scores, "scores", min_len=1)
    same_length(y, s, "labels", "scores")
    n_pos = int(np.count_nonzero(y))
    n_neg = int(y.shape[0] - n_pos)
    if n_pos == 0 or n_neg == 0:
        raise InputError(
            f"roc_auc needs both classes; got {n_pos} positive and {n_neg} negative label(s)"
        )
    # scikit-learn loads when an AUC is computed (it takes a second to import)
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(y, s))
