"""The tables a labelled task is scored on, per MTEB task type, from the columns of :mod:`.labelled`.

:func:`label_codes` numbers classification and clustering labels; :func:`cluster_items` flattens a
clustering split into (text, label) items; :func:`ranking_data` turns (query, document, label) rows into
the queries, documents and relevant pairs of a retrieval task and, for reranking, each query's candidates
(its own rows' documents, then a TF-IDF first stage's best others); relevance comes from a row's 0/1 label or
from a label that a query and a document share. The MTEB task classes
(:mod:`flow_plugin.integrations.mteb.labelled_tasks`) wrap these in MTEB's dataset formats. Nothing here
imports MTEB, and no label reaches the text a calibrator is fitted on: queries, documents and candidates
come from the text alone.

>>> label_codes(["b", "a", "10", "2", "a"])
([3, 2, 1, 0, 2], ['2', '10', 'a', 'b'])
>>> data = ranking_data({"query": ["q", "q"], "document": ["d1", "d2"], "label": [0, 1]}, candidates=None)
>>> data.queries, data.documents, data.relevant, data.unscored
({'q': 'q0'}, {'d1': 'd0', 'd2': 'd1'}, {'q0': {'d1': 1}}, 0)
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from sklearn.feature_extraction.text import TfidfVectorizer

from flow_plugin.data.labelled import DOCUMENT_LABEL
from flow_plugin.errors import DataFolderError

#: queries ranked against the documents at once by the TF-IDF first stage (bounds its memory)
FIRST_STAGE_CHUNK = 512


def label_codes(values: Sequence[Any]) -> tuple[list[int], list[str]]:
    """Label values -> (codes 0..k-1, the label names): integers in numeric order first, then text in order."""
    def order(name: str) -> tuple[bool, int, str]:
        numeric = name.lstrip("-").isdigit()
        return (not numeric, int(name) if numeric else 0, name)

    names = sorted({str(value) for value in values}, key=order)
    index = {name: code for code, name in enumerate(names)}
    return [index[str(value)] for value in values], names


def labels_with_few_items(train: Sequence[Any], samples_per_label: int) -> list[str]:
    """The labels with fewer train items than ``samples_per_label`` (MTEB's classification experiments then train
    on all of them), sorted."""
    counts: dict[str, int] = {}
    for label in train:
        counts[str(label)] = counts.get(str(label), 0) + 1
    return sorted(label for label, count in counts.items() if count < samples_per_label)


def cluster_items(columns: dict[str, list[Any]], *, distinct: bool) -> tuple[list[str], list[Any]]:
    """A clustering split's (texts, labels): a text list becomes one item per text; a label list (hierarchical
    labels) is kept as a list of strings; ``distinct`` keeps the first of repeated (text, label) items."""
    texts: list[str] = []
    labels: list[Any] = []
    seen: set[str] = set()
    for text_value, label in zip(columns["text"], columns["label"]):
        label_value = [str(item) for item in label] if isinstance(label, list) else str(label)
        for text in text_value if isinstance(text_value, list) else [text_value]:
            key = json.dumps([text, label_value])
            if distinct and key in seen:
                continue
            seen.add(key)
            texts.append(text)
            labels.append(label_value)
    return texts, labels


def label_levels(labels: Sequence[Any]) -> list[list[Any]]:
    """Per level of a (possibly hierarchical) labelling, the labels of the items that have that level."""
    levels = max((len(label) if isinstance(label, list) else 1 for label in labels), default=1)
    return [[label[level] if isinstance(label, list) else label for label in labels
             if not isinstance(label, list) or level < len(label)] for level in range(levels)]


@dataclass
class RankingData:
    """A retrieval split: text -> id of every distinct query and document, the relevant pairs (query id ->
    document id -> 1), each query's candidates (query id -> document ids; reranking only), and how many relevant
    pairs were left out because the query and the document are the same text (``ignore_identical``)."""

    queries: dict[str, str]
    documents: dict[str, str]
    relevant: dict[str, dict[str, int]]
    top_ranked: dict[str, list[str]] | None
    identical: int = 0

    @property
    def unscored(self) -> int:
        """How many queries have no relevant document (MTEB leaves them out of the score)."""
        return len(self.queries) - len(self.relevant)


def text_ids(queries: Sequence[str], documents: Sequence[str], *, shared: bool
             ) -> tuple[dict[str, str], dict[str, str]]:
    """text -> id of every distinct query (``q0``, ``q1`` ...) and document (``d0`` ...), in order; ``shared``: one id
    per distinct text (``t0`` ...), a query's and a document's alike when their texts are the same (what MTEB's
    ``ignore_identical_ids`` compares).

    >>> text_ids(["a", "b"], ["b", "c"], shared=True)
    ({'a': 't0', 'b': 't1'}, {'b': 't1', 'c': 't2'})
    """
    if not shared:
        return ({text: f"q{n}" for n, text in enumerate(dict.fromkeys(queries))},
                {text: f"d{n}" for n, text in enumerate(dict.fromkeys(documents))})
    ids = {text: f"t{n}" for n, text in enumerate(dict.fromkeys([*queries, *documents]))}
    return {text: ids[text] for text in dict.fromkeys(queries)}, {text: ids[text] for text in dict.fromkeys(documents)}


def _binary(label: Any) -> int:
    if label not in (0, 1):
        raise DataFolderError(f"retrieval labels must be 0 or 1 (map them with the source's label_map, or set its "
                              f"label_threshold), got {label!r}")
    return int(label)


def _relevant_by_row(columns: dict[str, list[Any]], queries: dict[str, str], documents: dict[str, str]
                     ) -> tuple[dict[str, dict[str, int]], dict[str, list[str]], int]:
    """(relevant pairs, each query's own rows' documents, relevant rows of a text with itself left out) of
    (query, document, label) rows; a row of a text with itself (one shared id) is neither."""
    relevant: dict[str, dict[str, int]] = {}
    own: dict[str, list[str]] = {query: [] for query in queries}
    identical = 0
    for query, document, label in zip(columns["query"], columns["document"], columns["label"]):
        query_id, document_id = queries[query], documents[document]
        if query_id == document_id:
            identical += _binary(label)
            continue
        if document_id not in own[query]:
            own[query].append(document_id)
        if _binary(label) == 1:
            relevant.setdefault(query_id, {})[document_id] = 1
    return relevant, own, identical


def _key(label: Any) -> str:
    return json.dumps(label)


def _relevant_by_label(columns: dict[str, list[Any]], queries: dict[str, str], documents: dict[str, str]
                       ) -> tuple[dict[str, dict[str, int]], int]:
    """(relevant pairs, pairs of a text with itself left out) when a document is relevant to every query it shares
    a label with."""
    by_label: dict[str, dict[str, None]] = {}
    for document, label in zip(columns["document"], columns[DOCUMENT_LABEL]):
        by_label.setdefault(_key(label), {})[documents[document]] = None
    labels_of: dict[str, dict[str, None]] = {}
    for query, label in zip(columns["query"], columns["label"]):
        labels_of.setdefault(query, {})[_key(label)] = None
    relevant: dict[str, dict[str, int]] = {}
    identical = 0
    for query, keys in labels_of.items():
        query_id = queries[query]
        found = {document_id: 1 for key in keys for document_id in by_label.get(key, ())}
        identical += found.pop(query_id, 0)
        if found:
            relevant[query_id] = found
    return relevant, identical


def ranking_data(columns: dict[str, list[Any]], candidates: int | None, *, ignore_identical: bool = False
                 ) -> RankingData:
    """The :class:`RankingData` of a split's columns, in one of two layouts:

    - rows: ``query``, ``document``, ``label`` (0/1) of equal length. A row labelled 1 makes its document relevant
      to its query; a query's own rows' documents are its first candidates;
    - queries and documents apart: ``query`` with ``label``, ``document`` with :data:`DOCUMENT_LABEL`
      (:func:`~flow_plugin.data.labelled.attach_documents`). A document is relevant to every query it shares a
      label with; the first stage alone picks the candidates.

    With ``candidates``, each query's candidate list (:func:`first_stage`). A query with more documents of its own
    than ``candidates`` is an error (they would be cut by file order). With ``ignore_identical``, a query and a
    document of the same text share one id (:func:`text_ids`), so MTEB's ``ignore_identical_ids`` leaves the
    document out of that query's ranking; it is never that query's candidate nor relevant to it (counted in
    ``identical``)."""
    by_label = DOCUMENT_LABEL in columns
    queries, documents = text_ids(columns["query"], columns["document"], shared=ignore_identical)
    if by_label:
        relevant, identical = _relevant_by_label(columns, queries, documents)
        own: dict[str, list[str]] = {query: [] for query in queries}
    else:
        relevant, own, identical = _relevant_by_row(columns, queries, documents)
    crowded = [query for query, ids in own.items() if candidates is not None and len(ids) > candidates]
    if crowded:
        most = max(len(own[query]) for query in crowded)
        raise DataFolderError(f"{len(crowded)} queries have more documents of their own than candidates = {candidates} "
                              f"(up to {most}, e.g. {crowded[0]!r:.60}): the rest would be cut by file order; set "
                              f"candidates = {most} or more")
    top_ranked = None
    if candidates is not None:
        ranked = first_stage(queries, own, documents, candidates)
        top_ranked = {queries[query]: ids for query, ids in ranked.items()}
    return RankingData(queries, documents, relevant, top_ranked, identical)


def first_stage(queries: dict[str, str], own: dict[str, list[str]], documents: dict[str, str], candidates: int
                ) -> dict[str, list[str]]:
    """Each query's candidate document ids (query text -> ids): its own rows' documents, then the documents a
    TF-IDF model (scikit-learn, fitted on the documents; cosine) ranks highest, ties by document order, up to
    ``candidates``; a document with the query's own id (the same text, :func:`text_ids`) is never one."""
    texts, ids = list(documents), list(documents.values())
    query_texts = list(queries)
    vectorizer = TfidfVectorizer().fit(texts)
    document_matrix = vectorizer.transform(texts)
    query_matrix = vectorizer.transform(query_texts)
    ranked: dict[str, list[str]] = {}
    for start in range(0, len(query_texts), FIRST_STAGE_CHUNK):
        similarities = (query_matrix[start:start + FIRST_STAGE_CHUNK] @ document_matrix.T).toarray()
        for row, query in enumerate(query_texts[start:start + FIRST_STAGE_CHUNK]):
            chosen = list(own[query][:candidates])
            for index in np.argsort(-similarities[row], kind="stable"):
                if len(chosen) >= candidates:
                    break
                if ids[index] not in chosen and ids[index] != queries[query]:
                    chosen.append(ids[index])
            ranked[query] = chosen
    return ranked


__all__ = ["FIRST_STAGE_CHUNK", "RankingData", "cluster_items", "first_stage", "label_codes", "label_levels",
           "labels_with_few_items", "ranking_data", "text_ids"]
