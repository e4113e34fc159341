"""The benchmark scores an export's model card shows: :class:`BenchmarkScores`, what the export needs to
know of the leaderboard row its model came from.

The leaderboard (a layer above this one) finds the row and builds this record from it
(:func:`flow_plugin.leaderboard.render.card.benchmark_scores`); the export only checks that the record is of
the model it writes (:func:`check_benchmark`) and puts it in the card. The row of an export is the one of
its model name at this configuration's revision (:attr:`flow_plugin.catalog.registry.RegistryModel.revision`):
a row of another revision was computed with another registry configuration or procedure, so its scores are
not this model's.

Examples
--------
>>> scores = BenchmarkScores(leaderboard="demo.json", row="m@r1", model="flow_plugin/x-sn", revision="r1",
...                          fit_corpus="target", n_tasks=1, average=80.0, average_wmean=None, precision=None,
...                          scores=({"task": "T", "score": 80.0, "metric": "cosine_spearman", "protocol": "all",
...                                   "wmean": None},))
>>> scores.as_dict()["scores"][0]["task"], scores.as_dict()["row"]
('T', 'm@r1')
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from flow_plugin.errors import LeaderboardError


@dataclass(frozen=True)
class BenchmarkScores:
    """A leaderboard row as a model card shows it: its id, fit corpus, averages and each task's main score
    with its metric and protocol (points, as the leaderboard stores them), and the precision it ran in."""

    leaderboard: str | None
    row: str
    model: str
    revision: str
    fit_corpus: str | None
    n_tasks: int
    average: float | None
    average_wmean: float | None
    precision: str | None
    #: per task: {"task", "score", "metric", "protocol", "wmean"}
    scores: tuple[dict[str, Any], ...]

    def as_dict(self) -> dict[str, Any]:
        """The record the export writes (its ``benchmark`` field)."""
        return {**dataclasses.asdict(self), "scores": [dict(score) for score in self.scores]}


def check_benchmark(benchmark: BenchmarkScores, model: str, revision: str | None) -> None:
    """Scores given to an export must be its model's, at its configuration's revision (a local folder has none)."""
    if benchmark.model != model or (revision is not None and benchmark.revision != revision):
        at = f" at {revision}" if revision is not None else ""
        raise LeaderboardError(
            f"leaderboard row {benchmark.row!r} is of {benchmark.model} at revision {benchmark.revision}, not of "
            f"{model}{at}; pass that model's row (flow_plugin.leaderboard.benchmark_scores(board, model))"
        )
