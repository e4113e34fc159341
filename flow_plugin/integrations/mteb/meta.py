"""MTEB ``ModelMeta`` entries for every registry model name: pure metadata, no weights.

``mteb.get_model_meta("flow_plugin/bert-base-flow")`` reads these; only ``ModelMeta.load_model``
(``mteb.get_model``) builds the model, through the ``loader`` the caller names (the start-up hook's
:func:`flow_plugin.integrations.mteb.hook.load_model`, or the model class itself): this module
imports neither, so the model can describe itself with it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mteb.models.model_meta import ModelMeta, ScoringFunction

from flow_plugin.integrations.mteb.compat import registered_model

from flow_plugin.calibration.names import calibrator_method
from flow_plugin.catalog.registry import MODEL_PREFIX, BackboneSpec, RegistryModel, default_registry

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


def _embed_dim(registry_model: RegistryModel) -> int:
    from flow_plugin.calibration import make_calibrator

    return make_calibrator(registry_model.calibrator, **registry_model.calibrator_params).output_width(registry_model.backbone.embedding_dim)


def model_meta(registry_model: RegistryModel, loader: Callable[..., Any] | None) -> ModelMeta:
    """The ``ModelMeta`` of a registry model; ``loader(model_name, revision, **kwargs)`` builds it."""
    spec: BackboneSpec = registry_model.backbone
    entry = mteb_entry(spec.hub_id)
    flow = calibrator_method(registry_model.calibrator) == "flow"  # the paper's flow and each flow variant
    embedding_parameters = spec.n_embedding_parameters or (entry.n_embedding_parameters if entry else None)
    meta = ModelMeta(
        loader=loader,
        loader_kwargs={},
        name=registry_model.name,
        revision=registry_model.revision,
        release_date=spec.release_date,
        languages=list(spec.languages),
        n_parameters=spec.n_parameters,
        memory_usage_mb=None,  # MTEB's own estimate, below
        n_embedding_parameters=embedding_parameters,
        max_tokens=spec.max_seq_length,
        embed_dim=_embed_dim(registry_model),
        license=spec.license,
        open_weights=True,
        public_training_code=BERT_FLOW_CODE if flow else (
            entry.public_training_code if entry else None),
        public_training_data=None,
        framework=["PyTorch"],
        reference=spec.reference,
        similarity_fn_name=ScoringFunction.COSINE,
        use_instructions=False,
        training_datasets=_training_datasets(entry),
        adapted_from=entry.name if entry is not None else spec.hub_id,
        citation=BERT_FLOW_CITATION if flow else None,
    )
    # MTEB's estimate from n_parameters (float32 weights, whole MB); ours was the same to 0.1 MB
    return meta.model_copy(update={"memory_usage_mb": meta.calculate_memory_usage_mb()})


def all_model_metas(loader: Callable[..., Any] | None,
                    registry: dict[str, BackboneSpec] | None = None) -> list[ModelMeta]:
    """The ``ModelMeta`` of every registry model name (default registry unless ``registry``)."""
    registry = registry if registry is not None else default_registry()
    from flow_plugin.catalog.registry import model_name_suffixes

    return [model_meta(RegistryModel(spec, method), loader) for spec in registry.values()
            for method in model_name_suffixes()]
