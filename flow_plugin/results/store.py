"""The one owner of an output folder: where results go, what a run does before and after MTEB writes them,
and what readers list.

An output folder holds MTEB's results and what flow-plugin keeps with them::

    <output>/
      flow-plugin-runs.jsonl                  run records: hardware and settings of each result (.runs)
      .flow-plugin-results.lock               the write lock MTEB's saves and our readers hold (.writing)
      results/<model>/<revision>/[experiments/<name>/]
        <Task>.json, model_meta.json          MTEB's own files (.files)
        flow-plugin-fits/<Task>.fits.json     what each calibrator was fitted on (.fits)
        flow-plugin-pairs/<Task>.pairs.npz    per-pair cosines of the STS tasks (.pairs)
        flow-plugin-items/<Task>.items.npz    per-item outcomes of the labelled tasks (.items)

Our evaluation loop (``flow-plugin eval``, ``bench``, ``task-types``) calls :meth:`ResultStore.prepare` before
``mteb.evaluate`` and :meth:`ResultStore.record` after it; ``flow-plugin sweep`` plans and publishes through it,
and the leaderboard lists results through :meth:`ResultStore.existing`. The per-result side files are written by
the tasks and the calibrated model that compute them, next to the result file, through :mod:`.fits`,
:mod:`.pairs` and :mod:`.items`.
"""

from __future__ import annotations

import contextlib
import datetime
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from flow_plugin._io import file_lock
from flow_plugin.errors import OutputError
from flow_plugin.results import files, recovery, runs


#: the lock of a folder's MTEB files: MTEB writes a result and ``model_meta.json`` in place, so each process that
#: evaluates into the folder (a study's workers) holds it while MTEB saves, and :meth:`ResultStore.prepare` and
#: :meth:`ResultStore.record`, which read those files, hold it too
WRITE_LOCK_FILE = ".flow-plugin-results.lock"


class ResultStore:
    """An MTEB output folder (the folder that holds ``results/``) and flow-plugin's records in it.

    Parameters
    ----------
    folder : str or path-like
        The output folder; nothing is created until a run writes to it.

    Attributes
    ----------
    folder : Path
        The output folder, with ``~`` expanded.
    runs_file : Path
        Its run-records file, ``flow-plugin-runs.jsonl``.

    Examples
    --------
    >>> store = ResultStore("out")
    >>> store.runs_file.as_posix(), store.model_folder("flow_plugin/minilm-l6").as_posix()
    ('out/flow-plugin-runs.jsonl', 'out/results/flow_plugin__minilm-l6')
    """

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.folder = Path(folder).expanduser()
        self.runs_file = runs.runs_file_for(self.folder)

    @classmethod
    def existing(cls, folder: str | os.PathLike[str]) -> ResultStore:
        """The store of a folder to read: an output folder, or its ``results/`` folder itself. A folder that does
        not exist, or holds results under another name, is a :class:`~flow_plugin.errors.DataFolderError`."""
        return cls(files.open_result_cache(folder).cache_path)

    def __repr__(self) -> str:
        return f"ResultStore({str(self.folder)!r})"

    # ---------------------------------------------------------------- where results are
    def result_path(self, meta: Any, task: str) -> Path:
        """Where the result of the model run ``meta`` (an ``mteb.ModelMeta``) on ``task`` goes."""
        return files.result_path(self.folder, meta, task)

    def model_folder(self, model: str) -> Path:
        """MTEB's folder for the results of ``model``."""
        return files.model_folder(self.folder, model)

    def result_files(self, model: str, task: str) -> dict[Path, tuple[int, int]]:
        """Every ``<task>.json`` of ``model`` (any revision and experiment) -> (mtime_ns, size)."""
        return files.result_files(self.folder, model, task)

    def task_result_paths(self) -> list[Path]:
        """Every task result file of the folder, in a stable order (mteb's ``ResultCache`` lists them)."""
        return files.task_result_paths(files.open_result_cache(self.folder))

    # ---------------------------------------------------------------- a run's life
    def prepare(self, meta: Any, tasks: Sequence[Any], *, overwrite: bool) -> None:
        """Before ``meta`` is evaluated on ``tasks`` (MTEB task objects): set aside its truncated results and
        repair its ``model_meta.json``; unless ``overwrite``, set aside its stale and unrecorded results too, so
        MTEB recomputes them instead of reusing them."""
        names = [task.metadata.name for task in tasks]
        with self.writing():
            recovery.quarantine_truncated_results(self.folder, [meta.name], names)
            recovery.repair_model_meta(self.folder, meta, tasks)
            if not overwrite:
                recovery.set_aside_stale_results(self.folder, meta, tasks)
                recovery.set_aside_unrecorded_results(self.folder, meta, tasks)

    def writing(self) -> contextlib.AbstractContextManager[None]:
        """The folder's write lock (:data:`WRITE_LOCK_FILE`), to hold around MTEB's saves into the folder and
        around reading what they write: processes evaluating into one folder take turns."""
        return file_lock(self.folder / WRITE_LOCK_FILE)

    def quarantine_truncated(self, models: Sequence[str], tasks: Sequence[str]) -> list[Path]:
        """Set aside every result file of ``models`` on ``tasks`` that is not valid JSON; returns the new names."""
        return recovery.quarantine_truncated_results(self.folder, models, tasks)

    def record(self, paths: Sequence[Path], hardware: dict[str, Any], settings: dict[str, Any]) -> None:
        """One run record for each result file just written (one atomic append): its identity, and the hardware
        and settings it ran with. When the records cannot be written (a full disk ...), those results are set
        aside and the :class:`~flow_plugin.errors.OutputError` says so: a result is kept only with its record."""
        if not paths:
            return
        recorded = datetime.datetime.now(tz=datetime.timezone.utc).isoformat(timespec="seconds")
        with self.writing():
            records = [{**runs.result_fields(path), "recorded": recorded, "hardware": hardware, "settings": settings}
                       for path in paths]
        try:
            runs.append_run_records(self.folder, records)
        except OSError as error:
            moved = recovery.set_aside_partial_results(paths)
            if not moved:
                raise
            names = ", ".join(f"{path.parent / path.name.split('.unrecorded-')[0]} as {path.name}" for path in moved)
            failure = OutputError(f"{error}; so the new result(s) were set aside ({names}): a result is kept only "
                                  "with its run record")
            failure.errno = error.errno
            raise failure from error

    @staticmethod
    def discard(paths: Iterable[Path]) -> list[Path]:
        """After a failed or interrupted evaluation: set aside the result files it (re)wrote (no run record, so
        no result); returns the new paths."""
        return recovery.set_aside_partial_results(paths)

    # ---------------------------------------------------------------- run records
    def run_records(self) -> list[dict[str, Any]]:
        """The records of the folder's run-records file ([] when there is none)."""
        return runs.read_run_records(self.runs_file)

    def recorded_run_keys(self) -> set[tuple[Any, ...]]:
        """The run keys (:func:`~flow_plugin.results.runs.run_key`) of every record."""
        return runs.recorded_run_keys(self.folder)

    def append_run_records(self, records: Iterable[dict[str, Any]]) -> Path:
        """Add ``records`` to the run-records file, atomically, keeping the old lines; returns the file."""
        return runs.append_run_records(self.folder, records)
