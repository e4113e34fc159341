"""Input checks shared by the encoder and the calibrators.

Every check raises an error that names the argument, the offending position and the
shape, so that a bad input never turns into a silently wrong answer.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from flow_plugin.errors import InputError, InputTypeError


def check_sentences(sentences: Iterable[Any], *, name: str = "sentences") -> list[str]:
    """Return ``sentences`` as a list of ``str``; reject a bare string and non-string items."""
    if isinstance(sentences, (str, bytes)):
        raise InputTypeError(
            f"{name} must be a sequence of str, got a single {type(sentences).__name__}; wrap it in a list"
        )
    try:
        items = list(sentences)
    except TypeError as error:
        raise InputTypeError(f"{name} must be an iterable of str, got {type(sentences).__name__}") from error
    for position, item in enumerate(items):
        if not isinstance(item, str):
            raise InputTypeError(
                f"{name}[{position}] is {type(item).__name__} ({item!r:.60}), not str; "
                "every input must be a string"
            )
    return items


def check_embeddings(
    X: Any,
    *,
    name: str = "X",
    n_features: int | None = None,
    allow_empty: bool = True,
) -> np.ndarray:
    """Return ``X`` as a C-contiguous float32 (n, d) array after checking shape and finiteness."""
    if hasattr(X, "detach") and hasattr(X, "cpu"):  # a torch tensor
        X = X.detach().cpu().float().numpy()
    try:
        array = np.asarray(X)
    except (TypeError, ValueError) as error:
        raise InputTypeError(f"{name} cannot be read as a numeric array: {error}") from error
    if array.dtype == object or not (
        np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.integer)
    ):
        raise InputTypeError(f"{name} must hold real numbers, got dtype {array.dtype}")
    if array.ndim != 2:
        raise InputError(f"{name} must be a 2-D array of shape (n_samples, n_features), got shape {array.shape}")
    if n_features is not None and array.shape[1] != n_features:
        raise InputError(
            f"{name} has {array.shape[1]} features per row but {n_features} were expected (shape {array.shape})"
        )
    if array.shape[0] == 0 and not allow_empty:
        raise InputError(f"{name} is empty (shape {array.shape}); at least one row is needed")
    array = np.ascontiguousarray(array, dtype=np.float32)
    finite = np.isfinite(array)
    if not finite.all():
        bad_rows = np.flatnonzero(~finite.all(axis=1))
        preview = ", ".join(str(i) for i in bad_rows[:5])
        more = f" and {len(bad_rows) - 5} more" if len(bad_rows) > 5 else ""
        raise InputError(
            f"{name} contains NaN or infinite values in {len(bad_rows)} row(s): {preview}{more}"
        )
    return array
