"""Export a model with a fitted calibrator as a sentence-transformers folder: :func:`export_model`.

The base is a registry model (its backbone and pooling as standard modules, :mod:`.modules`) or a local
sentence-transformers folder (its own modules, prompts and similarity, as saved). The calibrator is fitted on a
sentence file as the MTEB model fits it with ``fit_corpus=<that file>``, or read from a saved calibrator file, and
appended as module(s). The folder is built in a hidden sibling and renamed into place: it appears whole or not at
all, with a ``README.md`` (:mod:`.card`). How closely it reproduces flow-plugin's embeddings is measured by
``tests/test_export.py`` and ``python -m benchmarks.export_agreement``, not at export time.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from flow_plugin._io import atomic_folder, file_sha256
from flow_plugin._machine import resolve_device
from flow_plugin.calibration import Calibrator, calibrator_class
from flow_plugin.catalog.builders import build_calibrator, build_encoder, calibrator_on_device, resolve
from flow_plugin.catalog.fitting import FitRecord, fit_on_sample
from flow_plugin.catalog.registry import (ForeignBase, RegistryModel, is_folder, is_foreign_base, local_model_folder,
                                          spelled_model)
from flow_plugin.data.fit_corpus import DEFAULT_DUPLICATES, FitSettings, read_sentence_file
from flow_plugin.data.sampling import DEFAULT_FIT_SEED, DEFAULT_MAX_FIT_SENTENCES, CorpusPart, sample_corpus
from flow_plugin.encoding.options import EncoderOptions
from flow_plugin.errors import (CalibratorFileError, DataFolderError, InputError, LeaderboardError, MissingExtraError,
                                OutputError, did_you_mean)
from flow_plugin.integrations.sentence_transformers.card import BenchmarkScores, render_readme

try:  # sentence-transformers 6 is the optional export extra (flow-plugin[export])
    from sentence_transformers import SentenceTransformer

    from flow_plugin.integrations.sentence_transformers.modules import calibration_modules, registry_modules
except ImportError as missing:
    if not (missing.name or "").startswith("sentence_transformers"):
        raise
    raise MissingExtraError("exporting needs sentence-transformers 6: pip install 'flow-plugin[export]'") from None

logger = logging.getLogger(__name__)

#: the encoder options a folder's model takes (it runs in the dtype and with the sequence length it was saved with)
FOLDER_OPTIONS = ("device", "batch_size", "show_progress_bar")
#: the file every sentence-transformers model folder has; only such a folder may be overwritten
MODEL_MARKER = "modules.json"


class RegistryBase:
    """A registry model: flow-plugin's encoder embeds the fit corpus; its backbone is written as standard modules."""

    def __init__(self, registry_model: RegistryModel) -> None:
        spec = registry_model.backbone
        self.registry_model, self.name, self.calibrator = registry_model, registry_model.name, registry_model.calibrator
        self.revision, self.label, self.embedding_dim = registry_model.revision, spec.name, spec.embedding_dim
        self.settings: dict[str, Any] = {}  # SentenceTransformer keywords the folder keeps (the registry has none)
        self.card = {"hub_id": spec.hub_id, "license": spec.license, "base": f"`{spec.hub_id}`" + (
            f" at revision `{spec.revision}`" if spec.revision else "") + f" with {spec.pooling!r} pooling (registry "
            f"model `{self.name}`, configuration revision `{self.revision}`)"}

    def template(self, device: str | None = None, **params: Any) -> Calibrator:
        return build_calibrator(self.registry_model, device=device, **params)

    def encoder(self, options: EncoderOptions) -> tuple[Any, str, str]:
        """(the encoder of the fit, the device and the precision it runs in)."""
        encoder = build_encoder(self.registry_model, options)
        return encoder, str(encoder.backbone.device), options.precision

    def modules(self) -> tuple[list[Any], list[str]]:
        return registry_modules(self.registry_model.backbone)


class FolderBase:
    """A local sentence-transformers folder, loaded as it was saved: its own modules, prompts and similarity."""

    def __init__(self, folder: Path, calibrator: str, device: str | None = None) -> None:
        self.name = ForeignBase(f"./{folder.name}").model_name(calibrator)  # no path of this machine
        self.calibrator, self.revision, self.label = calibrator, None, folder.name
        try:
            self.model = SentenceTransformer(str(folder), device=str(resolve_device(device)), local_files_only=True)
        except (OSError, ValueError, KeyError, RuntimeError) as error:
            reason = re.split(r"(?<=[.;:])\s", str(error).strip())[0] or type(error).__name__  # its first sentence
            raise InputError(f"{self.name}: sentence-transformers cannot load {folder} ({reason}); give a folder that "
                             "SentenceTransformer(folder) loads") from None
        self.embedding_dim, default = int(self.model.get_embedding_dimension()), self.model.default_prompt_name
        self.settings = {"prompts": dict(self.model.prompts), "default_prompt_name": default,
                         "similarity_fn_name": self.model.similarity_fn_name}
        prompts = ", ".join(f"`{name}` = {text!r}" for name, text in self.model.prompts.items()) or "none"
        self.card = {"hub_id": None, "license": None, "base": f"the local sentence-transformers folder `{folder.name}` "
                     f"(its own modules, prompts and similarity; prompts: {prompts}); the fit corpus was embedded "
                     + (f"with the default prompt `{default}`" if default else "without a prompt")}

    def template(self, device: str | None = None, **params: Any) -> Calibrator:
        return calibrator_on_device(self.calibrator, device, **params)

    def encoder(self, options: EncoderOptions) -> tuple[FolderBase, str, str]:
        """(itself, encoding with ``options``' batch size and progress bar, the device and the precision it runs in)."""
        self.options = {"show_progress_bar": options.show_progress_bar}
        self.options.update({"batch_size": options.batch_size} if options.batch_size is not None else {})
        return self, str(self.model.device), "the folder's own dtype"

    def encode(self, sentences: list[str]) -> np.ndarray:
        """The model's own ``encode`` (with its default prompt), as float32 rows."""
        return np.asarray(self.model.encode(sentences, convert_to_numpy=True, **self.options), dtype=np.float32)

    def modules(self) -> tuple[list[Any], list[str]]:
        return list(self.model), [f"{type(module).__name__}: {self.label}'s own" for module in self.model]


def export_base(model: str | RegistryModel, encoder_options: dict[str, Any]) -> RegistryBase | FolderBase:
    """The base a model spelling names. A model MTEB loads by name is a one-line error saying how to export it."""
    if isinstance(model, RegistryModel):
        return RegistryBase(model)
    base, calibrator = spelled_model(model)
    if not is_foreign_base(base):
        return RegistryBase(resolve(model))  # (an unknown name: the registry's error, with close names)
    if not is_folder(base):
        raise InputError(f"{model}: export takes a registry model or a local sentence-transformers folder, not a "
                         f"model MTEB loads by name; save it first (SentenceTransformer({base!r}).save('my-model')) "
                         f"and export {ForeignBase('./my-model').model_name(calibrator)}")
    others = sorted(set(encoder_options) - set(FOLDER_OPTIONS))
    if others:
        raise InputError(f"{model}: {', '.join(others)} {'applies' if len(others) == 1 else 'apply'} to registry "
                         "backbones only; a folder's model runs in the dtype and with the sequence length it was saved "
                         f"with (options: {', '.join(FOLDER_OPTIONS)})")
    return FolderBase(local_model_folder(base), calibrator, encoder_options.get("device"))


@dataclass(frozen=True)
class ExportResult:
    """What :func:`export_model` wrote."""

    path: Path
    model: str
    calibrator: Calibrator  # fitted here, or read from the calibrator file
    fit: FitRecord | None  # when the calibrator was fitted here
    modules: list[str]  # one line per module of the folder, in order
    size_bytes: int

    @property
    def needs_flow_plugin(self) -> bool:
        """Whether the folder holds the flow, flow-plugin's one custom module (else only standard modules)."""
        return self.calibrator.method == "flow"


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
    **encoder_options: Any,
) -> ExportResult:
    """Write ``model`` (``flow_plugin/minilm-l6-whiten``, or a local folder ``flow_plugin/./my-model-whiten`` or
    with an absolute path) with its calibrator fitted on ``fit_corpus`` (one sentence per line) or read from
    ``calibrator_path`` (``Calibrator.save``'s file) as a sentence-transformers folder ``out_dir``, which must not
    exist, or be empty, or (``overwrite``) hold a model folder. ``fit_duplicates``, ``max_fit_sentences``,
    ``fit_seed`` and ``calibrator_params`` are the MTEB loader's; ``benchmark`` (a leaderboard row,
    :func:`flow_plugin.leaderboard.benchmark_scores`) goes into the README. The encoder options (``device``,
    ``precision``: float32 by default, as the folder computes; ``batch_size``, ``cache_dir``, ``show_progress_bar``)
    say how a registry backbone runs for the fit; a folder's model takes ``device``, ``batch_size`` and
    ``show_progress_bar`` only."""
    options = _encoder_options(encoder_options, model.name if isinstance(model, RegistryModel) else model)
    base = export_base(model, encoder_options)
    fitting = FitSettings.make(max_fit_sentences=max_fit_sentences, fit_seed=fit_seed, fit_duplicates=fit_duplicates)
    if fit_corpus is not None and calibrator_path is not None:
        raise InputError(f"export of {base.name}: give a fit corpus (--fit-corpus) or a saved calibrator (--calibrator), "
                         "not both")
    if benchmark is not None and (benchmark.model, benchmark.revision) != (base.name, base.revision):
        raise LeaderboardError(f"leaderboard row {benchmark.row!r} is of {benchmark.model} at revision "
                               f"{benchmark.revision}, not of {base.name} at {base.revision}; pass that model's row "
                               "(flow_plugin.leaderboard.benchmark_scores(board, model))")
    out = Path(os.path.abspath(Path(out_dir).expanduser()))  # "." has no name of its own; links are kept
    _check_destination(out, overwrite=overwrite)  # before any work; again before the move
    facts: dict[str, Any] = {**base.card, "benchmark": benchmark}
    calibrator, fit = _calibrator(base, options, fit_corpus, calibrator_path, fitting, calibrator_params or {}, facts)
    base_modules, base_lines = base.modules()
    own_modules, own_lines = calibration_modules(calibrator)
    facts.update(model=base.name, calibrator=calibrator, modules=[*base_lines, *own_lines])
    with atomic_folder(out, "export folder") as stage:
        SentenceTransformer(modules=[*base_modules, *own_modules], device="cpu", **base.settings).save(
            str(stage), create_model_card=False)
        (stage / "README.md").write_text(render_readme(facts), encoding="utf-8")
        _check_destination(out, overwrite=overwrite)  # again: another process may have written there meanwhile
    size = sum(path.stat().st_size for path in out.rglob("*") if path.is_file())
    return ExportResult(path=out, model=base.name, calibrator=calibrator, fit=fit, modules=facts["modules"],
                        size_bytes=size)


def _encoder_options(encoder_options: dict[str, Any], model: str) -> EncoderOptions:
    unknown = sorted(set(encoder_options) - set(EncoderOptions.names()))
    if unknown:
        accepted = list(EncoderOptions.names())
        hints = [f"{key!r}{did_you_mean(key, accepted)}" for key in unknown]
        raise InputError(f"export of {model}: unknown argument(s) {', '.join(hints)}; encoder options: {', '.join(accepted)}")
    return EncoderOptions(**{"precision": "float32", **encoder_options})  # float32: what the folder computes in


def _calibrator(base: RegistryBase | FolderBase, options: EncoderOptions, fit_corpus: Any, calibrator_path: Any,
                fitting: FitSettings, params: dict[str, Any], facts: dict[str, Any]) -> tuple[Calibrator, FitRecord | None]:
    """The fitted calibrator of an export: none needed (raw), read from a saved file, or fitted on the corpus; where
    it came from goes into ``facts`` (``source``)."""
    if base.calibrator == "raw":
        if fit_corpus is not None or calibrator_path is not None:
            logger.warning("%s: raw embeddings need no fit; the %s is not used", base.name,
                           "fit corpus" if fit_corpus is not None else "calibrator file")
        calibrator = base.template()
        calibrator.n_features_in_, calibrator.n_samples_fit_ = base.embedding_dim, 0  # no fit
        facts["source"] = "nothing: raw embeddings need no fit"
        return calibrator, None
    if calibrator_path is not None:
        path = Path(calibrator_path).expanduser()
        facts["source"] = f"the calibrator file `{path.name}` (sha256 `{file_sha256(path, 'calibrator file')}`)"
        return _load_calibrator(path, base), None
    if fit_corpus is None:
        raise InputError(f"{base.name} needs its {base.calibrator} calibrator: pass a fit corpus "
                         "(--fit-corpus FILE, one sentence per line) or a saved calibrator (--calibrator PATH)")
    path = Path(fit_corpus).expanduser()
    try:
        corpus = read_sentence_file(path)
    except DataFolderError as error:
        raise DataFolderError(f"{error}; --fit-corpus (fit_corpus=) takes a UTF-8 text file with one sentence per line") \
            from None
    encoder, device, precision = base.encoder(options)
    sample = sample_corpus([CorpusPart(path.name, lambda: iter([corpus]))], cap=fitting.max_fit_sentences,
                           seed=fitting.fit_seed)
    calibrator, fit = fit_on_sample(encoder, base.template(device, **params), sample, model=base.name,
                                    source=f"file {path.name}", context={"fit_corpus": f"file {path.name}"},
                                    duplicates=fitting.fit_duplicates, what=f"{base.calibrator} on {path.name}",
                                    remedy="fit on more sentences")
    facts["source"] = (f"the file `{path.name}`: {len(corpus)} sentences ({len(set(corpus))} distinct), sha256 "
                       f"`{file_sha256(path, 'fit corpus file')}`; the fit saw {sample.describe()} (duplicates: "
                       f"{fitting.fit_duplicates}) in canonical order, embedded in {precision}")
    return calibrator, fit


def _load_calibrator(path: Path, base: RegistryBase | FolderBase) -> Calibrator:
    """The calibrator file, checked against the model's method and width (``Calibrator.load``)."""
    method_class = calibrator_class(base.calibrator)  # a model name's calibrator is a known one
    try:
        return method_class.load(path, n_features=base.embedding_dim)
    except CalibratorFileError as error:
        raise CalibratorFileError(
            f"{error}; --calibrator (calibrator_path=) must hold a {method_class.method} calibrator fitted on "
            f"{base.label}'s {base.embedding_dim}-dimensional embeddings for {base.name}") from None


def _check_destination(out: Path, *, overwrite: bool) -> None:
    """Refuse a destination that is a file, under an unwritable folder, or a non-empty folder (unless ``overwrite``
    and it holds a model: a mistyped ``--out`` never deletes a folder of something else)."""
    if out.is_file():
        raise InputError(f"--out {out} is a file; give a folder path that does not exist yet")
    existing = next(folder for folder in out.parents if folder.exists())
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        problem = "is a file, not a folder" if not existing.is_dir() else "is not writable"
        raise OutputError(f"cannot write the export folder {out}: {existing} {problem}; choose another folder")
    if not out.is_dir() or not any(out.iterdir()):
        return
    if not overwrite:
        raise InputError(f"--out {out} exists and is not empty; pass --overwrite (overwrite=True) to replace it, "
                         "or choose another folder")
    if not (out / MODEL_MARKER).is_file():
        raise InputError(f"--out {out} is not empty and holds no sentence-transformers model ({MODEL_MARKER}); "
                         "--overwrite replaces only a model folder: choose another folder")
