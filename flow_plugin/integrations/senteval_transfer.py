"""SentEval's transfer tasks through the real SentEval engine: one backbone, each calibrator, raw included.

SentEval (facebookresearch/SentEval) is not on PyPI. It is found through ``$FLOW_PLUGIN_SENTEVAL_PATH`` (the
folder of a SentEval checkout, the one holding the ``senteval`` package), else through a plain
``import senteval`` (``PYTHONPATH`` or ``pip install -e`` of a checkout); without either,
:func:`import_senteval` raises :class:`~flow_plugin.errors.MissingExtraError` saying how to get it.

:func:`evaluate_transfer` hands one :class:`~flow_plugin.integrations.senteval.SentEvalAdapter`'s
``prepare``/``batcher`` to ``senteval.engine.SE``: SentEval reads its own files, calls ``prepare`` once per task
with every sentence of the task (the calibrator is fitted on them: the "target" setting, never the labels) and
``batcher`` for the embeddings, then trains and scores its own classifier. The study of every calibrator of a
backbone is :func:`flow_plugin.studies.senteval_transfer.run_transfer`; the backbone encodes each distinct
sentence once for all of them (the shared embedding cache).

The classifier (:data:`CLASSIFIERS`; SentEval's README, "Parameters"):

* ``"pytorch"``: SentEval's logistic regression in PyTorch, the configuration its README gives for the best
  results (``usepytorch=True, kfold=10, classifier={nhid: 0, optim: adam, batch_size: 64, tenacity: 5,
  epoch_size: 4}``). SentEval builds it with ``.cuda()``: it needs a CUDA device;
* ``"sklearn"``: SentEval's CPU path (``usepytorch=False``): scikit-learn's ``LogisticRegression`` (lbfgs,
  ``max_iter`` 100, ``random_state`` = SentEval's seed 1111) with SentEval's L2 grid, chosen by SentEval's
  own cross-validation (``kfold=10``): C in 2^-2..2^3 (MR, CR, SUBJ, MPQA: nested 10-fold; SST-2, SST-5,
  SICK-E: the dev split), 2^-1..2^5 for TREC and MRPC (10-fold on train);
* ``"auto"`` (default): ``pytorch`` where CUDA is available, else ``sklearn``. The result says which ran.

The scores are SentEval's: test accuracy (MRPC also F1), in percent, as SentEval rounds them (2 decimals).
SentEval keeps no per-item predictions, so a seeded calibrator's spread comes from its seeds, not from a
bootstrap over items.
"""

from __future__ import annotations

import importlib
import logging
import os
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from flow_plugin._machine import cuda_available
from flow_plugin.data.roots import resolve_senteval_root
from flow_plugin.errors import InputError, MissingExtraError
from flow_plugin.evaluation.blas_threads import evaluator_threads

logger = logging.getLogger(__name__)

#: the folder of a SentEval checkout (holding the ``senteval`` package)
SENTEVAL_PATH_ENV = "FLOW_PLUGIN_SENTEVAL_PATH"
SENTEVAL_URL = "https://github.com/facebookresearch/SentEval"
#: SentEval's transfer tasks this runs (its names), in the order of its README's table
TRANSFER_TASKS: tuple[str, ...] = ("MR", "CR", "SUBJ", "MPQA", "SST2", "SST5", "TREC", "MRPC", "SICKEntailment")
#: SentEval's seed (senteval/engine.py: ``params.seed = 1111``), the seed of its folds and classifiers
SENTEVAL_SEED = 1111
#: classifier settings: SentEval README's best-results configuration, and its CPU (scikit-learn) path
CLASSIFIERS: dict[str, dict[str, Any]] = {
    "pytorch": {"usepytorch": True, "kfold": 10,
                "classifier": {"nhid": 0, "optim": "adam", "batch_size": 64, "tenacity": 5, "epoch_size": 4}},
    "sklearn": {"usepytorch": False, "kfold": 10, "classifier": {"nhid": 0}},
}


def import_senteval(path: str | os.PathLike[str] | None = None) -> Any:
    """The ``senteval`` package: from ``path`` (a checkout's folder), else ``$FLOW_PLUGIN_SENTEVAL_PATH``,
    else an importable ``senteval``."""
    folder = path if path is not None else os.environ.get(SENTEVAL_PATH_ENV) or None
    if folder is not None:
        folder = Path(folder).expanduser().resolve()
        if not (folder / "senteval" / "engine.py").is_file():
            raise MissingExtraError(f"{folder} holds no SentEval checkout (no senteval/engine.py); clone "
                                    f"{SENTEVAL_URL} and point {SENTEVAL_PATH_ENV} at the clone's folder")
        if str(folder) not in sys.path:
            sys.path.insert(0, str(folder))
    try:
        senteval = importlib.import_module("senteval")
        importlib.import_module("senteval.engine")
    except ModuleNotFoundError as error:
        if error.name not in ("senteval", "senteval.engine"):
            raise
        raise MissingExtraError(f"SentEval is not installed (it is not on PyPI): clone {SENTEVAL_URL} and set "
                                f"{SENTEVAL_PATH_ENV}=<the clone's folder>, or put it on PYTHONPATH") from None
    return senteval


def senteval_available(path: str | os.PathLike[str] | None = None) -> str | None:
    """``None`` when SentEval can be imported, else why not (for skips and messages)."""
    try:
        import_senteval(path)
    except MissingExtraError as error:
        return str(error)
    return None


def resolve_classifier(classifier: str) -> str:
    """``"auto"`` -> ``"pytorch"`` with CUDA, else ``"sklearn"``; ``"pytorch"`` without CUDA is an error."""
    if classifier not in (*CLASSIFIERS, "auto"):
        raise InputError(f"classifier must be one of auto, {', '.join(CLASSIFIERS)}; got {classifier!r}")
    if classifier == "auto":
        return "pytorch" if cuda_available() else "sklearn"
    if classifier == "pytorch" and not cuda_available():
        raise InputError("SentEval's PyTorch classifier is built with .cuda() and this machine has no CUDA device; "
                         "use classifier='sklearn' (SentEval's scikit-learn logistic regression, its CPU path)")
    return classifier


def senteval_commit(senteval: Any) -> str | None:
    """The git commit of the SentEval checkout in use, when it is a git work tree (else None)."""
    folder = Path(senteval.__file__).resolve().parents[1]
    try:
        done = subprocess.run(["git", "-C", str(folder), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10, check=False)
    except OSError:
        return None
    return (done.stdout.strip() or None) if done.returncode == 0 else None


def senteval_params(task_path: str | os.PathLike[str], classifier: str, adapter: Any) -> dict[str, Any]:
    """SentEval's ``params`` for one run: the task folder, the classifier's settings (:data:`CLASSIFIERS`,
    after :func:`resolve_classifier`), SentEval's seed and batch size, and the adapter."""
    from flow_plugin.integrations.senteval import PARAMS_KEY  # numpy: not to parse

    settings = CLASSIFIERS[resolve_classifier(classifier)]
    return {"task_path": os.fspath(task_path), "seed": SENTEVAL_SEED, "batch_size": 128,
            "usepytorch": settings["usepytorch"], "kfold": settings["kfold"],
            "classifier": dict(settings["classifier"]), PARAMS_KEY: adapter}


def evaluate_transfer(adapter: Any, task_path: str | os.PathLike[str], tasks: Sequence[str] = TRANSFER_TASKS, *,
                      classifier: str = "auto", senteval_path: str | os.PathLike[str] | None = None,
                      on_task: Callable[[str, dict[str, Any], float], None] | None = None) -> dict[str, dict[str, Any]]:
    """SentEval's results (task -> its dict: ``acc``, ``devacc``, ``ndev``, ``ntest``; MRPC's ``f1``) for one
    adapter; ``on_task(task, result, seconds)`` is called after each task. SentEval's scikit-learn fits run on
    the BLAS threads :func:`flow_plugin.evaluation.blas_threads.blas_threads` measures as the faster."""
    unknown = [task for task in tasks if task not in TRANSFER_TASKS]
    if unknown:
        raise InputError(f"unknown SentEval transfer task(s) {', '.join(unknown)}; choose from {', '.join(TRANSFER_TASKS)}")
    senteval = import_senteval(senteval_path)
    root = resolve_senteval_root(task_path)
    params = senteval_params(root, classifier, adapter)
    engine = senteval.engine.SE(params, adapter.batcher, adapter.prepare)
    results: dict[str, dict[str, Any]] = {}
    for task in tasks:
        started = time.perf_counter()
        with warnings.catch_warnings(), evaluator_threads():
            # scikit-learn's lbfgs may stop at SentEval's max_iter (100) on some folds: SentEval's setting, kept
            warnings.filterwarnings("ignore", message=".*lbfgs failed to converge.*")
            warnings.filterwarnings("ignore", category=FutureWarning, module="sklearn")
            results[task] = dict(engine.eval(task))
        if on_task is not None:
            on_task(task, results[task], time.perf_counter() - started)
    return results


__all__ = [
    "CLASSIFIERS",
    "SENTEVAL_PATH_ENV",
    "SENTEVAL_SEED",
    "TRANSFER_TASKS",
    "evaluate_transfer",
    "import_senteval",
    "resolve_classifier",
    "senteval_available",
    "senteval_commit",
    "senteval_params",
]
