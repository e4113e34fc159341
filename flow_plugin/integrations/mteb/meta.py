"""MTEB ``ModelMeta`` entries for every registry model name: pure metadata, no weights.

``mteb.get_model_meta("flow_plugin/bert-base-flow")`` reads these; only
``ModelMeta.load_model`` (``mteb.get_model``) builds the model, through :func:`load_model`.
"""

from __future__ import annotations

from typing import Any

from mteb.models.model_meta import ModelMeta, ScoringFunction

from flow_plugin.catalog.registry import BackboneSpec, ModelVariant, default_registry

BERT_FLOW_CITATION = r"""@inproceedings{li2020bertflow,
  title = {On the Sentence Embeddings from Pre-trained Language Models},
  author = {Li, Bohan and Zhou, Hao and He, Junxian and Wang, Mingxuan and Yang, Yiming and Li, Lei},
  booktitle = {Proceedings of EMNLP},
  year = {2020},
  url = {https://arxiv.org/abs/2011.05864}
}"""


def load_model(model_name: str, revision: str | None = None, **kwargs: Any) -> Any:
    """MTEB loader (imports the adapter only when a model is really loaded)."""
    from flow_plugin.integrations.mteb.model import FlowPluginModel

    return FlowPluginModel(model_name, revision, **kwargs)


def _embed_dim(variant: ModelVariant) -> int:
    from flow_plugin.calibration import make_calibrator

    return make_calibrator(variant.calibrator, **variant.calibrator_params).output_width(variant.backbone.embedding_dim)


def model_meta(variant: ModelVariant) -> ModelMeta:
    spec: BackboneSpec = variant.backbone
    return ModelMeta(
        loader=load_model,
        loader_kwargs={},
        name=variant.name,
        revision=variant.revision,
        release_date=spec.release_date,
        languages=list(spec.languages),
        n_parameters=spec.n_parameters,
        memory_usage_mb=round(spec.n_parameters * 4 / 2**20, 1),
        max_tokens=spec.max_seq_length,
        embed_dim=_embed_dim(variant),
        license=spec.license,
        open_weights=True,
        public_training_code=None,
        public_training_data=None,
        framework=["PyTorch"],
        reference=spec.reference,
        similarity_fn_name=ScoringFunction.COSINE,
        use_instructions=False,
        training_datasets=None,
        adapted_from=spec.hub_id,
        citation=BERT_FLOW_CITATION if variant.calibrator == "flow" else None,
    )


def all_model_metas(registry: dict[str, BackboneSpec] | None = None) -> list[ModelMeta]:
    registry = registry if registry is not None else default_registry()
    from flow_plugin.catalog.registry import variant_suffixes

    return [model_meta(ModelVariant(spec, method)) for spec in registry.values() for method in variant_suffixes()]
