"""The task-types board as Markdown and as an HTML page: first its picture (the heatmap ``<stem>.png`` next to
them, :mod:`.task_types_chart`) and which calibrator to use on average, then the Δ against raw of each calibrator
per task type (with the 95% intervals), then per type the scores and the Δ of every task; and the board's line on
the folder's index.

Reads the compare stage's :class:`~flow_plugin.leaderboard.models.TaskTypesBoard`
(:func:`flow_plugin.leaderboard.compare_types.compare_task_types`, and its
:func:`~flow_plugin.leaderboard.headline.types_headline`) and computes nothing; cells are written as
on the STS boards (:mod:`.text`: 2 decimals, ± the spread over seeds, [low, high] and * for an interval that
excludes 0).
"""

from __future__ import annotations

import html
from importlib import resources
from typing import Any

from flow_plugin.calibration.names import CALIBRATOR_LABELS
from flow_plugin.leaderboard.compare import CellInterval
from flow_plugin.leaderboard.headline import types_headline
from flow_plugin.leaderboard.models import AVERAGE, TaskTypesBoard, TypeDelta, TypeRow
from flow_plugin.leaderboard.render.text import SEEDS_NOTE, bracket_text, fmt, interval_text, with_spread

#: how the board names MTEB's task types
TYPE_LABELS = {"Classification": "Classification", "PairClassification": "Pair classification",
               "Clustering": "Clustering", "Reranking": "Reranking", "Retrieval": "Retrieval"}
INTERVAL_NOTE = ("Each Δ is against raw, in points, with its 95% interval [low, high]: a paired bootstrap over the "
                 "task's test items (every row scored on the same resampled items; the main score recomputed from "
                 "MTEB's own per-item outcomes), with the seeds of a seeded row resampled too, and the resampled "
                 "deltas re-centred on the Δ (V-measure and AP are biased on resamples with repeated items); a "
                 "type's Δ is the mean "
                 "of its tasks' and the average the mean of the types', their intervals from the same resamples. * "
                 "marks an interval that excludes 0: only those count as differences.")


EVALUATOR_NOTE = ("Where MTEB's evaluator draws at random (classification: the training items of each experiment; "
                  "clustering: the bootstrap draws and k-means' start), every row is scored at the same evaluator "
                  "seeds (Tasks, below), a score is the mean over them, and the bootstrap resamples the seeds too "
                  "(the same draw for every row): the intervals cover the evaluator's randomness.")


def interval_notes(board: TaskTypesBoard) -> str:
    """What the intervals cover, as the board's own results say (the evaluator's seeds where it has several)."""
    several = any(task.evaluator_seeds for task in board.tasks)
    return f"{INTERVAL_NOTE} {EVALUATOR_NOTE}" if several else INTERVAL_NOTE


def task_rows(board: TaskTypesBoard) -> tuple[list[str], list[list[str]]]:
    """The Tasks table's head and rows; with the evaluator's seeds and raw's spread over them where it has several."""
    several = any(task.evaluator_seeds for task in board.tasks)
    head = ["Task", "Type", "Main score", "Test items"]
    rows = [[task.name, type_label(task.type), task.main_score, f"{task.n_items:,}"] for task in board.tasks]
    if several:
        head += ["Evaluator seeds", "raw's sd over them"]
        for row, task in zip(rows, board.tasks):
            row += [", ".join(map(str, task.evaluator_seeds or [42])), fmt(task.evaluator_sd)]
    return head, rows


def type_label(kind: str) -> str:
    """A task type as the board names it.

    >>> type_label("PairClassification")
    'Pair classification'
    """
    return TYPE_LABELS.get(kind, kind)


def task_label(task: str, kind: str) -> str:
    """A labelled task's short name: without the FlowPlugin prefix and its type.

    >>> task_label("FlowPluginMRClassification", "Classification")
    'MR'
    """
    short = task.removeprefix("FlowPlugin")
    return short.removesuffix(kind) or short


def row_label(row: TypeRow) -> str:
    """A row's calibrator as the board names it, with its seeds."""
    label = CALIBRATOR_LABELS.get(row.calibrator, row.calibrator)
    if row.seeds and len(row.seeds) > 1:
        label += f" ({len(row.seeds)} seeds)"
    return label


def score_text(row: TypeRow, column: str) -> str:
    """A score cell: the mean, ± the standard deviation over seeds for a seeded row."""
    found = row.scores.get(column)
    if found is None:
        return fmt(None)
    return with_spread(fmt(found.mean), found.std if found.n > 1 else None)


def delta_text(found: TypeDelta | None) -> str:
    """A Δ cell with its interval and * when the interval excludes 0.

    >>> delta_text(TypeDelta(delta=-1.5, ci95=(-2.0, -1.0), significant=True))
    '-1.50 [-2.00, -1.00]*'
    """
    if found is None:
        return fmt(None)
    return interval_text(fmt(found.delta, signed=True), CellInterval(found.ci95, found.significant))


def verdict(found: TypeDelta | None) -> str:
    """Whether a Δ says the calibrator helps, hurts or does not matter (its interval decides)."""
    if found is None:
        return "—"
    if not found.significant:
        return "no difference"
    return "helps" if found.delta > 0 else "hurts"


def run_text(board: TaskTypesBoard) -> str:
    """Where the board's results were computed, in one sentence."""
    run = board.run or {}
    parts = []
    for hardware in run.get("hardware", []):
        text = ", ".join(str(hardware[key]) for key in ("cpu", "device", "precision") if hardware.get(key))
        if hardware.get("bf16_kernels"):
            text += f", bf16 kernels {hardware['bf16_kernels']}"  # the CPU's, whatever precision the rows ran in
        if hardware.get("torch"):
            text += f", torch {hardware['torch']}"
        if hardware.get("cpu_cores"):
            text += f", {hardware['cpu_cores']} cores"
        parts.append(text)
    text = "; ".join(parts) or "not recorded"
    times = [f"{run[name]:,.0f} s {label}" for name, label in (("wall_seconds", "wall"), ("cpu_seconds", "CPU"))
             if isinstance(run.get(name), (int, float))]
    stages = run.get("stages") or {}
    if stages:
        times.append("of which " + ", ".join(f"{stage} {spent['cpu']:,.0f} s CPU" for stage, spent in stages.items()))
    return f"Computed on: {text}" + (f" ({', '.join(times)} for the study)" if times else "") + "."


def summary_table(board: TaskTypesBoard) -> list[str]:
    """Markdown lines: each calibrator's Δ against raw per task type and on average, with the intervals."""
    columns = [*board.types, AVERAGE]
    lines = ["| Calibrator | " + " | ".join(type_label(c) if c != AVERAGE else "Average" for c in columns) + " |",
             "|---|" + "---|" * len(columns)]
    raw = next(row for row in board.rows if row.calibrator == "raw")
    lines.append("| raw (score) | " + " | ".join(score_text(raw, c) for c in columns) + " |")
    for row in board.rows:
        if row.delta is not None:
            lines.append(f"| {row_label(row)} | " + " | ".join(delta_text(row.delta.get(c)) for c in columns) + " |")
    return lines


def across_backbones(boards: list[TaskTypesBoard], calibrators: list[str] | None = None) -> list[str]:
    """Markdown lines of one table over several boards: per task type (then the average of the types) and backbone,
    raw's score and each calibrator's Δ against raw with its interval (the results pages show it); ``calibrators``:
    only those columns."""
    labels: dict[str, str] = {}
    for board in boards:
        for row in board.rows:
            if row.delta is not None and (calibrators is None or row.calibrator in calibrators):
                labels.setdefault(row.calibrator, row_label(row).split(" (")[0])
    kinds = list(dict.fromkeys(kind for board in boards for kind in board.types))
    lines = ["| Task type | Backbone | raw | " + " | ".join(labels.values()) + " |",
             "|---|---|---:|" + "---:|" * len(labels)]
    for kind in [*kinds, AVERAGE]:
        for board in boards:
            if kind != AVERAGE and kind not in board.types:
                continue
            rows = {row.calibrator: row for row in board.rows}
            cells = [delta_text(rows[cal].delta.get(kind)) if cal in rows and rows[cal].delta else fmt(None)
                     for cal in labels]
            name = "Average of the types" if kind == AVERAGE else type_label(kind)
            lines.append(f"| {name} | {board.backbone} | {score_text(rows['raw'], kind)} | " + " | ".join(cells) + " |")
    return lines


def raw_side_by_side(first: TaskTypesBoard, second: TaskTypesBoard) -> list[str]:
    """Markdown lines of the raw scores of two boards of one model (two loaders, two settings) per task of both,
    then per type of several tasks and the average of the types, with the difference second − first of the
    unrounded scores (the results page shows it)."""
    raws = [next(row for row in board.rows if row.calibrator == "raw") for board in (first, second)]
    lines = [f"| Task | Type | {first.backbone} | {second.backbone} | difference |", "|---|---|---:|---:|---:|"]
    columns = [(task.name, task.type) for task in first.tasks if task.name in raws[1].scores]
    columns += [(kind, kind) for kind, tasks in first.types.items() if kind in raws[1].scores and len(tasks) > 1]
    columns.append((AVERAGE, ""))
    for column, kind in columns:
        name = ("Average of the types" if column == AVERAGE else
                "mean of its tasks" if column == kind else task_label(column, kind))
        shown = [score_text(row, column) for row in raws]
        difference = fmt(raws[1].scores[column].mean - raws[0].scores[column].mean, signed=True)
        lines.append(f"| {name} | {type_label(kind) if kind else ''} | {shown[0]} | {shown[1]} | {difference} |")
    return lines


#: what the heatmap's marks mean, as the picture and the pages say it
SIGNIFICANT_MARK = "bold with *: its 95% interval excludes 0"
PICTURE_CAPTION = ("Δ against raw, in points, of each calibrator (rows; auto, which chooses a calibrator per task, "
                   "first and set apart) on each task type and on the average of the types: red below 0, blue above "
                   f"(a symmetric log scale); a cell {SIGNIFICANT_MARK}. The tables below give every number with its "
                   "interval.")
#: what a page says where its picture could not be drawn
NO_PICTURE = "No picture: matplotlib is missing (pip install 'flow-plugin[plots]'); the tables below give every number."


def headline_text(board: TaskTypesBoard) -> str:
    """One sentence: auto's Δ on the average of the types and the best fixed calibrator's, with their intervals
    (:func:`~flow_plugin.leaderboard.headline.types_headline`; "" for a board without calibrated rows)."""

    found = types_headline(board)
    parts = []
    if found.auto is not None and found.auto.delta:
        parts.append(f"{row_label(found.auto)} (it chooses per task) {delta_text(found.auto.delta.get(AVERAGE))}")
    best = found.best_fixed.get(AVERAGE)
    if best is not None and best.delta:
        parts.append(f"the best fixed calibrator, {row_label(best)}, {delta_text(best.delta.get(AVERAGE))}")
    return f"On the average of the types, Δ against raw: {'; '.join(parts)}." if parts else ""


def render_task_types_markdown(board: TaskTypesBoard, stem: str | None = None, picture: bool = True) -> str:
    """The board as Markdown: its picture (``<stem>.png``, unless ``picture`` is false), the Δ per type, then per
    type the scores and Δ of its tasks, then the tasks."""
    stem = stem or board.name
    shown = [f"![Heatmap: Δ against raw per calibrator and task type, {board.backbone}]({stem}.png)", "",
             PICTURE_CAPTION] if picture else [NO_PICTURE]
    answer = headline_text(board)
    lines = [f"# Task types: {board.backbone}", "", *shown, "", *([answer, ""] if answer else []),
             f"Does calibration help beyond STS? Every calibrator of {board.backbone}, fitted on each task's own "
             "unlabeled text (both sides, every split; no labels), scored by MTEB's own evaluators on offline "
             "labelled tasks of every type. Scores are MTEB's main scores × 100.", "", interval_notes(board), "",
             SEEDS_NOTE,
             "", run_text(board), "", "## Δ against raw per task type", "", *summary_table(board), ""]
    for kind, tasks in board.types.items():
        columns = [*tasks, kind]
        head = [task_label(task, kind) for task in tasks] + [f"{type_label(kind)} avg"]
        lines += [f"## {type_label(kind)}", "", "Scores:", "",
                  "| Calibrator | " + " | ".join(head) + " |", "|---|" + "---|" * len(columns)]
        lines += [f"| {row_label(row)} | " + " | ".join(score_text(row, c) for c in columns) + " |" for row in board.rows]
        lines += ["", "Δ against raw:", "", "| Calibrator | " + " | ".join(head) + " |", "|---|" + "---|" * len(columns)]
        lines += [f"| {row_label(row)} | " + " | ".join(delta_text(row.delta.get(c)) for c in columns) + " |"
                  for row in board.rows if row.delta is not None]
        lines.append("")
    head, rows = task_rows(board)
    lines += ["## Tasks", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    method = board.interval_method
    lines += ["", f"Intervals: {method.method}; {method.n_resamples:,} resamples, {method.confidence:.0%}, seed "
              f"{method.seed}. Updated {board.updated} by {board.generated_by}.", ""]
    return "\n".join(lines)


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


#: a table cell of the page: (its class, its HTML)
Cell = tuple[str, str]


def _text_cell(text: str) -> Cell:
    return "num", _e(text)


def _score_cell(row: TypeRow, column: str) -> Cell:
    """A score cell that may wrap before ± its spread over seeds (as :func:`score_text` writes it)."""
    found = row.scores.get(column)
    if found is None or found.n < 2:
        return "num", f'<span class="v">{_e(score_text(row, column))}</span>'
    spread = with_spread("", found.std).strip()
    return "num", f'<span class="v">{_e(fmt(found.mean))}</span> <span class="sd">{_e(spread)}</span>'



def delta_parts(found: TypeDelta | None) -> dict[str, Any] | None:
    """A Δ in the parts a page may set on two lines (:func:`.text.delta_parts`: value, interval, significant).

    >>> delta_parts(TypeDelta(delta=-1.5, ci95=(-2.0, -1.0), significant=True))
    {'value': '-1.50', 'interval': '[-2.00, -1.00]*', 'significant': True}
    """
    if found is None:
        return None
    return {"value": fmt(found.delta, signed=True),
            "interval": bracket_text(CellInterval(found.ci95, found.significant)), "significant": found.significant}


def _delta_cell(found: TypeDelta | None) -> Cell:
    """A Δ cell that may wrap between its value and its interval (so that a table fits the window): the value
    coloured by its sign, bold when its interval excludes 0."""
    if found is None:
        return "num", _e(fmt(None))
    sign = "pos" if found.delta > 0 else "neg" if found.delta < 0 else "zero"
    value, interval = fmt(found.delta, signed=True), bracket_text(CellInterval(found.ci95, found.significant))
    return (f"num {sign}" + (" sig" if found.significant else ""),
            f'<span class="v">{_e(value)}</span> <span class="ci">{_e(interval)}</span>')


def _table(caption: str, head: list[str], body: list[tuple[str, list[Cell]]], label: str | None = None) -> str:
    """A table whose rows are (the row's name, its cells); its cells wrap rather than the table scrolling sideways."""
    cells = "".join(f'<th scope="col">{_e(h)}</th>' for h in head)
    rows = "\n".join(f'<tr><th scope="row">{_e(name)}</th>'
                     + "".join(f'<td class="{kind}">{inner}</td>' for kind, inner in line) + "</tr>"
                     for name, line in body)
    labelled = f' aria-label="{_e(label)}"' if label else ""
    return (f'<div class="table-wrap">\n<table class="wrap"{labelled}>\n<caption>{_e(caption)}</caption>\n'
            f"<thead><tr>{cells}</tr></thead>\n<tbody>\n{rows}\n</tbody>\n</table>\n</div>\n")


def _picture(board: TaskTypesBoard, stem: str, picture: bool) -> str:
    """The page's first element: the board's heatmap (``<stem>.png`` next to the page), or why there is none."""
    if not picture:
        return f'<p class="older" id="picture">{_e(NO_PICTURE)}</p>\n'
    alt = (f"Heatmap of the Δ against raw of each calibrator of {board.backbone} on each task type and on the "
           "average of the types, the value printed in each cell")
    return (f'<figure class="picture" id="picture"><a href="{_e(stem)}.png"><img src="{_e(stem)}.png" '
            f'alt="{_e(alt)}"></a>\n<figcaption>{_e(PICTURE_CAPTION)}</figcaption></figure>\n')


def _type_tables(board: TaskTypesBoard) -> list[str]:
    """Per task type: its heading, the scores of its tasks and their Δ against raw."""
    parts = []
    for kind, tasks in board.types.items():
        cols = [*tasks, kind]
        head = ["Calibrator", *(task_label(t, kind) for t in tasks), f"{type_label(kind)} avg"]
        scores = [(row_label(row), [_score_cell(row, c) for c in cols]) for row in board.rows]
        deltas = [(row_label(row), [_delta_cell(row.delta.get(c)) for c in cols])
                  for row in board.rows if row.delta is not None]
        parts += [f"<h2>{_e(type_label(kind))}</h2>\n", _table("Scores", head, scores),
                  _table("Δ against raw (points) with 95% intervals", head, deltas)]
    return parts


def render_task_types_html(board: TaskTypesBoard, stem: str | None = None, picture: bool = True) -> str:
    """The board as one HTML page (the STS boards' style sheet, no script): its picture first (``<stem>.png``, next
    to the page; unless ``picture`` is false), auto's and the best fixed calibrator's Δ on average, the Δ per type,
    how it is computed (folded away), then per type the scores and Δ of its tasks, and the tasks."""
    stem = stem or board.name
    css = resources.files("flow_plugin.leaderboard.render").joinpath("page", "leaderboard.css").read_text("utf-8")
    columns = [*board.types, AVERAGE]
    raw = next(row for row in board.rows if row.calibrator == "raw")
    summary = [("raw (score)", [_score_cell(raw, c) for c in columns])]
    summary += [(row_label(row), [_delta_cell(row.delta.get(c)) for c in columns])
                for row in board.rows if row.delta is not None]
    answer = headline_text(board)
    parts = [
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n",
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n',
        f"<title>Task types: {_e(board.backbone)}</title>\n<style>\n{css}</style>\n</head>\n<body>\n<header>\n",
        f'<p class="meta"><a href="index.html">All leaderboards</a> · {len(board.rows)} rows, {len(board.tasks)} tasks; '
        f'updated {_e(board.updated)} by {_e(board.generated_by)} · <a href="{_e(stem)}.json">{_e(stem)}.json</a> · '
        f'<a href="{_e(stem)}.md">Markdown</a></p>\n<h1>Task types: {_e(board.backbone)}</h1>\n</header>\n<main>\n',
        _picture(board, stem, picture),
        f'<p class="answer">{_e(answer)}</p>\n' if answer else "",
        "<h2>Δ against raw per task type</h2>\n",
        _table("Δ against raw (points) with 95% intervals; the first row is raw's score",
               ["Calibrator", *(type_label(c) if c != AVERAGE else "Average" for c in columns)], summary),
        '<details class="explain">\n<summary>How this board is computed</summary>\n',
        f"<p>Does calibration help beyond STS? Every calibrator of {_e(board.backbone)}, fitted on each task's own "
        "unlabeled text (no labels), scored by MTEB's own evaluators. Scores are MTEB's main scores × 100.</p>\n",
        f"<p>{_e(interval_notes(board))} {_e(SEEDS_NOTE)}</p>\n<p>{_e(run_text(board))}</p>\n</details>\n",
        *_type_tables(board),
        "<h2>Tasks</h2>\n",
        _table("The labelled tasks", task_rows(board)[0],
               [(line[0], [_text_cell(cell) for cell in line[1:]]) for line in task_rows(board)[1]]),
        f'<p class="legend">* significant Δ (its 95% interval excludes 0); ± sample standard deviation over seeds. '
        f"Intervals: {_e(board.interval_method.method)}; {board.interval_method.n_resamples:,} resamples.</p>\n",
        "</main>\n</body>\n</html>\n",
    ]
    return "".join(parts)


def index_summary(board: TaskTypesBoard, stem: str, has_picture: bool) -> dict[str, Any]:
    """What the index says about a task-types board (:func:`~flow_plugin.leaderboard.render.html.render_index`):
    its size and, on the average of the types, the best fixed calibrator's and auto's Δ against raw."""

    found = types_headline(board)
    best, auto = found.best_fixed.get(AVERAGE), found.auto
    verdict = {"backbone": board.backbone,
               "best": row_label(best) if best is not None else None,
               "best_delta": delta_parts(best.delta.get(AVERAGE)) if best is not None and best.delta else None,
               "auto_delta": delta_parts(auto.delta.get(AVERAGE)) if auto is not None and auto.delta else None}
    return {"stem": stem, "name": board.name, "kind": "task types", "backbones": [(board.backbone, None)],
            "rows": len(board.rows), "runs": sum(len(row.seeds or [None]) for row in board.rows),
            "tasks": len(board.tasks), "updated": board.updated, "has_chart": has_picture, "verdicts": [verdict],
            "average": "the average of the task types"}


__all__ = ["INTERVAL_NOTE", "NO_PICTURE", "PICTURE_CAPTION", "SIGNIFICANT_MARK", "TYPE_LABELS", "across_backbones",
           "delta_parts", "delta_text", "headline_text", "index_summary", "raw_side_by_side", "render_task_types_html",
           "render_task_types_markdown", "row_label", "run_text", "score_text", "summary_table", "task_label",
           "type_label", "verdict"]
