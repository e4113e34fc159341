"""``flow-plugin leaderboard``: MTEB result folders -> leaderboard JSON, Markdown and PNG.

Reads the task result JSON files that ``mteb run`` / ``mteb.evaluate`` / ``flow-plugin
eval`` / ``flow-plugin bench`` write, in either layout::

    <dir>/results/<model>/<revision>/<Task>.json                       (an output folder)
    <dir>/<model>/<revision>/<Task>.json                               (a results folder)
    ...<model>/<revision>/experiments/<experiment>/<Task>.json         (models run with kwargs)

and merges them into ``NAME.json`` (schema: :data:`SCHEMA`), then renders ``NAME.md`` and
``NAME.png`` next to it. Merging never drops a row; a score that disagrees with the one
already recorded is an error (or, with ``replace=True``, is replaced and reported).
All three files are written atomically (see :mod:`flow_plugin._io`).

This module imports only the standard library at module level (matplotlib only when the
chart is drawn, the registry only when a ``flow_plugin/...`` row is described).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import json
import logging
import math
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flow_plugin._io import atomic_write_bytes, atomic_write_text, read_json_lines
from flow_plugin.errors import DataFolderError, LeaderboardConflictError, LeaderboardError
from flow_plugin.catalog.tasks import OFFLINE_TASKS
from flow_plugin.integrations.mteb.results import (
    _read_json,
    ResultLocation,
    results_root,
    scan_results,
    row_id,
    read_run_records,
    RUNS_FILE,
)

logger = logging.getLogger(__name__)

FORMAT = "flow-plugin-leaderboard"
FORMAT_VERSION = 1
#: Two scores of the same model and task are "the same" when they differ by at most this
#: many points: 1e-4 points = 1e-6 on MTEB's 0-1 scale, one unit of the last decimal it stores.
DEFAULT_TOLERANCE = 1e-4
_CALIBRATOR_ORDER = ("raw", "sn", "natsv", "sn-natsv", "whiten", "flow")
_NAMESPACE = "flow_plugin/"
_DECIMALS = 4  # points with 4 decimals = MTEB's 6 decimals on the 0-1 scale

SCHEMA = """\
Leaderboard JSON (format "flow-plugin-leaderboard", format_version 1)

Scores are in points: a correlation x 100 (Spearman 0.820441 -> 82.0441), kept with 4
decimals, which is every digit MTEB stores (6 decimals on its 0-1 scale).

{
  "format": "flow-plugin-leaderboard",
  "format_version": 1,
  "name": str,                   leaderboard name (default: the file's stem)
  "updated": str,                ISO 8601 UTC time of the last update that changed the content
  "generated_by": str,           "flow-plugin <version>"
  "scale": "points",             every score and delta below: correlation x 100
  "tolerance": float,            largest difference (points; default 0.0001, i.e. 1e-6 on
                                 MTEB's 0-1 scale) two results of the same model and task
                                 may have and still count as identical
  "tasks": [str, ...],           column order: the offline SentEval tasks first
                                 (SentEvalSTS12..16, SentEvalSTSBenchmark, SentEvalSICKR),
                                 then any other task alphabetically
  "rows": [                      one per model variant, sorted by backbone then calibrator
    {
      "id": str,                 "<model>@<revision>", plus " [<experiment>]" for a model
                                 run with extra loader kwargs; unique within the file
      "model": str,              MTEB model name, e.g. "flow_plugin/minilm-l6-flow"
      "revision": str,           model revision (the registry's pinned commit)
      "experiment": str | null,  MTEB experiment name (loader kwargs), null for defaults
      "experiment_kwargs": {..}, those kwargs ({} for defaults)
      "backbone": str,           registry backbone ("minilm-l6"), or the model name for
                                 models outside flow-plugin
      "backbone_model": str,     weights: hub id of the backbone (or MTEB's adapted_from)
      "calibrator": str,         raw | sn | natsv | sn-natsv | whiten | flow ("raw" for
                                 models outside flow-plugin unless their kwargs say otherwise)
      "calibrator_params": {..}, hyper-parameters beyond the calibrator's defaults
      "pooling": str | null,     e.g. "last-avg", "first-last-avg" (null when unknown)
      "max_seq_length": int | null,
      "fit_corpus": str | null,  sentences the calibrator was fitted on: "target" (all
                                 splits of the evaluated task, no labels), "inputs", or
                                 "file <path>"; null for raw / models outside flow-plugin
      "metadata_source": str,    "registry" (flow-plugin registry when the leaderboard was
                                 built) or "model_meta" (the result folder's model_meta.json)
      "scores": {                one entry per task the row has
        "<Task>": {
          "score": float,        the task's main score in points
          "metric": str | null,  e.g. "cosine_spearman"
          "protocol": str,       "all": Spearman over all test pairs pooled (MTEB,
                                 SimCSE); MTEB's own tasks are "all" as well
          "wmean": float | null, the same metric per subset, averaged weighted by pair
                                 count (SentEval / BERT-flow paper protocol), in points;
                                 null where the result does not carry it
          "split": str,          evaluated split ("test")
          "hf_subsets": [str],   MTEB subsets averaged into "score" (usually ["default"])
          "dataset_revision": str, data identity: "sha256:<hex>" of the SentEval files
                                 read (offline tasks) or the HF dataset commit (MTEB tasks)
          "mteb_version": str | null,
          "date": str | null,    ISO 8601 UTC time the result was computed
          "evaluation_time_s": float | null,
          "versions": {..} | null, library versions MTEB logged for the run (torch,
                                 transformers, ...), from run_settings.jsonl
          "hardware": {..} | null  where it ran: cpu, cpu_cores, cpu_affinity, torch,
                                 torch_threads, device, gpu, cuda, precision, platform,
                                 python; recorded by `flow-plugin bench`
                                 (flow-plugin-runs.jsonl), null when not recorded
        }
      },
      "n_tasks": int,            tasks with a score in this row
      "average": float | null,   mean "score" over the row's tasks (of "tasks")
      "average_wmean": float | null, mean "wmean" when every task of the row has one
      "complete": bool,          true when the row has every task in "tasks"
      "baseline": str | null,    id of the raw row of the same backbone, revision and
                                 loader kwargs (null for raw rows, or when there is no such
                                 row or it shares no task with this one)
      "delta": {"<Task>": float, ..., "average": float} | null
                                 score - baseline score, per task both rows have;
                                 "average" is the mean of those per-task deltas
    }
  ]
}
"""


# ------------------------------------------------------------------------- small helpers
def _points(value: float) -> float:
    return round(float(value) * 100.0, _DECIMALS)


def _round(value: float) -> float:
    return round(float(value), _DECIMALS)


def _iso(timestamp: float | None) -> str | None:
    if timestamp is None:
        return None
    return datetime.datetime.fromtimestamp(timestamp, tz=datetime.timezone.utc).isoformat(timespec="seconds")


def _now_iso() -> str:
    return datetime.datetime.now(tz=datetime.timezone.utc).isoformat(timespec="seconds")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def task_sort_key(task: str) -> tuple[int, str]:
    return (OFFLINE_TASKS.index(task), "") if task in OFFLINE_TASKS else (len(OFFLINE_TASKS), task)


# ------------------------------------------------------------------------- result files


def _run_settings(folder: Path) -> dict[str, dict[str, Any]]:
    """task -> the last ``versions`` record of MTEB's run_settings.jsonl in ``folder``."""
    path = folder / "run_settings.jsonl"
    if not path.is_file():
        return {}
    versions: dict[str, dict[str, Any]] = {}
    for _, record in read_json_lines(path, "run_settings.jsonl"):
        if not isinstance(record, dict) or not isinstance(record.get("task"), str):
            continue
        found = record.get("version", record.get("versions"))  # MTEB 2 writes "version"
        if isinstance(found, dict):
            versions[record["task"]] = found
    return versions


def read_result(location: ResultLocation) -> dict[str, Any]:
    """One task result file -> a leaderboard score entry (points). Errors name the file."""
    path = location.path
    data = _read_json(path, "MTEB task result")

    def bad(problem: str) -> DataFolderError:
        return DataFolderError(f"{path}: malformed MTEB task result: {problem}")

    if not isinstance(data, dict):
        raise bad(f"expected a JSON object, got {type(data).__name__}")
    task_name = data.get("task_name")
    if not isinstance(task_name, str) or not task_name:
        raise bad("missing 'task_name'")
    if task_name != location.task:
        raise bad(f"'task_name' is {task_name!r} but the file is named {path.name!r}")
    scores = data.get("scores")
    if not isinstance(scores, dict) or not scores:
        raise bad("missing 'scores' (an object of split -> list of subset scores)")
    split = "test" if "test" in scores else next(iter(scores)) if len(scores) == 1 else None
    if split is None:
        raise bad(f"no 'test' split and several others ({', '.join(scores)}): which one is the result is ambiguous")
    entries = scores[split]
    if not isinstance(entries, list) or not entries:
        raise bad(f"'scores.{split}' must be a non-empty list of subset scores")
    mains: list[float] = []
    wmeans: list[float] = []
    subsets: list[str] = []
    metric: str | None = None
    protocol = "all"
    for index, entry in enumerate(entries):
        where = f"scores.{split}[{index}]"
        if not isinstance(entry, dict):
            raise bad(f"{where} must be an object")
        main = entry.get("main_score")
        if not _is_number(main):
            raise bad(f"{where}.main_score must be a finite number, got {main!r}")
        if not -1.0 - 1e-9 <= main <= 1.0 + 1e-9:
            raise bad(f"{where}.main_score {main} is outside [-1, 1]: not an MTEB score")
        mains.append(float(main))
        subsets.append(str(entry.get("hf_subset", "default")))
        if _is_number(entry.get("cosine_spearman_wmean")):
            wmeans.append(float(entry["cosine_spearman_wmean"]))
        if index == 0:
            if _is_number(entry.get("cosine_spearman")) and abs(entry["cosine_spearman"] - main) <= 1e-12:
                metric = "cosine_spearman"
            protocols = entry.get("protocols")
            if isinstance(protocols, dict) and metric and isinstance(protocols.get(metric), str):
                protocol = protocols[metric].split(":", 1)[0].strip() or "all"
    revision = data.get("dataset_revision")
    if not isinstance(revision, str) or not revision:
        raise bad("missing 'dataset_revision'")
    date = data.get("date")
    if date is not None and not _is_number(date):
        raise bad(f"'date' must be a Unix time, got {date!r}")
    evaluation_time = data.get("evaluation_time")
    mteb_version = data.get("mteb_version")
    return {
        "score": _points(sum(mains) / len(mains)),
        "metric": metric,
        "protocol": protocol,
        "wmean": _points(sum(wmeans) / len(wmeans)) if len(wmeans) == len(mains) else None,
        "split": split,
        "hf_subsets": subsets,
        "dataset_revision": revision,
        "mteb_version": mteb_version if isinstance(mteb_version, str) else None,
        "date": _iso(date),
        "evaluation_time_s": round(evaluation_time, 3) if _is_number(evaluation_time) else None,
        "versions": _run_settings(path.parent).get(task_name),
        "hardware": None,
        "_unix_date": date,  # for matching run records; dropped before writing
    }


# ------------------------------------------------------------------------- run records (hardware)


def _run_key(model: str, revision: str, experiment: str | None, task: str, date: float | None) -> tuple[Any, ...]:
    return (model, revision, experiment, task, None if date is None else round(float(date), 3))


def _hardware_index(folders: Iterable[Path]) -> dict[tuple[Any, ...], dict[str, Any]]:
    index: dict[tuple[Any, ...], dict[str, Any]] = {}
    for folder in folders:
        for record in read_run_records(folder / RUNS_FILE):
            key = _run_key(record.get("model"), record.get("revision"), record.get("experiment"),
                           record.get("task"), record.get("result_date"))
            if isinstance(record.get("hardware"), dict):
                index[key] = record["hardware"]
    return index


# ------------------------------------------------------------------------- row metadata
def describe_model(model: str, experiment_kwargs: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any]:
    """Backbone, calibrator, pooling and fit corpus of a model name (registry first)."""
    kwargs = dict(experiment_kwargs or {})
    overrides = kwargs.get("calibrator_params") if isinstance(kwargs.get("calibrator_params"), dict) else {}
    if model.startswith(_NAMESPACE):
        from flow_plugin.errors import RegistryError

        try:
            from flow_plugin.catalog.registry import parse_model_name

            variant = parse_model_name(model)
        except RegistryError:
            variant = None
        if variant is not None:
            spec = variant.backbone
            raw = variant.calibrator == "raw"
            return {
                "backbone": spec.name,
                "backbone_model": spec.hub_id,
                "calibrator": variant.calibrator,
                "calibrator_params": {} if raw else {**variant.calibrator_params, **overrides},
                "pooling": kwargs.get("pooling", spec.pooling),
                "max_seq_length": spec.max_seq_length,
                "fit_corpus": None if raw else str(kwargs.get("fit_corpus", "target")),
                "metadata_source": "registry",
            }
        # a flow_plugin model this registry does not know: read the suffix
        short = model[len(_NAMESPACE):]
        calibrator = "raw"
        for method in sorted(_CALIBRATOR_ORDER, key=len, reverse=True):
            if method != "raw" and short.endswith("-" + method):
                calibrator, short = method, short[: -len(method) - 1]
                break
        return {
            "backbone": short,
            "backbone_model": meta.get("adapted_from") or short,
            "calibrator": calibrator,
            "calibrator_params": dict(overrides),
            "pooling": kwargs.get("pooling"),
            "max_seq_length": meta.get("max_tokens") if isinstance(meta.get("max_tokens"), int) else None,
            "fit_corpus": None if calibrator == "raw" else str(kwargs.get("fit_corpus", "target")),
            "metadata_source": "model_meta",
        }
    calibrator = str(kwargs.get("calibrator", "raw"))
    max_tokens = meta.get("max_tokens")
    return {
        "backbone": model,
        "backbone_model": meta.get("adapted_from") or model,
        "calibrator": calibrator,
        "calibrator_params": dict(overrides),
        "pooling": kwargs.get("pooling"),
        "max_seq_length": int(max_tokens) if _is_number(max_tokens) else None,
        "fit_corpus": None if calibrator == "raw" else (str(kwargs["fit_corpus"]) if "fit_corpus" in kwargs else None),
        "metadata_source": "model_meta",
    }


def _baseline_key(row: dict[str, Any]) -> str:
    """Rows sharing this key differ only in the calibrator (and its fit corpus)."""
    kwargs = {k: v for k, v in row["experiment_kwargs"].items() if k not in ("fit_corpus", "calibrator_params", "calibrator")}
    return json.dumps([row["backbone"], row["revision"], kwargs], sort_keys=True)


# ------------------------------------------------------------------------- building and merging
@dataclass
class MergeReport:
    """What one update did."""

    rows_added: list[str] = field(default_factory=list)
    scores_added: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)
    files_read: int = 0


def empty_leaderboard(name: str, tolerance: float = DEFAULT_TOLERANCE) -> dict[str, Any]:
    from flow_plugin import __version__

    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "name": name,
        "updated": _now_iso(),
        "generated_by": f"flow-plugin {__version__}",
        "scale": "points",
        "tolerance": tolerance,
        "tasks": [],
        "rows": [],
    }


_ROW_KEYS = {"id": str, "model": str, "revision": str, "scores": dict, "backbone": str, "calibrator": str}
_SCORE_KEYS = ("score", "dataset_revision")


def load_leaderboard(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and check a leaderboard JSON file (errors name the file and what is wrong)."""
    path = Path(path)
    try:
        board = _read_json(path, "leaderboard")
    except DataFolderError as error:
        raise LeaderboardError(str(error)) from None

    def bad(problem: str) -> LeaderboardError:
        return LeaderboardError(f"{path}: not a {FORMAT} file: {problem}")

    if not isinstance(board, dict) or board.get("format") != FORMAT:
        raise bad(f"'format' must be {FORMAT!r}")
    if board.get("format_version") != FORMAT_VERSION:
        raise bad(f"format_version {board.get('format_version')!r} is not {FORMAT_VERSION} (this flow-plugin's)")
    if not isinstance(board.get("rows"), list) or not isinstance(board.get("tasks"), list):
        raise bad("'rows' and 'tasks' must be lists")
    seen = set()
    for index, row in enumerate(board["rows"]):
        if not isinstance(row, dict):
            raise bad(f"rows[{index}] must be an object")
        for key, kind in _ROW_KEYS.items():
            if not isinstance(row.get(key), kind):
                raise bad(f"rows[{index}].{key} must be {kind.__name__}")
        if row["id"] in seen:
            raise bad(f"row id {row['id']!r} appears twice")
        seen.add(row["id"])
        row.setdefault("experiment", None)
        row.setdefault("experiment_kwargs", {})
        for task, entry in row["scores"].items():
            if not isinstance(entry, dict) or not _is_number(entry.get("score")) or not isinstance(
                entry.get("dataset_revision"), str
            ):
                raise bad(f"rows[{index}].scores.{task} needs a numeric 'score' and a 'dataset_revision'")
    return board


def _difference(old: dict[str, Any], new: dict[str, Any], tolerance: float) -> list[str]:
    """Why two score entries of the same model and task are not the same result."""
    limit = tolerance + 1e-9  # points; the 1e-9 absorbs float rounding of the 4-decimal values
    problems = []
    if abs(old["score"] - new["score"]) > limit:
        problems.append(f"score {old['score']} vs {new['score']}")
    if old.get("dataset_revision") != new.get("dataset_revision"):
        problems.append(f"dataset_revision {old.get('dataset_revision')} vs {new.get('dataset_revision')}")
    old_w, new_w = old.get("wmean"), new.get("wmean")
    if old_w is not None and new_w is not None and abs(old_w - new_w) > limit:
        problems.append(f"wmean {old_w} vs {new_w}")
    return problems


def merge_results(
    board: dict[str, Any],
    folders: Sequence[str | os.PathLike[str]],
    *,
    replace: bool = False,
    models: Iterable[str] | None = None,
    tasks: Iterable[str] | None = None,
    tolerance: float | None = None,
    require_results: bool = True,
) -> MergeReport:
    """Merge the result files under ``folders`` into ``board`` (in place) and recompute the
    derived fields. Raises :class:`LeaderboardConflictError` (and leaves ``board`` as it
    was) when a new score disagrees with a recorded one and ``replace`` is false."""
    tolerance = board.get("tolerance", DEFAULT_TOLERANCE) if tolerance is None else tolerance
    if not _is_number(tolerance) or tolerance < 0:
        raise LeaderboardError(f"tolerance must be a number >= 0, got {tolerance!r}")
    model_filter = set(models) if models is not None else None
    task_filter = set(tasks) if tasks is not None else None
    report = MergeReport()
    content_before = _content(board)
    rows = {row["id"]: json.loads(json.dumps(row)) for row in board["rows"]}  # work on a copy
    origin: dict[tuple[str, str], str] = {}  # (row id, task) -> where the current entry came from
    conflicts: list[str] = []
    for folder in folders:
        root = results_root(folder)
        locations = scan_results(folder)
        if require_results and not locations:
            raise DataFolderError(f"{folder}: no MTEB result files found (expected <model>/<revision>/<Task>.json"
                                  f" next to model_meta.json or run_settings.jsonl, under {root})")
        hardware = _hardware_index({root, root.parent})
        for location in locations:
            if model_filter is not None and location.model not in model_filter:
                continue
            if task_filter is not None and location.task not in task_filter:
                continue
            entry = read_result(location)
            report.files_read += 1
            unix_date = entry.pop("_unix_date")
            entry["hardware"] = hardware.get(
                _run_key(location.model, location.revision, location.experiment, location.task, unix_date)
            )
            rid = location.row_id
            label = f"{rid} / {location.task}"
            row = rows.get(rid)
            if row is None:
                row = rows[rid] = {
                    "id": rid,
                    "model": location.model,
                    "revision": location.revision,
                    "experiment": location.experiment,
                    "experiment_kwargs": location.experiment_kwargs,
                    **describe_model(location.model, location.experiment_kwargs, location.model_meta),
                    "scores": {},
                }
                report.rows_added.append(rid)
            old = row["scores"].get(location.task)
            if old is None:
                row["scores"][location.task] = entry
                report.scores_added.append(label)
            else:
                problems = _difference(old, entry, tolerance)
                where = origin.get((rid, location.task), "the leaderboard")
                if not problems:
                    report.unchanged.append(label)
                elif replace:
                    row["scores"][location.task] = entry
                    report.replaced.append(f"{label}: {'; '.join(problems)} (was from {where}, now {location.path})")
                else:
                    conflicts.append(f"{label}: {'; '.join(problems)} ({where} vs {location.path})")
                    continue
            origin[(rid, location.task)] = str(location.path)
    if (model_filter is not None or task_filter is not None) and require_results and report.files_read == 0:
        raise LeaderboardError(f"no result files of the selected models/tasks under {', '.join(map(str, folders))}")
    if conflicts:
        raise LeaderboardConflictError(
            f"{len(conflicts)} result(s) disagree with what is already recorded (nothing was written; "
            "pass --replace to replace them):\n  " + "\n  ".join(conflicts),
            conflicts,
        )
    board["rows"] = list(rows.values())
    board["tolerance"] = tolerance
    finalize(board)
    if _content(board) != content_before:  # a rerun that changes nothing keeps the file byte for byte
        board["updated"] = _now_iso()
    return report


def finalize(board: dict[str, Any]) -> dict[str, Any]:
    """Recompute the derived fields: task order, averages, baselines, deltas, row order."""
    tasks = {task for row in board["rows"] for task in row["scores"]} | set(board.get("tasks", []))
    board["tasks"] = sorted(tasks, key=task_sort_key)
    order = {method: index for index, method in enumerate(_CALIBRATOR_ORDER)}
    board["rows"].sort(key=lambda r: (r.get("backbone", ""), r["revision"], r.get("experiment") or "",
                                      order.get(r.get("calibrator"), len(order)), r.get("calibrator", ""), r["id"]))
    raw_rows: dict[str, dict[str, Any]] = {}
    for row in board["rows"]:
        row.setdefault("experiment_kwargs", {})
        row["scores"] = {task: row["scores"][task] for task in board["tasks"] if task in row["scores"]}
        values = [entry["score"] for entry in row["scores"].values()]
        wmeans = [entry.get("wmean") for entry in row["scores"].values()]
        row["n_tasks"] = len(values)
        row["average"] = _round(sum(values) / len(values)) if values else None
        row["average_wmean"] = _round(sum(wmeans) / len(wmeans)) if wmeans and None not in wmeans else None
        row["complete"] = len(values) == len(board["tasks"])
        if row.get("calibrator") == "raw":
            raw_rows.setdefault(_baseline_key(row), row)
    for row in board["rows"]:
        baseline = raw_rows.get(_baseline_key(row)) if row.get("calibrator") != "raw" else None
        if baseline is None:
            row["baseline"], row["delta"] = None, None
            continue
        deltas = {
            task: _round(entry["score"] - baseline["scores"][task]["score"])
            for task, entry in row["scores"].items()
            if task in baseline["scores"]
        }
        if deltas:
            deltas["average"] = _round(sum(deltas.values()) / len(deltas))
        row["baseline"], row["delta"] = (baseline["id"], deltas) if deltas else (None, None)
    return board


def _content(board: dict[str, Any]) -> str:
    return json.dumps({k: v for k, v in board.items() if k not in ("updated", "generated_by")}, sort_keys=True)


# ------------------------------------------------------------------------- rendering
def _fmt(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "—"
    text = f"{value:+.2f}" if signed else f"{value:.2f}"
    return "0.00" if text in ("+0.00", "-0.00") and signed else text


def _best(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


def _hardware_text(hardware: dict[str, Any]) -> str:
    parts = [str(hardware.get("cpu") or "unknown CPU")]
    if hardware.get("cpu_cores"):
        parts.append(f"{hardware['cpu_cores']} cores")
    if hardware.get("gpu"):
        parts.append(str(hardware["gpu"]))
    parts.append(f"device {hardware.get('device', '?')}")
    if hardware.get("precision"):
        parts.append(str(hardware["precision"]))
    if hardware.get("torch"):
        parts.append(f"torch {hardware['torch']}")
    return ", ".join(parts)


def render_markdown(board: dict[str, Any]) -> str:
    """The leaderboard as Markdown: scores (best per column in bold), deltas, wmean, provenance."""
    tasks = board["tasks"]
    rows = board["rows"]
    lines = [f"# Leaderboard: {board['name']}", ""]
    lines.append(
        "Scores are Spearman correlations × 100 between cosine similarity and the gold scores, protocol "
        "\"all\" (all test pairs pooled, as MTEB and SimCSE report), unless a column says otherwise. "
        "**Bold**: best in the column. Avg: mean over the row's tasks (a partial average shows how many)."
    )
    lines.append("")
    if not rows:
        lines.append("_No results yet._")
        return "\n".join(lines) + "\n"

    header = ["Model", "Calibrator", "Pooling", "Fit corpus", *tasks, "Avg"]
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|" + "|".join(["---"] * 4 + ["---:"] * (len(tasks) + 1)) + "|")
    best = {task: _best([row["scores"].get(task, {}).get("score") for row in rows]) for task in tasks}
    best_avg = _best([row["average"] for row in rows if row["complete"]])
    for row in rows:
        cells = [row["id"] if row.get("experiment") else row["model"], row["calibrator"], row.get("pooling") or "—",
                 row.get("fit_corpus") or "—"]
        for task in tasks:
            entry = row["scores"].get(task)
            value = entry["score"] if entry else None
            text = _fmt(value)
            if entry and entry.get("protocol", "all") != "all":
                text += f" ({entry['protocol']})"
            cells.append(f"**{text}**" if value is not None and value == best[task] else text)
        average = _fmt(row["average"])
        if row["average"] is not None and not row["complete"]:
            average += f" ({row['n_tasks']}/{len(tasks)})"
        cells.append(f"**{average}**" if row["complete"] and row["average"] == best_avg else average)
        lines.append("| " + " | ".join(cells) + " |")

    with_delta = [row for row in rows if row.get("delta")]
    lines += ["", "## Δ against the raw backbone", ""]
    if with_delta:
        lines.append("Calibrated score minus the raw backbone's score on the same task, in points.")
        lines.append("")
        lines.append("| " + " | ".join(["Model", "Calibrator", "Raw baseline", *tasks, "Avg"]) + " |")
        lines.append("|" + "|".join(["---"] * 3 + ["---:"] * (len(tasks) + 1)) + "|")
        for row in with_delta:
            baseline = next(r for r in rows if r["id"] == row["baseline"])
            cells = [row["id"] if row.get("experiment") else row["model"], row["calibrator"], baseline["model"]]
            cells += [_fmt(row["delta"].get(task), signed=True) for task in tasks]
            cells.append(_fmt(row["delta"].get("average"), signed=True))
            lines.append("| " + " | ".join(cells) + " |")
    else:
        lines.append("_No calibrated row has its raw backbone in this leaderboard._")

    wmean_rows = [row for row in rows if any(e.get("wmean") is not None for e in row["scores"].values())]
    if wmean_rows:
        lines += ["", "## wmean protocol", ""]
        lines.append(
            "The same correlations per subset, averaged weighted by pair count (SentEval's and the BERT-flow "
            "paper's \"wmean\"); — where the result does not carry it."
        )
        lines.append("")
        lines.append("| " + " | ".join(["Model", *tasks, "Avg"]) + " |")
        lines.append("|" + "|".join(["---"] + ["---:"] * (len(tasks) + 1)) + "|")
        for row in wmean_rows:
            cells = [row["id"] if row.get("experiment") else row["model"]]
            cells += [_fmt(row["scores"].get(task, {}).get("wmean")) for task in tasks]
            cells.append(_fmt(row.get("average_wmean")))
            lines.append("| " + " | ".join(cells) + " |")

    lines += ["", "## Provenance", ""]
    entries = [entry for row in rows for entry in row["scores"].values()]
    versions = sorted({e.get("mteb_version") or "unknown" for e in entries})
    dates = sorted(e["date"] for e in entries if e.get("date"))
    lines.append(f"- mteb: {', '.join(versions)}")
    if dates:
        lines.append(f"- computed: {dates[0]} to {dates[-1]}" if dates[0] != dates[-1] else f"- computed: {dates[0]}")
    for task in tasks:
        revisions = sorted({row["scores"][task]["dataset_revision"] for row in rows if task in row["scores"]})
        lines.append(f"- {task} data: {', '.join(f'`{r}`' for r in revisions)}")
    hardware = sorted({_hardware_text(e["hardware"]) for e in entries if e.get("hardware")})
    unknown = sum(1 for e in entries if not e.get("hardware"))
    for text in hardware:
        lines.append(f"- hardware: {text}")
    if unknown:
        lines.append(f"- hardware not recorded for {unknown} of {len(entries)} scores")
    lines.append(f"- updated: {board['updated']} by {board.get('generated_by', 'flow-plugin')}")
    return "\n".join(lines) + "\n"


def delta_series(board: dict[str, Any]) -> tuple[list[str], list[tuple[str, list[float | None]]]]:
    """(x labels, [(series label, delta per label)]) of the delta chart: tasks then "Avg"."""
    labels = [*board["tasks"], "Avg"]
    series = []
    for row in board["rows"]:
        if row.get("delta"):
            values = [row["delta"].get(task) for task in board["tasks"]] + [row["delta"].get("average")]
            series.append((row["id"] if row.get("experiment") else row["model"].removeprefix(_NAMESPACE), values))
    return labels, series


def render_png(board: dict[str, Any]) -> bytes:
    """A bar chart of the deltas against the raw backbone, as PNG bytes (matplotlib, Agg).

    The PNG's "Description" text chunk holds the bar heights as drawn (JSON), so the
    picture can be checked against the leaderboard."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    labels, series = delta_series(board)
    short = [label.removeprefix("SentEval") for label in labels]
    figure = Figure(figsize=(max(6.0, 1.1 * len(labels) + 2.5), 4.2), dpi=110)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot(1, 1, 1)
    drawn: dict[str, Any] = {"labels": labels, "series": {}}
    if series:
        width = 0.8 / len(series)
        for index, (name, values) in enumerate(series):
            positions = [x - 0.4 + width * (index + 0.5) for x in range(len(labels))]
            heights = [0.0 if v is None else v for v in values]
            bars = axes.bar(positions, heights, width=width * 0.95, label=name, color=f"C{index % 10}")
            drawn["series"][name] = [None if v is None else round(rect.get_height(), _DECIMALS)
                                     for v, rect in zip(values, bars.patches)]
        axes.axhline(0.0, color="black", linewidth=0.8)
        axes.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    else:
        axes.text(0.5, 0.5, "no calibrated variant with its raw backbone", ha="center", va="center",
                  transform=axes.transAxes)
    axes.set_xticks(range(len(labels)))
    axes.set_xticklabels(short, rotation=30, ha="right", fontsize=9)
    axes.set_ylabel("Δ Spearman × 100 vs raw")
    axes.set_title(f"{board['name']}: calibrator minus raw backbone (protocol all)", fontsize=10)
    axes.grid(axis="y", alpha=0.3)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", bbox_inches="tight",
                   metadata={"Description": json.dumps(drawn), "Software": None})
    return buffer.getvalue()


def output_paths(json_path: str | os.PathLike[str]) -> tuple[Path, Path, Path]:
    path = Path(json_path)
    if path.suffix != ".json":
        raise LeaderboardError(f"the leaderboard file must end in .json, got {path}")
    return path, path.with_suffix(".md"), path.with_suffix(".png")


def write_leaderboard(board: dict[str, Any], json_path: str | os.PathLike[str]) -> tuple[Path, Path, Path]:
    """Render all three files in memory, then write each atomically (JSON last: it is the record)."""
    json_file, md_file, png_file = output_paths(json_path)
    text = json.dumps(board, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    markdown = render_markdown(board)
    png = render_png(board)
    atomic_write_bytes(png_file, png)
    atomic_write_text(md_file, markdown)
    atomic_write_text(json_file, text)
    return json_file, md_file, png_file


@contextlib.contextmanager
def _folder_lock(folder: Path) -> Iterator[None]:
    """Serialise read-merge-write of leaderboards in one folder (POSIX advisory lock)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover -- Windows: no locking
        yield
        return
    folder.mkdir(parents=True, exist_ok=True)
    handle = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(handle, fcntl.LOCK_UN)
        os.close(handle)


@dataclass
class LeaderboardUpdate:
    paths: tuple[Path, Path, Path]
    report: MergeReport
    board: dict[str, Any]


def update_leaderboard(
    folders: Sequence[str | os.PathLike[str]],
    output: str | os.PathLike[str],
    *,
    replace: bool = False,
    models: Iterable[str] | None = None,
    tasks: Iterable[str] | None = None,
    name: str | None = None,
    tolerance: float | None = None,
) -> LeaderboardUpdate:
    """Merge the results under ``folders`` into the leaderboard at ``output`` (created if
    absent) and rewrite its JSON, Markdown and PNG. Nothing is written on a conflict."""
    json_file, _, _ = output_paths(output)
    with _folder_lock(json_file.parent.resolve()):
        if json_file.exists():
            board = load_leaderboard(json_file)
            if name:
                board["name"] = name
        else:
            board = empty_leaderboard(name or json_file.stem)
        report = merge_results(board, folders, replace=replace, models=models, tasks=tasks, tolerance=tolerance)
        from flow_plugin import __version__

        board["generated_by"] = f"flow-plugin {__version__}"
        paths = write_leaderboard(board, json_file)
    return LeaderboardUpdate(paths, report, board)


# ------------------------------------------------------------------------- command line
def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results", nargs="*", type=Path, metavar="RESULTS_DIR",
                        help="MTEB output folder (containing results/) or results folder; several are merged in order")
    parser.add_argument("-o", "--output", type=Path, metavar="NAME.json",
                        help="leaderboard JSON to create or update; NAME.md and NAME.png are written next to it")
    parser.add_argument("--replace", action="store_true",
                        help="replace recorded scores that new results contradict (and list them) instead of failing")
    parser.add_argument("-m", "--model", action="append", metavar="MODEL", help="only these models (repeatable)")
    parser.add_argument("-t", "--task", action="append", metavar="TASK", help="only these tasks (repeatable)")
    parser.add_argument("--name", default=None, help="leaderboard title (default: the file's stem)")
    parser.add_argument("--tolerance", type=float, default=None,
                        help=f"largest score difference in points still counted as identical (default {DEFAULT_TOLERANCE})")
    parser.add_argument("--schema", action="store_true", help="print the JSON schema and exit")


def run(args: argparse.Namespace) -> int:
    if args.schema:
        print(SCHEMA)
        return 0
    if not args.results or args.output is None:
        raise LeaderboardError("give one or more RESULTS_DIR and -o NAME.json (or --schema)")
    update = update_leaderboard(args.results, args.output, replace=args.replace, models=args.model, tasks=args.task,
                                name=args.name, tolerance=args.tolerance)
    print_update(update)
    return 0


def print_update(update: LeaderboardUpdate) -> None:
    report = update.report
    for line in report.replaced:
        print(f"replaced: {line}")
    print(
        f"leaderboard {update.paths[0]}: {len(update.board['rows'])} rows, {len(update.board['tasks'])} tasks; "
        f"read {report.files_read} result files: {len(report.rows_added)} new rows, "
        f"{len(report.scores_added)} new scores, {len(report.unchanged)} unchanged, {len(report.replaced)} replaced"
    )
    print(f"wrote {update.paths[1]} and {update.paths[2]}")
