"""Seeds, duplicate policy and an external fit corpus through ``flow-plugin bench``: each is its own
set of results, and the leaderboard shows seeded calibrators as mean ± standard deviation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flow_plugin.cli.bench import run_bench
from flow_plugin.cli.leaderboard import update_leaderboard
from flow_plugin.encoding.cache import clear_shared_encoders

TASK = "SentEvalSTS16"


@pytest.fixture(scope="module")
def seeded(senteval_dir: Path, minilm_path: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    clear_shared_encoders()
    out = tmp_path_factory.mktemp("seeds")
    board = out / "board.json"
    report = run_bench("minilm-l6", senteval_dir, output_folder=out, leaderboard=board, tasks=[TASK],
                       calibrators=["raw", "whiten", "flow"], seeds=3, progress=lambda line: None)
    unique = run_bench("minilm-l6", senteval_dir, output_folder=out, leaderboard=None, tasks=[TASK],
                       calibrators=["whiten"], fit_duplicates="unique", progress=lambda line: None)
    return {"out": out, "board": board, "report": report, "unique": unique}


def test_a_seeded_calibrator_runs_once_per_seed_and_the_others_once(seeded: dict) -> None:
    report = seeded["report"]
    assert [(o.model.split("/")[-1], o.seed) for o in report.outcomes] == [
        ("minilm-l6", None), ("minilm-l6-whiten", None),
        ("minilm-l6-flow", 1234), ("minilm-l6-flow", 1235), ("minilm-l6-flow", 1236),
    ]
    flow_scores = [o.score for o in report.outcomes if o.seed is not None]
    assert len(set(flow_scores)) == 3  # three different fits
    assert all(o.status == "computed" for o in report.outcomes)


def test_the_leaderboard_shows_mean_and_spread_over_seeds(seeded: dict) -> None:
    board = json.loads(seeded["board"].read_text(encoding="utf-8"))
    (group,) = board["seed_groups"]
    assert group["seeds"] == [1234, 1235, 1236] and group["calibrator"] == "flow" and len(group["rows"]) == 3
    by_id = {row["id"]: row for row in board["rows"]}
    scores = [by_id[row_id]["scores"][TASK]["score"] for row_id in group["rows"]]  # in seed order
    stats = group["scores"][TASK]
    assert stats["values"] == scores and stats["n"] == 3
    assert stats["mean"] == pytest.approx(sum(scores) / 3, abs=1e-4)
    mean = sum(scores) / 3
    assert stats["std"] == pytest.approx((sum((s - mean) ** 2 for s in scores) / 2) ** 0.5, abs=1e-4) and stats["std"] > 0
    delta = group["delta"][TASK]
    assert delta["significant"] == (abs(delta["mean"]) > delta["std"])
    markdown = seeded["board"].with_suffix(".md").read_text(encoding="utf-8")
    assert "| minilm-l6 | flow | last-avg | target | keep | 3 seeds |" in markdown  # one row for the group
    assert f"{stats['mean']:.2f} ± {stats['std']:.2f}" in markdown
    assert "A difference counts only when it exceeds that spread" in markdown
    # --seeds 2 in the leaderboard: the first two seeds only
    again = update_leaderboard([seeded["out"]], seeded["out"] / "two.json", seeds=2).board
    assert again["seed_groups"][0]["seeds"] == [1234, 1235]


def test_the_duplicate_policy_is_its_own_result_and_says_so(seeded: dict) -> None:
    (kept,) = [o for o in seeded["report"].outcomes if o.model.endswith("-whiten")]
    (unique,) = seeded["unique"].outcomes
    assert unique.status == "computed" and unique.score != kept.score  # another fit, filed apart
    assert "experiments" in unique.path.parts
    board = update_leaderboard([seeded["out"]], seeded["out"] / "dups.json").board
    fit_corpora = {row["fit_corpus"] for row in board["rows"] if row["calibrator"] == "whiten"}
    assert fit_corpora == {"target", "target, unique sentences"}
