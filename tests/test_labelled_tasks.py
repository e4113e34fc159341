"""Labelled offline MTEB tasks of every type: entries from configuration, real data, MTEB's own evaluator,
per-item data that reproduces the main score, and a fit that never sees a label."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import subprocess
from collections import Counter
from pathlib import Path

import mteb
import numpy as np
import pytest
from mteb.cache import ResultCache

from flow_plugin.catalog.labelled_tasks import (
    TASKS_ENV,
    labelled_task,
    labelled_tasks,
    parse_task_entry,
    parse_task_file,
)
from flow_plugin.catalog.registry import RegistryModel
from flow_plugin.data.labelled import parse_source, read_source, stratified_split
from flow_plugin.errors import DataFolderError, InputError, RegistryError
from flow_plugin.integrations.mteb.corpus import target_corpus
from flow_plugin.results.items import items_of_result, items_path, main_score_of, read_items
from flow_plugin.integrations.mteb.labelled_tasks import labelled_task_classes, task_class
from flow_plugin.integrations.mteb.base_models import registry_model

from conftest import ONE_PER_TYPE, result_file




# ----------------------------------------------------------------------------- entries and sources
def test_built_in_entries_become_mteb_tasks_found_by_name() -> None:
    from flow_plugin.integrations.mteb.hook import register

    register()
    names = [cls.metadata.name for cls in labelled_task_classes()]
    assert len(names) == 21 and len(set(names)) == 21
    types = Counter(cls.metadata.type for cls in labelled_task_classes())
    assert types == {"Classification": 7, "PairClassification": 4, "Clustering": 3, "Reranking": 3, "Retrieval": 4}
    for name in names:
        task = mteb.get_task(name)
        assert type(task).__name__ == name and task.metadata.name == name
        assert task.metadata.main_score == {"Classification": "accuracy", "PairClassification": "max_ap",
                                            "Clustering": "v_measure", "Reranking": "map_at_1000",
                                            "Retrieval": "ndcg_at_10"}[task.metadata.type]
    # every set without a published test split says how it was split, with its seed
    for name in ("FlowPluginMRClassification", "FlowPluginCRClassification", "FlowPluginSUBJClassification",
                 "FlowPluginMPQAClassification"):
        entry = labelled_task(name)
        assert entry.split is not None and entry.split.seed == 1111
        assert "seed 1111" in entry.description and "stratified 20%" in entry.description


def test_real_sets_have_their_published_sizes(shared_data_dir: Path) -> None:
    """Counts from the data README (and SentEval's loaders), read through each entry's source."""
    expected = {
        "FlowPluginBanking77Classification": {"train": 10003, "test": 3080},
        "FlowPluginMRClassification": {"all": 10662},
        "FlowPluginCRClassification": {"all": 3771},  # 3,775 lines of which 4 are empty
        "FlowPluginSUBJClassification": {"all": 10000},
        "FlowPluginMPQAClassification": {"all": 10603},  # 10,606 lines of which 3 are empty
        "FlowPluginSST2Classification": {"train": 67349, "dev": 872, "test": 1821},
        "FlowPluginTRECClassification": {"train": 5452, "test": 500},
        "FlowPluginTwitterURLCorpusPairClassification": {"test": 9324},
        "FlowPluginMRPCPairClassification": {"train": 4076, "test": 1725},
        "FlowPluginSICKEntailmentPairClassification": {"train": 4500, "dev": 500, "test": 4927},
        "FlowPluginQNLIPairClassification": {"test": 5463},
        "FlowPluginTRECClustering": {"test": 5952},
        "FlowPluginSTSBSourceClustering": {"test": 8628},
    }
    for name, sizes in expected.items():
        entry = labelled_task(name)
        data = read_source(entry.source, shared_data_dir)
        assert {split: data.size(split) for split in data.splits} == sizes, name
    twitter = read_source(labelled_task("FlowPluginTwitterURLCorpusPairClassification").source, shared_data_dir)
    assert Counter(twitter.splits["test"]["label"]) == {0: 7504, 1: 1820}
    sick = read_source(labelled_task("FlowPluginSICKEntailmentPairClassification").source, shared_data_dir)
    assert sum(sick.splits["test"]["label"]) == 1414


def test_split_rule_is_stratified_and_fixed_by_its_seed(shared_data_dir: Path) -> None:
    task = task_class("FlowPluginMRClassification")(data_dir=shared_data_dir)
    task.load_data()
    train, test = task.dataset["train"], task.dataset["test"]
    assert (len(train), len(test)) == (8529, 2133)
    assert Counter(test["label"]) == {0: 1066, 1: 1067} or Counter(test["label"]) == {0: 1067, 1: 1066}
    again = task_class("FlowPluginMRClassification")(data_dir=shared_data_dir)
    again.load_data()
    assert again.dataset["test"]["text"] == test["text"]
    assert task.metadata.revision == again.metadata.revision and task.metadata.revision.startswith("sha256:")
    labels = [0] * 50 + [1] * 50
    assert stratified_split(labels, test_fraction=0.2, seed=1) != stratified_split(labels, test_fraction=0.2, seed=2)


def test_reranking_candidates_come_from_text_alone(shared_data_dir: Path) -> None:
    task = task_class("FlowPluginQNLIReranking")(data_dir=shared_data_dir)
    task.load_data()
    split = task.dataset["default"]["test"]
    # every question and sentence is the task's text; 2,702 questions have an entailing sentence (MTEB scores those)
    assert len(split["queries"]) == 4100 and len(split["corpus"]) == 3913 and len(split["relevant_docs"]) == 2702
    ranked = split["top_ranked"]
    assert set(ranked) == set(split["queries"]["id"]) and {len(ids) for ids in ranked.values()} == {20}
    # every relevant document is among its query's candidates (its own GLUE pair comes first)
    assert all(set(docs) <= set(ranked[query]) for query, docs in split["relevant_docs"].items())


def test_bad_entries_are_one_line_errors_naming_the_problem(tmp_path: Path) -> None:
    good = {"name": "Mine", "type": "Classification", "description": "d", "reference": "https://example.org",
            "date": ["2020-01-01", "2020-12-31"],
            "source": {"format": "delimited", "splits": {"train": "a.csv", "test": "b.csv"},
                       "columns": {"text": "t", "label": "y"}}}
    assert parse_task_entry(good).main_score == "accuracy"
    with pytest.raises(RegistryError, match="extra_key"):
        parse_task_entry({**good, "extra_key": 1})
    with pytest.raises(RegistryError, match=r"reads the roles \['text1', 'text2', 'label'\]"):
        parse_task_entry({**good, "type": "PairClassification"})
    with pytest.raises(RegistryError, match="trains on a 'train' split"):
        parse_task_entry({**good, "source": {**good["source"], "splits": {"test": "b.csv"}}})
    with pytest.raises(InputError, match="'format' must be one of"):
        parse_source({"format": "xlsx"})
    with pytest.raises(RegistryError, match="not roles"):
        parse_task_entry({**good, "source": {"format": "regex-lines", "splits": {"train": "a", "test": "b"},
                                             "pattern": "(?P<txt>.*)"}})
    (tmp_path / "a.csv").write_text("t,y\nfine,1\n,0\n", encoding="utf-8")
    source = parse_source({"format": "delimited", "splits": {"train": "a.csv"}, "columns": {"text": "t", "label": "y"}})
    with pytest.raises(DataFolderError, match=r"a\.csv, record 3: empty text"):
        read_source(source, tmp_path)
    mapped = parse_source({"format": "delimited", "splits": {"train": "a.csv"}, "columns": {"text": "t", "label": "y"},
                           "label_map": {"1": 1}})
    (tmp_path / "a.csv").write_text("t,y\nfine,1\nbad,0\n", encoding="utf-8")
    with pytest.raises(DataFolderError, match="label '0' is not in the source's label_map"):
        read_source(mapped, tmp_path)


def test_jsonl_and_regex_sources_read_every_non_blank_line_and_name_a_bad_one(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text('{"q": "why?", "y": 1}\n\n{"q": "how?", "y": 0}\n', encoding="utf-8")
    (tmp_path / "b.jsonl").write_text('{"q": "who?", "y": 1}\n', encoding="utf-8")
    jsonl = parse_source({"format": "jsonl", "splits": {"train": ["a.jsonl", "b.jsonl"]},
                          "columns": {"text": "q", "label": "y"}})
    read = read_source(jsonl, tmp_path)
    assert read.splits == {"train": {"text": ["why?", "how?", "who?"], "label": [1, 0, 1]}}
    assert read.files == [tmp_path / "a.jsonl", tmp_path / "b.jsonl"]
    (tmp_path / "b.jsonl").write_text('{"q": "who?"}\n{"q": \n', encoding="utf-8")
    with pytest.raises(DataFolderError, match=r"b\.jsonl, line 1: no key\(s\) \['y'\]"):
        read_source(jsonl, tmp_path)
    (tmp_path / "b.jsonl").write_text('{"q": "who?", "y": 1}\n\n{"q": \n', encoding="utf-8")
    with pytest.raises(DataFolderError, match=r"b\.jsonl, line 3: not valid JSON"):
        read_source(jsonl, tmp_path)
    (tmp_path / "c.txt").write_text("DESC:def what is it\n\nHUM:ind who was he\n", encoding="utf-8")
    regex = parse_source({"format": "regex-lines", "splits": {"train": "c.txt"},
                          "pattern": "(?P<label>[A-Z]+):\\S+ (?P<text>.+)"})
    assert read_source(regex, tmp_path).splits == {"train": {"label": ["DESC", "HUM"], "text": ["what is it", "who was he"]}}
    (tmp_path / "c.txt").write_text("DESC:def what is it\nno label here\n", encoding="utf-8")
    with pytest.raises(DataFolderError, match=r"c\.txt, line 2: does not match the source's pattern"):
        read_source(regex, tmp_path)


# ----------------------------------------------------------------------------- through MTEB
@pytest.mark.parametrize("task_type", sorted(ONE_PER_TYPE))
def test_each_type_runs_through_mteb_and_keeps_items_that_reproduce_its_score(
        task_type: str, subset_root: Path, tiny_spec, tmp_path: Path) -> None:
    os.environ.pop("FLOW_PLUGIN_CACHE_DIR", None)
    task = task_class(ONE_PER_TYPE[task_type])(data_dir=subset_root)
    task.load_data()
    model = registry_model(RegistryModel(tiny_spec, "whiten"))
    result = mteb.evaluate(model, task, cache=ResultCache(tmp_path), co2_tracker=False, show_progress_bar=False)
    (task_result,) = result.task_results
    score = task_result.get_score()
    assert 0 <= score <= 1
    (path,) = tmp_path.rglob(f"{task.metadata.name}.json")
    items, why = items_of_result(path, main_score=score, dataset_revision=task_result.dataset_revision)
    assert why is None and items is not None
    assert items.meta["type"] == task_type and items.meta["dataset_revision"] == task.metadata.revision
    assert main_score_of(items) == pytest.approx(score, abs=1e-5)  # MTEB rounds retrieval scores to 5 decimals
    scored = task.dataset["default"]["test"] if task_type in ("Reranking", "Retrieval") else task.dataset["test"]
    if task_type == "Classification":
        assert items.arrays["predictions"].shape == (task.n_experiments, len(scored))
        assert list(items.arrays["gold"]) == scored["label"]
    elif task_type == "PairClassification":
        assert len(items.arrays["cosine"]) == len(scored) and list(items.arrays["gold"]) == scored["labels"]
    elif task_type == "Clustering":
        levels, experiments, draw = items.arrays["draws"].shape
        assert (levels, experiments, draw) == (2, task.n_clusters, len(scored))  # genre and source
    else:
        assert len(items.arrays["query_ids"]) == len(scored["relevant_docs"]) < len(scored["queries"])  # those MTEB scores
    # a stale file (another score) is refused, not used
    stale, why = items_of_result(path, main_score=score + 0.001, dataset_revision=task_result.dataset_revision)
    assert stale is None and "not the result's score" in why


@pytest.mark.slow
def test_glue_qnli_retrieval_keeps_per_query_scores(shared_data_dir: Path, tiny_spec, tmp_path: Path) -> None:
    from flow_plugin.integrations.mteb.retrieval_tasks import GlueQNLIRetrieval

    task = GlueQNLIRetrieval(data_dir=shared_data_dir / "glue")  # (its reader checks the file's 5,463 pairs)
    model = registry_model(RegistryModel(tiny_spec, "sn"))
    result = mteb.evaluate(model, task, cache=ResultCache(tmp_path), co2_tracker=False, show_progress_bar=False)
    score = result.task_results[0].get_score()
    items = read_items(items_path(next(tmp_path.rglob("GlueQNLIRetrieval.json"))))
    assert items.meta["main_score"] == "ndcg_at_10" and main_score_of(items) == pytest.approx(score, abs=1e-5)


def test_generic_retrieval_scores_what_the_qnli_retrieval_task_scores(shared_data_dir: Path) -> None:
    """The (query, document, label) builder on QNLI dev scores GlueQNLIRetrieval's queries against its corpus with
    its relevant pairs; it also keeps the questions without an answer as (unscored) text to fit on."""
    from flow_plugin.integrations.mteb.retrieval_tasks import GlueQNLIRetrieval

    ours = task_class("FlowPluginQNLIRetrieval")(data_dir=shared_data_dir)
    ours.load_data()
    theirs = GlueQNLIRetrieval(data_dir=shared_data_dir / "glue")
    theirs.load_data()
    mine, glue = ours.dataset["default"]["test"], theirs.dataset["default"]["test"]
    same = lambda texts: [" ".join(text.split()) for text in texts]  # noqa: E731 -- the labelled tasks normalise spaces
    assert mine["corpus"]["text"] == same(glue["corpus"]["text"]) and mine["top_ranked"] is None

    def pairs(split: dict) -> set[tuple[str, str]]:
        query_of = dict(zip(split["queries"]["id"], same(split["queries"]["text"])))
        text_of = dict(zip(split["corpus"]["id"], same(split["corpus"]["text"])))
        return {(query_of[q], text_of[d]) for q, docs in split["relevant_docs"].items() for d in docs}

    assert pairs(mine) == pairs(glue)
    scored = {query for query, _ in pairs(mine)}
    assert scored == set(same(glue["queries"]["text"])) < set(mine["queries"]["text"])


# ----------------------------------------------------------------------------- a user's own task
def test_a_users_folder_becomes_a_task_by_configuration(tmp_path: Path, tiny_spec, monkeypatch: pytest.MonkeyPatch,
                                                        restored_task_registry: None) -> None:
    folder = tmp_path / "my-set"
    folder.mkdir()
    rows = [("the film was great", "pos"), ("a dull and boring film", "neg"), ("great acting, great story", "pos"),
            ("boring", "neg"), ("i loved it", "pos"), ("i hated it", "neg"), ("wonderful", "pos"), ("awful", "neg")]
    (folder / "train.tsv").write_text("text\tsentiment\n" + "".join(f"{t}\t{y}\n" for t, y in rows * 3), encoding="utf-8")
    (folder / "test.tsv").write_text("text\tsentiment\n" + "".join(f"{t}\t{y}\n" for t, y in rows), encoding="utf-8")
    toml = tmp_path / "tasks.toml"
    toml.write_text("""
[[task]]
name = "MySentiment"
type = "Classification"
description = "My labelled sentences."
reference = "https://example.org/my-set"
date = ["2024-01-01", "2024-12-31"]
data_dir = "my-set"
samples_per_label = 4
n_experiments = 3
[task.source]
format = "delimited"
delimiter = "\\t"
quoting = "none"
columns = { text = "text", label = "sentiment" }
label_map = { pos = 1, neg = 0 }
splits = { train = "train.tsv", test = "test.tsv" }
""", encoding="utf-8")
    (entry,) = parse_task_file(toml)
    assert entry.base_folder(None) == folder
    monkeypatch.setenv(TASKS_ENV, str(toml))
    from flow_plugin.integrations.mteb.hook import register_tasks

    assert "MySentiment" in register_tasks()
    task = mteb.get_task("MySentiment")
    assert task.n_experiments == 3 and task.samples_per_label == 4
    model = registry_model(RegistryModel(tiny_spec, "sn"))
    result = mteb.evaluate(model, task, cache=None, co2_tracker=False, show_progress_bar=False)
    assert len(result.task_results[0].scores["test"][0]["scores_per_experiment"]) == 3
    # a name defined twice: the first definition stays (tests/test_user_task_errors.py: the warning naming both)
    second = tmp_path / "again.toml"
    second.write_text(toml.read_text(encoding="utf-8"), encoding="utf-8")
    monkeypatch.setenv(TASKS_ENV, os.pathsep.join([str(toml), str(second)]))
    assert labelled_tasks()["MySentiment"].origin == toml
    # a malformed file is left out, with a warning naming it; every other task is registered all the same
    second.write_text("[[task]]\nname = 'Broken'\ntype = 'Classification'\n", encoding="utf-8")
    monkeypatch.setenv(TASKS_ENV, os.pathsep.join([str(second), str(toml)]))
    from mteb.get_tasks import _TASKS_REGISTRY

    _TASKS_REGISTRY.pop("SentEvalSTS12", None)
    names = register_tasks()
    assert "SentEvalSTS12" in _TASKS_REGISTRY and {"FlowPluginMRClassification", "MySentiment"} <= set(names)
    assert "Broken" not in names


# ----------------------------------------------------------------------------- fitting never reads labels
def _permuted_copy(entry_name: str, subset_root: Path, target: Path) -> None:
    """A copy of ``subset_root`` in which the label (or relevance) field of ``entry_name``'s files is shuffled
    (lines-per-label: the lines moved between the label files), its documents' files too."""
    import shutil

    shutil.copytree(subset_root, target)
    entry = labelled_task(entry_name)
    rng = np.random.default_rng(0)
    for source in (entry.source, entry.documents):
        if source is not None:
            _permute_labels(source, target, rng)


def _permute_labels(source, target: Path, rng: np.random.Generator) -> None:
    if source.format == "lines-per-label":
        files = [target / name for name in source.files]
        lines = [line for path in files for line in path.read_text(encoding="utf-8").splitlines()]
        sizes = [len(path.read_text(encoding="utf-8").splitlines()) for path in files]
        lines = [lines[i] for i in rng.permutation(len(lines))]
        for path, start, size in zip(files, np.cumsum([0, *sizes[:-1]]), sizes):
            path.write_text("\n".join(lines[start:start + size]) + "\n", encoding="utf-8")
        return
    if source.format == "aligned-lines":
        for by_role in source.splits.values():
            path = target / by_role["label"]
            labels = path.read_text(encoding="utf-8").splitlines()
            path.write_text("\n".join(labels[i] for i in rng.permutation(len(labels))) + "\n", encoding="utf-8")
        return
    for files in source.splits.values():
        for name in [files] if isinstance(files, str) else files:
            path = target / name
            text = path.read_text(encoding=source.encoding)
            if source.format == "regex-lines":
                permuted = _permuted_pattern_labels(text.splitlines(), re.compile(source.pattern), rng)
            elif source.quoting == "csv":  # Banking77: a quoted field may hold the delimiter or span lines
                rows = list(csv.reader(io.StringIO(text), delimiter=source.delimiter))
                buffer = io.StringIO()
                csv.writer(buffer, delimiter=source.delimiter, lineterminator="\n").writerows(
                    _permuted_column(rows, source, rng))
                permuted = buffer.getvalue().splitlines()
            else:
                rows = [line.split(source.delimiter) for line in text.splitlines()]
                permuted = [source.delimiter.join(row) for row in _permuted_column(rows, source, rng)]
            path.write_text("\n".join(permuted) + "\n", encoding=source.encoding)


def _permuted_pattern_labels(lines: list[str], pattern: re.Pattern, rng: np.random.Generator) -> list[str]:
    """Lines whose ``label`` groups (of the lines the pattern reads) are shuffled; other lines as they were."""
    matches = [(number, pattern.fullmatch(line.strip())) for number, line in enumerate(lines)]
    matches = [(number, match) for number, match in matches if match is not None]
    labels = [match.group("label") for _, match in matches]
    out = list(lines)
    for (number, match), label in zip(matches, [labels[i] for i in rng.permutation(len(labels))]):
        line = lines[number].strip()
        out[number] = line[:match.start("label")] + label + line[match.end("label"):]
    return out


def _permuted_column(rows: list[list[str]], source, rng: np.random.Generator) -> list[list[str]]:
    """The rows (a header first where the source has one) with the label column shuffled over the non-empty rows."""
    head = rows[:1] if source.header else []
    body = [row for row in rows[len(head):] if any(field.strip() for field in row)]
    column = source.columns["label"]
    index = column if isinstance(column, int) else head[0].index(column)
    labels = [body[i][index] for i in rng.permutation(len(body))]
    for row, label in zip(body, labels):
        row[index] = label
    return head + body


@pytest.mark.parametrize("name", ["FlowPluginMRClassification", "FlowPluginTRECClassification",
                                  "FlowPluginTwitterURLCorpusPairClassification",
                                  "FlowPluginSICKEntailmentPairClassification", "FlowPluginTRECClustering",
                                  "FlowPluginQNLIReranking", "FlowPluginQNLIRetrieval",
                                  "FlowPluginTwitterURLCorpusReranking", "FlowPluginSICKReranking",
                                  "FlowPluginMRPCRetrieval", "FlowPluginSTSBRetrieval", "FlowPluginBanking77Retrieval"])
def test_the_fit_never_reads_a_label(name: str, subset_root: Path, tiny_spec, tmp_path: Path) -> None:
    """Labels shuffled: the same text is gathered for the "target" fit and the fitted calibrator is identical,
    although the labels the task scores with differ."""
    _permuted_copy(name, subset_root, tmp_path / "permuted")
    tasks = [task_class(name)(data_dir=folder) for folder in (subset_root, tmp_path / "permuted")]
    for task in tasks:
        task.load_data()
    assert tasks[0].metadata.revision != tasks[1].metadata.revision  # other data ...
    if labelled_task(name).type in ("Reranking", "Retrieval"):
        relevant = [task.dataset["default"]["test"]["relevant_docs"] for task in tasks]
        assert relevant[0] != relevant[1]
    texts = []
    for task in tasks:
        corpus = target_corpus(task, "default")
        texts.append(sorted(sentence for part in corpus.parts for chunk in part.chunks() for sentence in chunk))
    assert texts[0] == texts[1]  # ... the same text to fit on
    fitted = [registry_model(RegistryModel(tiny_spec, "whiten")).calibrator_for(task) for task in tasks]
    assert np.array_equal(fitted[0].mean_, fitted[1].mean_)
    assert np.array_equal(fitted[0].components_, fitted[1].components_)


# ----------------------------------------------------------------------------- as a user runs it
@pytest.mark.slow
def test_mteb_run_on_a_labelled_task_of_each_type_with_minilm_flow(subset_root: Path, minilm_path: Path,
                                                                    tmp_path: Path) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "FLOW_PLUGIN_SHARED_DATA": str(subset_root),
           "FLOW_PLUGIN_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("FLOW_PLUGIN_REGISTRY", None)
    output = tmp_path / "out"
    tasks = [ONE_PER_TYPE[task_type] for task_type in sorted(ONE_PER_TYPE)]
    done = subprocess.run(["mteb", "run", "-m", "flow_plugin/minilm-l6-flow", "-t", *tasks,
                           "--output-folder", str(output), "--no-co2-tracker"],
                          capture_output=True, text=True, env=env, timeout=1800, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    for name in tasks:
        assert f"fitted flow for {name}/default" in done.stderr, name
    # the user is told where the flow lowered a type on every published board, once per type
    for task_type in ("Classification", "Clustering"):
        assert done.stderr.count(f"flow lowered MTEB {task_type} scores") >= 1, task_type
    assert "lowered MTEB Retrieval" not in done.stderr and "lowered MTEB Reranking" not in done.stderr
    for name in tasks:
        path = result_file(output, "flow_plugin/minilm-l6-flow", name)
        result = json.loads(path.read_text())
        score = result["scores"]["test"][0]["main_score"]
        items, why = items_of_result(path, main_score=score, dataset_revision=result["dataset_revision"])
        assert why is None, (name, why)
        if name == "FlowPluginTRECClassification":
            assert items.arrays["predictions"].shape[0] == 10  # MTEB's 10 experiments
