"""MTEB's files in an output folder: where a result lives, and reading one with mteb's own classes.

MTEB writes ``<output>/results/<model>/<revision>/[experiments/<name>/]<Task>.json`` with a
``model_meta.json`` next to it. :func:`result_path` says where a model run's result goes (nothing is
created); :func:`open_result_cache` and :func:`task_result_paths` list a folder's result files with
``mteb.cache.ResultCache``, :func:`load_task_result` parses one with ``mteb.results.TaskResult`` and
:func:`result_identity` reads its ``model_meta.json`` as an ``mteb.models.ModelMeta``; every error is a
:class:`~flow_plugin.errors.DataFolderError` naming the file. mteb is imported inside the functions only.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from flow_plugin._io import read_json
from flow_plugin._validation_errors import describe_validation_error
from flow_plugin.catalog.registry import MODEL_PREFIX, spell_model, spelled_model
from flow_plugin.errors import DataFolderError

if TYPE_CHECKING:  # pragma: no cover
    from mteb.cache import ResultCache
    from mteb.models import ModelMeta
    from mteb.results import TaskResult

RESULTS_FOLDER = "results"  # mteb's ResultCache keeps results in <cache>/results/
EXPERIMENTS_FOLDER = "experiments"  # MTEB's folder for results of models loaded with kwargs
NO_REVISION = "no_revision_available"  # MTEB's revision folder for a model whose metadata names no revision
#: where the results of a further evaluator seed go, under the output folder: ``evaluator-seeds/<seed>/``
EVALUATOR_SEEDS_FOLDER = "evaluator-seeds"
#: the evaluator seed of a task's main result: MTEB's default (``AbsTask(seed=42)``)
MTEB_SEED = 42


def model_folder(output_folder: Path, model: str) -> Path:
    """Where MTEB keeps the results of ``model`` in an output folder (MTEB's own folder name for
    it, ``ModelMeta.model_name_as_path``).

    Examples
    --------
    >>> model_folder(Path("out"), "flow_plugin/minilm-l6").as_posix()
    'out/results/flow_plugin__minilm-l6'
    """
    from mteb.models import ModelMeta  # heavy: MTEB

    return output_folder / RESULTS_FOLDER / ModelMeta.model_construct(name=model).model_name_as_path()


def result_path(output_folder: str | os.PathLike[str], meta: ModelMeta, task_name: str) -> Path:
    """Where MTEB's ``ResultCache`` files the result of ``meta`` (its name, revision and
    experiment) on ``task_name`` under ``output_folder``; nothing is created (dry runs: a ``ResultCache``
    makes its folder, so the path is computed on one over the temporary folder and moved).

    >>> import mteb
    >>> meta = mteb.get_model_meta("flow_plugin/minilm-l6-sn")
    >>> model, revision, *experiment, name = result_path(Path("out"), meta, "SentEvalSTS13").relative_to("out").parts[1:]
    >>> model, revision == meta.revision, revision.startswith("8b3219a92973c328a8e22fadcfa821b5dc75636a-"), experiment, name
    ('flow_plugin__minilm-l6', True, True, ['experiments', 'calibrator_sn'], 'SentEvalSTS13.json')
    """
    from mteb.cache import ResultCache  # heavy: MTEB

    cache = ResultCache(tempfile.gettempdir())
    # the revision is given, never looked up among the folders of the temporary cache
    path = cache.get_task_result_path(task_name, meta.model_name_as_path(), meta.revision or NO_REVISION,
                                      experiment_name=meta.experiment_name)
    return Path(output_folder) / path.relative_to(cache.cache_path)


def result_files(output_folder: Path, model: str, task: str) -> dict[Path, tuple[int, int]]:
    """Every ``<task>.json`` of a model (any revision; a model name, or the spelling of a calibrated one, whose
    results sit in its base's folder under ``experiments/``) -> (mtime_ns, size). A base model's name finds
    every experiment in its folder."""
    base, calibrator = spelled_model(model)
    registry_like = model.startswith(MODEL_PREFIX) and "/" not in base and not base.startswith(("/", ".", "~"))
    folder_name = model if calibrator == "raw" else (MODEL_PREFIX + base if registry_like else base)
    folder = model_folder(output_folder, folder_name)
    if not folder.is_dir():
        return {}
    found = {}
    for path in folder.rglob(f"{task}.json"):
        if _identity_model(path) != model:
            continue
        stat = path.stat()
        found[path] = (stat.st_mtime_ns, stat.st_size)
    return found


def _identity_model(path: Path) -> str | None:
    try:
        return result_identity(path).model
    except DataFolderError:
        return None


def open_result_cache(folder: str | os.PathLike[str]) -> ResultCache:
    """mteb's ``ResultCache`` for an MTEB output folder (one holding ``results/``) or for
    that ``results/`` folder itself. The folder must exist (nothing is created)."""
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise DataFolderError(f"result folder {folder} does not exist")
    if (folder / RESULTS_FOLDER).is_dir():
        cache_path = folder
    elif folder.name == RESULTS_FOLDER:
        cache_path = folder.parent
    elif any(folder.glob("*/*/model_meta.json")) or any(folder.glob("*/*/experiments/*/model_meta.json")):
        raise DataFolderError(
            f"{folder}: holds MTEB results but is not named {RESULTS_FOLDER!r}; mteb reads "
            f"<output>/{RESULTS_FOLDER}/<model>/<revision>/<Task>.json: give the output folder, or the "
            f"{RESULTS_FOLDER}/ folder itself"
        )
    else:
        cache_path = folder  # no results here: the caller reports that, naming <folder>/results
    from mteb.cache import ResultCache  # heavy: MTEB

    return ResultCache(cache_path)


def task_result_paths(cache: ResultCache) -> list[Path]:
    """Every task result file of a local ``ResultCache`` (experiments included), in a stable
    order: by model and revision folder, the default run before its experiments.

    A result directly in ``<model>/<revision>/`` counts when that folder holds
    ``model_meta.json`` or ``run_settings.jsonl`` (what MTEB writes with every result), so
    unrelated JSON files there are ignored. Files in ``experiments/<name>/`` always count
    (:func:`result_identity` then needs their ``model_meta.json``).
    """
    paths = cache.get_cache_paths(require_model_meta=False, include_remote=False, load_experiments="match_name")
    kept = [path for path in paths if _in_experiment(path) or _is_revision_folder(path.parent)]
    return sorted(kept, key=_path_order)


def _in_experiment(path: Path) -> bool:
    return path.parent.parent.name == EXPERIMENTS_FOLDER


def _is_revision_folder(folder: Path) -> bool:
    return (folder / "model_meta.json").is_file() or (folder / "run_settings.jsonl").is_file()


def _path_order(path: Path) -> tuple[str, str, str]:
    if _in_experiment(path):
        return (str(path.parents[2]), path.parent.name, path.name)
    return (str(path.parent), "", path.name)


@dataclass(frozen=True)
class ResultIdentity:
    """Which model run a result file belongs to, as its folder's ``model_meta.json`` says."""

    model: str  # MTEB model name, e.g. "flow_plugin/minilm-l6-flow"
    revision: str
    experiment: str | None  # MTEB experiment name (its folder under experiments/), None for defaults
    experiment_kwargs: dict[str, Any] = field(default_factory=dict)
    model_meta: ModelMeta | None = None  # None when the folder has no model_meta.json


def result_identity(path: Path) -> ResultIdentity:
    """The model run of the result file ``path``, from the ``model_meta.json`` next to it
    (read as mteb's ``ModelMeta``, unvalidated like mteb's ``ResultCache`` does, so metadata
    written by other mteb versions still reads). Without that file the folder names say it:
    ``<model>/<revision>/``; an experiment folder must have one."""
    folder = path.parent
    meta_path = folder / "model_meta.json"
    in_experiment = _in_experiment(path)
    revision_folder = folder.parent.parent if in_experiment else folder
    if not meta_path.is_file():
        if in_experiment:
            raise DataFolderError(f"{meta_path}: missing; an experiment folder needs it to say which kwargs were used")
        return ResultIdentity(revision_folder.parent.name.replace("__", "/"), revision_folder.name, None)
    data = read_json(meta_path, "model_meta.json")
    if not isinstance(data, dict):
        raise DataFolderError(f"{meta_path}: model_meta.json must hold a JSON object, got {type(data).__name__}")
    for key in ("name", "revision"):
        if data.get(key) is not None and not isinstance(data[key], str):
            raise DataFolderError(f"{meta_path}: key {key!r} must be a string, got {data[key]!r}")
    kwargs = data.get("experiment_kwargs") or {}
    if not isinstance(kwargs, dict):
        raise DataFolderError(f"{meta_path}: 'experiment_kwargs' must be an object or null, got {kwargs!r}")
    from mteb.models import ModelMeta  # heavy: MTEB

    meta = ModelMeta.model_construct(**data)
    kwargs = dict(kwargs)
    name = meta.name or revision_folder.parent.name.replace("__", "/")
    calibrator = kwargs.pop("calibrator", None)
    if calibrator is not None:  # a calibrated model's results sit under its base: its own name says which
        name = spell_model(name, str(calibrator))
        experiment = experiment_name(name, kwargs)
    else:  # mteb names an experiment's folder after its kwargs; the folder is what is on disk
        experiment = folder.name if in_experiment else meta.experiment_name
    return ResultIdentity(model=name, revision=meta.revision or revision_folder.name, experiment=experiment,
                          experiment_kwargs=kwargs, model_meta=meta)


def experiment_name(model: str, experiment_kwargs: dict[str, Any]) -> str | None:
    """MTEB's experiment name (its folder under ``experiments/``) of a model run with these experiment kwargs; None
    for none."""
    from mteb.models import ModelMeta  # heavy: MTEB

    return ModelMeta.model_construct(name=model, experiment_kwargs=experiment_kwargs or None).experiment_name


def load_task_result(path: Path) -> TaskResult:
    """mteb's ``TaskResult`` of one result file (the current format, as mteb >= 1.11 writes
    it). Errors are :class:`DataFolderError` naming the file and what is wrong with it."""
    from mteb.results import TaskResult  # heavy: MTEB

    try:
        return TaskResult.from_disk(path, load_historic_data=False)
    except (OSError, UnicodeDecodeError) as error:
        raise DataFolderError(f"{path}: cannot read MTEB task result: {error}") from None
    except ValueError as error:
        # pydantic's error is the ValueError's cause in newer mteb releases and only its context in older ones
        cause = error.__cause__ or error.__context__
        if not isinstance(cause, ValidationError):
            raise DataFolderError(f"{path}: malformed MTEB task result: {error}") from None
        problems = cause.errors(include_url=False)
        if problems and problems[0]["type"] == "json_invalid":
            if not str(problems[0].get("input", "")).strip():
                raise DataFolderError(f"{path}: MTEB task result is empty (an interrupted write?)") from None
            raise DataFolderError(f"{path}: MTEB task result is not valid JSON: {problems[0]['msg']}") from None

        phrases = describe_validation_error(cause, lambda location: list(TaskResult.model_fields))
        raise DataFolderError(f"{path}: malformed MTEB task result: {'; '.join(phrases)}") from None


