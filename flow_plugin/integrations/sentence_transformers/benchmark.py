"""The leaderboard row an export came from, and the part of it its model card shows.

A leaderboard (``flow-plugin leaderboard`` / ``bench``) holds one row per model, revision and
experiment. The row of an export is the one of its model name at this configuration's revision
(:attr:`flow_plugin.catalog.registry.RegistryModel.revision`): a row of another revision was
computed with another registry configuration or procedure, so its scores are not this model's.

Examples
--------
>>> board = {"name": "demo", "rows": [{"id": "m@r1", "model": "flow_plugin/x-sn", "revision": "r1", "experiment": None,
...          "fit_corpus": "target", "scores": {"T": {"score": 80.0, "metric": "cosine_spearman", "protocol": "all"}},
...          "average": 80.0, "n_tasks": 1}]}
>>> benchmark_row(board, "flow_plugin/x-sn", revision="r1")["id"]
'm@r1'
>>> benchmark_summary(board["rows"][0], board_name="demo")["scores"]
[{'task': 'T', 'score': 80.0, 'metric': 'cosine_spearman', 'protocol': 'all', 'wmean': None}]
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flow_plugin.catalog.registry import RegistryModel
from flow_plugin.catalog.builders import resolve
from flow_plugin.errors import LeaderboardError


def benchmark_row(board: Mapping[str, Any], model: str | RegistryModel, *, revision: str | None = None) -> dict[str, Any]:
    """The row of ``model`` (a registry model name) at ``revision`` (default: the model's current
    configuration) in a loaded leaderboard, its default experiment when there are several; errors
    name what the board holds and what to do."""
    if revision is None or not isinstance(model, str):
        registry_model = resolve(model)
        model, revision = registry_model.name, revision or registry_model.revision
    name = board.get("name", "the leaderboard")
    rows = [row for row in board.get("rows", []) if row.get("model") == model]
    if not rows:
        known = sorted({str(row.get("model")) for row in board.get("rows", [])})
        raise LeaderboardError(
            f"leaderboard {name!r} has no row for {model} (it has {', '.join(known) or 'no rows'}); "
            f"run `flow-plugin bench` for its backbone first, or leave out --leaderboard"
        )
    current = [row for row in rows if row.get("revision") == revision]
    if not current:
        revisions = ", ".join(sorted({str(row.get("revision")) for row in rows}))
        raise LeaderboardError(
            f"leaderboard {name!r} holds {model} at revision {revisions}, not at this configuration's {revision}: "
            "its registry file or flow-plugin's procedure changed since; run `flow-plugin bench` again, or leave out "
            "--leaderboard"
        )
    default = [row for row in current if row.get("experiment") is None]
    if len(default) == 1:
        return dict(default[0])
    if len(current) == 1:
        return dict(current[0])
    ids = ", ".join(str(row.get("id")) for row in current)
    raise LeaderboardError(f"leaderboard {name!r} holds several rows of {model} at {revision} ({ids}); "
                           "pass the row you mean (leaderboard_row=...)")


def check_row(row: Mapping[str, Any], registry_model: RegistryModel) -> None:
    """A row given by hand must be the model's, at its configuration's revision."""
    if row.get("model") != registry_model.name or row.get("revision") != registry_model.revision:
        raise LeaderboardError(
            f"leaderboard row {row.get('id')!r} is of {row.get('model')} at revision {row.get('revision')}, not of "
            f"{registry_model.name} at {registry_model.revision}; pass that model's row (benchmark_row(board, model))"
        )


def benchmark_summary(row: Mapping[str, Any], *, board_name: str | None = None) -> dict[str, Any]:
    """What a model card shows of a leaderboard row: its id, fit corpus, average and each task's
    main score with its metric and protocol (points, as the leaderboard stores them)."""
    scores = []
    for task, entry in row.get("scores", {}).items():
        scores.append({"task": task, "score": entry.get("score"), "metric": entry.get("metric"),
                       "protocol": entry.get("protocol"), "wmean": entry.get("wmean")})
    precisions = sorted({str(entry.get("hardware", {}).get("precision")) for entry in row.get("scores", {}).values()
                         if isinstance(entry.get("hardware"), dict) and entry["hardware"].get("precision")})
    return {
        "leaderboard": board_name,
        "row": row.get("id"),
        "model": row.get("model"),
        "revision": row.get("revision"),
        "fit_corpus": row.get("fit_corpus"),
        "n_tasks": row.get("n_tasks", len(scores)),
        "average": row.get("average"),
        "average_wmean": row.get("average_wmean"),
        "precision": ", ".join(precisions) or None,
        "scores": scores,
    }
