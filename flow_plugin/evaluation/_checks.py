"""Input checks shared by the evaluators: numeric, finite arrays of the expected shape."""

from __future__ import annotations

from typing import Any

import numpy as np

from flow_plugin.errors import InputError, InputTypeError


def _as_real_array(x: Any, name: str) -> np.ndarray:
    if isinstance(x, (str, bytes)):
        raise InputTypeError(f"{name} must be a numeric array, got {type(x).__name__}")
    try:
        arr = np.asarray(x)
    except Exception as exc:  # ragged lists and the like
        raise InputTypeError(f"{name} cannot be converted to a numeric array: {exc}") from exc
    if arr.dtype == np.bool_ or not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)):
        raise InputTypeError(f"{name} must hold real numbers, got dtype {arr.dtype}")
    return arr.astype(np.float64, copy=False)


def _check_finite(arr: np.ndarray, name: str) -> None:
    if not np.all(np.isfinite(arr)):
        bad = int(np.size(arr) - np.count_nonzero(np.isfinite(arr)))
        raise InputError(f"{name} contains {bad} NaN or infinite value(s)")


def float_vector(x: Any, name: str, *, min_len: int = 1) -> np.ndarray:
    """``x`` as a finite float64 vector of length >= ``min_len``."""
    arr = _as_real_array(x, name)
    if arr.ndim != 1:
        raise InputError(f"{name} must be 1-D, got shape {arr.shape}")
    if arr.shape[0] < min_len:
        raise InputError(f"{name} must have at least {min_len} value(s), got {arr.shape[0]}")
    _check_finite(arr, name)
    return arr


def float_matrix(x: Any, name: str, *, min_rows: int = 1) -> np.ndarray:
    """``x`` as a finite float64 (n, d) matrix with n >= ``min_rows`` and d >= 1."""
    arr = _as_real_array(x, name)
    if arr.ndim != 2:
        raise InputError(f"{name} must be a 2-D (n, d) array, got shape {arr.shape}")
    if arr.shape[0] < min_rows or arr.shape[1] < 1:
        raise InputError(f"{name} must have at least {min_rows} row(s) and 1 column, got shape {arr.shape}")
    _check_finite(arr, name)
    return arr


def same_length(a: np.ndarray, b: np.ndarray, name_a: str, name_b: str) -> None:
    if a.shape[0] != b.shape[0]:
        raise InputError(f"{name_a} has {a.shape[0]} values but {name_b} has {b.shape[0]}; they must match")
