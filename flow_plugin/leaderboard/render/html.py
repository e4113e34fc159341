"""The leaderboard as one HTML page beside its chart, and the index page of a leaderboards folder.

The page opens with the board's chart (``<stem>.png`` next to it), then answers which calibrator wins on the board's
backbone (the compare stage's :class:`~flow_plugin.leaderboard.compare.Headline`: by how much against the raw
backbone and the best linear baseline, with the intervals), then shows the table, sorted by the average and fitting
a 1280 px window (a cell's interval wraps under its value), with the explanations folded away. The index says per
board the best fixed calibrator and auto's Δ against raw on the average, with the intervals. The page holds
everything else it needs: its CSS and JavaScript (``page/leaderboard.css``
and ``page/leaderboard.js`` next to this module: plain JavaScript, no library), the leaderboard JSON as
written (``<script type="application/json" id="board-data">``) and its page view (:func:`page_view`,
``id="view-data"``: every cell's value and text, read from the :class:`~flow_plugin.leaderboard.compare.Compared`).
It loads nothing from a network or a server (its chart from its own folder), so it works opened from disk as well
as served. The same JSON gives the same bytes (with matplotlib; without it the page says it has no chart).
"""

from __future__ import annotations

import html
import json
import re
from importlib import resources
from typing import Any

from flow_plugin.calibration.names import LINEAR_BASELINES
from flow_plugin.data.tasks import task_label
from flow_plugin.leaderboard.compare import Compared, DeltaCell, Headline, Stats
from flow_plugin.leaderboard.models import AVERAGE, Leaderboard, is_number
from flow_plugin.leaderboard.render.text import (
    BEST_LINEAR,
    CHART_CAPTION,
    INTERVAL_NOTE,
    NAME_COLUMNS,
    NO_CHART,
    SEEDS_NOTE,
    VIEWS,
    delta_parts,
    delta_text,
    fmt,
    stats_text,
    with_spread,
)
from flow_plugin.protocols import PROTOCOLS

_SCRIPT_JSON = re.compile(r'<script type="application/json" id="(?P<id>[\w-]+)">(?P<data>.*?)</script>', re.S)


def _asset(name: str) -> str:
    return resources.files("flow_plugin.leaderboard.render").joinpath("page", name).read_text(encoding="utf-8")


def embed_json(data: Any) -> str:
    """JSON that can stand inside a ``<script>`` element: every ``<`` escaped, so no ``</script>``
    or ``<!--`` in the data can end it (``\\u003c`` parses back to ``<``).

    >>> embed_json({"a": "</script>"})
    '{"a":"\\\\u003c/script>"}'
    """
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False).replace("<", "\\u003c")


def embedded_json(page: str) -> dict[str, Any]:
    """The JSON blocks of a page, by element id (what the page's script reads)."""
    return {match["id"]: json.loads(match["data"]) for match in _SCRIPT_JSON.finditer(page)}


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


# ---------------------------------------------------------------------------- the page view (JSON the script reads)
def significance(delta: dict[str, Any]) -> dict[str, Any]:
    """Whether a delta counts: only its 95% interval (``ci95: [lo, hi]``) decides, significant when it
    excludes 0. Without an interval (its per-pair cosines were not kept) it is undecided, whatever
    the spread over seeds.

    >>> significance({"mean": 1.0, "std": 0.4, "n": 5, "ci95": [-0.1, 2.1]})
    {'significant': False, 'basis': 'ci95'}
    >>> significance({"mean": 1.0, "std": 0.4, "n": 5, "ci95": [0.2, 1.9]})
    {'significant': True, 'basis': 'ci95'}
    >>> significance({"mean": 1.0, "std": 0.1, "n": 5})
    {'significant': None, 'basis': None}
    """
    interval = delta.get("ci95")
    if isinstance(interval, (list, tuple)) and len(interval) == 2 and all(is_number(v) for v in interval):
        return {"significant": bool(interval[0] > 0 or interval[1] < 0), "basis": "ci95"}
    return {"significant": None, "basis": None}


def _score_cell(stats: Stats | None) -> dict[str, Any] | None:
    """What the page shows of a score."""
    if stats is None:
        return None
    spread = stats.std if stats.n > 1 else None
    return {"value": stats.mean, "spread": spread, "n": stats.n, "text": with_spread(fmt(stats.mean), spread)}


def _delta_cell(found: DeltaCell | None) -> dict[str, Any] | None:
    """What the page shows of a Δ: its value and spread, its 95% interval where the leaderboard gives one,
    whether it is significant, and (an average over fewer tasks than the board's) the tasks it leaves out."""
    if found is None:
        return None
    stats = found.stats
    cell: dict[str, Any] = {"value": stats.mean, "spread": stats.std if stats.n > 1 else None, "n": stats.n}
    ci95 = found.interval.ci95 if found.interval is not None else None
    judged = significance({"ci95": ci95})
    if ci95 is not None and judged["basis"] == "ci95":
        cell["ci95"] = [ci95[0], ci95[1]]
    cell.update(judged)
    if found.without:
        cell["without"] = list(found.without)
    cell["text"] = delta_text(found)
    return cell


def page_view(compared: Compared) -> dict[str, Any]:
    """The page's data besides the leaderboard itself: columns and, per displayed row, its display
    columns, member row ids and a cell per protocol, view ("scores", "raw": Δ against the raw backbone,
    "linear": Δ against the best linear baseline) and column, as the compare stage computed them."""
    out = []
    for unit in compared.units:
        cells: dict[str, Any] = {}
        against: dict[str, Any] = {}
        for protocol in PROTOCOLS:
            raw, linear = unit.deltas[protocol]["raw"], unit.deltas[protocol]["linear"]
            cells[protocol] = {
                "scores": {c: _score_cell(unit.scores[protocol][c]) for c in compared.columns},
                "raw": {c: _delta_cell(raw.get(c)) for c in compared.columns},
                "linear": {c: _delta_cell(linear.get(c)) for c in compared.columns},
            }
            reference = unit.against[protocol]["linear"]
            against[protocol] = {"raw": "raw" if raw else None,
                                 "linear": reference.columns["calibrator"] if reference is not None else None}
        out.append({"key": unit.key, "rows": [row.id for row in unit.members], "columns": unit.columns,
                    "name": unit.name, "short_name": unit.short_name,
                    "seeds": unit.group.seeds if unit.group else None, "against": against, "cells": cells})
    return {
        "columns": [{"key": c, "label": "Avg" if c == AVERAGE else task_label(c),
                     "title": "Average over the tasks" if c == AVERAGE else c} for c in compared.columns],
        "protocols": list(PROTOCOLS),
        "views": list(VIEWS),
        "name_columns": [{"key": key, "label": label} for key, label in NAME_COLUMNS],
        "entries": out,
    }


# ---------------------------------------------------------------------------- the page
def _headline_rows(headline: Headline, several_backbones: bool) -> list[str]:
    """The summary table's rows of one backbone and protocol: its best row, and (when the raw backbone is
    best) the best calibrated one."""
    protocol = headline.protocol
    shown = [(headline.best, "highest average")]
    if headline.raw_wins and headline.best_calibrated is not None:
        shown.append((headline.best_calibrated, "best calibrated"))
    rows = []
    for unit, role in shown:
        raw = unit.deltas[protocol]["raw"].get(AVERAGE)
        linear, against = unit.deltas[protocol]["linear"].get(AVERAGE), unit.against[protocol]["linear"]
        if linear is not None and against is not None:
            versus = f'{_e(delta_text(linear))}<br><span class="against">against {_e(against.short_name)}</span>'
        elif unit.calibrator in LINEAR_BASELINES:  # a linear baseline with no Δ against one is the best itself
            versus = '<span class="against">it is the best linear baseline</span>'
        else:
            versus = "—"
        name = (f"{_e(unit.columns['backbone'])}: " if several_backbones else "") + _e(unit.short_name)
        linear_significant = " sig" if linear is not None and linear.interval is not None and linear.interval.significant else ""
        significant = " sig" if raw is not None and raw.interval is not None and raw.interval.significant else ""
        rows.append(
            f'<tr data-key="{_e(unit.key)}" data-protocol="{protocol}"><td>{protocol}</td>'
            f'<th scope="row">{name}<br><small>{role}</small></th>'
            f'<td class="num">{_e(stats_text(unit.scores[protocol][AVERAGE]))}</td>'
            f'<td class="num{significant}">{_e(delta_text(raw)) if raw is not None else "—"}</td>'
            f'<td class="num{linear_significant}">{versus}</td></tr>')
    return rows


def _summary(compared: Compared) -> str:
    """The first thing the page says: which row has the highest average, per backbone and protocol, and by
    how much it differs from the raw backbone and the best linear baseline, with the intervals."""
    if not compared.headlines:
        return '<section id="summary"><p>No complete row yet.</p></section>\n'
    several = len({headline.backbone for headline in compared.headlines}) > 1
    rows = [row for headline in compared.headlines for row in _headline_rows(headline, several)]
    backbone = "" if several else f" on {_e(compared.headlines[0].backbone)}"
    return (
        f'<section id="summary" aria-labelledby="summary-title">\n<h2 id="summary-title">Who wins{backbone}</h2>\n'
        '<table class="summary">\n<thead><tr><th scope="col">Protocol</th><th scope="col">Row</th>'
        '<th scope="col" class="num">Avg</th><th scope="col" class="num">Δ against raw [95% interval]</th>'
        '<th scope="col" class="num">Δ against the best linear baseline</th></tr></thead>\n<tbody>\n'
        + "\n".join(rows) + "\n</tbody>\n</table>\n"
        '<p class="legend">Averages over the tasks; * marks a Δ whose 95% interval excludes 0 (a real difference); '
        "a Δ without an interval is undecided. The table below starts sorted by the average.</p>\n</section>\n")


def _explanations() -> str:
    """How to read the page, folded away."""
    protocols = "; ".join(f"<em>{_e(name)}</em> {_e(text)}" for name, text in PROTOCOLS.items())
    return (
        '<details class="explain">\n<summary>How to read this page</summary>\n'
        f"<p>Spearman correlation × 100 between the cosine similarity of two sentence embeddings and the gold "
        f"scores. <strong>Protocol</strong>: {protocols}. <strong>View</strong>: the scores; the change (Δ) against "
        f"the raw backbone; or against {_e(BEST_LINEAR)}.</p>\n"
        f"<p>A calibrator run with several seeds is one row. {_e(SEEDS_NOTE)} {_e(INTERVAL_NOTE)} In the scores view "
        "the best value of each column among the rows shown is in bold. Sort by any column with its header; "
        "click a score for its provenance (hardware, precision, fit, dataset revision, date).</p>\n</details>\n")


def _chart(board: Leaderboard, stem: str, picture: bool) -> str:
    """The page's first element: the board's chart (``<stem>.png`` next to the page), or why there is none."""
    if not picture:
        return f'<p class="older" id="picture">{_e(NO_CHART)}</p>\n'
    alt = f"Bar chart of the Δ against the raw backbone of every calibrated row of {board.name}, per task"
    return (f'<figure class="picture chart" id="picture"><a href="{_e(stem)}.png"><img src="{_e(stem)}.png" '
            f'alt="{_e(alt)}"></a>\n<figcaption>{_e(CHART_CAPTION)}</figcaption></figure>\n')


def render_html(compared: Compared, stem: str | None = None, picture: bool = True) -> str:
    """The leaderboard page: its chart (``<stem>.png`` next to the page; unless ``picture`` is false), who wins,
    then a sortable, filterable table (by the average first), per-task charts and provenance. ``stem``: the
    leaderboard's file name without ``.json`` (default: its name), for the links to its JSON, Markdown and chart."""
    board = compared.board
    stem = stem or board.name
    title = f"Leaderboard: {board.name}"
    filters = "\n".join(
        f'      <label class="field" for="filter-{key}">{label}<select id="filter-{key}"></select></label>'
        for key, label in (("backbone", "Backbone"), ("calibrator", "Calibrator"), ("fit_corpus", "Fit corpus"),
                           ("duplicates", "Duplicates"))
    )
    protocols = "".join(
        f'<label><input type="radio" name="protocol" value="{p}"{" checked" if index == 0 else ""}> {p}</label>'
        for index, p in enumerate(PROTOCOLS)
    )
    views = "".join(
        f'<label><input type="radio" name="view" value="{v}"{" checked" if index == 0 else ""}> {text}</label>'
        for index, (v, text) in enumerate(VIEWS.items())
    )
    return "".join([
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n",
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n',
        f"<title>{_e(title)}</title>\n<style>\n{_asset('leaderboard.css')}</style>\n</head>\n<body>\n",
        '<header>\n',
        f'<p class="meta"><a href="index.html">All leaderboards</a> · {len(board.rows)} results rows, '
        f'{len(board.tasks)} tasks; updated {_e(board.updated)} by {_e(board.generated_by)} · '
        f'<a href="{_e(stem)}.json">{_e(stem)}.json</a> · <a href="{_e(stem)}.md">Markdown</a></p>\n'
        f'<h1>{_e(title)}</h1>\n</header>\n<main>\n',
        _chart(board, stem, picture),
        _summary(compared),
        *(f'<p class="older"><strong>Computed by an older procedure:</strong> {_e(note)}.</p>\n'
          for note in compared.notes),
        '<noscript><p><strong>This page needs JavaScript to draw its table; the same numbers are in '
        f'<a href="{_e(stem)}.md">{_e(stem)}.md</a>.</strong></p></noscript>\n',
        '<form class="controls" role="search" aria-label="Choose what the table shows" onsubmit="return false">\n',
        f'      <fieldset><legend>Protocol</legend>{protocols}</fieldset>\n',
        f'      <fieldset><legend>View</legend>{views}</fieldset>\n',
        filters, "\n",
        '      <label class="field" for="search">Search<input id="search" type="search" '
        'placeholder="e.g. flow, unique, nli"></label>\n',
        '      <p class="count" id="count" role="status" aria-live="polite"></p>\n',
        '</form>\n',
        '<p class="meta" id="constant"></p>\n',
        '<div class="table-wrap">\n<table id="board">\n',
        '<caption>One row per model variant (a seed group is one row: mean ± std over seeds), '
        'sorted by the average; sort by any column with its header.</caption>\n',
        '<thead id="board-head"></thead>\n<tbody id="board-body"></tbody>\n</table>\n</div>\n',
        '<p class="legend">* significant Δ (its 95% interval excludes 0); ± sample standard deviation over seeds; '
        '[lo, hi] 95% interval where the leaderboard gives one; — no value.</p>\n',
        _explanations(),
        '<section id="provenance" aria-live="polite" aria-label="Provenance of the selected score">'
        '<p>Click a score to see where it comes from.</p></section>\n',
        '<h2 id="charts-title">Per task</h2>\n',
        '<p class="legend"><span class="swatch pos"></span> gain, <span class="swatch neg"></span> loss; '
        'faint bars: not significant (or no interval); whiskers: the 95% interval, or ± std over seeds without one.</p>\n',
        '<div class="charts" id="charts"></div>\n</main>\n',
        f'<script type="application/json" id="board-data">{embed_json(board.model_dump(mode="json"))}</script>\n',
        f'<script type="application/json" id="view-data">{embed_json(page_view(compared))}</script>\n',
        f"<script>\n{_asset('leaderboard.js')}</script>\n</body>\n</html>\n",
    ])


def board_summary(compared: Compared, stem: str, has_chart: bool) -> dict[str, Any]:
    """What the index says about one leaderboard: its size and, per backbone (protocol "all"), the best fixed
    calibrator's and auto's Δ against raw on the average (:class:`~flow_plugin.leaderboard.compare.Headline`)."""
    board = compared.board
    backbones = sorted({(row.backbone or row.model, row.backbone_model) for row in board.rows})
    verdicts = []
    for headline in compared.headlines:
        if headline.protocol != "all":
            continue
        best, auto = headline.best_fixed, headline.auto
        verdicts.append({
            "backbone": headline.backbone,
            "best": best.short_name if best is not None else None,
            "best_delta": delta_parts(best.deltas["all"]["raw"].get(AVERAGE)) if best is not None else None,
            "auto_delta": delta_parts(auto.deltas["all"]["raw"].get(AVERAGE)) if auto is not None else None})
    return {"stem": stem, "name": board.name, "kind": "STS", "backbones": backbones, "rows": len(compared.units),
            "runs": len(board.rows), "tasks": len(board.tasks), "updated": board.updated, "has_chart": has_chart,
            "verdicts": verdicts, "average": "the average over the tasks"}


def _verdict_cells(summary: dict[str, Any]) -> tuple[str, str]:
    """The index's two answer cells of a board: the best fixed calibrator over its Δ, and auto's Δ (one entry per
    backbone)."""
    several = len(summary["verdicts"]) > 1
    best, auto = [], []
    for verdict in summary["verdicts"]:
        where = f'<span class="against">{_e(verdict["backbone"])}:</span> ' if several else ""
        best.append(f'{where}{_e(verdict["best"])}<br>{_delta_html(verdict["best_delta"])}'
                    if verdict["best"] else f"{where}—")
        auto.append(f"{where}{_delta_html(verdict['auto_delta'])}" if verdict["auto_delta"] else f"{where}—")
    return "<br>".join(best) or "—", "<br>".join(auto) or "—"


def _delta_html(parts: dict[str, Any] | None) -> str:
    """A Δ (:func:`~.text.delta_parts`) that may wrap before its interval, its value bold when significant."""
    if not parts:
        return "—"
    value = f"<strong>{_e(parts['value'])}</strong>" if parts["significant"] else _e(parts["value"])
    interval = f' <span class="ci">{_e(parts["interval"])}</span>' if parts["interval"] else ""
    return f'<span class="v">{value}</span>{interval}'


def render_index(summaries: list[dict[str, Any]]) -> str:
    """The index of a leaderboards folder: one line per leaderboard, by name: what it compares, the best fixed
    calibrator and auto's Δ against raw on the average (with the intervals), its size, date and files."""
    lines = []
    for s in sorted(summaries, key=lambda s: s["stem"]):
        stem = _e(s["stem"])
        backbones = "<br>".join(f"{_e(name)}" + (f" <small>({_e(model)})</small>" if model and model != name else "")
                                for name, model in s["backbones"])
        files = [f'<a href="{stem}.json">JSON</a>', f'<a href="{stem}.md">Markdown</a>']
        if s["has_chart"]:
            files.append(f'<a href="{stem}.png">{"picture" if s["kind"] == "task types" else "chart"}</a>')
        best, auto = _verdict_cells(s)
        updated = (s["updated"] or "—").replace("T", " ").replace("+00:00", " UTC")
        lines.append(
            f'<tr><th scope="row"><a href="{stem}.html">{_e(s["name"])}</a><br><small>{_e(s["kind"])} board</small>'
            f'</th><td>{backbones}</td><td>{best}</td><td>{auto}</td>'
            f'<td><span class="v">{s["rows"]} rows</span> <span class="v">({s["runs"]} runs),</span> '
            f'<span class="v">{s["tasks"]} tasks</span></td><td>{_e(updated)}</td>'
            f'<td>{" · ".join(f"<span class=v>{link}</span>" for link in files)}</td></tr>'
        )
    body = "\n".join(lines) or '<tr><td colspan="7">No leaderboards yet.</td></tr>'
    return "".join([
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n",
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n',
        f"<title>flow-plugin leaderboards</title>\n<style>\n{_asset('leaderboard.css')}</style>\n</head>\n<body>\n",
        "<main>\n<h1>flow-plugin leaderboards</h1>\n",
        "<p>Each leaderboard compares calibrators (raw, SN, NATSV, whitening, the gentle family, auto and BERT-flow "
        "variants) of a backbone on the same tasks: the STS boards on semantic similarity, the task-types boards on "
        "MTEB's labelled tasks of every type. Open one for its picture, its tables and the provenance of every "
        "score.</p>\n",
        '<div class="table-wrap">\n<table id="index" class="wrap">\n<thead><tr><th scope="col">Leaderboard</th>'
        '<th scope="col">Backbones</th><th scope="col">Best fixed calibrator: Δ against raw on average '
        '[95% interval]</th><th scope="col">auto: Δ against raw on average [95% interval]</th>'
        '<th scope="col">Size</th><th scope="col">Updated</th><th scope="col">Files</th></tr></thead>\n',
        f"<tbody>\n{body}\n</tbody>\n</table>\n</div>\n",
        "<p class=\"legend\">Δ: score minus the raw backbone's, in points, on the average (an STS board: over its "
        "tasks, protocol all; a task-types board: over the task types); <strong>bold</strong> with *: its 95% "
        "interval excludes 0. The best fixed calibrator: the one map for every task (not auto, which chooses per "
        "task) with the highest average. Rows: as shown on the page, a seed group counted once; runs: the "
        "leaderboard's rows, one per model run.</p>\n</main>\n</body>\n</html>\n",
    ])
