"""Tests of flow_plugin.data.senteval: on the real shared data, and on tiny folders built here."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from flow_plugin.errors import DataFolderError, InputError
from flow_plugin.data.senteval import (
    EXPECTED_TEST_PAIRS,
    SENTEVAL_STS_TASKS,
    SENTEVAL_TASKS,
    available_splits,
    canonical_task,
    load_eval_subsets,
    load_qnli_dev,
    load_split,
    resolve_senteval_root,
    task_sentences,
)

# Counts written out here (not taken from the module) so a wrong constant in the module fails.
KNOWN_TEST_TOTALS = {
    "STS12": 3108,
    "STS13": 1500,
    "STS14": 3750,
    "STS15": 3000,
    "STS16": 1186,
    "STSBenchmark": 1379,
    "SICKRelatedness": 4927,
}
KNOWN_SPLITS = {
    "STSBenchmark": {"train": 5749, "dev": 1500, "test": 1379},
    "SICKRelatedness": {"train": 4500, "dev": 500, "test": 4927},
}
# docs/mteb.md table: scored pairs (lines in the file).
KNOWN_SUBSETS = {
    "STS15": {
        "answers-forums": (375, 2000),
        "answers-students": (750, 1500),
        "belief": (375, 2000),
        "headlines": (750, 1500),
        "images": (750, 1500),
    },
    "STS16": {
        "answer-answer": (254, 1572),
        "headlines": (249, 1498),
        "plagiarism": (230, 1271),
        "postediting": (244, 3287),
        "question-question": (209, 1555),
    },
}


# --------------------------------------------------------------------------- real data


@pytest.mark.parametrize("task", SENTEVAL_TASKS)
def test_eval_pair_count_matches_known_total(senteval_dir: Path, task: str) -> None:
    subsets = load_eval_subsets(senteval_dir, task)
    assert sum(len(p) for p in subsets) == KNOWN_TEST_TOTALS[task] == EXPECTED_TEST_PAIRS[task]
    expected_names = SENTEVAL_STS_TASKS.get(task, ("default",))
    assert tuple(p.subset for p in subsets) == expected_names
    for p in subsets:
        assert p.task == task and p.split == "test"
        assert p.scores.dtype == np.float64 and p.scores.shape == (len(p),)
        assert not p.scores.flags.writeable
        low = 1.0 if task == "SICKRelatedness" else 0.0
        assert p.scores.min() >= low and p.scores.max() <= 5.0
        assert all(isinstance(s, str) and s.strip() for s in p.sentences1 + p.sentences2)
        assert not any("\r" in s or "\n" in s or "\t" in s for s in p.sentences1 + p.sentences2)


@pytest.mark.parametrize("task", ["STS15", "STS16"])
def test_sts15_sts16_subset_counts_and_skipped_lines(senteval_dir: Path, task: str) -> None:
    for p in load_eval_subsets(senteval_dir, task):
        n_scored, n_lines = KNOWN_SUBSETS[task][p.subset]
        assert len(p) == n_scored, p.subset
        assert len(p.source.read_text(encoding="utf-8").splitlines()) == n_lines
        assert p.line_numbers.max() <= n_lines


def test_split_sizes(senteval_dir: Path) -> None:
    for task, sizes in KNOWN_SPLITS.items():
        assert available_splits(task) == ("train", "dev", "test")
        for split, n in sizes.items():
            (pairs,) = load_split(senteval_dir, task, split)
            assert len(pairs) == n, (task, split)
    dev = load_split(senteval_dir, "SICKRelatedness", "dev")[0]
    assert dev.source.name == "SICK_trial.txt"


def test_stsb_first_test_pair_equals_first_file_line(senteval_dir: Path) -> None:
    path = senteval_dir / "downstream" / "STS" / "STSBenchmark" / "sts-test.csv"
    first = path.read_text(encoding="utf-8").split("\n")[0].split("\t")
    (pairs,) = load_eval_subsets(senteval_dir, "STSBenchmark")
    assert pairs.source == path
    assert pairs.sentences1[0] == first[5]
    assert pairs.sentences2[0] == first[6]
    assert pairs.scores[0] == float(first[4])
    assert pairs.line_numbers[0] == 1


def test_sick_test_crlf_and_header(senteval_dir: Path) -> None:
    path = senteval_dir / "downstream" / "SICK" / "SICK_test_annotated.txt"
    raw = path.read_bytes()
    assert b"\r\n" in raw  # the file really has CRLF line ends
    (pairs,) = load_eval_subsets(senteval_dir, "SICKRelatedness")
    second_line = raw.decode("utf-8").split("\r\n")[1].split("\t")
    assert pairs.sentences1[0] == second_line[1]
    assert pairs.sentences2[0] == second_line[2]
    assert pairs.scores[0] == float(second_line[3])
    assert pairs.line_numbers[0] == 2  # line 1 is the header
    # SICK keeps its case (STS-B is lower-cased)
    assert any(s[0].isupper() for s in pairs.sentences1)


def test_empty_gold_lines_are_skipped(senteval_dir: Path) -> None:
    folder = senteval_dir / "downstream" / "STS" / "STS16-en-test"
    gold = (folder / "STS.gs.headlines.txt").read_text(encoding="utf-8").split("\n")[:-1]
    inputs = (folder / "STS.input.headlines.txt").read_text(encoding="utf-8").split("\n")[:-1]
    scored = [i + 1 for i, g in enumerate(gold) if g.strip()]
    pairs = next(p for p in load_eval_subsets(senteval_dir, "STS16") if p.subset == "headlines")
    assert len(gold) == 1498 and len(scored) == 249
    assert pairs.line_numbers.tolist() == scored
    assert 1 not in scored  # the file starts with unscored lines
    for k in (0, 100, 248):
        line = pairs.line_numbers[k]
        s1, s2 = inputs[line - 1].split("\t")
        assert (pairs.sentences1[k], pairs.sentences2[k]) == (s1, s2)
        assert pairs.scores[k] == float(gold[line - 1])


@pytest.mark.parametrize("task", SENTEVAL_TASKS)
def test_task_sentences_is_two_per_pair_over_all_splits(senteval_dir: Path, task: str) -> None:
    n_pairs = sum(len(p) for split in available_splits(task) for p in load_split(senteval_dir, task, split))
    sentences = task_sentences(senteval_dir, task)
    assert len(sentences) == 2 * n_pairs
    if task in KNOWN_SPLITS:
        assert n_pairs == sum(KNOWN_SPLITS[task].values())
    first = load_split(senteval_dir, task, available_splits(task)[0])[0]
    assert sentences[: len(first)] == list(first.sentences1)
    assert sentences[len(first): 2 * len(first)] == list(first.sentences2)


def test_root_may_be_downstream_folder(senteval_dir: Path) -> None:
    assert resolve_senteval_root(senteval_dir) == senteval_dir
    assert resolve_senteval_root(senteval_dir / "downstream") == senteval_dir
    via_downstream = load_eval_subsets(senteval_dir / "downstream", "STS13")
    assert sum(len(p) for p in via_downstream) == 1500


def test_the_shared_root_stands_for_its_senteval_folder(shared_data_dir: Path, tmp_path: Path) -> None:
    assert resolve_senteval_root(shared_data_dir) == shared_data_dir / "senteval"  # the one data root works here too
    with pytest.raises(DataFolderError, match="or the data folder holding senteval/"):
        resolve_senteval_root(tmp_path)  # a folder that is neither names every accepted layout


def test_qnli_dev(shared_data_dir: Path) -> None:
    path = shared_data_dir / "glue" / "QNLI" / "dev.tsv"
    if not path.is_file():
        pytest.skip(f"QNLI dev file not found: {path}")
    for given in (shared_data_dir / "glue", path.parent, path):
        q = load_qnli_dev(given)
        assert len(q) == 5463 and int(q.labels.sum()) == 2702
        assert q.labels.dtype == np.int8 and set(np.unique(q.labels)) == {0, 1}
        assert q.source == path
    first = path.read_text(encoding="utf-8").split("\n")[1].split("\t")
    assert (q.questions[0], q.sentences[0], int(q.labels[0])) == (first[1], first[2], first[3] == "entailment")


# --------------------------------------------------------------------------- tiny folders


def _write(path: Path, lines: list[str], *, newline: str = "\n") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes((newline.join(lines) + newline).encode("utf-8"))


@pytest.fixture
def tiny_root(tmp_path: Path) -> Path:
    """A SentEval-format folder with STS12 (5 tiny subsets), STS-B and SICK."""
    root = tmp_path / "senteval"
    sts12 = root / "downstream" / "STS" / "STS12-en-test"
    for k, subset in enumerate(SENTEVAL_STS_TASKS["STS12"]):
        _write(sts12 / f"STS.input.{subset}.txt", [f"a {subset} one\tb one", "a two\tb two", "a three\tb three"])
        _write(sts12 / f"STS.gs.{subset}.txt", [f"{k}.5", "", " 4 "])  # middle pair unscored
    stsb = root / "downstream" / "STS" / "STSBenchmark"
    for split in ("train", "dev", "test"):
        _write(stsb / f"sts-{split}.csv", [
            f"main-captions\tMSRvid\t2012test\t0001\t2.5\t{split} first .\t{split} second .",
            f"main-news\theadlines\t2015\t0002\t5.000\tx y\tx y z",
        ])
    sick = root / "downstream" / "SICK"
    header = "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment"
    for name in ("SICK_train.txt", "SICK_trial.txt", "SICK_test_annotated.txt"):
        _write(sick / name, [header, "1\tA Man runs\tA man is running\t4.5\tENTAILMENT",
                             "2\tA cat\tNo dog\t1\tNEUTRAL"], newline="\r\n" if "test" in name else "\n")
    return root


def test_tiny_folder_reads_without_count_check(tiny_root: Path) -> None:
    subsets = load_eval_subsets(tiny_root, "STS12", check_counts=False)
    assert [len(p) for p in subsets] == [2] * 5
    first = subsets[0]
    assert first.sentences1 == ("a MSRpar one", "a three") and first.sentences2 == ("b one", "b three")
    assert first.scores.tolist() == [0.5, 4.0]
    assert first.line_numbers.tolist() == [1, 3]
    assert first.gold_source == tiny_root / "downstream" / "STS" / "STS12-en-test" / "STS.gs.MSRpar.txt"

    (stsb,) = load_split(tiny_root, "STS-B", "dev", check_counts=False)
    assert stsb.task == "STSBenchmark" and stsb.sentences1 == ("dev first .", "x y")
    assert stsb.scores.tolist() == [2.5, 5.0]

    (sick,) = load_eval_subsets(tiny_root, "SICK-R", check_counts=False)
    assert sick.sentences1 == ("A Man runs", "A cat")  # case kept, CRLF stripped
    assert sick.sentences2 == ("A man is running", "No dog")
    assert sick.scores.tolist() == [4.5, 1.0]

    sentences = task_sentences(tiny_root, "SICKRelatedness", check_counts=False)
    assert len(sentences) == 3 * 2 * 2
    assert sentences[:4] == ["A Man runs", "A cat", "A man is running", "No dog"]


def test_count_check_names_task_expected_and_found(tiny_root: Path) -> None:
    with pytest.raises(DataFolderError, match=r"STS12 subset MSRpar: expected 750 scored pairs, found 2"):
        load_eval_subsets(tiny_root, "STS12")
    with pytest.raises(DataFolderError, match=r"STSBenchmark test: expected 1379 scored pairs, found 2"):
        load_eval_subsets(tiny_root, "STSBenchmark")
    with pytest.raises(DataFolderError, match=r"SICKRelatedness dev: expected 500 scored pairs, found 2 .*SICK_trial\.txt"):
        load_split(tiny_root, "SICKRelatedness", "dev")


def test_missing_file_names_path(tiny_root: Path) -> None:
    gold = tiny_root / "downstream" / "STS" / "STS12-en-test" / "STS.gs.MSRvid.txt"
    gold.unlink()
    with pytest.raises(DataFolderError, match=re.escape(str(gold))):
        load_eval_subsets(tiny_root, "STS12", check_counts=False)
    with pytest.raises(DataFolderError, match=re.escape(str(tiny_root / "downstream" / "STS" / "STS13-en-test"))):
        load_eval_subsets(tiny_root, "STS13", check_counts=False)


def test_wrong_column_count_names_file_and_line(tiny_root: Path) -> None:
    path = tiny_root / "downstream" / "STS" / "STS12-en-test" / "STS.input.SMTeuroparl.txt"
    _write(path, ["a\tb", "a\tb\tc", "a\tb"])
    with pytest.raises(DataFolderError, match=re.escape(f"{path}, line 2: expected 2 tab-separated columns, found 3")):
        load_eval_subsets(tiny_root, "STS12", check_counts=False)
    sick = tiny_root / "downstream" / "SICK" / "SICK_train.txt"
    _write(sick, ["pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment", "1\tonly\t3.0"])
    with pytest.raises(DataFolderError, match=re.escape(f"{sick}, line 2")):
        load_split(tiny_root, "SICKRelatedness", "train", check_counts=False)


def test_non_numeric_and_out_of_range_scores(tiny_root: Path) -> None:
    path = tiny_root / "downstream" / "STS" / "STSBenchmark" / "sts-dev.csv"
    _write(path, ["g\tg\ty\t1\t3.0\ta\tb", "g\tg\ty\t2\tabc\ta\tb"])
    with pytest.raises(DataFolderError, match=re.escape(f"{path}, line 2: score 'abc' is not a number")):
        load_split(tiny_root, "STSBenchmark", "dev", check_counts=False)
    gold = tiny_root / "downstream" / "STS" / "STS12-en-test" / "STS.gs.MSRpar.txt"
    _write(gold, ["1", "", "nan"])
    with pytest.raises(DataFolderError, match=re.escape(f"{gold}, line 3")):
        load_eval_subsets(tiny_root, "STS12", check_counts=False)
    sick = tiny_root / "downstream" / "SICK" / "SICK_trial.txt"
    _write(sick, ["h1\th2\th3\th4\th5", "1\ta\tb\t0.5\tNEUTRAL"])  # SICK is 1-5
    with pytest.raises(DataFolderError, match=r"outside the SICKRelatedness range"):
        load_split(tiny_root, "SICKRelatedness", "dev", check_counts=False)


def test_gold_and_input_line_counts_must_agree(tiny_root: Path) -> None:
    gold = tiny_root / "downstream" / "STS" / "STS12-en-test" / "STS.gs.MSRvid.txt"
    _write(gold, ["1", "2"])
    with pytest.raises(DataFolderError, match=re.escape(f"{gold} has 2 lines")):
        load_eval_subsets(tiny_root, "STS12", check_counts=False)


def test_bad_roots(tmp_path: Path, tiny_root: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(DataFolderError, match=re.escape(f"{missing} does not exist")):
        resolve_senteval_root(missing)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataFolderError, match=r"expected a folder containing downstream/"):
        load_eval_subsets(empty, "STS12")
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    with pytest.raises(DataFolderError, match="is not a folder"):
        resolve_senteval_root(a_file)
    assert resolve_senteval_root(tiny_root / "downstream") == tiny_root


def test_task_and_split_names() -> None:
    assert canonical_task("sts-b") == "STSBenchmark" and canonical_task("SICK-R") == "SICKRelatedness"
    assert available_splits("STS14") == ("test",)
    with pytest.raises(InputError, match="unknown task"):
        canonical_task("STS17")
    with pytest.raises(InputError, match="STS12 has no split 'train'"):
        load_split("/nonexistent", "STS12", "train")


def test_qnli_tiny(tmp_path: Path) -> None:
    path = tmp_path / "glue" / "QNLI" / "dev.tsv"
    _write(path, ["index\tquestion\tsentence\tlabel", "0\tWho?\tHim.\tentailment", "1\tWhy?\tNo.\tnot_entailment"])
    q = load_qnli_dev(tmp_path / "glue", check_counts=False)
    assert q.questions == ("Who?", "Why?") and q.labels.tolist() == [1, 0]
    with pytest.raises(DataFolderError, match=r"QNLI dev: expected 5463 scored pairs, found 2"):
        load_qnli_dev(path)
    _write(path, ["index\tquestion\tsentence\tlabel", "0\tWho?\tHim.\tmaybe"])
    with pytest.raises(DataFolderError, match=re.escape(f"{path}, line 2: label 'maybe'")):
        load_qnli_dev(path, check_counts=False)
    with pytest.raises(DataFolderError, match=re.escape(str(tmp_path / "nothing" / "QNLI" / "dev.tsv"))):
        (tmp_path / "nothing").mkdir()
        load_qnli_dev(tmp_path / "nothing")


# --------------------------------------------------------------------------- line ends
UNICODE_BREAKS = "\x0c\x0b\x1c\x85\u2028\u2029"  # str.splitlines ends a line at each of these; files do not


def test_a_sentence_file_has_one_sentence_per_newline_whatever_else_its_lines_hold(tmp_path: Path) -> None:
    """Form feed, U+0085, U+2028 ... inside a line are text, not line ends (3 lines were fitted as 5)."""
    from flow_plugin.data.fit_corpus import read_sentence_file

    path = tmp_path / "corpus.txt"
    lines = ["a man\x0cplays guitar", "page\u2028two\x85three", f"all {UNICODE_BREAKS} of them"]
    path.write_bytes(("\r\n".join(lines[:2]) + "\n" + lines[2] + "\n").encode("utf-8"))
    assert read_sentence_file(path) == lines


def test_senteval_files_split_at_newlines_only(tiny_root: Path) -> None:
    subset = tiny_root / "downstream" / "STS" / "STS12-en-test" / "STS.input.MSRpar.txt"
    _write(subset, ["a\u2028one\tb\x85one", "a two\tb\x0ctwo", "a three\tb three"])
    first = load_eval_subsets(tiny_root, "STS12", check_counts=False)[0]
    assert first.sentences1 == ("a\u2028one", "a three") and first.sentences2 == ("b\x85one", "b three")


@pytest.mark.parametrize("reader", ["fit corpus", "senteval"])
def test_a_lone_carriage_return_is_an_error_naming_file_and_line(reader: str, tiny_root: Path, tmp_path: Path) -> None:
    """``\\r`` without ``\\n`` (old Mac line ends) is neither silently a line end nor silently text."""
    from flow_plugin.data.fit_corpus import read_sentence_file

    if reader == "fit corpus":
        path = tmp_path / "corpus.txt"
        path.write_bytes(b"one\ntwo\rthree\n")
        read = lambda: read_sentence_file(path)  # noqa: E731
    else:
        path = tiny_root / "downstream" / "STS" / "STS12-en-test" / "STS.gs.MSRpar.txt"
        path.write_bytes(b"0.5\r\r 4 \r")
        read = lambda: load_eval_subsets(tiny_root, "STS12", check_counts=False)  # noqa: E731
    with pytest.raises(DataFolderError, match=re.escape(f"{path}, line ") + r"[12]: a carriage return .* not followed "
                       r"by a line feed.*\\n or \\r\\n line ends"):
        read()
