"""A registry backbone and a fitted calibrator as sentence-transformers modules (a local folder brings its own
modules, :mod:`.bases`; the calibrator's are made here for both).

- The backbone is a standard ``Transformer``, truncated to the layers its pooling reads (as
  :class:`flow_plugin.encoding.backbone.Backbone` runs it: ``drop_unused_layers``), with the
  registry's ``max_seq_length``.
- The pooling is a standard ``Pooling`` (``cls``, or ``mean`` of the last kept layer: every
  single-layer pooling, ``[0]`` included, once the layers above it are gone). A layer list
  (``first-last-avg``, ``last2avg``, ``1,-1`` ...) is a standard ``WeightedLayerPooling`` whose
  weights are 1 on the listed layers and 0 elsewhere, then ``Pooling("mean")``: the mean over
  tokens of the mean over layers, as :class:`flow_plugin.encoding.pooling.Pooling` computes it.
- A linear calibrator is two standard ``Dense`` modules (identity activation), its affine map
  written as the calibrator computes it (:mod:`.affine`): a centring ``x - c`` (identity weight,
  bias ``-c``), then the projection ``(x - c) W + b``. One ``Dense`` ``x W + (b - c W)`` would be
  the same map, but in float32 ``x W`` and ``-c W`` are large and cancel. Raw embeddings have no
  centre: one identity ``Dense``. The flow is :class:`.flow_module.FlowCalibration`.

So a linear export is made of sentence-transformers' own modules only and loads without
flow-plugin.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from sentence_transformers.sentence_transformer.modules import Dense, Module, Pooling, Transformer, WeightedLayerPooling

from flow_plugin.calibration import Calibrator
from flow_plugin.catalog.registry import BackboneSpec
from flow_plugin.encoding.backbone import drop_unused_layers, weights_unavailable
from flow_plugin.encoding.pooling import parse_pooling
from flow_plugin.integrations.sentence_transformers.affine import centred_affine_map
from flow_plugin.integrations.sentence_transformers.flow_module import FlowCalibration


@dataclass(frozen=True)
class BaseModules:
    """The modules before the calibrator, one line per module for the model card, and the facts the record keeps
    of them (``max_seq_length``; for a registry backbone ``layers_kept`` and ``layers_total``)."""

    modules: list[Module]
    descriptions: list[str]
    facts: dict[str, Any]


@dataclass(frozen=True)
class Pipeline:
    """Every module of the export, in order, and one line per module for the model card."""

    modules: list[Module]
    descriptions: list[str]
    #: how many of the last modules are the calibrator's (two for a centred linear map)
    calibration_modules: int


def _load_kwargs(spec: BackboneSpec, location: str, revision: str | None) -> dict[str, Any]:
    """``from_pretrained`` arguments, as the backbone loads the same weights: the pinned revision
    for a hub id (a local folder has none), and the registry's ``trust_remote_code``."""
    kwargs: dict[str, Any] = {"trust_remote_code": spec.trust_remote_code}
    if revision and not Path(location).is_dir():
        kwargs["revision"] = revision
    return kwargs


def transformer_module(spec: BackboneSpec) -> tuple[Transformer, int, int]:
    """The backbone as a ``Transformer``, truncated to the layers the pooling reads, with the
    registry's ``max_seq_length`` (or the tokenizer's, where that is shorter, as the backbone
    truncates); returns (module, layers kept, layers of the checkpoint)."""
    pooling = parse_pooling(spec.pooling)
    location, revision, _ = spec.weights_location()
    kwargs = _load_kwargs(spec, location, revision)
    try:
        transformer = Transformer(location, model_kwargs=dict(kwargs), processor_kwargs=dict(kwargs),
                                  config_kwargs=dict(kwargs))
    except OSError as error:
        raise weights_unavailable(spec.hub_id, error, spec.install_hint(), str(spec.source_file)) from error
    tokenizer_limit = transformer.max_seq_length
    limit = spec.max_seq_length
    if isinstance(tokenizer_limit, int) and 0 < tokenizer_limit < limit:
        limit = tokenizer_limit
    transformer.max_seq_length = limit
    model = transformer.auto_model
    layers_total = int(model.config.num_hidden_layers)
    pooling.validate_depth(layers_total + 1)
    drop_unused_layers(model, pooling.deepest_layer(layers_total + 1))
    return transformer, int(model.config.num_hidden_layers), layers_total


def pooling_modules(pooling_spec: str, transformer: Transformer, layers_total: int) -> tuple[list[Module], list[str]]:
    """Standard modules computing the registry pooling on top of the (truncated) transformer."""
    pooling = parse_pooling(pooling_spec)
    width = transformer.get_embedding_dimension()
    if pooling.use_cls_token:
        return [Pooling(width, pooling_mode="cls")], ["Pooling: the last layer's first token ([CLS])"]
    n_kept = int(transformer.auto_model.config.num_hidden_layers) + 1  # hidden states of the kept layers
    layers = sorted({index % (layers_total + 1) for index in pooling.layers})
    mean = Pooling(width, pooling_mode="mean")
    if layers == [n_kept - 1]:
        return [mean], [f"Pooling: mean over tokens of hidden_states[{layers[0]}] (registry pooling {pooling.name!r})"]
    # a layer list: WeightedLayerPooling averages hidden_states[start:] with these weights
    transformer.auto_model.config.output_hidden_states = True
    start = layers[0]
    weighted = WeightedLayerPooling(width, num_hidden_layers=n_kept - 1, layer_start=start)
    weights = np.array([1.0 if index in layers else 0.0 for index in range(start, n_kept)], dtype=np.float32)
    weighted.load_state_dict({"layer_weights": weighted.layer_weights.new_tensor(weights)})
    names = ", ".join(str(index) for index in layers)
    return [weighted, mean], [
        f"WeightedLayerPooling: mean of hidden_states[{names}] (weights 1 on those layers, 0 on the others)",
        f"Pooling: mean over tokens (registry pooling {pooling.name!r})",
    ]


def _dense(weight: np.ndarray, bias: np.ndarray) -> Dense:
    """A standard ``Dense`` (identity activation) computing ``x @ weight + bias``, stored float32."""
    dense = Dense(int(weight.shape[0]), int(weight.shape[1]), bias=True, activation_function=None)
    dense.load_state_dict({
        "linear.weight": dense.linear.weight.new_tensor(weight.T.astype(np.float32)),
        "linear.bias": dense.linear.bias.new_tensor(bias.astype(np.float32)),
    })
    return dense


def calibration_modules(calibrator: Calibrator) -> tuple[list[Module], list[str]]:
    """A linear calibrator as a centring ``Dense`` (x - c) then a projection ``Dense`` (float64 maps
    stored float32; raw, with no centre, as the projection alone), the flow as :class:`FlowCalibration`."""
    if calibrator.method == "flow":
        # the folder's flow runs where it is loaded (CUDA when available, else the CPU), not where it was fitted
        calibrator.set_params(device=None, show_progress_bar=False)
        return [FlowCalibration(calibrator)], [
            f"FlowCalibration (flow-plugin): the fitted {type(calibrator).__name__} "
            f"({calibrator.n_features_in_} -> {calibrator.n_features_out_}), needs flow-plugin installed"]
    linear = centred_affine_map(calibrator)
    projection = linear.projection
    modules = [_dense(projection.weight, projection.bias)]
    lines = [f"Dense {projection.n_features_in} -> {projection.n_features_out}, identity activation: the "
             f"{calibrator.method} calibrator's " + ("projection z = (x - c) W + b" if linear.is_centred
                                                   else "map z = x W + b")]
    if linear.is_centred:
        width = linear.centre.shape[0]
        modules.insert(0, _dense(np.eye(width), -linear.centre))
        lines.insert(0, f"Dense {width} -> {width}, identity weight and activation: the {calibrator.method} "
                        "calibrator's centring x - c (c its fitted mean)")
    return modules, lines


def registry_modules(spec: BackboneSpec) -> BaseModules:
    """A registry backbone and its pooling as standard modules."""
    transformer, layers_kept, layers_total = transformer_module(spec)
    pooling, pooling_lines = pooling_modules(spec.pooling, transformer, layers_total)
    truncated = f", {layers_kept} of its {layers_total} layers (the pooling reads no deeper)" if (
        layers_kept < layers_total) else f", {layers_total} layers"
    transformer_line = (f"Transformer: {spec.hub_id}" + (f" @ {spec.revision}" if spec.revision else "")
                        + f"{truncated}, max_seq_length {transformer.max_seq_length}")
    return BaseModules([transformer, *pooling], [transformer_line, *pooling_lines],
                       {"max_seq_length": int(transformer.max_seq_length), "layers_kept": layers_kept,
                        "layers_total": layers_total})


def build_pipeline(base: BaseModules, calibrator: Calibrator) -> Pipeline:
    """The base's modules, then the calibrator's."""
    calibration, calibration_lines = calibration_modules(calibrator)
    return Pipeline(modules=[*base.modules, *calibration], descriptions=[*base.descriptions, *calibration_lines],
                    calibration_modules=len(calibration))
