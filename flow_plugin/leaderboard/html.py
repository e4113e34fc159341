"""The leaderboard as one self-contained HTML page, and the index page of a leaderboards folder.

The page holds everything it needs: its CSS and JavaScript (``page/leaderboard.css`` and
``page/leaderboard.js`` next to this module: plain JavaScript, no library), the leaderboard JSON
as written (``<script type="application/json" id="board-data">``) and its page view
(:func:`~flow_plugin.leaderboard.view.page_view`, ``id="view-data"``). It loads nothing from
a network or a server, so it works opened from disk as well as served. Rendering is a pure
function of the leaderboard (:class:`~flow_plugin.leaderboard.models.Leaderboard`): the same JSON
gives the same bytes.
"""

from __future__ import annotations

import html
import json
import re
from importlib import resources
from typing import Any

from flow_plugin.leaderboard.models import Leaderboard
from flow_plugin.leaderboard.units import board_units, procedure_notes
from flow_plugin.leaderboard.view import page_view

_SCRIPT_JSON = re.compile(r'<script type="application/json" id="(?P<id>[\w-]+)">(?P<data>.*?)</script>', re.S)


def _asset(name: str) -> str:
    return resources.files("flow_plugin.leaderboard").joinpath("page", name).read_text(encoding="utf-8")


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


_INTRO = """\
<p>Spearman correlation × 100 between the cosine similarity of two sentence embeddings and the gold
scores. <strong>Protocol</strong> <em>all</em> pools every test pair of a task (as MTEB and SimCSE
report); <em>wmean</em> averages per subset, weighted by pair count (SentEval and the BERT-flow paper).
<strong>View</strong>: the scores; the change (Δ) against the raw backbone; or against the best linear
baseline (the one of SN, NATSV, SN+NATSV and whitening with the highest average under the chosen
protocol) of the same backbone, loader settings and fit corpus.</p>
<p>A calibrator run with several seeds is one row: the mean ± the sample standard deviation over
its seeds. A Δ is shown with its 95% confidence interval [low, high] (a paired bootstrap over the
test pairs, with the seeds resampled for seeded rows); one marked <strong>*</strong> is significant:
its interval excludes 0. A Δ without an interval (its per-pair cosines were not kept) is never marked. In the scores view the best value of each column among the rows shown is in bold.
Sort by any column with its header; click a score for its provenance (hardware, precision, fit,
dataset revision, date).</p>
"""


def render_html(board: Leaderboard, stem: str | None = None) -> str:
    """The leaderboard page: a sortable, filterable table, per-task charts and provenance.
    ``stem``: the leaderboard's file name without ``.json`` (default: its name), for the links to
    its JSON, Markdown and chart."""
    stem = stem or board.name
    title = f"Leaderboard: {board.name}"
    rows = len(board.rows)
    filters = "\n".join(
        f'      <label class="field" for="filter-{key}">{label}<select id="filter-{key}"></select></label>'
        for key, label in (("backbone", "Backbone"), ("calibrator", "Calibrator"), ("fit_corpus", "Fit corpus"),
                           ("duplicates", "Duplicates"))
    )
    protocols = "".join(
        f'<label><input type="radio" name="protocol" value="{p}"{" checked" if p == "all" else ""}> {p}</label>'
        for p in ("all", "wmean")
    )
    views = "".join(
        f'<label><input type="radio" name="view" value="{v}"{" checked" if v == "scores" else ""}> {text}</label>'
        for v, text in (("scores", "Scores"), ("raw", "Δ against raw"), ("linear", "Δ against best linear"))
    )
    return "".join([
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n",
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n',
        f"<title>{_e(title)}</title>\n<style>\n{_asset('leaderboard.css')}</style>\n</head>\n<body>\n",
        '<header>\n',
        f'<p><a href="index.html">All leaderboards</a></p>\n<h1>{_e(title)}</h1>\n',
        f'<p class="meta">{rows} results rows, {len(board.tasks)} tasks; updated {_e(board.updated)} '
        f'by {_e(board.generated_by)}. Data: <a href="{_e(stem)}.json">{_e(stem)}.json</a>, '
        f'<a href="{_e(stem)}.md">Markdown</a>.</p>\n</header>\n<main>\n',
        _INTRO,
        *(f'<p class="older"><strong>Computed by an older procedure:</strong> {_e(note)}.</p>\n'
          for note in procedure_notes(board)),
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
        '<caption>Rows: one per model variant; a seed group is one row (mean ± std over seeds).</caption>\n',
        '<thead id="board-head"></thead>\n<tbody id="board-body"></tbody>\n</table>\n</div>\n',
        '<p class="legend">* significant Δ (its 95% interval excludes 0); ± sample standard deviation over seeds; '
        '[lo, hi] 95% interval where the leaderboard gives one; — no value.</p>\n',
        '<section id="provenance" aria-live="polite" aria-label="Provenance of the selected score">'
        '<p>Click a score to see where it comes from.</p></section>\n',
        '<h2 id="charts-title">Per task</h2>\n',
        '<p class="legend"><span class="swatch pos"></span> gain, <span class="swatch neg"></span> loss; '
        'faint bars: not significant (or no interval); whiskers: the 95% interval, or ± std over seeds without one.</p>\n',
        '<div class="charts" id="charts"></div>\n</main>\n',
        f'<script type="application/json" id="board-data">{embed_json(board.model_dump(mode="json"))}</script>\n',
        f'<script type="application/json" id="view-data">{embed_json(page_view(board))}</script>\n',
        f"<script>\n{_asset('leaderboard.js')}</script>\n</body>\n</html>\n",
    ])


def board_summary(board: Leaderboard, stem: str, has_chart: bool) -> dict[str, Any]:
    """What the index says about one leaderboard."""
    backbones = sorted({(row.backbone or row.model, row.backbone_model) for row in board.rows})
    entries = len(board_units(board))  # as the page shows them: a seed group once
    return {"stem": stem, "name": board.name, "backbones": backbones, "rows": entries, "runs": len(board.rows),
            "tasks": len(board.tasks), "updated": board.updated, "has_chart": has_chart}


def render_index(summaries: list[dict[str, Any]]) -> str:
    """The index of a leaderboards folder: one line per leaderboard, by name."""
    lines = []
    for s in sorted(summaries, key=lambda s: s["stem"]):
        stem = _e(s["stem"])
        backbones = "<br>".join(f"{_e(name)}" + (f" <small>({_e(model)})</small>" if model and model != name else "")
                                for name, model in s["backbones"])
        files = [f'<a href="{stem}.json">JSON</a>', f'<a href="{stem}.md">Markdown</a>']
        if s["has_chart"]:
            files.append(f'<a href="{stem}.png">chart</a>')
        lines.append(
            f'<tr><th scope="row"><a href="{stem}.html">{_e(s["name"])}</a></th><td>{backbones}</td>'
            f'<td class="num">{s["rows"]}</td><td class="num">{s["runs"]}</td><td class="num">{s["tasks"]}</td>'
            f'<td>{_e((s["updated"] or "—").replace("T", " ").replace("+00:00", " UTC"))}</td>'
            f'<td>{" · ".join(files)}</td></tr>'
        )
    body = "\n".join(lines) or '<tr><td colspan="7">No leaderboards yet.</td></tr>'
    return "".join([
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n",
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n',
        f"<title>flow-plugin leaderboards</title>\n<style>\n{_asset('leaderboard.css')}</style>\n</head>\n<body>\n",
        "<main>\n<h1>flow-plugin leaderboards</h1>\n",
        "<p>Each leaderboard compares calibrators (raw, SN, NATSV, whitening and BERT-flow variants) of a "
        "backbone on the same tasks. Open one for its sortable table, per-task charts and the provenance of "
        "every score.</p>\n",
        '<div class="table-wrap">\n<table id="index">\n<thead><tr><th scope="col">Leaderboard</th>'
        '<th scope="col">Backbones</th><th scope="col" class="num">Rows</th><th scope="col" class="num">Runs</th>'
        '<th scope="col" class="num">Tasks</th><th scope="col">Updated</th><th scope="col">Files</th></tr></thead>\n',
        f"<tbody>\n{body}\n</tbody>\n</table>\n</div>\n",
        "<p class=\"legend\">Rows: as shown on the page, a seed group counted once; runs: the leaderboard's "
        "rows, one per model run.</p>\n</main>\n</body>\n</html>\n",
    ])
