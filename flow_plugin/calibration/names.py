"""The calibrators' names, in one place (standard library only, so tables, the registry and the
command lines can list them without loading scikit-learn or torch).

A name is a *method* (a calibrator class) or a *variant*: a method with hyper-parameters of
its own. Model names end in it: ``flow_plugin/<backbone>-<name>`` (``raw`` has no suffix).

Examples
--------
>>> CALIBRATOR_METHODS
('raw', 'sn', 'natsv', 'sn-natsv', 'whiten', 'flow')
>>> resolve_name("flow-glow")
('flow', {'permutation': 'lu', 'coupling': 'affine', 'fast_path': False})
"""

from __future__ import annotations

from typing import Any

#: the methods, in the order tables list them, and how tables name them: the raw embeddings, the paper's
#: baselines (section 5), whitening (Su et al., 2021) and BERT-flow. Each is one calibrator class, which
#: enters the registry by declaring its name (``class Whitening(Calibrator, method="whiten")``).
CALIBRATOR_LABELS: dict[str, str] = {
    "raw": "raw", "sn": "SN", "natsv": "NATSV", "sn-natsv": "SN+NATSV", "whiten": "whitening", "flow": "flow",
}
CALIBRATOR_METHODS: tuple[str, ...] = tuple(CALIBRATOR_LABELS)

#: the linear baselines (a fixed affine map fitted in closed form), which a flow is compared with
LINEAR_BASELINES: tuple[str, ...] = ("sn", "natsv", "sn-natsv", "whiten")

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

#: what a study of every task type compares by default: the six methods and the flow ensemble
STUDY_CALIBRATORS: tuple[str, ...] = (*CALIBRATOR_METHODS, "flow-ens")

#: every name, methods first
CALIBRATOR_NAMES: tuple[str, ...] = (*CALIBRATOR_METHODS, *FLOW_VARIANTS)


def calibrator_method(name: str) -> str:
    """The method (calibrator class) of a calibrator name: ``"flow"`` for the flow and each flow variant.

    >>> calibrator_method("flow-lu"), calibrator_method("whiten")
    ('flow', 'whiten')
    """
    return resolve_name(name)[0]


def resolve_name(name: str) -> tuple[str, dict[str, Any]]:
    """``(method, the variant's hyper-parameters)`` of a calibrator name; ``KeyError`` if unknown."""
    if name in CALIBRATOR_METHODS:
        return name, {}
    method, params = FLOW_VARIANTS[name]
    return method, dict(params)
