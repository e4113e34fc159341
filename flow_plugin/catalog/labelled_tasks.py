"""Labelled tasks of every MTEB type, defined by configuration: one TOML entry per task.

An entry names the task, its MTEB type, where its files are and how to read them (a *source*,
:mod:`flow_plugin.data.labelled`), how to split a set that ships without a test split, and the
metadata MTEB shows. :mod:`flow_plugin.integrations.mteb.labelled_tasks` turns each entry into an
ordinary MTEB task class of that type, evaluated by MTEB's own evaluator.

Where entries come from, in order:

1. the built-in entries, ``labelled_tasks.toml`` next to this module: the offline tasks of real
   data (MR, CR, SUBJ, MPQA, SST-2, TREC, Banking77 classification; Twitter URL Corpus, MRPC, SICK-E,
   QNLI pair classification; Banking77, TREC and STS-B-source clustering; QNLI, Twitter URL Corpus and
   SICK reranking; QNLI, MRPC, STS-B and Banking77 retrieval). Their file names are relative to the
   *data root*, the folder that holds ``senteval/``, ``glue/`` and ``mteb/``
   (:func:`flow_plugin.data.roots.data_root`);
2. every TOML file listed in ``$FLOW_PLUGIN_TASKS`` (separated by ``os.pathsep``; a folder stands
   for its ``*.toml`` files): a user's own tasks. Their file names are relative to the entry's
   ``data_dir``, itself relative to the TOML file's folder (default: that folder).

A file is a list of ``[[task]]`` tables; docs/tasks.md documents every key. A file that cannot be read or
validated is left out of the catalogue and every other task stays available; so is a second definition of a
name, or a name of the offline STS tasks. Each such problem is a warning (once per process), and an unknown
task name's error lists them (:func:`unknown_task_hint`), with a reminder of ``$FLOW_PLUGIN_TASKS`` when it
is not set.

Examples
--------
>>> entry = labelled_task("FlowPluginMRClassification")
>>> entry.type, entry.main_score, entry.split.test_fraction, entry.split.seed
('Classification', 'accuracy', 0.2, 1111)
>>> "FlowPluginQNLIReranking" in labelled_task_names()
True
"""

from __future__ import annotations

import functools
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from flow_plugin._io import read_toml
from flow_plugin.data.tasks import OFFLINE_TASKS
from flow_plugin.data.labelled import WHOLE_SET, Source, source_files
from flow_plugin.data.roots import DATA_ENV
from flow_plugin.errors import DataFolderError, RegistryError

logger = logging.getLogger(__name__)

#: the environment variable listing a user's task files
TASKS_ENV = "FLOW_PLUGIN_TASKS"
BUILT_IN_FILE = Path(__file__).with_name("labelled_tasks.toml")

TaskType = Literal["Classification", "PairClassification", "Clustering", "Reranking", "Retrieval"]
#: each type's main score when an entry names none: MTEB's usual choice for the type
DEFAULT_MAIN_SCORE: dict[str, str] = {
    "Classification": "accuracy",
    "PairClassification": "max_ap",
    "Clustering": "v_measure",
    "Reranking": "map_at_1000",
    "Retrieval": "ndcg_at_10",
}
#: the types that rank documents for queries
RANKING_TYPES: tuple[str, ...] = ("Reranking", "Retrieval")
#: the roles each type reads from its source (:data:`flow_plugin.data.labelled.ROLES`)
REQUIRED_ROLES: dict[str, tuple[str, ...]] = {
    "Classification": ("text", "label"),
    "PairClassification": ("text1", "text2", "label"),
    "Clustering": ("text", "label"),
    "Reranking": ("query", "document", "label"),
    "Retrieval": ("query", "document", "label"),
}


class SplitRule(BaseModel):
    """How a set without a test split is divided: a stratified, seeded share of it becomes ``test``
    and the rest ``train`` (scikit-learn's ``train_test_split``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    method: Literal["stratified"] = "stratified"
    test_fraction: float = Field(gt=0, lt=1)
    seed: int
    #: the source split divided (``all`` for a ``lines-per-label`` source)
    divide: str = WHOLE_SET


class TaskEntry(BaseModel):
    """One ``[[task]]`` table, validated (unknown keys are errors)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=r"^[A-Za-z][A-Za-z0-9_.-]*$")
    type: TaskType
    description: str = Field(min_length=1)
    #: the collection the task's text comes from; tasks built on one dataset share it ("" : the task's own name)
    dataset: str = ""
    reference: str
    source: Source
    split: Optional[SplitRule] = None
    main_score: str = ""
    #: the split MTEB scores (the others are unlabeled fitting text)
    eval_split: str = "test"
    #: files relative to this folder (relative itself to the TOML file's folder; built-ins: to the data root)
    data_dir: Optional[str] = None
    # --- type options (None: MTEB's default for the type)
    #: classification: training items drawn per label in each experiment, and the number of experiments
    samples_per_label: Optional[int] = Field(default=None, ge=1)
    n_experiments: Optional[int] = Field(default=None, ge=1)
    #: clustering: each distinct (text, label) once; items per clustering experiment (None: all items)
    distinct: bool = False
    max_documents_per_cluster: Optional[int] = Field(default=None, ge=2)
    #: reranking: candidates per query (the query's own rows first, then a TF-IDF first stage's top documents)
    candidates: int = Field(default=20, ge=2)
    #: reranking, retrieval: the documents from a second source (roles document, label), each relevant to the
    #: queries of the main source (roles query, label) that share its label
    documents: Optional[Source] = None
    #: reranking, retrieval: a query never ranks a document of its own text (MTEB's ignore_identical_ids)
    ignore_identical: bool = False
    # --- MTEB metadata
    date: tuple[str, str]
    domains: list[str] = []
    task_subtypes: list[str] = []
    license: str = "not specified"
    annotations_creators: str = "human-annotated"
    sample_creation: str = "found"
    bibtex_citation: str = ""
    # --- where the entry came from (set by the loader, not by the file)
    origin: Path = Field(default=BUILT_IN_FILE, exclude=True)
    built_in: bool = Field(default=True, exclude=True)

    @model_validator(mode="before")
    @classmethod
    def _default_main_score(cls, values: Any) -> Any:
        if isinstance(values, dict) and not values.get("main_score") and values.get("type") in DEFAULT_MAIN_SCORE:
            values = {**values, "main_score": DEFAULT_MAIN_SCORE[values["type"]]}
        return values

    @model_validator(mode="after")
    def _roles_fit_the_type(self) -> TaskEntry:
        if self.documents is not None:
            self._documents_fit()
        else:
            roles = _source_roles(self.source)
            missing = [role for role in REQUIRED_ROLES[self.type] if role not in roles]
            if missing:
                raise ValueError(f"a {self.type} task reads the roles {list(REQUIRED_ROLES[self.type])}; its source "
                                 f"gives {sorted(roles)} (missing {missing})")
        if self.ignore_identical and self.type not in RANKING_TYPES:
            raise ValueError(f"ignore_identical is for Reranking and Retrieval tasks, not {self.type}; remove it")
        splits = _source_splits(self.source)
        produced = (set(splits) - {self.split.divide}) | {"train", "test"} if self.split else set(splits)
        if self.split is not None and self.split.divide not in splits:
            raise ValueError(f"split.divide is {self.split.divide!r}, but the source's splits are {sorted(splits)}")
        if self.eval_split not in produced:
            raise ValueError(f"eval_split {self.eval_split!r} is not among the task's splits {sorted(produced)}; "
                             "add a split rule ([task.split]) for a set without a test split")
        if self.type == "Classification" and "train" not in produced:
            raise ValueError(f"a Classification task trains on a 'train' split; the task's splits are {sorted(produced)}")
        return self

    def _documents_fit(self) -> None:
        """A task with ``documents``: a ranking type without a split rule; queries and labels from the source,
        documents and labels from ``documents``, over the same splits."""
        if self.type not in RANKING_TYPES:
            raise ValueError(f"documents is for Reranking and Retrieval tasks, not {self.type}; remove it")
        if self.split is not None:
            raise ValueError("a split rule cannot divide a task whose documents come from a second source; "
                             "give both sources their splits")
        for table, roles, wanted in (("source", _source_roles(self.source), {"query", "label"}),
                                     ("documents", _source_roles(self.documents), {"document", "label"})):
            if roles != wanted:
                raise ValueError(f"with documents, the task's {table} gives the roles {sorted(wanted)} (a document is "
                                 f"relevant to the queries that share its label); it gives {sorted(roles)}")
        splits, document_splits = _source_splits(self.source), _source_splits(self.documents)
        if splits != document_splits:
            raise ValueError(f"the source's splits {sorted(splits)} and the documents' {sorted(document_splits)} "
                             "differ: a split's queries rank the documents of the split of the same name")

    def files(self) -> list[str]:
        """Every file name the entry reads (as written): its source's, then its documents'."""
        sources = [self.source] if self.documents is None else [self.source, self.documents]
        return [name for source in sources for name in source_files(source)]

    def base_folder(self, root: Path | None) -> Path:
        """The folder relative file names are read from: the data root (built-ins) or the TOML file's folder,
        then ``data_dir``."""
        if self.built_in:
            if root is None:
                raise DataFolderError(
                    f"task {self.name} reads the shared data folder (senteval/, glue/, mteb/): pass data_dir=..., "
                    f"or set {DATA_ENV}=<that folder>")
            base = root
        else:
            base = self.origin.parent
        return base / self.data_dir if self.data_dir else base


def _source_roles(source: Any) -> set[str]:
    if hasattr(source, "columns"):
        return set(source.columns)
    if hasattr(source, "pattern"):
        return set(re.compile(source.pattern).groupindex)
    if source.format == "lines-per-label":
        return {"text", "label"}
    return {role for by_role in source.splits.values() for role in by_role}


def _source_splits(source: Any) -> set[str]:
    return {WHOLE_SET} if source.format == "lines-per-label" else set(source.splits)


# ----------------------------------------------------------------------------- loading
def user_task_files(problems: list[str] | None = None) -> list[Path]:
    """The TOML files named by ``$FLOW_PLUGIN_TASKS`` (a folder stands for its ``*.toml``). A name that is
    neither a file nor a folder is an error, or, given a ``problems`` list, a line appended to it."""
    files: list[Path] = []
    for item in os.environ.get(TASKS_ENV, "").split(os.pathsep):
        if not item.strip():
            continue
        path = Path(item.strip()).expanduser()
        if path.is_dir():
            files.extend(sorted(path.glob("*.toml")))
        elif path.is_file():
            files.append(path)
        else:
            problem = f"${TASKS_ENV} names {path}, which is neither a TOML file nor a folder"
            if problems is None:
                raise RegistryError(problem)
            problems.append(problem)
    return files


def parse_task_file(path: str | os.PathLike[str], *, built_in: bool = False) -> list[TaskEntry]:
    """The entries of one TOML file (``[[task]]`` tables); errors name the file, the task and the keys."""
    path = Path(path)
    table = read_toml(path, "task file", RegistryError)
    unknown = sorted(set(table) - {"task"})
    if unknown:
        raise RegistryError(f"{path}: unknown top-level key(s) {unknown}; a task file holds [[task]] tables")
    entries = []
    for number, item in enumerate(table.get("task", []), start=1):
        if not isinstance(item, dict):
            raise RegistryError(f"{path}: task {number} is not a table")
        entries.append(parse_task_entry(item, origin=path, built_in=built_in, where=f"{path}: task {number}"))
    return entries


def parse_task_entry(table: dict[str, Any], *, origin: Path | None = None, built_in: bool = False,
                     where: str = "task") -> TaskEntry:
    """One task table (a TOML ``[[task]]`` or a dict written in Python) validated into a :class:`TaskEntry`;
    a user's entry (``built_in=False``) reads its files relative to ``origin``'s folder (default: the current one)."""
    name = table.get("name", "?")
    try:
        return TaskEntry.model_validate({**table, "origin": origin or Path.cwd() / "tasks.toml", "built_in": built_in})
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(map(str, item['loc'])) or 'task'}: {item['msg']}" for item in error.errors())
        raise RegistryError(f"{where} ({name}): {problems}") from None


@functools.lru_cache(maxsize=1)
def _built_in_entries() -> tuple[TaskEntry, ...]:
    return tuple(parse_task_file(BUILT_IN_FILE, built_in=True))


@dataclass(frozen=True)
class Catalogue:
    """The labelled tasks found now: name -> entry, and one line per thing left out (a file that cannot be read or
    validated, a name defined twice or taken by an offline STS task)."""

    entries: dict[str, TaskEntry]
    problems: tuple[str, ...]


def load_catalogue() -> Catalogue:
    """The built-in entries, then the user's (``$FLOW_PLUGIN_TASKS``, in order). A broken file is left out whole;
    of a name defined twice, the first definition stays."""
    problems: list[str] = []
    entries: dict[str, TaskEntry] = {entry.name: entry for entry in _built_in_entries()}
    for path in user_task_files(problems):
        try:
            found = parse_task_file(path)
        except RegistryError as error:
            problems.append(f"{error} (the file is left out)")
            continue
        for entry in found:
            if entry.name in OFFLINE_TASKS:
                problems.append(f"task {entry.name} ({path}): the name of a flow-plugin STS task; rename yours "
                                "(it is left out)")
            elif entry.name in entries:
                problems.append(f"task {entry.name} is defined twice: in {entries[entry.name].origin} and in {path}; "
                                "rename one (the second is left out)")
            else:
                entries[entry.name] = entry
    return Catalogue(entries, tuple(problems))


_SAID: set[str] = set()


def warn_once(message: str) -> None:
    """A warning of the task catalogue, logged once per process."""
    if message not in _SAID:
        _SAID.add(message)
        logger.warning("%s", message)


def labelled_tasks() -> dict[str, TaskEntry]:
    """name -> entry: the built-in entries, then the user's (``$FLOW_PLUGIN_TASKS``); what is left out is a
    warning (:func:`load_catalogue`)."""
    catalogue = load_catalogue()
    for problem in catalogue.problems:
        warn_once(problem)
    return catalogue.entries


def unknown_task_hint() -> str:
    """What an error about an unknown task name adds: the task files left out of the catalogue and why, and,
    when ``$FLOW_PLUGIN_TASKS`` is not set, that a user's own task is found through it ("" when neither)."""
    notes = list(load_catalogue().problems)
    if not os.environ.get(TASKS_ENV, "").strip():
        notes.append(f"a task of your own is found through ${TASKS_ENV}, which is not set: set it to the task's "
                     "TOML file or folder")
    return "".join(f" ({note})" for note in notes)


def labelled_task(name: str) -> TaskEntry:
    """The entry named ``name``; an error lists the known names (and :func:`unknown_task_hint`)."""
    entries = labelled_tasks()
    if name not in entries:
        raise RegistryError(f"unknown labelled task {name!r}; known: {', '.join(entries)}{unknown_task_hint()}")
    return entries[name]


def labelled_task_names() -> tuple[str, ...]:
    """Every labelled task's name, built-ins first, in file order."""
    return tuple(labelled_tasks())


__all__ = [
    "BUILT_IN_FILE",
    "DEFAULT_MAIN_SCORE",
    "RANKING_TYPES",
    "REQUIRED_ROLES",
    "TASKS_ENV",
    "Catalogue",
    "SplitRule",
    "TaskEntry",
    "labelled_task",
    "labelled_task_names",
    "labelled_tasks",
    "load_catalogue",
    "parse_task_entry",
    "parse_task_file",
    "unknown_task_hint",
    "user_task_files",
    "warn_once",
]
