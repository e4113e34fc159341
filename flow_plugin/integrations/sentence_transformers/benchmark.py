"""The leaderboard row an export came from, and the part of it its model card shows.

A leaderboard (``flow-plugin leaderboard`` / ``bench``) holds one row per model, revision and
experiment. The row of an export is the one of its model name at this configuration's revision
(:attr:`flow_plugin.catalog.registry.RegistryModel.revision`): a row of another revision was
computed with another registry configuration or procedure, so its scores are not this model's.

The board is the leaderboard's typed model (:class:`flow_plugin.leaderboard.models.Leaderboard`, what
``flow_plugin.leaderboard.load_leaderboard`` returns). This layer sits below the leaderboard and does
not import it: :class:`LeaderboardRow` names the fields of a row the export reads.

Examples
--------
>>> from types import SimpleNamespace as Record
>>> entry = Record(score=80.0, metric="cosine_spearman", protocol="all", wmean=None, hardware=None)
>>> row = Record(id="m@r1", model="flow_plugin/x-sn", revision="r1", experiment=None, fit_corpus="target",
...              scores={"T": entry}, n_tasks=1, average=80.0, average_wmean=None)
>>> board = Record(name="demo", rows=[row])
>>> benchmark_row(board, "flow_plugin/x-sn", revision="r1").id
'm@r1'
>>> benchmark_summary(row, board_name="demo")["scores"]
[{'task': 'T', 'score': 80.0, 'metric': 'cosine_spearman', 'protocol': 'all', 'wmean': None}]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from flow_plugin.catalog.registry import RegistryModel
from flow_plugin.catalog.builders import resolve
from flow_plugin.errors import LeaderboardError


class TaskScoreFields(Protocol):
    """What the model card shows of a task's score (:class:`flow_plugin.leaderboard.models.TaskScore`)."""

    @property
    def score(self) -> float: ...
    @property
    def metric(self) -> str | None: ...
    @property
    def protocol(self) -> str: ...
    @property
    def wmean(self) -> float | None: ...
    @property
    def hardware(self) -> dict[str, Any] | None: ...


class LeaderboardRow(Protocol):
    """What an export reads of a leaderboard row (:class:`flow_plugin.leaderboard.models.Row`)."""

    @property
    def id(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def revision(self) -> str: ...
    @property
    def experiment(self) -> str | None: ...
    @property
    def fit_corpus(self) -> str | None: ...
    @property
    def scores(self) -> Mapping[str, TaskScoreFields]: ...
    @property
    def n_tasks(self) -> int: ...
    @property
    def average(self) -> float | None: ...
    @property
    def average_wmean(self) -> float | None: ...


class LeaderboardRows(Protocol):
    """What :func:`benchmark_row` reads of a leaderboard (:class:`flow_plugin.leaderboard.models.Leaderboard`)."""

    @property
    def name(self) -> str: ...
    @property
    def rows(self) -> Sequence[LeaderboardRow]: ...


def benchmark_row(board: LeaderboardRows, model: str | RegistryModel, *, revision: str | None = None) -> LeaderboardRow:
    """The row of ``model`` (a registry model name) at ``revision`` (default: the model's current
    configuration) in a loaded leaderboard, its default experiment when there are several; errors
    name what the board holds and what to do."""
    if revision is None or not isinstance(model, str):
        registry_model = resolve(model)
        model, revision = registry_model.name, revision or registry_model.revision
    name = board.name
    rows = [row for row in board.rows if row.model == model]
    if not rows:
        known = sorted({row.model for row in board.rows})
        raise LeaderboardError(
            f"leaderboard {name!r} has no row for {model} (it has {', '.join(known) or 'no rows'}); "
            f"run `flow-plugin bench` for its backbone first, or leave out --leaderboard"
        )
    current = [row for row in rows if row.revision == revision]
    if not current:
        revisions = ", ".join(sorted({row.revision for row in rows}))
        raise LeaderboardError(
            f"leaderboard {name!r} holds {model} at revision {revisions}, not at this configuration's {revision}: "
            "its registry file or flow-plugin's procedure changed since; run `flow-plugin bench` again, or leave out "
            "--leaderboard"
        )
    default = [row for row in current if row.experiment is None]
    if len(default) == 1:
        return default[0]
    if len(current) == 1:
        return current[0]
    ids = ", ".join(row.id for row in current)
    raise LeaderboardError(f"leaderboard {name!r} holds several rows of {model} at {revision} ({ids}); "
                           "pass the row you mean (leaderboard_row=...)")


def check_row(row: LeaderboardRow, registry_model: RegistryModel) -> None:
    """A row given by hand must be the model's, at its configuration's revision."""
    if row.model != registry_model.name or row.revision != registry_model.revision:
        raise LeaderboardError(
            f"leaderboard row {row.id!r} is of {row.model} at revision {row.revision}, not of "
            f"{registry_model.name} at {registry_model.revision}; pass that model's row (benchmark_row(board, model))"
        )


def benchmark_summary(row: LeaderboardRow, *, board_name: str | None = None) -> dict[str, Any]:
    """What a model card shows of a leaderboard row: its id, fit corpus, average and each task's
    main score with its metric and protocol (points, as the leaderboard stores them)."""
    scores = [{"task": task, "score": entry.score, "metric": entry.metric, "protocol": entry.protocol,
               "wmean": entry.wmean} for task, entry in row.scores.items()]
    precisions = sorted({str(entry.hardware["precision"]) for entry in row.scores.values()
                         if entry.hardware and entry.hardware.get("precision")})
    return {
        "leaderboard": board_name,
        "row": row.id,
        "model": row.model,
        "revision": row.revision,
        "fit_corpus": row.fit_corpus,
        "n_tasks": row.n_tasks,
        "average": row.average,
        "average_wmean": row.average_wmean,
        "precision": ", ".join(precisions) or None,
        "scores": scores,
    }
