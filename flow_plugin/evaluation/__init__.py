"""Evaluators in plain numpy/scipy (no torch, no mteb): STS correlations, ROC AUC,
lexical-similarity analysis and isotropy diagnostics; and the side files of a result (per-item and per-pair
scores, :mod:`.sidecars`), which import no numpy.

The public names load their module on first use, so that reading a result's side files (the leaderboard,
the sweep) does not import numpy.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "roc_auc": "auc",
    **dict.fromkeys(("effective_rank", "isotropy_report", "isotropy_score", "mean_random_cosine", "plot_spectra",
                     "singular_values", "top_k_variance_share"), "isotropy"),
    **dict.fromkeys(("lexical_similarity_correlations", "pair_edit_distances", "word_edit_distance"), "lexical"),
    **dict.fromkeys(("AGGREGATE_PROTOCOLS", "STSResult", "SubsetCorrelation", "evaluate_sts", "paired_cosine",
                     "pearson", "spearman", "to_points"), "sts"),
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
