"""The "target" fit corpus of an MTEB task: the text MTEB will encode for it, never labels.

One function per data structure of MTEB 2.x, each returning streamable
:class:`~flow_plugin.data.sampling.CorpusPart` s (one per split and side) over every split of
the task's loaded data for one subset. A part's ``side`` is the ``prompt_type`` MTEB encodes it with
(``"query"`` for queries, ``"document"`` for a retrieval corpus, a pair task's ``input1_prompt_type`` /
``input2_prompt_type``), so a model with prompts embeds the fit text as MTEB will:

=============================================  ==========================================================
task type (MTEB abstract class)                 target text
=============================================  ==========================================================
STS, PairClassification                         both sentence columns (sentence1 and sentence2)
BitextMining                                    both sentence columns; a parallel task ("eng_Latn-fra_Latn"
                                                subsets in one table) fits once on every language column,
                                                under the subset name ``"parallel"``
Retrieval, Reranking, InstructionRetrieval,     the queries (text + instruction; a dialog flattened to
InstructionReranking (AbsTaskRetrieval)         "role: content; ...") and the corpus (title + text)
Summarization                                   the human and the machine summaries (MTEB never encodes the
                                                source text)
Classification, MultilabelClassification,       the input column; Clustering's legacy layout (a list of
Regression, Clustering (fast and legacy),       sentences per row) is flattened
ZeroShotClassification                          the input column (not the candidate-label prompts: labels)
=============================================  ==========================================================

Anything else, or a task that is not text only, is a :class:`TaskCorpusError` naming the task
and its type, with the remedy (a sentence file as ``fit_corpus``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mteb.abstasks import (
    AbsTask,
    AbsTaskBitextMining,
    AbsTaskClassification,
    AbsTaskClustering,
    AbsTaskClusteringLegacy,
    AbsTaskPairClassification,
    AbsTaskRetrieval,
    AbsTaskSTS,
    AbsTaskSummarization,
    AbsTaskZeroShotClassification,
)

from flow_plugin.data.fit_corpus import EVAL_SPLITS, TARGET
from flow_plugin.data.sampling import CorpusPart
from flow_plugin.errors import FlowPluginError
from flow_plugin.integrations.mteb import compat

#: rows converted to Python strings at a time (the corpus itself is never held in full)
CHUNK_ROWS = 10_000
#: the subset name of a parallel bitext task's one fit (MTEB evaluates such a task as "parallel")
PARALLEL_SUBSET = "parallel"


class TaskCorpusError(FlowPluginError, LookupError):
    """The text of a task cannot be gathered for the "target" fit."""


@dataclass(frozen=True)
class TargetCorpus:
    """The target text of one (task, subset): where it comes from and how to stream it."""

    task: str
    task_type: str
    hf_subset: str
    parts: list[CorpusPart]
    #: the fit corpus policy that chose the splits: TARGET (every split) or EVAL_SPLITS
    policy: str = TARGET

    def describe(self) -> str:
        """E.g. "target: MockRetrievalTask/default (test/queries, test/corpus)"."""
        return f"{self.policy}: {self.task}/{self.hf_subset} ({', '.join(part.name for part in self.parts)})"


def fit_subset(task: AbsTask, hf_subset: str) -> str:
    """The subset whose fit serves an ``encode()`` call made with ``hf_subset``: a parallel
    bitext task encodes each language column under its language's name, and all of them share
    the one fit of :data:`PARALLEL_SUBSET`."""
    if isinstance(task, AbsTaskBitextMining) and task.parallel_subsets:
        return PARALLEL_SUBSET
    return hf_subset


def target_corpus(task: AbsTask, hf_subset: str, splits: Sequence[str] | None = None) -> TargetCorpus:
    """The target text of ``task`` for ``hf_subset`` (loads the task's data if needed): of every split, or of
    ``splits`` only (``fit_corpus="eval-splits"`` passes the task's ``eval_splits``)."""
    name, task_type = task.metadata.name, task.metadata.type
    if list(task.metadata.modalities) != ["text"]:
        raise TaskCorpusError(f"task {name} ({task_type}) has modalities {task.metadata.modalities}: flow-plugin "
                              "models read text only")
    if not task.data_loaded or task.dataset is None:
        task.data_loaded = False
        task.load_data()
    subset = fit_subset(task, hf_subset)
    extract = _extractor(task)
    if extract is None:
        raise TaskCorpusError(
            f"task {name} (type {task_type}, class {type(task).__name__}) has no text structure flow-plugin knows "
            "how to fit a calibrator on; load the model with fit_corpus=<a text file, one sentence per line>"
        )
    # "eval-splits" reads what MTEB scores: a retrieval split's queries without a relevant document are not
    parts = retrieval_parts(task, subset, scored_only=True) if splits is not None and extract is retrieval_parts \
        else extract(task, subset)
    if splits is not None:  # every part is named "<split>/<column>"
        parts = [part for part in parts if part.name.split("/", 1)[0] in splits]
    if not parts:
        which = "no split" if splits is None else f"no split of {', '.join(splits)}"
        raise TaskCorpusError(f"task {name} ({task_type}), subset {subset}: {which} holds any text to fit on; fit on "
                              "fit_corpus='target' or a sentence file")
    return TargetCorpus(name, str(task_type), subset, parts, TARGET if splits is None else EVAL_SPLITS)


def _extractor(task: AbsTask) -> Callable[[Any, str], list[CorpusPart]] | None:
    if isinstance(task, AbsTaskRetrieval):  # also reranking and instruction retrieval/reranking
        return retrieval_parts
    if isinstance(task, AbsTaskBitextMining):
        return bitext_parts
    if isinstance(task, AbsTaskSummarization):
        return summary_parts
    if isinstance(task, (AbsTaskSTS, AbsTaskPairClassification)):
        return pair_parts
    if isinstance(task, (AbsTaskClassification, AbsTaskClustering, AbsTaskClusteringLegacy,
                         AbsTaskZeroShotClassification)):
        return input_parts  # classification covers multilabel and regression
    return None


# ----------------------------------------------------------------------------- the data's layout
def subset_splits(task: AbsTask, hf_subset: str) -> Mapping[str, Any]:
    """split -> data of one subset: ``dataset[subset]``, or the dataset itself for a
    monolingual task stored as ``{split: Dataset}``."""
    dataset = task.dataset
    if not isinstance(dataset, Mapping):
        raise TaskCorpusError(f"task {task.metadata.name}: its data is a {type(dataset).__name__}, not split tables")
    if hf_subset in dataset and isinstance(dataset[hf_subset], Mapping):
        return dataset[hf_subset]
    if hf_subset == "default" and not task.metadata.is_multilingual:
        return dataset
    raise TaskCorpusError(f"task {task.metadata.name} has no subset {hf_subset!r}; its subsets: "
                          f"{', '.join(map(str, dataset))}")


def _rows(table: Any, columns: Sequence[str], where: str) -> Iterator[dict[str, list[Any]]]:
    """Batches (column -> values) of a datasets ``Dataset`` or of a plain dict of lists."""
    if hasattr(table, "column_names") and hasattr(table, "iter"):
        missing = [column for column in columns if column not in table.column_names]
        if missing:
            raise TaskCorpusError(f"{where}: no column(s) {missing} in the data (columns: {table.column_names})")
        yield from table.select_columns(list(columns)).iter(batch_size=CHUNK_ROWS)
    elif isinstance(table, Mapping) and all(column in table for column in columns):
        size = len(table[columns[0]])
        for start in range(0, size, CHUNK_ROWS):
            yield {column: list(table[column][start:start + CHUNK_ROWS]) for column in columns}
    else:
        raise TaskCorpusError(f"{where}: expected a table with column(s) {list(columns)}, got {type(table).__name__}")


def _flatten(values: Sequence[Any], where: str) -> list[str]:
    """Strings as they are, lists of strings flattened (legacy layouts), None left out."""
    texts: list[str] = []
    for value in values:
        if isinstance(value, str):
            texts.append(value)
        elif isinstance(value, (list, tuple)):
            texts.extend(_flatten(value, where))
        elif value is not None:
            raise TaskCorpusError(f"{where}: holds {type(value).__name__} {value!r:.60}, not text")
    return texts


def _column_part(table: Any, column: str, name: str, where: str, side: str | None = None) -> CorpusPart:
    def chunks() -> Iterator[list[str]]:
        for batch in _rows(table, [column], where):
            yield _flatten(batch[column], f"{where}, column {column!r}")

    return CorpusPart(name, chunks, side)


def _columns_parts(task: AbsTask, hf_subset: str, columns: Sequence[str],
                   sides: Sequence[str | None] | None = None) -> list[CorpusPart]:
    parts = []
    for split, table in subset_splits(task, hf_subset).items():
        where = f"task {task.metadata.name}, subset {hf_subset}, split {split}"
        parts.extend(_column_part(table, column, f"{split}/{column}", where, side)
                     for column, side in zip(columns, sides or [None] * len(columns)))
    return parts


def _side(prompt_type: Any) -> str | None:
    """The side a column is encoded as (MTEB's ``PromptType`` value), or None."""
    return getattr(prompt_type, "value", prompt_type)


def _text_column(task: AbsTask, attribute: str) -> str:
    column = getattr(task, attribute)
    if not isinstance(column, str):
        raise TaskCorpusError(f"task {task.metadata.name}: {attribute} is {column!r}, not one text column")
    return column


# ----------------------------------------------------------------------------- one function per structure
def pair_parts(task: AbsTask, hf_subset: str) -> list[CorpusPart]:
    """STS and pair classification: both sides of every pair."""
    if isinstance(task, AbsTaskSTS):
        columns = list(task.column_names)
    else:
        columns = [_text_column(task, "input1_column_name"), _text_column(task, "input2_column_name")]
    if not all(isinstance(column, str) for column in columns):
        raise TaskCorpusError(f"task {task.metadata.name}: pair columns {columns} are not text columns")
    sides = [_side(getattr(task, "input1_prompt_type", None)), _side(getattr(task, "input2_prompt_type", None))]
    return _columns_parts(task, hf_subset, columns, sides)


def input_parts(task: AbsTask, hf_subset: str) -> list[CorpusPart]:
    """Classification, multilabel, regression, clustering (fast and legacy), zero-shot: the
    input column (never the labels)."""
    return _columns_parts(task, hf_subset, [_text_column(task, "input_column_name")])


def summary_parts(task: AbsTask, hf_subset: str) -> list[CorpusPart]:
    """Summarization: the human and the machine summaries, the text MTEB compares."""
    columns = [_text_column(task, "human_summaries_column_name"), _text_column(task, "machine_summaries_column_name")]
    return _columns_parts(task, hf_subset, columns)


def bitext_parts(task: AbsTask, hf_subset: str) -> list[CorpusPart]:
    """Bitext mining: both sentence columns; for a parallel task, every language column of
    every split (one fit for all its language pairs)."""
    if hf_subset != PARALLEL_SUBSET:
        return _columns_parts(task, hf_subset, ["sentence1", "sentence2"])
    languages = list(dict.fromkeys(language for pair in task.hf_subsets for language in pair.split("-")))
    parts = []
    for split, table in task.dataset.items():
        where = f"task {task.metadata.name}, split {split}"
        parts.extend(_column_part(table, language, f"{split}/{language}", where) for language in languages)
    return parts


def retrieval_parts(task: AbsTask, hf_subset: str, scored_only: bool = False) -> list[CorpusPart]:
    """Retrieval and reranking (plain, with instructions, dialogs): the queries and the corpus
    of every split, as the model reads them; ``scored_only``: only the queries MTEB scores (those
    with a relevant document)."""
    if hasattr(task, "queries") and hasattr(task, "corpus"):  # a task still in MTEB 1's layout
        task.convert_v1_dataset_format_to_v2(num_proc=None)
    parts = []
    for split, data in subset_splits(task, hf_subset).items():
        where = f"task {task.metadata.name}, subset {hf_subset}, split {split}"
        if not isinstance(data, Mapping) or "queries" not in data or "corpus" not in data:
            raise TaskCorpusError(f"{where}: expected MTEB 2 retrieval data (queries, corpus), got {type(data).__name__}")
        queries = data["queries"]
        if scored_only and data.get("relevant_docs") is not None:
            queries = compat.scored_queries(data["relevant_docs"], queries)
        parts.append(CorpusPart(f"{split}/queries", _query_chunks(queries, where), "query"))
        parts.append(CorpusPart(f"{split}/corpus", _document_chunks(data["corpus"], where), "document"))
    return parts


def _document_chunks(corpus: Any, where: str) -> Callable[[], Iterator[list[str]]]:
    columns = ["text", "title"] if "title" in getattr(corpus, "column_names", corpus) else ["text"]

    def chunks() -> Iterator[list[str]]:
        for batch in _rows(corpus, columns, f"{where}, corpus"):
            titles = batch.get("title") or [None] * len(batch["text"])
            yield [document_text(text, title) for text, title in zip(batch["text"], titles)]

    return chunks


def _query_chunks(queries: Any, where: str) -> Callable[[], Iterator[list[str]]]:
    columns = ["text", "instruction"] if "instruction" in getattr(queries, "column_names", queries) else ["text"]

    def chunks() -> Iterator[list[str]]:
        for batch in _rows(queries, columns, f"{where}, queries"):
            instructions = batch.get("instruction") or [None] * len(batch["text"])
            yield [query_text(text, instruction, f"{where}, queries") for text, instruction in
                   zip(batch["text"], instructions)]

    return chunks


def document_text(text: str, title: str | None) -> str:
    """A corpus entry as the model reads it: title and text joined, stripped.

    Examples
    --------
    >>> document_text("A passage. ", "Title"), document_text(" A passage.", "")
    ('Title A passage.', 'A passage.')
    """
    return f"{title} {text}".strip() if title else text.strip()


def query_text(text: Any, instruction: str | None, where: str = "query") -> str:
    """A query as the model reads it: its text then its instruction; a dialog (list of turns)
    flattened to "role: content; ..." with the instruction in front.

    Examples
    --------
    >>> query_text("what is flow?", "Retrieve a passage.")
    'what is flow? Retrieve a passage.'
    >>> query_text([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}], None)
    'user: hi; assistant: hello'
    """
    if isinstance(text, str):
        return text if instruction is None else f"{text} {instruction}"
    if isinstance(text, list) and text:
        if all(isinstance(turn, str) for turn in text):
            dialog = "; ".join(text)
        elif all(isinstance(turn, Mapping) and "role" in turn and "content" in turn for turn in text):
            dialog = "; ".join(f"{turn['role']}: {turn['content']}" for turn in text)
        else:
            raise TaskCorpusError(f"{where}: a dialog must be a list of strings or of {{role, content}} turns")
        return dialog if instruction is None else f"{instruction} {dialog}"
    raise TaskCorpusError(f"{where}: holds {type(text).__name__} {text!r:.60}, not a query")
