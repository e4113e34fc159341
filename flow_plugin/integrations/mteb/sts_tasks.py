"""Offline MTEB STS tasks over a SentEval data folder.

The seven sets BERT-flow reports, read from the files SentEval reads (see
:mod:`flow_plugin.data.senteval`), as MTEB ``AbsTaskSTS`` tasks:

    SentEvalSTS12 .. SentEvalSTS16, SentEvalSTSBenchmark, SentEvalSICKR

Their names differ from MTEB's own tasks on purpose: MTEB's SICK-R holds all 9,927 pairs
while SentEval's SICK-R test set holds 4,927, and MTEB's STS12-16 come from other copies.

Main score: ``cosine_spearman`` over all pairs of the test split, pooled (the "all"
protocol of MTEB and SimCSE). Every result also carries ``cosine_spearman_wmean``, the
mean of per-subset Spearman correlations weighted by subset size (SentEval's and the
BERT-flow paper's "wmean"), the unweighted ``cosine_spearman_mean``, each subset's own
scores, the protocol of every number and a sha256 of the data files read.

The data folder comes from the task's ``data_dir`` argument, else from the data root's ``senteval/``
(``$FLOW_PLUGIN_SHARED_DATA``, :mod:`flow_plugin.data.roots`).
"""

from __future__ import annotations

import hashlib
import os
import weakref
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from datasets import Dataset, DatasetDict
from mteb.abstasks.task_metadata import TaskMetadata
from scipy.stats import spearmanr

from flow_plugin.errors import DataFolderError
from flow_plugin.evaluation import evaluate_sts
from flow_plugin.data.roots import DATA_ENV, data_part
from flow_plugin.data.senteval import SCORE_RANGE, available_splits, load_split, resolve_senteval_root
from flow_plugin.data.tasks import OFFLINE_TASKS, OFFLINE_TASKS_BY_SENTEVAL_NAME
from flow_plugin.protocols import protocol_text
from flow_plugin.integrations.mteb.compat import PairScoredSTS, track_task
from flow_plugin.results.items import holds_score
from flow_plugin.results.pairs import write_pairs

_SPLIT_NAMES = {"train": "train", "dev": "validation", "test": "test"}

_SENTEVAL_BIBTEX = r"""@inproceedings{conneau2018senteval,
  title = {SentEval: An Evaluation Toolkit for Universal Sentence Representations},
  author = {Conneau, Alexis and Kiela, Douwe},
  booktitle = {Proceedings of LREC},
  year = {2018}
}"""


#: task name -> the most recently loaded instance (lets a model find "target" sentences of a
#: task whose data folder was given to the task object rather than through the environment)
_LOADED: dict[str, weakref.ReferenceType[SentEvalSTSTask]] = {}


def loaded_task(name: str) -> SentEvalSTSTask | None:
    reference = _LOADED.get(name)
    return reference() if reference is not None else None


def configured_data_dir() -> Path | None:
    """The SentEval folder the environment names (the data root's ``senteval/``), or ``None``."""
    return data_part("senteval", beside_checkout=False)


def _files_sha256(paths: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in sorted(set(paths)):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


class SentEvalSTSTask(PairScoredSTS):
    """Base class: one SentEval STS set, evaluated on its test split."""

    senteval_task: ClassVar[str]
    min_score: int = 0
    max_score: int = 5

    def __init__(self, data_dir: str | os.PathLike[str] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.data_dir = Path(data_dir).expanduser() if data_dir is not None else None
        track_task(self)  # (a result MTEB would reuse is checked against this task's data)
        self._pair_subsets: dict[str, list[str]] = {}

    # ------------------------------------------------------------------ data
    def resolved_data_dir(self) -> Path:
        folder = self.data_dir or configured_data_dir()
        if folder is None:
            raise DataFolderError(
                f"task {self.metadata.name} reads a SentEval data folder: pass data_dir=..., set "
                f"{DATA_ENV}=<the data folder holding senteval/>, or use `flow-plugin eval --data DIR`"
            )
        return resolve_senteval_root(folder)

    def _read_splits(self) -> tuple[dict[str, list[Any]], str]:
        """(split -> the STSPairs of each subset, the data revision: sha256 of the files read)."""
        root = self.resolved_data_dir()
        splits: dict[str, list[Any]] = {}
        files: list[Path] = []
        for split in available_splits(self.senteval_task):
            splits[split] = load_split(root, self.senteval_task, split)
            for pairs in splits[split]:
                files.append(pairs.source)
                if getattr(pairs, "gold_source", None) is not None:
                    files.append(pairs.gold_source)
        return splits, "sha256:" + _files_sha256(files)

    def data_revision(self) -> str:
        """The ``dataset_revision`` a result computed now would carry (reads the files, loads nothing)."""
        if self.data_loaded and self.metadata.revision.startswith("sha256:"):
            return self.metadata.revision
        return self._read_splits()[1]

    def load_data(self, num_proc: int | None = None, **kwargs: Any) -> None:
        if self.data_loaded:
            return
        split_pairs, revision = self._read_splits()
        splits: dict[str, Dataset] = {}
        for split, subsets in split_pairs.items():
            rows: dict[str, list[Any]] = {"sentence1": [], "sentence2": [], "score": [], "subset": []}
            for pairs in subsets:
                rows["sentence1"].extend(pairs.sentences1)
                rows["sentence2"].extend(pairs.sentences2)
                rows["score"].extend(float(score) for score in pairs.scores)
                rows["subset"].extend([pairs.subset] * len(pairs))
            splits[_SPLIT_NAMES[split]] = Dataset.from_dict(rows)
            self._pair_subsets[_SPLIT_NAMES[split]] = rows["subset"]
        self.dataset = DatasetDict(splits)
        # record exactly which bytes were evaluated: the result JSON's dataset_revision
        dataset = dict(self.metadata.dataset)
        dataset["revision"] = revision
        self.metadata = self.metadata.model_copy(update={"dataset": dataset})
        self.data_loaded = True
        _LOADED[self.metadata.name] = weakref.ref(self)

    # ------------------------------------------------------------------ scoring
    def pair_scores(self, gold: list[float], cosine: Any, *, hf_split: str | None,
                    hf_subset: str | None) -> dict[str, Any]:
        """The "wmean" and "mean" protocols, each subset's scores, the protocol of every number and
        the data revision, added to MTEB's metrics; the test split's per-pair cosines are kept."""
        labels = self._pair_subsets.get(hf_split or "test")
        if labels is None or len(labels) != len(gold):
            raise DataFolderError(f"task {self.metadata.name}: cannot match pairs to their subsets for scoring")
        gold_scores = np.asarray(gold, dtype=np.float64)
        cosines = np.asarray(cosine, dtype=np.float64)
        by_subset: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        names = np.asarray(labels)
        for subset in dict.fromkeys(labels):
            chosen = names == subset
            by_subset[subset] = (gold_scores[chosen], cosines[chosen])
        sts = evaluate_sts(by_subset)
        metrics = {
            "cosine_spearman_wmean": sts.spearman_wmean,
            "cosine_spearman_mean": sts.spearman_mean,
            "cosine_pearson_wmean": sts.pearson_wmean,
            "cosine_pearson_mean": sts.pearson_mean,
            "n_pairs": sts.n_pairs,
            "subsets": {
                item.name: {"n_pairs": item.n, "cosine_spearman": item.spearman, "cosine_pearson": item.pearson}
                for item in sts.subsets
            },
            "protocols": {  # the protocol of each metric (the leaderboard reads the name before the colon)
                "cosine_spearman": protocol_text("all"),
                "cosine_spearman_wmean": protocol_text("wmean"),
                "cosine_spearman_mean": protocol_text("mean"),
            },
            "data_revision": self.metadata.revision,
        }
        if (hf_split or "test") == "test":
            main_score = float(spearmanr(gold_scores, cosines).statistic)
            self._keep_pairs(gold_scores, cosines, labels, main_score, str(hf_subset or "default"))
        return metrics

    def _keep_pairs(self, gold: np.ndarray, cosine: np.ndarray, labels: list[str], main_score: float,
                    hf_subset: str) -> None:
        """Keep the per-pair cosines of the test split, to write beside the result when MTEB saves it
        (:meth:`write_beside`)."""
        self.__dict__.setdefault("pending_pairs", {})[hf_subset] = (main_score, gold, cosine, labels)

    def write_beside(self, result_path: Path, task_result: Any) -> None:
        """Write the per-pair cosines (:mod:`flow_plugin.results.pairs`) of each subset MTEB just saved at
        ``result_path`` whose score is the one they were kept with."""
        for hf_subset, (main_score, gold, cosine, labels) in self.__dict__.pop("pending_pairs", {}).items():
            if holds_score(task_result, "test", hf_subset, self.metadata.main_score, main_score):
                write_pairs(result_path, task=self.metadata.name, split="test", hf_subset=hf_subset,
                            dataset_revision=self.metadata.revision, main_score=main_score, gold=gold,
                            cosine=cosine, subsets=labels)


def _metadata(name: str, senteval_task: str, description: str, reference: str, date: tuple[str, str],
              domains: list[str]) -> TaskMetadata:
    return TaskMetadata(
        name=name,
        description=description,
        reference=reference,
        dataset={"path": f"senteval/{senteval_task}", "revision": "local-senteval-files"},
        type="STS",
        category="t2t",
        modalities=["text"],
        eval_splits=["test"],
        eval_langs=["eng-Latn"],
        main_score="cosine_spearman",
        date=date,
        domains=domains,
        task_subtypes=[],
        license="not specified",
        annotations_creators="human-annotated",
        dialect=[],
        sample_creation="found",
        bibtex_citation=_SENTEVAL_BIBTEX,
    )


def _make_task(senteval_task: str, description: str, reference: str, date: tuple[str, str],
               domains: list[str]) -> type[SentEvalSTSTask]:
    """The task class of ``senteval_task``, named as :data:`~flow_plugin.data.tasks.OFFLINE_TASKS_BY_SENTEVAL_NAME` says."""
    name = OFFLINE_TASKS_BY_SENTEVAL_NAME[senteval_task]
    low, high = SCORE_RANGE[senteval_task]
    return type(
        name,
        (SentEvalSTSTask,),
        {
            "__doc__": description,
            "__module__": __name__,
            "senteval_task": senteval_task,
            "min_score": int(low),
            "max_score": int(high),
            "metadata": _metadata(name, senteval_task, description, reference, date, domains),
        },
    )


_SEMEVAL = "SemEval {year} STS (English) test set as SentEval reads it (SentEval layout, Moses-tokenized, lower-cased); scored pairs only."
#: SentEval task -> (description, reference, date range, domains) of its offline MTEB task
_DESCRIPTIONS: dict[str, tuple[str, str, tuple[str, str], list[str]]] = {
    "STS12": (_SEMEVAL.format(year=2012), "https://aclanthology.org/S12-1051/", ("2012-01-01", "2012-12-31"),
              ["News", "Written"]),
    "STS13": (_SEMEVAL.format(year=2013) + " Without SMT (LDC licence), as SentEval.",
              "https://aclanthology.org/S13-1004/", ("2013-01-01", "2013-12-31"), ["News", "Written"]),
    "STS14": (_SEMEVAL.format(year=2014), "https://aclanthology.org/S14-2010/", ("2014-01-01", "2014-12-31"),
              ["News", "Web", "Written"]),
    "STS15": (_SEMEVAL.format(year=2015), "https://aclanthology.org/S15-2045/", ("2015-01-01", "2015-12-31"),
              ["News", "Web", "Written"]),
    "STS16": (_SEMEVAL.format(year=2016), "https://aclanthology.org/S16-1081/", ("2016-01-01", "2016-12-31"),
              ["News", "Web", "Written"]),
    "STSBenchmark": (
        "STS Benchmark as SentEval reads it: test split (1,379 pairs), score in column 5; train and dev sentences "
        "serve as unlabeled fitting data.",
        "https://aclanthology.org/S17-2001/", ("2012-01-01", "2017-12-31"), ["News", "Web", "Written"]),
    "SICKRelatedness": (
        "SICK relatedness as SentEval reads it: the 4,927-pair test set (MTEB's SICK-R holds all 9,927 pairs); "
        "train and trial sentences serve as unlabeled fitting data.",
        "https://aclanthology.org/L14-1314/", ("2014-01-01", "2014-12-31"), ["Web", "Written"]),
}

#: every offline task class, in the order tables list them (the names' one home is
#: :mod:`flow_plugin.data.tasks`)
TASK_CLASSES: tuple[type[SentEvalSTSTask], ...] = tuple(
    _make_task(senteval_task, *_DESCRIPTIONS[senteval_task]) for senteval_task in OFFLINE_TASKS_BY_SENTEVAL_NAME
)
(SentEvalSTS12, SentEvalSTS13, SentEvalSTS14, SentEvalSTS15, SentEvalSTS16, SentEvalSTSBenchmark,
 SentEvalSICKR) = TASK_CLASSES
TASK_NAMES: tuple[str, ...] = OFFLINE_TASKS


def get_offline_task(name: str, data_dir: str | os.PathLike[str] | None = None) -> SentEvalSTSTask:
    for cls in TASK_CLASSES:
        if cls.metadata.name == name:
            return cls(data_dir=data_dir)
    raise KeyError(f"unknown offline task {name!r}; known: {', '.join(TASK_NAMES)}")
