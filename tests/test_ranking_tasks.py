"""The reranking and retrieval tasks beyond QNLI (Twitter URL Corpus, SICK, MRPC, STS-B, Banking77) and the source
keys they need: ``label_threshold`` (a score as relevance), ``documents`` (relevance by a shared label) and
``ignore_identical`` (a query never ranks its own text). Real-data tests skip when the shared folder is absent
(tests/test_labelled_tasks.py checks that no label reaches the fit text of any of them)."""

from __future__ import annotations

from pathlib import Path

import mteb
import pytest
from mteb.cache import ResultCache

from flow_plugin.catalog.labelled_tasks import labelled_task, parse_task_entry
from flow_plugin.catalog.registry import RegistryModel
from flow_plugin.data.labelled import DOCUMENT_LABEL, LabelledSplits, attach_documents, parse_source, read_source
from flow_plugin.data.task_tables import ranking_data
from flow_plugin.errors import DataFolderError, InputError, RegistryError
from flow_plugin.integrations.mteb.base_models import registry_model
from flow_plugin.integrations.mteb.labelled_tasks import task_class
from flow_plugin.results.items import items_of_result, main_score_of

#: per new task: (rows read, distinct queries, distinct documents, scored queries, relevant pairs, candidates per
#: query or None), recounted from the shared files; each count is also written in the task's description
COUNTS: dict[str, tuple[int, int, int, int, int, int | None]] = {
    "FlowPluginTwitterURLCorpusReranking": (10120, 771, 8215, 570, 1590, 40),
    "FlowPluginSICKReranking": (9927, 5014, 4946, 2739, 3681, 30),
    "FlowPluginMRPCRetrieval": (5801, 5801, 5474, 3900, 3900, None),
    "FlowPluginSTSBRetrieval": (8628, 7973, 8018, 1912, 1973, None),
    "FlowPluginBanking77Retrieval": (3080, 3079, 9999, 3079, 399874, None),
}


def _described(count: int) -> str:
    return f"{count:,}"


# ----------------------------------------------------------------------------- the tasks on the real data
@pytest.mark.parametrize("name", [pytest.param(name, marks=[pytest.mark.slow] if "SICK" in name else [])
                                  for name in sorted(COUNTS)])  # SICK's first stage: 5,014 queries, >= 5 s
def test_each_new_ranking_task_builds_from_the_real_data_with_the_counts_it_states(name: str,
                                                                                   shared_data_dir: Path) -> None:
    rows, n_queries, n_documents, scored, pairs, candidates = COUNTS[name]
    task = task_class(name)(data_dir=shared_data_dir)
    task.load_data()
    split = task.dataset["default"]["test"]
    relevant = split["relevant_docs"]
    assert (len(split["queries"]), len(split["corpus"]), len(relevant)) == (n_queries, n_documents, scored)
    assert sum(len(docs) for docs in relevant.values()) == pairs
    assert task.unscored_queries == {"test": n_queries - scored}
    description = labelled_task(name).description
    for count in (rows, n_queries, n_documents, scored):
        assert _described(count) in description, (name, count)
    # a query never ranks a document of its own text: where the task says so, MTEB leaves out equal ids, and no
    # relevant pair or candidate pairs a text with itself
    identical = task.entry.ignore_identical
    assert task.ignore_identical_ids is identical
    texts_of = dict(zip(split["corpus"]["id"], split["corpus"]["text"]))
    query_text = dict(zip(split["queries"]["id"], split["queries"]["text"]))
    if identical:
        shared = set(query_text) & set(texts_of)
        assert shared and all(query_text[i] == texts_of[i] for i in shared)
        assert all(query not in docs for query, docs in relevant.items())
    ranked = split["top_ranked"]
    if candidates is None:
        assert ranked is None
    else:
        assert {len(ids) for ids in ranked.values()} == {candidates} and set(ranked) == set(query_text)
        assert all(set(docs) <= set(ranked[query]) for query, docs in relevant.items())  # its own rows come first
        assert all(query not in ids for query, ids in ranked.items())


def test_the_twitter_tasks_votes_decide_relevance_at_4_of_6(shared_data_dir: Path) -> None:
    """The pair-classification task's rule (>= 4 paraphrase, <= 2 not, 3 dropped) on the file with the votes: every
    pair is text, the 3-vote pairs are candidates that are not relevant."""
    entry = labelled_task("FlowPluginTwitterURLCorpusReranking")
    raw = read_source(parse_source({**entry.source.model_dump(), "label_threshold": None}), shared_data_dir)
    votes = raw.splits["test"]["label"]
    assert sorted(set(votes)) == [0, 1, 2, 3, 4, 5, 6] and sum(vote == 3 for vote in votes) == 786
    read = read_source(entry.source, shared_data_dir).splits["test"]
    assert read["query"] == raw.splits["test"]["query"] and read["document"] == raw.splits["test"]["document"]
    assert read["label"] == [int(vote >= 4) for vote in votes]


def test_banking77_retrieval_is_relevant_by_shared_intent(shared_data_dir: Path) -> None:
    task = task_class("FlowPluginBanking77Retrieval")(data_dir=shared_data_dir)
    task.load_data()
    split = task.dataset["default"]["test"]
    query_text = dict(zip(split["queries"]["id"], split["queries"]["text"]))
    document_text = dict(zip(split["corpus"]["id"], split["corpus"]["text"]))
    intent = {}
    classification = read_source(labelled_task("FlowPluginBanking77Classification").source, shared_data_dir)
    for columns in classification.splits.values():
        intent.update(zip(columns["text"], columns["label"]))
    for query, docs in list(split["relevant_docs"].items())[:50]:
        wanted = {doc for doc, text in document_text.items() if intent[text] == intent[query_text[query]]}
        assert set(docs) == wanted


# ----------------------------------------------------------------------------- label_threshold
def test_label_threshold_turns_a_score_into_relevance_and_names_a_bad_one(tmp_path: Path) -> None:
    (tmp_path / "pairs.tsv").write_text("a\tb\tscore\none\tuno\t4.0\ntwo\tdos\t3.99\nthree\ttres\t5\n",
                                        encoding="utf-8")
    table = {"format": "delimited", "delimiter": "\t", "quoting": "none", "splits": {"test": "pairs.tsv"},
             "columns": {"query": "a", "document": "b", "label": "score"}, "label_threshold": 4}
    assert read_source(parse_source(table), tmp_path).splits["test"]["label"] == [1, 0, 1]
    (tmp_path / "pairs.tsv").write_text("a\tb\tscore\none\tuno\t4.0\ntwo\tdos\thigh\n", encoding="utf-8")
    with pytest.raises(DataFolderError, match=r"pairs\.tsv, record 3: label 'high' is not a number") as error:
        read_source(parse_source(table), tmp_path)
    assert "\n" not in str(error.value) and "label_threshold (4)" in str(error.value)
    with pytest.raises(InputError, match="give one of them") as error:
        parse_source({**table, "label_map": {"4.0": 1}})
    assert "\n" not in str(error.value)
    with pytest.raises(InputError, match="must be a finite number"):
        parse_source({**table, "label_threshold": float("nan")})


# ----------------------------------------------------------------------------- documents and ignore_identical
def _entry(**changes: object) -> dict:
    entry = {"name": "MyFaq", "type": "Retrieval", "description": "d", "reference": "https://example.org",
             "date": ["2020-01-01", "2020-12-31"],
             "source": {"format": "delimited", "splits": {"test": "questions.csv"},
                        "columns": {"query": "question", "label": "faq"}},
             "documents": {"format": "delimited", "splits": {"test": "answers.csv"},
                           "columns": {"document": "answer", "label": "faq"}}}
    return {**entry, **changes}


@pytest.mark.parametrize(("changes", "message"), [
    ({"type": "Classification"}, "documents is for Reranking and Retrieval tasks, not Classification"),
    ({"split": {"test_fraction": 0.2, "seed": 1}}, "a split rule cannot divide a task whose documents"),
    ({"source": {"format": "delimited", "splits": {"test": "q.csv"}, "columns": {"query": "q", "document": "d",
                                                                                "label": "y"}}},
     r"the task's source gives the roles \['label', 'query'\]"),
    ({"documents": {"format": "delimited", "splits": {"test": "a.csv"}, "columns": {"document": "a"}}},
     r"the task's documents gives the roles \['document', 'label'\]"),
    ({"documents": {"format": "delimited", "splits": {"dev": "a.csv"},
                    "columns": {"document": "a", "label": "faq"}}},
     r"the source's splits \['test'\] and the documents' \['dev'\] differ"),
])
def test_a_bad_documents_entry_is_a_one_line_error(changes: dict, message: str) -> None:
    assert parse_task_entry(_entry()).documents is not None
    with pytest.raises(RegistryError, match=message) as error:
        parse_task_entry(_entry(**changes))
    assert "\n" not in str(error.value) and "MyFaq" in str(error.value)


def test_ignore_identical_is_for_ranking_tasks_only() -> None:
    classification = {"name": "Mine", "type": "Classification", "description": "d", "reference": "https://e.org",
                      "date": ["2020-01-01", "2020-12-31"], "ignore_identical": True,
                      "source": {"format": "delimited", "splits": {"train": "a.csv", "test": "b.csv"},
                                 "columns": {"text": "t", "label": "y"}}}
    with pytest.raises(RegistryError, match="ignore_identical is for Reranking and Retrieval tasks") as error:
        parse_task_entry(classification)
    assert "\n" not in str(error.value)
    assert parse_task_entry(_entry(ignore_identical=True)).ignore_identical


def test_attach_documents_names_a_split_the_documents_lack() -> None:
    documents = LabelledSplits({"train": {"document": ["d"], "label": ["x"]}})
    with pytest.raises(DataFolderError, match="split 'test' has queries but the task's documents source has no split"):
        attach_documents({"test": {"query": ["q"], "label": ["x"]}}, documents)


def test_relevance_by_shared_label_and_identical_texts() -> None:
    columns = {"query": ["lost card", "card lost", "top up"], "label": ["card", "card", "topup"],
               "document": ["card lost", "my card is gone", "add money", "lost card again"],
               DOCUMENT_LABEL: ["card", "card", "topup", "card"]}
    plain = ranking_data(columns, None)
    assert plain.relevant == {"q0": {"d0": 1, "d1": 1, "d3": 1}, "q1": {"d0": 1, "d1": 1, "d3": 1}, "q2": {"d2": 1}}
    shared = ranking_data(columns, 2, ignore_identical=True)
    # "card lost" is a query and a document: one id; it is neither relevant to itself nor its own candidate
    assert shared.queries["card lost"] == shared.documents["card lost"]
    card_lost = shared.queries["card lost"]
    assert card_lost not in shared.relevant[card_lost] and len(shared.relevant[card_lost]) == 2
    assert shared.identical == 1 and all(query not in ids for query, ids in shared.top_ranked.items())
    rows = {"query": ["a b", "a b", "c"], "document": ["a b", "a b c", "c d"], "label": [1, 0, 1]}
    by_row = ranking_data(rows, None, ignore_identical=True)
    assert by_row.identical == 1 and by_row.relevant == {"t1": {"t3": 1}}  # "a b" has only itself: not scored


# ----------------------------------------------------------------------------- through MTEB's evaluator
@pytest.mark.parametrize("name", ["FlowPluginBanking77Retrieval", "FlowPluginSTSBRetrieval"])
def test_a_new_ranking_task_runs_through_mteb_and_keeps_items_that_reproduce_its_score(
        name: str, subset_root: Path, tiny_spec, tmp_path: Path) -> None:
    task = task_class(name)(data_dir=subset_root)
    task.load_data()
    model = registry_model(RegistryModel(tiny_spec, "whiten"))
    result = mteb.evaluate(model, task, cache=ResultCache(tmp_path), co2_tracker=False, show_progress_bar=False)
    (task_result,) = result.task_results
    score = task_result.get_score()
    (path,) = tmp_path.rglob(f"{name}.json")
    items, why = items_of_result(path, main_score=score, dataset_revision=task_result.dataset_revision)
    assert why is None and items is not None
    assert main_score_of(items) == pytest.approx(score, abs=1e-5)  # MTEB rounds retrieval scores to 5 decimals
    assert len(items.arrays["query_ids"]) == len(task.dataset["default"]["test"]["relevant_docs"])


def test_a_task_without_the_new_keys_keeps_its_data_revision() -> None:
    """label_threshold, documents and ignore_identical enter the data revision only when a task sets them, so the
    results already computed for the other tasks keep matching their data."""
    from flow_plugin.integrations.mteb.labelled_tasks import revision_settings

    before = {"type", "source", "split", "eval_split", "distinct", "candidates"}
    qnli = revision_settings(labelled_task("FlowPluginQNLIRetrieval"))
    assert set(qnli) == before and "label_threshold" not in qnli["source"]
    stsb = revision_settings(labelled_task("FlowPluginSTSBRetrieval"))
    assert set(stsb) == before | {"ignore_identical"} and stsb["source"]["label_threshold"] == 4.0
    banking = revision_settings(labelled_task("FlowPluginBanking77Retrieval"))
    assert banking["documents"]["columns"] == {"document": "text", "label": "category"}
