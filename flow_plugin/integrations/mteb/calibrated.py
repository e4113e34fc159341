"""Any MTEB encoder, calibrated: :class:`CalibratedModel` (made by :func:`flow_plugin.calibrate`).

The base model encodes, with its own loader, prompts, instructions and normalisation, exactly as MTEB runs it;
the calibrated model fits a calibrator per (task, subset) on the task's unlabeled text (:mod:`.fits`) and
returns the base's embeddings through it. The ``raw`` calibration returns the base's embeddings untouched, so
its scores are the base model's own.

Its ``ModelMeta`` is the base's, with the calibrator as an experiment parameter (MTEB's own mechanism for
model variants): results of ``calibrate(model, "flow")`` are filed under the base model's name and revision, in
``experiments/calibrator_flow/``, and never overwrite the base model's.

Examples
--------
>>> import mteb
>>> model = CalibratedModel(mteb.get_model("mteb/baseline-random-encoder"), "whiten")
>>> model.mteb_model_meta.name, dict(model.mteb_model_meta.experiment_kwargs)
('mteb/baseline-random-encoder', {'calibrator': 'whiten'})
"""

from __future__ import annotations

import itertools
import logging
import warnings
import weakref
from pathlib import Path
from typing import Any

import numpy as np
from mteb.models.abs_encoder import AbsEncoder
from mteb.models.model_meta import ModelMeta

from flow_plugin.calibration import make_calibrator
from flow_plugin.catalog.registry import spell_model
from flow_plugin.catalog.task_type_effects import caution
from flow_plugin.data.fit_corpus import FitSettings
from flow_plugin.encoding.options import UNNAMED_OPTIONS
from flow_plugin.errors import InputError, InputTypeError
from flow_plugin.results.fits import write_task_fits
from flow_plugin.integrations.mteb.compat import live_task
from flow_plugin.integrations.mteb.base_encoders import base_name, base_output, count_inputs, texts_of
from flow_plugin.integrations.mteb.fits import TaskFits
from flow_plugin.integrations.mteb.meta import calibrated_meta

logger = logging.getLogger(__name__)


class CalibratedModel(AbsEncoder):
    """An MTEB encoder whose embeddings pass through a calibrator fitted per (task, subset).

    Parameters
    ----------
    base:
        Any MTEB encoder (``mteb.get_model(...)``, MTEB's ``SentenceTransformerEncoderWrapper``, a registry
        backbone): it encodes, with its own prompts.
    calibrator:
        A calibrator name (``raw``, ``sn``, ``natsv``, ``sn-natsv``, ``whiten``, ``flow``, the flow variants ...).
    calibrator_params:
        Hyper-parameters of the calibrator (its defaults otherwise).
    **fit_settings:
        ``fit_corpus`` (``"target"``, ``"per-call"`` or a sentence file), ``max_fit_sentences``, ``fit_seed``,
        ``fit_duplicates``, ``fit_sides`` (:class:`~flow_plugin.data.fit_corpus.FitSettings`).

    Attributes
    ----------
    fits: the :class:`~flow_plugin.integrations.mteb.fits.TaskFits` (fitted calibrators and their records).
    mteb_model_meta: the base's ``ModelMeta`` with the calibrator as an experiment parameter.
    """

    def __init__(self, base: Any, calibrator: str = "flow", *, calibrator_params: dict[str, Any] | None = None,
                 **fit_settings: Any) -> None:
        _check_base(base)
        self.base = self.model = base
        self.calibrator = calibrator
        self.calibrator_params = dict(calibrator_params or {})
        template = make_calibrator(calibrator, **self.calibrator_params)
        base_meta = getattr(base, "mteb_model_meta", None) or ModelMeta.create_empty(overwrites={"name": type(base).__name__})
        dims = base_meta.embed_dim if isinstance(base_meta.embed_dim, list) else [base_meta.embed_dim]
        width = max((d for d in dims if isinstance(d, int)), default=None)  # a list: the widths it offers
        meta = calibrated_meta(base_meta, calibrator, self.calibrator_params,
                               template.output_width(width) if width else None)
        if fit_settings and calibrator != "raw":  # what the fit read names the result, as MTEB's loader files it
            given = {key: value if isinstance(value, (int, str)) else str(value) for key, value in fit_settings.items()}
            meta = meta.model_copy(update={"experiment_kwargs": {**dict(meta.experiment_kwargs or {}), **given}})
        self.mteb_model_meta = meta
        if width:
            template.check_params(width)
        self.fits = TaskFits(base, template, self.name, FitSettings.from_keywords(fit_settings))
        #: task name -> when this model last encoded for it (:data:`_ENCODE_CLOCK`): of two live models of one
        #: identity, the fit records beside a result are those of the one that just ran the task
        self.last_encoded: dict[str, int] = {}
        _LIVE_MODELS.add(self)
        self._cautioned: set[str] = set()
        if self.fits.settings.fit_corpus.kind == "per-call" and not self.is_raw:
            tell_user(f"{self.name}: fit_corpus='per-call' fits a new calibrator for every encode() call, so the two "
                      "sides of a pair (sentence1/sentence2, queries/documents, train/test) land in different "
                      "spaces; use the default 'target' for one fit per (task, subset)")

    @property
    def mteb_model_meta(self) -> ModelMeta:
        """The model's ``ModelMeta``: the base's, with the calibrator as an experiment parameter, and what a
        registry backbone settled on (its precision, ``auto`` resolved), so a result is filed under the values that
        produced it however they were spelled. MTEB's loader sets it after loading; the values are added then too."""
        return self._meta

    @mteb_model_meta.setter
    def mteb_model_meta(self, meta: ModelMeta) -> None:
        settled = getattr(self.base, "settled_kwargs", None)
        named = {key: value for key, value in {**dict(meta.experiment_kwargs or {}),
                                               **(settled() if callable(settled) else {})}.items()
                 if key not in UNNAMED_OPTIONS}  # a cache folder given to MTEB's loader names no result
        loader = {key: value for key, value in dict(meta.loader_kwargs or {}).items() if key not in UNNAMED_OPTIONS}
        self._meta = meta.model_copy(update={"experiment_kwargs": named or None, "loader_kwargs": loader})

    @property
    def name(self) -> str:
        """The model's spelling (``flow_plugin/<base>-<calibrator>``; raw: the base's own name)."""
        return spell_model(base_name(self.base), self.calibrator)

    @property
    def is_raw(self) -> bool:
        return self.calibrator == "raw"

    @property
    def fit_log(self) -> list[dict[str, Any]]:
        """One record per fit (JSON-ready): corpus, sentences, sampling, adaptation, time, the calls it served."""
        return [record.as_dict() for record in self.fits.records]

    def __repr__(self) -> str:
        return f"CalibratedModel({self.name!r}, {self.fits.settings.fit_corpus.describe()!r})"

    def prepare(self, task: Any, hf_subsets: list[str] | None = None) -> list[dict[str, Any]]:
        """Fit now for every subset of ``task`` (MTEB's missing fit hook), and read its text from this task
        object later; returns the fit records."""
        self.fits.remember(task)
        if self.is_raw or self.fits.settings.fit_corpus.kind == "per-call":
            return []
        records = [self.fits.fit_for(task.metadata, subset, side).record.as_dict()
                   for subset in hf_subsets or getattr(task, "hf_subsets", None) or ["default"]
                   for side in self.fits.sides(task)]
        return list({id(record): record for record in records}.values())

    def calibrator_for(self, task: Any, hf_subset: str = "default", side: str | None = None) -> Any:
        """The fitted calibrator of a task's subset (and side), fitting it on first use; ``task``: a task object,
        or the name of one this model evaluated or MTEB's registry holds."""
        if isinstance(task, str):
            task = self.fits.task_of(task)
        self.fits.remember(task)
        return self.fits.fit_for(task.metadata, hf_subset, side).calibrator

    def encode(self, inputs: Any, *, task_metadata: Any, hf_split: str, hf_subset: str, prompt_type: Any = None,
               **kwargs: Any) -> np.ndarray:
        if self.is_raw:  # the base's own output, checked (one finite row per input), returned as it came
            with self.fits.times.measure("encode"):
                output = self.base.encode(inputs, task_metadata=task_metadata, hf_split=hf_split,
                                          hf_subset=hf_subset, prompt_type=prompt_type, **kwargs)
            base_output(output, count_inputs(inputs), self.base, task_metadata.name)
            return output
        self._caution(task_metadata)
        self.last_encoded[task_metadata.name] = next(_ENCODE_CLOCK)
        side = getattr(prompt_type, "value", prompt_type)
        texts = texts_of(inputs)
        fit = self.fits.fit_for(task_metadata, hf_subset, side, texts)
        fit.record.served_call(task=task_metadata.name, split=hf_split, hf_subset=hf_subset, prompt_type=side,
                               n_inputs=len(texts))
        if not texts:
            return np.empty((0, fit.calibrator.n_features_out_), dtype=np.float32)
        embeddings = self.fits.embed_call(inputs, texts, task_metadata, hf_split, hf_subset, side, **kwargs)
        return fit.calibrator.transform(embeddings)

    def _caution(self, task_metadata: Any) -> None:
        """Warn, once per task type, where this calibrator lowered that MTEB type on every published board."""
        task_type = getattr(task_metadata, "type", None)
        if task_type is not None and task_type not in self._cautioned:
            self._cautioned.add(task_type)
            if (message := caution(self.name, self.calibrator, task_type)) is not None:
                tell_user(message)


#: the calibrated models of this process, for :func:`write_beside_result`
_LIVE_MODELS: weakref.WeakSet[CalibratedModel] = weakref.WeakSet()
#: orders the encode() calls of every calibrated model of this process
_ENCODE_CLOCK = itertools.count()


def write_beside_result(path: Path, task_result: Any, meta: ModelMeta) -> None:
    """What flow-plugin keeps beside a result MTEB just saved at ``path`` (registered by the start-up hook:
    :func:`~flow_plugin.integrations.mteb.compat.after_each_save`): the per-item data the task captured, and the fit
    records of the calibrated models of this run, on every route (our commands, ``mteb run``, ``mteb.evaluate``)."""
    task = live_task(task_result.task_name)
    if task is not None and hasattr(task, "write_beside"):
        task.write_beside(path, task_result)
    name = task_result.task_name
    ran = [model for model in list(_LIVE_MODELS) if name in model.last_encoded and _identity(model.mteb_model_meta)
           == _identity(meta)]
    if ran:
        write_task_fits(path, max(ran, key=lambda model: model.last_encoded[name]), name)


def _identity(meta: ModelMeta) -> tuple[str, str | None, str | None]:
    return meta.name, meta.revision, meta.experiment_name


def _check_base(base: Any) -> None:
    if isinstance(base, CalibratedModel):
        raise InputError(f"the model is already calibrated ({base.name}); calibrate its base instead: "
                         f"calibrate(model.base, ...)")
    if not callable(getattr(base, "encode", None)):
        raise InputTypeError(f"cannot calibrate a {type(base).__name__}: give an MTEB encoder (an object with "
                             "encode(), such as mteb.get_model(name)) or a model's name")


def tell_user(message: str) -> None:
    """A caution the user sees both ways: a ``UserWarning`` (what ``mteb run`` prints) and a log line."""
    warnings.warn(message, UserWarning, stacklevel=3)
    logger.warning("%s", message)


__all__ = ["CalibratedModel", "tell_user", "write_beside_result"]
