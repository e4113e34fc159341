"""The BERT-flow paper's evaluations for one backbone, in one run (``flow-plugin paper``, or
:func:`run_paper` from Python).

Sections (Li et al., EMNLP 2020):

* ``sts`` (tables 2-3): the 7 SentEval-format STS sets. For each set and calibrator, a fresh
  calibrator is fitted on every sentence of every split of that set (the paper's "target"
  setting; never the scores) and the cosine of each test pair is correlated with the gold
  score: Spearman per subset, ``all`` (pairs of all subsets pooled) and ``wmean`` (per-subset
  Spearman weighted by pair count: SentEval's and the paper's number).
* ``qnli`` (table 4): GLUE QNLI dev as unsupervised question-answer entailment: ROC AUC of
  cosine(question, sentence) against the entailment label; calibrators fitted on QNLI dev's
  questions and sentences (unlabelled).
* ``lexical`` (section 4.4, table 6): on STS-B test, Spearman correlation of the word edit
  distance of each pair with the gold score, the raw cosine and each calibrated cosine, over
  all pairs and over the pairs with edit distance <= 4 (calibrators fitted on STS-B's target corpus).
* ``isotropy``: diagnostics of the raw and each calibrated embedding of the unique STS-B test
  sentences (same STS-B fits), and PNG plots of their singular-value spectra.

Every sentence goes through the backbone once: one process-wide cached encoder serves every
corpus and calibrator. Everything lands in ``<out>/paper.json`` (written atomically) and
``<out>/spectra*.png``; a compact table is printed at the end.

A backbone name runs raw and the paper's five calibrators (sn, natsv, sn-natsv, whiten, flow); a
model name runs raw and that calibrator. This module imports nothing heavy at import time.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import logging
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from flow_plugin.data.fit_corpus import TARGET
from flow_plugin.data.senteval import (
    SENTEVAL_TASKS,
    available_splits,
    canonical_task,
    load_qnli_dev,
    load_split,
    resolve_senteval_root,
    task_sentences,
)
from flow_plugin.evaluation import (
    evaluate_sts,
    isotropy_report,
    lexical_similarity_correlations,
    paired_cosine,
    plot_spectra,
    roc_auc,
)
from flow_plugin.data.roots import DATA_ENV, data_root
from flow_plugin.protocols import AGGREGATES, PROTOCOLS
from flow_plugin.data.tasks import TASK_LABELS
from flow_plugin.calibration import CALIBRATOR_METHODS, CALIBRATOR_NAMES, calibrator_class
from flow_plugin.errors import DataFolderError, FlowPluginError, InputError, MissingExtraError, RegistryError
from flow_plugin.catalog.registry import MODEL_PREFIX, RegistryModel, default_registry, parse_model_name
from flow_plugin._io import atomic_write_json, make_output_folder

logger = logging.getLogger(__name__)

RESULT_FILE = "paper.json"
RESULT_FORMAT = "flow-plugin-paper"
RESULT_VERSION = 1
SECTIONS = ("sts", "qnli", "lexical", "isotropy")
MAX_EDIT_DISTANCE = 4
#: how each number of the report is computed (written into it as "protocols")
REPORT_PROTOCOLS = {
    "sts_fit": "target: a fresh calibrator per STS set, fitted on every sentence of every split of that set "
    "(scores never used); STS12-16 have only a test split, STS-B and SICK-R train+dev+test",
    "sts_similarity": "cosine of the two (calibrated) sentence embeddings",
    **{f"spearman.{name}": f"Spearman, {text}" for name, text in AGGREGATES.items()},
    "qnli.AUC": "ROC AUC of cosine(question, sentence) against label == entailment on GLUE QNLI dev; calibrators "
    "fitted on QNLI dev's questions and sentences (labels never used) (paper table 4)",
    "lexical": f"Spearman correlation of each pair's word edit distance (tokens = whitespace split) with the gold "
    f"score and with each cosine, STS-B test; 'all' pairs and 'small_edit' = edit distance <= {MAX_EDIT_DISTANCE} "
    "(paper section 4.4, table 6); calibrators fitted on STS-B's target corpus",
    "isotropy": "isotropy_report of the embeddings of the unique STS-B test sentences (raw, and each calibrator "
    "fitted on STS-B's target corpus); singular values of the centred matrix; 'unit_rows' repeats the scale-"
    "dependent diagnostics on rows scaled to unit length (what cosine sees)",
    "scale": "correlations and AUC on the 0..1 scale (the printed table shows x100)",
}


# ---------------------------------------------------------------------------- inputs
def resolve_model(model: str, calibrators: list[str] | None = None) -> tuple[Any, list[str]]:
    """(backbone spec, calibrators to run, raw first) for a backbone or model name: a backbone
    name runs the paper's six methods (raw, sn, natsv, sn-natsv, whiten, flow), a model name raw
    and its calibrator; ``calibrators`` (any calibrator names, the flow variants included) replaces
    either choice.

    Examples
    --------
    >>> [name for name in resolve_model("minilm-l6")[1]]
    ['raw', 'sn', 'natsv', 'sn-natsv', 'whiten', 'flow']
    >>> resolve_model("flow_plugin/minilm-l6-flow-ens")[1]
    ['raw', 'flow-ens']
    """
    registry = default_registry()
    short = model.removeprefix(MODEL_PREFIX)
    if short in registry:
        spec, chosen = registry[short], list(CALIBRATOR_METHODS)
    else:
        registry_model = parse_model_name(model, registry)  # the registry's error for unknown names
        spec, chosen = registry_model.backbone, ["raw", registry_model.calibrator]
    if calibrators is not None:
        unknown = [name for name in calibrators if name not in CALIBRATOR_NAMES]
        if unknown:
            raise RegistryError(f"unknown calibrator(s) {', '.join(unknown)}; choose from {', '.join(CALIBRATOR_NAMES)}")
        chosen = ["raw", *calibrators]
    ordered = [name for name in CALIBRATOR_NAMES if name in chosen]  # table order, no duplicates
    return spec, ordered


def resolve_data(data: Path | None, glue: Path | None) -> tuple[Path, Path | None, str | None]:
    """(SentEval root, GLUE folder or None, why QNLI has no data); ``data`` None: the data root
    (``$FLOW_PLUGIN_SHARED_DATA``)."""
    data = data if data is not None else data_root(beside_checkout=False)
    if data is None:
        raise DataFolderError(f"the paper's evaluations read the shared data folder (senteval/, glue/): give --data DIR "
                              f"or set {DATA_ENV}")
    data = Path(data).expanduser()
    if (data / "senteval" / "downstream").is_dir():
        root = data / "senteval"
    else:
        root = resolve_senteval_root(data)  # a SentEval folder itself, else a DataFolderError naming it
    if glue is not None:
        return root, Path(glue).expanduser(), None
    if (data / "glue" / "QNLI" / "dev.tsv").is_file():
        return root, data / "glue", None
    return root, None, (
        f"QNLI skipped: no glue/QNLI/dev.tsv under {data}; pass --glue DIR (the folder containing QNLI/dev.tsv) "
        "or --data with the shared data folder that holds both senteval/ and glue/"
    )


# ---------------------------------------------------------------------------- the run
@contextlib.contextmanager
def timed(timings: dict[str, float], key: str) -> Iterator[None]:
    """Record in ``timings[key]`` the seconds the ``with`` block took (also when it raises).

    >>> timings = {}
    >>> with timed(timings, "step"):
    ...     pass
    >>> list(timings), timings["step"] >= 0
    (['step'], True)
    """
    begin = time.perf_counter()
    try:
        yield
    finally:
        timings[key] = time.perf_counter() - begin


class _PaperRun:
    """State of one run: the shared encoder, the calibrator templates, the fit log."""

    def __init__(self, spec: Any, calibrators: list[str], *, options: Any, max_pairs: int | None) -> None:
        # torch and scikit-learn load when the evaluations run, not to parse their command line
        from flow_plugin.catalog.builders import build_calibrator, build_encoder

        self.spec = spec
        self.calibrators = calibrators
        self.max_pairs = max_pairs
        self.encoder = build_encoder(RegistryModel(spec, "raw"), options)
        device_name = str(self.encoder.backbone.device)
        self.templates = {name: build_calibrator(RegistryModel(spec, name), device=device_name) for name in calibrators}
        self.fits: list[dict[str, Any]] = []
        #: calibrator fits that failed ("<calibrator> on <corpus>: <error>")
        self.errors: list[str] = []
        self._requested: set[str] = set()
        self.n_requested = 0
        self._start_counts = (self.encoder.n_encoded, self.encoder.n_cache_hits)

    # ---------------------------------------------------------------- helpers
    def encode(self, sentences: list[str]) -> Any:
        self._requested.update(sentences)
        self.n_requested += len(sentences)
        return self.encoder.encode(sentences)

    def limit(self, pairs: Any) -> Any:
        """``pairs`` cut to the first ``max_pairs`` (an STSPairs or QNLIPairs), or unchanged."""
        n = self.max_pairs
        if n is None or len(pairs) <= n:
            return pairs
        changes: dict[str, Any] = {}
        for field in dataclasses.fields(pairs):
            value = getattr(pairs, field.name)
            if isinstance(value, tuple) or hasattr(value, "shape"):
                changes[field.name] = value[:n]
        return dataclasses.replace(pairs, **changes)

    def sts_split(self, root: Path, task: str, split: str) -> list[Any]:
        return [self.limit(pairs) for pairs in load_split(root, task, split)]

    def target_corpus(self, root: Path, task: str) -> list[str]:
        """Every sentence of every split of ``task`` (scored pairs; duplicates kept)."""
        if self.max_pairs is None:
            return task_sentences(root, task)
        sentences: list[str] = []
        for split in available_splits(task):
            for pairs in self.sts_split(root, task, split):
                sentences.extend(pairs.sentences1)
                sentences.extend(pairs.sentences2)
        return sentences

    def fit_all(self, corpus_name: str, description: str, sentences: list[str]) -> dict[str, Any]:
        """Fit every calibrator on ``sentences`` (one backbone pass: the encoder caches them); log each fit.

        A calibrator whose fit raises a flow-plugin error (say, too few sentences for whitening)
        is left out of the returned dict and recorded in ``errors``; the others go on.
        """
        # scikit-learn loads when the evaluations run
        from flow_plugin.catalog.fitting import fit_calibrator

        fitted: dict[str, Any] = {}
        for name, template in self.templates.items():
            model = self.spec.model_name(name)
            try:
                calibrator, fit = fit_calibrator(self, template, sentences, model=model, source=description,
                                                 context={"corpus": corpus_name})
            except FlowPluginError as error:  # one calibrator failing must not lose the others' results
                message = f"{type(error).__name__}: {error}"
                self.fits.append({"corpus": corpus_name, "source": description, "model": model, "calibrator": name,
                                  "n_sentences": len(sentences), "n_unique_sentences": len(set(sentences)),
                                  "error": message})
                self.errors.append(f"{name} on {corpus_name}: {message}")
                logger.error("%s: fitting %s failed, its numbers are left out: %s", corpus_name, name, error)
                continue
            record = fit.as_dict()
            if hasattr(calibrator, "n_degenerate_"):
                record["n_degenerate_directions"] = int(calibrator.n_degenerate_)
            if hasattr(calibrator, "fit_log_likelihood_"):
                record["initial_log_likelihood"] = float(calibrator.initial_log_likelihood_)
                record["n_steps"] = int(calibrator.n_steps_)
            self.fits.append(record)
            fitted[name] = calibrator
        logger.info("%s: fitted %s on %d sentences (%d unique) from %s", corpus_name, ", ".join(fitted),
                    len(sentences), len(set(sentences)), description)
        return fitted

    def encoder_report(self) -> dict[str, Any]:
        backbone = self.encoder.backbone
        n_encoded = self.encoder.n_encoded - self._start_counts[0]
        n_hits = self.encoder.n_cache_hits - self._start_counts[1]
        return {
            "key": self.encoder.key,
            "device": str(backbone.device),
            "precision": backbone.precision,
            "precision_choice": backbone.precision_choice.describe(),
            "batch_size": backbone.batch_size,
            "cache_dir": str(self.encoder.cache_dir) if self.encoder.cache_dir else None,
            "n_sentences_requested": self.n_requested,
            "n_unique_sentences_requested": len(self._requested),
            "n_backbone_encoded": n_encoded,
            "n_cache_hits": n_hits,
            "one_backbone_pass_per_unique_sentence": n_encoded <= len(self._requested),
            "note": "n_backbone_encoded counts the sentences this run sent through the backbone; with a fresh "
            "in-memory cache it equals n_unique_sentences_requested (every corpus and calibrator share one pass)",
        }


def _cosines(calibrator: Any, left: Any, right: Any) -> Any:
    return paired_cosine(calibrator.transform(left), calibrator.transform(right))


def _section_sts(state: _PaperRun, root: Path, tasks: list[str], progress: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    results: dict[str, Any] = {}
    stsb_fitted: dict[str, Any] = {}
    for task in tasks:
        progress.set_postfix_str(f"STS {task}")
        task_timing: dict[str, float] = {}
        with timed(task_timing, task):
            corpus = state.target_corpus(root, task)
            fitted = state.fit_all(f"{task} (target)", f"all splits of {task}", corpus)
            subsets = state.sts_split(root, task, "test")
            encoded = [(pairs, state.encode(list(pairs.sentences1)), state.encode(list(pairs.sentences2)))
                       for pairs in subsets]
            per_calibrator: dict[str, Any] = {}
            for name, calibrator in fitted.items():
                result = evaluate_sts({pairs.subset: (pairs.scores, _cosines(calibrator, left, right))
                                       for pairs, left, right in encoded})
                per_calibrator[name] = result.to_dict()
        results[task] = {
            "fit_corpus": {"policy": TARGET, "source": f"all splits of {task}", "n_sentences": len(corpus),
                           "n_unique_sentences": len(set(corpus))},
            "n_test_pairs": sum(len(pairs) for pairs in subsets),
            "calibrators": per_calibrator,
            "seconds": round(task_timing[task], 3),
        }
        if task == "STSBenchmark":
            stsb_fitted = fitted
        progress.update(1)
    return results, stsb_fitted


def _section_qnli(state: _PaperRun, glue: Path, progress: Any) -> dict[str, Any]:
    progress.set_postfix_str("QNLI")
    pairs = state.limit(load_qnli_dev(glue))
    questions, sentences = list(pairs.questions), list(pairs.sentences)
    corpus = questions + sentences
    fitted = state.fit_all("QNLI dev", "QNLI dev questions and sentences (unlabelled)", corpus)
    left, right = state.encode(questions), state.encode(sentences)
    auc = {name: roc_auc(pairs.labels, _cosines(calibrator, left, right)) for name, calibrator in fitted.items()}
    progress.update(1)
    return {
        "source": str(pairs.source),
        "n_pairs": len(pairs),
        "n_entailment": int(pairs.labels.sum()),
        "fit_corpus": {"policy": TARGET, "source": "QNLI dev questions + sentences", "n_sentences": len(corpus),
                       "n_unique_sentences": len(set(corpus))},
        "metric": "AUC",
        "auc": auc,
    }


def _section_lexical(state: _PaperRun, test_pairs: Any, fitted: dict[str, Any], progress: Any) -> dict[str, Any]:
    progress.set_postfix_str("lexical")
    left, right = state.encode(list(test_pairs.sentences1)), state.encode(list(test_pairs.sentences2))
    similarities = {name: _cosines(calibrator, left, right) for name, calibrator in fitted.items()}
    result = lexical_similarity_correlations(test_pairs.sentences1, test_pairs.sentences2, test_pairs.scores,
                                             similarities, max_edit_distance=MAX_EDIT_DISTANCE)
    result["data"] = f"STSBenchmark test ({len(test_pairs)} pairs)"
    progress.update(1)
    return result


def _section_isotropy(state: _PaperRun, test_pairs: Any, fitted: dict[str, Any], out: Path,
                      progress: Any) -> dict[str, Any]:
    progress.set_postfix_str("isotropy")
    sentences = list(dict.fromkeys([*test_pairs.sentences1, *test_pairs.sentences2]))
    embeddings = state.encode(sentences)
    reports: dict[str, Any] = {}
    for name, calibrator in fitted.items():
        calibrated = calibrator.transform(embeddings)
        reports[name] = isotropy_report(calibrated)
        # what cosine sees: the same diagnostics on rows scaled to unit length (scale-free isotropy score)
        norms = np.linalg.norm(calibrated.astype(np.float64), axis=1, keepdims=True)
        unit = isotropy_report(calibrated / np.maximum(norms, np.finfo(np.float64).tiny))
        reports[name]["unit_rows"] = {key: unit[key] for key in
                                      ("isotropy_score", "effective_rank", "top_k_variance_share", "mean_random_cosine")}
    labels = {name: calibrator_class(name).label or name for name in fitted}
    spectra = {labels[name]: report["singular_values"] for name, report in reports.items()}
    title = f"{state.spec.name}: singular values, STS-B test ({len(sentences)} sentences)"
    plots: list[Path] = []
    skipped = None
    try:
        plots.append(plot_spectra(spectra, out / "spectra.png", title=title))
        for name in fitted:
            if name != "raw" and "raw" in fitted:
                pair = {labels["raw"]: reports["raw"]["singular_values"], labels[name]: reports[name]["singular_values"]}
                plots.append(plot_spectra(pair, out / f"spectra-raw-vs-{name}.png",
                                          title=f"{state.spec.name}: raw vs {labels[name]}"))
    except MissingExtraError as error:  # matplotlib is an optional extra: the numbers do not need it
        skipped = f"spectra plots skipped: {error}"
        print(f"flow-plugin paper: warning: {skipped}", file=sys.stderr)
    progress.update(1)
    result = {
        "data": f"unique sentences of STSBenchmark test ({len(sentences)})",
        "calibrators": reports,
        "plots": [plot.name for plot in plots],
    }
    if skipped:
        result["plots_skipped"] = skipped
    return result


def run_paper(
    model: str,
    data: str | os.PathLike[str] | None,
    out: str | os.PathLike[str],
    *,
    glue: str | os.PathLike[str] | None = None,
    calibrators: list[str] | None = None,
    tasks: list[str] | None = None,
    skip: list[str] | tuple[str, ...] = (),
    max_pairs: int | None = None,
    options: Any = None,
    arguments: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Run the paper's evaluations; write ``<out>/paper.json`` and the PNGs; return the report.

    ``data`` is the shared data folder (``senteval/``, ``glue/``) or a SentEval folder; None: the data root
    (``$FLOW_PLUGIN_SHARED_DATA``). ``options`` (:class:`flow_plugin.encoding.options.EncoderOptions`) says how
    the backbone runs.
    """
    wall_start = time.perf_counter()
    timings: dict[str, float] = {}
    unknown_sections = [name for name in skip if name not in SECTIONS]
    if unknown_sections:
        raise InputError(f"unknown section(s) {', '.join(unknown_sections)} in --skip; choose from {', '.join(SECTIONS)}")
    if max_pairs is not None and (isinstance(max_pairs, bool) or max_pairs < 2):
        raise InputError(f"--max-pairs must be at least 2, got {max_pairs}")
    sections = [name for name in SECTIONS if name not in skip]
    task_list = list(dict.fromkeys(canonical_task(name) for name in tasks)) if tasks else list(SENTEVAL_TASKS)
    task_list = [name for name in SENTEVAL_TASKS if name in task_list]  # the paper's column order
    spec, calibrator_names = resolve_model(model, calibrators)
    root, glue_root, qnli_note = resolve_data(Path(data) if data is not None else None,
                                              Path(glue) if glue is not None else None)
    notes: list[str] = []
    if "qnli" in sections and glue_root is None:
        sections.remove("qnli")
        notes.append(qnli_note or "QNLI skipped")
        print(f"flow-plugin paper: {qnli_note}", file=sys.stderr)
    if not sections:
        raise InputError(f"nothing to run: every section ({', '.join(SECTIONS)}) is skipped")
    out = make_output_folder(out)
    if max_pairs is not None:
        notes.append(f"--max-pairs {max_pairs}: only the first {max_pairs} pairs of every subset/split and of QNLI dev "
                     "were read; these numbers are a smoke test, NOT the paper's protocol")

    state = _PaperRun(spec, calibrator_names, options=options, max_pairs=max_pairs)
    report = _report_head(state, model, arguments, {"senteval_root": str(root), "glue": str(glue_root) if glue_root
                                                    else None, "tasks": task_list, "max_pairs": max_pairs})
    report.update(sections=sections, protocols=REPORT_PROTOCOLS, notes=notes)
    _run_sections(state, report, root, glue_root, out, timings)
    report["summary"] = summarize(report)
    report["errors"] = state.errors
    report["fits"] = state.fits
    report["encoder"] = state.encoder_report()
    timings["total"] = time.perf_counter() - wall_start
    report["timings_seconds"] = {key: round(value, 3) for key, value in timings.items()}

    backbone = state.encoder.backbone
    report["machine"] = backbone.hardware()
    path = atomic_write_json(out / RESULT_FILE, report)
    report["result_file"] = str(path)
    return report


def _report_head(state: _PaperRun, model: str, arguments: dict[str, Any] | None, data: dict[str, Any]
                 ) -> dict[str, Any]:
    """The report's opening: its format, when, the command's arguments, the paper, the model and the data."""
    spec = state.spec
    return {
        "format": RESULT_FORMAT,
        "version": RESULT_VERSION,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "arguments": arguments,
        "paper": "Li et al., On the Sentence Embeddings from Pre-trained Language Models, EMNLP 2020 (arXiv 2011.05864)",
        "model": {
            "requested": model,
            "backbone": {
                "name": spec.name, "hub_id": spec.hub_id, "revision": spec.revision, "pooling": spec.pooling,
                "max_seq_length": spec.max_seq_length, "embedding_dim": spec.embedding_dim,
                "n_parameters": spec.n_parameters, "weights": spec.weights_location()[2],
                "registry_file": str(spec.source_file),
            },
            "calibrators": {
                name: {"model_name": spec.model_name(name), "class": type(template).__name__,
                       "params": template.get_params()}
                for name, template in state.templates.items()
            },
        },
        "data": data,
    }


def _run_sections(state: _PaperRun, report: dict[str, Any], root: Path, glue_root: Path | None, out: Path,
                  timings: dict[str, float]) -> None:
    """Run the report's sections into it, with one progress bar and each section's seconds in ``timings``."""
    sections, task_list, notes = report["sections"], report["data"]["tasks"], report["notes"]
    n_units = (len(task_list) if "sts" in sections else 0) + sum(name in sections for name in ("qnli", "lexical", "isotropy"))
    with tqdm(total=n_units, desc=f"paper {state.spec.name}", unit="step") as progress:
        stsb_fitted: dict[str, Any] = {}
        if "sts" in sections:
            with timed(timings, "sts"):
                report["sts"], stsb_fitted = _section_sts(state, root, task_list, progress)
        if "qnli" in sections:
            assert glue_root is not None
            with timed(timings, "qnli"):
                report["qnli"] = _section_qnli(state, glue_root, progress)
        if "lexical" in sections or "isotropy" in sections:
            with timed(timings, "stsb_fit_for_lexical_isotropy"):
                if not stsb_fitted:  # STS-B was not among the STS sets run: fit on its target corpus now
                    stsb_fitted = state.fit_all("STSBenchmark (target)", "all splits of STSBenchmark",
                                                state.target_corpus(root, "STSBenchmark"))
                test_pairs = state.limit(load_split(root, "STSBenchmark", "test")[0])
            if "lexical" in sections:
                with timed(timings, "lexical"):
                    report["lexical"] = _section_lexical(state, test_pairs, stsb_fitted, progress)
            if "isotropy" in sections:
                with timed(timings, "isotropy"):
                    report["isotropy"] = _section_isotropy(state, test_pairs, stsb_fitted, out, progress)
                if "plots_skipped" in report["isotropy"]:
                    notes.append(report["isotropy"]["plots_skipped"])
    for section in ("qnli", "lexical", "isotropy"):
        if section in report:
            report[section]["seconds"] = round(timings[section], 3)


# ---------------------------------------------------------------------------- summary and table
def summarize(report: dict[str, Any]) -> dict[str, Any]:
    """The headline numbers: STS Spearman (all and wmean) per calibrator and set, with their
    average over the sets run, and QNLI AUC per calibrator."""
    summary: dict[str, Any] = {"scale": "0..1"}
    sts = report.get("sts")
    if sts:
        calibrators = list(report["model"]["calibrators"])
        for protocol in PROTOCOLS:
            table: dict[str, Any] = {}
            for name in calibrators:
                row = {task: (sts[task]["calibrators"][name]["spearman"][protocol]
                              if name in sts[task]["calibrators"] else None) for task in sts}
                values = list(row.values())
                row["avg"] = None if None in values else sum(values) / len(values)
                table[name] = row
            summary[f"sts_spearman_{protocol}"] = table
    if "qnli" in report:
        summary["qnli_auc"] = {name: report["qnli"]["auc"].get(name) for name in report["model"]["calibrators"]}
    return summary


def _fmt(value: float | None, width: int = 7) -> str:
    return f"{'-':>{width}}" if value is None else f"{100 * value:>{width}.2f}"


def variant_labels(report: dict[str, Any]) -> dict[str, str]:
    """Calibrator name -> the model variant it makes of the backbone, as summary lines name it.

    >>> variant_labels({"model": {"calibrators": {"raw": {"model_name": "flow_plugin/minilm-l6"},
    ...                                          "flow": {"model_name": "flow_plugin/minilm-l6-flow"}}}})
    {'raw': 'minilm-l6 (raw)', 'flow': 'minilm-l6-flow'}
    """
    labels = {}
    for name, entry in report["model"]["calibrators"].items():
        model = entry["model_name"].removeprefix(MODEL_PREFIX)
        labels[name] = f"{model} (raw)" if name == "raw" else model
    return labels


def format_duration(seconds: float) -> str:
    """``seconds`` as a person reads it.

    >>> format_duration(12.34), format_duration(1154.0), format_duration(3725)
    ('12.3 s', '19 min 14 s', '1 h 2 min')
    """
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s" if minutes < 60 else f"{minutes // 60} h {minutes % 60} min"


def format_report(report: dict[str, Any]) -> str:
    """A compact text table of the report (x100); every line names the model variant it is about,
    and the last lines say the run time."""
    lines: list[str] = []
    backbone = report["model"]["backbone"]
    encoder = report["encoder"]
    lines.append(f"BERT-flow paper evaluations: {backbone['name']} ({backbone['hub_id']}, pooling {backbone['pooling']}, "
                 f"{encoder['device']}, precision {encoder.get('precision_choice') or encoder['precision']})")
    for note in report.get("notes", []):
        lines.append(f"NOTE: {note}")
    calibrators = list(report["model"]["calibrators"])
    labels = {**variant_labels(report), "gold": "gold"}
    name_width = max(8, *(len(label) for label in labels.values())) + 1
    if "sts" in report:
        lines += _sts_tables(report, labels, calibrators, name_width)
    if "qnli" in report:
        qnli = report["qnli"]
        lines.append("")
        lines.append(f"QNLI dev ({qnli['n_pairs']} pairs), AUC x100 of cosine(question, sentence) vs entailment; "
                     "fitted on its unlabelled text")
        lines.extend(f"{labels[name]:<{name_width}}{_fmt(qnli['auc'].get(name), 8)}" for name in calibrators)
    if "lexical" in report:
        lines += _lexical_table(report["lexical"], labels, calibrators, name_width)
    if "isotropy" in report:
        lines += _isotropy_table(report["isotropy"], labels, name_width)
    flows = [fit for fit in report.get("fits", []) if "fit_log_likelihood" in fit]
    if flows:
        lines.append("")
        lines.append("flow fits, mean log-likelihood (nats) / bits per dim on the fit corpus:")
        lines.append("  " + "; ".join(f"{fit['corpus']} {fit['fit_log_likelihood']:.1f} / {fit['fit_bits_per_dim']:.3f}"
                                      for fit in flows))
    lines.append("")
    lines.append(f"backbone passes: {encoder['n_backbone_encoded']} sentences for {encoder['n_unique_sentences_requested']} "
                 f"unique sentences requested ({encoder['n_sentences_requested']} requests, {encoder['n_cache_hits']} "
                 "served from the cache)")
    timings = report["timings_seconds"]
    parts = ", ".join(f"{key.replace('_', ' ')} {format_duration(value)}" for key, value in timings.items() if key != "total")
    lines.append(f"run time: {format_duration(timings['total'])}" + (f" ({parts})" if parts else ""))
    if "result_file" in report:
        lines.append(f"results: {report['result_file']}")
    for error in report.get("errors", []):
        lines.append(f"ERROR (numbers left out): {error}")
    return "\n".join(lines)


def _sts_tables(report: dict[str, Any], labels: dict[str, str], calibrators: list[str], width: int) -> list[str]:
    """The STS table of each protocol, the paper's "wmean" first."""
    summary, tasks, lines = report.get("summary", {}), list(report["sts"]), []
    header = f"{'':<{width}}" + "".join(f"{TASK_LABELS.get(task, task):>8}" for task in tasks) + f"{'avg':>8}"
    for protocol in reversed(PROTOCOLS):
        lines += ["", f"STS, cosine Spearman x100, protocol '{protocol}': {PROTOCOLS[protocol]}; calibrators fitted "
                  "per set (target)", header]
        for name in calibrators:
            row = summary[f"sts_spearman_{protocol}"][name]
            lines.append(f"{labels[name]:<{width}}" + "".join(_fmt(row[task], 8) for task in tasks)
                         + _fmt(row["avg"], 8))
    return lines


def _lexical_table(lexical: dict[str, Any], labels: dict[str, str], calibrators: list[str], width: int) -> list[str]:
    """Spearman of word edit distance with each similarity: over all pairs, and over the pairs of small edits."""
    n_pairs = lexical["n_pairs"]
    lines = ["", f"Lexical: Spearman x100 of word edit distance with each similarity, {lexical['data']}",
             f"{'':<{width}}{'all (' + str(n_pairs['all']) + ')':>14}"
             f"{'edit<=' + str(lexical['max_edit_distance']) + ' (' + str(n_pairs['small_edit']) + ')':>16}"]
    for name in ["gold", *calibrators]:
        values = lexical["spearman"].get(name, {"all": None, "small_edit": None})
        lines.append(f"{labels[name]:<{width}}{_fmt(values['all'], 14)}{_fmt(values['small_edit'], 16)}")
    return lines


def _isotropy_table(isotropy: dict[str, Any], labels: dict[str, str], width: int) -> list[str]:
    """Each variant's isotropy measures, and where its plots are."""
    plots = ", ".join(isotropy["plots"]) or "none (matplotlib is not installed: pip install 'flow-plugin[plots]')"
    lines = ["", f"Isotropy of {isotropy['data']}; plots: {plots}",
             f"{'':<{width}}{'mean cos':>10}{'top-1 var':>11}{'eff. rank':>11}{'isotropy':>11}{'iso(unit)':>11}"]
    for name, values in isotropy["calibrators"].items():
        lines.append(f"{labels.get(name, name):<{width}}{values['mean_random_cosine']:>10.4f}"
                     f"{values['top_k_variance_share']['1']:>11.4f}{values['effective_rank']:>11.1f}"
                     f"{values['isotropy_score']:>11.2e}{values['unit_rows']['isotropy_score']:>11.2e}")
    return lines
