"""Calibrators: estimators that map backbone embeddings to a better-shaped space.

``make_calibrator("flow")`` and friends build one by its name, the suffix used in model names
(``flow_plugin/<backbone>-<name>``): a method (the paper's comparison, :data:`CALIBRATOR_METHODS`, and
the gentle family, :data:`GENTLE_CALIBRATORS`) or a variant of one (:data:`FLOW_VARIANTS`,
``whiten-third``). The names live in :mod:`.names`; each method's class enters the registry by
declaring its name (``class Whitening(Calibrator, method="whiten")``, :mod:`.base`). Importing this
package loads only the names; the classes load with scikit-learn on first use, and the flow imports
torch and nflows when it builds a flow.

Examples
--------
>>> make_calibrator("whiten", n_components=4)
Whitening(n_components=4, shrinkage=0.0)
>>> make_calibrator("flow-lu").permutation
'lu'
>>> make_calibrator("soft-whiten", strength=0.25), make_calibrator("whiten-third").output_width(768)
(SoftWhitening(strength=0.25), 256)
>>> calibrator_class("whiten").__name__, calibrator_class("flow-lu").__name__, calibrator_class("nope")
('Whitening', 'FlowCalibrator', None)
"""

from __future__ import annotations

import difflib
from types import ModuleType
from typing import TYPE_CHECKING, Any

from flow_plugin.calibration.names import (
    CALIBRATOR_METHODS,
    CALIBRATOR_NAMES,
    FLOW_VARIANTS,
    GENTLE_CALIBRATORS,
)
from flow_plugin.errors import RegistryError

if TYPE_CHECKING:  # pragma: no cover
    from flow_plugin.calibration.base import Calibrator


def _calibrator_modules() -> tuple[ModuleType, ...]:
    """The modules that define the calibrator classes (their classes enter the registry as they are defined)."""
    # scikit-learn (and the flow's module) load on first use, so that the names alone stay light
    from flow_plugin.calibration import auto, base, gentle, linear
    from flow_plugin.calibration.flow import calibrator

    return base, linear, gentle, auto, calibrator


def __getattr__(name: str) -> Any:
    if name not in _CLASSES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    for module in _calibrator_modules():
        if hasattr(module, name):
            value = getattr(module, name)
            globals()[name] = value
            return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")  # pragma: no cover


def calibrator_class(name: str) -> type[Calibrator] | None:
    """The class of a calibrator method or variant name (from the registry the classes enter), or ``None``."""
    return _calibrator_modules()[0].class_by_name(name)


def make_calibrator(name: str, **params: Any) -> Any:
    """An unfitted calibrator by name (``raw``, ``sn``, ``natsv``, ``sn-natsv``, ``whiten``,
    ``flow``, a flow variant such as ``flow-lu``, or one of the gentle family such as ``soft-whiten``),
    with optional hyper-parameters on top of the variant's."""
    base = _calibrator_modules()[0]
    calibrator = base.calibrator_by_name(name, **params) if isinstance(name, str) else None
    if calibrator is None:
        close = difflib.get_close_matches(str(name), CALIBRATOR_NAMES, n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise RegistryError(f"unknown calibrator {name!r}; known: {', '.join(CALIBRATOR_NAMES)}{hint}")
    return calibrator


def default_seed(name: str) -> int | None:
    """The seed calibrator ``name`` uses when none is given; ``None`` for one without a seed.

    Examples
    --------
    >>> default_seed("flow"), default_seed("flow-ens"), default_seed("whiten")
    (1234, 1234, None)
    """
    return make_calibrator(name).get_params().get("seed")


#: the classes and helpers defined in the calibrator modules, given out on first use
_CLASSES = ("AutoCalibrator", "Calibrator", "Centering", "FlowCalibrator", "Identity", "MeanDirectionRemoval", "NATSV",
            "SoftWhitening",
            "StandardNormalization", "StandardNormalizationNATSV", "Whitening", "member_seeds")

__all__ = [
    "CALIBRATOR_METHODS",
    "CALIBRATOR_NAMES",
    "FLOW_VARIANTS",
    "GENTLE_CALIBRATORS",
    *_CLASSES,
    "calibrator_class",
    "default_seed",
    "make_calibrator",
]
