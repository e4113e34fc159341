"""Registry models × tasks -> MTEB's standard result JSON, through ``mteb.evaluate``
(what ``flow-plugin eval``, ``bench`` and the sweep jobs run).

Tasks are our offline SentEval-format STS tasks (the default: all seven), MTEB task names or
MTEB benchmark names (see :mod:`flow_plugin.integrations.mteb.task_resolver`). Each model's evaluation is
:mod:`.model_evaluation`'s, imported when one runs: this module imports neither MTEB nor torch (the command
line and the studies import it)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flow_plugin._io import make_output_folder, output_errors
from flow_plugin.catalog.registry import (MODEL_PREFIX, default_registry, is_foreign_base, parse_model_name,
                                          spelled_model)
from flow_plugin.data.tasks import OFFLINE_TASKS
from flow_plugin.encoding.options import DEFAULT_BATCH_SIZE, EncoderOptions
from flow_plugin.errors import RegistryError
from flow_plugin.integrations.mteb.hook import register
from flow_plugin.integrations.mteb.task_resolver import resolve_tasks

if TYPE_CHECKING:  # pragma: no cover
    from flow_plugin.integrations.mteb.model_evaluation import ModelEvaluation


def check_model_names(models: list[str]) -> None:
    """Every name is a model spelling (:mod:`.base_models`): a ``flow_plugin/`` name whose registry
    backbone exists (else our registry's error, with close names), or an MTEB model name; a registry
    model written without its ``flow_plugin/`` prefix is an error naming the right spelling."""
    for model_name in models:
        base, _ = spelled_model(model_name)
        if model_name.startswith(MODEL_PREFIX):
            if not is_foreign_base(base):
                parse_model_name(model_name)  # our registry's error, with close names
        elif base in default_registry():
            raise RegistryError(f"model {model_name!r} lacks the '{MODEL_PREFIX}' prefix that flow-plugin's MTEB "
                                f"models carry; did you mean {MODEL_PREFIX + model_name!r}?")


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
    evaluator_seeds: Sequence[int] = (),
) -> list[ModelEvaluation]:
    """Run ``mteb.evaluate`` for every model over ``tasks``.

    ``models`` are model spellings (``flow_plugin/minilm-l6-flow``, ``flow_plugin/intfloat/e5-small-v2-whiten``,
    an MTEB model name for its raw embeddings). ``tasks`` are offline task names (default: all seven; they read
    the SentEval folder ``data``, else ``$FLOW_PLUGIN_SENTEVAL_DATA``), MTEB task names, MTEB benchmark names or
    MTEB task objects.

    ``options`` says how a registry backbone runs: the device goes to ``mteb.get_model``, an explicit
    precision becomes a loader argument, the batch size goes to ``encode``, and the cache folder
    is ``options.cache_dir``, else the process's ``$FLOW_PLUGIN_CACHE_DIR``. ``model_kwargs`` (``fit_corpus``,
    ``calibrator_params``) go to ``mteb.get_model``; MTEB records loader arguments as experiment
    parameters (they name a separate result folder), so pass only settings that change the numbers.

    ``evaluator_seeds``: further seeds of the evaluator (MTEB's ``AbsTask(seed=...)``; each task's own, MTEB's
    42, is the main run): the tasks whose evaluator draws at random (classification, clustering) are evaluated
    once more per seed, into ``<output_folder>/evaluator-seeds/<seed>/``, with the same fitted calibrator.

    This is the evaluation loop our commands own: each task gets a fresh evaluator state and is handed to
    the model (whose fit reads that task object's text), MTEB evaluates, and the fit records of every result
    computed now are written next to it. Finished results are reused (MTEB's ``only-missing``), unless
    ``overwrite``. Before that, results a killed run left truncated, results computed from other data (another
    ``dataset_revision``) and results without a run record are set aside so they are recomputed:
    a score of other data, or of unknown hardware, is never reused. Every result
    this call computes gets a line in ``<output_folder>/flow-plugin-runs.jsonl`` with its
    hardware and the encoder's key (precision, kernels, batch plan); a result whose line cannot
    be written is set aside, and so is what an evaluation that failed midway wrote. An output
    folder that cannot be written (a full disk ...) is an
    :class:`~flow_plugin.errors.OutputError` naming it and the cause.
    """
    # MTEB and torch load when a model is evaluated, not with this module (the CLI and the studies import it)
    from flow_plugin.integrations.mteb.model_evaluation import evaluate_with_seeds, load_model

    register()  # idempotent; makes this work with the start-up hook turned off too
    check_model_names(models)
    task_objects = resolve_tasks(list(tasks or OFFLINE_TASKS), data)
    options = options or EncoderOptions()
    batch_size = options.batch_size or DEFAULT_BATCH_SIZE
    output = make_output_folder(output_folder)
    with output_errors(output, "output folder"):  # MTEB's writes, and ours: a full disk is named as such
        return [evaluate_with_seeds(name, load_model(name, options, model_kwargs), task_objects, output, overwrite,
                                    batch_size, command, evaluator_seeds) for name in models]


__all__ = ["check_model_names", "evaluate_models"]
