"""Offline MTEB tasks of every type, built from labelled-task entries (:mod:`flow_plugin.catalog.labelled_tasks`).

One generic class per MTEB type, each a subclass of MTEB's own abstract task, so MTEB's own evaluator
scores it; a TOML entry (or a dict in Python) becomes a task class of its type with
:func:`task_class`:

======================  =================================  =====================================================
type                    base class                         dataset built by ``load_data``
======================  =================================  =====================================================
Classification          ``AbsTaskClassification``          split -> (``text``, ``label``); labels coded 0..k-1
PairClassification      ``AbsTaskPairClassification``      split -> (``sentence1``, ``sentence2``, ``labels``)
Clustering              ``AbsTaskClustering`` (fast)       split -> (``sentences``, ``labels``; a list per item
                                                           for hierarchical labels), every item embedded
Retrieval               ``AbsTaskRetrieval``               every distinct query (MTEB scores those with a
                                                           relevant document) and document, the relevant pairs
Reranking               ``AbsTaskRetrieval`` (type         as Retrieval, plus ``top_ranked``: each query's own
                        "Reranking")                       rows' documents, then a TF-IDF first stage's top ones
======================  =================================  =====================================================

A source without a test split is divided by the entry's split rule (stratified, seeded). The data
revision is the sha256 of the files read and of the settings that shape the data.

While MTEB scores a split, each task captures what MTEB's evaluator computed per item (the predictions
MTEB would save to a prediction folder, or, for retrieval, ``task_specific_scores``' per-query values: the
capture mixins of :mod:`.compat`, where every MTEB internal the adapter touches lives) and writes it next to the
result (:mod:`flow_plugin.results.items`) when it runs inside ``mteb.evaluate`` with a result folder.

``load_data`` reads no label into the text a calibrator is fitted on: the "target" corpus
(:mod:`.corpus`) takes the text columns only, and a reranking task's candidates come from the text alone.

>>> cls = task_class("FlowPluginTRECClassification")
>>> cls.metadata.type, cls.metadata.main_score, cls.__mro__[1].__name__
('Classification', 'accuracy', 'LabelledClassificationTask')
"""

from __future__ import annotations

import contextlib
import logging
import os
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from datasets import Dataset, DatasetDict
from mteb.abstasks.classification import AbsTaskClassification
from mteb.abstasks.clustering import AbsTaskClustering
from mteb.abstasks.pair_classification import AbsTaskPairClassification
from mteb.abstasks.retrieval import AbsTaskRetrieval
from mteb.abstasks.task_metadata import TaskMetadata

from flow_plugin.catalog.labelled_tasks import (
    RANKING_TYPES,
    TaskEntry,
    labelled_task,
    labelled_tasks,
    parse_task_entry,
    warn_once,
)
from flow_plugin.data.labelled import (
    LabelledSplits,
    attach_documents,
    check_classes,
    check_clusters,
    check_pairs,
    files_fingerprint,
    read_source,
    resolve_file,
    select_rows,
    stratified_split,
)
from flow_plugin.data.roots import data_root
from flow_plugin.results.items import holds_score, write_items
from flow_plugin.data.task_tables import (RankingData, cluster_items, label_codes, label_levels,
                                          labels_with_few_items, ranking_data)
from flow_plugin.errors import DataFolderError, InputError, RegistryError
from flow_plugin.integrations.mteb.compat import (FastLabelClassification, PredictionCapture, QueryScoreCapture,
                                                  RecordedClusterDraws, registered_task, track_task)

logger = logging.getLogger(__name__)

#: task name -> the most recently loaded instance (how a model finds the text of a task given its own data_dir)
_LOADED: dict[str, weakref.ReferenceType[Any]] = {}


def loaded_task(name: str) -> Any:
    """The most recently loaded labelled task of this name in this process, or None."""
    reference = _LOADED.get(name)
    return reference() if reference is not None else None


class ItemCapture:
    """Writes what a task captured per item while MTEB scored it (``captured``, kept by :mod:`.compat`'s capture
    mixins; :meth:`item_arrays`, per type) next to the result (:mod:`flow_plugin.results.items`)."""

    captured: Any = None

    def item_arrays(self, data_split: Any, hf_split: str) -> tuple[dict[str, Any], dict[str, Any]]:  # pragma: no cover
        """(arrays, extra meta) of the captured per-item data; per type."""
        raise NotImplementedError

    def keep_items(self, data_split: Any, hf_split: str, hf_subset: str, scores: dict[str, Any]) -> None:
        """Keep the captured per-item data (``last_items``), to write beside the result when MTEB saves it
        (:meth:`write_beside`)."""
        arrays, extra = self.item_arrays(data_split, hf_split)
        self.last_items = (arrays, extra)
        main = self.metadata.main_score  # type: ignore[attr-defined]
        if main in scores:
            self.__dict__.setdefault("pending_items", {})[(hf_split, str(hf_subset))] = (float(scores[main]), arrays,
                                                                                        extra)

    def write_beside(self, result_path: Path, task_result: Any) -> None:
        """Write the per-item data of each split MTEB just saved at ``result_path`` whose main score is the one it
        was captured with (what another result captured is never written beside this one)."""
        main = self.metadata.main_score  # type: ignore[attr-defined]
        for (split, subset), (score, arrays, extra) in self.__dict__.pop("pending_items", {}).items():
            if holds_score(task_result, split, subset, main, score):
                write_items(result_path, task=self.metadata.name, task_type=str(self.metadata.type),  # type: ignore[attr-defined]
                            split=split, hf_subset=subset, dataset_revision=self.metadata.revision,  # type: ignore[attr-defined]
                            main_score=main, main_score_value=score, arrays=arrays, extra=extra)

    def __copy__(self) -> Any:
        """A copy (another evaluator seed's twin) shares the loaded data and starts with nothing captured."""
        twin = object.__new__(type(self))
        twin.__dict__.update({key: value for key, value in self.__dict__.items() if key != "pending_items"})
        return twin


class RetrievalItems(QueryScoreCapture, ItemCapture):
    """Per-query capture for a retrieval or reranking task (``AbsTaskRetrieval``): pytrec_eval's per-query
    values (:class:`~flow_plugin.integrations.mteb.compat.QueryScoreCapture`)."""

    def item_arrays(self, data_split: Any, hf_split: str) -> tuple[dict[str, Any], dict[str, Any]]:
        per_query = self.captured
        query_ids = sorted(per_query, key=lambda name: (len(name), name))
        measures = sorted({measure for values in per_query.values() for measure in values})
        arrays: dict[str, Any] = {"query_ids": np.asarray(query_ids)}
        for measure in measures:
            arrays[measure] = np.asarray([per_query[query].get(measure, 0.0) for query in query_ids], dtype=np.float64)
        return arrays, {"n_queries": len(query_ids)}


#: settings whose default leaves a task's data as the format without them reads it: each enters the revision only
#: when set, so a task that does not use them keeps its revision (and the results computed with it)
_LATER_SETTINGS: dict[str, Any] = {"documents": None, "ignore_identical": False}
_LATER_SOURCE_SETTINGS: dict[str, Any] = {"label_threshold": None}


def revision_settings(entry: TaskEntry) -> dict[str, Any]:
    """The entry's settings that shape its data (JSON), part of its data revision."""
    settings = entry.model_dump(include={"type", "source", "split", "eval_split", "distinct", "candidates",
                                         *_LATER_SETTINGS}, mode="json")
    for key, default in _LATER_SETTINGS.items():
        if settings[key] == default:
            del settings[key]
    for source in (settings["source"], settings.get("documents")):
        for key, default in _LATER_SOURCE_SETTINGS.items():
            if source is not None and source.get(key) == default:
                del source[key]
    return settings


class LabelledTask(PredictionCapture, ItemCapture):
    """What every labelled task shares: reading its entry's files, the data revision, capturing per-item data."""

    entry: ClassVar[TaskEntry]

    def __init__(self, data_dir: str | os.PathLike[str] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)  # type: ignore[call-arg]
        self.data_dir = Path(data_dir).expanduser() if data_dir is not None else None
        track_task(self)  # (a result MTEB would reuse is checked against this task's data)

    # ------------------------------------------------------------------ data
    def base_folder(self) -> Path:
        """The folder the entry's relative file names are read from: a built-in entry's data root (``data_dir``,
        else :func:`~flow_plugin.data.roots.data_root`); a user's entry's own folder (its TOML file's,
        then its ``data_dir`` key), whatever the data root."""
        entry = self.entry
        if not entry.built_in:
            return entry.base_folder(None)
        if self.data_dir is not None:
            return self.data_dir / entry.data_dir if entry.data_dir else self.data_dir
        return entry.base_folder(data_root())

    @contextlib.contextmanager
    def about_this_task(self) -> Iterator[None]:
        """A data error raised in the block names the task and its file first."""
        try:
            yield
        except (DataFolderError, InputError) as error:
            raise type(error)(f"task {self.entry.name} ({self.entry.origin}): {error}") from None

    def check_files(self) -> None:
        """Every file the entry reads exists (a one-line error naming the task and the first missing file)."""
        with self.about_this_task():
            base = self.base_folder()
            for name in self.entry.files():
                path = resolve_file(name, base)
                if not path.is_file():
                    raise DataFolderError(f"data file {path} does not exist")

    def read_splits(self) -> tuple[LabelledSplits, str]:
        """(the task's splits after its split rule, the data revision)."""
        entry = self.entry
        data = read_source(entry.source, self.base_folder())
        splits = dict(data.splits)
        if entry.split is not None:
            whole = splits.pop(entry.split.divide)
            train, test = stratified_split(whole["label"], test_fraction=entry.split.test_fraction,
                                           seed=entry.split.seed)
            splits["train"], splits["test"] = select_rows(whole, train), select_rows(whole, test)
        if entry.documents is not None:
            documents = read_source(entry.documents, self.base_folder())
            splits = attach_documents(splits, documents)
            data.files += documents.files
        data.splits = splits
        return data, files_fingerprint(data.files, revision_settings(entry))

    def data_revision(self) -> str:
        """The ``dataset_revision`` a result computed now carries (reads the files)."""
        if self.data_loaded and self.metadata.revision.startswith("sha256:"):  # type: ignore[attr-defined]
            return self.metadata.revision  # type: ignore[attr-defined]
        with self.about_this_task():
            return self.read_splits()[1]

    def load_data(self, num_proc: int | None = None, **kwargs: Any) -> None:
        if self.data_loaded:  # type: ignore[attr-defined]
            return
        with self.about_this_task():  # what cannot be scored is refused here, before anything is encoded
            data, revision = self.read_splits()
            self.dataset = self.build_dataset(data.splits)
        dataset = dict(self.metadata.dataset)  # type: ignore[attr-defined]
        dataset["revision"] = revision
        self.metadata = self.metadata.model_copy(update={"dataset": dataset})  # type: ignore[attr-defined]
        self.data_loaded = True
        _LOADED[self.entry.name] = weakref.ref(self)

    def build_dataset(self, splits: dict[str, dict[str, list[Any]]]) -> Any:  # pragma: no cover -- per type
        raise NotImplementedError


# ----------------------------------------------------------------------------- one class per type
class LabelledClassificationTask(LabelledTask, FastLabelClassification, AbsTaskClassification):
    """Classification: MTEB's protocol (a logistic regression on ``samples_per_label`` train items per label,
    ``n_experiments`` times, scored on the eval split)."""

    label_names: list[str]

    def build_dataset(self, splits: dict[str, dict[str, list[Any]]]) -> DatasetDict:
        train, scored = splits["train"]["label"], splits[self.entry.eval_split]["label"]
        check_classes(train, scored, scored_split=self.entry.eval_split)
        few = labels_with_few_items(train, int(self.samples_per_label))
        if few:
            logger.warning("task %s: label(s) %s have fewer than samples_per_label = %d train items: every "
                           "experiment trains on all of them", self.entry.name,
                           ", ".join(few[:6]) + (" ..." if len(few) > 6 else ""), self.samples_per_label)
        _, names = label_codes([label for columns in splits.values() for label in columns["label"]])
        index = {name: code for code, name in enumerate(names)}
        self.label_names = names
        return DatasetDict({split: Dataset.from_dict({"text": columns["text"],
                                                      "label": [index[str(label)] for label in columns["label"]]})
                            for split, columns in splits.items()})

    def item_arrays(self, data_split: Any, hf_split: str) -> tuple[dict[str, Any], dict[str, Any]]:
        gold = np.asarray(data_split[hf_split]["label"], dtype=np.int64)
        predictions = np.asarray(self.captured, dtype=np.int64)
        return ({"gold": gold, "predictions": predictions},
                {"label_names": self.label_names, "n_experiments": int(self.n_experiments),
                 "samples_per_label": int(self.samples_per_label)})


class LabelledPairClassificationTask(LabelledTask, AbsTaskPairClassification):
    """Pair classification: MTEB's evaluator (AP, F1, accuracy at the best threshold of each similarity)."""

    def build_dataset(self, splits: dict[str, dict[str, list[Any]]]) -> DatasetDict:
        for split, columns in splits.items():
            check_pairs(columns["label"], split=split, scored=split == self.entry.eval_split)
        return DatasetDict({split: Dataset.from_dict({"sentence1": columns["text1"], "sentence2": columns["text2"],
                                                      "labels": [int(label) for label in columns["label"]]})
                            for split, columns in splits.items()})

    def item_arrays(self, data_split: Any, hf_split: str) -> tuple[dict[str, Any], dict[str, Any]]:
        scores = self.captured
        arrays = {"gold": np.asarray(data_split["labels"], dtype=np.int64)}
        for name, key in (("cosine", "cosine_scores"), ("dot", "dot_scores"), ("euclidean", "euclidean_distances"),
                          ("manhattan", "manhattan_distances"), ("similarity", "similarity_scores")):
            arrays[name] = np.asarray(scores[key])
        return arrays, {}


class LabelledClusteringTask(RecordedClusterDraws, LabelledTask, AbsTaskClustering):
    """Clustering: MTEB's fast clustering (MiniBatchKMeans per label level on ``n_clusters`` bootstrap draws),
    every item embedded; a draw holds ``max_documents_per_cluster`` items (default: as many as the split has)."""

    max_fraction_of_documents_to_embed = None
    label_levels: list[list[str]]

    def build_dataset(self, splits: dict[str, dict[str, list[Any]]]) -> DatasetDict:
        tables = {}
        for split, columns in splits.items():
            texts, labels = cluster_items(columns, distinct=self.entry.distinct)
            tables[split] = Dataset.from_dict({"sentences": texts, "labels": labels})
        check_clusters(label_levels(splits[self.entry.eval_split]["label"]), scored_split=self.entry.eval_split)
        evaluated = tables[self.entry.eval_split]
        self.max_documents_per_cluster = min(self.entry.max_documents_per_cluster or len(evaluated), len(evaluated))
        return DatasetDict(tables)

    def item_arrays(self, data_split: Any, hf_split: str) -> tuple[dict[str, Any], dict[str, Any]]:
        raw = [label if isinstance(label, list) else [label] for label in data_split["labels"]]
        levels = sorted(self.captured, key=lambda name: int(name.split()[-1]))  # "Level 0", "Level 1" ...
        if any(len(label) < len(levels) for label in raw):
            raise DataFolderError(f"task {self.entry.name}: every item needs a label at each of {len(levels)} levels")
        gold, names = [], []
        for level in range(len(levels)):
            codes, level_names = label_codes([label[level] for label in raw])
            gold.append(codes)
            names.append(level_names)
        assignments = np.asarray([self.captured[level] for level in levels], dtype=np.int64)
        draws = np.asarray(self.rng_state.drawn, dtype=np.int64).reshape(assignments.shape)
        return ({"gold": np.asarray(gold, dtype=np.int64), "draws": draws, "assignments": assignments},
                {"label_names": names, "n_experiments": int(self.n_clusters)})


def _retrieval_dataset(data: RankingData) -> dict[str, Any]:
    """MTEB 2's retrieval data of a split: queries and corpus as datasets, the relevant pairs, the candidates."""
    queries = Dataset.from_dict({"id": list(data.queries.values()), "text": list(data.queries)})
    corpus = Dataset.from_dict({"id": list(data.documents.values()), "text": list(data.documents),
                                "title": [""] * len(data.documents)})
    return {"queries": queries, "corpus": corpus, "relevant_docs": data.relevant, "top_ranked": data.top_ranked}


class LabelledRetrievalTask(RetrievalItems, LabelledTask, AbsTaskRetrieval):
    """Retrieval from (query, document, label) rows: each query with a relevant document searches every distinct
    document; MTEB's retrieval evaluator (pytrec_eval)."""

    reranking: ClassVar[bool] = False

    #: split -> its queries without a relevant document (MTEB scores only the others)
    unscored_queries: dict[str, int]

    def build_dataset(self, splits: dict[str, dict[str, list[Any]]]) -> dict[str, Any]:
        candidates = self.entry.candidates if self.reranking else None
        data = {split: ranking_data(columns, candidates, ignore_identical=self.entry.ignore_identical)
                for split, columns in splits.items()}
        self.unscored_queries = {self.entry.eval_split: _unscored_queries(self.entry, data[self.entry.eval_split])}
        return {"default": {split: _retrieval_dataset(ranked) for split, ranked in data.items()}}

    def item_arrays(self, data_split: Any, hf_split: str) -> tuple[dict[str, Any], dict[str, Any]]:
        arrays, extra = super().item_arrays(data_split, hf_split)
        return arrays, {**extra, "unscored_queries": self.unscored_queries.get(hf_split, 0)}


def _unscored_queries(entry: TaskEntry, split: RankingData) -> int:
    """How many queries of the scored split have no relevant document: MTEB leaves them out of the score (as it
    does for its own retrieval tasks); said in a log line (a warning for a user's task). None at all is an error."""
    if not split.relevant:
        raise DataFolderError(f"no query of split {entry.eval_split!r} has a relevant document (label 1): nothing to "
                              "score; check the labels (and the source's label_map)")
    if split.unscored:
        logger.log(logging.INFO if entry.built_in else logging.WARNING,
                   "task %s: %d of %d queries of split %r have no relevant document (label 1): MTEB does not score "
                   "them (as for its own retrieval tasks); they stay text to fit on", entry.name, split.unscored,
                   len(split.queries), entry.eval_split)
    return split.unscored


class LabelledRerankingTask(LabelledRetrievalTask):
    """Reranking: each query ranks only its ``top_ranked`` candidates (MTEB 2's reranking = retrieval with
    ``top_ranked``)."""

    reranking = True


BASE_CLASSES: dict[str, type[LabelledTask]] = {
    "Classification": LabelledClassificationTask,
    "PairClassification": LabelledPairClassificationTask,
    "Clustering": LabelledClusteringTask,
    "Retrieval": LabelledRetrievalTask,
    "Reranking": LabelledRerankingTask,
}


# ----------------------------------------------------------------------------- entries -> classes
def task_metadata(entry: TaskEntry) -> TaskMetadata:
    """MTEB's metadata of an entry (MTEB validates the fields; an invalid one is an error naming the task)."""
    category = "t2c" if entry.type in ("Classification", "Clustering") else "t2t"
    try:
        return TaskMetadata(
            name=entry.name, description=entry.description, reference=entry.reference,
            dataset={"path": f"flow-plugin/{entry.name}", "revision": "local-files"},
            type=entry.type, category=category, modalities=["text"], eval_splits=[entry.eval_split],
            eval_langs=["eng-Latn"], main_score=entry.main_score, date=entry.date, domains=entry.domains,
            task_subtypes=entry.task_subtypes, license=entry.license,
            annotations_creators=entry.annotations_creators, dialect=[], sample_creation=entry.sample_creation,
            bibtex_citation=entry.bibtex_citation,
        )
    except Exception as error:  # pydantic's ValidationError: name the task and its file
        raise RegistryError(f"task {entry.name} ({entry.origin}): MTEB refuses its metadata: {error}") from None


def make_task_class(entry: TaskEntry) -> type[LabelledTask]:
    """The MTEB task class of ``entry``."""
    attributes: dict[str, Any] = {"__doc__": entry.description, "__module__": __name__, "entry": entry,
                                  "metadata": task_metadata(entry)}
    if entry.type in RANKING_TYPES:
        attributes["ignore_identical_ids"] = entry.ignore_identical
    if entry.type == "Classification":
        if entry.samples_per_label is not None:
            attributes["samples_per_label"] = entry.samples_per_label
        if entry.n_experiments is not None:
            attributes["n_experiments"] = entry.n_experiments
    return type(entry.name, (BASE_CLASSES[entry.type],), attributes)


_CLASSES: dict[str, type[LabelledTask]] = {}


def task_class(entry: str | TaskEntry | dict[str, Any]) -> type[LabelledTask]:
    """The task class of an entry: a task name (built-in or ``$FLOW_PLUGIN_TASKS``), an entry, or an entry's
    table as a dict (the few lines of Python that define a task without a TOML file; its ``data_dir`` is relative
    to the current folder). A user's entry named like a task MTEB already has is refused."""
    if isinstance(entry, dict):
        entry = parse_task_entry(entry, origin=Path.cwd() / "tasks.toml")
    if isinstance(entry, str):
        entry = labelled_task(entry)
    known = _CLASSES.get(entry.name)
    if known is not None and known.entry == entry:
        return known
    taken = registered_task(entry.name)
    if not entry.built_in and taken is not None and not issubclass(taken, LabelledTask):
        raise RegistryError(f"task {entry.name} ({entry.origin}): MTEB already has a task of this name "
                            f"({taken.__module__}); rename yours")
    _CLASSES[entry.name] = make_task_class(entry)
    return _CLASSES[entry.name]


def labelled_task_classes() -> tuple[type[LabelledTask], ...]:
    """Every labelled task's class: built-in entries, then ``$FLOW_PLUGIN_TASKS``' (what the MTEB hook registers).
    An entry whose class cannot be made (a name MTEB already uses, metadata MTEB refuses) is left out, with a
    warning naming it."""
    classes = []
    for entry in labelled_tasks().values():
        try:
            classes.append(task_class(entry))
        except RegistryError as error:
            warn_once(f"{error} (it is left out)")
    return tuple(classes)


def listed_labelled_task_classes() -> tuple[type[LabelledTask], ...]:
    """The labelled task classes whose data is configured now (a user's always; the built-ins when the data
    root is found): what MTEB's full task list shows, next to the registry that holds them all."""
    root = data_root()
    return tuple(cls for cls in labelled_task_classes() if not cls.entry.built_in or root is not None)


__all__ = [
    "BASE_CLASSES",
    "ItemCapture",
    "LabelledClassificationTask",
    "LabelledClusteringTask",
    "LabelledPairClassificationTask",
    "LabelledRerankingTask",
    "LabelledRetrievalTask",
    "LabelledTask",
    "RetrievalItems",
    "labelled_task_classes",
    "listed_labelled_task_classes",
    "loaded_task",
    "make_task_class",
    "task_class",
    "task_metadata",
]
