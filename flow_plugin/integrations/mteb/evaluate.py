"""Registry models × tasks -> MTEB's standard result JSON, through ``mteb.evaluate``
(what ``flow-plugin eval``, ``bench`` and the sweep jobs run).

Tasks are our offline SentEval-format STS tasks (the default: all seven), MTEB task names or
MTEB benchmark names (see :mod:`flow_plugin.integrations.mteb.task_resolver`)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flow_plugin.encoding.options import DEFAULT_BATCH_SIZE, DEFAULT_PRECISION, EncoderOptions
from flow_plugin.errors import RegistryError


@contextlib.contextmanager
def _loader_cache_dir(cache_dir: str | os.PathLike[str] | None) -> Iterator[None]:
    """``cache_dir`` for the model MTEB's loader builds, for the duration of the load.

    Every keyword of ``mteb.get_model`` becomes an experiment parameter and names a result
    folder of its own; where embeddings are kept changes no number, so it reaches the loader as
    ``$FLOW_PLUGIN_CACHE_DIR`` (read by :func:`flow_plugin.encoding.cache.shared_encoder` when the
    model builds its encoder), set here and restored: the one place flow-plugin writes it.
    """
    from flow_plugin.encoding.cache import CACHE_DIR_ENV

    if cache_dir is None:
        yield
        return
    saved = os.environ.get(CACHE_DIR_ENV)
    os.environ[CACHE_DIR_ENV] = str(cache_dir)
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(CACHE_DIR_ENV, None)
        else:
            os.environ[CACHE_DIR_ENV] = saved


@dataclass
class TaskRun:
    """One (model, task) of an evaluation: computed now, or an earlier result reused."""

    model: str
    task: str
    status: str  # "computed" | "reused"
    score: float  # the task's main score (0-1 scale)
    path: Path | None  # the result file
    date: str | None  # when the result was computed (ISO 8601, UTC)


@dataclass
class ModelEvaluation:
    """What ``mteb.evaluate`` returned for one model, and where each result came from."""

    model: str
    result: Any  # mteb's ModelResult
    runs: list[TaskRun] = field(default_factory=list)
    #: how the backbone's precision was chosen (``PrecisionChoice.describe()``: "auto -> float32 (bf16 0.52x ...)")
    precision: str | None = None


def check_model_names(models: list[str]) -> None:
    """Every name is a registry model written with its ``flow_plugin/`` prefix (MTEB would
    otherwise look the bare name up on the Hugging Face Hub)."""
    from flow_plugin.catalog.registry import MODEL_PREFIX, parse_model_name

    for model_name in models:
        registry_model = parse_model_name(model_name)  # our registry's error, with close names
        if not model_name.startswith(MODEL_PREFIX):
            raise RegistryError(
                f"model {model_name!r} lacks the '{MODEL_PREFIX}' prefix that flow-plugin's MTEB models carry; "
                f"did you mean {registry_model.name!r}?"
            )


def evaluate_models(
    models: list[str],
    data: Path | None,
    tasks: Sequence[Any] | None,
    output_folder: Path,
    *,
    options: EncoderOptions | None = None,
    model_kwargs: dict[str, Any] | None = None,
    overwrite: bool = False,
    command: str = "flow-plugin eval",
) -> list[ModelEvaluation]:
    """Run ``mteb.evaluate`` for every model over ``tasks``.

    ``tasks`` are offline task names (default: all seven; they read the SentEval folder
    ``data``, else ``$FLOW_PLUGIN_SENTEVAL_DATA``), MTEB task names, MTEB benchmark names or
    MTEB task objects.

    ``options`` says how the backbone runs: the device goes to ``mteb.get_model``, an explicit
    precision becomes a loader argument, the batch size goes to ``encode``, and the cache folder
    is ``options.cache_dir``, else the process's ``$FLOW_PLUGIN_CACHE_DIR``. ``model_kwargs`` (``fit_corpus``,
    ``calibrator_params``) go to ``mteb.get_model``; MTEB records loader arguments as experiment
    parameters (they name a separate result folder), so pass only settings that change the numbers.

    Finished results are reused (MTEB's ``only-missing``), unless ``overwrite``. Before that,
    results a killed run left truncated, results computed from other data (another
    ``dataset_revision``) and results without a run record are set aside so they are recomputed:
    a score of other data, or of unknown hardware, is never reused. Results of another registry
    configuration live in another folder (the revision names the configuration). Every result
    this call computes gets a line in ``<output_folder>/flow-plugin-runs.jsonl`` with its
    hardware and the encoder's key (precision, kernels, batch plan); a result whose line cannot
    be written is set aside, and so is what an evaluation that failed midway wrote. An output
    folder that cannot be written (a full disk ...) is an
    :class:`~flow_plugin.errors.OutputError` naming it and the cause.
    """
    import mteb
    from mteb.cache import ResultCache

    from flow_plugin._io import make_output_folder, output_errors
    from flow_plugin._machine import describe_machine
    from flow_plugin.catalog.tasks import OFFLINE_TASKS
    from flow_plugin.integrations.mteb.compat import fresh_evaluator_state
    from flow_plugin.integrations.mteb.hook import register
    from flow_plugin.integrations.mteb.results import (
        quarantine_truncated_results,
        record_runs,
        repair_model_meta,
        result_files,
        set_aside_partial_results,
        set_aside_stale_results,
        set_aside_unrecorded_results,
    )
    from flow_plugin.integrations.mteb.task_resolver import resolve_tasks

    register()  # idempotent; makes this work with the start-up hook turned off too
    check_model_names(models)
    task_objects = resolve_tasks(list(tasks or OFFLINE_TASKS), data)
    task_names = [task.metadata.name for task in task_objects]
    options = options or EncoderOptions()
    loader_kwargs = dict(model_kwargs or {})
    if options.precision != DEFAULT_PRECISION:
        loader_kwargs["precision"] = options.precision
    batch_size = options.batch_size or DEFAULT_BATCH_SIZE
    output = make_output_folder(output_folder)
    evaluations = []
    with output_errors(output, "output folder"):  # MTEB's writes, and ours: a full disk is named as such
        quarantine_truncated_results(output, models, task_names)
        for model_name in models:
            with _loader_cache_dir(options.cache_dir):
                model = mteb.get_model(model_name, device=options.device, **loader_kwargs)
            repair_model_meta(output, model.mteb_model_meta, task_objects)
            if not overwrite:
                set_aside_stale_results(output, model.mteb_model_meta, task_objects)
                set_aside_unrecorded_results(output, model.mteb_model_meta, task_objects)
            before = {task: result_files(output, model_name, task) for task in task_names}

            def written() -> list[Path]:
                """The result files MTEB (re)wrote since ``before``."""
                return [path for task in task_names for path, stamp in result_files(output, model_name, task).items()
                        if before[task].get(path) != stamp]

            for task in task_objects:  # each model's evaluation draws as a fresh `mteb run` of the task would
                fresh_evaluator_state(task)
            try:
                result = mteb.evaluate(
                    model,
                    task_objects,
                    cache=ResultCache(output),
                    overwrite_strategy="always" if overwrite else "only-missing",
                    encode_kwargs={"batch_size": batch_size},
                    co2_tracker=False,
                    show_progress_bar=True,
                )
            except BaseException:  # failed or interrupted: what it wrote has no run record, so it is no result
                with contextlib.suppress(Exception):  # (the next run sets aside what this cannot)
                    set_aside_partial_results(written())
                raise
            backbone = model.encoder.backbone
            hardware = describe_machine(backbone.device, backbone.precision, backbone.precision_choice.as_dict())
            settings = {"batch_size": batch_size, "command": command, "encoder": backbone.key.as_dict(),
                        "oom_halvings": backbone.oom_halvings}  # CUDA out-of-memory batches halved so far
            evaluation = ModelEvaluation(model_name, result, precision=backbone.precision_choice.describe())
            changed = written()
            record_runs(output, changed, hardware, settings)  # or set them aside, and say why
            for task_result in result.task_results:
                task = task_result.task_name
                computed = [path for path in result_files(output, model_name, task) if path in changed]
                path = computed[0] if computed else next(iter(result_files(output, model_name, task)), None)
                date = task_result.date.isoformat(timespec="seconds") if getattr(task_result, "date", None) else None
                evaluation.runs.append(TaskRun(model_name, task, "computed" if computed else "reused",
                                               float(task_result.get_score()), path, date))
            evaluations.append(evaluation)
    return evaluations


__all__ = ["ModelEvaluation", "TaskRun", "check_model_names", "evaluate_models"]
