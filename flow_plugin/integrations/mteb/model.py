"""The MTEB adapter: a thin ``AbsEncoder`` over the cached backbone and a calibrator.

MTEB has no fit hook and calls ``encode()`` once for sentence1 and once for sentence2
of each split. So the first ``encode()`` of a (task, subset) gathers that task's unlabeled
sentences, fits a fresh calibrator on them, and every later call of the same (task,
subset) reuses that fit. Which sentences are used is the ``fit_corpus`` policy (see
:mod:`flow_plugin.data.fit_corpus`); the log says which one and how many sentences it saw.
"""

from __future__ import annotations

import difflib
import logging
import os
import threading
from collections.abc import Iterable
from typing import Any

import numpy as np
from mteb.models.abs_encoder import AbsEncoder

from flow_plugin._validation import check_sentences
from flow_plugin.calibration import Calibrator, Identity
from flow_plugin.catalog.fitting import DUPLICATE_POLICIES, fit_calibrator
from flow_plugin.encoding.options import EncoderOptions
from flow_plugin.errors import DataFolderError, FlowPluginError, InputError
from flow_plugin.data.fit_corpus import FitCorpus, read_sentence_file
from flow_plugin.catalog.variants import build_calibrator, build_encoder, resolve

logger = logging.getLogger(__name__)


class TaskCorpusError(FlowPluginError, LookupError):
    """The unlabeled sentences of a task cannot be gathered for the "target" fit."""


def task_unlabeled_sentences(task: Any, hf_subset: str) -> list[str]:
    """Every text of every split of ``task``'s dataset for ``hf_subset`` (labels excluded).

    Uses the task's own ``fit_corpus_sentences`` when it has one (our offline tasks);
    otherwise reads the text columns the task declares (``_get_content_columns``) from each
    split of its loaded dataset.
    """
    if hasattr(task, "fit_corpus_sentences"):
        return list(task.fit_corpus_sentences(hf_subset))
    if not task.data_loaded:
        task.load_data()
    dataset = task.dataset
    if task.metadata.is_multilingual or (isinstance(dataset, dict) and hf_subset in dataset and hf_subset != "default"):
        dataset = dataset[hf_subset]
    elif isinstance(dataset, dict) and "default" in dataset and hasattr(dataset["default"], "keys"):
        dataset = dataset["default"]
    columns = [name for name, modality in task._get_content_columns().items() if modality == "text"]
    if not columns:
        raise TaskCorpusError(f"task {task.metadata.name} declares no text columns to fit a calibrator on")
    sentences: list[str] = []
    for split_name, split in dataset.items():
        present = [column for column in columns if column in getattr(split, "column_names", ())]
        if not present:
            raise TaskCorpusError(
                f"task {task.metadata.name}, split {split_name}: none of the text columns {columns} is in the data"
            )
        for column in present:
            sentences.extend(split[column])
    return sentences


class FlowPluginModel(AbsEncoder):
    """A registry model (``flow_plugin/<backbone>[-<calibrator>]``) for MTEB.

    Parameters
    ----------
    model_name:
        A registry model name such as ``flow_plugin/bert-base-flow``.
    fit_corpus:
        ``"target"`` (default), ``"inputs"``, or a path to a text file with one sentence per line.
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
        fit_corpus: str | os.PathLike[str] = "target",
        fit_duplicates: str = "keep",
        calibrator_params: dict[str, Any] | None = None,
        embed_dim: int | None = None,
        **encoder_options: Any,
    ) -> None:
        unknown = sorted(set(encoder_options) - set(EncoderOptions.names()))
        if unknown:
            accepted = ["fit_corpus", "fit_duplicates", "calibrator_params", "embed_dim", *EncoderOptions.names()]
            hints = []
            for key in unknown:
                close = difflib.get_close_matches(key, accepted, n=1)
                hints.append(f"{key!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
            raise InputError(
                f"{model_name}: unknown loader argument(s) {', '.join(hints)}; accepted: {', '.join(accepted)}"
            )
        self.variant = resolve(model_name)
        if revision is not None and revision not in (self.variant.revision, self.variant.backbone.revision):
            raise FlowPluginError(
                f"{model_name} is revision {self.variant.revision} (weights {self.variant.backbone.revision} and this "
                f"registry configuration), not {revision}: its registry file or flow-plugin changed since"
            )
        self.fit_corpus = FitCorpus.parse(fit_corpus)
        if fit_duplicates not in DUPLICATE_POLICIES:
            raise InputError(f"fit_duplicates must be one of {', '.join(DUPLICATE_POLICIES)}, got {fit_duplicates!r}")
        self.fit_duplicates = fit_duplicates
        self.options = EncoderOptions(**encoder_options)
        self.encoder = build_encoder(self.variant, self.options)
        self.model = self.encoder  # AbsEncoder convention: the wrapped model
        self._calibrator_template = build_calibrator(
            self.variant, device=str(self.encoder.backbone.device), **(calibrator_params or {})
        )
        if embed_dim is not None and embed_dim != self._expected_width():
            raise InputError(f"{model_name} gives {self._expected_width()}-dimensional embeddings, not {embed_dim}")
        self._fitted: dict[tuple[str, ...], Calibrator] = {}
        self._task_corpora: dict[tuple[str, str], list[str]] = {}
        self._lock = threading.Lock()
        #: one record per fit: what was fitted, on which corpus, how many sentences, how long
        self.fit_log: list[dict[str, Any]] = []

    def _expected_width(self) -> int:
        return self._calibrator_template.output_width(self.variant.backbone.embedding_dim)

    @property
    def name(self) -> str:
        return self.variant.name

    def __repr__(self) -> str:
        return f"FlowPluginModel({self.name!r}, fit_corpus={self.fit_corpus.describe()!r})"

    # ----------------------------------------------------------------- fit corpora
    def set_task_corpus(self, task_name: str, sentences: Iterable[str], hf_subset: str = "default") -> None:
        """Give the "target" sentences of a task that MTEB's registry cannot load by name."""
        self._task_corpora[(task_name, hf_subset)] = check_sentences(sentences, name="sentences")

    def prepare_task(self, task: Any, hf_subsets: Iterable[str] | None = None) -> None:
        """Read the unlabeled sentences of a task object (for tasks outside MTEB's registry)."""
        for subset in hf_subsets or getattr(task, "hf_subsets", None) or ["default"]:
            self.set_task_corpus(task.metadata.name, task_unlabeled_sentences(task, subset), subset)

    def _target_sentences(self, task_name: str, hf_subset: str) -> tuple[list[str], str]:
        if (task_name, hf_subset) in self._task_corpora:
            return self._task_corpora[(task_name, hf_subset)], "sentences given with set_task_corpus/prepare_task"
        from flow_plugin.integrations.mteb.tasks import loaded_task

        offline = loaded_task(task_name)
        if offline is not None:
            return offline.fit_corpus_sentences(hf_subset), f"all splits of {offline.resolved_data_dir()}"
        import mteb

        try:
            task = mteb.get_task(task_name)
        except KeyError:
            raise TaskCorpusError(
                f"fit_corpus='target' needs the unlabeled sentences of task {task_name!r}, which is not in MTEB's "
                "registry: call model.prepare_task(task) before evaluating, or load the model with "
                "fit_corpus='inputs' or fit_corpus=<sentence file>"
            ) from None
        sentences = task_unlabeled_sentences(task, hf_subset)
        splits = ", ".join(task.dataset.keys()) if hasattr(task, "dataset") and isinstance(task.dataset, dict) else "all"
        return sentences, f"all splits of the task's dataset ({splits})"

    def _fit_key(self, task_name: str, hf_subset: str) -> tuple[str, ...] | None:
        """What a fit can be reused for; ``None`` when every call fits anew ("inputs")."""
        if isinstance(self._calibrator_template, Identity):
            return ("raw",)
        if self.fit_corpus.kind == "file":
            return ("file", str(self.fit_corpus.path))
        if self.fit_corpus.kind == "inputs":
            return None
        return ("target", task_name, hf_subset)

    def _fit_sentences(self, task_name: str, hf_subset: str, inputs: list[str]) -> tuple[list[str], str]:
        """The sentences to fit on under the current policy, and where they come from."""
        if isinstance(self._calibrator_template, Identity):
            return inputs, "no fit needed (raw embeddings)"
        if self.fit_corpus.kind == "file":
            assert self.fit_corpus.path is not None
            return read_sentence_file(self.fit_corpus.path), self.fit_corpus.describe()
        if self.fit_corpus.kind == "inputs":
            return inputs, "inputs: the sentences of this encode() call"
        sentences, description = self._target_sentences(task_name, hf_subset)
        return sentences, f"target: {description}"

    def calibrator_for(self, task_name: str, hf_subset: str, inputs: list[str]) -> Calibrator:
        """The fitted calibrator for this (task, subset), fitting it on first use."""
        key = self._fit_key(task_name, hf_subset)
        with self._lock:
            if key is not None and key in self._fitted:
                return self._fitted[key]
            sentences, description = self._fit_sentences(task_name, hf_subset, inputs)
            if not sentences:
                raise TaskCorpusError(f"no sentences to fit {self.name} for {task_name}/{hf_subset} ({description})")
            context = {"task": task_name, "hf_subset": hf_subset, "fit_corpus": self.fit_corpus.describe()}
            calibrator, record = fit_calibrator(self.encoder, self._calibrator_template, sentences, model=self.name,
                                                source=description, duplicates=self.fit_duplicates, context=context)
            self.fit_log.append(record.as_dict())
            if key != ("raw",):
                logger.info("%s", record.summary())
            if key is not None:
                self._fitted[key] = calibrator
            return calibrator

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
        batch_size = kwargs.get("batch_size")
        if not sentences:
            fitted = self._fitted.get(self._fit_key(task_metadata.name, hf_subset) or ("",))
            width = fitted.n_features_out_ if fitted is not None else self.encoder.embedding_dim
            return np.empty((0, width), dtype=np.float32)
        calibrator = self.calibrator_for(task_metadata.name, hf_subset, sentences)
        return calibrator.transform(self.encoder.encode(sentences, batch_size=batch_size))


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


def load_model(model_name: str, revision: str | None = None, device: str | None = None, **kwargs: Any) -> FlowPluginModel:
    """MTEB loader: ``ModelMeta.load_model`` calls this with the model name and revision."""
    return FlowPluginModel(model_name, revision, device=device, **kwargs)
