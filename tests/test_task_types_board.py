"""The task-types board: the bootstrap recomputes each type's main score as MTEB does (checked against
scikit-learn on resampled items), the compare stage's Δ and intervals, the files written, and the published
boards (every Δ inside its interval)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import average_precision_score, v_measure_score

from flow_plugin.errors import LeaderboardError
from flow_plugin.results.items import ItemScores, main_score_of
from flow_plugin.leaderboard.compare_types import compare_task_types, n_items, resampled_scores
from flow_plugin.leaderboard.headline import board_problems
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
@pytest.mark.parametrize("page", ["README.md", *sorted(f"docs/{path.name}" for path in (REPO / "docs").glob("*.md"))])
def test_the_pages_show_the_published_boards_numbers(page: str) -> None:
    """Results' 'beyond STS' table, and any such table on README or another page, is the boards' numbers as
    across_backbones prints them (the boards are the one home of every number; a table copied before a board was
    rebuilt fails here)."""
    from flow_plugin.leaderboard.render.task_types import across_backbones

    lines = (REPO / page).read_text(encoding="utf-8").splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("| Task type | Backbone | raw |")]
    main_page = page == "docs/results.md"
    assert starts or not main_page, f"{page} shows no beyond-STS table"
    boards = _published_boards()
    truth = _table(across_backbones(boards))
    for number, start in enumerate(starts):
        end = _table_end(lines, start)
        shown = _table(lines[start:end])
        if number == 0 and main_page:  # the main table: every published board, every type
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


# ---------------------------------------------------------------------------- the pictures
def _described(png: bytes | Path) -> tuple[dict, tuple[int, int]]:
    """What a picture says it draws (its "Description" chunk), and its size."""
    import io

    from PIL import Image

    with Image.open(io.BytesIO(png) if isinstance(png, bytes) else png) as image:
        assert image.format == "PNG"
        return json.loads(image.text["Description"]), image.size


def _heatmap_is_the_board(drawn: dict, board: TaskTypesBoard) -> None:
    """The heatmap draws every calibrated row once (auto first), every type then the average, each cell the board's
    Δ and its mark the board's significance."""
    rows = {row.calibrator: row for row in board.rows if row.delta is not None}
    assert sorted(drawn["rows"]) == sorted(rows) and len(drawn["rows"]) == len(rows)
    if "auto" in rows:
        assert drawn["rows"][0] == "auto"
    assert [r for r in drawn["rows"] if r != "auto"] == [r.calibrator for r in board.rows if r.calibrator in rows
                                                         and r.calibrator != "auto"]
    assert drawn["columns"] == [*board.types, "average"]
    for calibrator, values, marks in zip(drawn["rows"], drawn["values"], drawn["significant"]):
        deltas = rows[calibrator].delta
        assert values == [deltas[column].delta for column in drawn["columns"]], calibrator
        assert marks == [deltas[column].significant for column in drawn["columns"]], calibrator


@pytest.mark.skipif(not PUBLISHED, reason="no task-types board published in leaderboards/ yet")
@pytest.mark.parametrize("path", PUBLISHED, ids=[path.stem for path in PUBLISHED])
def test_published_board_picture_is_its_numbers(path: Path) -> None:
    """The committed heatmap next to each board draws the board's numbers; this code draws the same picture, at the
    same size within 2% (matplotlib's text metrics differ by a few pixels between its versions)."""
    from flow_plugin.leaderboard.render.task_types_chart import render_heatmap_png

    board = TaskTypesBoard.model_validate(json.loads(path.read_text(encoding="utf-8")))
    committed, size = _described(path.with_suffix(".png"))
    _heatmap_is_the_board(committed, board)
    drawn, drawn_size = _described(render_heatmap_png(board))
    assert drawn == committed
    assert drawn_size == pytest.approx(size, rel=0.02)
    pages = [path.with_suffix(suffix).read_text(encoding="utf-8") for suffix in (".md", ".html")]
    for page in pages:  # the picture first, before any table
        assert page.index(f"{path.stem}.png") < page.index("Δ against raw per task type")


@pytest.mark.slow  # draws several pictures: >= 5 s on 2 cores
def test_the_heatmap_takes_any_number_of_types_and_rows(task_types_board_of) -> None:
    """One type or eight (one of twelve tasks), two rows or thirty, with auto or without: every cell drawn, auto
    first, and the picture grows with the board."""
    from flow_plugin.leaderboard.render.task_types_chart import render_heatmap_png

    sizes = []
    for board in (task_types_board_of(1, 2, auto=False), task_types_board_of(3, 8),
                  task_types_board_of(8, 30, first_type_tasks=12)):
        assert board_problems(board) == []
        drawn, size = _described(render_heatmap_png(board))
        _heatmap_is_the_board(drawn, board)
        sizes.append(size)
    assert sizes[0][0] < sizes[1][0] < sizes[2][0] and sizes[0][1] < sizes[1][1] < sizes[2][1]


def _expected_summary(boards: list[TaskTypesBoard], column: str) -> tuple[list, list]:
    """Per board, auto's [Δ, low, high, significant] in ``column`` and the best fixed calibrator's names (every one
    with the highest Δ there) and [Δ, low, high, significant], straight from the JSON."""
    autos, best = [], []
    for board in boards:
        auto = next((row for row in board.rows if row.calibrator == "auto"), None)
        found = auto.delta.get(column) if auto is not None and auto.delta else None
        autos.append(None if found is None else [found.delta, *found.ci95, found.significant])
        fixed = [row for row in board.rows if row.delta and row.calibrator != "auto" and column in row.delta]
        top = max(row.delta[column].delta for row in fixed)
        winners = [row for row in fixed if row.delta[column].delta == top]
        found = winners[0].delta[column]
        best.append(({row.calibrator for row in winners}, [found.delta, *found.ci95, found.significant]))
    return autos, best


def _summary_is_the_boards(drawn: dict, boards: list[TaskTypesBoard]) -> None:
    assert drawn["backbones"] == [board.backbone for board in boards]
    kinds = list(dict.fromkeys(kind for board in boards for kind in board.types))
    assert drawn["columns"] == [*kinds, "average"]
    for column in drawn["columns"]:
        autos, best = _expected_summary(boards, column)
        assert drawn["auto"][column] == autos, column
        for (names, numbers), shown in zip(best, drawn["best_fixed"][column]):
            assert shown[0] in names and shown[1:] == numbers, (column, shown)


@pytest.mark.slow  # draws several pictures: >= 5 s on 2 cores
@pytest.mark.skipif(not PUBLISHED, reason="no task-types board published in leaderboards/ yet")
def test_the_published_summary_picture_is_the_boards_numbers() -> None:
    """leaderboards/task-types-summary.png draws, per task type and published board, auto's Δ and the best fixed
    calibrator's (named) with their intervals, as the boards' JSON give them; this code draws the same."""
    from flow_plugin.leaderboard.headline import types_headline
    from flow_plugin.leaderboard.render.task_types_chart import render_summary_png

    boards = _published_boards()
    committed, size = _described(REPO / "leaderboards" / "task-types-summary.png")
    _summary_is_the_boards(committed, boards)
    drawn, drawn_size = _described(render_summary_png([types_headline(board) for board in boards]))
    assert drawn == committed and drawn_size == pytest.approx(size, rel=0.02)


def test_the_summary_picture_takes_boards_of_other_types_and_without_auto(tmp_path: Path, task_types_board_of) -> None:
    """Boards of different types (the union is drawn, a board missing a type leaves its line empty there), one
    without auto; a folder without task-types boards draws nothing."""
    from flow_plugin.leaderboard.write import SUMMARY_PICTURE, write_task_types_summary

    assert write_task_types_summary(tmp_path) is None and not (tmp_path / SUMMARY_PICTURE).exists()
    boards = [task_types_board_of(2, 5, backbone="a"), task_types_board_of(4, 3, auto=False, backbone="b")]
    for board in boards:
        write_task_types_board(board, tmp_path / f"{board.name}.json", board_problems(board))
    drawn, _ = _described(write_task_types_summary(tmp_path))
    assert drawn["backbones"] == ["a", "b"] and drawn["columns"] == ["Type0", "Type1", "Type2", "Type3", "average"]
    assert drawn["auto"]["Type0"][1] is None and drawn["auto"]["Type3"][0] is None  # b has no auto, a no Type3
    assert drawn["best_fixed"]["Type3"][0] is None and drawn["best_fixed"]["Type3"][1][0].startswith("cal-")
    for column in ("Type0", "average"):
        autos, best = _expected_summary(boards, column)
        assert drawn["auto"][column] == autos
        assert [shown[1:] for shown in drawn["best_fixed"][column]] == [numbers for _, numbers in best]


@pytest.mark.slow  # draws several pictures: >= 5 s on 2 cores
def test_the_command_line_rerenders_task_types_boards_and_draws_the_summary(
        tmp_path: Path, task_types_board_of, capsys: pytest.CaptureFixture[str]) -> None:
    """``flow-plugin leaderboard --render-only`` takes a task-types board (its pages and picture, the same files as the
    writer's, then the folder's summary picture once); ``--task-types-summary FOLDER`` draws the summary alone."""
    from flow_plugin.cli.main import main as cli_main

    boards = [task_types_board_of(2, 3, backbone="a"), task_types_board_of(2, 3, backbone="b")]
    written = {}
    for board in boards:
        for path in write_task_types_board(board, tmp_path / f"{board.name}.json", board_problems(board)):
            written[path.name] = path.read_bytes()
            if path.suffix != ".json":
                path.unlink()
    assert cli_main(["leaderboard", "--render-only", *(str(tmp_path / f"{b.name}.json") for b in boards)]) == 0
    out = capsys.readouterr().out
    assert out.count("re-rendered") == 2 and out.count("task-types-summary.png") == 1
    for name, content in written.items():
        if name.endswith((".json", ".md", ".html")):
            assert (tmp_path / name).read_bytes() == content, name
        else:
            assert _described((tmp_path / name).read_bytes())[0] == _described(content)[0], name
    summary = tmp_path / "task-types-summary.png"
    _summary_is_the_boards(_described(summary)[0], boards)
    summary.unlink()
    assert cli_main(["leaderboard", "--task-types-summary", str(tmp_path)]) == 0
    assert capsys.readouterr().out.strip() == f"wrote {summary}" and summary.is_file()
    assert cli_main(["leaderboard", "--task-types-summary", str(tmp_path / "nowhere")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"flow-plugin leaderboard: error: {tmp_path / 'nowhere'}: no such folder; give the leaderboards folder "
        "(e.g. leaderboards/)"]


def test_without_matplotlib_a_task_types_board_is_written_without_its_picture(
        tmp_path: Path, task_types_board_of, without_matplotlib: None, caplog: pytest.LogCaptureFixture) -> None:
    """Without the plots extra the board's JSON, Markdown and HTML are written all the same, with one warning each for
    the picture and the summary; the pages say there is no picture and link none."""
    import logging

    from flow_plugin.leaderboard.write import write_task_types_summary

    board = task_types_board_of(2, 3)
    with caplog.at_level(logging.WARNING):
        paths = write_task_types_board(board, tmp_path / "task-types-wide.json", board_problems(board))
        assert write_task_types_summary(tmp_path) is None
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 2 and all("pip install 'flow-plugin[plots]'" in warning for warning in warnings)
    assert str(tmp_path / "task-types-wide.png") in warnings[0] and "task-types-summary.png" in warnings[1]
    assert paths[2] is None and sorted(p.name for p in tmp_path.iterdir()) == [
        "task-types-wide.html", "task-types-wide.json", "task-types-wide.md"]
    for path in (paths[1], paths[3]):
        text = path.read_text(encoding="utf-8")
        assert "No picture: matplotlib is missing" in text and "task-types-wide.png" not in text


def test_a_damaged_task_types_board_is_named_and_left_out_of_the_index_and_summary(
        tmp_path: Path, task_types_board_of, caplog: pytest.LogCaptureFixture,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A file of the task-types format that does not fit it: the index and the summary picture leave it out with one
    warning each naming it; re-rendering it is a one-line error naming it and the remedy."""
    import logging

    from flow_plugin.cli.main import main as cli_main
    from flow_plugin.leaderboard.write import write_task_types_summary

    board = task_types_board_of(2, 2, backbone="good")
    write_task_types_board(board, tmp_path / f"{board.name}.json", board_problems(board))
    damaged = tmp_path / "task-types-damaged.json"
    data = json.loads((tmp_path / f"{board.name}.json").read_text())
    del data["rows"]
    damaged.write_text(json.dumps(data))
    with caplog.at_level(logging.WARNING):
        index = write_index(tmp_path).read_text(encoding="utf-8")
        drawn, _ = _described(write_task_types_summary(tmp_path))
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 2 and all(str(damaged) in warning and "rows" in warning for warning in warnings)
    assert 'href="task-types-good.html"' in index and "task-types-damaged" not in index
    assert drawn["backbones"] == ["good"]
    assert cli_main(["leaderboard", "--render-only", str(damaged)]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and str(damaged) in error[0] and "does not fit the task-types board format" in error[0]
    assert "--board-only" in error[0]


def test_a_published_board_is_read_checked_and_rendered_without_numpy() -> None:
    """Reading a task-types board, checking that it describes itself and rendering its page, its Markdown and its
    index entry take the board's models alone: numpy and scipy load only where a board is compared (built)."""
    board = sorted((REPO / "leaderboards").glob("task-types-*.json"))[0]
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from flow_plugin.leaderboard.headline import board_problems\n"
        "from flow_plugin.leaderboard.render.task_types import (index_summary, render_task_types_html,\n"
        "                                                       render_task_types_markdown)\n"
        "from flow_plugin.leaderboard.write import read_task_types_board\n"
        f"board = read_task_types_board(Path({str(board)!r}))\n"
        "assert board_problems(board) == [], board_problems(board)\n"
        "page, text = render_task_types_html(board, 'b'), render_task_types_markdown(board, 'b')\n"
        "entry = index_summary(board, 'b', True)\n"
        "assert board.backbone in page and board.backbone in text and entry\n"
        "print([name for name in ('numpy', 'scipy', 'torch', 'mteb') if name in sys.modules])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"
