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
        if not item.isascii():
            try:
                item.encode("utf-8")
            except UnicodeEncodeError as error:  # a lone surrogate: text no tokenizer or file can hold
                raise InputError(
                    f"{name}[{position}] holds {item[error.start]!r} (a lone surrogate, U+{ord(item[error.start]):04X}) "
                    f"at character {error.start}: not valid Unicode text ({item!r:.60})"
                ) from None
    return items


def check_embeddings(
    X: Any,
    *,
    name: str = "X",
    n_features: int | None = None,
    allow_empty: bool = True,
    owner: str | None = None,
) -> np.ndarray:
    """Return ``X`` as a C-contiguous float32 (n, d) array after checking type, shape and finiteness.

    Dense real arrays only: sparse or complex input, ragged or non-numeric objects, a wrong
    number of features (``n_features``; ``owner`` names the estimator expecting them), no
    rows (unless ``allow_empty``), NaN or infinite values each raise an error that names the
    problem, the rows and the shape. scikit-learn's ``check_array`` settles what it checks
    best (sparse, complex, object arrays, no features).

    >>> check_embeddings([[1, 2], [3, 4]]).dtype
    dtype('float32')
    >>> check_embeddings([[1.0, float("nan")]])
    Traceback (most recent call last):
    ...
    flow_plugin.errors.InputError: X contains NaN or infinite values in 1 row(s): 0
    """
    if hasattr(X, "detach") and hasattr(X, "cpu"):  # a torch tensor
        X = X.detach().cpu().float().numpy()
    from sklearn.utils.validation import check_array  # lazy: scikit-learn takes a second to import

    dense = not hasattr(X, "tocsr")  # scipy sparse input: check_array below says it is not accepted
    try:
        probe = np.asarray(X) if dense else None
    except ValueError:  # ragged rows: check_array below says so
        probe = None
    if probe is not None:
        if probe.dtype.kind in "USVbMm":  # text, bytes, records, booleans, dates
            raise InputTypeError(f"{name} must hold real numbers, got dtype {probe.dtype}")
        if probe.ndim != 2:
            raise InputError(
                f"{name} must be a 2-D array of shape (n_samples, n_features), got shape {probe.shape}. Reshape your "
                "data with X.reshape(1, -1) if it holds a single sample"
            )
    try:
        array = check_array(
            X, accept_sparse=False, dtype=(np.float32, np.float64), ensure_all_finite=False,
            ensure_2d=True, allow_nd=False, ensure_min_samples=0, ensure_min_features=1, input_name=name,
        )
    except TypeError as error:  # sparse input, or objects that are not numbers
        raise InputTypeError(f"{name} must be a dense array of real numbers: {error}") from None
    except ValueError as error:  # complex values, ragged rows, no features
        raise InputError(f"{name} cannot be used as (n_samples, n_features) embeddings: {error}") from None
    if n_features is not None and array.shape[1] != n_features:
        expecting = owner or "the fitted estimator"
        raise InputError(
            f"{name} has {array.shape[1]} features, but {expecting} is expecting {n_features} features as input "
            f"({array.shape[1]} features per row but {n_features} were expected; shape {array.shape})"
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
