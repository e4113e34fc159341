"""MTEB result folders: which result files a run wrote, interrupted writes, and where runs ran.

MTEB writes ``<output>/results/<model>/<revision>/<Task>.json`` non-atomically, so a killed
run can leave a truncated file that MTEB's own resume then fails to read. Before each run,
:func:`quarantine_truncated_results` renames such files aside so the task is recomputed.
After it, :func:`record_run` appends the hardware of every newly written result to
``<output>/flow-plugin-runs.jsonl``, which the leaderboard reads.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flow_plugin._io import atomic_write_text, read_json_lines
from flow_plugin.errors import DataFolderError

logger = logging.getLogger(__name__)

#: Sidecar of an output folder (next to ``results/``): one JSON line per computed task
#: result, with the hardware it ran on (written by ``flow-plugin eval`` and ``bench``).
RUNS_FILE = "flow-plugin-runs.jsonl"
RUNS_FORMAT = "flow-plugin-runs"
EXPERIMENTS_FOLDER = "experiments"  # MTEB's folder for results of models loaded with kwargs


def model_folder(output_folder: Path, model: str) -> Path:
    return output_folder / "results" / model.replace("/", "__").replace(" ", "_")


def result_files(output_folder: Path, model: str, task: str) -> dict[Path, tuple[int, int]]:
    """Every ``<task>.json`` of ``model`` (any revision, any experiment) -> (mtime_ns, size)."""
    folder = model_folder(output_folder, model)
    if not folder.is_dir():
        return {}
    found = {}
    for path in folder.rglob(f"{task}.json"):
        stat = path.stat()
        found[path] = (stat.st_mtime_ns, stat.st_size)
    return found


def quarantine_truncated_results(output_folder: Path, models: Sequence[str], tasks: Sequence[str]) -> list[Path]:
    """Rename result files that are not valid JSON (a run killed while MTEB wrote them), so
    MTEB recomputes those tasks instead of failing to read them. Returns the new names."""
    moved = []
    stamp = datetime.datetime.now(tz=datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    for model in models:
        for task in tasks:
            for path in result_files(output_folder, model, task):
                try:
                    json.loads(path.read_text(encoding="utf-8"))
                    continue
                except (UnicodeDecodeError, json.JSONDecodeError):
                    pass
                target = path.with_name(f"{path.name}.corrupt-{stamp}")
                path.rename(target)
                logger.warning("result file %s is not valid JSON (interrupted write?): renamed to %s; "
                               "the task will be recomputed", path, target.name)
                moved.append(target)
    return moved


def record_run(output: Path, path: Path, hardware: dict[str, Any], settings: dict[str, Any]) -> None:
    """One ``flow-plugin-runs.jsonl`` line for the result file just written."""
    location = next((loc for loc in scan_results(output) if loc.path == path), None)
    if location is None:  # pragma: no cover -- MTEB always writes model_meta.json with results
        logger.warning("cannot identify the result file %s; its hardware is not recorded", path)
        return
    try:
        date = json.loads(path.read_text(encoding="utf-8")).get("date")
    except (OSError, ValueError):
        date = None
    append_run_records(output, [{
        "model": location.model,
        "revision": location.revision,
        "experiment": location.experiment,
        "task": location.task,
        "result_date": date,
        "recorded": datetime.datetime.now(tz=datetime.timezone.utc).isoformat(timespec="seconds"),
        "hardware": hardware,
        "settings": settings,
    }])


# ------------------------------------------------------------------------- reading result folders
def _read_json(path: Path, what: str) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise DataFolderError(f"{path}: cannot read {what}: {error}") from None
    if not text.strip():
        raise DataFolderError(f"{path}: {what} is empty (an interrupted write?)")
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise DataFolderError(f"{path}: {what} is not valid JSON: {error}") from None


def experiment_name(kwargs: dict[str, Any] | None) -> str | None:
    """A readable, stable name for loader kwargs (MTEB names its experiment folders itself)."""
    if not kwargs:
        return None
    return ",".join(f"{key}={json.dumps(kwargs[key], sort_keys=True)}" for key in sorted(kwargs))


@dataclass(frozen=True)
class ResultLocation:
    """One task result file and the model identity its folder gives it."""

    path: Path
    model: str
    revision: str
    experiment: str | None
    experiment_kwargs: dict[str, Any]
    model_meta: dict[str, Any]
    task: str  # the file's stem; the file's own task_name must match it

    @property
    def row_id(self) -> str:
        return row_id(self.model, self.revision, self.experiment)


def row_id(model: str, revision: str, experiment: str | None) -> str:
    return f"{model}@{revision}" + (f" [{experiment}]" if experiment else "")


def results_root(folder: str | os.PathLike[str]) -> Path:
    """``<folder>/results`` when it exists (an MTEB output folder), else ``<folder>`` itself."""
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise DataFolderError(f"result folder {folder} does not exist")
    return folder / "results" if (folder / "results").is_dir() else folder


def _is_revision_folder(folder: Path) -> bool:
    # what MTEB (>= 1.12) writes next to every result: model_meta.json (and run_settings.jsonl)
    return (folder / "model_meta.json").is_file() or (folder / "run_settings.jsonl").is_file()


def _model_identity(revision_folder: Path, experiment_folder: Path | None) -> tuple[str, str, dict[str, Any], dict[str, Any]]:
    """(model name, revision, experiment kwargs, model_meta) of a result folder."""
    meta_folder = experiment_folder or revision_folder
    meta_path = meta_folder / "model_meta.json"
    meta: dict[str, Any] = {}
    if meta_path.is_file():
        meta = _read_json(meta_path, "model_meta.json")
        if not isinstance(meta, dict):
            raise DataFolderError(f"{meta_path}: model_meta.json must hold a JSON object, got {type(meta).__name__}")
        for key in ("name", "revision"):
            if meta.get(key) is not None and not isinstance(meta[key], str):
                raise DataFolderError(f"{meta_path}: key {key!r} must be a string, got {meta[key]!r}")
        kwargs = meta.get("experiment_kwargs") or {}
        if not isinstance(kwargs, dict):
            raise DataFolderError(f"{meta_path}: 'experiment_kwargs' must be an object or null, got {kwargs!r}")
    elif experiment_folder is not None:
        raise DataFolderError(f"{meta_path}: missing; an experiment folder needs it to say which kwargs were used")
    model = meta.get("name") or revision_folder.parent.name.replace("__", "/")
    revision = meta.get("revision") or revision_folder.name
    return model, revision, dict(meta.get("experiment_kwargs") or {}), meta


def scan_results(folder: str | os.PathLike[str]) -> list[ResultLocation]:
    """Every task result file under an MTEB output or results folder (not yet parsed).

    A ``<model>/<revision>`` folder counts when it holds ``model_meta.json`` or
    ``run_settings.jsonl`` (what MTEB writes with every result), so unrelated JSON files
    (an embedding cache, say) are ignored.
    """
    root = results_root(folder)
    found: list[ResultLocation] = []
    for revision_folder in sorted(p for p in root.glob("*/*") if p.is_dir()):
        candidates: list[tuple[Path, Path | None]] = []
        if _is_revision_folder(revision_folder):
            candidates.append((revision_folder, None))
        experiments = revision_folder / EXPERIMENTS_FOLDER
        if experiments.is_dir():
            candidates.extend((folder, folder) for folder in sorted(experiments.iterdir()) if folder.is_dir())
        for results_folder, experiment_folder in candidates:
            files = sorted(p for p in results_folder.glob("*.json") if p.name != "model_meta.json")
            if not files:
                continue
            model, revision, kwargs, meta = _model_identity(revision_folder, experiment_folder)
            experiment = experiment_folder.name if experiment_folder is not None else experiment_name(kwargs)
            for path in files:
                found.append(ResultLocation(path, model, revision, experiment, kwargs, meta, path.stem))
    return found


def runs_file_for(output_folder: str | os.PathLike[str]) -> Path:
    return Path(output_folder).expanduser() / RUNS_FILE


def read_run_records(path: Path) -> list[dict[str, Any]]:
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
    output folder's ``flow-plugin-runs.jsonl``, atomically (the old lines are kept)."""
    path = runs_file_for(output_folder)
    old = path.read_text(encoding="utf-8") if path.is_file() else ""
    if old and not old.endswith("\n"):
        old += "\n"
    new = "".join(json.dumps({"format": RUNS_FORMAT, **record}, sort_keys=True) + "\n" for record in records)
    atomic_write_text(path, old + new)
    return path
