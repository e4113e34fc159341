"""One job: every run of one backbone over the sweep's tasks, in a Ray worker (or anywhere).

It does what ``flow-plugin bench`` does for one backbone, item by item through
:func:`flow_plugin.integrations.mteb.evaluate.evaluate_models`: one backbone in memory for all its runs,
embeddings kept in the output folder's on-disk cache, a result that is already there never
recomputed. What differs: results are evaluated into the job's staging folder and published
atomically (:mod:`.publish`), and the job reports its progress in a file (:mod:`.progress`).

A failing item is recorded and the job goes on; an exception that stops the whole job (the
backbone cannot load, say) propagates, so Ray reports it (and does not retry it).
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field

from flow_plugin.sweep.jobs import Job, Settings
from flow_plugin.sweep.progress import AttemptLog
from flow_plugin.sweep.publish import Stage
from flow_plugin.integrations.mteb.evaluate import evaluate_models
from flow_plugin.encoding.options import EncoderOptions
from flow_plugin.sweep.plan import plan_job, resolve_task_refs

logger = logging.getLogger(__name__)


@dataclass
class JobOutcome:
    """What a job did (returned to the driver through Ray)."""

    job: str
    host: str
    pid: int
    seconds: float = 0.0
    total: int = 0
    computed: list[tuple[str, float]] = field(default_factory=list)  # (item, score in points)
    skipped: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)  # (item, error)
    n_encoded: int = 0
    n_cache_hits: int = 0


def run_job(job: Job, settings: Settings) -> JobOutcome:
    """Evaluate every item of ``job`` not done yet; return what happened."""
    started = time.perf_counter()
    # the cache folder and the data folder travel as arguments (EncoderOptions, evaluate_models' data)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # (Hugging Face tokenizers' own setting)
    log = AttemptLog(settings.progress, job.id)
    outcome = JobOutcome(job.id, log.state["host"], log.state["pid"])
    stage = Stage(settings.staging, job.id, log.attempt, settings.output).open()
    try:
        _run_items(job, settings, log, stage, outcome)
    except BaseException as error:
        log.finish("failed", error=f"{type(error).__name__}: {error}")
        raise
    finally:
        stage.close()
    outcome.seconds = time.perf_counter() - started
    log.finish("finished")
    return outcome


def _run_items(job: Job, settings: Settings, log: AttemptLog, stage: Stage, outcome: JobOutcome) -> None:
    # torch and scikit-learn load in the worker that runs a job, not in the driver
    from flow_plugin.catalog.builders import build_encoder, resolve

    tasks = resolve_task_refs(job.tasks, settings.data)
    by_name = {task.metadata.name: task for task in tasks}
    items = plan_job(job, settings.output, tasks)
    outcome.total = len(items)
    log.planned(len(items), sum(item.done for item in items))
    options = EncoderOptions(device=settings.device, precision=settings.precision or "auto",
                             batch_size=settings.batch_size, cache_dir=settings.cache_dir)
    encoder = build_encoder(resolve(job.runs[0].model), options)
    encoded, hits = encoder.n_encoded, encoder.n_cache_hits
    for item in items:
        if item.done:
            outcome.skipped.append(item.key)
            log.item(item.key, "skipped", 0.0)
            continue
        start = time.perf_counter()
        try:
            (evaluation,) = evaluate_models([item.run.model], settings.data, [by_name[item.task]], stage.folder,
                                            options=options, model_kwargs=dict(item.run.kwargs),
                                            command="flow-plugin sweep")
            score = round(evaluation.runs[0].score * 100, 4)
            stage.publish(item.path)
        except Exception as error:  # noqa: BLE001 -- report it, go on with the other items
            message = f"{type(error).__name__}: {error}"
            logger.warning("sweep job %s: %s failed: %s", job.id, item.key, message, exc_info=True)
            outcome.failed.append((item.key, message))
            log.item(item.key, "failed", time.perf_counter() - start, error=message)
            continue
        outcome.computed.append((item.key, score))
        log.item(item.key, "computed", time.perf_counter() - start, score=score)
    outcome.n_encoded = encoder.n_encoded - encoded
    outcome.n_cache_hits = encoder.n_cache_hits - hits
