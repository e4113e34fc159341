"""How many BLAS threads scikit-learn's evaluators (logistic regression, k-means) get, decided by measuring.

On a machine whose cores are busy with other work, NumPy/SciPy's OpenBLAS threads wait for each other: on the
2-core test machine under load, one lbfgs logistic-regression fit (4,900 × 384, 6 classes) took 11.1 s on 2
BLAS threads and 0.65 s on 1. On an idle machine 2 threads can be the faster. :func:`blas_threads` times a small
seeded fit both ways, once per process, and keeps the faster; :func:`evaluator_threads` applies it (to the BLAS
libraries only: the backbone's torch threads are not touched).

``FLOW_PLUGIN_BLAS_THREADS`` (a positive integer, or ``default``) overrides the measurement.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import time
import warnings
from collections.abc import Iterator

from threadpoolctl import threadpool_limits

from flow_plugin.errors import InputError

logger = logging.getLogger(__name__)

BLAS_THREADS_ENV = "FLOW_PLUGIN_BLAS_THREADS"
#: repetitions of each setting in the probe (interleaved; the best time of each counts)
PROBE_REPEATS = 2


def _probe_fit() -> float:
    """Seconds of one seeded logistic-regression fit of a typical evaluator's shape (2,000 × 384, 6 classes)."""
    # numpy and scikit-learn load when the probe runs (the command line imports this module)
    import numpy as np
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(0)
    features = rng.normal(size=(2000, 384)).astype(np.float32)
    labels = np.argmax(features @ rng.normal(size=(384, 6)) + rng.normal(size=(2000, 6)), axis=1)
    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a fixed 15 iterations, stopped on purpose
        LogisticRegression(max_iter=15, tol=0.0).fit(features, labels)
    return time.perf_counter() - started


@functools.lru_cache(maxsize=1)
def blas_threads() -> int | None:
    """The BLAS thread count the evaluators run with: 1 when one thread fits faster than the libraries' default
    here, else ``None`` (the default); measured once per process unless ``$FLOW_PLUGIN_BLAS_THREADS`` says."""
    value = os.environ.get(BLAS_THREADS_ENV, "").strip()
    if value:
        if value == "default":
            return None
        if not value.isdigit() or int(value) < 1:
            raise InputError(f"{BLAS_THREADS_ENV} must be a positive integer or 'default', got {value!r}")
        return int(value)
    times: dict[int | None, float] = {1: float("inf"), None: float("inf")}
    for _ in range(PROBE_REPEATS):
        for limit in (1, None):
            with threadpool_limits(limits=limit, user_api="blas"):
                times[limit] = min(times[limit], _probe_fit())
    chosen = 1 if times[1] < times[None] else None
    logger.info("BLAS threads for the evaluators: %s (probe fit %.3f s on 1 thread, %.3f s on the default)",
                chosen or "default", times[1], times[None])
    return chosen


@contextlib.contextmanager
def evaluator_threads() -> Iterator[int | None]:
    """While the block runs, NumPy/SciPy's BLAS use :func:`blas_threads` threads (torch's are left alone)."""
    chosen = blas_threads()
    if chosen is None:
        yield None
        return
    with threadpool_limits(limits=chosen, user_api="blas"):
        yield chosen


__all__ = ["BLAS_THREADS_ENV", "blas_threads", "evaluator_threads"]
