"""Lexical similarity analysis (BERT-flow paper, section 4.4 and table 6).

The paper asks how much each similarity measure follows surface overlap: it correlates
the similarity of each pair (gold score, or the cosine of some embedding) with the
word-level edit distance between the two sentences, over all pairs and over the pairs
whose edit distance is at most 4. A good semantic similarity should correlate less
(in magnitude) with edit distance than BERT's raw cosine does. Correlations are
Spearman's, on the -1..1 scale; they are typically negative (more similar = fewer edits).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from flow_plugin.errors import InputError, InputTypeError
from flow_plugin.evaluation._checks import float_vector
from flow_plugin.evaluation.sts import spearman

__all__ = ["word_edit_distance", "pair_edit_distances", "lexical_similarity_correlations"]


def _tokens(x: Any, name: str) -> Sequence[str]:
    if isinstance(x, str):
        raise InputTypeError(f"{name} must be a sequence of tokens, not a str (use {name}.split())")
    if not isinstance(x, Sequence):
        raise InputTypeError(f"{name} must be a sequence of str tokens, got {type(x).__name__}")
    for tok in x:
        if not isinstance(tok, str):
            raise InputTypeError(f"{name} must hold str tokens, found {type(tok).__name__}")
    return x


def word_edit_distance(a_tokens: Sequence[str], b_tokens: Sequence[str]) -> int:
    """Levenshtein distance between two token lists (insert, delete, substitute: cost 1 each)."""
    a = _tokens(a_tokens, "a_tokens")
    b = _tokens(b_tokens, "b_tokens")
    if len(a) < len(b):
        a, b = b, a  # keep the row as short as possible
    previous = list(range(len(b) + 1))
    for i, tok_a in enumerate(a, start=1):
        current = [i]
        for j, tok_b in enumerate(b, start=1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (tok_a != tok_b)))
        previous = current
    return previous[-1]


def _sentences(x: Any, name: str) -> list[str]:
    if isinstance(x, str) or not isinstance(x, Sequence):
        raise InputTypeError(f"{name} must be a sequence of str sentences, got {type(x).__name__}")
    for i, s in enumerate(x):
        if not isinstance(s, str):
            raise InputTypeError(f"{name}[{i}] must be a str, got {type(s).__name__}")
    return list(x)


def pair_edit_distances(sentences1: Sequence[str], sentences2: Sequence[str]) -> np.ndarray:
    """Word edit distance of each pair; sentences are split on whitespace. int64 vector."""
    s1 = _sentences(sentences1, "sentences1")
    s2 = _sentences(sentences2, "sentences2")
    if len(s1) != len(s2):
        raise InputError(f"sentences1 has {len(s1)} items but sentences2 has {len(s2)}; they must match")
    return np.array([word_edit_distance(a.split(), b.split()) for a, b in zip(s1, s2)], dtype=np.int64)


def _spearman_or_none(x: np.ndarray, y: np.ndarray) -> float | None:
    """Spearman on a data-dependent subset: ``None`` when undefined (< 2 pairs or a constant)."""
    if x.shape[0] < 2 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return None
    return spearman(x, y)


def lexical_similarity_correlations(
    sentences1: Sequence[str],
    sentences2: Sequence[str],
    gold: Any,
    similarities: Mapping[str, Any],
    max_edit_distance: int = 4,
) -> dict[str, Any]:
    """Spearman correlation of each similarity with the word edit distance of the pairs.

    Returns a JSON-serialisable dict::

        {"max_edit_distance": 4,
         "n_pairs": {"all": N, "small_edit": M},
         "spearman": {"gold": {"all": .., "small_edit": ..}, "<name>": {...}, ...}}

    where ``"small_edit"`` is the set of pairs with edit distance <= ``max_edit_distance``.
    A correlation that is undefined on that subset (fewer than 2 pairs, or a constant)
    is ``None``. ``"gold"`` is a reserved name and cannot be used in ``similarities``.
    """
    distances = pair_edit_distances(sentences1, sentences2)
    n = distances.shape[0]
    if isinstance(max_edit_distance, bool) or not isinstance(max_edit_distance, (int, np.integer)):
        raise InputTypeError(f"max_edit_distance must be an int, got {type(max_edit_distance).__name__}")
    if max_edit_distance < 0:
        raise InputError(f"max_edit_distance must be >= 0, got {max_edit_distance}")
    if not isinstance(similarities, Mapping):
        raise InputTypeError(f"similarities must be a mapping name -> vector, got {type(similarities).__name__}")
    if "gold" in similarities:
        raise InputError("similarities may not use the reserved name 'gold'")
    named: dict[str, np.ndarray] = {"gold": float_vector(gold, "gold", min_len=2)}
    for name, values in similarities.items():
        if not isinstance(name, str):
            raise InputTypeError(f"similarity names must be str, got {type(name).__name__}")
        named[name] = float_vector(values, f"similarities[{name!r}]", min_len=2)
    for name, values in named.items():
        if values.shape[0] != n:
            label = "gold" if name == "gold" else f"similarities[{name!r}]"
            raise InputError(f"{label} has {values.shape[0]} values but there are {n} sentence pairs")
    dist = distances.astype(np.float64)
    small = distances <= max_edit_distance
    out: dict[str, Any] = {
        "max_edit_distance": int(max_edit_distance),
        "n_pairs": {"all": int(n), "small_edit": int(np.count_nonzero(small))},
        "spearman": {},
    }
    for name, values in named.items():
        out["spearman"][name] = {
            "all": spearman(values, dist) if np.ptp(dist) > 0 else None,
            "small_edit": _spearman_or_none(values[small], dist[small]),
        }
    return out
