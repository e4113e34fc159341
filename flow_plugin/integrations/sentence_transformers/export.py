"""Export a model with a fitted calibrator as a sentence-transformers folder.

:func:`export_model` fits the calibrator of a registry model (``flow_plugin/<backbone>-<method>``) or of a local
sentence-transformers folder (``flow_plugin/./<folder>-<method>``; :mod:`.bases`) on a sentence file exactly as
the MTEB model does with ``fit_corpus=<that file>`` (the same seeded sample of a large file, canonical order,
duplicate policy and small-sample rule: :func:`flow_plugin.catalog.fitting.fit_calibrator`), or takes a saved
calibrator file, and writes a folder that ``SentenceTransformer(folder)`` loads (modules: :mod:`.modules`). Before
the folder is moved into place it is loaded back and its embeddings are compared with the base's calibrated by
flow-plugin; the figures go into the model card (:mod:`.card`) and ``flow_plugin_export.json``.

A registry backbone's fit runs in float32 by default (``precision=``), the precision the folder computes in.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np

from flow_plugin._io import file_sha256
from flow_plugin.calibration import Calibrator, calibrator_class
from flow_plugin.catalog.fitting import FitRecord, fit_on_sample
from flow_plugin.data.fit_corpus import DEFAULT_DUPLICATES, FitSettings, read_sentence_file
from flow_plugin.catalog.registry import RegistryModel
from flow_plugin.data.sampling import DEFAULT_FIT_SEED, DEFAULT_MAX_FIT_SENTENCES, CorpusPart, sample_corpus
from flow_plugin.encoding.options import EncoderOptions
from flow_plugin.errors import CalibratorFileError, DataFolderError, InputError, MissingExtraError, did_you_mean
from flow_plugin.integrations.sentence_transformers.bases import ExportBase, export_base
from flow_plugin.integrations.sentence_transformers.benchmark import BenchmarkScores, check_benchmark
from flow_plugin.integrations.sentence_transformers.card import SENSITIVE_CALIBRATOR, render_card
from flow_plugin.integrations.sentence_transformers.folder import check_destination, staged_folder
from flow_plugin import __version__

logger = logging.getLogger(__name__)

#: the provenance record written into every export folder (the model card is rendered from it)
RECORD_FILE = "flow_plugin_export.json"
RECORD_FORMAT = "flow-plugin-export"
#: the oldest sentence-transformers that writes and reads the folder layout used here
MIN_SENTENCE_TRANSFORMERS = "6.0"
#: sentences of every agreement check (lengths from 3 to past 64 word pieces, so batches are padded and one
#: sentence is truncated), before up to ``AGREEMENT_SENTENCES`` of the fit corpus
_PROBE_SENTENCES = (
    "A man is playing a guitar.",
    "Dogs run.",
    "A woman is slicing an onion on a wooden board in a small kitchen while the radio plays.",
    "Two children are kicking a ball across a muddy field after school on a rainy afternoon in late November, "
    "while their parents watch from under umbrellas and a dog chases the ball back and forth along the fence, "
    "barking at every kick and at the passing cars on the road beyond the trees at the edge of the field.",
)
AGREEMENT_SENTENCES = 60
#: The agreement check, in two parts, each relative to an embedding's largest component (float32):
#: the folder's backbone and pooling against flow-plugin's pooled embeddings (measured on all-MiniLM-L6-v2: at
#: most 1.1e-6, from padded batches; margin 90x: a wrong layer, pooling or truncation is off by far more) ...
POOLED_TOLERANCE = 1e-4
#: ... and the folder's calibration module against flow-plugin's calibrator on those same pooled embeddings
#: (measured: 0 for the flow; for a linear map, a centring Dense then the projection Dense, at most 1.3e-6 on 1,000
#: SICK sentences, all-MiniLM-L6-v2, where one folded Dense x W + b was up to 9.8e-6 here and 3.4e-5 on a small fit
#: corpus; it grows with the map's condition, so the margin stays wide: a wrong map is off by ~1).
CALIBRATION_TOLERANCE = 1e-2
#: Beyond this end-to-end difference (:data:`.card.SENSITIVE_CALIBRATOR`), the calibrator itself magnifies the ~1e-6
#: padding difference of the pooled embeddings while both parts above agree: a warning, and a note in the card. Seen
#: with a flow fitted on fewer sentences than dimensions (flow-white, 220 sentences for 384: 3.3 of the scale).


@dataclass(frozen=True)
class ExportResult:
    """What :func:`export_model` wrote."""

    path: Path
    model: str
    #: the provenance record (also ``<path>/flow_plugin_export.json``)
    record: dict[str, Any]
    #: the calibrator in the folder (fitted here, or read from the calibrator file)
    calibrator: Calibrator
    #: the fit, when the calibrator was fitted here
    fit: FitRecord | None
    size_bytes: int

    @property
    def needs_flow_plugin(self) -> bool:
        return bool(self.record["needs_flow_plugin"])

    def summary(self) -> list[str]:
        """A few lines for a command line."""
        lines = [f"wrote {self.path} ({self.size_bytes / 2**20:.1f} MiB): {self.model} for sentence-transformers"]
        lines += [f"  {index}. {line}" for index, line in enumerate(self.record["modules"])]
        if self.fit is not None:
            lines.append(f"  fit: {self.fit.summary()}")
        agreement = self.record.get("agreement")
        if agreement:
            lines.append(f"  checked on {agreement['sentences']} sentences against flow-plugin (float32): embeddings within "
                         f"{agreement['max_rel_diff']:.1e} of their scale, cosine similarities within "
                         f"{agreement['max_cosine_diff']:.1e}")
        load = f'SentenceTransformer("{self.path}"' + (", trust_remote_code=True)" if self.needs_flow_plugin else ")")
        lines.append(f"  load with {load}" + (" (needs flow-plugin installed)" if self.needs_flow_plugin else ""))
        return lines


def _check_sentence_transformers() -> str:
    try:  # sentence-transformers is the optional export extra
        import sentence_transformers
    except ImportError:
        raise MissingExtraError("exporting needs sentence-transformers: pip install 'flow-plugin[export]'") from None
    version = sentence_transformers.__version__
    if tuple(int(part) for part in version.split(".")[:1]) < (int(MIN_SENTENCE_TRANSFORMERS.split(".")[0]),):
        raise MissingExtraError(f"exporting needs sentence-transformers >= {MIN_SENTENCE_TRANSFORMERS}, found {version}: "
                                "pip install 'flow-plugin[export]'")
    return version


def _read_fit_corpus(path: Path) -> list[str]:
    try:
        return read_sentence_file(path)
    except DataFolderError as error:
        raise DataFolderError(f"{error}; --fit-corpus (fit_corpus=) takes a UTF-8 text file with one sentence per line") \
            from None


def _load_calibrator(path: Path, base: ExportBase) -> Calibrator:
    """The calibrator file, checked against the model's method and width (``Calibrator.load``)."""
    method_class = calibrator_class(base.calibrator)
    if method_class is None:
        raise CalibratorFileError(f"{base.name}: no calibrator is named {base.calibrator!r}")
    try:
        return method_class.load(path, n_features=base.embedding_dim)
    except CalibratorFileError as error:
        raise CalibratorFileError(
            f"{error}; --calibrator (calibrator_path=) must hold a {method_class.method} calibrator fitted on "
            f"{base.label}'s {base.embedding_dim}-dimensional embeddings for {base.name}"
        ) from None


def _encoder_options(encoder_options: dict[str, Any], model: str) -> EncoderOptions:
    unknown = sorted(set(encoder_options) - set(EncoderOptions.names()))
    if unknown:
        accepted = list(EncoderOptions.names())
        hints = [f"{key!r}{did_you_mean(key, accepted)}" for key in unknown]
        raise InputError(f"export of {model}: unknown argument(s) {', '.join(hints)}; encoder options: {', '.join(accepted)}")
    # float32 by default: the precision the exported folder computes in
    return EncoderOptions(**{"precision": "float32", **encoder_options})


def embedding_differences(ours: np.ndarray, theirs: np.ndarray) -> tuple[float, float]:
    """(largest absolute difference, largest difference of a row / that row's largest component)."""
    difference = np.abs(ours.astype(np.float64) - theirs.astype(np.float64))
    scale = np.maximum(np.abs(ours.astype(np.float64)).max(axis=1), np.finfo(np.float32).tiny)
    return float(difference.max()), float((difference.max(axis=1) / scale).max())


def cosine_difference(ours: np.ndarray, theirs: np.ndarray) -> float:
    """The largest difference between the cosine similarities of two rows, over all pairs of rows."""
    def cosines(matrix: np.ndarray) -> np.ndarray:
        unit = matrix.astype(np.float64) / np.maximum(np.linalg.norm(matrix.astype(np.float64), axis=1, keepdims=True),
                                                      np.finfo(np.float64).tiny)
        return unit @ unit.T

    return float(np.abs(cosines(ours) - cosines(theirs)).max())


def _agreement(folder: Path, base: ExportBase, calibrator: Calibrator, options: EncoderOptions,
               corpus: list[str] | None, needs_flow_plugin: bool, calibration_modules: int) -> dict[str, Any]:
    """Load the written folder with sentence-transformers and compare it with flow-plugin (float32
    backbone, the calibrator) on a few sentences: the pooled embeddings, the calibration modules (the
    last ``calibration_modules``) on the same inputs, and the embeddings a user gets. A part off by
    more than its tolerance is an error (nothing is written)."""
    # sentence-transformers (the optional export extra) loads when a folder is read back
    from sentence_transformers import SentenceTransformer

    probes = list(dict.fromkeys([*_PROBE_SENTENCES, *(corpus or [])[: AGREEMENT_SENTENCES * 2]]))
    probes = probes[: len(_PROBE_SENTENCES) + AGREEMENT_SENTENCES]
    reference_encoder, device = base.reference(options)
    pooled = reference_encoder.encode(probes)
    ours = calibrator.transform(pooled)
    model = SentenceTransformer(str(folder), device=device, trust_remote_code=needs_flow_plugin, local_files_only=True)
    theirs = model.encode(probes, convert_to_numpy=True, show_progress_bar=False)
    backbone_and_pooling = SentenceTransformer(modules=list(model)[:-calibration_modules], device=device,
                                               **base.settings)
    theirs_pooled = backbone_and_pooling.encode(probes, convert_to_numpy=True, show_progress_bar=False)
    if theirs.shape != ours.shape or theirs_pooled.shape != pooled.shape:
        raise InputError(f"the exported folder gives embeddings of shape {theirs.shape} ({theirs_pooled.shape} pooled), "
                         f"flow-plugin {ours.shape} ({pooled.shape}); nothing was written: please report this")
    pooled_difference = embedding_differences(pooled, theirs_pooled)[1]
    calibration_difference = embedding_differences(calibrator.transform(theirs_pooled), theirs)[1]
    for part, difference, tolerance in (("backbone and pooling", pooled_difference, POOLED_TOLERANCE),
                                        ("calibration", calibration_difference, CALIBRATION_TOLERANCE)):
        if difference > tolerance:
            raise InputError(f"the exported folder's {part} differs from flow-plugin's by {difference:.1e} of the "
                             f"embeddings' scale (more than {tolerance:.0e}); nothing was written: please report this")
    largest, relative = embedding_differences(ours, theirs)
    return {"sentences": len(probes), "max_abs_diff": largest, "max_rel_diff": relative,
            "max_cosine_diff": cosine_difference(ours, theirs), "pooled_rel_diff": pooled_difference,
            "calibration_rel_diff": calibration_difference, "precision": "float32",
            "reference_precision": base.fit_precision(options.replace(precision="float32")),
            "device": device}


def _declare_flow_plugin(folder: Path, requirements: dict[str, Any]) -> None:
    """Say in the folder that its flow module needs flow-plugin: ``requirements`` in
    ``config_sentence_transformers.json`` (sentence-transformers checks them before it loads any
    module, naming what to install) and a ``requires`` note on the module's ``modules.json`` entry
    (sentence-transformers reads only the keys it knows)."""
    settings_path = folder / "config_sentence_transformers.json"
    settings = json.loads(settings_path.read_text(encoding="utf-8"))
    settings["requirements"] = requirements
    settings_path.write_text(json.dumps(settings, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    modules_path = folder / "modules.json"
    modules = json.loads(modules_path.read_text(encoding="utf-8"))
    specifier = requirements["flow-plugin"]["specifier"]
    for module in modules:
        if module["type"].startswith("flow_plugin."):
            module["requires"] = (f"flow-plugin{specifier} (pip install flow-plugin), and "
                                  "SentenceTransformer(folder, trust_remote_code=True)")
    modules_path.write_text(json.dumps(modules, indent=2) + "\n", encoding="utf-8")


def _versions(st_version: str) -> dict[str, str]:
    return {"flow-plugin": __version__, "sentence-transformers": st_version, "transformers": version("transformers"),
            "torch": version("torch")}


def export_model(
    model: str | RegistryModel,
    out_dir: str | os.PathLike[str],
    *,
    fit_corpus: str | os.PathLike[str] | None = None,
    calibrator_path: str | os.PathLike[str] | None = None,
    overwrite: bool = False,
    benchmark: BenchmarkScores | None = None,
    fit_duplicates: str = DEFAULT_DUPLICATES,
    max_fit_sentences: int = DEFAULT_MAX_FIT_SENTENCES,
    fit_seed: int = DEFAULT_FIT_SEED,
    calibrator_params: dict[str, Any] | None = None,
    check_agreement: bool = True,
    **encoder_options: Any,
) -> ExportResult:
    """Write ``model`` (a registry model name such as ``flow_plugin/minilm-l6-whiten``, or a local
    sentence-transformers folder spelled ``flow_plugin/./my-model-whiten`` or with an absolute path) with its
    calibrator fitted on ``fit_corpus`` (a text file, one sentence per line) or read from ``calibrator_path``
    (``Calibrator.save``'s file) as a sentence-transformers folder ``out_dir``.

    ``fit_duplicates``, ``max_fit_sentences``, ``fit_seed`` and ``calibrator_params`` are the MTEB loader arguments
    of the same names; ``benchmark`` (a leaderboard row, :func:`flow_plugin.leaderboard.benchmark_scores`) puts its
    scores in the model card. ``out_dir`` must not exist, or be empty, or (``overwrite``) hold a model folder, which
    is then replaced. ``check_agreement`` loads the folder back before moving it into place, measures how far its
    float32 embeddings are from flow-plugin's (into the model card), and fails if its pooling or its calibration
    module is off (``POOLED_TOLERANCE``, ``CALIBRATION_TOLERANCE``). The encoder options (``device``, ``precision``
    (default float32), ``batch_size``, ``cache_dir``, ``show_progress_bar``) say how a registry backbone runs for the
    fit; a folder's model takes ``device``, ``batch_size`` and ``show_progress_bar`` only.
    """
    st_version = _check_sentence_transformers()
    options = _encoder_options(encoder_options, model.name if isinstance(model, RegistryModel) else model)
    base = export_base(model, encoder_options)
    # the corpus is a file read below; the other settings are checked as a calibrated model checks them
    fitting = FitSettings.make(max_fit_sentences=max_fit_sentences, fit_seed=fit_seed, fit_duplicates=fit_duplicates)
    if fit_corpus is not None and calibrator_path is not None:
        raise InputError(f"export of {base.name}: give a fit corpus (--fit-corpus) or a saved calibrator (--calibrator), "
                         "not both")
    if benchmark is not None:
        check_benchmark(benchmark, base.name, base.revision)
    out = Path(out_dir).expanduser()
    check_destination(out, overwrite=overwrite)  # before any work: the same check runs again before the move
    corpus_path = Path(fit_corpus).expanduser() if fit_corpus is not None else None
    corpus = _read_fit_corpus(corpus_path) if corpus_path is not None else None
    source = _export_calibrator(base, options, corpus_path, corpus,
                                Path(calibrator_path).expanduser() if calibrator_path is not None else None, fitting,
                                calibrator_params or {})
    calibrator = source.calibrator
    # sentence-transformers (the optional export extra) loads when a folder is built
    from flow_plugin.integrations.sentence_transformers.modules import build_pipeline

    base_modules = base.base_modules()
    pipeline = build_pipeline(base_modules, calibrator)
    record = _export_record(base, source, pipeline, base_modules.facts, options, benchmark, _versions(st_version))
    _write_folder(out, overwrite, record, pipeline, base, source, options, corpus,
                  check_agreement=check_agreement)
    size = sum(path.stat().st_size for path in out.rglob("*") if path.is_file())
    return ExportResult(path=out, model=base.name, record=record, calibrator=calibrator, fit=source.fit,
                        size_bytes=size)


@dataclass
class _CalibratorSource:
    """The calibrator an export writes, and where it came from (the record's ``calibrator``/``fit_corpus``)."""

    calibrator: Any
    fit: FitRecord | None = None
    from_file: dict[str, Any] | None = None
    corpus: dict[str, Any] | None = None


def _export_calibrator(base: ExportBase, options: EncoderOptions, corpus_path: Path | None,
                       corpus: list[str] | None, calibrator_path: Path | None, fitting: FitSettings,
                       calibrator_params: dict[str, Any]) -> _CalibratorSource:
    """The fitted calibrator of an export: none needed (raw), read from a saved file, or fitted on the corpus."""
    if base.calibrator == "raw":
        calibrator = base.template()
        calibrator.n_features_in_, calibrator.n_samples_fit_ = base.embedding_dim, 0  # no fit
        if corpus_path is not None or calibrator_path is not None:
            logger.warning("%s: raw embeddings need no fit; the %s is not used", base.name,
                           "fit corpus" if corpus_path is not None else "calibrator file")
        return _CalibratorSource(calibrator)
    if calibrator_path is not None:
        return _CalibratorSource(_load_calibrator(calibrator_path, base), from_file={
            "name": calibrator_path.name, "sha256": file_sha256(calibrator_path, "calibrator file")})
    if corpus_path is None or corpus is None:
        raise InputError(f"{base.name} needs its {base.calibrator} calibrator: pass a fit corpus "
                         "(--fit-corpus FILE, one sentence per line) or a saved calibrator (--calibrator PATH)")
    encoder, device = base.encoder(options)
    template = base.template(device, **calibrator_params)
    part = CorpusPart(corpus_path.name, lambda: iter([corpus]))
    sample = sample_corpus([part], cap=fitting.max_fit_sentences, seed=fitting.fit_seed)
    source = f"file {corpus_path.name}"
    calibrator, fit = fit_on_sample(encoder, template, sample, model=base.name, source=source,
                                    context={"fit_corpus": source}, duplicates=fitting.fit_duplicates,
                                    what=f"{base.calibrator} on {corpus_path.name}",
                                    remedy="fit on more sentences")
    return _CalibratorSource(calibrator, fit=fit, corpus={
        "file": corpus_path.name, "sha256": file_sha256(corpus_path, "fit corpus file"), "sentences": len(corpus),
        "unique_sentences": len(set(corpus)), "fit_sentences": len(sample.sentences),
        "sampling": sample.describe(), "duplicates": fitting.fit_duplicates,
        "max_fit_sentences": fitting.max_fit_sentences, "fit_seed": fitting.fit_seed,
    })


def _export_record(base: ExportBase, source: _CalibratorSource, pipeline: Any, facts: dict[str, Any],
                   options: EncoderOptions, benchmark: BenchmarkScores | None, versions: dict[str, str]) -> dict[str, Any]:
    """The folder's ``flow_plugin_export.json`` record (its ``agreement`` is filled in once the folder is written)."""
    calibrator, fit = source.calibrator, source.fit
    needs_flow_plugin = calibrator.method == "flow"
    return {
        "format": RECORD_FORMAT,
        "format_version": 1,
        "model": base.name,
        "revision": base.revision,
        "backbone": base.record(facts),
        "calibrator": {
            "method": calibrator.method, "class": type(calibrator).__name__, "params": calibrator.result_params(),
            "effective_params": calibrator.effective_params(),
            "n_features_in": int(calibrator.n_features_in_), "n_features_out": int(calibrator.n_features_out_),
            "n_samples_fit": int(calibrator.n_samples_fit_), "adapted": getattr(calibrator, "adapted_", None),
            "fit_log_likelihood": getattr(calibrator, "fit_log_likelihood_", None),
            "fit_bits_per_dim": getattr(calibrator, "fit_bits_per_dim_", None),
            "from_file": source.from_file,
        },
        "fit_corpus": source.corpus,
        "fit": None if fit is None else {key: value for key, value in fit.as_dict().items() if key not in ("served", "calls")},
        "fit_precision": base.fit_precision(options) if fit is not None else None,
        "modules": pipeline.descriptions,
        "needs_flow_plugin": needs_flow_plugin,
        "requirements": ({"flow-plugin": {"specifier": f">={versions['flow-plugin']}",
                                          "reason": "the flow is flow-plugin's FlowCalibration module"}}
                         if needs_flow_plugin else {}),
        "agreement": None,
        "benchmark": benchmark.as_dict() if benchmark is not None else None,
        "versions": versions,
        "created": datetime.datetime.now(tz=datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def _write_folder(out: Path, overwrite: bool, record: dict[str, Any], pipeline: Any, base: ExportBase,
                  source: _CalibratorSource, options: EncoderOptions, corpus: list[str] | None, *,
                  check_agreement: bool) -> None:
    """Write the folder in a staging place, check it loads back and agrees (``check_agreement``), then move it to
    ``out``; the record's ``agreement`` is filled in on the way."""
    # sentence-transformers (the optional export extra) loads when a folder is written
    from sentence_transformers import SentenceTransformer

    calibrator = source.calibrator
    with staged_folder(out, overwrite=overwrite) as stage:
        SentenceTransformer(modules=pipeline.modules, device="cpu", **base.settings).save(str(stage),
                                                                                       create_model_card=False)
        if record["needs_flow_plugin"]:
            _declare_flow_plugin(stage, record["requirements"])
        if check_agreement:
            record["agreement"] = _agreement(stage, base, calibrator, options, corpus,
                                             record["needs_flow_plugin"], pipeline.calibration_modules)
            if record["agreement"]["max_rel_diff"] > SENSITIVE_CALIBRATOR:
                logger.warning(
                    "%s: the fitted %s magnifies tiny differences of its input: the folder's embeddings are %.1e of "
                    "their scale from flow-plugin's although its pooling agrees to %.1e; a fit on more sentences "
                    "(%d now, %d dimensions) is steadier", base.name, calibrator.method,
                    record["agreement"]["max_rel_diff"], record["agreement"]["pooled_rel_diff"],
                    calibrator.n_samples_fit_, calibrator.n_features_in_)
        (stage / RECORD_FILE).write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        (stage / "README.md").write_text(render_card(record), encoding="utf-8")
