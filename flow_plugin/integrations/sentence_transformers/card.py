"""The ``README.md`` of an export folder: what it is, how to load it, how it was fitted; with ``--leaderboard``, the
scores of the model's row (:class:`BenchmarkScores`, built by the leaderboard: ``leaderboard.benchmark_scores``).
Standard library only, so that the leaderboard, a layer above, imports it without sentence-transformers.
"""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass
from importlib.metadata import version
from typing import Any

from flow_plugin import __version__
from flow_plugin.data.fit_corpus import TARGET


@dataclass(frozen=True)
class BenchmarkScores:
    """A leaderboard row as the README shows it: the model's row at this configuration's revision (a row of another
    revision was computed with another configuration), its fit corpus, averages, precision and each task's score."""

    leaderboard: str | None
    row: str
    model: str
    revision: str
    fit_corpus: str | None
    n_tasks: int
    average: float | None
    average_wmean: float | None
    precision: str | None
    #: per task: {"task", "score", "metric", "protocol", "wmean"}, in points
    scores: tuple[dict[str, Any], ...]


def _usage(flow: bool) -> list[str]:
    note = (f"The flow is flow-plugin's one custom module (`FlowCalibration`): loading needs flow-plugin>={__version__} "
            "installed (`pip install flow-plugin`) and `trust_remote_code=True`." if flow else
            "Every module is one of sentence-transformers' own: the folder loads without flow-plugin and without "
            "custom code. Compare embeddings by cosine similarity; they are not normalised.")
    return ["## Use", "", "```python", "from sentence_transformers import SentenceTransformer", "",
            f'model = SentenceTransformer("path/to/this/folder"{", trust_remote_code=True" if flow else ""})',
            'embeddings = model.encode(["A man is playing a guitar.", "Someone plays an instrument."])', "```", "",
            note, ""]


def _values(params: dict[str, Any]) -> str:
    return ", ".join(f"`{key}`=`{json.dumps(value, ensure_ascii=False, default=str)}`" for key, value in params.items())


def _calibrator(calibrator: Any) -> list[str]:
    effective = {key: value for key, value in calibrator.effective_params().items() if key != "signals_"}
    likelihood = getattr(calibrator, "fit_log_likelihood_", None)
    return [f"- calibrator: **{calibrator.method}** (`{type(calibrator).__name__}`), {calibrator.n_features_in_} -> "
            f"{calibrator.n_features_out_} dimensions; parameters: {_values(calibrator.result_params()) or 'none'}",
            *([f"- values the fit ran with: {_values(effective)}"] if effective else []),
            *([f"- adapted to a small corpus: {calibrator.adapted_}"] if getattr(calibrator, "adapted_", None) else []),
            *([f"- fit log-likelihood {likelihood:.4f} nats"] if likelihood is not None else [])]


def _benchmark(board: BenchmarkScores) -> list[str]:
    fitted = "" if not board.fit_corpus else (f"; the benchmark fitted with fit_corpus `{board.fit_corpus}`" + (
        " (each task's own text)" if board.fit_corpus == TARGET else "") + ", so this folder's scores can differ")
    lines = ["## Benchmark", "", f"Scores of `{board.model}`" + (f" in `{board.leaderboard}`" if board.leaderboard else "")
             + f" (row `{board.row}`" + (f", computed in {board.precision}" if board.precision else "")
             + f"), in points{fitted}:", "", "| task | score | metric | protocol | wmean |", "|---|---|---|---|---|"]
    for score in board.scores:
        wmean = "" if score.get("wmean") is None else f"{score['wmean']:.2f}"
        lines.append(f"| {score['task']} | {score['score']:.2f} | {score['metric']} | {score['protocol']} | {wmean} |")
    if board.average is not None:
        wmean = "" if board.average_wmean is None else f"{board.average_wmean:.2f}"
        lines.append(f"| average ({board.n_tasks} tasks) | {board.average:.2f} | | | {wmean} |")
    return [*lines, ""]


def render_readme(facts: dict[str, Any]) -> str:
    """The README from the export's facts: ``model``, ``base`` (a phrase), ``hub_id`` and ``license`` (or None),
    ``calibrator`` (fitted), ``source`` (what it was fitted on), ``modules`` (a line each), ``benchmark`` (or None)."""
    calibrator = facts["calibrator"]
    front = ["---", "library_name: sentence-transformers", "pipeline_tag: sentence-similarity",
             f"tags: [sentence-transformers, flow-plugin, calibration-{calibrator.method}]",
             *([f"license: {facts['license']}"] if facts.get("license") else []),
             *([f"base_model: {facts['hub_id']}"] if facts.get("hub_id") else []), "---", ""]
    versions = ", ".join(f"{name} {version(name)}" for name in ("sentence-transformers", "transformers", "torch"))
    written = datetime.datetime.now(tz=datetime.timezone.utc).isoformat(timespec="seconds")
    return "\n".join([
        *front, f"# {facts['model']} (sentence-transformers export)", "",
        f"A base model and the **{calibrator.method}** calibrator fitted on its embeddings by flow-plugin (BERT-flow, "
        "Li et al., EMNLP 2020, arXiv 2011.05864, and its baselines), as a sentence-transformers folder.", "",
        *_usage(calibrator.method == "flow"),
        "## Modules", "", *(f"{index}. {line}" for index, line in enumerate(facts["modules"])), "",
        "## Fit", "", f"- base: {facts['base']}", *_calibrator(calibrator), f"- fitted on {facts['source']}", "",
        *(_benchmark(facts["benchmark"]) if facts.get("benchmark") else []),
        f"Written {written} by flow-plugin {__version__} with {versions}. How closely such a folder reproduces "
        "flow-plugin's embeddings: flow-plugin's docs/export.md and benchmarks/export_agreement.py.", ""])
