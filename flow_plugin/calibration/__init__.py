"""Calibrators: estimators that map backbone embeddings to a better-shaped space.

``make_calibrator("flow")`` and friends build one by its short name, the suffix used in
model names (``flow_plugin/<backbone>-<method>``). The linear calibrators need only numpy
and scikit-learn; the flow imports torch and nflows when it first builds a flow.

>>> make_calibrator("whiten", n_components=4)
Whitening(n_components=4, shrinkage=0.0)
"""

from __future__ import annotations

import difflib
from typing import Any

from flow_plugin.errors import RegistryError
from flow_plugin.calibration.base import Calibrator, calibrator_class
from flow_plugin.calibration.flow import FlowCalibrator
from flow_plugin.calibration.linear import NATSV, Identity, StandardNormalization, StandardNormalizationNATSV, Whitening

#: Short names (each class's ``method``), in the order tables list them.
CALIBRATOR_NAMES: tuple[str, ...] = tuple(
    cls.method for cls in (Identity, StandardNormalization, NATSV, StandardNormalizationNATSV, Whitening, FlowCalibrator)
)


def make_calibrator(method: str, **params: Any) -> Calibrator:
    """Build an unfitted calibrator by short name (``raw``, ``sn``, ``natsv``, ``sn-natsv``,
    ``whiten``, ``flow``) with optional hyper-parameters."""
    cls = calibrator_class(method) if isinstance(method, str) else None
    if cls is None:
        close = difflib.get_close_matches(str(method), CALIBRATOR_NAMES, n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise RegistryError(
            f"unknown calibrator {method!r}; known: {', '.join(CALIBRATOR_NAMES)}{hint}"
        ) from None
    return cls(**params)


__all__ = [
    "CALIBRATOR_NAMES",
    "NATSV",
    "Calibrator",
    "FlowCalibrator",
    "Identity",
    "StandardNormalization",
    "StandardNormalizationNATSV",
    "Whitening",
    "make_calibrator",
]
