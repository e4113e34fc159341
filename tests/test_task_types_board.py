"""The task-types board: the bootstrap recomputes each type's main score as MTEB does (checked against
scikit-learn on resampled items), the compare stage's Δ and intervals, the files written, and the published
boards (every Δ inside its interval)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import average_precision_score, v_measure_score

from flow_plugin.errors import LeaderboardError
from flow_plugin.results.items import ItemScores, main_score_of
from flow_plugin.leaderboard.compare_types import board_problems, compare_task_types, n_items, resampled_scores
from flow_plugin.leaderboard.ingest.task_items import TaskResult
from flow_plugin.leaderboard.models import TaskTypesBoard
from flow_plugin.leaderboard.write import write_index, write_task_types_board

REPO = Path(__file__).resolve().parents[1]


def _meta(task: str, kind: str, main_score: str) -> dict:
    return {"task": task, "type": kind, "main_score": main_score}


def _pair_items(rng: np.random.Generator, n: int = 300, signal: float = 1.0) -> ItemScores:
    gold = rng.integers(0, 2, n)
    cosine = np.round(gold * signal + rng.normal(size=n), 1)  # rounded: many tied scores
    arrays = {"gold": gold, "cosine": cosine, "similarity": cosine, "dot": cosine * 2,
              "euclidean": -cosine + rng.normal(scale=0.1, size=n), "manhattan": np.round(-cosine, 0)}
    return ItemScores(_meta("P", "PairClassification", "max_ap"), arrays)


def _cluster_items(rng: np.random.Generator, n: int = 200, noise: float = 0.3) -> ItemScores:
    gold = rng.integers(0, 5, n)[None, :]
    draws = np.stack([rng.choice(n, 120, replace=False) for _ in range(3)])[None]
    assignments = np.where(rng.random(draws.shape) < noise, rng.integers(0, 6, draws.shape), gold[0][draws])
    return ItemScores(_meta("C", "Clustering", "v_measure"), {"gold": gold, "draws": draws, "assignments": assignments})


def _one_class_items(rng: np.random.Generator) -> ItemScores:
    """Clustering with a single gold class (its entropy 0: homogeneity 1 by definition)."""
    items = _cluster_items(rng)
    return ItemScores(items.meta, {**items.arrays, "gold": np.zeros_like(items.arrays["gold"])})


def _one_cluster_items(rng: np.random.Generator) -> ItemScores:
    """Clustering that puts every item in one cluster (its entropy 0: completeness 1, V-measure 0)."""
    items = _cluster_items(rng)
    return ItemScores(items.meta, {**items.arrays, "assignments": np.zeros_like(items.arrays["assignments"])})


def _class_items(rng: np.random.Generator, n: int = 400, accuracy: float = 0.7) -> ItemScores:
    gold = rng.integers(0, 3, n)
    predictions = np.where(rng.random((4, n)) < accuracy, gold[None, :], (gold[None, :] + 1) % 3)
    return ItemScores(_meta("K", "Classification", "accuracy"), {"gold": gold, "predictions": predictions})


def _query_items(rng: np.random.Generator, n: int = 150, level: float = 0.6) -> ItemScores:
    return ItemScores(_meta("R", "Retrieval", "ndcg_at_10"),
                      {"query_ids": np.array([f"q{i}" for i in rng.permutation(n)]),
                       "ndcg_cut_10": np.clip(rng.normal(level, 0.2, n), 0, 1)})


@pytest.mark.parametrize("make", [_pair_items, _cluster_items, _one_class_items, _one_cluster_items, _class_items,
                                  _query_items])
def test_a_resample_scores_what_scikit_learn_scores_on_the_drawn_items(make) -> None:
    """Weights of ones give the task's own score (:func:`main_score_of`); weights drawn from a resample give the
    score scikit-learn computes on the resampled items themselves (ties, repeated items and all)."""
    rng = np.random.default_rng(7)
    items = make(rng)
    size = n_items(items)
    assert resampled_scores(items, np.ones((1, size)))[0] == pytest.approx(main_score_of(items), abs=1e-12)
    drawn = rng.integers(0, size, size)
    weights = np.bincount(drawn, minlength=size)[None, :].astype(float)
    got = resampled_scores(items, weights)[0]
    arrays = items.arrays
    if items.task_type == "PairClassification":
        expected = max(average_precision_score(arrays["gold"][drawn], sign * arrays[name][drawn])
                       for name, sign in (("cosine", 1), ("similarity", 1), ("dot", 1), ("euclidean", -1),
                                          ("manhattan", -1)))
    elif items.task_type == "Clustering":
        position = {item: count for item, count in zip(*np.unique(drawn, return_counts=True))}
        expected = np.mean([v_measure_score(np.repeat(arrays["gold"][0][d], [position.get(i, 0) for i in d]),
                                            np.repeat(a, [position.get(i, 0) for i in d]))
                            for d, a in zip(arrays["draws"][0], arrays["assignments"][0])])
    elif items.task_type == "Classification":
        expected = np.mean(arrays["predictions"][:, drawn] == arrays["gold"][drawn][None, :])
    else:  # per-query items in query-id order (how two rows' queries are paired)
        expected = np.mean(arrays["ndcg_cut_10"][np.argsort(arrays["query_ids"])][drawn])
    assert got == pytest.approx(expected, abs=1e-12)


def _result(calibrator: str, seed: int | None, task: str, items: ItemScores) -> TaskResult:
    score = main_score_of(items)
    model = "flow_plugin/tiny" + ("" if calibrator == "raw" else f"-{calibrator}")
    return TaskResult(model, calibrator, seed, task, items.task_type, str(items.meta["main_score"]), score,
                      "sha256:x", ItemScores({**items.meta, "task": task}, items.arrays), Path(f"{model}/{task}.json"))


def _study(shift_flow: float = 0.25) -> list[TaskResult]:
    """raw, a calibrator that changes nothing (sn), and a flow of 3 seeds that gets many more items right."""
    rng = np.random.default_rng(0)
    gold = rng.integers(0, 3, 600)
    base = np.where(rng.random((2, 600)) < 0.6, gold, (gold + 1) % 3)
    raw_class = ItemScores(_meta("A", "Classification", "accuracy"), {"gold": gold, "predictions": base})
    queries = _query_items(rng)
    results = [_result("raw", None, "TaskA", raw_class), _result("raw", None, "TaskR", queries),
               _result("sn", None, "TaskA", raw_class), _result("sn", None, "TaskR", queries)]
    for seed in (1234, 1235, 1236):
        better = np.where(rng.random((2, 600)) < shift_flow, gold, base)
        results.append(_result("flow", seed, "TaskA", ItemScores(raw_class.meta, {"gold": gold, "predictions": better})))
        results.append(_result("flow", seed, "TaskR", queries))
    return results


def test_compare_gives_each_delta_its_paired_interval_and_type_averages() -> None:
    board = compare_task_types(_study(), name="b", backbone="tiny", updated="now", generated_by="test", n_resamples=300)
    assert [row.calibrator for row in board.rows] == ["raw", "sn", "flow"]
    raw, same, flow = board.rows
    assert raw.delta is None and flow.seeds == [1234, 1235, 1236] and flow.scores["TaskA"].n == 3
    assert board.types == {"Classification": ["TaskA"], "Retrieval": ["TaskR"]}
    # a calibrator that changed nothing: Δ 0 with a zero-width interval (paired), never significant
    assert all(d.delta == 0 and d.ci95 == (0.0, 0.0) and not d.significant for d in same.delta.values())
    gain = flow.delta["TaskA"]
    assert gain.significant and gain.ci95[0] > 0
    assert gain.delta == pytest.approx(flow.scores["TaskA"].mean - raw.scores["TaskA"].mean, abs=2e-4)
    assert flow.delta["Classification"].delta == gain.delta
    assert flow.delta["average"].delta == pytest.approx((gain.delta + flow.delta["TaskR"].delta) / 2, abs=2e-4)
    assert board_problems(board) == []


def test_the_writer_refuses_a_board_whose_delta_left_its_interval(tmp_path: Path) -> None:
    board = compare_task_types(_study(), name="b", backbone="tiny", updated="now", generated_by="test", n_resamples=200)
    paths = write_task_types_board(board, tmp_path / "task-types-tiny.json", board_problems(board))
    assert [path.suffix for path in paths] == [".json", ".md", ".png", ".html"]
    again = TaskTypesBoard.model_validate(json.loads(paths[0].read_text()))
    assert again == board
    assert "| flow (3 seeds) |" in paths[1].read_text() and "Δ against raw per task type" in paths[3].read_text()
    assert "task-types-tiny.html" in write_index(tmp_path).read_text()
    markdown = paths[1].read_text()
    paths[1].unlink()
    from flow_plugin.leaderboard.pipeline import render_task_types_board

    assert render_task_types_board(paths[0])[1].read_text() == markdown  # from the JSON alone
    moved = board.model_copy(deep=True)
    flow = moved.rows[-1]
    value = flow.delta["TaskA"].delta
    flow.delta["TaskA"].ci95 = (value + 1.0, value + 2.0)
    problems = board_problems(moved)
    assert any("outside its interval" in problem for problem in problems)
    with pytest.raises(LeaderboardError, match="outside its interval"):
        write_task_types_board(moved, tmp_path / "moved.json", problems)
    assert not (tmp_path / "moved.json").exists()


def test_compare_refuses_rows_without_raw_or_with_missing_tasks() -> None:
    results = _study()
    with pytest.raises(LeaderboardError, match="no raw results"):
        compare_task_types([r for r in results if r.calibrator != "raw"], name="b", backbone="tiny", updated="now",
                           generated_by="t")
    with pytest.raises(LeaderboardError, match="not every row has a result of TaskR"):
        compare_task_types([r for r in results if not (r.calibrator == "sn" and r.task == "TaskR")], name="b",
                           backbone="tiny", updated="now", generated_by="t")


PUBLISHED = sorted((REPO / "leaderboards").glob("task-types-*.json"))


def _published_boards() -> list[TaskTypesBoard]:
    return [TaskTypesBoard.model_validate(json.loads(path.read_text(encoding="utf-8"))) for path in PUBLISHED]


def _table_end(lines: list[str], start: int) -> int:
    """The index after the last line of the Markdown table that starts at ``start``."""
    return next(i for i in range(start, len(lines) + 1) if i == len(lines) or not lines[i].startswith("|"))


@pytest.mark.skipif(not PUBLISHED, reason="no task-types board published in leaderboards/ yet")
@pytest.mark.parametrize("path", PUBLISHED, ids=[path.stem for path in PUBLISHED])
def test_published_board_every_delta_lies_inside_its_interval(path: Path) -> None:
    from flow_plugin.leaderboard.render.task_types import render_task_types_html, render_task_types_markdown

    board = TaskTypesBoard.model_validate(json.loads(path.read_text(encoding="utf-8")))
    assert board_problems(board) == []
    assert board.file_text() == path.read_text(encoding="utf-8")  # re-rendered by this code, byte for byte
    assert render_task_types_markdown(board) == path.with_suffix(".md").read_text(encoding="utf-8")
    assert render_task_types_html(board, path.stem) == path.with_suffix(".html").read_text(encoding="utf-8")
    raw = next(row for row in board.rows if row.calibrator == "raw")
    columns = {task.name for task in board.tasks} | set(board.types) | {"average"}
    assert set(raw.scores) == columns
    for row in board.rows:
        if row.delta is not None:
            assert set(row.delta) == columns
            for found in row.delta.values():
                low, high = found.ci95
                assert low <= found.delta <= high


def test_the_table_across_backbones_shows_each_type_and_backbone_with_intervals() -> None:
    from flow_plugin.leaderboard.render.task_types import across_backbones

    boards = [compare_task_types(_study(shift), name=name, backbone=name, updated="now", generated_by="t",
                                 n_resamples=100) for name, shift in (("one", 0.25), ("two", 0.0))]
    lines = across_backbones(boards)
    assert lines[0] == "| Task type | Backbone | raw | SN | flow |"
    body = [line.split(" | ") for line in lines[2:]]
    assert [(cells[0], cells[1]) for cells in body] == [
        ("| Classification", "one"), ("| Classification", "two"), ("| Retrieval", "one"), ("| Retrieval", "two"),
        ("| Average of the types", "one"), ("| Average of the types", "two")]
    flow_one = boards[0].rows[-1].delta["Classification"]
    assert body[0][4].startswith(f"{flow_one.delta:+.2f} [") and body[0][4].endswith("]* |")
    assert across_backbones(boards, ["flow"])[0] == "| Task type | Backbone | raw | flow |"


def test_the_board_verb_says_in_one_line_what_is_missing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from flow_plugin.cli.main import main as cli_main

    assert cli_main(["task-types", "-b", "minilm-l6", "--output-folder", str(tmp_path), "--board-only"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "flow-plugin task-types: --board-only needs --board JSON (where to write the board)"]
    board = tmp_path / "boards" / "task-types-minilm-l6.json"
    assert cli_main(["task-types", "-b", "minilm-l6", "--output-folder", str(tmp_path), "--board", str(board),
                     "--board-only"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "flow-plugin task-types: error: minilm-l6: no results of the labelled tasks to compare"]
    assert not board.exists()


def _table(lines: list[str]) -> dict[tuple[str, str], dict[str, str]]:
    """(task type, backbone) -> column label -> cell, of a Markdown table as across_backbones writes it."""
    head = [cell.strip() for cell in lines[0].strip("|").split("|")]
    return {(cells[0], cells[1]): dict(zip(head[2:], cells[2:]))
            for cells in ([cell.strip() for cell in line.strip().strip("|").split("|")] for line in lines[2:])}


@pytest.mark.skipif(not PUBLISHED, reason="no task-types board published in leaderboards/ yet")
@pytest.mark.parametrize("page", ["README.md", "docs/results.md"])
def test_the_pages_show_the_published_boards_numbers(page: str) -> None:
    """README's and Results' 'beyond STS' tables are the boards' numbers as across_backbones prints them (the
    boards are the one home of every number; a table copied before a board was rebuilt fails here)."""
    from flow_plugin.leaderboard.render.task_types import across_backbones

    lines = (REPO / page).read_text(encoding="utf-8").splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("| Task type | Backbone | raw |")]
    assert starts, f"{page} shows no beyond-STS table"
    boards = _published_boards()
    truth = _table(across_backbones(boards))
    for number, start in enumerate(starts):
        end = _table_end(lines, start)
        shown = _table(lines[start:end])
        if number == 0:  # the main table: every published board, every type
            assert {backbone for _, backbone in shown} == {board.backbone for board in boards}, "a board is missing"
            assert set(shown) == set(truth)
        for key, cells in shown.items():
            assert cells == {label: truth[key][label] for label in cells}, (start + 1, key)


@pytest.mark.skipif(len(PUBLISHED) < 2, reason="fewer than two task-types boards published")
def test_the_raw_side_by_side_tables_are_the_boards_numbers() -> None:
    """A results-page table of two boards' raw scores (raw_side_by_side) is the boards' numbers, every line."""
    from flow_plugin.leaderboard.render.task_types import raw_side_by_side

    boards = {board.backbone: board for board in _published_boards()}
    lines = (REPO / "docs/results.md").read_text(encoding="utf-8").splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("| Task | Type | ")]
    for start in starts:
        first, second = [cell.strip() for cell in lines[start].strip("|").split("|")][2:4]
        end = _table_end(lines, start)
        assert lines[start:end] == raw_side_by_side(boards[first], boards[second]), start + 1


def test_raw_side_by_side_lists_the_shared_tasks_and_the_difference() -> None:
    from flow_plugin.leaderboard.render.task_types import raw_side_by_side

    one = compare_task_types(_study(), name="one", backbone="one", updated="now", generated_by="t", n_resamples=100)
    raw = one.rows[0]
    moved = raw.model_copy(update={"scores": {column: spread.model_copy(update={"mean": spread.mean + 1.5})
                                              for column, spread in raw.scores.items()}})
    two = one.model_copy(update={"backbone": "two", "rows": [moved, *one.rows[1:]]})
    lines = raw_side_by_side(one, two)
    assert lines[0] == "| Task | Type | one | two | difference |"
    # two tasks of two types of one task each: no type rows, then the average
    assert [line.split(" | ")[0] for line in lines[2:]] == ["| TaskA", "| TaskR", "| Average of the types"]
    assert all(line.endswith(" | +1.50 |") for line in lines[2:])
