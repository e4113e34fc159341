"""Progress of a sweep's jobs, through small JSON files on the shared output folder.

Each attempt of a job (Ray starts another after a worker dies) keeps one file,
``<output>/.flow-plugin-sweep/progress/<job>@<host>-<pid>-<time>.json``, rewritten atomically
after every result: where it runs, what it has to do, and each result computed, skipped or
failed. The driver reads these files to print one line per job as it starts, dies, is retried
or finishes, and to move the overall progress bar; they stay afterwards as the sweep's log.

>>> import tempfile
>>> with tempfile.TemporaryDirectory() as folder:
...     log = AttemptLog(Path(folder), "minilm-l6")
...     log.planned(total=2, already_done=1)
...     log.item("flow_plugin/minilm-l6 × SentEvalSTS16", "computed", 1.5, score=80.1)
...     log.finish("finished")
...     [(a["job"], a["status"], a["counts"]) for a in read_attempts(Path(folder))["minilm-l6"]]
[('minilm-l6', 'finished', {'computed': 1, 'skipped': 0, 'failed': 0})]
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from flow_plugin._io import atomic_write_json


class AttemptLog:
    """The progress file of one attempt of one job (written by the job, in its worker)."""

    def __init__(self, folder: Path, job_id: str) -> None:
        host, pid = socket.gethostname(), os.getpid()
        self.attempt = f"{host}-{pid}-{time.time_ns()}"
        self.path = folder / f"{job_id}@{self.attempt}.json"
        now = time.time()
        self.state: dict[str, Any] = {
            "job": job_id, "attempt": self.attempt, "host": host, "pid": pid, "started": now, "updated": now,
            "status": "running", "total": None, "already_done": None,
            "counts": {"computed": 0, "skipped": 0, "failed": 0}, "items": [], "error": None,
        }
        self._write()

    def _write(self) -> None:
        self.state["updated"] = time.time()
        atomic_write_json(self.path, self.state)

    def planned(self, total: int, already_done: int) -> None:
        """The job's items: how many in all, how many were done before this attempt began."""
        self.state.update(total=total, already_done=already_done)
        self._write()

    def item(self, key: str, status: str, seconds: float, score: float | None = None, error: str | None = None) -> None:
        """One result: ``status`` is computed, skipped (already done) or failed."""
        self.state["counts"][status] += 1
        entry: dict[str, Any] = {"item": key, "status": status, "seconds": round(seconds, 3)}
        if score is not None:
            entry["score"] = score
        if error is not None:
            entry["error"] = error
        self.state["items"].append(entry)
        self._write()

    def finish(self, status: str, error: str | None = None) -> None:
        """``finished`` (every item handled, some may have failed) or ``failed`` (the job stopped)."""
        self.state.update(status=status, error=error)
        self._write()


def read_attempts(folder: Path) -> dict[str, list[dict[str, Any]]]:
    """job id -> its attempts' progress, oldest first ({} while there are none). A file being
    replaced at that moment is simply read at the next poll."""
    attempts: dict[str, list[dict[str, Any]]] = defaultdict(list)
    if not folder.is_dir():
        return {}
    for path in folder.glob("*@*.json"):
        try:
            state = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(state, dict) and "job" in state:
            attempts[state["job"]].append(state)
    return {job: sorted(states, key=lambda state: state["started"]) for job, states in attempts.items()}
