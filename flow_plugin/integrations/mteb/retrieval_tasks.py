"""An offline MTEB retrieval task on real data: GLUE QNLI dev as question -> passage retrieval.

``GlueQNLIRetrieval`` reads GLUE QNLI's ``dev.tsv`` (question, sentence, label; 5,463 pairs),
the file :func:`flow_plugin.data.senteval.load_qnli_dev` reads:

- queries: the distinct questions that have at least one entailing sentence;
- corpus: every distinct sentence of the file (entailing or not), so the not-entailing
  sentences are the distractors;
- relevance: (question, sentence) pairs labelled ``entailment`` (relevance 1).

It is an ``AbsTaskRetrieval`` in MTEB 2's layout, scored by MTEB (main score nDCG@10), with
the sha256 of the file as ``dataset_revision``. The file comes from the task's ``data_dir``
argument (the GLUE folder, the QNLI folder or the file), else the data root's ``glue/``
(``$FLOW_PLUGIN_SHARED_DATA``, :mod:`flow_plugin.data.roots`).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from datasets import Dataset
from mteb.abstasks.retrieval import AbsTaskRetrieval
from mteb.abstasks.task_metadata import TaskMetadata

from flow_plugin.data.roots import DATA_ENV, data_part
from flow_plugin.data.senteval import load_qnli_dev
from flow_plugin.errors import DataFolderError
from flow_plugin.integrations.mteb.compat import track_task
from flow_plugin.integrations.mteb.labelled_tasks import RetrievalItems


_QNLI_BIBTEX = r"""@inproceedings{wang2019glue,
  title = {GLUE: A Multi-Task Benchmark and Analysis Platform for Natural Language Understanding},
  author = {Wang, Alex and Singh, Amanpreet and Michael, Julian and Hill, Felix and Levy, Omer and Bowman, Samuel R.},
  booktitle = {Proceedings of ICLR},
  year = {2019}
}"""


def configured_glue_data() -> Path | None:
    """The GLUE folder the environment names (the data root's ``glue/``) when it holds ``QNLI/dev.tsv``, or
    ``None``."""
    folder = data_part("glue", beside_checkout=False)
    return folder if folder is not None and (folder / "QNLI" / "dev.tsv").is_file() else None


class GlueQNLIRetrieval(RetrievalItems, AbsTaskRetrieval):
    """GLUE QNLI dev as retrieval: questions find the sentences that answer them (per-query scores kept next to
    the result, :mod:`.item_scores`)."""

    metadata = TaskMetadata(
        name="GlueQNLIRetrieval",
        description=(
            "GLUE QNLI dev (SQuAD v1.1 questions and Wikipedia sentences) as retrieval: each question that has an "
            "entailing sentence is a query, every distinct sentence of the file is the corpus, and the entailing "
            "(question, sentence) pairs are the relevant documents. Read offline from glue/QNLI/dev.tsv."
        ),
        reference="https://gluebenchmark.com/",
        dataset={"path": "glue/QNLI/dev.tsv", "revision": "local-glue-file"},
        type="Retrieval",
        category="t2t",
        modalities=["text"],
        eval_splits=["test"],
        eval_langs=["eng-Latn"],
        main_score="ndcg_at_10",
        date=("2016-01-01", "2018-12-31"),
        domains=["Encyclopaedic", "Written"],
        task_subtypes=["Question answering"],
        license="cc-by-sa-4.0",
        annotations_creators="human-annotated",
        dialect=[],
        sample_creation="found",
        bibtex_citation=_QNLI_BIBTEX,
    )

    def __init__(self, data_dir: str | os.PathLike[str] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.data_dir = Path(data_dir).expanduser() if data_dir is not None else None
        track_task(self)  # (a result MTEB would reuse is checked against this task's data)

    def data_file(self) -> Path:
        """The ``dev.tsv`` this task reads (an error names what to set when none is configured)."""
        folder = self.data_dir or configured_glue_data()
        if folder is None:
            raise DataFolderError(
                f"task {self.metadata.name} reads GLUE QNLI dev.tsv: pass data_dir=..., or set {DATA_ENV}=<the data "
                "folder holding glue/QNLI/dev.tsv>"
            )
        if folder.is_file():
            return folder
        for candidate in (folder / "QNLI" / "dev.tsv", folder / "dev.tsv"):
            if candidate.is_file():
                return candidate
        raise DataFolderError(f"missing file {folder / 'QNLI' / 'dev.tsv'}: {self.metadata.name} needs GLUE QNLI dev")

    def data_revision(self) -> str:
        """``sha256:<hex>`` of the file: the ``dataset_revision`` a result computed now carries."""
        return "sha256:" + hashlib.sha256(self.data_file().read_bytes()).hexdigest()

    def load_data(self, num_proc: int | None = None, **kwargs: Any) -> None:
        if self.data_loaded:
            return
        path = self.data_file()
        pairs = load_qnli_dev(path)
        question_ids: dict[str, str] = {}
        sentence_ids: dict[str, str] = {}
        relevant: dict[str, dict[str, int]] = {}
        for question, sentence, label in zip(pairs.questions, pairs.sentences, pairs.labels):
            document = sentence_ids.setdefault(sentence, f"s{len(sentence_ids)}")
            if label == 1:
                query = question_ids.setdefault(question, f"q{len(question_ids)}")
                relevant.setdefault(query, {})[document] = 1
        queries = Dataset.from_dict({"id": list(question_ids.values()), "text": list(question_ids)})
        corpus = Dataset.from_dict({"id": list(sentence_ids.values()), "text": list(sentence_ids),
                                    "title": [""] * len(sentence_ids)})
        self.dataset = {"default": {"test": {"queries": queries, "corpus": corpus, "relevant_docs": relevant,
                                             "top_ranked": None}}}
        dataset = dict(self.metadata.dataset)
        dataset["revision"] = self.data_revision()
        self.metadata = self.metadata.model_copy(update={"dataset": dataset})
        self.data_loaded = True


#: the offline retrieval tasks the start-up hook registers
RETRIEVAL_TASK_CLASSES: tuple[type[AbsTaskRetrieval], ...] = (GlueQNLIRetrieval,)
