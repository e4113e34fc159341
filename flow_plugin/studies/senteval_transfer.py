"""SentEval's transfer tasks for one backbone, raw and each calibrator (seeded ones over several seeds):
the library call behind ``flow-plugin senteval``.

Example (SentEval found through ``$FLOW_PLUGIN_SENTEVAL_PATH``)::

    from flow_plugin.studies.senteval_transfer import run_transfer

    report = run_transfer("minilm-l6", "../shared/data/senteval", calibrators=["raw", "whiten", "flow"],
                          output="results/senteval-transfer-minilm-l6.json")
    for row in report.results:
        print(row.calibrator, row.seed, row.task, row.accuracy)
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from flow_plugin._io import atomic_write_json
from flow_plugin.calibration.names import STUDY_CALIBRATORS
from flow_plugin.catalog.registry import MODEL_NAME_SUFFIXES, ForeignBase
from flow_plugin.errors import RegistryError
from flow_plugin.integrations.mteb.task_resolver import offline_data_root
from flow_plugin.integrations.senteval import SentEvalAdapter, base_encoder
from flow_plugin.integrations.senteval_transfer import (TRANSFER_TASKS, evaluate_transfer, import_senteval,
                                                        resolve_classifier, senteval_commit, senteval_params)
from flow_plugin.studies.runs import expand_runs, loadable_base

logger = logging.getLogger(__name__)


@dataclass
class TransferResult:
    """One (calibrator, seed, task): SentEval's numbers (percent, as SentEval rounds them) and the fit."""

    model: str
    calibrator: str
    seed: int | None
    task: str
    accuracy: float
    dev_accuracy: float
    f1: float | None
    n_dev: int
    n_test: int
    seconds: float
    fit: dict[str, Any] | None = None


@dataclass
class TransferReport:
    """What :func:`run_transfer` ran and got."""

    backbone: str
    classifier: str
    params: dict[str, Any]
    senteval_commit: str | None
    results: list[TransferResult] = field(default_factory=list)
    wall_seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"format": "flow-plugin-senteval-transfer", "format_version": 1, "backbone": self.backbone,
                "classifier": self.classifier, "params": self.params, "senteval_commit": self.senteval_commit,
                "wall_seconds": round(self.wall_seconds, 1), "results": [asdict(result) for result in self.results]}


def run_transfer(
    backbone: str,
    task_path: str | os.PathLike[str] | None = None,
    *,
    calibrators: Sequence[str] = STUDY_CALIBRATORS,
    tasks: Sequence[str] | None = None,
    seeds: int = 1,
    classifier: str = "auto",
    senteval_path: str | os.PathLike[str] | None = None,
    output: str | os.PathLike[str] | None = None,
    encoder_options: dict[str, Any] | None = None,
    progress: Callable[[str], None] = logger.info,
) -> TransferReport:
    """Run SentEval's transfer ``tasks`` (default: :data:`~flow_plugin.integrations.senteval_transfer.TRANSFER_TASKS`)
    for ``backbone`` (a registry backbone, a local sentence-transformers folder or a model MTEB loads by name) with
    each calibrator, a seeded one with ``seeds`` seeds (its default seed and the next ones, as ``bench --seeds``);
    SentEval reads ``task_path`` (the folder holding ``downstream/``, or the data folder holding ``senteval/``;
    default: the data root, ``$FLOW_PLUGIN_SHARED_DATA``). Task by task, every calibrator reads one pass of the
    backbone over the task's sentences. With ``output``, the report is written there as JSON (atomically) after
    every task, so an interrupted run keeps what finished."""
    started = time.perf_counter()
    base = loadable_base(backbone)
    unknown = [name for name in calibrators if name not in MODEL_NAME_SUFFIXES]
    if unknown:
        raise RegistryError(f"unknown calibrator(s) {', '.join(unknown)}; choose from {', '.join(MODEL_NAME_SUFFIXES)}")
    tasks = list(tasks or TRANSFER_TASKS)
    task_path = offline_data_root(task_path, tasks)
    chosen = resolve_classifier(classifier)
    senteval = import_senteval(senteval_path)  # a clear error now, before any embedding
    shown = {key: value for key, value in senteval_params(task_path, chosen, None).items()
             if key not in ("task_path", "flow_plugin")}
    report = TransferReport(base.name, chosen, shown, senteval_commit(senteval))
    runs = expand_runs(base, list(dict.fromkeys(calibrators)), seeds=seeds)
    options = {"show_progress_bar": False, **(encoder_options or {})}
    encoder = base_encoder(base.name, options) if isinstance(base, ForeignBase) else base
    calibrator_of = {run.model: run.model.removeprefix(base.model_name("raw")).lstrip("-") or "raw" for run in runs}
    adapters = [SentEvalAdapter(backbone=encoder, calibrator=calibrator_of[run.model],
                                calibrator_params=run.kwargs.get("calibrator_params"), **options) for run in runs]
    steps = [(task, run, adapter) for task in tasks for run, adapter in zip(runs, adapters)]
    for number, (task, run, adapter) in enumerate(steps, start=1):

        def keep(task: str, result: dict[str, Any], seconds: float, *, run: Any = run, adapter: Any = adapter,
                 number: int = number) -> None:
            fit = adapter.fit_log[-1] if adapter.fit_log else None
            report.results.append(TransferResult(
                model=run.model, calibrator=calibrator_of[run.model], seed=run.seed, task=task,
                accuracy=float(result["acc"]), dev_accuracy=float(result["devacc"]),
                f1=float(result["f1"]) if "f1" in result else None, n_dev=int(result["ndev"]),
                n_test=int(result["ntest"]), seconds=round(seconds, 1),
                fit={key: fit.get(key) for key in ("n_sentences", "n_unique_sentences", "fit_seconds", "encode_seconds",
                                                   "adapted")} if fit else None))
            progress(f"senteval [{number}/{len(steps)}] {run.label} × {task}: acc {result['acc']:.2f} "
                     f"in {seconds:.0f} s")
            if output is not None:
                report.wall_seconds = time.perf_counter() - started
                atomic_write_json(Path(output), report.as_dict())

        evaluate_transfer(adapter, task_path, [task], classifier=chosen, senteval_path=senteval_path, on_task=keep)
    report.wall_seconds = time.perf_counter() - started
    if output is not None:
        atomic_write_json(Path(output), report.as_dict())
    return report


__all__ = ["TransferReport", "TransferResult", "run_transfer"]
