"""Recovery of an output folder: result files no run should reuse are renamed aside, never deleted.

MTEB writes its result files non-atomically, so a killed run (or a full disk) can leave a truncated file that
MTEB's own resume then fails to read: :func:`set_aside_if_truncated`. A result computed from other data
(:func:`set_aside_stale_results`), one whose run record was never written (:func:`set_aside_unrecorded_results`)
and those of an evaluation that failed (:func:`set_aside_partial_results`) are set aside too, and
:func:`repair_model_meta` rewrites a damaged ``model_meta.json``. Each renamed file keeps its name with a label
and the UTC time (``STS12.json.corrupt-20261127T060000Z``) for a look.
"""

from __future__ import annotations

import datetime
import functools
import json
import logging
import warnings
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from flow_plugin._io import atomic_write_text
from flow_plugin.results.files import model_folder
from flow_plugin.results.runs import recorded_run_keys, result_run_key, runs_file_for

logger = logging.getLogger(__name__)


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


def repair_model_meta(output_folder: Path, meta: Any, tasks: Sequence[Any]) -> list[Path]:
    """Rewrite (atomically) the ``model_meta.json`` of ``meta``'s result folder when a run was
    killed (or the disk was full) while MTEB wrote it in place (MTEB writes it after each task result, and does not
    rewrite it for results it reuses): an empty or damaged file would hide the finished results.
    Returns the files rewritten."""
    from mteb.cache import ResultCache  # heavy: MTEB

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


def _set_aside_each(output_folder: Path, meta: Any, tasks: Sequence[Any], label: str,
                    why: Callable[[Path, Any], str | None]) -> list[str]:
    """Rename each existing result of ``meta``'s model run on ``tasks`` for which ``why(path, task)`` gives a
    reason to ``<Task>.json.<label>-<time>``, warning with that reason; returns one line per file."""
    from mteb.cache import ResultCache  # heavy: MTEB

    cache = ResultCache(output_folder)
    notes = []
    for task in tasks:
        path = cache.get_task_result_path(task.metadata.name, meta)
        reason = why(path, task) if path.is_file() else None
        if reason is None:
            continue
        target = set_aside(path, label)
        notes.append(f"{path} {reason}: kept as {target.name}, recomputing")
        logger.warning("%s", notes[-1])
    return notes


def set_aside_stale_results(output_folder: Path, meta: Any, tasks: Sequence[Any]) -> list[str]:
    """Rename each existing result of ``meta``'s model (name, revision, experiment) whose
    ``dataset_revision`` is not the task's current one to ``<Task>.json.stale-<time>``, so
    MTEB recomputes it instead of reusing a score of other data. Returns one line per file."""

    return _set_aside_each(output_folder, meta, tasks, "stale", _other_data)


def _other_data(path: Path, task: Any) -> str | None:
    """Why the result at ``path`` is not a result of ``task``'s data now, or None."""
    try:
        recorded = json.loads(path.read_text(encoding="utf-8")).get("dataset_revision")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        return None  # unreadable: quarantine_truncated_results deals with it
    current = current_data_revision(task)
    if current is None or recorded == current:
        return None
    return f"was computed from other data (dataset_revision {recorded}, now {current})"


def set_aside_if_stale(path: Path, task: Any) -> Path | None:
    """Set the result at ``path`` aside as ``<Task>.json.stale-<time>`` when it was computed from other data than
    ``task`` reads now (the check MTEB's own skip lacks, :func:`~flow_plugin.integrations.mteb.compat.
    check_results_before_loading`), warning with the reason; returns the new path."""
    if not hasattr(task, "data_revision"):  # MTEB's own tasks: MTEB's rule for their pinned revisions stands
        return None
    reason = _other_data(path, task) if path.is_file() else None
    if reason is None:
        return None
    target = set_aside(path, "stale")
    message = f"{path} {reason}: kept as {target.name}, recomputing"
    warnings.warn(message, UserWarning, stacklevel=2)  # what `mteb run` shows
    logger.warning("%s", message)
    return target


def set_aside_unrecorded_results(output_folder: Path, meta: Any, tasks: Sequence[Any]) -> list[str]:
    """Rename each existing result of ``meta``'s model run that has no line in the output
    folder's ``flow-plugin-runs.jsonl`` (its run was killed between writing the result and its
    record, or the disk was full) to ``<Task>.json.unrecorded-<time>``, so MTEB recomputes it
    instead of reusing a result whose hardware nobody knows. Returns one line per file."""
    recorded = functools.cache(lambda: recorded_run_keys(output_folder))  # read once, only if a result is there

    def no_record(path: Path, task: Any) -> str | None:
        if result_run_key(path) in recorded():
            return None
        return (f"has no run record in {runs_file_for(output_folder)} (its run was killed before the record was "
                "written, or the disk was full)")

    return _set_aside_each(output_folder, meta, tasks, "unrecorded", no_record)


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
