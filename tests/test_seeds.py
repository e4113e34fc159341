"""Seeds, duplicate policy and an external fit corpus through ``flow-plugin bench``: each is its own
set of results, and the leaderboard shows seeded calibrators as mean ± standard deviation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flow_plugin.studies.bench import run_bench
from flow_plugin.leaderboard import update_leaderboard
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


@pytest.mark.slow
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
    assert "significant" not in delta  # the spread decides nothing: only an interval does
    markdown = seeded["board"].with_suffix(".md").read_text(encoding="utf-8")
    # one row for the group; the precision "auto" resolved to on this machine is part of what produced it
    precision = by_id[group["rows"][0]]["experiment_kwargs"]["precision"]
    assert precision in ("float32", "bf16")
    assert f"| minilm-l6 | flow | last-avg | target | keep | precision={precision}, 3 seeds |" in markdown
    assert f"{stats['mean']:.2f} ± {stats['std']:.2f}" in markdown
    assert "only those count as differences" in markdown


def test_every_delta_carries_a_confidence_interval_and_only_it_marks_significance(seeded: dict) -> None:
    board = json.loads(seeded["board"].read_text(encoding="utf-8"))
    (group,) = board["seed_groups"]
    by_id = {row["id"]: row for row in board["rows"]}
    (whiten,) = [row for row in board["rows"] if row["calibrator"] == "whiten" and row["fit_corpus"] == "target"]
    assert board["interval_method"]["n_resamples"] == 1000 and board["interval_method"]["confidence"] == 0.95
    for protocol in ("all", "wmean"):
        raw = group["intervals"][protocol]["raw"]
        assert raw["against"] == group["baseline"]
        linear = group["intervals"][protocol]["linear"]
        assert linear["against"] == whiten["id"] and linear["calibrator"] == "whiten"  # the only linear baseline
        field = "score" if protocol == "all" else "wmean"
        members = [by_id[row_id]["scores"][TASK][field] for row_id in group["rows"]]
        # the interval's estimate is the reported delta: the seeds' mean minus the reference (4-decimal rounding)
        assert raw["delta"][TASK] == pytest.approx(sum(members) / 3 - by_id[group["baseline"]]["scores"][TASK][field],
                                                   abs=2e-4)
        assert linear["delta"][TASK] == pytest.approx(sum(members) / 3 - whiten["scores"][TASK][field], abs=2e-4)
        for compared in (raw, linear):
            low, high = compared["ci95"][TASK]
            assert low < compared["delta"][TASK] < high
            assert compared["significant"][TASK] == (low > 0 or high < 0)
    # the whitening row (no seeds) is compared with raw; the best linear baseline is not compared with itself
    assert set(whiten["intervals"]["all"]) == {"raw"}
    markdown = seeded["board"].with_suffix(".md").read_text(encoding="utf-8")
    raw = group["intervals"]["all"]["raw"]
    cell = f"[{raw['ci95'][TASK][0]:+.2f}, {raw['ci95'][TASK][1]:+.2f}]" + ("*" if raw["significant"][TASK] else "")
    assert cell in markdown
    assert "## Δ against the best linear baseline (all)" in markdown and "Computed by an older procedure" not in markdown


def test_a_board_without_per_pair_cosines_is_flagged_as_older(seeded: dict, tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "out"
    shutil.copytree(seeded["out"], copy)
    for folder in copy.rglob("flow-plugin-pairs"):
        shutil.rmtree(folder)
    update = update_leaderboard([copy], tmp_path / "old.json")
    assert update.report.intervals == 0 and len(update.report.no_pairs) == 6  # 3 flow, whiten, raw, unique whiten
    assert update.board.interval_method is None and update.board.seed_groups[0].intervals is None
    written = json.loads((tmp_path / "old.json").read_text(encoding="utf-8"))
    assert "interval_method" not in written and "intervals" not in written["seed_groups"][0]
    markdown = (tmp_path / "old.md").read_text(encoding="utf-8")
    assert "**Computed by an older procedure:** 3 of 3 calibrated rows have no confidence intervals" in markdown
    assert "]*" not in markdown  # no significance without an interval
    # --seeds 2 in the leaderboard: the first two seeds only
    again = update_leaderboard([seeded["out"]], seeded["out"] / "two.json", seeds=2).board
    assert again.seed_groups[0].seeds == [1234, 1235]


def test_a_bench_of_some_calibrators_gets_intervals_against_references_already_on_the_board(seeded: dict,
                                                                                          tmp_path: Path) -> None:
    """``bench --calibrators flow`` on a board that has raw and whitening used to merge only the flow's
    files, so the references' per-pair cosines were never read and the new rows got no interval."""
    board = tmp_path / "board.json"
    update_leaderboard([seeded["out"]], board, models=["flow_plugin/minilm-l6", "flow_plugin/minilm-l6-whiten"])
    update = update_leaderboard([seeded["out"]], board, models=["flow_plugin/minilm-l6-flow"])
    (group,) = update.board.seed_groups
    assert update.report.intervals >= 1 and set(group.intervals["all"]) == {"raw", "linear"}
    full = json.loads(seeded["board"].read_text(encoding="utf-8"))["seed_groups"][0]["intervals"]
    assert group.model_dump(mode="json")["intervals"] == full  # the same intervals as a bench of all three at once


def test_a_merge_that_can_recompute_only_some_comparisons_keeps_the_others(seeded: dict, tmp_path: Path) -> None:
    """Re-merging a flow's results from a folder without the linear baseline's per-pair cosines (the
    baseline was run on another machine) recomputes the interval against raw and used to drop the one
    against the linear baseline; it is kept, since its reference and its deltas are unchanged."""
    import shutil

    board = tmp_path / "board.json"
    copy = tmp_path / "out"
    shutil.copytree(seeded["out"], copy)
    update_leaderboard([copy], board, models=["flow_plugin/minilm-l6", "flow_plugin/minilm-l6-whiten",
                                              "flow_plugin/minilm-l6-flow"])
    before = json.loads(board.read_text(encoding="utf-8"))["seed_groups"][0]["intervals"]
    # the baseline's per-pair cosines are gone from every folder merged (as if it ran on another machine)
    for folder in copy.rglob("flow-plugin-pairs"):
        if "calibrator_whiten" in str(folder):  # the whitening's experiment folder
            shutil.rmtree(folder)
    update = update_leaderboard([copy], board, models=["flow_plugin/minilm-l6", "flow_plugin/minilm-l6-flow"])
    assert update.report.intervals == 1  # the flow's group, against raw
    after = json.loads(board.read_text(encoding="utf-8"))["seed_groups"][0]["intervals"]
    assert after == before and set(after["all"]) == {"raw", "linear"}
    # the kept comparison is dropped once the reference's scores no longer match it
    data = json.loads(board.read_text(encoding="utf-8"))
    (whiten,) = [row for row in data["rows"] if row["calibrator"] == "whiten" and row["fit_corpus"] == "target"]
    whiten["scores"][TASK]["score"] += 0.5
    board.write_text(json.dumps(data), encoding="utf-8")
    update = update_leaderboard([copy], board, models=["flow_plugin/minilm-l6", "flow_plugin/minilm-l6-flow"])
    assert set(update.board.seed_groups[0].intervals["all"]) == {"raw"}


def test_a_row_fitted_on_unique_sentences_is_compared_with_the_same_raw_backbone(seeded: dict, tmp_path: Path) -> None:
    """The duplicate policy is a fit setting: it used to split the rows from their raw backbone, so a
    unique-sentence row had no delta against raw, and the best linear one no interval at all."""
    board = update_leaderboard([seeded["out"]], tmp_path / "board.json").board
    (raw,) = [row for row in board.rows if row.calibrator == "raw"]
    (unique,) = [row for row in board.rows if row.experiment_kwargs.get("fit_duplicates") == "unique"]
    assert unique.baseline == raw.id and unique.intervals["all"]["raw"].against == raw.id
    assert unique.delta[TASK] == pytest.approx(unique.scores[TASK].score - raw.scores[TASK].score, abs=2e-4)


def test_the_duplicate_policy_is_its_own_result_and_says_so(seeded: dict) -> None:
    (kept,) = [o for o in seeded["report"].outcomes if o.model.endswith("-whiten")]
    (unique,) = seeded["unique"].outcomes
    assert unique.status == "computed" and unique.score != kept.score  # another fit, filed apart
    assert "experiments" in unique.path.parts
    board = update_leaderboard([seeded["out"]], seeded["out"] / "dups.json").board
    fit_corpora = {row.fit_corpus for row in board.rows if row.calibrator == "whiten"}
    assert fit_corpora == {"target", "target, unique sentences"}
