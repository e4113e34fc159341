"""``auto``: a calibrator chosen per task from the task's own unlabeled text and its MTEB task type.

Whitening-like calibrators gain on cosine-ranking tasks of some datasets and lose on others, and cost few-shot
classification and k-means clustering; how much a task's embeddings gain from them depends on how anisotropic they
are. So :class:`AutoCalibrator` measures, on the embeddings it is fitted on, their anisotropy (the mean cosine
between two of them: near 0 for a sentence encoder, 0.3-0.5 for the first layers of a raw masked-LM encoder) and
picks from a table by the task's family (MTEB's task type) and whether the embeddings are anisotropic:

==============================  ======================================  =========================================
family (MTEB task types)        isotropic (anisotropy < threshold)      anisotropic
==============================  ======================================  =========================================
ranking: Retrieval, Reranking   :data:`RULES` ``["ranking"][0]``        :data:`RULES` ``["ranking"][1]``
pairs: PairClassification       ``["pairs"][0]``                        ``["pairs"][1]``
labels: Classification,         ``["labels"][0]``                       ``["labels"][1]``
Clustering
sts: STS                        ``["sts"][0]``                          ``["sts"][1]``
==============================  ======================================  =========================================

Where the entry is whitening-like, two safeguards may step it down to a gentler calibrator (:data:`STEP_DOWN`):
whitening's split-half stability (:mod:`.signals`) below ``stability_floor`` (off by default), and the guard: the
:data:`GUARD` signal past the range it spanned on the tasks the entry was fitted on (:data:`SUPPORT`), where the
entry's evidence does not reach. A task of another type, or none given (``task_type=None``), counts as "pairs".
Labels are never read. The threshold, the floor, the guard and the ranking, pairs and labels entries are fitted on
the task-types boards and checked leave one dataset out (``benchmarks/auto_lodo.py``, docs/gentle.md); the sts
entry comes from the STS boards, and has no range.

Examples
--------
>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> cone = (rng.normal(size=(400, 16)) + 6.0).astype(np.float32)  # every embedding near one direction
>>> auto = AutoCalibrator(task_type="Retrieval", guard=False).fit(cone)  # the table alone
>>> round(auto.anisotropy_, 2) > 0.9, auto.choice_
(True, 'soft-whiten')
>>> unstable = AutoCalibrator(task_type="Retrieval", stability_floor=0.7, guard=False).fit(cone)
>>> unstable.choice_, "split-half stability" in unstable.reason_  # few sentences per direction
('remove-mean-dir', True)
>>> guarded = AutoCalibrator(task_type="Retrieval").fit(cone)  # a cone unlike any task of the boards
>>> guarded.choice_, "the most of the tasks this entry was fitted on" in guarded.reason_
('remove-mean-dir', True)
>>> AutoCalibrator(task_type="Classification").fit(rng.normal(size=(400, 16)).astype(np.float32)).choice_
'raw'
"""

from __future__ import annotations

import hashlib
import json
import numbers
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from flow_plugin.calibration import gentle, linear  # noqa: F401 (their classes enter CALIBRATOR_CLASSES)
from flow_plugin.calibration.base import Calibrator, calibrator_by_name
from flow_plugin.calibration.names import AUTO_CANDIDATES, AUTO_RULES, AUTO_STEP_DOWN
from flow_plugin.calibration.signals import anisotropy, measure
from flow_plugin.errors import InputError

#: MTEB task type -> the family whose rule :class:`AutoCalibrator` applies (any other type: "pairs")
FAMILIES: dict[str, str] = {
    "Retrieval": "ranking", "Reranking": "ranking", "InstructionRetrieval": "ranking",
    "InstructionReranking": "ranking",
    "Classification": "labels", "MultilabelClassification": "labels", "Clustering": "labels",
    "PairClassification": "pairs", "STS": "sts",
}
#: family -> (the calibrator for isotropic embeddings, the one for anisotropic embeddings)
RULES: dict[str, tuple[str, str]] = AUTO_RULES
#: the families whose entries ``benchmarks/auto_lodo.py`` fits on the task-types boards; "sts" is chosen on the STS
#: boards (STS12-16, STS-B, SICK-R: docs/results.md), which those boards do not hold
FITTED_FAMILIES = ("ranking", "pairs", "labels")
#: the anisotropy (mean cosine between two embeddings) from which embeddings count as anisotropic
DEFAULT_THRESHOLD = 0.26
#: the split-half neighbour stability of whitening (:mod:`.signals`) a whitening-like choice needs; below it, auto
#: steps down to a gentler calibrator (:data:`STEP_DOWN`)
DEFAULT_STABILITY_FLOOR = 0.0
CANDIDATES, STEP_DOWN = AUTO_CANDIDATES, AUTO_STEP_DOWN
#: the signal whose range bounds where a fitted whitening-like entry applies, and the side a task may not pass
#: (``"high"``: above the range's top; ``"low"``: below its bottom); ``benchmarks/auto_lodo.py`` chooses both by dataset
GUARD: tuple[str, str] | None = ("whitening_change", "high")
#: how far past its range a task's GUARD signal must lie for the guard to step in: a task at the range's edge (one the
#: entry was fitted on) keeps its choice on every machine. Measured 2026-11-29 on AMD EPYC (AVX512-BF16), 2 cores:
#: ``whitening_change`` of minilm-l6-layer1's ranking and pair tasks moved by at most 0.0010 between float32 and bf16
#: embeddings, and not at all between 1 and 2 threads (layer 0: not at all); the margin is ten times that.
GUARD_MARGIN = 0.01
#: family -> the GUARD signal's (lowest, highest) value over the boards' tasks each entry was fitted on, per regime
#: (isotropic, anisotropic); ``None``: no task. The "sts" entry is fitted elsewhere and has no range.
SUPPORT: dict[str, tuple[tuple[float, float] | None, tuple[float, float] | None]] = {
    "ranking": ((0.4852, 0.6604), (0.2778, 0.4624)),
    "pairs": ((0.493, 0.631), (0.2896, 0.4888)),
    "labels": ((0.3438, 0.6542), (0.134, 0.5386)),
}


@dataclass(frozen=True)
class Rule:
    """What auto chooses for a task of a family, from the label-free signals of its fit embeddings: the table's
    entry for the family and the embeddings' anisotropy, stepped down (:data:`STEP_DOWN`) while the choice is
    whitening-like and either whitening's split-half stability is below ``stability_floor`` or the ``guard`` signal
    lies outside ``support``, the range it spanned on the tasks the entry was fitted on (the entry's evidence does
    not reach that far)."""

    threshold: float = DEFAULT_THRESHOLD
    stability_floor: float = DEFAULT_STABILITY_FLOOR
    choices: Mapping[str, tuple[str, str]] = field(default_factory=lambda: dict(RULES))
    guard: tuple[str, str] | None = GUARD
    support: Mapping[str, tuple[tuple[float, float] | None, tuple[float, float] | None]] = field(
        default_factory=lambda: dict(SUPPORT))

    def decide(self, family: str, signals: Mapping[str, float]) -> tuple[str, str]:
        """(the calibrator, why in one clause) for a task of ``family`` whose signals are ``signals``."""
        anisotropic = signals["anisotropy"] >= self.threshold
        choice = self.choices[family][int(anisotropic)]
        why = f"anisotropy {signals['anisotropy']:.3f} {'>=' if anisotropic else '<'} {self.threshold}"
        stability = signals.get("whitening_stability", 1.0)
        unstable = f"whitening's split-half stability {stability:.2f} < {self.stability_floor}"
        for clause in (unstable if stability < self.stability_floor else "",
                       self.beyond_support(family, int(anisotropic), signals)):
            if clause and choice in STEP_DOWN:
                while choice in STEP_DOWN:
                    choice = STEP_DOWN[choice]
                why += f", {clause}: {choice}"
        return choice, why

    def beyond_support(self, family: str, regime: int, signals: Mapping[str, float]) -> str:
        """Where the guard signal lies past the range of the entry's tasks by more than :data:`GUARD_MARGIN`, in one
        clause ("": not that far, or no guard, range or signal)."""
        bounds = self.support.get(family, (None, None))[regime]
        if self.guard is None or bounds is None or self.guard[0] not in signals:
            return ""
        name, side = self.guard
        value, (low, high) = signals[name], bounds
        if side == "high" and value > high + GUARD_MARGIN:
            return f"{name} {value:.3f} above {high}, the most of the tasks this entry was fitted on"
        if side == "low" and value < low - GUARD_MARGIN:
            return f"{name} {value:.3f} below {low}, the least of the tasks this entry was fitted on"
        return ""


#: fewest distinct sentences whose embeddings ``auto`` measures: with fewer it keeps the raw embeddings, and says so
MIN_MEASURED_SENTENCES = 32


class AutoCalibrator(Calibrator, method="auto"):
    """Chooses and fits a calibrator per task: by the task's family and its embeddings' anisotropy (module doc).

    Parameters
    ----------
    task_type:
        MTEB's type of the task the calibrator is fitted for (``"Retrieval"``, ``"Classification"`` ...); a
        calibrated model sets it per task. ``None``: unknown (the "pairs" rule).
    threshold:
        The anisotropy from which the embeddings count as anisotropic (default :data:`DEFAULT_THRESHOLD`).
    stability_floor:
        Whitening's split-half stability a whitening-like choice needs (default :data:`DEFAULT_STABILITY_FLOOR`,
        off); below it, auto steps down to a gentler calibrator.
    guard:
        Step a whitening-like choice down where the :data:`GUARD` signal lies past the range it spanned on the tasks
        the table's entry was fitted on (:data:`SUPPORT`); ``False``: the table alone.

    Attributes
    ----------
    anisotropy_ : float
        The mean cosine between two fit embeddings.
    family_ : str
        ``"ranking"``, ``"pairs"`` or ``"labels"``.
    choice_ : str
        The calibrator chosen (a calibrator name: ``"whiten"``, ``"center"``, ``"sn"`` ...).
    reason_ : str
        Why, in one sentence (the fit record and the run's log line show it).
    calibrator_ : Calibrator
        The chosen calibrator, fitted on the same embeddings.
    """

    EFFECTIVE_ATTRIBUTES: ClassVar[tuple[str, ...]] = ("choice_", "anisotropy_", "family_", "reason_", "signals_")

    def __init__(self, task_type: str | None = None, threshold: float = DEFAULT_THRESHOLD,
                 stability_floor: float = DEFAULT_STABILITY_FLOOR, guard: bool = True) -> None:
        self.task_type = task_type
        self.threshold = threshold
        self.stability_floor = stability_floor
        self.guard = guard

    def min_samples(self, n_features: int) -> int:
        return 2

    def _check_params(self, n_features: int) -> None:
        for name in ("threshold", "stability_floor"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or not -1.0 <= value <= 1.0:
                raise InputError(f"AutoCalibrator {name} must be a number in [-1, 1], got {value!r}")
        if not isinstance(self.guard, bool):
            raise InputError(f"AutoCalibrator guard must be True or False, got {self.guard!r}")
        if self.task_type is not None and not isinstance(self.task_type, str):
            raise InputError(f"AutoCalibrator task_type must be an MTEB task type name or None, got {self.task_type!r}")

    def _adapt_to_sample(self, n_distinct: int, n_features: int) -> str | None:
        self.measured_ = n_distinct >= MIN_MEASURED_SENTENCES
        if self.measured_:
            return None
        return (f"{n_distinct} distinct sentence(s) are too few to measure their embeddings (at least "
                f"{MIN_MEASURED_SENTENCES}): raw embeddings kept; fit on more text to let auto choose")

    def _fit(self, X: np.ndarray) -> None:
        self.family_ = FAMILIES.get(self.task_type or "", "pairs")
        if not getattr(self, "measured_", True):
            self.anisotropy_, self.signals_, self.choice_ = round(anisotropy(X), 6), {}, "raw"
            self.reason_ = (f"auto kept raw: {X.shape[0]} sentences are too few to measure (at least "
                            f"{MIN_MEASURED_SENTENCES} distinct)")
        else:
            self.signals_ = measure(X).as_dict()
            self.anisotropy_ = self.signals_["anisotropy"]
            rule = Rule(self.threshold, self.stability_floor, guard=GUARD if self.guard else None)
            self.choice_, why = rule.decide(self.family_, self.signals_)
            self.reason_ = f"auto chose {self.choice_}: {self.task_type or 'no task type'} ({self.family_}), {why}"
        self.calibrator_ = _make(self.choice_).fit(X)

    def _transform(self, X: np.ndarray) -> np.ndarray:
        return self.calibrator_.transform(X)

    def _inverse_transform(self, Z: np.ndarray) -> np.ndarray:
        return self.calibrator_.inverse_transform(Z)

    def output_width(self, n_features: int) -> int:
        return n_features

    def _get_state(self) -> dict[str, np.ndarray]:
        state = {f"chosen/{key}": value for key, value in self.calibrator_._get_state().items()}
        return {**state, "choice": np.array(self.choice_)}

    def _set_state(self, state: dict[str, np.ndarray]) -> None:
        self.choice_ = str(state["choice"])
        chosen = _make(self.choice_)
        chosen._set_state({key.removeprefix("chosen/"): value for key, value in state.items() if key != "choice"})
        chosen.n_features_in_ = getattr(self, "n_features_in_", None)
        self.calibrator_ = chosen

    def result_params(self) -> dict[str, Any]:
        """The hyper-parameters, plus what the rule reads (:data:`RULES`, :data:`GUARD`, :data:`SUPPORT`): a result of
        another rule is another result, filed apart from this one."""
        ranges = {family: [list(bounds) if bounds else None for bounds in pair] for family, pair in SUPPORT.items()}
        return {**super().result_params(), "rules": {family: list(pair) for family, pair in sorted(RULES.items())},
                "guarded_by": {"signal": list(GUARD) if GUARD else None, "margin": GUARD_MARGIN,
                               "support": dict(sorted(ranges.items()))}}

    def identity_params(self) -> dict[str, Any]:
        """``rule``: 12 hex digits of the threshold, the floor, :data:`RULES` and the guard, so that MTEB files a
        result of another rule apart from this one's and never reuses it."""
        rule = {key: value for key, value in self.result_params().items() if key != "task_type"}
        return {"rule": hashlib.sha256(json.dumps(rule, sort_keys=True).encode()).hexdigest()[:12]}

    def describe(self) -> dict[str, Any]:
        """The choice and the figure behind it, as the fit record keeps them."""
        return {"choice": self.choice_, "family": self.family_, "signals": self.signals_,
                "threshold": self.threshold, "stability_floor": self.stability_floor, "guard": self.guard,
                "task_type": self.task_type}


def _make(name: str) -> Calibrator:
    """An unfitted calibrator of :data:`RULES` by name (each is a linear or gentle one)."""
    calibrator = calibrator_by_name(name)
    assert calibrator is not None, name  # RULES names only classes loaded above
    return calibrator


__all__ = ["CANDIDATES", "DEFAULT_STABILITY_FLOOR", "DEFAULT_THRESHOLD", "FAMILIES", "FITTED_FAMILIES", "GUARD",
           "GUARD_MARGIN", "MIN_MEASURED_SENTENCES", "RULES", "STEP_DOWN", "SUPPORT", "AutoCalibrator", "Rule",
           "anisotropy"]
