"""A model variant ready to use: the shared cached backbone plus an unfitted calibrator.

This is the library-level meaning of a model name such as ``flow_plugin/bert-base-flow``;
the MTEB wrapper and the SentEval adapter are thin layers over it.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from flow_plugin.encoding.cache import CachedEncoder, shared_encoder
from flow_plugin.calibration import Calibrator, make_calibrator
from flow_plugin.catalog.registry import ModelVariant, parse_model_name

logger = logging.getLogger(__name__)


def build_encoder(
    variant: ModelVariant,
    *,
    device: str | None = None,
    precision: str = "auto",
    batch_size: int | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    show_progress_bar: bool | None = None,
) -> CachedEncoder:
    """The process-wide cached encoder of the variant's backbone (shared by all six variants)."""
    spec = variant.backbone
    location, revision, source = spec.weights_location()
    kwargs: dict[str, Any] = {
        "name": f"{spec.hub_id}@{revision}" if revision else spec.hub_id,
        "revision": revision,
        "pooling": spec.pooling,
        "max_seq_length": spec.max_seq_length,
        "device": device,
        "precision": precision,
        "show_progress_bar": show_progress_bar,
        "trust_remote_code": spec.trust_remote_code,
    }
    if batch_size is not None:
        kwargs["batch_size"] = batch_size
    encoder = shared_encoder(location, cache_dir=cache_dir, **kwargs)
    logger.debug("backbone %s from %s (%s)", spec.name, location, source)
    return encoder


def build_calibrator(variant: ModelVariant, *, device: str | None = None, **overrides: Any) -> Calibrator:
    """An unfitted calibrator: registry hyper-parameters, then ``overrides``."""
    params = {**variant.calibrator_params, **overrides}
    if variant.calibrator == "flow" and "device" not in params:
        params["device"] = device  # the flow runs where the backbone runs
    return make_calibrator(variant.calibrator, **params)


def resolve(model: str | ModelVariant) -> ModelVariant:
    return model if isinstance(model, ModelVariant) else parse_model_name(model)
