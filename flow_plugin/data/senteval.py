"""Readers for the SentEval-format evaluation files (STS12-16, STS-B, SICK-R) and GLUE QNLI dev.

The reading rules follow SentEval (facebookresearch/SentEval, ``senteval/sts.py`` and
``senteval/sick.py``), so the pairs returned here are the pairs SentEval evaluates:

* STS12..STS16: ``<root>/downstream/STS/STS1x-en-test/STS.input.<subset>.txt`` holds
  tab-separated sentence pairs and ``STS.gs.<subset>.txt`` the gold score of each line.
  A pair counts only if its gold line is not empty (after stripping whitespace); the
  unscored pairs (many in STS15 and STS16) are skipped, as SentEval does.
* STS Benchmark: ``<root>/downstream/STS/STSBenchmark/sts-{train,dev,test}.csv``,
  tab-separated; score = column index 4, sentences = column indices 5 and 6.
* SICK-R: ``<root>/downstream/SICK/SICK_{train,trial,test_annotated}.txt``; a header
  line; sentences = column indices 1 and 2, relatedness (1-5) = column index 3. The
  ``trial`` file is the ``"dev"`` split of this API.

Sentences are returned as the text of their column, unchanged: the files are already
Moses-tokenized (tokens joined by single spaces). Nothing is lower-cased or re-tokenized.
Lines end at ``\\n`` or ``\\r\\n`` only (a lone ``\\r`` is an error naming the line; a form feed,
U+0085 or U+2028 is text, not a line end), and line ends are removed. A handful of sentences keep a
leading or trailing space that the files contain; SentEval itself splits sentences
on whitespace, so ``" ".join(s.split())`` gives SentEval's exact token string.

Every reader checks the known pair counts (``EXPECTED_PAIRS``) unless called with
``check_counts=False`` (for custom folders). Missing, unreadable or malformed files raise
:class:`flow_plugin.errors.DataFolderError` with a message naming the file (and the
line number for a malformed line).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Union

import numpy as np

from flow_plugin._io import read_text_lines
from flow_plugin.data.roots import resolve_senteval_root
from flow_plugin.data.tasks import SENTEVAL_STS_TASKS, SENTEVAL_TASKS
from flow_plugin.errors import DataFolderError, InputError, InputTypeError

PathLike = Union[str, "os.PathLike[str]"]

__all__ = [
    "SENTEVAL_STS_TASKS",
    "SENTEVAL_TASKS",
    "SCORE_RANGE",
    "EXPECTED_PAIRS",
    "EXPECTED_TEST_PAIRS",
    "EXPECTED_SUBSET_PAIRS",
    "EXPECTED_QNLI_DEV_PAIRS",
    "EXPECTED_QNLI_DEV_ENTAILMENT",
    "STSPairs",
    "QNLIPairs",
    "canonical_task",
    "resolve_senteval_root",
    "available_splits",
    "load_split",
    "load_eval_subsets",
    "task_sentences",
    "load_qnli_dev",
]

#: Range of the gold scores: 0-5 for STS12-16 and STS-B, 1-5 for SICK relatedness.
SCORE_RANGE: dict[str, tuple[float, float]] = {
    **{task: (0.0, 5.0) for task in SENTEVAL_STS_TASKS},
    "STSBenchmark": (0.0, 5.0),
    "SICKRelatedness": (1.0, 5.0),
}

#: Known number of scored pairs per (task, split), counted with SentEval's rules.
EXPECTED_PAIRS: dict[tuple[str, str], int] = {
    ("STS12", "test"): 3108,
    ("STS13", "test"): 1500,
    ("STS14", "test"): 3750,
    ("STS15", "test"): 3000,
    ("STS16", "test"): 1186,
    ("STSBenchmark", "train"): 5749,
    ("STSBenchmark", "dev"): 1500,
    ("STSBenchmark", "test"): 1379,
    ("SICKRelatedness", "train"): 4500,
    ("SICKRelatedness", "dev"): 500,
    ("SICKRelatedness", "test"): 4927,
}

#: Known number of evaluation (test) pairs per task.
EXPECTED_TEST_PAIRS: dict[str, int] = {task: EXPECTED_PAIRS[(task, "test")] for task in SENTEVAL_TASKS}

#: Known number of scored pairs per STS12-16 subset (lines in the file, if different, in comments).
EXPECTED_SUBSET_PAIRS: dict[tuple[str, str], int] = {
    ("STS12", "MSRpar"): 750,
    ("STS12", "MSRvid"): 750,
    ("STS12", "SMTeuroparl"): 459,
    ("STS12", "surprise.OnWN"): 750,
    ("STS12", "surprise.SMTnews"): 399,
    ("STS13", "FNWN"): 189,
    ("STS13", "headlines"): 750,
    ("STS13", "OnWN"): 561,
    ("STS14", "deft-forum"): 450,
    ("STS14", "deft-news"): 300,
    ("STS14", "headlines"): 750,
    ("STS14", "images"): 750,
    ("STS14", "OnWN"): 750,
    ("STS14", "tweet-news"): 750,
    ("STS15", "answers-forums"): 375,  # 2000 lines
    ("STS15", "answers-students"): 750,  # 1500 lines
    ("STS15", "belief"): 375,  # 2000 lines
    ("STS15", "headlines"): 750,  # 1500 lines
    ("STS15", "images"): 750,  # 1500 lines
    ("STS16", "answer-answer"): 254,  # 1572 lines
    ("STS16", "headlines"): 249,  # 1498 lines
    ("STS16", "plagiarism"): 230,  # 1271 lines
    ("STS16", "postediting"): 244,  # 3287 lines
    ("STS16", "question-question"): 209,  # 1555 lines
}

#: Known size of GLUE QNLI (v2) dev and its number of ``entailment`` labels.
EXPECTED_QNLI_DEV_PAIRS: int = 5463
EXPECTED_QNLI_DEV_ENTAILMENT: int = 2702

_SPLITS: dict[str, tuple[str, ...]] = {
    **{task: ("test",) for task in SENTEVAL_STS_TASKS},
    "STSBenchmark": ("train", "dev", "test"),
    "SICKRelatedness": ("train", "dev", "test"),
}

_STSB_FILES = {"train": "sts-train.csv", "dev": "sts-dev.csv", "test": "sts-test.csv"}
_SICK_FILES = {"train": "SICK_train.txt", "dev": "SICK_trial.txt", "test": "SICK_test_annotated.txt"}

# Other spellings of the task names (MTEB's, the paper's), matched case-insensitively.
_ALIASES: dict[str, str] = {
    **{task.lower(): task for task in SENTEVAL_TASKS},
    "sts-b": "STSBenchmark",
    "stsb": "STSBenchmark",
    "sts-benchmark": "STSBenchmark",
    "sick-r": "SICKRelatedness",
    "sickr": "SICKRelatedness",
    "sick": "SICKRelatedness",
}


# --------------------------------------------------------------------------- types


@dataclass(frozen=True, eq=False)
class STSPairs:
    """Scored sentence pairs of one subset of one split of one task.

    ``scores`` is a read-only float64 array. ``line_numbers`` gives, for each pair, its
    1-based line number in ``source`` (the header line of SICK counts as line 1).
    ``gold_source`` is the separate gold file of STS12-16 (``None`` for STS-B and SICK,
    whose scores sit in ``source``).
    """

    task: str
    subset: str
    split: str
    sentences1: tuple[str, ...]
    sentences2: tuple[str, ...]
    scores: np.ndarray
    source: Path
    gold_source: Path | None = None
    line_numbers: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    def __post_init__(self) -> None:
        n = len(self.sentences1)
        scores = np.array(self.scores, dtype=np.float64)
        if scores.shape != (n,) or len(self.sentences2) != n:
            raise InputError(
                f"STSPairs({self.task}/{self.subset}/{self.split}): sentences1 has {n} items, "
                f"sentences2 {len(self.sentences2)}, scores shape {scores.shape}; they must agree"
            )
        scores.setflags(write=False)
        object.__setattr__(self, "scores", scores)
        lines = np.array(self.line_numbers, dtype=np.int64)
        if lines.shape != (n,):
            if lines.size == 0:
                lines = np.arange(1, n + 1, dtype=np.int64)
            else:
                raise InputError(f"STSPairs: line_numbers has shape {lines.shape}, expected ({n},)")
        lines.setflags(write=False)
        object.__setattr__(self, "line_numbers", lines)

    def __len__(self) -> int:
        return len(self.sentences1)

    @property
    def name(self) -> str:
        """``"<task>/<subset>/<split>"``, for messages and result keys."""
        return f"{self.task}/{self.subset}/{self.split}"


@dataclass(frozen=True, eq=False)
class QNLIPairs:
    """GLUE QNLI dev: question / sentence pairs, ``labels`` int8 with 1 = ``entailment``."""

    questions: tuple[str, ...]
    sentences: tuple[str, ...]
    labels: np.ndarray
    source: Path

    def __post_init__(self) -> None:
        labels = np.array(self.labels, dtype=np.int8)
        if labels.shape != (len(self.questions),) or len(self.sentences) != len(self.questions):
            raise InputError(
                f"QNLIPairs: {len(self.questions)} questions, {len(self.sentences)} sentences, "
                f"labels shape {labels.shape}; they must agree"
            )
        labels.setflags(write=False)
        object.__setattr__(self, "labels", labels)

    def __len__(self) -> int:
        return len(self.questions)


# --------------------------------------------------------------------------- helpers


def canonical_task(task: str) -> str:
    """Return the SentEval name of ``task``; also accepts ``"STS-B"``, ``"SICK-R"``, any case."""
    if not isinstance(task, str):
        raise InputTypeError(f"task must be a str, got {type(task).__name__}")
    try:
        return _ALIASES[task.strip().lower()]
    except KeyError:
        raise InputError(f"unknown task {task!r}; expected one of {', '.join(SENTEVAL_TASKS)}") from None


def available_splits(task: str) -> tuple[str, ...]:
    """Splits that exist for ``task``: ``("test",)`` for STS12-16, train/dev/test otherwise."""
    return _SPLITS[canonical_task(task)]


def _read_lines(path: Path) -> list[str]:
    """Lines of a UTF-8 text file without their line ends (``\\n`` or ``\\r\\n``)."""
    return read_text_lines(path, "file")


def _columns(line: str, path: Path, lineno: int, expected: int, *, at_least: bool = False) -> list[str]:
    cols = line.split("\t")
    if len(cols) < expected or (not at_least and len(cols) != expected):
        want = f"at least {expected}" if at_least else str(expected)
        raise DataFolderError(
            f"{path}, line {lineno}: expected {want} tab-separated columns, found {len(cols)}"
        )
    return cols


def _score(text: str, path: Path, lineno: int, task: str) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        raise DataFolderError(f"{path}, line {lineno}: score {text!r} is not a number") from None
    low, high = SCORE_RANGE[task]
    if not math.isfinite(value) or not low <= value <= high:
        raise DataFolderError(
            f"{path}, line {lineno}: score {text.strip()!r} is outside the {task} range [{low:g}, {high:g}]"
        )
    return value


def _check_count(what: str, expected: int | None, found: int, source: Path | str) -> None:
    if expected is not None and found != expected:
        raise DataFolderError(f"{what}: expected {expected} scored pairs, found {found} (in {source})")


# --------------------------------------------------------------------------- readers


def _read_sts_subset(folder: Path, task: str, subset: str, check_counts: bool) -> STSPairs:
    input_path = folder / f"STS.input.{subset}.txt"
    gold_path = folder / f"STS.gs.{subset}.txt"
    input_lines = _read_lines(input_path)
    gold_lines = _read_lines(gold_path)
    if len(gold_lines) != len(input_lines):
        raise DataFolderError(
            f"{gold_path} has {len(gold_lines)} lines but {input_path} has {len(input_lines)}; "
            "gold lines must align with input lines"
        )
    s1: list[str] = []
    s2: list[str] = []
    scores: list[float] = []
    lines: list[int] = []
    for i, (pair_line, gold_line) in enumerate(zip(input_lines, gold_lines), start=1):
        cols = _columns(pair_line, input_path, i, 2)
        if not gold_line.strip():
            continue  # unscored pair: SentEval drops it
        scores.append(_score(gold_line, gold_path, i, task))
        s1.append(cols[0])
        s2.append(cols[1])
        lines.append(i)
    if check_counts:
        _check_count(f"{task} subset {subset}", EXPECTED_SUBSET_PAIRS.get((task, subset)), len(scores), gold_path)
    return STSPairs(task, subset, "test", tuple(s1), tuple(s2), np.asarray(scores), input_path, gold_path, np.asarray(lines))


def _read_table(path: Path, task: str, split: str, *, header: bool, n_cols: int, at_least: bool,
                i1: int, i2: int, iscore: int) -> STSPairs:
    all_lines = _read_lines(path)
    start = 1
    if header:
        if not all_lines:
            raise DataFolderError(f"{path} is empty: expected a header line")
        _columns(all_lines[0], path, 1, n_cols, at_least=at_least)
        start = 2
    s1: list[str] = []
    s2: list[str] = []
    scores: list[float] = []
    lines: list[int] = []
    for i, line in enumerate(all_lines[start - 1:], start=start):
        cols = _columns(line, path, i, n_cols, at_least=at_least)
        scores.append(_score(cols[iscore], path, i, task))
        s1.append(cols[i1])
        s2.append(cols[i2])
        lines.append(i)
    return STSPairs(task, "default", split, tuple(s1), tuple(s2), np.asarray(scores), path, None, np.asarray(lines))


def load_split(root: PathLike, task: str, split: str, *, check_counts: bool = True) -> list[STSPairs]:
    """Load one split of one task as a list of subsets.

    STS12-16 have only a ``"test"`` split, returned as one :class:`STSPairs` per subset in
    SentEval's order. STS-B and SICK-R have ``"train"``, ``"dev"`` and ``"test"``, each
    returned as a one-element list with subset ``"default"`` (SICK's ``"dev"`` is
    ``SICK_trial.txt``). With ``check_counts`` the known pair counts are enforced.
    """
    task = canonical_task(task)
    if split not in _SPLITS[task]:
        raise InputError(f"{task} has no split {split!r}; available: {', '.join(_SPLITS[task])}")
    downstream = resolve_senteval_root(root) / "downstream"
    if task in SENTEVAL_STS_TASKS:
        folder = downstream / "STS" / f"{task}-en-test"
        if not folder.is_dir():
            raise DataFolderError(f"missing folder {folder} ({task} test files)")
        result = [_read_sts_subset(folder, task, subset, check_counts) for subset in SENTEVAL_STS_TASKS[task]]
        source: Path | str = folder
    elif task == "STSBenchmark":
        path = downstream / "STS" / "STSBenchmark" / _STSB_FILES[split]
        # The SentEval files have 7 columns; the raw release has source tags in 8-9 (ignored, as in SentEval).
        result = [_read_table(path, task, split, header=False, n_cols=7, at_least=True, i1=5, i2=6, iscore=4)]
        source = path
    else:
        path = downstream / "SICK" / _SICK_FILES[split]
        result = [_read_table(path, task, split, header=True, n_cols=5, at_least=False, i1=1, i2=2, iscore=3)]
        source = path
    if check_counts:
        _check_count(f"{task} {split}", EXPECTED_PAIRS[(task, split)], sum(len(p) for p in result), source)
    return result


def load_eval_subsets(root: PathLike, task: str, *, check_counts: bool = True) -> list[STSPairs]:
    """The evaluation pairs of ``task``: the test split (per subset for STS12-16)."""
    return load_split(root, task, "test", check_counts=check_counts)


def task_sentences(root: PathLike, task: str, *, check_counts: bool = True) -> list[str]:
    """Every sentence of every split of ``task``: the unlabelled "target" corpus of BERT-flow.

    Splits in the order train, dev, test (only test for STS12-16); within a subset the
    order is sentence1 of every pair, then sentence2 of every pair. Only scored pairs
    are used, so the corpus is exactly what SentEval evaluates. Duplicates are kept.
    """
    sentences: list[str] = []
    for split in available_splits(task):
        for pairs in load_split(root, task, split, check_counts=check_counts):
            sentences.extend(pairs.sentences1)
            sentences.extend(pairs.sentences2)
    return sentences


_QNLI_HEADER = ("index", "question", "sentence", "label")
_QNLI_LABELS = {"entailment": 1, "not_entailment": 0}


def load_qnli_dev(glue_root_or_file: PathLike, *, check_counts: bool = True) -> QNLIPairs:
    """Load GLUE QNLI ``dev.tsv``.

    ``glue_root_or_file`` may be the GLUE folder (containing ``QNLI/dev.tsv``), the ``QNLI``
    folder, or the file itself. Columns: index, question, sentence, label (header line
    required). ``labels`` is 1 for ``entailment`` and 0 for ``not_entailment``.
    """
    if not isinstance(glue_root_or_file, (str, os.PathLike)):
        raise InputTypeError(f"QNLI path must be a path, got {type(glue_root_or_file).__name__}")
    given = Path(glue_root_or_file).expanduser()
    if given.is_dir():
        candidates = [given / "QNLI" / "dev.tsv", given / "dev.tsv"]
        path = next((c for c in candidates if c.is_file()), None)
        if path is None:
            raise DataFolderError(
                f"missing file {candidates[0]} (or {candidates[1]}): expected the GLUE folder, "
                "the QNLI folder or the dev.tsv file"
            )
    else:
        path = given
    lines = _read_lines(path)
    if not lines:
        raise DataFolderError(f"{path} is empty: expected a header line with columns {_QNLI_HEADER}")
    header = tuple(_columns(lines[0], path, 1, 4))
    if header != _QNLI_HEADER:
        raise DataFolderError(f"{path}, line 1: header {header} is not {_QNLI_HEADER}")
    questions: list[str] = []
    sentences: list[str] = []
    labels: list[int] = []
    for i, line in enumerate(lines[1:], start=2):
        cols = _columns(line, path, i, 4)
        label = _QNLI_LABELS.get(cols[3].strip())
        if label is None:
            raise DataFolderError(f"{path}, line {i}: label {cols[3]!r} is not entailment/not_entailment")
        questions.append(cols[1])
        sentences.append(cols[2])
        labels.append(label)
    if check_counts:
        _check_count("QNLI dev", EXPECTED_QNLI_DEV_PAIRS, len(labels), path)
        n_entail = sum(labels)
        if n_entail != EXPECTED_QNLI_DEV_ENTAILMENT:
            raise DataFolderError(
                f"QNLI dev: expected {EXPECTED_QNLI_DEV_ENTAILMENT} entailment labels, found {n_entail} (in {path})"
            )
    return QNLIPairs(tuple(questions), tuple(sentences), np.asarray(labels, dtype=np.int8), path)
