"""The task-type cautions: their claims agree with every published task-types board, and a model
says so, once per task type, when MTEB gives it a task of a type its calibrator lowered.

The claims (flow_plugin/catalog/task_type_effects.toml) are recomputed here from
leaderboards/task-types-*.json: a calibrator "hurts" a type where the paired bootstrap 95%
interval of its delta against raw lies wholly below zero on every board that measured it.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import mteb
import pytest
from mteb.mocks import MOCK_TASK_TEST_GRID_MONOLINGUAL
from mteb.mocks.mock_tasks import MockClassificationTask, MockSTSTask

from flow_plugin.catalog.registry import RegistryModel
from flow_plugin.catalog.task_type_effects import caution, task_type_effects
from flow_plugin.integrations.mteb.base_models import registry_model
from flow_plugin.integrations.mteb.calibrated import CalibratedModel

LEADERBOARDS = Path(__file__).resolve().parents[1] / "leaderboards"
#: a text clustering task of MTEB's mock grid (its class name differs across mteb releases)
CLUSTERING = next(type(task) for task in MOCK_TASK_TEST_GRID_MONOLINGUAL
                  if task.metadata.type == "Clustering" and list(task.metadata.modalities) == ["text"])


def _boards() -> dict[str, dict]:
    return {board["backbone"]: board for board in
            (json.loads(path.read_text(encoding="utf-8")) for path in sorted(LEADERBOARDS.glob("task-types-*.json")))}


def test_claims_are_what_every_published_board_measured() -> None:
    boards = _boards()
    effects = task_type_effects()
    measured_on = {}
    for backbone, board in boards.items():
        for row in board["rows"]:
            if row["calibrator"] != "raw":
                measured_on.setdefault(row["calibrator"], set()).add(backbone)
    assert {name: set(on) for name, on in effects.measured_on.items()} == measured_on
    assert set().union(*measured_on.values()) == set(boards), "the claims must cover exactly the published boards"
    types = {task_type for board in boards.values() for task_type in board["types"]}
    for task_type in sorted(types):
        verdicts: dict[str, list[bool]] = {}  # calibrator -> hurt or not, on each board that measured it
        for board in boards.values():
            for row in board["rows"]:
                if row["calibrator"] != "raw" and task_type in (row["delta"] or {}):
                    verdicts.setdefault(row["calibrator"], []).append(row["delta"][task_type]["ci95"][1] < 0)
        assert set(effects.hurts.get(task_type, ())) == {name for name, hurt in verdicts.items() if all(hurt)}, task_type


def test_caution_names_the_boards_that_measured_the_calibrator() -> None:
    effects = task_type_effects()
    message = caution("flow_plugin/minilm-l6-flow-lu", "flow-lu", "Clustering")
    assert message is not None and f"that measured it ({', '.join(effects.measured_on['flow-lu'])};" in message
    assert caution("flow_plugin/minilm-l6", "raw", "Clustering") is None
    # a variant no board ran is cautioned where its method was, and the sentence says so
    unmeasured = effects.model_copy(update={"measured_on": {key: value for key, value in effects.measured_on.items()
                                                            if key != "flow-lu"}})
    message = caution("flow_plugin/minilm-l6-flow-lu", "flow-lu", "Clustering", unmeasured)
    assert message is not None and "flow (flow-lu is a variant of it that no board measured)" in message


def _cautions(model: CalibratedModel, task) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mteb.evaluate(model, task, cache=None, co2_tracker=False, show_progress_bar=False)
    return [str(warning.message) for warning in caught if "task-types board" in str(warning.message)]


def test_a_model_cautions_once_per_hurt_task_type(tiny_spec) -> None:
    flow = registry_model(RegistryModel(tiny_spec, "flow"))
    first = _cautions(flow, MockClassificationTask())
    assert len(first) == 1 and "flow lowered MTEB Classification scores" in first[0], first
    assert "docs/results.md" in first[0]
    assert _cautions(flow, MockClassificationTask()) == []  # once per type and model
    assert [message.split(" lowered ")[1].split(" scores")[0]
            for message in _cautions(flow, CLUSTERING())] == ["MTEB Clustering"]
    assert _cautions(flow, MockSTSTask()) == []  # STS: what calibration is for
    sn = registry_model(RegistryModel(tiny_spec, "sn"))
    assert _cautions(sn, MockClassificationTask()) == []  # SN lowered no type on every board


@pytest.mark.parametrize("task_type", ["Reranking", "Retrieval"])
def test_no_caution_where_calibration_helped_somewhere(task_type: str) -> None:
    assert all(caution("flow_plugin/x-" + name, name, task_type) is None
               for name in ("sn", "natsv", "sn-natsv", "whiten", "flow", "flow-ens"))
