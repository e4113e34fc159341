"""Calibrators: estimators that map backbone embeddings to a better-shaped space.

``make_calibrator("flow")`` and friends build one by its short name, the suffix used in
model names (``flow_plugin/<backbone>-<method>``). The linear calibrators need only numpy
and scikit-learn; the flow (torch, nflows) is imported when it is first used.
"""

from __future__ import annotations

import difflib
from typing import Any

from flow_plugin.errors import RegistryError
from flow_plugin.calibration.base import Calibrator, calibrator_class
from flow_plugin.calibration.linear import NATSV, Identity, StandardNormalization, StandardNormalizationNATSV, Whitening

#: Short names in the order tables list them.
CALIBRATOR_NAMES: tuple[str, ...] = ("raw", "sn", "natsv", "sn-natsv", "whiten", "flow")


def __getattr__(name: str) -> Any:
    if name == "FlowCalibrator":  # torch and nflows load only when the flow is wanted
        from flow_plugin.calibration.flow import FlowCalibrator

        return FlowCalibrator
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
