"""Which results a job owes: (run, task) items, where each result lives, which are done.

The driver plans every job before Ray starts (to check task names, count what is left and
skip finished jobs); the job plans again when it starts, since an earlier attempt of it may
have finished some items meanwhile. Both use the same rules:

* a result lives where MTEB's ``ResultCache`` puts it for the run's ``ModelMeta`` (which
  carries the run's kwargs: experiment folders): ``results/<model>/<revision>/[experiments/<name>/]<Task>.json``;
* it is done when that file reads as an MTEB ``TaskResult`` that misses no split or subset
  of the task (MTEB's own test, ``get_missing_evaluations``) and the output folder's
  ``flow-plugin-runs.jsonl`` has its run record (a result of unknown hardware is redone).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flow_plugin.sweep.jobs import Job, Run
from flow_plugin.errors import DataFolderError, FlowPluginError, RegistryError
from flow_plugin.integrations.mteb.task_resolver import resolve_tasks
from flow_plugin.integrations.mteb.hook import register
from flow_plugin.results import ResultStore
from flow_plugin.results.files import load_task_result
from flow_plugin.results.runs import result_run_key

@dataclass(frozen=True)
class Item:
    """One result a job owes: a run on a task, the result file's path, and whether it is done."""

    run: Run
    task: str
    path: Path
    done: bool

    @property
    def key(self) -> str:
        return f"{self.run.label} × {self.task}"


def resolve_task_refs(refs: tuple[str, ...], data: str | os.PathLike[str] | None, source: Path | None = None) -> list[Any]:
    """MTEB task objects for the sweep's task names (offline tasks, MTEB tasks, benchmarks);
    errors name the sweep file and its ``tasks`` (or ``data``) key."""
    where = f"{source}: key 'tasks': " if source is not None else ""
    try:
        return resolve_tasks(list(refs), data)
    except RegistryError as error:
        raise RegistryError(f"{where}{error}") from None
    except DataFolderError as error:
        key = f"{source}: key 'data': " if source is not None else ""
        raise DataFolderError(f"{key}{error}") from None


def run_meta(run: Run) -> Any:
    """The run's MTEB ``ModelMeta``, with its kwargs as experiment kwargs (as ``mteb.get_model``
    makes it; no weights are loaded)."""
    # MTEB loads when tasks are resolved, not to read a sweep file
    import mteb

    register()
    return mteb.get_model(run.model, **run.kwargs).mteb_model_meta


def is_done(path: Path, task: Any, recorded: set[tuple[Any, ...]]) -> bool:
    """True when ``path`` holds a result of ``task`` that misses no split or subset, and its run
    key is among ``recorded`` (:meth:`~flow_plugin.results.store.ResultStore.recorded_run_keys`)."""
    if not path.is_file():
        return False
    try:
        result = load_task_result(path)  # (MTEB loads when a result is checked, not to read a sweep file)
    except Exception:  # noqa: BLE001 -- unreadable or truncated (not by a sweep: those are atomic): redo it
        return False
    return not result.get_missing_evaluations(task) and result_run_key(path) in recorded


def plan_job(job: Job, output: Path, tasks: list[Any]) -> list[Item]:
    """The job's items, task by task (every run of a task in turn), each marked done or not."""
    store = ResultStore(output)
    paths: dict[tuple[int, str], Path] = {}
    for index, run in enumerate(job.runs):
        try:
            meta = run_meta(run)
        except FlowPluginError:
            raise
        except Exception as error:  # noqa: BLE001 -- MTEB refuses the kwargs: say which run
            raise RegistryError(f"{run.label}: MTEB cannot load this model: {type(error).__name__}: {error}") from None
        for task in tasks:
            paths[(index, task.metadata.name)] = store.result_path(meta, task.metadata.name)
    recorded = store.recorded_run_keys()
    items = []
    for task in tasks:
        name = task.metadata.name
        for index, run in enumerate(job.runs):
            path = paths[(index, name)]
            items.append(Item(run, name, path, is_done(path, task, recorded)))
    return items
