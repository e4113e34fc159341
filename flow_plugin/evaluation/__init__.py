"""Evaluators in plain numpy/scipy (no torch, no mteb): STS correlations, ROC AUC,
lexical-similarity analysis and isotropy diagnostics."""

from flow_plugin.evaluation.auc import roc_auc
from flow_plugin.evaluation.isotropy import (
    effective_rank,
    isotropy_report,
    isotropy_score,
    mean_random_cosine,
    plot_spectra,
    singular_values,
    top_k_variance_share,
)
from flow_plugin.evaluation.lexical import (
    lexical_similarity_correlations,
    pair_edit_distances,
    word_edit_distance,
)
from flow_plugin.evaluation.sts import (
    AGGREGATE_PROTOCOLS,
    STSResult,
    SubsetCorrelation,
    evaluate_sts,
    paired_cosine,
    pearson,
    spearman,
    to_points,
)

__all__ = [
    "AGGREGATE_PROTOCOLS",
    "STSResult",
    "SubsetCorrelation",
    "effective_rank",
    "evaluate_sts",
    "isotropy_report",
    "isotropy_score",
    "lexical_similarity_correlations",
    "mean_random_cosine",
    "pair_edit_distances",
    "paired_cosine",
    "pearson",
    "plot_spectra",
    "roc_auc",
    "singular_values",
    "spearman",
    "to_points",
    "top_k_variance_share",
    "word_edit_distance",
]
