"""MTEB result folders: which result files a run wrote, interrupted writes, where runs ran,
and reading result folders through mteb's own classes.

MTEB writes ``<output>/results/<model>/<revision>/[experiments/<name>/]<Task>.json``
non-atomically, so a killed run (or a full disk) can leave a truncated file that MTEB's own
resume then fails to read. Before each run, :func:`quarantine_truncated_results` renames such
files aside so the task is recomputed. After it, :func:`record_runs` appends the hardware of every
newly written result to ``<output>/flow-plugin-runs.jsonl``, which the leaderboard reads.

A result counts as done only with its run record (:func:`run_key` ties the two): a result
whose record was never written (the run was killed between the two writes, or the disk was
full) is set aside by :func:`set_aside_unrecorded_results` and recomputed, and a result
whose record cannot be written is set aside at once (:func:`record_runs`).

Reading is mteb's: :func:`open_result_cache` and :func:`task_result_paths` list a folder's
result files with ``mteb.cache.ResultCache``, :func:`load_task_result` parses one with
``mteb.results.TaskResult`` and :func:`result_identity` reads its ``model_meta.json`` as an
``mteb.models.ModelMeta``; on top, every error is a :class:`~flow_plugin.errors.DataFolderError`
naming the file. This module imports mteb only inside those functions.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flow_plugin._io import atomic_write_text, file_lock, read_json, read_json_lines, remove_stale_temporaries
from flow_plugin.errors import DataFolderError, OutputError

if TYPE_CHECKING:  # pragma: no cover
    from mteb.cache import ResultCache
    from mteb.models import ModelMeta
    from mteb.results import TaskResult

logger = logging.getLogger(__name__)

#: Sidecar of an output folder (next to ``results/``): one JSON line per computed task
#: result, with the hardware it ran on (written by ``flow-plugin eval`` and ``bench``).
RUNS_FILE = "flow-plugin-runs.jsonl"
RUNS_FORMAT = "flow-plugin-runs"
#: lock file next to the runs file: processes that append to one output folder at once
#: (``flow-plugin sweep`` jobs of several backbones) take turns
RUNS_LOCK_FILE = ".flow-plugin-runs.lock"
RESULTS_FOLDER = "results"  # mteb's ResultCache keeps results in <cache>/results/
EXPERIMENTS_FOLDER = "experiments"  # MTEB's folder for results of models loaded with kwargs


def model_folder(output_folder: Path, model: str) -> Path:
    """Where MTEB keeps the results of ``model`` in an output folder (MTEB's own folder name for
    it, ``ModelMeta.model_name_as_path``).

    Examples
    --------
    >>> model_folder(Path("out"), "flow_plugin/minilm-l6").as_posix()
    'out/results/flow_plugin__minilm-l6'
    """
    from mteb.models import ModelMeta

    return output_folder / RESULTS_FOLDER / ModelMeta.model_construct(name=model).model_name_as_path()


def result_path(output_folder: Path, meta: ModelMeta, task_name: str) -> Path:
    """Where MTEB's ``ResultCache`` files the result of ``meta`` (its name, revision and
    experiment) on ``task_name`` under ``output_folder``; nothing is created (dry runs).

    >>> import mteb
    >>> meta = mteb.get_model_meta("flow_plugin/minilm-l6-sn")
    >>> model, revision, *experiment, name = result_path(Path("out"), meta, "SentEvalSTS13").relative_to("out").parts[1:]
    >>> model, revision == meta.revision, revision.startswith("8b3219a92973c328a8e22fadcfa821b5dc75636a-"), experiment, name
    ('flow_plugin__minilm-l6', True, True, ['experiments', 'calibrator_sn'], 'SentEvalSTS13.json')
    """
    from flow_plugin.integrations.mteb.compat import task_result_path

    return task_result_path(output_folder, meta, task_name)


def result_files(output_folder: Path, model: str, task: str) -> dict[Path, tuple[int, int]]:
    """Every ``<task>.json`` of a model (any revision; a model name, or the spelling of a calibrated one, whose
    results sit in its base's folder under ``experiments/``) -> (mtime_ns, size). A base model's name finds
    every experiment in its folder."""
    from flow_plugin.catalog.registry import MODEL_PREFIX, spelled_model

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


def set_aside(path: Path, label: str) -> Path:
    """Rename the result file ``path`` to ``<name>.<label>-<UTC time>`` (kept for a look, never
    read as a result again); returns the new path."""
    stamp = datetime.datetime.now(tz=datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    target = path.with_name(f"{path.name}.{label}-{stamp}")
    number = 1
    while target.exists():  # set aside twice within a second: keep both
        number += 1
        target = path.with_name(f"{path.name}.{label}-{stamp}-{number}")
    path.rename(target)
    return target


def set_aside_if_truncated(path: Path) -> Path | None:
    """Rename the result file ``path`` aside when it is not valid JSON (a run killed while MTEB wrote it, or a
    disk that was full), with a warning, so MTEB recomputes the task instead of failing to read it; returns the
    new name (None: the file is valid JSON, or absent)."""
    try:
        json.loads(path.read_text(encoding="utf-8"))
        return None
    except FileNotFoundError:
        return None
    except (UnicodeDecodeError, json.JSONDecodeError):
        pass
    target = set_aside(path, "corrupt")
    logger.warning("result file %s is not valid JSON (cut short: a killed run or a full disk): renamed to %s; the "
                   "task will be recomputed", path, target.name)
    return target


def quarantine_truncated_results(output_folder: Path, models: Sequence[str], tasks: Sequence[str]) -> list[Path]:
    """:func:`set_aside_if_truncated` for every result file of ``models`` on ``tasks``; returns the new names."""
    moved = []
    for model in models:
        folder = model_folder(output_folder, model)
        for task in tasks:
            for path in sorted(folder.rglob(f"{task}.json")) if folder.is_dir() else []:  # every experiment's
                target = set_aside_if_truncated(path)
                if target is not None:
                    moved.append(target)
    return moved


def prepare_result_folder(output_folder: Path, meta: Any, tasks: Sequence[Any], overwrite: bool) -> None:
    """Before ``meta`` is evaluated on ``tasks``: set aside its truncated results and repair its
    ``model_meta.json``; unless ``overwrite``, set aside its stale and unrecorded results too."""
    quarantine_truncated_results(output_folder, [meta.name], [task.metadata.name for task in tasks])
    repair_model_meta(output_folder, meta, tasks)
    if not overwrite:
        set_aside_stale_results(output_folder, meta, tasks)
        set_aside_unrecorded_results(output_folder, meta, tasks)


def repair_model_meta(output_folder: Path, meta: Any, tasks: Sequence[Any]) -> list[Path]:
    """Rewrite (atomically) the ``model_meta.json`` of ``meta``'s result folder when a run was
    killed (or the disk was full) while MTEB wrote it in place (MTEB writes it after each task result, and does not
    rewrite it for results it reuses): an empty or damaged file would hide the finished results.
    Returns the files rewritten."""
    from mteb.cache import ResultCache

    cache = ResultCache(output_folder)
    folders = {cache.get_task_result_path(task.metadata.name, meta).parent for task in tasks}
    repaired = []
    for folder in sorted(folders):
        path = folder / "model_meta.json"
        if not path.is_file():
            continue
        try:
            json.loads(path.read_text(encoding="utf-8"))
            continue
        except (UnicodeDecodeError, json.JSONDecodeError):
            pass
        atomic_write_text(path, json.dumps(meta.to_dict(), default=str, indent=4))
        logger.warning("%s was damaged (a run killed, or a full disk, while MTEB wrote it): rewritten", path)
        repaired.append(path)
    return repaired


def current_data_revision(task: Any) -> str | None:
    """The ``dataset_revision`` a result of ``task`` computed now would carry: our offline tasks
    hash their files; MTEB's own tasks name their pinned dataset revision."""
    if hasattr(task, "data_revision"):
        return task.data_revision()
    return getattr(task.metadata, "revision", None)


def set_aside_stale_results(output_folder: Path, meta: Any, tasks: Sequence[Any]) -> list[str]:
    """Rename each existing result of ``meta``'s model (name, revision, experiment) whose
    ``dataset_revision`` is not the task's current one to ``<Task>.json.stale-<time>``, so
    MTEB recomputes it instead of reusing a score of other data. Returns one line per file."""
    from mteb.cache import ResultCache

    cache = ResultCache(output_folder)
    notes = []
    for task in tasks:
        path = cache.get_task_result_path(task.metadata.name, meta)
        if not path.is_file():
            continue
        try:
            recorded = json.loads(path.read_text(encoding="utf-8")).get("dataset_revision")
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError):
            continue  # unreadable: quarantine_truncated_results deals with it
        current = current_data_revision(task)
        if current is None or recorded == current:
            continue
        target = set_aside(path, "stale")
        notes.append(f"{path} was computed from other data (dataset_revision {recorded}, now {current}): "
                     f"kept as {target.name}, recomputing")
        logger.warning("%s", notes[-1])
    return notes


def set_aside_unrecorded_results(output_folder: Path, meta: Any, tasks: Sequence[Any]) -> list[str]:
    """Rename each existing result of ``meta``'s model run that has no line in the output
    folder's ``flow-plugin-runs.jsonl`` (its run was killed between writing the result and its
    record, or the disk was full) to ``<Task>.json.unrecorded-<time>``, so MTEB recomputes it
    instead of reusing a result whose hardware nobody knows. Returns one line per file."""
    from mteb.cache import ResultCache

    cache = ResultCache(output_folder)
    recorded: set[tuple[Any, ...]] | None = None
    notes = []
    for task in tasks:
        path = cache.get_task_result_path(task.metadata.name, meta)
        if not path.is_file():
            continue
        if recorded is None:
            recorded = recorded_run_keys(output_folder)
        if result_run_key(path) in recorded:
            continue
        target = set_aside(path, "unrecorded")
        notes.append(f"{path} has no run record in {runs_file_for(output_folder)} (its run was killed before the "
                     f"record was written, or the disk was full): kept as {target.name}, recomputing")
        logger.warning("%s", notes[-1])
    return notes


def run_key(model: str | None, revision: str | None, experiment: str | None, task: str | None,
            date: float | None) -> tuple[Any, ...]:
    """What ties a run record to a result: model run, task and the result's date (to the ms).

    Examples
    --------
    >>> run_key("m", "r", None, "STS12", 1795368982.195808)
    ('m', 'r', None, 'STS12', 1795368982.196)
    """
    return (model, revision, experiment, task, None if date is None else round(float(date), 3))


def record_run_key(record: dict[str, Any]) -> tuple[Any, ...]:
    """The :func:`run_key` of a ``flow-plugin-runs.jsonl`` record."""
    return run_key(record.get("model"), record.get("revision"), record.get("experiment"), record.get("task"),
                   record.get("result_date"))


def _result_fields(path: Path) -> dict[str, Any]:
    """The fields of a run record that identify the result file ``path``: the model's identity
    from its ``model_meta.json`` (mteb's ``ModelMeta``), the result's date from the file (mteb's
    ``TaskResult``)."""
    identity = result_identity(path)
    result = load_task_result(path)
    return {
        "model": identity.model,
        "revision": identity.revision,
        "experiment": identity.experiment,
        "task": path.stem,  # the leaderboard's key too (it checks the file's task_name matches)
        "result_date": result.date.timestamp() if result.date is not None else None,
    }


def result_run_key(path: Path) -> tuple[Any, ...] | None:
    """The :func:`run_key` of the result file ``path``; ``None`` when it cannot be read as one."""
    try:
        return record_run_key(_result_fields(path))
    except DataFolderError:
        return None


def recorded_run_keys(output_folder: str | os.PathLike[str]) -> set[tuple[Any, ...]]:
    """The run keys of every record in the output folder's ``flow-plugin-runs.jsonl``."""
    return {record_run_key(record) for record in read_run_records(runs_file_for(output_folder))}


def record_runs(output: Path, paths: Sequence[Path], hardware: dict[str, Any], settings: dict[str, Any]) -> None:
    """One ``flow-plugin-runs.jsonl`` line for each result file just written (all in one atomic
    append): its identity (:func:`result_run_key`'s fields), and the hardware and settings it
    ran with. When the lines cannot be written (a full disk ...), those results are set aside
    (``<Task>.json.unrecorded-<time>``) and the error, naming the cause, says so: a result is
    kept only with its record."""
    if not paths:
        return
    recorded = datetime.datetime.now(tz=datetime.timezone.utc).isoformat(timespec="seconds")
    records = [{**_result_fields(path), "recorded": recorded, "hardware": hardware, "settings": settings}
               for path in paths]
    try:
        append_run_records(output, records)
    except OSError as error:
        moved = set_aside_partial_results(paths)
        if not moved:
            raise
        names = ", ".join(f"{path.parent / path.name.split('.unrecorded-')[0]} as {path.name}" for path in moved)
        failure = OutputError(f"{error}; so the new result(s) were set aside ({names}): a result is kept only "
                              "with its run record")
        failure.errno = error.errno
        raise failure from error


def set_aside_partial_results(paths: Iterable[Path]) -> list[Path]:
    """After a failed or interrupted evaluation: set aside the result files it (re)wrote, which
    have no run record (a partial or cut-short file is no result), so no rerun reuses them or
    mistakes a full disk for a killed run. Returns the new paths."""
    moved = []
    for path in paths:
        try:
            moved.append(set_aside(path, "unrecorded"))
        except OSError:
            continue  # gone, or the folder cannot be changed: the next run sets it aside
    return moved


# ------------------------------------------------------------------------- reading result folders (mteb)
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
    elif any(folder.glob("*/*/model_meta.json")):
        raise DataFolderError(
            f"{folder}: holds MTEB results but is not named {RESULTS_FOLDER!r}; mteb reads "
            f"<output>/{RESULTS_FOLDER}/<model>/<revision>/<Task>.json: give the output folder, or the "
            f"{RESULTS_FOLDER}/ folder itself"
        )
    else:
        cache_path = folder  # no results here: the caller reports that, naming <folder>/results
    from mteb.cache import ResultCache

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
    from mteb.models import ModelMeta

    from flow_plugin.catalog.registry import spell_model

    meta = ModelMeta.model_construct(**data)
    kwargs = dict(kwargs)
    name = meta.name or revision_folder.parent.name.replace("__", "/")
    calibrator = kwargs.pop("calibrator", None)
    if calibrator is not None:  # a calibrated model's results sit under its base: its own name says which
        name = spell_model(name, str(calibrator))
        experiment = ModelMeta.model_construct(name=name, experiment_kwargs=kwargs or None).experiment_name
    else:  # mteb names an experiment's folder after its kwargs; the folder is what is on disk
        experiment = folder.name if in_experiment else meta.experiment_name
    return ResultIdentity(model=name, revision=meta.revision or revision_folder.name, experiment=experiment,
                          experiment_kwargs=kwargs, model_meta=meta)


def load_task_result(path: Path) -> TaskResult:
    """mteb's ``TaskResult`` of one result file (the current format, as mteb >= 1.11 writes
    it). Errors are :class:`DataFolderError` naming the file and what is wrong with it."""
    from mteb.results import TaskResult
    from pydantic import ValidationError

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
        from flow_plugin._validation_errors import describe_validation_error

        phrases = describe_validation_error(cause, lambda location: list(TaskResult.model_fields))
        raise DataFolderError(f"{path}: malformed MTEB task result: {'; '.join(phrases)}") from None


def runs_file_for(output_folder: str | os.PathLike[str]) -> Path:
    """The run-records file of an output folder.

    Examples
    --------
    >>> runs_file_for("out").as_posix()
    'out/flow-plugin-runs.jsonl'
    """
    return Path(output_folder).expanduser() / RUNS_FILE


def read_run_records(path: Path) -> list[dict[str, Any]]:
    """The records of a ``flow-plugin-runs.jsonl`` file ([] when there is none); a line that
    is not a record is an error naming the file and the line."""
    if not path.is_file():
        return []
    records = []
    for number, record in read_json_lines(path, "run records"):
        if not isinstance(record, dict) or record.get("format") != RUNS_FORMAT:
            raise DataFolderError(f"{path}: line {number} is not a {RUNS_FORMAT} record")
        records.append(record)
    return records


def append_run_records(output_folder: str | os.PathLike[str], records: Iterable[dict[str, Any]]) -> Path:
    """Add records (model, revision, experiment, task, result_date, hardware, ...) to the
    output folder's ``flow-plugin-runs.jsonl``, atomically (the old lines are kept). Writers
    take turns through a lock file, so concurrent processes never drop each other's lines; the
    temporary files of writers killed mid-write are removed under it."""
    path = runs_file_for(output_folder)
    new = "".join(json.dumps({"format": RUNS_FORMAT, **record}, sort_keys=True) + "\n" for record in records)
    with file_lock(path.parent / RUNS_LOCK_FILE):
        for stale in remove_stale_temporaries(path):  # left by a writer killed mid-write; none is live now
            logger.info("removed %s, left by a run killed while it wrote %s", stale, path.name)
        old = path.read_text(encoding="utf-8") if path.is_file() else ""
        if old and not old.endswith("\n"):
            old += "\n"
        atomic_write_text(path, old + new)
    return path
