"""Backbones from ``registry/*.toml`` and the model names they expand to.

One small, human-edited TOML file per backbone; the file name (without ``.toml``) is the
backbone's short name. It is validated into :class:`BackboneSpec`, a frozen pydantic model that forbids
unknown keys. Each backbone expands to one model name per calibrator::

    flow_plugin/<backbone>            raw embeddings
    flow_plugin/<backbone>-sn         standard normalisation
    flow_plugin/<backbone>-natsv      nulling away the top-k singular vectors
    flow_plugin/<backbone>-sn-natsv   SN then NATSV
    flow_plugin/<backbone>-whiten     whitening
    flow_plugin/<backbone>-flow       BERT-flow

and one per name of the gentle family (``-center``, ``-remove-mean-dir``, ``-soft-whiten``,
``-whiten-third``) and per flow variant (``-flow-lu``, ...).

Registry folders, in order: the packaged registry (or, in a source checkout, the checkout's
``registry/``), then every folder listed in ``$FLOW_PLUGIN_REGISTRY`` (separated by
``os.pathsep``). A file may not redefine a backbone an earlier folder defines: its results
would be filed under the same model name. Every problem names the file and the key.

Examples
--------
>>> spec = get_backbone("minilm-l6")
>>> spec.model_name("flow"), spec.pooling, spec.max_seq_length
('flow_plugin/minilm-l6-flow', 'last-avg', 64)
"""

from __future__ import annotations

import datetime
import difflib
import functools
import hashlib
import json
import logging
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from flow_plugin.calibration.names import CALIBRATOR_NAMES
from flow_plugin.catalog.local_weights import LocalWeights
from flow_plugin.encoding.pooling import parse_pooling
from flow_plugin._io import file_sha256, read_toml
from flow_plugin._validation_errors import describe_validation_error
from flow_plugin.errors import InputError, RegistryError, did_you_mean
from flow_plugin.calibration import calibrator_class, make_calibrator


logger = logging.getLogger(__name__)

NAMESPACE = "flow_plugin"
#: what the MTEB names of the registry's models start with (``flow_plugin/minilm-l6-flow``)
MODEL_PREFIX = f"{NAMESPACE}/"
REGISTRY_ENV = "FLOW_PLUGIN_REGISTRY"
#: Raised whenever flow-plugin changes how a registry model's numbers come about, so results of the
#: old procedure are filed apart (2: fit corpora in canonical order, the length-exact batch plan).
PROCEDURE_VERSION = 2
_NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9.\-]*[a-z0-9]$")


def model_name_suffixes() -> dict[str, str]:
    """calibrator name -> model-name suffix (``raw`` has none), in table order.

    Examples
    --------
    >>> model_name_suffixes()["sn-natsv"]
    '-sn-natsv'
    """
    return dict(MODEL_NAME_SUFFIXES)


#: calibrator name -> model-name suffix, from the one list of names
MODEL_NAME_SUFFIXES: dict[str, str] = {name: "" if name == "raw" else f"-{name}" for name in CALIBRATOR_NAMES}


def spelled_model(name: str) -> tuple[str, str]:
    """A model spelling ``flow_plugin/<base>[-<calibrator>]`` -> (base, calibrator): the longest calibrator suffix
    the name ends in, else ``raw``. The base is a registry backbone, an MTEB model name or a local folder.

    >>> spelled_model("flow_plugin/minilm-l6-sn-natsv"), spelled_model("flow_plugin/intfloat/e5-small-v2-flow")
    (('minilm-l6', 'sn-natsv'), ('intfloat/e5-small-v2', 'flow'))
    """
    rest = name.removeprefix(MODEL_PREFIX)
    for calibrator, suffix in sorted(MODEL_NAME_SUFFIXES.items(), key=lambda item: -len(item[1])):
        if suffix and rest.endswith(suffix) and len(rest) > len(suffix):
            return rest[: -len(suffix)], calibrator
    return rest, "raw"


def spell_model(base_name: str, calibrator: str) -> str:
    """The spelling of a calibrator on a base model's results (the inverse of :func:`spelled_model`): a registry
    backbone's name keeps its ``flow_plugin/`` prefix, another model gains it; raw is the base's own name.

    >>> spell_model("flow_plugin/minilm-l6", "flow"), spell_model("intfloat/e5-small-v2", "whiten")
    ('flow_plugin/minilm-l6-flow', 'flow_plugin/intfloat/e5-small-v2-whiten')
    >>> spell_model("intfloat/e5-small-v2", "raw")
    'intfloat/e5-small-v2'
    """
    if calibrator == "raw":
        return base_name
    return f"{MODEL_PREFIX}{base_name.removeprefix(MODEL_PREFIX)}{MODEL_NAME_SUFFIXES[calibrator]}"


@dataclass(frozen=True)
class ForeignBase:
    """A base model outside the registry, as a run plan sees it: an MTEB model name (``intfloat/e5-small-v2``) or
    a local sentence-transformers folder (its absolute path), loaded by MTEB's own loader. Its calibrated models
    are spelled ``flow_plugin/<base>-<calibrator>``; its raw embeddings load as ``flow_plugin/<base>`` and read
    back under the base's own name.

    >>> base = ForeignBase("intfloat/e5-small-v2")
    >>> base.model_name("raw"), base.model_name("flow"), base.result_name("raw")
    ('flow_plugin/intfloat/e5-small-v2', 'flow_plugin/intfloat/e5-small-v2-flow', 'intfloat/e5-small-v2')
    """

    name: str
    calibrator_params: dict[str, dict[str, Any]] = field(default_factory=dict, hash=False)

    def model_name(self, calibrator: str = "raw") -> str:
        return f"{MODEL_PREFIX}{self.name}{MODEL_NAME_SUFFIXES[calibrator]}"

    def result_name(self, calibrator: str = "raw") -> str:
        return spell_model(self.name, calibrator)


def is_folder(base: str) -> bool:
    """Whether a base is spelled as a local folder (absolute, ``./``, ``../`` or ``~``)."""
    return base.startswith(("/", "./", "../", "~")) or os.path.isabs(base)


def is_foreign_base(base: str) -> bool:
    """Whether a spelled base names a model outside the registry: an MTEB model name (``org/name``) or a local folder.
    Any other base is a registry backbone's name, known or not (the registry answers an unknown one with close
    names)."""
    return base not in default_registry() and ("/" in base or is_folder(base))


def raw_spelling_hint(base: str) -> str:
    """For a base spelled with a ``-raw`` suffix: raw embeddings are spelled without one."""
    return f" (raw embeddings have no suffix: {MODEL_PREFIX}{base.removesuffix('-raw')})" if base.endswith("-raw") else ""


def local_model_folder(base: str) -> Path:
    """The absolute folder a base spelled as a folder names, once it holds a saved model (``modules.json`` or
    ``config.json``); else a one-line :class:`~flow_plugin.errors.InputError` saying what it is instead (a folder
    followed by a misspelt calibrator, ``./my-model-whitne``: the calibrator's close names)."""
    folder = Path(base).expanduser().resolve()
    if not folder.is_dir():
        head, _, tail = base.rpartition("-")
        if head and "/" not in tail and Path(head).expanduser().is_dir():
            raise InputError(f"{MODEL_PREFIX}{base}: {tail!r} is no calibrator{did_you_mean(tail, MODEL_NAME_SUFFIXES)} "
                             f"after the folder {head}; the calibrators: {', '.join(sorted(CALIBRATOR_NAMES))}")
        raise InputError(f"{base}: no such folder ({folder}){raw_spelling_hint(base)}; give the folder a SentenceTransformer "
                         "was saved to")
    if not (folder / "modules.json").is_file() and not (folder / "config.json").is_file():
        raise InputError(f"{base}: not a sentence-transformers folder (no modules.json or config.json in "
                         f"{folder}); give the folder a SentenceTransformer was saved to")
    return folder


@functools.lru_cache(maxsize=4096)
def _file_digest(path: str, size: int, mtime_ns: int) -> str:
    return file_sha256(path, "model file")


def folder_revision(folder: str | os.PathLike[str]) -> str:
    """The revision of a local model folder's results: ``sha256-`` and 16 hex digits of a digest over the relative
    path and bytes of every file it holds (hidden ones too). Results of a changed folder (retrained, a module
    removed) are filed apart: a name alone never identifies a model. Each file is hashed once per process while its
    size and modification time stay.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     _ = (Path(folder) / "config.json").write_text("{}")
    ...     first = folder_revision(folder)
    ...     _ = (Path(folder) / "config.json").write_text('{"layers": 2}')
    ...     first != folder_revision(folder), first.startswith("sha256-")
    (True, True)
    """
    root = Path(folder)
    digest = hashlib.sha256()
    for path in sorted(path for path in root.rglob("*") if path.is_file()):
        stat = path.stat()
        digest.update(f"{path.relative_to(root).as_posix()}\0{_file_digest(str(path), stat.st_size, stat.st_mtime_ns)}\0"
                      .encode())
    return "sha256-" + digest.hexdigest()[:16]


def get_base(name: str, registry: dict[str, BackboneSpec] | None = None) -> BackboneSpec | ForeignBase:
    """What a study or bench runs calibrators on: a registry backbone, else an MTEB model name (``org/name``) or a
    local folder (``/...``, ``./...``, ``~/...``: made absolute); any other name is :func:`get_backbone`'s error
    with close names."""
    known = registry if registry is not None else default_registry()
    short = name.removeprefix(MODEL_PREFIX)
    if short in known:
        return known[short]
    if is_folder(short):
        return ForeignBase(str(Path(short).expanduser().resolve()))
    if "/" in short:
        return ForeignBase(short)
    try:
        return get_backbone(name, registry)
    except RegistryError as error:
        raise RegistryError(f"{error} Any other base is an MTEB model name (org/name) or a local folder "
                            f"(./{short} or an absolute path)") from None


# ---------------------------------------------------------------------------- the validated file
#: what a registry file may not set: the backbone's name is the file's name, and the file is where it was read
_NOT_KEYS = {"name": "the backbone's name is the file's name", "source_file": "it is where the file was read"}


class BackboneSpec(BaseModel):
    """One registry file, validated and frozen: its keys (unknown keys are errors), plus the
    backbone's ``name`` (the file's stem) and ``source_file``, which the file itself may not set."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    name: str
    source_file: Path
    hub_id: str
    revision: str | None = None
    description: str = ""
    pooling: str | list[int]
    max_seq_length: int = Field(ge=2)
    embedding_dim: int = Field(ge=1)
    n_parameters: int = Field(ge=1)
    #: the input embedding matrix (vocabulary x width), MTEB's ``n_embedding_parameters``, when known
    n_embedding_parameters: int | None = Field(default=None, ge=1)
    license: str
    release_date: str
    reference: str
    languages: tuple[str, ...] = Field(default=("eng-Latn",), strict=False)  # (a TOML list)
    trust_remote_code: bool = False
    citation: str | None = None
    local_weights: LocalWeights | None = None
    #: per-calibrator hyper-parameters, e.g. ``[calibrators.whiten] n_components = 256``
    calibrators: dict[str, dict[str, Any]] = {}

    @field_validator("pooling")
    @classmethod
    def _known_pooling(cls, value: str | list[int]) -> str:
        try:
            return parse_pooling(value).name  # its error names the known poolings
        except TypeError as error:  # pydantic reports ValueErrors, with the key
            raise ValueError(str(error)) from None

    @field_validator("release_date")
    @classmethod
    def _iso_date(cls, value: str) -> str:
        try:
            datetime.date.fromisoformat(value)
        except ValueError:
            raise ValueError(f"must be YYYY-MM-DD, got {value!r}") from None
        return value

    @field_validator("reference")
    @classmethod
    def _url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError(f"must be a URL, got {value!r}")
        return value

    @property
    def calibrator_params(self) -> dict[str, dict[str, Any]]:
        """Per-method hyper-parameters (the file's ``[calibrators.<method>]`` tables), e.g.
        ``{"whiten": {"n_components": 256}}``."""
        return self.calibrators

    def model_name(self, calibrator: str = "raw") -> str:
        return f"{NAMESPACE}/{self.name}{model_name_suffixes()[calibrator]}"

    def result_name(self, calibrator: str = "raw") -> str:
        """The name a result of this calibrator reads back as (for a registry backbone, its model name)."""
        return self.model_name(calibrator)

    @property
    def model_names(self) -> list[str]:
        return [self.model_name(method) for method in model_name_suffixes()]

    def weights_location(self) -> tuple[str, str | None, str]:
        """(what to pass to ``from_pretrained``, revision, human-readable source).

        Local packaged weights win when installed; otherwise the hub id at the pinned revision.
        """
        if self.local_weights is not None:
            folder = self.local_weights.resolve()
            if folder is not None:
                return str(folder), self.revision, f"local: {self.local_weights.describe()}"
        return self.hub_id, self.revision, "hub"

    def install_hint(self) -> str | None:
        """The command that installs this backbone's packaged weights, while they are not installed
        (``None`` once they are, or when the registry file names none)."""
        if self.local_weights is None or self.local_weights.is_installed():
            return None
        return self.local_weights.install


def _known_keys(location: tuple[Any, ...]) -> list[str]:
    fields = LocalWeights.model_fields if location[:1] == ("local_weights",) else BackboneSpec.model_fields
    return [key for key in fields if key not in _NOT_KEYS]


def _messages(path: Path, error: ValidationError) -> str:
    """One line naming the file and every bad key (:func:`flow_plugin._validation_errors.describe_validation_error`)."""
    phrases = describe_validation_error(error, _known_keys, ignore=("str", "list[int]"), special={
        "pooling": "key 'pooling' must be str or a list of int layer indices"})
    return f"{path}: " + "; ".join(phrases)


@dataclass(frozen=True)
class RegistryModel:
    """A backbone and a calibrator method: what one model name means.

    Examples
    --------
    >>> registry_model = parse_model_name("flow_plugin/minilm-l6-flow")
    >>> registry_model.revision.startswith(registry_model.backbone.revision + "-"), len(registry_model.revision) == 40 + 13
    (True, True)
    """

    backbone: BackboneSpec
    calibrator: str

    @property
    def name(self) -> str:
        return self.backbone.model_name(self.calibrator)

    @property
    def calibrator_params(self) -> dict[str, Any]:
        return dict(self.backbone.calibrator_params.get(self.calibrator, {}))

    @property
    def configuration(self) -> dict[str, Any]:
        """Everything the registry fixes about this model's numbers: the weights, pooling and
        truncation, the calibrator with every hyper-parameter (defaults included), and the
        version of flow-plugin's fitting procedure."""
        spec = self.backbone
        return {
            "hub_id": spec.hub_id,
            "revision": spec.revision,
            "pooling": spec.pooling,
            "max_seq_length": spec.max_seq_length,
            "trust_remote_code": spec.trust_remote_code,
            "calibrator": self.calibrator,
            "calibrator_params": make_calibrator(self.calibrator, **self.calibrator_params).result_params(),
            "procedure": PROCEDURE_VERSION,
        }

    @property
    def revision(self) -> str:
        """The revision results are filed under: the backbone's pinned commit, then 12 hex digits
        of :attr:`configuration`. Results of two configurations never share a folder."""
        digest = hashlib.sha256(json.dumps(self.configuration, sort_keys=True).encode()).hexdigest()[:12]
        return f"{self.backbone.revision or 'unpinned'}-{digest}"


_RESULT_REVISION = re.compile(r"^(?P<weights>.+)-(?P<configuration>[0-9a-f]{12})$")


def weights_revision(result_revision: str) -> str:
    """The weights' commit inside a result revision (:attr:`RegistryModel.revision`); any other
    revision is returned as it is.

    Examples
    --------
    >>> weights_revision("8b3219a92973c328a8e22fadcfa821b5dc75636a-62dcf5441270")
    '8b3219a92973c328a8e22fadcfa821b5dc75636a'
    """
    match = _RESULT_REVISION.match(result_revision)
    return match.group("weights") if match else result_revision


# ---------------------------------------------------------------------------- loading
def _checkout_registry() -> Path | None:
    """``registry/`` of a source checkout (editable install), if this package lives in one."""
    root = Path(__file__).resolve().parents[2]
    pyproject = root / "pyproject.toml"
    folder = root / "registry"
    if folder.is_dir() and pyproject.is_file() and 'name = "flow-plugin"' in pyproject.read_text(encoding="utf-8"):
        return folder
    return None


def registry_dirs() -> list[Path]:
    """The folders read, in order (each once)."""
    built_in = _checkout_registry() or Path(__file__).resolve().parents[1] / "_bundled_registry"
    folders = [built_in]
    for entry in os.environ.get(REGISTRY_ENV, "").split(os.pathsep):
        if entry.strip():
            folder = Path(entry.strip()).expanduser()
            if all(folder.resolve() != known.resolve() for known in folders):
                folders.append(folder)
    return folders


def _check_calibrator_tables(path: Path, tables: dict[str, dict[str, Any]], embedding_dim: int) -> None:
    """Each ``[calibrators.<method>]`` names a calibrator, and only its hyper-parameters, with
    values it accepts for ``embedding_dim``-dimensional embeddings."""
    suffixes = model_name_suffixes()
    for method, params in tables.items():
        if method not in suffixes:
            close = difflib.get_close_matches(method, list(suffixes), n=1)
            hint = f" (did you mean [calibrators.{close[0]}]?)" if close else ""
            raise RegistryError(f"{path}: [calibrators.{method}] is not a calibrator{hint}; use one of {', '.join(suffixes)}")
        cls = calibrator_class(method)
        names = cls._get_param_names()
        for key in params:
            if key not in names:
                hint = did_you_mean(key, names)
                accepted = ", ".join(names) if names else "none"
                raise RegistryError(
                    f"{path}: key 'calibrators.{method}.{key}' is not a hyper-parameter of {cls.__name__}{hint}; "
                    f"it accepts: {accepted}"
                )
        try:
            cls(**params)._check_params(embedding_dim)
        except (ValueError, TypeError) as error:
            raise RegistryError(f"{path}: [calibrators.{method}]: {error}") from None


def parse_backbone_file(path: Path) -> BackboneSpec:
    """Read and validate one registry file; every problem names the file and the key."""
    name = path.stem
    if not _NAME_PATTERN.match(name):
        raise RegistryError(f"{path}: backbone name {name!r} must be lower-case letters, digits, '.' and '-'")
    for method, suffix in model_name_suffixes().items():
        if suffix and name.endswith(suffix):
            raise RegistryError(
                f"{path}: backbone name {name!r} ends with {suffix!r}: its model name would be that of backbone "
                f"{name[: -len(suffix)]!r} with the {method} calibrator; rename the file"
            )
    data = read_toml(path, "registry file", RegistryError)
    for key, why in _NOT_KEYS.items():
        if key in data:
            raise RegistryError(f"{path}: key {key!r} is not a registry key ({why}); remove it")
    try:
        spec = BackboneSpec.model_validate({**data, "name": name, "source_file": path})
    except ValidationError as error:
        raise RegistryError(_messages(path, error)) from None
    _check_calibrator_tables(path, spec.calibrators, spec.embedding_dim)
    return spec


@dataclass
class Registry:
    """What :func:`read_registry` found: the backbones, and the files it had to leave out."""

    backbones: dict[str, BackboneSpec]
    #: (file, why it was left out), one per unreadable, invalid or shadowing file
    problems: list[tuple[Path, str]]


def read_registry(folders: Iterable[Path] | None = None) -> Registry:
    """Every valid backbone in ``folders`` (default :func:`registry_dirs`); each bad file is
    left out with the reason, so one bad file never hides the others."""
    backbones: dict[str, BackboneSpec] = {}
    problems: list[tuple[Path, str]] = []
    for folder in folders if folders is not None else registry_dirs():
        folder = Path(folder)
        if not folder.is_dir():
            problems.append((folder, f"registry folder {folder} does not exist (check ${REGISTRY_ENV})"))
            continue
        for path in sorted(folder.glob("*.toml")):
            try:
                spec = parse_backbone_file(path)
            except RegistryError as error:
                problems.append((path, str(error)))
                continue
            earlier = backbones.get(spec.name)
            if earlier is not None:
                problems.append((path, (
                    f"{path}: backbone {spec.name!r} is already defined by {earlier.source_file}; a registry file may "
                    "not replace another (both would file their results under the same model name): rename the file"
                )))
                continue
            backbones[spec.name] = spec
    return Registry(backbones, problems)


def load_registry(folders: Iterable[Path] | None = None) -> dict[str, BackboneSpec]:
    """Every backbone in ``folders`` (default :func:`registry_dirs`), by short name; the first
    bad file is an error (:func:`read_registry` collects them instead)."""
    registry = read_registry(folders)
    if registry.problems:
        raise RegistryError(registry.problems[0][1])
    return registry.backbones


@functools.lru_cache(maxsize=1)
def _default_registry() -> Registry:
    registry = read_registry()
    for _, problem in registry.problems:
        logger.warning("flow-plugin registry: left out: %s", problem)
    return registry


def default_registry(refresh: bool = False) -> dict[str, BackboneSpec]:
    """The registry of :func:`registry_dirs`, read once per process (``refresh`` re-reads it).
    Bad files are left out with a warning each (see :func:`registry_problems`)."""
    if refresh:
        _default_registry.cache_clear()
    return _default_registry().backbones


def registry_problems() -> list[tuple[Path, str]]:
    """The files :func:`default_registry` left out, with the reasons."""
    return list(_default_registry().problems)


def registry_models(registry: dict[str, BackboneSpec] | None = None) -> dict[str, RegistryModel]:
    """Every model name the registry defines -> what it means (its backbone and calibrator): the one
    table of names, so a name is looked up, never taken apart.

    >>> registry_models()["flow_plugin/minilm-l6-sn-natsv"].calibrator
    'sn-natsv'
    """
    known = registry if registry is not None else default_registry()
    return {spec.model_name(method): RegistryModel(spec, method) for spec in known.values() for method in MODEL_NAME_SUFFIXES}


def _left_out_note(short: str, registry: dict[str, BackboneSpec] | None) -> str:
    """Why a backbone of that name is missing, when the default registry left its file out."""
    if registry is not None and registry is not default_registry():
        return ""
    notes = [problem for path, problem in registry_problems() if short == path.stem or short.startswith(f"{path.stem}-")]
    return "" if not notes else " Its registry file was left out: " + " ".join(notes)


def get_backbone(name: str, registry: dict[str, BackboneSpec] | None = None) -> BackboneSpec:
    short = name.removeprefix(f"{NAMESPACE}/")
    known = registry if registry is not None else default_registry()
    if short in known:
        return known[short]
    close = difflib.get_close_matches(short, list(known), n=3, cutoff=0.5)
    hint = f" Close names: {', '.join(close)}." if close else ""
    raise RegistryError(
        f"unknown backbone {name!r}.{hint} Known backbones: {', '.join(sorted(known))}.{_left_out_note(short, registry)}"
    )


def parse_model_name(model_name: str, registry: dict[str, BackboneSpec] | None = None) -> RegistryModel:
    """``flow_plugin/bert-base-flow`` (or ``bert-base-flow``) -> (bert-base, flow), looked up in
    :func:`registry_models`."""
    known = registry if registry is not None else default_registry()
    short = model_name.removeprefix(MODEL_PREFIX)
    table = registry_models(known)
    found = table.get(MODEL_PREFIX + short)
    if found is not None:
        return found
    close = difflib.get_close_matches(MODEL_PREFIX + short, list(table), n=4, cutoff=0.6)
    hint = f" Close names: {', '.join(close)}." if close else ""
    variants = "|".join(suffix for suffix in MODEL_NAME_SUFFIXES.values() if suffix)
    raise RegistryError(
        f"unknown model {model_name!r}.{hint} Model names are {NAMESPACE}/<backbone>[{variants}]"
        f" with backbones {', '.join(sorted(known))}.{_left_out_note(short, registry)}"
    )
