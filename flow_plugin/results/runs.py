"""Run records: ``<output>/flow-plugin-runs.jsonl``, one JSON line per computed task result with the hardware
and settings it ran with (the leaderboard reads them), tied to its result file by :func:`run_key`.

A result counts as done only with its record (:mod:`.recovery` sets aside those without). Writers append
atomically and take turns through a lock file next to it, so processes writing one output folder at once
(``flow-plugin sweep`` jobs) never drop each other's lines.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from flow_plugin._io import atomic_write_text, file_lock, read_json_lines, remove_stale_temporaries
from flow_plugin.errors import DataFolderError
from flow_plugin.results.files import load_task_result, result_identity

logger = logging.getLogger(__name__)

#: Sidecar of an output folder (next to ``results/``): one JSON line per computed task
#: result, with the hardware it ran on (written by ``flow-plugin eval`` and ``bench``).
RUNS_FILE = "flow-plugin-runs.jsonl"
RUNS_FORMAT = "flow-plugin-runs"
#: lock file next to the runs file: processes that append to one output folder at once
#: (``flow-plugin sweep`` jobs of several backbones) take turns
RUNS_LOCK_FILE = ".flow-plugin-runs.lock"


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


def result_fields(path: Path) -> dict[str, Any]:
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
        return record_run_key(result_fields(path))
    except DataFolderError:
        return None


def recorded_run_keys(output_folder: str | os.PathLike[str]) -> set[tuple[Any, ...]]:
    """The run keys of every record in the output folder's ``flow-plugin-runs.jsonl``."""
    return {record_run_key(record) for record in read_run_records(runs_file_for(output_folder))}


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
