"""The model card (``README.md``) of an export, rendered from its provenance record.

The record (``flow_plugin_export.json`` in the folder, built by :mod:`.export`) holds every
fact; the card only presents it: how to load the folder, its modules, the backbone and
pooling, the calibrator and its parameters, the fit corpus (file name, size, sha256), the
agreement measured at export, and the benchmark scores when a leaderboard row was given.
"""

from __future__ import annotations

import json
from typing import Any

from flow_plugin.data.fit_corpus import TARGET

#: the end-to-end difference beyond which the card says the calibrator magnifies its input's rounding
#: (the exporter's threshold, flow_plugin.integrations.sentence_transformers.export.SENSITIVE_CALIBRATOR)
SENSITIVE_CALIBRATOR = 1e-3


def _value(value: Any) -> str:
    return "`" + json.dumps(value, ensure_ascii=False) + "`"


def _front_matter(record: dict[str, Any]) -> list[str]:
    backbone = record["backbone"]
    tags = ["sentence-transformers", "sentence-similarity", "feature-extraction", "flow-plugin",
            f"calibration-{record['calibrator']['method']}"]
    lines = ["---", "library_name: sentence-transformers", "pipeline_tag: sentence-similarity", "tags:"]
    lines += [f"- {tag}" for tag in tags]
    if backbone.get("license"):
        lines.append(f"license: {backbone['license']}")
    lines += [f"base_model: {backbone['hub_id']}"] if backbone.get("hub_id") else []
    lines += ["---", ""]
    return lines


def _usage(record: dict[str, Any]) -> list[str]:
    if record["needs_flow_plugin"]:
        requirement = record["requirements"]["flow-plugin"]["specifier"]
        return [
            "## Use", "",
            f"The flow is a custom module, so this folder needs **flow-plugin{requirement}** installed "
            "(`pip install flow-plugin`; `modules.json` names `flow_plugin.integrations.sentence_transformers."
            "flow_module.FlowCalibration`) and `trust_remote_code=True`, which lets sentence-transformers import "
            "that installed class:", "",
            "```python", "from sentence_transformers import SentenceTransformer", "",
            'model = SentenceTransformer("path/to/this/folder", trust_remote_code=True)',
            'embeddings = model.encode(["A man is playing a guitar.", "Someone plays an instrument."])', "```", "",
        ]
    return [
        "## Use", "",
        "Every module is one of sentence-transformers' own: the folder loads without flow-plugin and without "
        "custom code.", "",
        "```python", "from sentence_transformers import SentenceTransformer", "",
        'model = SentenceTransformer("path/to/this/folder")',
        'embeddings = model.encode(["A man is playing a guitar.", "Someone plays an instrument."])', "```", "",
        "Compare embeddings by cosine similarity (the model's similarity function); they are not normalised.", "",
    ]


def _calibrator(record: dict[str, Any]) -> list[str]:
    calibrator = record["calibrator"]
    lines = ["## Calibrator", "",
             f"- method: **{calibrator['method']}** (`{calibrator['class']}`), "
             f"{calibrator['n_features_in']} -> {calibrator['n_features_out']} dimensions"]
    params = calibrator["params"]
    lines.append("- parameters: " + (", ".join(f"`{key}`={_value(value)}" for key, value in params.items()) or "none"))
    effective = calibrator.get("effective_params") or {}
    if effective:
        lines.append("- values the fit ran with: " + ", ".join(f"`{key}`={_value(value)}" for key, value in effective.items()))
    if calibrator.get("adapted"):
        lines.append(f"- adapted to a small corpus: {calibrator['adapted']}")
    if calibrator.get("from_file"):
        source = calibrator["from_file"]
        lines.append(f"- taken from the calibrator file `{source['name']}` (sha256 `{source['sha256']}`), "
                     f"fitted on {calibrator['n_samples_fit']} embeddings")
    if calibrator.get("fit_log_likelihood") is not None:
        lines.append(f"- fit log-likelihood {calibrator['fit_log_likelihood']:.4f} nats "
                     f"({calibrator['fit_bits_per_dim']:.4f} bits per dimension)")
    if calibrator["method"] != "flow":
        lines.append("- stored as standard `Dense` layers, computed from the fitted calibrator in float64 and stored in "
                     "float32: a centring x - c (identity weight, bias -c, c its fitted mean), then the projection "
                     "z = (x - c) W + b, so that the large common mean is removed before the projection, as the "
                     "calibrator computes it (raw embeddings: one identity `Dense`)")
    return [*lines, ""]


def _fit_corpus(record: dict[str, Any]) -> list[str]:
    corpus = record.get("fit_corpus")
    if corpus is None:
        reason = ("raw embeddings need no fit" if record["calibrator"]["method"] == "raw"
                  else "the calibrator came from a file; its fit corpus is not recorded in it")
        return ["## Fit corpus", "", f"None: {reason}.", ""]
    lines = ["## Fit corpus", "",
             f"- file `{corpus['file']}`: {corpus['sentences']} sentences ({corpus['unique_sentences']} distinct), "
             f"sha256 `{corpus['sha256']}`",
             f"- fitted on {corpus['fit_sentences']} of them ({corpus['sampling']}; duplicates: "
             f"{corpus['duplicates']}), in canonical order, embeddings computed in {record['fit_precision']}",
             ]
    return [*lines, ""]


def _agreement(record: dict[str, Any]) -> list[str]:
    agreement = record.get("agreement")
    if agreement is None:
        return []
    return ["## Agreement with flow-plugin", "",
            f"Measured when this folder was written, on {agreement['sentences']} sentences "
            f"({agreement['precision']}, {agreement['device']}): `SentenceTransformer(folder).encode` against "
            f"flow-plugin's own calibrated embeddings ({agreement['reference_precision']} backbone):", "",
            f"- embeddings: largest difference {agreement['max_abs_diff']:.2e}, at most "
            f"{agreement['max_rel_diff']:.2e} of an embedding's largest component;",
            f"- cosine similarities between the sentences: at most {agreement['max_cosine_diff']:.2e} apart;",
            f"- of which the backbone and pooling"
            + (" (padded batches here, none in flow-plugin)" if record["backbone"].get("hub_id") else "") + ": "
            f"{agreement['pooled_rel_diff']:.2e}, and the calibration module on the same input: "
            f"{agreement['calibration_rel_diff']:.2e}.", "",
            *(["A backbone running in bf16 (flow-plugin's `precision=\"auto\"` on GPUs and bf16 CPUs) moves "
               "embeddings far more than this (flow-plugin's documentation, docs/export.md, \"Agreement\").", ""]
              if agreement["max_rel_diff"] <= SENSITIVE_CALIBRATOR else
              [f"**Note:** this calibrator magnifies tiny differences of its input (the pooled embeddings agree to "
               f"{agreement['pooled_rel_diff']:.1e}), the sign of a poor fit: fit it on more sentences "
               f"({record['calibrator']['n_samples_fit']} for {record['calibrator']['n_features_in']} dimensions "
               "now).", ""])]


def _benchmark(record: dict[str, Any]) -> list[str]:
    benchmark = record.get("benchmark")
    if benchmark is None:
        return []
    lines = ["## Benchmark", "",
             f"Scores of `{benchmark['model']}` in the leaderboard"
             + (f" `{benchmark['leaderboard']}`" if benchmark.get("leaderboard") else "") + f" (row `{benchmark['row']}`"
             + (f", computed in {benchmark['precision']}" if benchmark.get("precision") else "") + "), in points:", ""]
    exported = record.get("fit_corpus")
    if benchmark.get("fit_corpus") and (exported is None or benchmark["fit_corpus"] != f"file {exported['file']}"):
        lines += [f"The benchmark fitted its calibrator with fit_corpus `{benchmark['fit_corpus']}`"
                  + (" (each task's own text)" if benchmark["fit_corpus"] == TARGET else "")
                  + "; this folder's calibrator was fitted as described above, so its scores can differ.", ""]
    lines += ["| task | score | metric | protocol | wmean |", "|---|---|---|---|---|"]
    for score in benchmark["scores"]:
        wmean = "" if score.get("wmean") is None else f"{score['wmean']:.2f}"
        lines.append(f"| {score['task']} | {score['score']:.2f} | {score['metric']} | {score['protocol']} | {wmean} |")
    if benchmark.get("average") is not None:
        wmean = "" if benchmark.get("average_wmean") is None else f"{benchmark['average_wmean']:.2f}"
        lines.append(f"| average ({benchmark['n_tasks']} tasks) | {benchmark['average']:.2f} | | | {wmean} |")
    return [*lines, ""]


def _backbone(record: dict[str, Any]) -> list[str]:
    backbone = record["backbone"]
    if not backbone.get("hub_id"):  # a local sentence-transformers folder
        prompts = backbone.get("prompts") or {}
        default = backbone.get("default_prompt_name")
        return ["## Base model", "",
                f"- the local sentence-transformers folder `{backbone['folder']}`: its modules, prompts and similarity "
                f"function as it saved them; max_seq_length {backbone['max_seq_length']}",
                "- prompts: " + (", ".join(f"`{name}` = {_value(text)}" for name, text in prompts.items()) or "none")
                + (f"; the default, `{default}`, is what the fit corpus was embedded with" if default else
                   "; the fit corpus was embedded without a prompt"), ""]
    return ["## Backbone", "",
            f"- `{backbone['hub_id']}`" + (f" at revision `{backbone['revision']}`" if backbone.get("revision") else "")
            + (f": {backbone['description']}" if backbone.get("description") else ""),
            f"- pooling {backbone['pooling']!r}, max_seq_length {backbone['max_seq_length']}, "
            f"{backbone['layers_kept']} of {backbone['layers_total']} transformer layers kept",
            f"- flow-plugin registry model `{record['model']}`, configuration revision `{record['revision']}`", ""]


def render_card(record: dict[str, Any]) -> str:
    """``README.md`` for an export folder, from its provenance record."""
    backbone = record["backbone"]
    calibrator = record["calibrator"]
    base = (f"`{backbone['hub_id']}` with {backbone['pooling']!r} pooling" if backbone.get("hub_id") else
            f"The sentence-transformers model `{backbone['folder']}`")
    lines = _front_matter(record)
    lines += [f"# {record['model']} (sentence-transformers export)", "",
              f"{base} and the **{calibrator['method']}** calibrator "
              f"fitted by flow-plugin (BERT-flow, Li et al., EMNLP 2020, arXiv 2011.05864, and its SN, NATSV and "
              f"whitening baselines), exported by flow-plugin {record['versions']['flow-plugin']} as a "
              "sentence-transformers folder.", ""]
    lines += _usage(record)
    lines += ["## Modules", ""]
    lines += [f"{index}. {description}" for index, description in enumerate(record["modules"])]
    lines += ["", *_backbone(record)]
    lines += _calibrator(record)
    lines += _fit_corpus(record)
    lines += _agreement(record)
    lines += _benchmark(record)
    versions = ", ".join(f"{name} {version}" for name, version in record["versions"].items())
    lines += ["## Provenance", "", f"Written {record['created']} with {versions}. Every fact above is in "
              "`flow_plugin_export.json`.", ""]
    return "\n".join(lines)
