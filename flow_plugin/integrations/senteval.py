"""SentEval adapter: ``prepare`` fits a calibrator on the task's sentences, ``batcher`` embeds.

SentEval (facebookresearch/SentEval) drives a model through two callbacks::

    se = senteval.engine.SE(params, batcher, prepare)
    se.eval(["STS12", "STSBenchmark", ...])

For each task it sets ``params.current_task``, calls ``prepare(params, samples)`` once with
every sentence of the task (each a list of tokens; for STS12-16 the scored pairs, for
STSBenchmark and SICK all of train, dev and test), then ``batcher(params, batch)`` over
batches of token lists, expecting a 2-D numpy array with one row per sentence, in order.

Here ``prepare`` fits a *fresh* calibrator on the task's sentences, tokens joined by single
spaces: the BERT-flow paper's "target" setting (unlabelled sentences of the evaluated
dataset, never its scores). ``batcher`` encodes with the process-wide cached backbone
(:func:`flow_plugin.catalog.builders.build_encoder`: each unique sentence goes through the backbone
once, whatever the number of variants or tasks), or a base model's encoder that keeps the task's embeddings,
and applies that calibrator.

The model is named in ``params["flow_plugin"]``: a model spelling (a registry model such as
``flow_plugin/minilm-l6-flow``, a calibrator on a local sentence-transformers folder,
``flow_plugin/./my-model-whiten``, or on a model MTEB loads by name, ``flow_plugin/intfloat/e5-small-v2-flow``),
a dict of :class:`SentEvalAdapter` arguments (``{"model": "flow_plugin/minilm-l6-flow", "device": "cpu"}``)
or an adapter object. A base outside the registry encodes through its own MTEB encoder
(:class:`~flow_plugin.integrations.mteb.senteval_base.BaseModelEncoder`): its own loader and prompts, told
which SentEval task it embeds. Then the module-level :func:`prepare` and :func:`batcher` are the callbacks::

    import senteval
    from flow_plugin.integrations import senteval as flow_senteval

    params = {"task_path": "data/senteval", "usepytorch": True, "kfold": 10, "batch_size": 128,
              "flow_plugin": "flow_plugin/minilm-l6-flow"}
    se = senteval.engine.SE(params, flow_senteval.batcher, flow_senteval.prepare)
    results = se.eval(["STS12", "STS13", "STS14", "STS15", "STS16"])

An adapter's bound methods (``adapter.prepare``, ``adapter.batcher``) work as callbacks too.
This module never imports SentEval.

Note: in SentEval, STS12-16 are unsupervised (cosine of the two embeddings), while
``STSBenchmark`` and ``SICKRelatedness`` train a regressor on the embeddings of the train
split; the paper's unsupervised STS-B / SICK-R numbers come from ``flow-plugin paper`` or
the MTEB tasks of this package.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from flow_plugin.errors import InputError, InputTypeError, NotFittedError
from flow_plugin._machine import cuda_available
from flow_plugin.catalog.fitting import fit_calibrator
from flow_plugin.catalog.registry import (MODEL_PREFIX, BackboneSpec, ForeignBase, RegistryModel, get_backbone,
                                          is_foreign_base, model_name_suffixes, spelled_model)
from flow_plugin.encoding.options import EncoderOptions
from flow_plugin.calibration import Calibrator

logger = logging.getLogger(__name__)

#: The ``params`` key naming the model (a model name, a dict of adapter arguments, or an adapter).
PARAMS_KEY = "flow_plugin"
#: Where :func:`prepare` keeps the adapter it built from a name or dict in ``params``.
_ADAPTER_KEY = "_flow_plugin_adapter"
#: What an empty token list becomes (SentEval's example batchers do the same: ``['.']``).
EMPTY_SENTENCE = "."


#: ``params[CUDA_CHECK_KEY] = False`` turns the check off, for callbacks driven by hand rather than by SentEval
CUDA_CHECK_KEY = "flow_plugin_cuda_check"
#: SentEval tasks whose evaluation runs on CUDA whatever ``usepytorch`` says (senteval/tools/relatedness.py
#: asserts ``torch.cuda.is_available()``; the caption retrieval model is built with ``.cuda()``)
CUDA_ONLY_TASKS = ("STSBenchmark", "SICKRelatedness", "ImageCaptionRetrieval")
#: SentEval tasks that train a classifier: on CUDA with ``usepytorch=True``, scikit-learn's otherwise
CLASSIFIER_TASKS = ("CR", "MR", "MPQA", "SUBJ", "SST2", "SST5", "TREC", "MRPC", "SICKEntailment", "SNLI", "Length",
                    "WordContent", "Depth", "TopConstituents", "BigramShift", "Tense", "SubjNumber", "ObjNumber",
                    "OddManOut", "CoordinationInversion")


def check_task_runs_here(params: Any, task: str | None) -> None:
    """Refuse, before the embedding pass, a SentEval task that would assert CUDA after it.

    SentEval's STSBenchmark and SICKRelatedness train a regressor on CUDA only, and its
    classifier tasks with ``usepytorch=True`` train on CUDA; on a machine without CUDA they fail
    only after every sentence was embedded.
    """
    wanted = params.get(CUDA_CHECK_KEY, True) if isinstance(params, Mapping) else getattr(params, CUDA_CHECK_KEY, True)
    if task is None or not wanted or cuda_available():
        return
    if task in CUDA_ONLY_TASKS:
        raise InputError(
            f"SentEval's {task} trains its evaluation model on CUDA only (it asserts torch.cuda after embedding "
            "every sentence) and this machine has no CUDA device. On a CPU, take the unsupervised STS-B and "
            "SICK-R numbers of the BERT-flow paper from `flow-plugin eval` or `flow-plugin paper`, and run "
            "SentEval's STS12-16 (cosine only) or its classifier tasks with params['usepytorch'] = False"
        )
    usepytorch = params.get("usepytorch", True) if isinstance(params, Mapping) else getattr(params, "usepytorch", True)
    if task in CLASSIFIER_TASKS and usepytorch:
        raise InputError(
            f"SentEval's {task} with params['usepytorch'] = True trains its classifier on CUDA, and this machine "
            "has no CUDA device; set params['usepytorch'] = False (scikit-learn's logistic regression runs on a CPU)"
        )


def base_encoder(base: Any, encoder_options: Mapping[str, Any]) -> Any:
    """The encoder of a base outside the registry
    (:class:`~flow_plugin.integrations.mteb.senteval_base.BaseModelEncoder`): loaded from its spelling (a local
    sentence-transformers folder or a model MTEB loads by name, with ``encoder_options``), wrapped around an MTEB
    encoder object, or ``base`` itself when it is one already."""
    # MTEB loads for a base outside the registry only: not with this module, nor for a registry backbone
    from flow_plugin.integrations.mteb.senteval_base import BaseModelEncoder

    if isinstance(base, BaseModelEncoder):
        return base
    if isinstance(base, str):
        return BaseModelEncoder.load(base.removeprefix(MODEL_PREFIX), encoder_options)
    return BaseModelEncoder(base, encoder_options.get("batch_size"))


class NotPreparedError(NotFittedError):
    """``batcher`` was called before ``prepare`` fitted a calibrator for the current task."""


def tokens_to_sentence(tokens: Any) -> str:
    """SentEval's token list -> the text the backbone sees: tokens joined by single spaces.

    An empty list becomes ``"."`` (as in SentEval's examples). ``bytes`` tokens are decoded
    as UTF-8 and a plain ``str`` is taken as an already-joined sentence.
    """
    if isinstance(tokens, str):
        sentence = " ".join(tokens.split())
    elif isinstance(tokens, Sequence) or isinstance(tokens, np.ndarray):
        words = []
        for position, token in enumerate(tokens):
            if isinstance(token, bytes):
                token = token.decode("utf-8")
            if not isinstance(token, str):
                raise InputTypeError(
                    f"a SentEval sentence must be a list of str tokens; token {position} is "
                    f"{type(token).__name__} ({token!r:.40})"
                )
            words.append(token)
        sentence = " ".join(" ".join(words).split())
    else:
        raise InputTypeError(f"a SentEval sentence must be a list of tokens, got {type(tokens).__name__}")
    return sentence or EMPTY_SENTENCE


def _sentences_of(batch: Any, what: str) -> list[str]:
    if isinstance(batch, (str, bytes)) or not isinstance(batch, (Sequence, np.ndarray)):
        raise InputTypeError(f"{what} must be a list of sentences (token lists), got {type(batch).__name__}")
    return [tokens_to_sentence(tokens) for tokens in batch]


def _current_task(params: Any) -> str | None:
    return params.get("current_task") if isinstance(params, Mapping) else getattr(params, "current_task", None)


def _calibrator_template(calibrator: Any, calibrator_params: dict[str, Any] | None, spec: BackboneSpec | None,
                         device_name: str) -> tuple[Any, str]:
    """The unfitted calibrator an adapter clones for every task, and its method name: a copy of a ``Calibrator``
    object, or one built by method name (with the backbone's preset when the backbone is a registry one)."""
    from flow_plugin.catalog.builders import build_calibrator, calibrator_on_device  # heavy: loads torch

    if isinstance(calibrator, Calibrator):
        if calibrator_params:
            raise InputError("calibrator_params apply to a calibrator method name, not to a Calibrator object")
        return calibrator.clone(), calibrator.method
    if not isinstance(calibrator, str):
        raise InputTypeError(f"calibrator must be a method name or a Calibrator, got {type(calibrator).__name__}")
    if spec is not None:
        return build_calibrator(RegistryModel(spec, calibrator), device=device_name, **(calibrator_params or {})), \
            calibrator
    return calibrator_on_device(calibrator, device_name, **(calibrator_params or {})), calibrator


class SentEvalAdapter:
    """One model for SentEval: a cached backbone plus a calibrator refitted in each ``prepare``.

    Parameters
    ----------
    model:
        A model spelling: a registry model (``"flow_plugin/minilm-l6-flow"``, or a ``RegistryModel``), or a
        calibrator on a local sentence-transformers folder (``"flow_plugin/./my-model-whiten"``) or on a model
        MTEB loads by name (``"flow_plugin/intfloat/e5-small-v2-flow"``).
    backbone, calibrator:
        Instead of ``model``: a registry backbone (name or ``BackboneSpec``), a ``CachedEncoder``, a local
        folder or MTEB model name, an MTEB encoder object or a
        :class:`~flow_plugin.integrations.mteb.senteval_base.BaseModelEncoder`, and a calibrator
        method (``"flow"``, ``"whiten"``, ...) or an unfitted ``Calibrator`` whose clone is fitted in each
        ``prepare``.
    calibrator_params:
        Hyper-parameters overriding the registry's (with a method name only).
    **encoder_options:
        ``device``, ``precision``, ``batch_size``, ``cache_dir``, ``show_progress_bar``
        (:class:`flow_plugin.encoding.options.EncoderOptions`); a base outside the registry takes ``device``,
        ``batch_size`` and ``show_progress_bar`` (its own loader decides the rest).
    """

    def __init__(
        self,
        model: Any = None,
        *,
        backbone: Any = None,
        calibrator: Any = None,
        calibrator_params: dict[str, Any] | None = None,
        **encoder_options: Any,
    ) -> None:
        # torch and scikit-learn load when an adapter is built (SentEval's prepare), not with this module
        from flow_plugin.encoding.cache import CachedEncoder
        from flow_plugin.catalog.builders import build_encoder, resolve

        if (model is None) == (backbone is None):
            raise InputError("give either a model name, or a backbone and a calibrator, not both or neither")
        if model is not None:
            if calibrator is not None:
                raise InputError("calibrator is given by the model name; pass backbone=... to choose it explicitly")
            if isinstance(model, str) and is_foreign_base(spelled_model(model)[0]):
                backbone, calibrator = spelled_model(model)
            else:
                registry_model = resolve(model)
                backbone, calibrator = registry_model.backbone, registry_model.calibrator
        calibrator = "raw" if calibrator is None else calibrator
        options, unknown = EncoderOptions.split(encoder_options)
        if unknown:
            raise InputError(f"unknown SentEvalAdapter argument(s) {', '.join(map(repr, sorted(unknown)))}; "
                             f"encoder options are {', '.join(EncoderOptions.names())}")

        spec = base = None
        if isinstance(backbone, CachedEncoder):
            self.encoder = backbone
        elif (isinstance(backbone, str) and is_foreign_base(backbone.removeprefix(MODEL_PREFIX))) or (
                not isinstance(backbone, (str, BackboneSpec)) and callable(getattr(backbone, "encode", None))):
            self.encoder = base = base_encoder(backbone, encoder_options)  # a spelling or an MTEB encoder
        else:
            spec = backbone if isinstance(backbone, BackboneSpec) else get_backbone(str(backbone))
            self.encoder = build_encoder(RegistryModel(spec, "raw"), options)
        #: the base outside the registry this adapter encodes with (told each task), or None
        self.base_encoder = base
        self._template, method = _calibrator_template(calibrator, calibrator_params, spec,
                                                      base.device if base else str(self.encoder.backbone.device))
        self.method = method
        if spec is not None and method in model_name_suffixes():
            self.name = spec.model_name(method)
        elif base is not None and method in model_name_suffixes():
            self.name = ForeignBase(base.name).model_name(method)
        else:
            self.name = f"{spec.name if spec is not None else (base or self.encoder.backbone).name} + {method}"
        #: the calibrator fitted by the last ``prepare``, and the task it was fitted for
        self.calibrator: Calibrator | None = None
        self.prepared_task: str | None = None
        #: one record per ``prepare``: task, corpus, sentence counts, timings (and flow likelihood)
        self.fit_log: list[dict[str, Any]] = []

    def __repr__(self) -> str:
        return f"SentEvalAdapter({self.name!r}, prepared_task={self.prepared_task!r})"

    @property
    def embedding_dim(self) -> int:
        """Width of the ``batcher`` output (known before ``prepare`` except for reduced whitening)."""
        if self.calibrator is not None:
            return int(self.calibrator.n_features_out_)
        return int(self.encoder.embedding_dim)

    def senteval_params(self, task_path: str | os.PathLike[str], **overrides: Any) -> dict[str, Any]:
        """A SentEval ``params`` dict using this adapter (SentEval's recommended defaults)."""
        params: dict[str, Any] = {"task_path": os.fspath(task_path), "usepytorch": True, "kfold": 10,
                                  "batch_size": 128, PARAMS_KEY: self}
        params.update(overrides)
        return params

    # ------------------------------------------------------------------ SentEval callbacks
    def prepare(self, params: Any, samples: Any) -> None:
        """Fit a fresh calibrator on ``samples``: every sentence of the task, as token lists."""
        task = _current_task(params)
        check_task_runs_here(params, task)
        if self.base_encoder is not None:
            self.base_encoder.for_task(task)
        sentences = _sentences_of(samples, "prepare samples")
        if not sentences:
            raise InputError(f"prepare got no sentences for task {task!r}; nothing to fit {self.name} on")
        source = ("target: the sentences SentEval passed to prepare (all sentences of the task, tokens joined by "
                  "single spaces)")
        calibrator, record = fit_calibrator(self.encoder, self._template, sentences, model=self.name, source=source,
                                            context={"task": task, "fit_corpus": "target"})
        self.fit_log.append(record.as_dict())
        self.calibrator = calibrator
        self.prepared_task = task
        logger.info("%s", record.summary())

    def batcher(self, params: Any, batch: Any) -> np.ndarray:
        """Embeddings of ``batch`` (token lists): float32 (len(batch), d), in the batch's order."""
        task = _current_task(params)
        if self.calibrator is None:
            raise NotPreparedError(
                f"{self.name}: batcher called before prepare; SentEval calls prepare(params, samples) first "
                "(pass the prepare callback to senteval.engine.SE), or call it yourself with the task's sentences"
            )
        if task is not None and self.prepared_task is not None and task != self.prepared_task:
            raise NotPreparedError(
                f"{self.name}: batcher called for task {task!r} but prepare last fitted for {self.prepared_task!r}; "
                f"call prepare for {task!r} first"
            )
        sentences = _sentences_of(batch, "batch")
        if not sentences:
            return np.empty((0, self.embedding_dim), dtype=np.float32)
        if self.base_encoder is not None:  # (shared by several adapters: this one's task)
            self.base_encoder.for_task(self.prepared_task)
        embeddings = self.encoder.encode(sentences, show_progress_bar=False)
        return self.calibrator.transform(embeddings)


def adapter_from_params(params: Any) -> SentEvalAdapter:
    """The adapter named by ``params["flow_plugin"]`` (built once and kept in ``params``)."""
    if not isinstance(params, Mapping):
        raise InputTypeError(f"SentEval params must be a dict, got {type(params).__name__}")
    built = params.get(_ADAPTER_KEY)
    if isinstance(built, SentEvalAdapter):
        return built
    spec = params.get(PARAMS_KEY)
    if spec is None:
        raise InputError(
            f"SentEval params have no {PARAMS_KEY!r} entry: set params[{PARAMS_KEY!r}] to a model name such as "
            "'flow_plugin/minilm-l6-flow', a dict of SentEvalAdapter arguments, or a SentEvalAdapter"
        )
    if isinstance(spec, SentEvalAdapter):
        return spec
    if isinstance(spec, str):
        adapter = SentEvalAdapter(spec)
    elif isinstance(spec, Mapping):
        adapter = SentEvalAdapter(**dict(spec))
    else:
        raise InputTypeError(
            f"params[{PARAMS_KEY!r}] must be a model name, a dict of SentEvalAdapter arguments or a "
            f"SentEvalAdapter, got {type(spec).__name__}"
        )
    params[_ADAPTER_KEY] = adapter  # type: ignore[index]  # SentEval passes the same params to batcher
    return adapter


def prepare(params: Any, samples: Any) -> None:
    """SentEval ``prepare`` callback for the model in ``params["flow_plugin"]``."""
    adapter_from_params(params).prepare(params, samples)


def batcher(params: Any, batch: Any) -> np.ndarray:
    """SentEval ``batcher`` callback for the model in ``params["flow_plugin"]``."""
    if isinstance(params, Mapping) and not isinstance(params.get(_ADAPTER_KEY), SentEvalAdapter) and not isinstance(
        params.get(PARAMS_KEY), SentEvalAdapter
    ):
        raise NotPreparedError(
            "batcher called before prepare: SentEval calls prepare(params, samples) first (pass "
            "flow_plugin.integrations.senteval.prepare to senteval.engine.SE), which builds and fits the model in "
            f"params[{PARAMS_KEY!r}]"
        )
    return adapter_from_params(params).batcher(params, batch)


__all__ = [
    "EMPTY_SENTENCE",
    "PARAMS_KEY",
    "NotPreparedError",
    "SentEvalAdapter",
    "adapter_from_params",
    "base_encoder",
    "batcher",
    "prepare",
    "tokens_to_sentence",
]
