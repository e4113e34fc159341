"""The calibrators' names, in one place (standard library only, so tables, the registry and the
command lines can list them without loading scikit-learn or torch).

A name is a *method* (a calibrator class) or a *variant*: a method with hyper-parameters of
its own. Model names end in it: ``flow_plugin/<backbone>-<name>`` (``raw`` has no suffix).

Examples
--------
>>> CALIBRATOR_METHODS
('raw', 'sn', 'natsv', 'sn-natsv', 'whiten', 'flow')
>>> GENTLE_CALIBRATORS
('center', 'remove-mean-dir', 'soft-whiten', 'whiten-third')
>>> resolve_name("flow-glow")
('flow', {'permutation': 'lu', 'coupling': 'affine', 'fast_path': False})
>>> resolve_name("whiten-third"), calibrator_method("soft-whiten")
(('whiten', {'n_components': 0.3333333333333333}), 'soft-whiten')
"""

from __future__ import annotations

from typing import Any

#: the methods of the paper's comparison, in the order tables list them, and how tables name them: the raw
#: embeddings, the paper's baselines (section 5), whitening (Su et al., 2021) and BERT-flow
_COMPARISON_LABELS: dict[str, str] = {
    "raw": "raw", "sn": "SN", "natsv": "NATSV", "sn-natsv": "SN+NATSV", "whiten": "whitening", "flow": "flow",
}
#: the gentle family's methods (``calibration/gentle.py``) and how tables name them
_GENTLE_LABELS: dict[str, str] = {
    "center": "centering", "remove-mean-dir": "mean-direction removal", "soft-whiten": "soft whitening",
}
#: every method and its label. Each is one calibrator class, which enters the registry by declaring its name
#: (``class Whitening(Calibrator, method="whiten")``).
#: the calibrator that picks one of the others per task (``calibration/auto.py``)
_AUTO_LABELS: dict[str, str] = {"auto": "auto"}
CALIBRATOR_LABELS: dict[str, str] = {**_COMPARISON_LABELS, **_GENTLE_LABELS, **_AUTO_LABELS}
#: the calibrators that choose another per task (the others are *fixed*: one map for every task)
AUTO_CALIBRATORS: tuple[str, ...] = tuple(_AUTO_LABELS)
#: the calibrators ``auto`` may choose, gentlest first (``calibration/auto.py``)
AUTO_CANDIDATES: tuple[str, ...] = ("raw", "center", "remove-mean-dir", "sn", "soft-whiten", "whiten")
#: where ``auto`` steps a whitening-like choice down to when the text cannot pin whitening down
AUTO_STEP_DOWN: dict[str, str] = {"whiten": "soft-whiten", "soft-whiten": "remove-mean-dir"}
#: what names a calibrator's result beside its hyper-parameters (``Calibrator.identity_params``: ``auto``'s rule); a
#: result's experiment holds them, MTEB's loader hands them back, and a row's raw baseline ignores them
IDENTITY_ARGUMENTS: tuple[str, ...] = ("rule",)
#: ``auto``'s table: family -> (its calibrator for isotropic embeddings, the one for anisotropic embeddings), as
#: ``benchmarks/auto_lodo.py`` fitted it (calibration/auto.py reads it as ``RULES``)
AUTO_RULES: dict[str, tuple[str, str]] = {
    "ranking": ("remove-mean-dir", "soft-whiten"),
    "pairs": ("raw", "sn"),
    "labels": ("raw", "sn"),
    "sts": ("raw", "whiten"),
}
#: the six methods of the paper's comparison: what bench, the paper's evaluations and sweeps run by default
CALIBRATOR_METHODS: tuple[str, ...] = tuple(_COMPARISON_LABELS)

#: the linear baselines (a fixed affine map fitted in closed form), which a flow is compared with
LINEAR_BASELINES: tuple[str, ...] = ("sn", "natsv", "sn-natsv", "whiten")

#: the gentle family's variants: whitening of the leading third of the directions (BERT-whitening's k = 256 of
#: BERT-base's 768, Su et al., 2021), a fraction so that one name fits every backbone width
GENTLE_VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "whiten-third": ("whiten", {"n_components": 1 / 3}),
}

#: the gentle family (``calibration/gentle.py``): linear maps between the raw embeddings and full whitening,
#: for the task types whitening costs (classification, clustering): centering, removal of the mean direction,
#: soft whitening of adjustable strength, and whitening of the leading directions only. Each exports as
#: sentence-transformers ``Dense`` layers.
GENTLE_CALIBRATORS: tuple[str, ...] = (*_GENTLE_LABELS, *GENTLE_VARIANTS)

#: flow variants beyond the paper's configuration (which stays ``flow``, the reference), to study what
#: makes the flow better; each is a registry calibrator name, so ``bench`` and MTEB can run it
FLOW_VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    # the official code's alternative to the fixed permutation: Glow's invertible 1x1 convolution (LU form)
    "flow-lu": ("flow", {"permutation": "lu", "fast_path": False}),
    # Glow's affine coupling instead of the paper's additive one
    "flow-affine": ("flow", {"coupling": "affine", "fast_path": False}),
    # both: the full Glow step
    "flow-glow": ("flow", {"permutation": "lu", "coupling": "affine", "fast_path": False}),
    # a fixed whitening as the first layer: the flow only has to model what whitening leaves
    "flow-white": ("flow", {"whiten_first": True}),
    # up to 10 epochs, stopped after 2 held-out checks (4 per epoch) without a rise in the likelihood of a held-out 10%
    "flow-es": ("flow", {"epochs": 10.0, "validation_fraction": 0.1, "patience": 2}),
    # five flows of different seeds; cosine in the joint space is the mean of their cosines
    "flow-ens": ("flow", {"ensemble": 5}),
}

#: what a study of every task type compares by default: the six methods, the flow ensemble, the gentle family and auto
STUDY_CALIBRATORS: tuple[str, ...] = (*CALIBRATOR_METHODS, "flow-ens", *GENTLE_CALIBRATORS, *_AUTO_LABELS)

#: every name: the six methods, the gentle family, auto, the flow variants
CALIBRATOR_NAMES: tuple[str, ...] = (*CALIBRATOR_METHODS, *GENTLE_CALIBRATORS, *_AUTO_LABELS, *FLOW_VARIANTS)

#: every variant: name -> (its method, its hyper-parameters)
_VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {**GENTLE_VARIANTS, **FLOW_VARIANTS}


def calibrator_method(name: str) -> str:
    """The method (calibrator class) of a calibrator name: ``"flow"`` for the flow and each flow variant.

    >>> calibrator_method("flow-lu"), calibrator_method("whiten")
    ('flow', 'whiten')
    """
    return resolve_name(name)[0]


def resolve_name(name: str) -> tuple[str, dict[str, Any]]:
    """``(method, the variant's hyper-parameters)`` of a calibrator name; ``KeyError`` if unknown."""
    if name in CALIBRATOR_LABELS:
        return name, {}
    method, params = _VARIANTS[name]
    return method, dict(params)
