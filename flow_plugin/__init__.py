"""flow-plugin: BERT-flow calibration of sentence embeddings for MTEB and SentEval.

The package imports nothing heavy at import time (so the MTEB startup hook costs
nothing); the public names below load on first use.
"""

from __future__ import annotations

__version__ = "0.1.0"

_EXPORTS = {
    "Backbone": "flow_plugin.encoding.backbone",
    "Pooling": "flow_plugin.encoding.pooling",
    "parse_pooling": "flow_plugin.encoding.pooling",
    "CachedEncoder": "flow_plugin.encoding.cache",
    "shared_encoder": "flow_plugin.encoding.cache",
    "Calibrator": "flow_plugin.calibration",
    "FlowCalibrator": "flow_plugin.calibration",
    "Identity": "flow_plugin.calibration",
    "NATSV": "flow_plugin.calibration",
    "StandardNormalization": "flow_plugin.calibration",
    "StandardNormalizationNATSV": "flow_plugin.calibration",
    "Whitening": "flow_plugin.calibration",
    "Centering": "flow_plugin.calibration",
    "MeanDirectionRemoval": "flow_plugin.calibration",
    "SoftWhitening": "flow_plugin.calibration",
    "make_calibrator": "flow_plugin.calibration",
    "CALIBRATOR_NAMES": "flow_plugin.calibration",
    "calibrate": "flow_plugin.integrations.mteb.base_models",
    "CalibratedModel": "flow_plugin.integrations.mteb.calibrated",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> object:
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'flow_plugin' has no attribute {name!r}")
    # the builtin import (importlib is not loaded at start-up, and the MTEB start-up hook imports this package in
    # every process); with a fromlist it returns the named module itself
    value = getattr(__import__(module_name, fromlist=[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
