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
import platform
from collections.abc import Sequence
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def hardware_info(device: Any = None, precision: str | None = None) -> dict[str, Any]:
    """Where results are computed: CPU, cores, torch, device (GPU name), precision."""
    import torch

    info: dict[str, Any] = {
        "cpu": _cpu_model(),
        "cpu_cores": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "device": str(device) if device is not None else None,
        "precision": precision,
        "platform": platform.platform(),
        "python": platform.python_version(),
    }
    if device is not None and str(device).startswith("cuda") and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(torch.device(device))
        info["cuda"] = torch.version.cuda
    return info


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
    from flow_plugin.cli.leaderboard import append_run_records, scan_results

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
