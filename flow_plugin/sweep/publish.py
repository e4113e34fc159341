"""Atomic results on shared storage: a job evaluates into its own staging folder, then moves
each finished result into the output folder's MTEB layout.

MTEB writes a result file in place, so a worker killed mid-write would leave a truncated
file where every reader looks. A job therefore evaluates into a staging folder of its own
(``<output>/.flow-plugin-sweep/staging/<job>/<attempt>/``, on the same file system), and
publishes each result in an order that never shows a partial one:

1. ``model_meta.json`` of the result's folder, replaced atomically;
2. MTEB's ``run_settings.jsonl`` of that folder: the task's lines replaced, atomically
   (one job owns a backbone's model folders, so no other writer touches it meanwhile);
3. the files kept with the result (fit records, per-pair and per-item data: :mod:`flow_plugin.results.sidecars`),
   replaced atomically;
4. the result's line in ``flow-plugin-runs.jsonl`` (hardware), appended under that file's
   lock, since jobs of other backbones append to it too;
5. the result file itself, by ``os.replace``: the commit. Before it nothing is visible; a
   job killed earlier leaves at most an unused run record, and its rerun redoes the item.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from flow_plugin._io import atomic_write_bytes, atomic_write_text, file_lock, split_lines
from flow_plugin.errors import SweepError
from flow_plugin.results import ResultStore
from flow_plugin.results.sidecars import side_files


class Stage:
    """The staging folder of one attempt of one job."""

    def __init__(self, staging_root: Path, job_id: str, attempt: str, output: Path) -> None:
        self.job_folder = staging_root / job_id
        self.folder = self.job_folder / attempt
        self.output = output

    def open(self) -> Stage:
        """Remove what earlier (dead) attempts of this job left, and make this attempt's folder."""
        if self.job_folder.is_dir():
            for old in self.job_folder.iterdir():
                if old != self.folder:
                    shutil.rmtree(old, ignore_errors=True)
        self.folder.mkdir(parents=True, exist_ok=True)
        return self

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)
        try:
            self.job_folder.rmdir()
        except OSError:
            pass  # not empty (another attempt) or already gone

    def staged(self, final: Path) -> Path:
        """Where MTEB, evaluating into this stage, writes the result whose place is ``final``."""
        return self.folder / final.relative_to(self.output)

    def publish(self, final: Path) -> None:
        """Move the staged result for ``final`` (and its folder's metadata and run records)
        into the output folder, the result file last and atomically."""
        staged = self.staged(final)
        if not staged.is_file():
            raise FileNotFoundError(f"{staged}: MTEB reported a result but wrote no file there")
        final.parent.mkdir(parents=True, exist_ok=True)
        meta = staged.parent / "model_meta.json"
        if meta.is_file():
            atomic_write_bytes(final.parent / "model_meta.json", meta.read_bytes())
        settings = staged.parent / "run_settings.jsonl"
        if settings.is_file():
            _replace_task_lines(final.parent / "run_settings.jsonl", settings, task=final.stem)
        for found, target in zip(side_files(staged), side_files(final)):  # fit records, per-pair and per-item data
            if found.is_file():
                atomic_write_bytes(target, found.read_bytes())
        with open(staged, "rb") as handle:  # the bytes are on disk before the name points at them
            os.fsync(handle.fileno())
        stage = ResultStore(self.folder)
        records = [{k: v for k, v in record.items() if k != "format"} for record in stage.run_records()]
        if records:
            ResultStore(self.output).append_run_records(records)
        stage.runs_file.unlink(missing_ok=True)
        os.replace(staged, final)


def _replace_task_lines(target: Path, staged: Path, task: str) -> None:
    """``target``'s MTEB run settings with the lines of ``task`` replaced by ``staged``'s."""
    kept = []
    if target.is_file():
        for line in split_lines(target.read_text(encoding="utf-8")):
            try:
                entry = json.loads(line)
            except ValueError:
                continue  # MTEB's own reader skips what it cannot parse too
            if isinstance(entry, dict) and entry.get("task") != task:
                kept.append(line)
    new = [line for line in split_lines(staged.read_text(encoding="utf-8"))
           if line.strip() and json.loads(line).get("task") == task]
    atomic_write_text(target, "".join(line + "\n" for line in kept + new))


@contextlib.contextmanager
def sweep_lock(work: Path) -> Iterator[None]:
    """One sweep at a time per output folder (``<work>/lock``, :func:`flow_plugin._io.file_lock`:
    across nodes on shared storage)."""
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(file_lock(work / "lock", blocking=False))
        except BlockingIOError:
            raise SweepError(f"another sweep is running on this output folder (lock {work / 'lock'})") from None
        yield
