"""A registry backbone and a fitted calibrator as sentence-transformers modules (a local folder brings its own).

- The backbone: a standard ``Transformer`` with the registry's ``max_seq_length``, truncated to the layers its
  pooling reads. The pooling: ``Pooling`` (``cls``, or ``mean`` of the last layer kept); a layer list
  (``first-last-avg``, ``1,-1`` ...) is ``WeightedLayerPooling`` (weight 1 on the listed layers, 0 elsewhere),
  then ``Pooling("mean")``, as flow-plugin pools.
- A linear calibrator (all but the flow; ``auto`` as the one it chose) is two standard ``Dense`` modules written as
  the calibrator computes ``z = (x - c) W + b``: a centring (identity weight, bias ``-c``), then the projection.
  One ``Dense`` ``x W + (b - c W)`` is the same map in exact arithmetic, but the embeddings share a large mean, so
  in float32 ``x W`` and ``-c W`` are large and cancel. Raw is one identity ``Dense``. So a linear export loads
  without flow-plugin. The flow is :class:`.flow_module.FlowCalibration`.

>>> from flow_plugin.calibration import make_calibrator
>>> X = np.random.default_rng(0).normal(size=(200, 6)).astype(np.float32) * [1, 2, 3, 4, 5, 6] + 3
>>> whitening = make_calibrator("whiten").fit(X)
>>> centre, weight, bias = centred_affine_map(whitening)
>>> bool(np.allclose((X - centre) @ weight + bias, whitening.transform(X), atol=1e-5))
True
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from sentence_transformers.sentence_transformer.modules import Dense, Module, Pooling, Transformer, WeightedLayerPooling

from flow_plugin.calibration import Calibrator
from flow_plugin.catalog.registry import BackboneSpec
from flow_plugin.encoding.backbone import drop_unused_layers, weights_unavailable
from flow_plugin.encoding.pooling import parse_pooling
from flow_plugin.errors import InputError
from flow_plugin.integrations.sentence_transformers.flow_module import FlowCalibration


def _f64(array: np.ndarray) -> np.ndarray:
    return np.asarray(array, dtype=np.float64)


def _null_projection(components: np.ndarray) -> np.ndarray:
    """NATSV's ``c - (c C^T) C`` as one matrix: the projection off the rows of ``C``."""
    components = _f64(components)
    return np.eye(components.shape[1]) - components.T @ components


def centred_affine_map(calibrator: Calibrator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A fitted linear ``calibrator`` as ``z = (x - c) W + b``: (``c``, ``W``, ``b``), computed in float64 from its
    fitted state (``W``: n_features_in x n_features_out). The flow is not affine: :class:`InputError`."""
    calibrator._check_is_fitted()
    method, width = calibrator.method, int(calibrator.n_features_in_)
    if method == "auto":
        return centred_affine_map(calibrator.calibrator_)
    if method == "sn-natsv":  # s = (x - sn mean) / scale, then NATSV of s: (s - natsv mean) P
        sn, natsv = calibrator.standardize_, calibrator.natsv_
        projection = _null_projection(natsv.components_)
        return _f64(sn.mean_), np.diag(1.0 / _f64(sn.scale_)) @ projection, -_f64(natsv.mean_) @ projection
    if method == "raw":
        return np.zeros(width), np.eye(width), np.zeros(width)
    if method == "sn":  # (x - mean) / scale
        weight = np.diag(1.0 / _f64(calibrator.scale_))
    elif method == "natsv":  # c - (c C^T) C with c = x - mean
        weight = _null_projection(calibrator.components_)
    elif method in ("whiten", "soft-whiten"):  # (x - mean) @ components: U Λ^(-1/2) (whiten), U Λ^(-s/2) Uᵀ (soft)
        weight = _f64(calibrator.components_)
    elif method == "center":  # x - mean
        weight = np.eye(width)
    elif method == "remove-mean-dir":  # c - (c u) u with c = x - mean: off the mean's direction u
        weight = _null_projection(calibrator.direction_[None, :])
    else:
        raise InputError(f"a {method!r} calibrator is not an affine map: the export cannot write it as Dense layers")
    return _f64(calibrator.mean_), weight, np.zeros(weight.shape[1])


def transformer_module(spec: BackboneSpec) -> tuple[Transformer, int, int]:
    """The backbone as a ``Transformer`` with the registry's ``max_seq_length`` (the tokenizer's, where shorter),
    truncated to the layers the pooling reads; returns (module, layers kept, layers of the checkpoint)."""
    location, revision, _ = spec.weights_location()
    kwargs: dict[str, Any] = {"trust_remote_code": spec.trust_remote_code}
    if revision and not Path(location).is_dir():  # the pinned revision of a hub id, as the backbone loads it
        kwargs["revision"] = revision
    try:
        transformer = Transformer(location, model_kwargs=dict(kwargs), processor_kwargs=dict(kwargs),
                                  config_kwargs=dict(kwargs))
    except OSError as error:
        raise weights_unavailable(spec.hub_id, error, spec.install_hint(), str(spec.source_file)) from error
    tokenizer_limit = transformer.max_seq_length
    shorter = isinstance(tokenizer_limit, int) and 0 < tokenizer_limit < spec.max_seq_length
    transformer.max_seq_length = tokenizer_limit if shorter else spec.max_seq_length
    model, pooling = transformer.auto_model, parse_pooling(spec.pooling)
    layers_total = int(model.config.num_hidden_layers)
    pooling.validate_depth(layers_total + 1)
    drop_unused_layers(model, pooling.deepest_layer(layers_total + 1))
    return transformer, int(model.config.num_hidden_layers), layers_total


def registry_modules(spec: BackboneSpec) -> tuple[list[Module], list[str]]:
    """A registry backbone and its pooling as standard modules, with one line per module for the README."""
    transformer, layers_kept, layers_total = transformer_module(spec)
    pooling, width = parse_pooling(spec.pooling), transformer.get_embedding_dimension()
    lines = [f"Transformer: {spec.hub_id}" + (f" @ {spec.revision}" if spec.revision else "")
             + f", {layers_kept} of its {layers_total} layers, max_seq_length {transformer.max_seq_length}"]
    if pooling.use_cls_token:
        return [transformer, Pooling(width, pooling_mode="cls")], [*lines, "Pooling: the first token ([CLS])"]
    n_kept = layers_kept + 1  # hidden states of the kept layers, the embeddings' included
    layers = sorted({index % (layers_total + 1) for index in pooling.layers})
    mean = Pooling(width, pooling_mode="mean")
    if layers == [n_kept - 1]:
        return [transformer, mean], [*lines, f"Pooling: mean over tokens of hidden_states[{layers[0]}]"]
    transformer.auto_model.config.output_hidden_states = True  # WeightedLayerPooling reads every layer's states
    weighted = WeightedLayerPooling(width, num_hidden_layers=n_kept - 1, layer_start=layers[0])
    weights = np.array([float(index in layers) for index in range(layers[0], n_kept)], dtype=np.float32)
    weighted.load_state_dict({"layer_weights": weighted.layer_weights.new_tensor(weights)})
    names = ", ".join(str(index) for index in layers)
    return [transformer, weighted, mean], [*lines, f"WeightedLayerPooling: mean of hidden_states[{names}]",
                                           "Pooling: mean over tokens"]


def _dense(weight: np.ndarray, bias: np.ndarray) -> Dense:
    """A standard ``Dense`` (identity activation) computing ``x @ weight + bias``, stored in float32."""
    dense = Dense(int(weight.shape[0]), int(weight.shape[1]), bias=True, activation_function=None)
    dense.load_state_dict({"linear.weight": dense.linear.weight.new_tensor(weight.T.astype(np.float32)),
                           "linear.bias": dense.linear.bias.new_tensor(bias.astype(np.float32))})
    return dense


def calibration_modules(calibrator: Calibrator) -> tuple[list[Module], list[str]]:
    """A linear calibrator as a centring ``Dense`` then a projection ``Dense`` (raw: the projection alone), the
    flow as :class:`FlowCalibration`; with one line per module for the README."""
    if calibrator.method == "flow":
        # the folder's flow runs where it is loaded (CUDA when available, else the CPU), not where it was fitted
        calibrator.set_params(device=None, show_progress_bar=False)
        return [FlowCalibration(calibrator)], [f"FlowCalibration (flow-plugin): the fitted flow, "
                                               f"{calibrator.n_features_in_} -> {calibrator.n_features_out_}"]
    centre, weight, bias = centred_affine_map(calibrator)
    width_in, width_out = weight.shape
    modules = [_dense(weight, bias)]
    lines = [f"Dense {width_in} -> {width_out}: the {calibrator.method} calibrator's projection z = (x - c) W + b"]
    if np.any(centre):  # raw has no centre to subtract
        modules.insert(0, _dense(np.eye(width_in), -centre))
        lines.insert(0, f"Dense {width_in} -> {width_in}: the centring x - c (c the calibrator's fitted mean)")
    return modules, lines
