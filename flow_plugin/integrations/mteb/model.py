"""The MTEB adapter: a thin ``AbsEncoder`` over the cached backbone and a calibrator.

MTEB has no fit hook: it calls ``encode()`` once per split and side (sentence1 and sentence2,
queries and documents, train and test) of each subset. So the first ``encode()`` of a (task,
subset) gathers that task's text (:mod:`.corpus`; the task is found by :func:`.compat.running_task`), fits a fresh
calibrator on it, and every later call of the same (task, subset) reuses that one fit: both
sides of every comparison share one space. Which sentences are used is the ``fit_corpus``
policy (:mod:`flow_plugin.data.fit_corpus`); a corpus larger than ``max_fit_sentences`` is
sampled (:mod:`flow_plugin.data.sampling`), and on a small one the calibrator's own ``fit``
applies the small-sample rule (:meth:`flow_plugin.calibration.base.Calibrator.fit`).

Every fit leaves a record (``model.fit_log``; :class:`flow_plugin.catalog.fitting.FitRecord`)
that lists the calls it served; a one-line summary is logged at INFO, or printed to stderr
where INFO is not shown (``mteb run`` shows only MTEB's own logger), and the records are written
next to MTEB's result file (:mod:`.fit_records`) once per task, when MTEB saves the task's finished
result (:meth:`FlowPluginModel._result_saved`), never on each ``encode()`` call.
"""

from __future__ import annotations

import difflib
import logging
import os
import sys
import threading
import warnings
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from mteb.models.abs_encoder import AbsEncoder

from flow_plugin._io import file_sha256
from flow_plugin._validation import check_sentences
from flow_plugin.calibration import Calibrator, Identity
from flow_plugin.catalog.fitting import FitRecord, fit_on_sample
from flow_plugin.data.fit_corpus import DEFAULT_DUPLICATES, DUPLICATE_POLICIES, FIT_ARGUMENTS, PER_CALL, TARGET
from flow_plugin.catalog.builders import build_calibrator, build_encoder, resolve
from flow_plugin.catalog.task_type_effects import caution
from flow_plugin.data.fit_corpus import FitCorpus, read_sentence_file
from flow_plugin.data.sampling import (
    DEFAULT_FIT_SEED,
    DEFAULT_MAX_FIT_SENTENCES,
    CorpusPart,
    check_cap,
    sample_corpus,
)
from flow_plugin.encoding.options import EncoderOptions
from flow_plugin.errors import DataFolderError, FlowPluginError, InputError
from flow_plugin.integrations.mteb.corpus import TaskCorpusError, fit_subset, target_corpus
from flow_plugin.integrations.mteb.compat import after_results_saved, result_destination, running_task
from flow_plugin.integrations.mteb.fit_records import write_fits
from flow_plugin.integrations.mteb.meta import model_meta

logger = logging.getLogger(__name__)

__all__ = ["FlowPluginModel", "TaskCorpusError"]

#: every loader argument besides the encoder options
_MODEL_ARGUMENTS = (*FIT_ARGUMENTS, "calibrator_params", "embed_dim")


@dataclass
class _Fit:
    calibrator: Calibrator
    record: FitRecord


class FlowPluginModel(AbsEncoder):
    """A registry model (``flow_plugin/<backbone>[-<calibrator>]``) for MTEB.

    Parameters
    ----------
    model_name:
        A registry model name such as ``flow_plugin/bert-base-flow``.
    fit_corpus:
        ``"target"`` (default), ``"per-call"``, or a path to a text file with one sentence per line.
    max_fit_sentences:
        Most sentences a fit uses (default 100,000): a larger corpus is fitted on that many
        distinct sentences drawn at random (seeded, see :mod:`flow_plugin.data.sampling`).
    fit_seed:
        Seed of that sample (default 0).
    fit_duplicates:
        ``"keep"`` (default): fit on every occurrence of a sentence; ``"unique"``: on each once.
    calibrator_params:
        Hyper-parameters overriding the registry's for this calibrator.
    embed_dim:
        Passed by ``mteb.get_model(..., embed_dim=...)``: checked against the model's width.
    **encoder_options:
        ``device``, ``precision``, ``batch_size``, ``cache_dir``, ``show_progress_bar``
        (:class:`flow_plugin.encoding.options.EncoderOptions`). Any other keyword is an error
        that names it and suggests the closest accepted one.
    """

    def __init__(
        self,
        model_name: str,
        revision: str | None = None,
        *,
        fit_corpus: str | os.PathLike[str] = TARGET,
        max_fit_sentences: int = DEFAULT_MAX_FIT_SENTENCES,
        fit_seed: int = DEFAULT_FIT_SEED,
        fit_duplicates: str = DEFAULT_DUPLICATES,
        calibrator_params: dict[str, Any] | None = None,
        embed_dim: int | None = None,
        **encoder_options: Any,
    ) -> None:
        unknown = sorted(set(encoder_options) - set(EncoderOptions.names()))
        if unknown:
            accepted = [*_MODEL_ARGUMENTS, *EncoderOptions.names()]
            hints = []
            for key in unknown:
                close = difflib.get_close_matches(key, accepted, n=1)
                hints.append(f"{key!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
            raise InputError(
                f"{model_name}: unknown loader argument(s) {', '.join(hints)}; accepted: {', '.join(accepted)}"
            )
        self.registry_model = resolve(model_name)
        if revision is not None and revision not in (self.registry_model.revision, self.registry_model.backbone.revision):
            raise FlowPluginError(
                f"{model_name} is revision {self.registry_model.revision} (weights {self.registry_model.backbone.revision} and this "
                f"registry configuration), not {revision}: its registry file or flow-plugin changed since"
            )
        self.fit_corpus = FitCorpus.parse(fit_corpus)
        self.max_fit_sentences, self.fit_seed = check_cap(max_fit_sentences, fit_seed)
        if fit_duplicates not in DUPLICATE_POLICIES:
            raise InputError(f"fit_duplicates must be one of {', '.join(DUPLICATE_POLICIES)}, got {fit_duplicates!r}")
        self.fit_duplicates = fit_duplicates
        self.options = EncoderOptions(**encoder_options)
        self.encoder = build_encoder(self.registry_model, self.options)
        self.model = self.encoder  # AbsEncoder convention: the wrapped model
        self._calibrator_template = build_calibrator(
            self.registry_model, device=str(self.encoder.backbone.device), **(calibrator_params or {})
        )
        if embed_dim is not None and embed_dim != self._expected_width():
            raise InputError(f"{model_name} gives {self._expected_width()}-dimensional embeddings, not {embed_dim}")
        # mteb.get_model replaces it with its own copy (whose loader is the start-up hook's)
        self.mteb_model_meta = model_meta(self.registry_model, type(self))
        self._fits: dict[tuple[str, ...], _Fit] = {}
        self._records: list[FitRecord] = []
        # task name -> the task object (or None) of the tasks whose calls changed since their records were
        # last written, and how many calls each served since MTEB last saved its result
        self._unsaved: dict[str, Any] = {}
        self._calls_since_save: Counter[str] = Counter()
        self._tasks: dict[str, Any] = {}  # task name -> task object given to prepare_task
        self._cautioned: set[str] = set()  # the task types this model has warned about
        self._lock = threading.RLock()
        if self.fit_corpus.kind == PER_CALL and not self._is_raw:
            message = (f"{self.name}: fit_corpus='per-call' fits a new calibrator for every encode() call, so the two "
                       "sides of a pair (sentence1/sentence2, queries/documents, train/test) land in different "
                       "spaces; use the default 'target' for one fit per (task, subset)")
            _tell_user(message, stacklevel=3)

    def _expected_width(self) -> int:
        return self._calibrator_template.output_width(self.registry_model.backbone.embedding_dim)

    @property
    def _is_raw(self) -> bool:
        return isinstance(self._calibrator_template, Identity)

    @property
    def name(self) -> str:
        return self.registry_model.name

    @property
    def fit_log(self) -> list[dict[str, Any]]:
        """One record per fit (JSON-ready): what was fitted, on which corpus, how many (distinct)
        sentences, sampling, adaptation, time, log-likelihood and the calls it served."""
        with self._lock:
            return [record.as_dict() for record in self._records]

    def __repr__(self) -> str:
        return f"FlowPluginModel({self.name!r}, fit_corpus={self.fit_corpus.describe()!r})"

    # ----------------------------------------------------------------- finding the fit of a call
    def _find_task(self, task_name: str, task_metadata: Any = None) -> Any:
        """The task object of a (task, subset): the one being evaluated (call stack), one given to
        :meth:`prepare_task`, an offline task loaded in this process, or MTEB's registry."""
        if task_metadata is not None:
            task = running_task(task_metadata)
            if task is not None:
                return task
        if task_name in self._tasks:
            return self._tasks[task_name]
        from flow_plugin.integrations.mteb.tasks import loaded_task

        offline = loaded_task(task_name)
        if offline is not None:
            return offline
        import mteb

        try:
            return mteb.get_task(task_name)
        except KeyError:
            raise TaskCorpusError(
                f"fit_corpus='target' needs the text of task {task_name!r}, which is neither being evaluated nor in "
                "MTEB's registry: call model.prepare_task(task) first, or load the model with "
                "fit_corpus=<sentence file>"
            ) from None

    def _fit_for(self, task_name: str, hf_subset: str, inputs: list[str], task_metadata: Any = None,
                 task: Any = None) -> tuple[_Fit, str]:
        """(the fit serving this call, the subset it belongs to), fitting on first use."""
        with self._lock:
            if self.fit_corpus.kind == PER_CALL and not self._is_raw:
                part = CorpusPart("inputs", lambda: iter([inputs]))
                return self._fit(task_name, hf_subset, [part], "per-call: the sentences of this encode() call"), hf_subset
            if self.fit_corpus.kind == "file" and not self._is_raw:
                path = self.fit_corpus.path
                assert path is not None
                key: tuple[str, ...] = ("file", str(path))
                if key not in self._fits:
                    part = CorpusPart(str(path), lambda: iter([read_sentence_file(path)]))
                    self._fits[key] = self._fit(None, None, [part], self.fit_corpus.describe(),
                                                corpus_sha256=file_sha256(path, "fit corpus file"))
                return self._fits[key], hf_subset
            # "target" (and raw): one fit per (task, subset), found through the task object
            if (task_name, hf_subset) in self._fits:
                fit = self._fits[(task_name, hf_subset)]
                return fit, str(fit.record.context["hf_subset"])
            if self._is_raw:
                task = task or (running_task(task_metadata) if task_metadata is not None else None)
            else:
                task = task or self._find_task(task_name, task_metadata)
            subset = fit_subset(task, hf_subset) if task is not None else hf_subset
            key = (task_name, subset)
            if key not in self._fits:
                if self._is_raw:
                    self._fits[key] = self._no_fit(task_name, subset)
                else:
                    corpus = target_corpus(task, hf_subset)
                    self._fits[key] = self._fit(task_name, subset, corpus.parts, corpus.describe(), corpus.task_type)
            self._fits[(task_name, hf_subset)] = self._fits[key]  # e.g. a parallel task's language -> its one fit
            return self._fits[key], subset

    def _no_fit(self, task_name: str, subset: str) -> _Fit:
        calibrator = self._calibrator_template.clone()
        calibrator.n_features_in_ = self.registry_model.backbone.embedding_dim
        calibrator.n_samples_fit_ = 0
        record = FitRecord(model=self.name, calibrator="raw", params={}, source="none: raw embeddings need no fit",
                           n_sentences=0, n_unique_sentences=0, duplicates=self.fit_duplicates, encode_seconds=0.0,
                           fit_seconds=0.0,
                           context={"task": task_name, "hf_subset": subset, "fit_corpus": None})
        self._records.append(record)
        return _Fit(calibrator, record)

    def _fit(self, task_name: str | None, subset: str | None, parts: list[CorpusPart], source: str,
             task_type: str | None = None, corpus_sha256: str | None = None) -> _Fit:
        """Fit on ``parts``; the record's context says where (task, subset, fit corpus, and a sentence
        file's ``corpus_sha256``, which identifies it)."""
        where = f"task {task_name}, subset {subset}" if task_name is not None else source
        sample = sample_corpus(parts, cap=self.max_fit_sentences, seed=self.fit_seed)
        if not sample.sentences:
            raise TaskCorpusError(f"no sentences to fit {self.name} for {where} ({source})")
        context = {"task": task_name, "hf_subset": subset, "fit_corpus": self.fit_corpus.describe()}
        if corpus_sha256 is not None:
            context["corpus_sha256"] = corpus_sha256
        if task_type is not None:
            context["task_type"] = task_type
        calibrator, record = fit_on_sample(
            self.encoder, self._calibrator_template, sample, model=self.name, source=source, context=context,
            duplicates=self.fit_duplicates, what=f"{self.registry_model.calibrator} for {where}",
            remedy="fit on more text with fit_corpus=<a text file, one sentence per line>")
        self._records.append(record)
        self._announce(record)
        return _Fit(calibrator, record)

    @staticmethod
    def _announce(record: FitRecord) -> None:
        """One line per fit: logged where INFO shows, else printed to stderr (``mteb run``)."""
        if logger.isEnabledFor(logging.INFO):
            logger.info("%s", record.summary())
        else:
            print(f"flow-plugin: {record.summary()}", file=sys.stderr, flush=True)

    # ----------------------------------------------------------------- public fitting API
    def calibrator_for(self, task_name: str, hf_subset: str = "default", inputs: list[str] | None = None,
                       *, task: Any = None) -> Calibrator:
        """The fitted calibrator for this (task, subset), fitting it on first use (``inputs``:
        the sentences of the call, what ``fit_corpus='per-call'`` fits on)."""
        fit, _ = self._fit_for(task_name, hf_subset, check_sentences(inputs or []), task=task)
        return fit.calibrator

    def prepare_task(self, task: Any, hf_subsets: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """Fit now, for every subset of a task object (MTEB's missing fit hook; any task type),
        and remember the task for later calls; returns the fit records."""
        self._tasks[task.metadata.name] = task
        if self.fit_corpus.kind == PER_CALL:
            return []
        records = []
        for subset in hf_subsets or getattr(task, "hf_subsets", None) or ["default"]:
            fit, _ = self._fit_for(task.metadata.name, subset, [], task=task)
            records.append(fit.record.as_dict())
        return records

    def write_fit_records(self, output_folder: str | os.PathLike[str], meta: Any = None) -> list[Path]:
        """Write the records of every task this model served next to its results in an MTEB
        output folder (what ``mteb.evaluate`` with a cache gets automatically)."""
        from mteb.cache import ResultCache

        cache = ResultCache(output_folder)
        with self._lock:
            tasks = dict.fromkeys(str(call["task"]) for record in self._records for call in record.served)
            return [self._write_records(cache, meta or self.mteb_model_meta, task) for task in tasks]

    def _write_records(self, cache: Any, meta: Any, task_name: str) -> Path:
        """``<Task>.fits.json`` next to the task's result: every fit that served the task (a
        sentence-file fit serves every task), with only the task's own calls."""
        records = []
        for record in self._records:
            if record.calibrator == "raw" or not any(call.get("task") == task_name for call in record.served):
                continue
            data = record.as_dict()
            data["served"] = [call for call in data["served"] if call.get("task") == task_name]
            data["calls"] = len(data["served"])
            records.append(data)
        result_path = cache.get_task_result_path(task_name, meta)
        return write_fits(result_path, task=task_name, model=self.name, revision=getattr(meta, "revision", None),
                          records=records)

    def _result_saved(self, cache: Any, task_result: Any, meta: Any) -> None:
        """MTEB saved a result of this model into ``cache``: write its task's records once the task is
        done. MTEB saves a task's result after each subset it evaluates (so a killed run keeps them) and
        once more when the task is done; the task is done when the saved result covers every split and
        subset of the task, or when no call came since MTEB's previous save of it (its final save)."""
        task_name = getattr(task_result, "task_name", None)
        if getattr(meta, "name", None) != self.name or not hasattr(meta, "revision"):
            return
        with self._lock:
            if task_name not in self._unsaved:
                return
            fresh_calls = self._calls_since_save.pop(task_name, 0)
            if fresh_calls and not _covers(self._unsaved[task_name], task_result):
                return
            del self._unsaved[task_name]
            self._write_records(cache, meta, task_name)

    def _caution(self, task_metadata: Any) -> None:
        """Warn, once per task type, where this model's calibrator lowered that type on every
        published task-types board (:func:`flow_plugin.catalog.task_type_effects.caution`)."""
        task_type = getattr(task_metadata, "type", None)
        with self._lock:
            if task_type is None or task_type in self._cautioned:
                return
            self._cautioned.add(task_type)
        message = caution(self.name, self.registry_model.calibrator, task_type)
        if message is not None:
            _tell_user(message, stacklevel=4)

    # ----------------------------------------------------------------- MTEB protocol
    def encode(
        self,
        inputs: Any,
        *,
        task_metadata: Any,
        hf_split: str,
        hf_subset: str,
        prompt_type: Any = None,
        **kwargs: Any,
    ) -> np.ndarray:
        sentences = _texts_of(inputs)
        self._caution(task_metadata)
        fit, _ = self._fit_for(task_metadata.name, hf_subset, sentences, task_metadata)
        side = getattr(prompt_type, "value", prompt_type)
        with self._lock:
            fit.record.served_call(task=task_metadata.name, split=hf_split, hf_subset=hf_subset, prompt_type=side,
                                   n_inputs=len(sentences))
            if fit.record.calibrator != "raw":
                destination = result_destination()
                if destination is not None:  # written when MTEB saves this task's finished result
                    self._unsaved[task_metadata.name] = running_task(task_metadata)
                    self._calls_since_save[task_metadata.name] += 1
                    after_results_saved(destination[0], self._result_saved)
        if not sentences:
            return np.empty((0, fit.calibrator.n_features_out_), dtype=np.float32)
        return fit.calibrator.transform(self.encoder.encode(sentences, batch_size=kwargs.get("batch_size")))


def _tell_user(message: str, *, stacklevel: int) -> None:
    """A caution the user sees both ways: a ``UserWarning`` (what ``mteb run`` prints; ``stacklevel`` counts this
    function) and a log line (for code that routes flow-plugin's logger)."""
    warnings.warn(message, UserWarning, stacklevel=stacklevel)
    logger.warning("%s", message)


def _covers(task: Any, task_result: Any) -> bool:
    """Whether a ``TaskResult`` holds scores for every evaluation split and subset of ``task``."""
    if task is None:
        return False
    scores = getattr(task_result, "scores", None) or {}
    splits = getattr(task, "eval_splits", None) or task.metadata.eval_splits
    subsets = set(getattr(task, "hf_subsets", None) or ["default"])
    return all(subsets <= {score.get("hf_subset") for score in scores.get(split, [])} for split in splits)


def _texts_of(inputs: Any) -> list[str]:
    """The sentences of an MTEB DataLoader (batches with a "text" column), or of a plain list."""
    if isinstance(inputs, (list, tuple)):
        return check_sentences(inputs)
    texts: list[str] = []
    for batch in inputs:
        if not isinstance(batch, dict) or "text" not in batch:
            raise DataFolderError(f"expected MTEB batches with a 'text' column, got {type(batch).__name__}")
        texts.extend(batch["text"])
    return check_sentences(texts)

