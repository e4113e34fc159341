"""Calibrators: estimators that map backbone embeddings to a better-shaped space.

``make_calibrator("flow")`` and friends build one by its name, the suffix used in model names
(``flow_plugin/<backbone>-<name>``): a method (:data:`CALIBRATOR_METHODS`) or a variant of one
(:data:`FLOW_VARIANTS`). Importing this package loads only the names; the classes load
with scikit-learn on first use, and the flow imports torch and nflows when it builds a flow.

Examples
--------
>>> make_calibrator("whiten", n_components=4)
Whitening(n_components=4, shrinkage=0.0)
>>> make_calibrator("flow-lu").permutation
'lu'
"""

from __future__ import annotations

import difflib
import importlib
from typing import Any

from flow_plugin.calibration.names import CALIBRATOR_METHODS, CALIBRATOR_NAMES, FLOW_VARIANTS, resolve_name
from flow_plugin.errors import RegistryError

#: public name -> the module that defines it (loaded on first use)
_LAZY = {
    "Calibrator": "flow_plugin.calibration.base",
    "calibrator_class": "flow_plugin.calibration.base",
    "Identity": "flow_plugin.calibration.linear",
    "NATSV": "flow_plugin.calibration.linear",
    "StandardNormalization": "flow_plugin.calibration.linear",
    "StandardNormalizationNATSV": "flow_plugin.calibration.linear",
    "Whitening": "flow_plugin.calibration.linear",
    "FlowCalibrator": "flow_plugin.calibration.flow",
    "member_seeds": "flow_plugin.calibration.flow.calibrator",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def make_calibrator(name: str, **params: Any) -> Any:
    """An unfitted calibrator by name (``raw``, ``sn``, ``natsv``, ``sn-natsv``, ``whiten``,
    ``flow`` or a flow variant such as ``flow-lu``), with optional hyper-parameters on top of the
    variant's."""
    from flow_plugin.calibration.base import calibrator_class

    cls = calibrator_class(name) if isinstance(name, str) else None
    if cls is None:
        close = difflib.get_close_matches(str(name), CALIBRATOR_NAMES, n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise RegistryError(f"unknown calibrator {name!r}; known: {', '.join(CALIBRATOR_NAMES)}{hint}")
    _, preset = resolve_name(name)
    return cls(**{**preset, **params})


def default_seed(name: str) -> int | None:
    """The seed calibrator ``name`` uses when none is given; ``None`` for one without a seed.

    Examples
    --------
    >>> default_seed("flow"), default_seed("flow-ens"), default_seed("whiten")
    (1234, 1234, None)
    """
    return make_calibrator(name).get_params().get("seed")


__all__ = [
    "default_seed",
    "CALIBRATOR_METHODS",
    "CALIBRATOR_NAMES",
    "FLOW_VARIANTS",
    "NATSV",
    "Calibrator",
    "FlowCalibrator",
    "Identity",
    "StandardNormalization",
    "StandardNormalizationNATSV",
    "Whitening",
    "calibrator_class",
    "make_calibrator",
    "member_seeds",
]
