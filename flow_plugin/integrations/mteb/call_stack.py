"""Which task, and which result folder, an ``encode()`` call serves.

MTEB gives ``encode()`` only the task's metadata, and no hook before a task starts or after
its results are saved. Two things are needed beyond that, and both are found in the call stack
of the running evaluation, where MTEB holds them:

- the task object itself (:func:`running_task`): ``AbsTask.evaluate`` runs with the task as
  ``self``, and the metadata ``encode()`` receives is that task's ``metadata``. This finds
  registry tasks and task objects handed to ``mteb.evaluate`` directly alike, and it is the
  very instance being evaluated, with its data already loaded (a second copy from
  ``mteb.get_task`` would load a retrieval corpus twice, and would not know a task's own
  arguments, such as an offline task's data folder);
- the ``ResultCache`` and ``ModelMeta`` of the run (:func:`result_destination`): ``mteb.evaluate``
  passes both down to the function that evaluates one task (a frame of an ``mteb`` module), so
  the fit records can be written next to the result file (``mteb run --output-folder`` too).

Reading frames is CPython's ``sys._getframe``; it only reads. Where it finds nothing (a call
outside ``mteb.evaluate``, ``cache=None``, a future mteb passing them differently), the callers
fall back: ``model.prepare_task(task)`` or MTEB's task registry for the task, and
``model.write_fit_records(output_folder)`` for the records.
"""

from __future__ import annotations

import sys
from types import FrameType
from typing import Any

from mteb.abstasks import AbsTask
from mteb.cache import ResultCache
from mteb.models.model_meta import ModelMeta


def _frames(start: FrameType | None) -> Any:
    frame = start
    while frame is not None:
        yield frame
        frame = frame.f_back


def running_task(task_metadata: Any) -> AbsTask | None:
    """The task object being evaluated whose metadata is ``task_metadata`` (the innermost one;
    by identity, else by name), or ``None`` outside an evaluation."""
    by_name = None
    for frame in _frames(sys._getframe(1)):
        candidate = frame.f_locals.get("self")
        if not isinstance(candidate, AbsTask):
            continue
        metadata = getattr(candidate, "metadata", None)
        if metadata is task_metadata:
            return candidate
        if by_name is None and getattr(metadata, "name", None) == getattr(task_metadata, "name", ""):
            by_name = candidate
    return by_name


def result_destination() -> tuple[ResultCache, ModelMeta] | None:
    """The ``ResultCache`` and ``ModelMeta`` of the running ``mteb.evaluate`` (the innermost
    frame of an mteb module that holds the run's ``ModelMeta``), or ``None`` when it runs
    without a cache or outside ``mteb.evaluate``."""
    for frame in _frames(sys._getframe(1)):
        if not str(frame.f_globals.get("__name__", "")).startswith("mteb."):
            continue
        values = list(frame.f_locals.values())
        meta = next((value for value in values if isinstance(value, ModelMeta)), None)
        if meta is None:
            continue
        cache = next((value for value in values if isinstance(value, ResultCache)), None)
        return (cache, meta) if cache is not None else None
    return None
