"""A registry model ready to use: the shared cached backbone plus an unfitted calibrator.

This is the library-level meaning of a model name such as ``flow_plugin/bert-base-flow``;
the MTEB wrapper and the SentEval adapter are thin layers over it.

Examples
--------
>>> registry_model = resolve("flow_plugin/minilm-l6-whiten")
>>> build_calibrator(registry_model)
Whitening(n_components=None, shrinkage=0.0)
"""

from __future__ import annotations

import logging
from typing import Any

from flow_plugin.calibration import Calibrator, make_calibrator
from flow_plugin.calibration.names import CALIBRATOR_NAMES, calibrator_method
from flow_plugin.catalog.registry import RegistryModel, parse_model_name
from flow_plugin.encoding.backbone import Backbone
from flow_plugin.encoding.cache import CachedEncoder, shared_encoder
from flow_plugin.encoding.options import EncoderOptions

logger = logging.getLogger(__name__)


def build_encoder(registry_model: RegistryModel, options: EncoderOptions | None = None) -> CachedEncoder:
    """The process-wide cached encoder of the registry model's backbone (shared by all the backbone's models), run
    as ``options`` say."""
    options = options or EncoderOptions()
    spec = registry_model.backbone
    location, revision, source = spec.weights_location()
    backbone = Backbone(
        location,
        name=f"{spec.hub_id}@{revision}" if revision else spec.hub_id,
        revision=revision,
        pooling=spec.pooling,
        max_seq_length=spec.max_seq_length,
        trust_remote_code=spec.trust_remote_code,
        expected_embedding_dim=spec.embedding_dim,
        source=str(spec.source_file),
        install_hint=spec.install_hint(),
        **options.backbone_kwargs(),
    )
    logger.debug("backbone %s from %s (%s)", spec.name, location, source)
    return shared_encoder(backbone, cache_dir=options.cache_dir)


def build_calibrator(registry_model: RegistryModel, *, device: str | None = None, **overrides: Any) -> Calibrator:
    """An unfitted calibrator: registry hyper-parameters, then ``overrides``, on ``device``
    (:func:`calibrator_on_device`)."""
    return calibrator_on_device(registry_model.calibrator, device, **{**registry_model.calibrator_params, **overrides})


def calibrator_on_device(name: str, device: str | None = None, **params: Any) -> Calibrator:
    """An unfitted calibrator ``name`` with ``params``; unless told otherwise, a flow (the flow variants too) of an
    encoder on the CPU fits on the CPU, and one of an encoder on a GPU (or ``device`` ``None``/``"auto"``) fits
    where a probe measured it faster, the CPU or the GPU (``FlowCalibrator(device="auto")``)."""
    known = name in CALIBRATOR_NAMES  # (an unknown name: make_calibrator's error, with close names)
    if known and calibrator_method(name) == "flow" and "device" not in params:
        params["device"] = "cpu" if str(device).strip().lower().startswith("cpu") else "auto"
    return make_calibrator(name, **params)


def resolve(model: str | RegistryModel) -> RegistryModel:
    """A model name (``flow_plugin/<backbone>[-<calibrator>]``) as a :class:`RegistryModel`."""
    return model if isinstance(model, RegistryModel) else parse_model_name(model)
