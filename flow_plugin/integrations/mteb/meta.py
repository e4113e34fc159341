"""MTEB ``ModelMeta`` entries for every registry model name: pure metadata, no weights.

``mteb.get_model_meta("flow_plugin/bert-base-flow")`` reads these; only ``ModelMeta.load_model``
(``mteb.get_model``) builds the model, through the start-up hook's loader. A calibrated name's entry is its
backbone's (``flow_plugin/bert-base``: name and revision) with the calibrator as an experiment parameter, so its
results are filed in ``experiments/calibrator_flow/`` under the backbone's folder
(:func:`flow_plugin.integrations.mteb.calibrated.calibrated_meta`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from mteb.models.model_meta import ModelMeta, ScoringFunction

from flow_plugin.integrations.mteb.compat import registered_model

from flow_plugin._io import plain_json_value
from flow_plugin.calibration import make_calibrator
from flow_plugin.calibration.names import calibrator_method
from flow_plugin.catalog.registry import (MODEL_PREFIX, BackboneSpec, RegistryModel, default_registry,
                                          model_name_suffixes)

BERT_FLOW_CITATION = r"""@inproceedings{li2020bertflow,
  title = {On the Sentence Embeddings from Pre-trained Language Models},
  author = {Li, Bohan and Zhou, Hao and He, Junxian and Wang, Mingxuan and Yang, Yiming and Li, Lei},
  booktitle = {Proceedings of EMNLP},
  year = {2020},
  url = {https://arxiv.org/abs/2011.05864}
}"""


#: the official BERT-flow code (TensorFlow): the flow's training code
BERT_FLOW_CODE = "https://github.com/bohanli/BERT-flow"


def mteb_entry(hub_id: str) -> ModelMeta | None:
    """MTEB's own ``ModelMeta`` of a backbone (e.g. ``sentence-transformers/all-MiniLM-L6-v2``),
    or ``None`` where MTEB has none."""
    entry = registered_model(hub_id)
    return entry if entry is not None and not entry.name.startswith(MODEL_PREFIX) else None


def _training_datasets(entry: ModelMeta | None) -> dict[str, list[str]] | set[str]:
    """The backbone's MTEB training data: MTEB's own entry's (a sentence-transformers model
    trained on MS MARCO, NQ, ... is not zero-shot there), else none: a pre-trained encoder
    (BERT, RoBERTa) saw no MTEB task's labels. Calibrators use no labels."""
    if entry is not None and entry.training_datasets is not None:
        return entry.training_datasets
    return set()


def calibrated_meta(base: ModelMeta, calibrator: str, calibrator_params: dict[str, Any] | None = None,
                    embed_dim: int | None = None) -> ModelMeta:
    """The base's ``ModelMeta`` with the calibrator as an experiment parameter (``raw``: the base's own)."""
    if calibrator == "raw":
        return base
    kwargs = {**dict(base.experiment_kwargs or {}), "calibrator": calibrator,
              **make_calibrator(calibrator, **(calibrator_params or {})).identity_params()}
    if calibrator_params:
        # plain JSON values: MTEB names the experiment folder from them (np.int64(3) is the seed 3)
        kwargs["calibrator_params"] = json.loads(json.dumps(dict(calibrator_params), default=plain_json_value))
    update: dict[str, Any] = {"experiment_kwargs": kwargs, "similarity_fn_name": ScoringFunction.COSINE}
    if embed_dim is not None:
        update["embed_dim"] = embed_dim
    return base.model_copy(update=update)


def backbone_meta(spec: BackboneSpec, loader: Callable[..., Any] | None) -> ModelMeta:
    """The ``ModelMeta`` of a registry backbone's raw embeddings (``flow_plugin/<backbone>``); ``loader(name,
    revision, **kwargs)`` builds the model (:func:`flow_plugin.integrations.mteb.base_models.load_calibrated`)."""
    entry = mteb_entry(spec.hub_id)
    raw = RegistryModel(spec, "raw")
    meta = ModelMeta(
        loader=loader,
        loader_kwargs={},
        name=raw.name,
        revision=raw.revision,
        release_date=spec.release_date,
        languages=list(spec.languages),
        n_parameters=spec.n_parameters,
        memory_usage_mb=None,  # MTEB's own estimate, below
        n_embedding_parameters=spec.n_embedding_parameters or (entry.n_embedding_parameters if entry else None),
        max_tokens=spec.max_seq_length,
        embed_dim=spec.embedding_dim,
        license=spec.license,
        open_weights=True,
        public_training_code=entry.public_training_code if entry else None,
        public_training_data=None,
        framework=["PyTorch"],
        reference=spec.reference,
        similarity_fn_name=ScoringFunction.COSINE,
        use_instructions=False,
        training_datasets=_training_datasets(entry),
        adapted_from=entry.name if entry is not None else spec.hub_id,
        citation=None,
    )
    # MTEB's estimate from n_parameters (float32 weights, whole MB); ours was the same to 0.1 MB
    return meta.model_copy(update={"memory_usage_mb": meta.calculate_memory_usage_mb()})


def model_meta(registry_model: RegistryModel, loader: Callable[..., Any] | None) -> ModelMeta:
    """The ``ModelMeta`` of a registry model name: its backbone's, with the calibrator (and the registry
    file's hyper-parameters for it) as experiment parameters; a flow cites BERT-flow and its training code."""
    spec = registry_model.backbone
    width = make_calibrator(registry_model.calibrator, **registry_model.calibrator_params).output_width(
        spec.embedding_dim)
    meta = calibrated_meta(backbone_meta(spec, loader), registry_model.calibrator, registry_model.calibrator_params,
                           width)
    if calibrator_method(registry_model.calibrator) == "flow":  # the paper's flow and each flow variant
        meta = meta.model_copy(update={"public_training_code": BERT_FLOW_CODE, "citation": BERT_FLOW_CITATION})
    return meta


def all_model_metas(loader: Callable[..., Any] | None,
                    registry: dict[str, BackboneSpec] | None = None) -> dict[str, ModelMeta]:
    """Registry model name -> its ``ModelMeta``, for every name (default registry unless ``registry``)."""
    registry = registry if registry is not None else default_registry()

    return {spec.model_name(method): model_meta(RegistryModel(spec, method), loader) for spec in registry.values()
            for method in model_name_suffixes()}
