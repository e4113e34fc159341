"""Task names -> MTEB task objects: our offline tasks, MTEB's own tasks and MTEB benchmarks.

``flow-plugin eval`` and ``flow-plugin sweep`` accept any mix of

* the offline SentEval-format tasks (``SentEvalSTS13`` ...), read from a SentEval data folder;
* MTEB task names (``STSBenchmark``), as ``mteb.get_task`` knows them;
* MTEB benchmark names (``MTEB(eng, v2)``), which stand for their tasks, with the splits and
  languages the benchmark selects.

An unknown name is a :class:`~flow_plugin.errors.RegistryError` listing close names from all
three kinds (and the user task files left out, or that ``$FLOW_PLUGIN_TASKS`` is not set). A task named twice (say, alone and inside a benchmark) is kept once, first wins.
"""

from __future__ import annotations

import contextlib
import difflib
import logging
import os
import warnings
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from flow_plugin.catalog.labelled_tasks import labelled_tasks, unknown_task_hint
from flow_plugin.data.roots import DATA_ENV, data_part, resolve_senteval_root
from flow_plugin.data.tasks import OFFLINE_TASKS
from flow_plugin.errors import DataFolderError, RegistryError
from flow_plugin.integrations.mteb.hook import register


def known_task_names() -> list[str]:
    """Every name :func:`resolve_tasks` accepts: offline tasks, MTEB tasks, benchmark names.

    Examples
    --------
    >>> names = known_task_names()
    >>> "SentEvalSTS13" in names and "STSBenchmark" in names and "MTEB(eng, v2)" in names
    True
    """
    import mteb  # heavy: not to parse the command line

    names = list(OFFLINE_TASKS)
    with quiet_mteb():  # listing names only: no "task X is in beta" warning for each of ~250 tasks
        every = mteb.get_tasks(exclude_superseded=False, exclude_private=False, exclude_beta=False)
        names += [task.metadata.name for task in every]
        names += [benchmark.name for benchmark in mteb.get_benchmarks()]
    return list(dict.fromkeys(names))


@contextlib.contextmanager
def quiet_mteb() -> Iterator[None]:
    """While the block runs, MTEB's warnings (``warnings`` and its ``mteb`` loggers below ERROR)
    are not shown: listing every task instantiates each one, and MTEB logs a warning for every
    task in beta (about 250 lines before a one-line "unknown task" error)."""
    mteb_logger = logging.getLogger("mteb")
    level = mteb_logger.level
    mteb_logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        mteb_logger.setLevel(level)


def unknown_task_message(name: str, candidates: Iterable[str] | None = None) -> str:
    """The error text for a name that is no task and no benchmark, with close names.

    Examples
    --------
    >>> unknown_task_message("SentEvalSTS31", ["SentEvalSTS13", "STS13"])
    "unknown task or benchmark 'SentEvalSTS31'. Close names: SentEvalSTS13."
    """
    pool = list(candidates) if candidates is not None else known_task_names()
    close = difflib.get_close_matches(name, pool, n=4, cutoff=0.6)
    if not close:  # case slips: "sts13" -> "STS13"
        close = [candidate for candidate in pool if candidate.lower() == name.lower()]
    hint = f" Close names: {', '.join(close)}." if close else ""
    return f"unknown task or benchmark {name!r}.{hint}"


def _mteb_tasks(name: str) -> list[Any] | None:
    """MTEB's task of that name (alone in the list), else the tasks of MTEB's benchmark of that name, else None."""
    import mteb  # heavy: not to parse the command line

    try:
        return [mteb.get_task(name)]
    except (KeyError, ValueError):
        pass
    try:
        # quiet: some mteb releases (2.18.11) build every benchmark, warning for each beta task, before they
        # answer that a name is none of them
        with quiet_mteb():
            benchmark = mteb.get_benchmark(name)
    except (KeyError, ValueError):
        return None
    return list(benchmark.tasks)


def offline_data_root(data: str | os.PathLike[str] | None, offline: Sequence[str]) -> Path:
    """The SentEval folder the offline tasks ``offline`` read: ``data``, else
    the data root's ``senteval/`` (``$FLOW_PLUGIN_SHARED_DATA``); an error naming the tasks when neither is given."""
    folder = data if data is not None else data_part("senteval", beside_checkout=False)
    if folder is None:
        raise DataFolderError(
            f"the offline task(s) {', '.join(offline)} read a SentEval data folder: give --data DIR "
            f"(the folder containing downstream/, or the data folder holding senteval/) or set {DATA_ENV}"
        )
    return resolve_senteval_root(folder)


def _labelled_root(data: str | os.PathLike[str]) -> Path:
    """The data root the labelled tasks read, from ``--data``: the parent of the SentEval folder when ``data`` is
    one of the forms :func:`~flow_plugin.data.roots.resolve_senteval_root` accepts (the data root, the SentEval
    folder, its ``downstream/``), else the folder itself (a root without SentEval's sets)."""
    folder = Path(data).expanduser()
    try:
        return resolve_senteval_root(folder).parent
    except DataFolderError:
        return folder


def resolve_tasks(names: Sequence[Any], data: str | os.PathLike[str] | None = None) -> list[Any]:
    """MTEB task objects for ``names`` (names or task objects, kept as given), in order.

    Offline tasks read ``data`` (the STS sets: its SentEval folder, else the data root's ``senteval/``; the labelled
    tasks: the data root it is or holds, else the configured one); MTEB's tasks load their data when evaluated.
    Every unknown name is reported, with close names, before anything is loaded.
    """
    register()  # idempotent: the offline tasks are in MTEB's registry even with the hook off
    offline = [name for name in names if isinstance(name, str) and name in OFFLINE_TASKS]
    root = offline_data_root(data, offline) if offline else None
    labelled = labelled_tasks() if data is not None else {}  # given a data root, they read it (not the default)
    labelled_root = _labelled_root(data) if data is not None else None
    resolved: list[Any] = []
    unknown: list[str] = []
    for name in names:
        if not isinstance(name, str):
            resolved.append(name)
        elif name in OFFLINE_TASKS or name in labelled:
            from flow_plugin.integrations.mteb import labelled_tasks as tables, sts_tasks  # heavy: MTEB

            resolved.append(sts_tasks.get_offline_task(name, data_dir=root) if name in OFFLINE_TASKS
                            else tables.task_class(name)(data_dir=labelled_root))
        elif (tasks := _mteb_tasks(name)) is not None:
            resolved.extend(tasks)
        else:
            unknown.append(name)
    if unknown:
        candidates = known_task_names()
        raise RegistryError(" ".join(unknown_task_message(name, candidates) for name in unknown) + unknown_task_hint())
    unique: dict[str, Any] = {}
    for task in resolved:
        unique.setdefault(task.metadata.name, task)
    return list(unique.values())
