"""The task-types board as Markdown and as a self-contained HTML page: first the Δ against raw of each
calibrator per task type (with the 95% intervals), then per type the scores and the Δ of every task.

Reads the compare stage's :class:`~flow_plugin.leaderboard.models.TaskTypesBoard`
(:func:`flow_plugin.leaderboard.compare_types.compare_task_types`) and computes nothing; cells are written as
on the STS boards (:mod:`.text`: 2 decimals, ± the spread over seeds, [low, high] and * for an interval that
excludes 0).
"""

from __future__ import annotations

import html
from importlib import resources
from typing import Any

from flow_plugin.calibration.names import CALIBRATOR_LABELS
from flow_plugin.leaderboard.compare import CellInterval
from flow_plugin.leaderboard.models import AVERAGE, TaskTypesBoard, TypeDelta, TypeRow
from flow_plugin.leaderboard.render.text import SEEDS_NOTE, fmt, interval_text, with_spread

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
            text += f" ({hardware['bf16_kernels']})"
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


def render_task_types_markdown(board: TaskTypesBoard) -> str:
    """The board as Markdown: the Δ per type, then per type the scores and Δ of its tasks, then the tasks."""
    lines = [f"# Task types: {board.backbone}", "",
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


def _table(caption: str, head: list[str], body: list[list[str]]) -> str:
    cells = "".join(f'<th scope="col">{_e(h)}</th>' for h in head)
    rows = "\n".join("<tr>" + f'<th scope="row">{_e(r[0])}</th>' + "".join(f'<td class="num">{_e(c)}</td>' for c in r[1:])
                     + "</tr>" for r in body)
    return (f'<div class="table-wrap">\n<table>\n<caption>{_e(caption)}</caption>\n<thead><tr>{cells}</tr></thead>\n'
            f"<tbody>\n{rows}\n</tbody>\n</table>\n</div>\n")


def render_task_types_html(board: TaskTypesBoard, stem: str | None = None) -> str:
    """The board as one self-contained HTML page (the STS boards' style sheet, no script)."""
    stem = stem or board.name
    css = resources.files("flow_plugin.leaderboard.render").joinpath("page", "leaderboard.css").read_text("utf-8")
    columns = [*board.types, AVERAGE]
    raw = next(row for row in board.rows if row.calibrator == "raw")
    summary = [["raw (score)", *(score_text(raw, c) for c in columns)]]
    summary += [[row_label(row), *(delta_text(row.delta.get(c)) for c in columns)]
                for row in board.rows if row.delta is not None]
    parts = [
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n",
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n',
        f"<title>Task types: {_e(board.backbone)}</title>\n<style>\n{css}</style>\n</head>\n<body>\n<header>\n",
        f'<p class="meta"><a href="index.html">All leaderboards</a> · {len(board.rows)} rows, {len(board.tasks)} tasks; '
        f'updated {_e(board.updated)} by {_e(board.generated_by)} · <a href="{_e(stem)}.json">{_e(stem)}.json</a> · '
        f'<a href="{_e(stem)}.md">Markdown</a></p>\n<h1>Task types: {_e(board.backbone)}</h1>\n</header>\n<main>\n',
        f"<p>Does calibration help beyond STS? Every calibrator of {_e(board.backbone)}, fitted on each task's own "
        "unlabeled text (no labels), scored by MTEB's own evaluators. Scores are MTEB's main scores × 100.</p>\n",
        f"<p>{_e(interval_notes(board))} {_e(SEEDS_NOTE)}</p>\n<p>{_e(run_text(board))}</p>\n",
        "<h2>Δ against raw per task type</h2>\n",
        _table("Δ against raw (points) with 95% intervals; the first row is raw's score",
               ["Calibrator", *(type_label(c) if c != AVERAGE else "Average" for c in columns)], summary),
    ]
    for kind, tasks in board.types.items():
        cols = [*tasks, kind]
        head = ["Calibrator", *(task_label(t, kind) for t in tasks), f"{type_label(kind)} avg"]
        parts += [f"<h2>{_e(type_label(kind))}</h2>\n",
                  _table("Scores", head, [[row_label(row), *(score_text(row, c) for c in cols)] for row in board.rows]),
                  _table("Δ against raw", head, [[row_label(row), *(delta_text(row.delta.get(c)) for c in cols)]
                                                 for row in board.rows if row.delta is not None])]
    parts += ["<h2>Tasks</h2>\n",
              _table("The labelled tasks", *task_rows(board)),
              f'<p class="legend">* significant Δ (its 95% interval excludes 0); ± sample standard deviation over seeds. '
              f"Intervals: {_e(board.interval_method.method)}; {board.interval_method.n_resamples:,} resamples.</p>\n",
              "</main>\n</body>\n</html>\n"]
    return "".join(parts)


__all__ = ["INTERVAL_NOTE", "TYPE_LABELS", "across_backbones", "delta_text", "raw_side_by_side",
           "render_task_types_html", "render_task_types_markdown", "row_label", "run_text", "score_text", "summary_table", "task_label", "type_label", "verdict"]
