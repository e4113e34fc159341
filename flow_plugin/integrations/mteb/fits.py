"""The fits behind a calibrated model: one fitted calibrator per (task, subset), on the task's own text.

MTEB has no fit hook: it calls ``encode()`` once per split and side of each subset. A
:class:`TaskFits` fits on the first call of a (task, subset), or earlier when our evaluation loop
prepares the task (:meth:`TaskFits.remember` then :meth:`TaskFits.fit_for`), and every later call reuses that
fit, so both sides of every comparison share one space. Which sentences it fits on is the ``fit_corpus`` policy
(:mod:`flow_plugin.data.fit_corpus`): the task's text (``"target"``, :mod:`.corpus`; ``"eval-splits"``, that of its
evaluation splits only), a sentence file, or each
call's own sentences (``"per-call"``); a corpus above ``max_fit_sentences`` is sampled
(:mod:`flow_plugin.data.sampling`).

The fit text is embedded by the base model exactly as MTEB will embed it: through the base's own ``encode``
with the task's metadata and, for each part of the corpus, the ``prompt_type`` MTEB gives that side
(queries, documents), so a model with query and document prompts is fitted on what it returns for the task.
``sides`` says what an asymmetric task (retrieval, reranking) is fitted on: ``"joint"``, one calibrator on the
queries and the documents together (one space for both sides, the default: docs/evidence.md gives the
measurement), or ``"per-side"``, one calibrator per side.

Those embeddings are kept in the base's embedding cache (:mod:`.base_encoders`, per task, subset and side) and
serve MTEB's later calls for the same texts: calibration adds the fit, not a second pass of the base model over
the task.
"""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass
from typing import Any

import mteb
import numpy as np

from flow_plugin._io import file_sha256
from flow_plugin._machine import StageTimes
from flow_plugin.calibration import Calibrator
from flow_plugin.catalog.fitting import FitRecord, canonical_order, canonical_permutation, fit_embeddings
from flow_plugin.data.fit_corpus import EVAL_SPLITS, PER_CALL, FitSettings, read_sentence_file
from flow_plugin.data.sampling import CorpusPart, sample_corpus
from flow_plugin.errors import InputError
from flow_plugin.integrations.mteb import compat
from flow_plugin.integrations.mteb.base_encoders import as_base_encoder, base_output, has_more_than_text
from flow_plugin.integrations.mteb.corpus import TaskCorpusError, fit_subset, target_corpus

logger = logging.getLogger(__name__)


@dataclass
class Fit:
    calibrator: Calibrator
    record: FitRecord


class TaskFits:
    """The fitted calibrators of one calibrated model, keyed by (task, subset[, side]), and their records."""

    def __init__(self, base: Any, template: Calibrator, model_name: str, settings: FitSettings) -> None:
        self.base = as_base_encoder(base)  # a base the user built: in memory only
        self.template, self.model_name, self.settings = template, model_name, settings
        self.fits: dict[tuple[Any, ...], Fit] = {}
        self.records: list[FitRecord] = []
        self.tasks: dict[str, Any] = {}  # task name -> the task object our loop prepared
        #: seconds spent embedding with the base model ("encode") and fitting ("fit")
        self.times = StageTimes()

    def remember(self, task: Any) -> None:
        self.tasks[task.metadata.name] = task

    def sides(self, task: Any) -> list[str | None]:
        """The sides fitted apart (``fit_sides="per-side"``: the task's corpus sides; else one, ``None``)."""
        if self.settings.fit_sides != "per-side":
            return [None]
        subset = (getattr(task, "hf_subsets", None) or ["default"])[0]
        return list(dict.fromkeys(part.side for part in target_corpus(task, subset).parts))

    # ------------------------------------------------------------------ which fit serves a call
    def fit_for(self, task_metadata: Any, hf_subset: str, side: str | None = None,
                inputs: list[str] | None = None) -> Fit:
        """The fit serving a call of ``task_metadata`` / ``hf_subset`` / ``side``, fitting it on first use."""
        policy = self.settings.fit_corpus
        if policy.kind == PER_CALL:
            part = CorpusPart("inputs", lambda: iter([inputs or []]), side)
            return self._fit(task_metadata, hf_subset, [part], "per-call: the sentences of this encode() call")
        if policy.kind == "file":
            key: tuple[Any, ...] = ("file", str(policy.path))
            if key not in self.fits:
                path = policy.path
                part = CorpusPart(str(path), lambda: iter([read_sentence_file(path)]))
                self.fits[key] = self._fit(task_metadata, hf_subset, [part], policy.describe(), file=True)
            return self.fits[key]
        key = (task_metadata.name, hf_subset, side if self.settings.fit_sides == "per-side" else None)
        if key not in self.fits:
            task = self.task_of(task_metadata)
            subset = fit_subset(task, hf_subset)
            shared = (key[0], subset, key[2])
            if shared not in self.fits:  # a parallel bitext task's languages share one fit
                corpus = target_corpus(task, hf_subset, _eval_splits(task) if policy.kind == EVAL_SPLITS else None)
                parts = [part for part in corpus.parts if key[2] is None or part.side == key[2]] or corpus.parts
                self.fits[shared] = self._fit(task_metadata, subset, parts, corpus.describe(), corpus.task_type)
            self.fits[key] = self.fits[shared]
        return self.fits[key]

    def task_of(self, task_metadata: Any) -> Any:
        """The task object whose text a "target" fit reads (``task_metadata``: its metadata, or its name): the one
        our loop prepared, the newest of our offline tasks of that name (``mteb run`` and ``mteb.evaluate`` of our
        tasks: the very object, with its own data folder), or MTEB's registry's (loaded once here)."""
        name = getattr(task_metadata, "name", task_metadata)
        task = self.tasks.get(name) or compat.live_task(name)
        if task is not None:
            return task

        try:
            self.tasks[name] = mteb.get_task(name)
        except KeyError:
            raise TaskCorpusError(
                f"fit_corpus='target' needs the text of task {name!r}, which is neither one of flow-plugin's tasks "
                "nor in MTEB's registry: call model.prepare(task) first, or calibrate with fit_corpus=<sentence file>"
            ) from None
        return self.tasks[name]

    # ------------------------------------------------------------------ fitting
    def _fit(self, task_metadata: Any, subset: str, parts: list[CorpusPart], source: str,
             task_type: str | None = None, *, file: bool = False) -> Fit:
        where = source if file else f"task {task_metadata.name}, subset {subset}"
        started = time.perf_counter()
        sample, by_side = _side_sample(parts, self.settings.max_fit_sentences, self.settings.fit_seed)
        blocks, rows, distinct = [], [], 0
        for side, texts in by_side.items():
            if self.settings.fit_duplicates == "unique":
                texts = list(dict.fromkeys(texts))
            texts, distinct = canonical_order(texts), distinct + len(set(texts))
            if texts:
                blocks.append(self.embed_texts(texts, task_metadata, subset, side))
                rows += texts
        if not blocks:
            raise TaskCorpusError(f"no sentences to fit {self.model_name} for {where} ({source})")
        # the sides' rows interleaved in one canonical order of their texts, as one side's would be: the rows a
        # calibrator sees do not depend on which side came first (the flow's training follows their order)
        embeddings = np.concatenate(blocks)[canonical_permutation(rows)]
        count = len(rows)
        context: dict[str, Any] = {"task": None if file else task_metadata.name, "hf_subset": None if file else subset,
                                   "fit_corpus": self.settings.fit_corpus.describe()}
        if list(by_side) != [None]:
            context["sides"] = {side or "symmetric": len(texts) for side, texts in by_side.items()}
        if task_type is not None:
            context["task_type"] = task_type
        if file:
            context["corpus_sha256"] = file_sha256(self.settings.fit_corpus.path, "fit corpus file")
        try:
            with self.times.measure("fit"):
                calibrator, record = fit_embeddings(
                    self._template_for(task_type or getattr(task_metadata, "type", None)), embeddings,
                    model=self.model_name,
                    source=f"{source}, {sample.describe()}", n_sentences=count, n_unique_sentences=distinct,
                    duplicates=self.settings.fit_duplicates, encode_seconds=time.perf_counter() - started,
                    context=context, sampling=sample.as_dict())
        except InputError as error:
            raise type(error)(f"{self.model_name}: cannot fit {self.template.method} for {where} "
                              f"({sample.describe()}): {error}; fit on more text with "
                              "fit_corpus=<a text file, one sentence per line>") from None
        self.records.append(record)
        _announce(record)
        return Fit(calibrator, record)

    def _template_for(self, task_type: str | None) -> Calibrator:
        """The calibrator to fit for a task of ``task_type``: the template, told the type where it takes one
        (``auto`` chooses by it)."""
        if "task_type" not in self.template.get_params(deep=False):
            return self.template
        return self.template.clone().set_params(task_type=None if task_type is None else str(task_type))

    # ------------------------------------------------------------------ the base model's embeddings
    def embed_texts(self, texts: list[str], task_metadata: Any, hf_subset: str, side: str | None) -> np.ndarray:
        """The base model's embeddings of ``texts`` for this task and side (as MTEB's calls will get them)."""
        with self.times.measure("encode"):
            return self.base.embed(texts, task_metadata, hf_subset, side)

    def embed_call(self, inputs: Any, texts: list[str], task_metadata: Any, hf_split: str, hf_subset: str,
                   side: str | None, **kwargs: Any) -> np.ndarray:
        """The base model's embeddings for one MTEB call: those the fit kept when it embedded every text of it,
        else the base model's (given MTEB's own batches, with any fields besides the text)."""
        found = None if has_more_than_text(inputs) else self.base.kept(texts, task_metadata, hf_subset, side)
        if found is not None:
            return found
        with self.times.measure("encode"):
            output = self.base.encode(inputs, task_metadata=task_metadata, hf_split=hf_split, hf_subset=hf_subset,
                                      prompt_type=compat.prompt_type(side), **kwargs)
        return base_output(output, len(texts), self.base, task_metadata.name)


#: joins a side and a text while a corpus of several sides is sampled (a character no text holds)
_SIDE_MARK = "\x1f"


def _side_sample(parts: list[CorpusPart], cap: int, seed: int) -> tuple[Any, dict[str | None, list[str]]]:
    """One seeded sample of every part (:func:`~flow_plugin.data.sampling.sample_corpus`, at most ``cap``
    sentences whatever the sides), and its sentences by side: a text on two sides is two sentences, each
    embedded as its side is."""
    sides = list(dict.fromkeys(part.side for part in parts))
    if sides == [None]:
        sample = sample_corpus(parts, cap=cap, seed=seed)
        return sample, {None: sample.sentences}

    def tagged(part: CorpusPart) -> CorpusPart:
        mark = (part.side or "") + _SIDE_MARK
        return CorpusPart(part.name, lambda: ([mark + text for text in chunk] for chunk in part.chunks()), part.side)

    sample = sample_corpus([tagged(part) for part in parts], cap=cap, seed=seed)
    by_side: dict[str | None, list[str]] = {side: [] for side in sides}
    for text in sample.sentences:
        side, _, sentence = text.partition(_SIDE_MARK)
        by_side[side or None].append(sentence)
    sample.sentences = [text.partition(_SIDE_MARK)[2] for text in sample.sentences]
    return sample, by_side


def _announce(record: FitRecord) -> None:
    """One line per fit: logged where INFO shows, else printed to stderr (``mteb run`` shows only MTEB's logger)."""
    if logger.isEnabledFor(logging.INFO):
        logger.info("%s", record.summary())
    else:
        print(f"flow-plugin: {record.summary()}", file=sys.stderr, flush=True)


def _eval_splits(task: Any) -> list[str]:
    """The splits MTEB scores ``task`` on (a run's own choice, ``eval_splits=``, else its metadata's)."""
    return list(getattr(task, "eval_splits", None) or task.metadata.eval_splits)


__all__ = ["Fit", "TaskFits"]
