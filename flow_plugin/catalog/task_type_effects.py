"""Which calibrators lowered which MTEB task types, on every published task-types board that measured them.

The claims live in ``task_type_effects.toml`` next to this module: which boards measured each
calibrator (a board need not run every one), and for each task type the calibrator names whose delta
against the raw embeddings had a 95% interval wholly below zero on each of those boards.
tests/test_task_type_effects.py recomputes them from ``leaderboards/task-types-*.json`` and fails
when they disagree.

A model of such a calibrator warns when MTEB first gives it a task of that type
(:func:`caution`); the calibration itself is unchanged: the user decides.

Examples
--------
>>> "flow" in task_type_effects().hurts["Clustering"]
True
>>> caution("flow_plugin/minilm-l6-sn", "sn", "Clustering") is None
True
>>> caution("flow_plugin/minilm-l6-flow", "flow", "STS") is None
True
"""

from __future__ import annotations

import functools
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from flow_plugin._io import read_toml
from flow_plugin.calibration.names import CALIBRATOR_LABELS, CALIBRATOR_NAMES, calibrator_method
from flow_plugin.errors import RegistryError

EFFECTS_FILE = Path(__file__).with_name("task_type_effects.toml")


class TaskTypeEffects(BaseModel):
    """The claims of ``task_type_effects.toml``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: where a user reads the numbers
    evidence: str
    #: calibrator name -> the backbones whose boards measured it (together: every published board)
    measured_on: dict[str, tuple[str, ...]]
    #: task type -> the calibrator names that lowered it on every board that measured them
    hurts: dict[str, tuple[str, ...]]


@functools.cache
def task_type_effects() -> TaskTypeEffects:
    """The claims of ``task_type_effects.toml`` (read once)."""
    table = read_toml(EFFECTS_FILE, "task-type effects file", RegistryError)
    try:
        effects = TaskTypeEffects.model_validate(table)
    except ValidationError as error:
        raise RegistryError(f"{EFFECTS_FILE}: {error}") from None
    unknown = sorted(({name for names in effects.hurts.values() for name in names} | set(effects.measured_on))
                     - set(CALIBRATOR_NAMES))
    if unknown:
        raise RegistryError(f"{EFFECTS_FILE}: unknown calibrator names {unknown}; known: {', '.join(CALIBRATOR_NAMES)}")
    return effects


def caution(model_name: str, calibrator: str, task_type: str, effects: TaskTypeEffects | None = None) -> str | None:
    """The one-line caution a model of ``calibrator`` gives on a task of ``task_type``, or ``None``
    (``effects``: the claims, by default :func:`task_type_effects`').

    A calibrator no board measured (a new flow variant, ...) is cautioned where its method was, and the
    sentence says it was the method that was measured.
    """
    effects = effects or task_type_effects()
    measured = calibrator if calibrator in effects.measured_on else calibrator_method(calibrator)
    if measured == "raw" or measured not in effects.hurts.get(task_type, ()):
        return None
    label = CALIBRATOR_LABELS.get(measured, measured)
    variant = "" if measured == calibrator else f" ({calibrator} is a variant of it that no board measured)"
    return (f"{model_name}: {label}{variant} lowered MTEB {task_type} scores against the raw embeddings on every "
            f"task-types board that measured it ({', '.join(effects.measured_on[measured])}; 95% intervals below "
            f"zero): see {effects.evidence}")
