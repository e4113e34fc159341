"""A leaderboard row as an exported model's card shows it: the export (a layer below the leaderboard) takes a
:class:`~flow_plugin.integrations.sentence_transformers.card.BenchmarkScores`, which this module builds
from the row of the exported model (``flow-plugin export --leaderboard``).
"""

from __future__ import annotations

from flow_plugin.catalog.registry import RegistryModel, is_foreign_base, parse_model_name, spelled_model
from flow_plugin.errors import LeaderboardError
from flow_plugin.integrations.sentence_transformers.card import BenchmarkScores
from flow_plugin.leaderboard.models import Leaderboard, Row


def benchmark_row(board: Leaderboard, model: str | RegistryModel, *, revision: str | None = None) -> Row:
    """The row of ``model`` (a registry model name) at ``revision`` (default: the model's current
    configuration) in a loaded leaderboard, its default experiment when there are several; errors
    name what the board holds and what to do."""
    if isinstance(model, str) and is_foreign_base(spelled_model(model)[0]):  # a local folder or an MTEB name
        raise LeaderboardError(f"{model}: a model card takes the scores of a registry model's row, whose revision "
                               "ties them to its configuration; a local folder or an MTEB model has none here, so "
                               "leave out --leaderboard")
    if revision is None or not isinstance(model, str):
        registry_model = parse_model_name(model) if isinstance(model, str) else model
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
                           "pick the row you mean (benchmark_scores(board, model, row=...))")


def benchmark_scores(board: Leaderboard, model: str | RegistryModel, *, board_name: str | None = None,
                     revision: str | None = None, row: Row | None = None) -> BenchmarkScores:
    """What the model card of ``model``'s export shows of its row in ``board`` (:func:`benchmark_row`, or
    ``row``): its id, fit corpus, averages, each task's main score with its metric and protocol, and the
    precision the scores were computed in. ``board_name`` names the board in the card (e.g. its file)."""
    row = row if row is not None else benchmark_row(board, model, revision=revision)
    scores = tuple({"task": task, "score": entry.score, "metric": entry.metric, "protocol": entry.protocol,
                    "wmean": entry.wmean} for task, entry in row.scores.items())
    precisions = sorted({str(entry.hardware["precision"]) for entry in row.scores.values()
                         if entry.hardware and entry.hardware.get("precision")})
    return BenchmarkScores(leaderboard=board_name, row=row.id, model=row.model, revision=row.revision,
                           fit_corpus=row.fit_corpus, n_tasks=row.n_tasks, average=row.average,
                           average_wmean=row.average_wmean, precision=", ".join(precisions) or None, scores=scores)
