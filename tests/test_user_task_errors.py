"""A user's own task (a TOML entry and its files) that cannot be scored is refused up front, in one line naming the
task, its file and the remedy; what can be scored is read where its TOML file says, on every route."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import mteb
import pytest
from mteb.cache import ResultCache

from flow_plugin.catalog.labelled_tasks import TASKS_ENV, labelled_task, labelled_tasks, parse_task_file
from flow_plugin.catalog.registry import RegistryModel
from flow_plugin.cli.main import main as cli_main
from flow_plugin.data.labelled import parse_source, read_source
from flow_plugin.errors import DataFolderError, InputError, RegistryError
from flow_plugin.integrations.mteb.labelled_tasks import task_class

#: what an unknown task name's error adds while $FLOW_PLUGIN_TASKS is not set
UNSET_HINT = r"\(a task of your own is found through \$FLOW_PLUGIN_TASKS, which is not set: set it to the task's TOML file"
HEAD = 'description = "d"\nreference = "https://example.org"\ndate = ["2024-01-01", "2024-12-31"]\n'
WORDS = "good bad film plot actor great awful boring fun story music scene slow fast".split()


def sentence(number: int) -> str:
    """A distinct short sentence of real words."""
    return " ".join(WORDS[(number * 7 + k * 3) % len(WORDS)] for k in range(4)) + f" {number}"


def write_tsv(path: Path, header: list[str], rows: list[tuple]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\t".join(header) + "\n" + "".join("\t".join(map(str, row)) + "\n" for row in rows),
                    encoding="utf-8")


def user_task(folder: Path, name: str, task_type: str, columns: str, splits: str, extra: str = "",
              data_dir: str = "data") -> Path:
    """A TOML file in ``folder`` defining one task over TSV files under ``folder/data_dir``; returns the file."""
    folder.mkdir(parents=True, exist_ok=True)
    toml = folder / "tasks.toml"
    toml.write_text(f'[[task]]\nname = "{name}"\ntype = "{task_type}"\n{HEAD}data_dir = "{data_dir}"\n{extra}'
                    f'[task.source]\nformat = "delimited"\ndelimiter = "\\t"\nquoting = "none"\n'
                    f"columns = {columns}\nsplits = {splits}\n", encoding="utf-8")
    return toml


def classification(folder: Path, name: str, train: list[tuple], test: list[tuple], extra: str = "") -> Path:
    write_tsv(folder / "data" / "train.tsv", ["text", "label"], train)
    write_tsv(folder / "data" / "test.tsv", ["text", "label"], test)
    return user_task(folder, name, "Classification", '{ text = "text", label = "label" }',
                     '{ train = "train.tsv", test = "test.tsv" }', extra)


def refused(toml: Path, match: str) -> str:
    """Load the (only) task of ``toml``: the one-line error, checked to name the task, the file and ``match``."""
    (entry,) = parse_task_file(toml)
    with pytest.raises(DataFolderError) as caught:
        task_class(entry)().load_data()
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"task {entry.name} ({toml}): ")
    assert __import__("re").search(match, message), message
    return message


def labelled(count: int, labels: list) -> list[tuple]:
    return [(sentence(number), labels[number % len(labels)]) for number in range(count)]


# ----------------------------------------------------------------------------- what cannot be scored
def test_one_class_classification_is_refused(tmp_path: Path) -> None:
    toml = classification(tmp_path, "OneClass", labelled(20, [1]), labelled(5, [1]))
    refused(toml, r"split 'train' holds one label \(1\): a classifier needs at least 2; add items of other labels$")


def test_a_test_label_never_seen_in_training_is_refused(tmp_path: Path) -> None:
    toml = classification(tmp_path, "Unseen", labelled(30, [0, 1]), labelled(9, [0, 1, 2]))
    refused(toml, r"label 2 of split 'test' never occurs in split 'train': the classifier can never predict it; add "
                  r"train items of it, or leave it out \(map it to \"drop\" in the source's label_map\)$")


def test_a_label_with_fewer_train_items_than_samples_per_label_is_said(tmp_path: Path,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    toml = classification(tmp_path, "FewPerLabel", labelled(20, [0, 1]) + labelled(3, ["rare"]),
                          labelled(6, [0, 1, "rare"]))
    (entry,) = parse_task_file(toml)
    with caplog.at_level(logging.WARNING):
        task_class(entry)().load_data()
    assert "task FewPerLabel: label(s) rare have fewer than samples_per_label = 8 train items" in caplog.text


def test_a_split_rule_that_leaves_a_label_without_an_item_is_refused(tmp_path: Path) -> None:
    rows = labelled(40, [0, 1])
    write_tsv(tmp_path / "data" / "all.tsv", ["text", "label"], rows + [(sentence(99), 2)])
    split = "[task.split]\ntest_fraction = 0.2\nseed = 1\ndivide = \"all\"\n"
    toml = user_task(tmp_path, "SplitOne", "Classification", '{ text = "text", label = "label" }', '{ all = "all.tsv" }',
                     split)
    refused(toml, r"the split rule needs at least 2 items of every label \(one for train, one for test\); label 2 has "
                  r"fewer: add items, or leave it out")
    # 7 + 7 + 2 items: a 20 % stratified test split has 4 items, and rounds label 2's 0.5 down to none
    write_tsv(tmp_path / "data" / "all.tsv", ["text", "label"], rows[:14] + [(sentence(98), 2), (sentence(99), 2)])
    refused(toml, r"the split rule \(test_fraction 0.2, seed 1\) leaves label 2 \(2 items\) without a test item; "
                  r"change test_fraction, add items")


def test_one_class_clustering_is_refused(tmp_path: Path) -> None:
    write_tsv(tmp_path / "data" / "test.tsv", ["text", "label"], labelled(20, ["a"]))
    toml = user_task(tmp_path, "OneCluster", "Clustering", '{ text = "text", label = "label" }', '{ test = "test.tsv" }')
    refused(toml, r"split 'test' holds one label \(\"a\"\): one cluster scores 1.0 whatever the model")


def test_clustering_with_a_label_per_item_is_refused(tmp_path: Path) -> None:
    """(Before, 2 items with 2 labels scored a V-measure of 1.0 for any encoder, silently.)"""
    write_tsv(tmp_path / "data" / "test.tsv", ["text", "label"], [(sentence(1), "a"), (sentence(2), "b")])
    toml = user_task(tmp_path, "OwnClusters", "Clustering", '{ text = "text", label = "label" }', '{ test = "test.tsv" }')
    refused(toml, r"split 'test' gives each of its 2 items a label of its own: every item is its own cluster, which "
                  r"scores 1.0 whatever the model; give several items each label$")


def test_pairs_of_one_label_are_refused(tmp_path: Path) -> None:
    write_tsv(tmp_path / "data" / "test.tsv", ["a", "b", "y"], [(sentence(n), sentence(n + 50), 1) for n in range(20)])
    toml = user_task(tmp_path, "OnePairLabel", "PairClassification", '{ text1 = "a", text2 = "b", label = "y" }',
                     '{ test = "test.tsv" }')
    refused(toml, r"split 'test' holds only pairs labelled 1: average precision needs both 0 and 1")


def ranking(folder: Path, name: str, relevant: set[int], queries: int = 4, per_query: int = 3,
            extra: str = "", task_type: str = "Reranking") -> Path:
    rows = [(f"question {q}", sentence(10 * q + d), int(d == 0 and q in relevant))
            for q in range(queries) for d in range(per_query)]
    write_tsv(folder / "data" / "test.tsv", ["q", "d", "y"], rows)
    return user_task(folder, name, task_type, '{ query = "q", document = "d", label = "y" }', '{ test = "test.tsv" }',
                     extra)


@pytest.mark.parametrize("task_type", ["Reranking", "Retrieval"])
def test_a_ranking_task_without_any_relevant_document_is_refused(task_type: str, tmp_path: Path) -> None:
    """(Before, MTEB dropped every query and ended in ``IndexError: Invalid key: 0 is out of bounds``.)"""
    refused(ranking(tmp_path, f"No{task_type}", relevant=set(), task_type=task_type),
            r"no query of split 'test' has a relevant document \(label 1\): nothing to score")


def test_a_reranking_query_with_more_rows_than_candidates_is_refused(tmp_path: Path) -> None:
    toml = ranking(tmp_path, "Crowded", relevant={0, 1, 2, 3}, per_query=3, extra="candidates = 2\n")
    refused(toml, r"4 queries have more documents of their own than candidates = 2 \(up to 3, .*\): the rest would be "
                  r"cut by file order; set candidates = 3 or more$")


def test_queries_without_a_relevant_document_are_counted_said_and_recorded(
        tmp_path: Path, tiny_spec, caplog: pytest.LogCaptureFixture) -> None:
    from flow_plugin.results.items import items_path, read_items
    from flow_plugin.integrations.mteb.base_models import registry_model

    (entry,) = parse_task_file(ranking(tmp_path / "task", "SomeUnanswered", relevant={0, 1, 3}))
    task = task_class(entry)()
    with caplog.at_level(logging.WARNING):
        task.load_data()
    assert ("task SomeUnanswered: 1 of 4 queries of split 'test' have no relevant document (label 1): MTEB does not "
            "score them") in caplog.text
    assert task.unscored_queries == {"test": 1}
    os.environ.pop("FLOW_PLUGIN_CACHE_DIR", None)
    mteb.evaluate(registry_model(RegistryModel(tiny_spec, "raw")), task, cache=ResultCache(tmp_path / "out"),
                  co2_tracker=False, show_progress_bar=False)
    items = read_items(items_path(next((tmp_path / "out").rglob("SomeUnanswered.json"))))
    assert items.meta["unscored_queries"] == 1 and len(items.arrays["query_ids"]) == 3


# ----------------------------------------------------------------------------- names
def test_a_user_task_named_like_an_mteb_task_is_refused_and_mtebs_stays(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    from mteb.get_tasks import _TASKS_REGISTRY

    from flow_plugin.integrations.mteb.hook import register_tasks

    theirs = _TASKS_REGISTRY["STSBenchmark"]
    toml = classification(tmp_path, "STSBenchmark", labelled(20, [0, 1]), labelled(6, [0, 1]))
    (entry,) = parse_task_file(toml)
    with pytest.raises(RegistryError, match=rf"^task STSBenchmark \({toml}\): MTEB already has a task of this name "
                                            r"\(mteb\.tasks\..*\); rename yours$"):
        task_class(entry)
    monkeypatch.setenv(TASKS_ENV, str(toml))
    with caplog.at_level(logging.WARNING):
        names = register_tasks()
    assert "STSBenchmark" not in names and _TASKS_REGISTRY["STSBenchmark"] is theirs
    assert f"task STSBenchmark ({toml}): MTEB already has a task of this name" in caplog.text


def test_a_broken_task_file_hides_no_other_task_and_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    good = classification(tmp_path / "good", "MyGood", labelled(20, [0, 1]), labelled(6, [0, 1]))
    broken = tmp_path / "broken" / "tasks.toml"
    broken.parent.mkdir()
    broken.write_text("[[task]]\nname = 'Broken'\ntype = 'Classification'\n", encoding="utf-8")
    monkeypatch.setenv(TASKS_ENV, os.pathsep.join([str(broken), str(good)]))
    with caplog.at_level(logging.WARNING):
        entries = labelled_tasks()
    assert "FlowPluginMRClassification" in entries and "MyGood" in entries and "Broken" not in entries
    assert f"{broken}: task 1 (Broken): description: Field required" in caplog.text
    with pytest.raises(RegistryError, match=rf"unknown labelled task 'Broken'.*\({broken}: task 1 \(Broken\): .*\(the "
                                            r"file is left out\)\)$"):
        labelled_task("Broken")
    # a name defined twice: the first definition stays, the second is named
    again = tmp_path / "again.toml"
    again.write_text(good.read_text(encoding="utf-8").replace('data_dir = "data"', 'data_dir = "good/data"'),
                     encoding="utf-8")
    monkeypatch.setenv(TASKS_ENV, os.pathsep.join([str(good), str(again)]))
    with caplog.at_level(logging.WARNING):
        assert labelled_tasks()["MyGood"].origin == good
    assert f"task MyGood is defined twice: in {good} and in {again}; rename one (the second is left out)" in caplog.text


def test_an_unknown_task_name_mentions_the_tasks_variable_when_it_is_unset(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from flow_plugin.studies.task_types import study_tasks

    monkeypatch.delenv(TASKS_ENV, raising=False)
    for call in (lambda: labelled_task("MySentiment"), lambda: study_tasks(tmp_path, ["MySentiment"])):
        with pytest.raises(RegistryError, match=UNSET_HINT):
            call()
    assert cli_main(["task-types", "-b", "minilm-l6", "--tasks", "MySentiment", "--output-folder",
                     str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "$FLOW_PLUGIN_TASKS, which is not set" in error
    assert not (tmp_path / "out").exists()
    monkeypatch.setenv(TASKS_ENV, str(tmp_path))  # set (a folder of no task files): no such hint
    with pytest.raises(RegistryError) as caught:
        labelled_task("MySentiment")
    assert TASKS_ENV not in str(caught.value)


@pytest.mark.slow
def test_flow_plugin_eval_names_the_tasks_variable_for_an_unknown_task(monkeypatch: pytest.MonkeyPatch) -> None:
    """(slow: the close names come from every MTEB task's metadata, 6.5 s on 2 cores the first time)"""
    from flow_plugin.integrations.mteb.task_resolver import resolve_tasks

    monkeypatch.delenv(TASKS_ENV, raising=False)
    with pytest.raises(RegistryError, match=r"^unknown task or benchmark 'MySentiment'\.( Close names: .*\.)? "
                                            + UNSET_HINT):
        resolve_tasks(["MySentiment"])


# ----------------------------------------------------------------------------- where the files are read
def test_data_dir_is_read_against_the_toml_files_folder_on_every_route(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shared_data_dir: Path) -> None:
    """(Before, the study read a user's ``data_dir`` against its ``--data`` root: "data file .../a.toks does not
    exist".)"""
    from flow_plugin.integrations.mteb.hook import register_tasks
    from flow_plugin.studies.task_types import study_tasks

    folder = tmp_path / "mine"
    toml = classification(folder, "MyAligned", labelled(20, [0, 1]), labelled(6, [0, 1]))
    monkeypatch.setenv(TASKS_ENV, str(toml))
    monkeypatch.chdir(tmp_path)
    assert "MyAligned" in register_tasks()
    (entry,) = parse_task_file(toml)
    # Python with or without a data root, MTEB's registry, the study with its --data root
    routes = [task_class(entry)(), task_class(entry)(data_dir=shared_data_dir), mteb.get_task("MyAligned"),
              *study_tasks(shared_data_dir, ["MyAligned"])]
    for task in routes:
        assert task.base_folder() == folder / "data"
        task.load_data()
        assert task.dataset["test"]["text"][0] == sentence(0)
    # a task that cannot be scored, or a missing file, is named before the study writes anything
    write_tsv(folder / "data" / "test.tsv", ["text", "label"], labelled(6, [0, 1, 2]))
    with pytest.raises(DataFolderError, match=rf"^task MyAligned \({toml}\): label 2 of split 'test' never occurs"):
        study_tasks(shared_data_dir, ["MyAligned"])
    (folder / "data" / "test.tsv").unlink()
    with pytest.raises(DataFolderError, match=rf"^task MyAligned \({toml}\): data file {folder / 'data' / 'test.tsv'} "
                                              r"does not exist$"):
        study_tasks(shared_data_dir, ["MyAligned"])


# ----------------------------------------------------------------------------- the study's inputs
def test_the_study_refuses_a_bad_data_root_or_seeds_and_writes_nothing(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    output = tmp_path / "study"
    assert cli_main(["task-types", "-b", "minilm-l6", "--data", str(tmp_path / "nonexistent"), "--output-folder",
                     str(output)]) == 2
    assert capsys.readouterr().err == (f"flow-plugin task-types: error: data root {tmp_path / 'nonexistent'} is not a "
                                       "folder: give the shared data folder (holding senteval/, glue/ and mteb/) with "
                                       "--data, or set FLOW_PLUGIN_SHARED_DATA\n")
    assert not output.exists()
    for seeds in ("0", "-1"):
        assert cli_main(["task-types", "-b", "minilm-l6", "--seeds", seeds, "--calibrators", "raw", "flow",
                         "--output-folder", str(output)]) == 2
        assert capsys.readouterr().err == (f"flow-plugin task-types: error: seeds must be a positive number of seeds, "
                                           f"got {seeds}; give --seeds 1 or more\n")
        assert not output.exists()


def test_a_damaged_study_file_is_named_with_its_remedy(tmp_path: Path, shared_data_dir: Path) -> None:
    from flow_plugin.studies.task_types import STUDY_FILE, build_board, run_task_types

    output = tmp_path / "study"
    output.mkdir()
    (output / STUDY_FILE).write_text('{"format": "flow-plugin-task-types-study", "backb', encoding="utf-8")
    unreadable = rf"^unreadable study file {output / STUDY_FILE} \(.*\); delete it and rerun$"
    with pytest.raises(DataFolderError, match=unreadable):
        run_task_types("minilm-l6", shared_data_dir, output_folder=output, calibrators=["raw"],
                       tasks=["FlowPluginTRECClustering"], show_progress_bar=False)
    with pytest.raises(DataFolderError, match=unreadable):
        build_board(output, "minilm-l6", tmp_path / "board.json")
    (output / STUDY_FILE).write_text(json.dumps({"format": "flow-plugin-task-types-study", "backbone": "minilm-l6"}))
    with pytest.raises(DataFolderError, match=rf"^unreadable study file .*\(KeyError: 'runs'\); delete it and rerun$"):
        run_task_types("minilm-l6", shared_data_dir, output_folder=output, calibrators=["raw"],
                       tasks=["FlowPluginTRECClustering"], show_progress_bar=False)
    assert sorted(path.name for path in output.iterdir()) == [STUDY_FILE]


def test_a_cut_short_per_item_file_is_named_with_its_remedy(tmp_path: Path) -> None:
    from flow_plugin.results.items import read_items, write_items

    path = write_items(tmp_path / "Mine.json", task="Mine", task_type="Classification", split="test",
                       hf_subset="default", dataset_revision="sha256:0", main_score="accuracy", main_score_value=0.5,
                       arrays={"gold": [0, 1], "predictions": [[0, 0]]})
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(DataFolderError, match=rf"^{path}: unreadable per-item file \(.*\); delete it and rerun the task$"):
        read_items(path)


def test_the_study_folder_as_the_board_folder_gives_no_warning(tmp_path: Path,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    from flow_plugin.leaderboard.write import write_index
    from flow_plugin.studies.task_types import STUDY_FILE

    (tmp_path / STUDY_FILE).write_text(json.dumps({"format": "flow-plugin-task-types-study", "backbone": "x"}))
    (tmp_path / "notes.json").write_text(json.dumps({"what": "a file of the user's"}))
    with caplog.at_level(logging.WARNING):
        write_index(tmp_path)
    assert STUDY_FILE not in caplog.text
    assert "notes.json: not listed in index.html" in caplog.text  # a JSON file of no known kind still is


# ----------------------------------------------------------------------------- MTEB's own route
@pytest.mark.slow
def test_mteb_run_on_a_task_that_cannot_be_scored_ends_in_the_one_line_error(tmp_path: Path) -> None:
    """MTEB's command prints its traceback (flow-plugin leaves the interpreter's hooks alone); its last line is
    flow-plugin's one-line error naming the task, its file and the remedy."""
    toml = classification(tmp_path, "OneClassRun", labelled(20, [1]), labelled(5, [1]))
    env = {**os.environ, TASKS_ENV: str(toml), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-m", "mteb", "run", "-m", "flow_plugin/minilm-l6", "-t", "OneClassRun",
                           "--output-folder", str(tmp_path / "out")], capture_output=True, text=True, env=env,
                          timeout=600)
    assert done.returncode == 1
    assert done.stderr.rstrip().splitlines()[-1] == (
        f"flow_plugin.errors.DataFolderError: task OneClassRun ({toml}): split 'train' holds one label (1): a "
        "classifier needs at least 2; add items of other labels")


@pytest.mark.slow
def test_mteb_run_with_an_unknown_task_name_ends_naming_the_tasks_variable(tmp_path: Path) -> None:
    """(Before, MTEB's KeyError, with no word of ``$FLOW_PLUGIN_TASKS``.)"""
    env = {key: value for key, value in os.environ.items() if key != TASKS_ENV}
    done = subprocess.run([sys.executable, "-m", "mteb", "run", "-m", "flow_plugin/minilm-l6", "-t", "MySentiment",
                           "--output-folder", str(tmp_path / "out")], capture_output=True, text=True,
                          env={**env, "HF_HUB_OFFLINE": "1"}, timeout=600)
    assert done.returncode == 1
    last = done.stderr.rstrip().splitlines()[-1]
    assert last.startswith("flow_plugin.errors.UnknownTaskError: 'MySentiment' not found") and re.search(
        UNSET_HINT, last), last
    with pytest.raises(KeyError, match="not found"):  # still MTEB's KeyError for Python callers
        mteb.get_task("MySentimentNoSuchTask")


# ----------------------------------------------------------------------------- several columns, one item
def test_a_source_joins_several_columns_into_one_item(tmp_path: Path) -> None:
    (tmp_path / "a.csv").write_text("title,body,y\nA title,the  body text,1\nOnly a title,,0\n", encoding="utf-8")
    source = parse_source({"format": "delimited", "splits": {"test": "a.csv"}, "columns": {
        "text": {"join": ["title", "body"], "separator": ". "}, "label": "y"}})
    assert read_source(source, tmp_path).splits["test"] == {"text": ["A title. the body text", "Only a title"],
                                                            "label": [1, 0]}
    (tmp_path / "a.jsonl").write_text(json.dumps({"t": "A title", "b": "a body", "y": 1}) + "\n", encoding="utf-8")
    jsonl = parse_source({"format": "jsonl", "splits": {"test": "a.jsonl"},
                          "columns": {"text": [{"join": ["t", "b"]}, "t"], "label": "y"}})  # two clustering items
    assert read_source(jsonl, tmp_path).splits["test"]["text"] == [["A title a body", "A title"]]
    with pytest.raises(InputError, match="the label cannot join columns"):
        parse_source({"format": "jsonl", "splits": {"test": "a.jsonl"},
                      "columns": {"text": "t", "label": {"join": ["t", "b"]}}})
    (tmp_path / "a.csv").write_text("title,body,y\n,,1\n", encoding="utf-8")
    with pytest.raises(DataFolderError, match=r"a\.csv, record 2: empty text"):
        read_source(source, tmp_path)
    # in a task file, end to end
    toml = tmp_path / "task" / "tasks.toml"
    write_tsv(tmp_path / "task" / "data" / "train.tsv", ["title", "body", "label"],
              [(sentence(n), sentence(n + 40), n % 2) for n in range(20)])
    write_tsv(tmp_path / "task" / "data" / "test.tsv", ["title", "body", "label"],
              [(sentence(n), sentence(n + 40), n % 2) for n in range(6)])
    user_task(toml.parent, "Joined", "Classification",
              '{ text = { join = ["title", "body"], separator = " | " }, label = "label" }',
              '{ train = "train.tsv", test = "test.tsv" }')
    (entry,) = parse_task_file(toml)
    task = task_class(entry)()
    task.load_data()
    assert task.dataset["test"]["text"][0] == f"{sentence(0)} | {sentence(40)}"
