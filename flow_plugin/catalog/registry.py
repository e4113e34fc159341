"""Backbones from ``registry/*.toml`` and the model names they expand to.

One small, human-edited TOML file per backbone; the file name (without ``.toml``) is the
backbone's short name. Each backbone expands to six model names::

    flow_plugin/<backbone>            raw embeddings
    flow_plugin/<backbone>-sn         standard normalisation
    flow_plugin/<backbone>-natsv      nulling away the top-k singular vectors
    flow_plugin/<backbone>-sn-natsv   SN then NATSV
    flow_plugin/<backbone>-whiten     whitening
    flow_plugin/<backbone>-flow       BERT-flow

Registry folders, in order (a later folder's file replaces an earlier one of the same name):
the packaged registry (or, in a source checkout, the checkout's ``registry/``), then every
folder listed in ``$FLOW_PLUGIN_REGISTRY`` (separated by ``os.pathsep``).
"""

from __future__ import annotations

import datetime
import difflib
import functools
import os
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flow_plugin.errors import RegistryError
from flow_plugin.catalog.local_weights import KINDS as LOCAL_WEIGHT_KINDS
from flow_plugin.catalog.local_weights import LocalWeights
from flow_plugin.encoding.pooling import parse_pooling

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

NAMESPACE = "flow_plugin"
REGISTRY_ENV = "FLOW_PLUGIN_REGISTRY"
#: calibrator method -> model-name suffix ("raw" has none)
VARIANT_SUFFIXES: dict[str, str] = {
    "raw": "",
    "sn": "-sn",
    "natsv": "-natsv",
    "sn-natsv": "-sn-natsv",
    "whiten": "-whiten",
    "flow": "-flow",
}
_NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9.\-]*[a-z0-9]$")

_REQUIRED = {
    "hub_id": str,
    "pooling": (str, list),
    "max_seq_length": int,
    "embedding_dim": int,
    "n_parameters": int,
    "license": str,
    "release_date": str,
    "reference": str,
}
_OPTIONAL = {
    "revision": str,
    "description": str,
    "languages": list,
    "trust_remote_code": bool,
    "citation": str,
    "local_weights": dict,
    "calibrators": dict,
}
_LOCAL_WEIGHT_KEYS = {"kind": str, "packages": list, "folder": str, "install": str}


@dataclass(frozen=True)
class BackboneSpec:
    """One registry file, validated."""

    name: str
    hub_id: str
    revision: str | None
    pooling: str
    max_seq_length: int
    embedding_dim: int
    n_parameters: int
    license: str
    release_date: str
    reference: str
    source_file: Path
    description: str = ""
    languages: tuple[str, ...] = ("eng-Latn",)
    trust_remote_code: bool = False
    citation: str | None = None
    local_weights: LocalWeights | None = None
    #: per-method hyper-parameters, e.g. {"whiten": {"n_components": 256}}
    calibrator_params: dict[str, dict[str, Any]] = field(default_factory=dict)

    def model_name(self, calibrator: str = "raw") -> str:
        return f"{NAMESPACE}/{self.name}{VARIANT_SUFFIXES[calibrator]}"

    @property
    def model_names(self) -> list[str]:
        return [self.model_name(method) for method in VARIANT_SUFFIXES]

    def weights_location(self) -> tuple[str, str | None, str]:
        """(what to pass to ``from_pretrained``, revision, human-readable source).

        Local packaged weights win when installed; otherwise the hub id at the pinned revision.
        """
        if self.local_weights is not None:
            folder = self.local_weights.resolve()
            if folder is not None:
                return str(folder), self.revision, f"local: {self.local_weights.describe()}"
        return self.hub_id, self.revision, "hub"


@dataclass(frozen=True)
class ModelVariant:
    """A backbone and a calibrator method: what one model name means."""

    backbone: BackboneSpec
    calibrator: str

    @property
    def name(self) -> str:
        return self.backbone.model_name(self.calibrator)

    @property
    def calibrator_params(self) -> dict[str, Any]:
        return dict(self.backbone.calibrator_params.get(self.calibrator, {}))


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
    """The folders read, in order."""
    built_in = _checkout_registry() or Path(__file__).resolve().parents[1] / "_bundled_registry"
    folders = [built_in]
    for entry in os.environ.get(REGISTRY_ENV, "").split(os.pathsep):
        if entry.strip():
            folders.append(Path(entry.strip()).expanduser())
    return folders


def _type_name(expected: Any) -> str:
    if isinstance(expected, tuple):
        return " or ".join(t.__name__ for t in expected)
    return expected.__name__


def _check_type(path: Path, key: str, value: Any, expected: Any) -> None:
    if isinstance(value, bool) and expected is int:
        raise RegistryError(f"{path}: key {key!r} must be {_type_name(expected)}, got a boolean")
    if not isinstance(value, expected):
        raise RegistryError(f"{path}: key {key!r} must be {_type_name(expected)}, got {type(value).__name__} {value!r}")


def parse_backbone_file(path: Path) -> BackboneSpec:
    """Read and validate one registry file; every problem names the file and the key."""
    name = path.stem
    if not _NAME_PATTERN.match(name):
        raise RegistryError(f"{path}: backbone name {name!r} must be lower-case letters, digits, '.' and '-'")
    for method, suffix in VARIANT_SUFFIXES.items():
        if suffix and name.endswith(suffix):
            raise RegistryError(
                f"{path}: backbone name {name!r} ends with {suffix!r}, which would clash with the {method} variant"
            )
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as error:
        raise RegistryError(f"{path}: cannot read registry file: {error}") from None
    except tomllib.TOMLDecodeError as error:
        raise RegistryError(f"{path}: not valid TOML: {error}") from None

    unknown = set(data) - set(_REQUIRED) - set(_OPTIONAL)
    if unknown:
        hints = []
        for key in sorted(unknown):
            close = difflib.get_close_matches(key, [*_REQUIRED, *_OPTIONAL], n=1)
            hints.append(f"{key!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        raise RegistryError(f"{path}: unknown key(s) {', '.join(hints)}")
    missing = [key for key in _REQUIRED if key not in data]
    if missing:
        raise RegistryError(f"{path}: missing required key(s) {', '.join(repr(k) for k in missing)}")
    for key, expected in {**_REQUIRED, **_OPTIONAL}.items():
        if key in data:
            _check_type(path, key, data[key], expected)

    try:
        pooling = parse_pooling(data["pooling"]).name
    except (ValueError, TypeError) as error:
        raise RegistryError(f"{path}: key 'pooling': {error}") from None
    for key in ("max_seq_length", "embedding_dim", "n_parameters"):
        if data[key] < (2 if key == "max_seq_length" else 1):
            raise RegistryError(f"{path}: key {key!r} must be positive, got {data[key]}")
    try:
        datetime.date.fromisoformat(data["release_date"])
    except ValueError:
        raise RegistryError(f"{path}: key 'release_date' must be YYYY-MM-DD, got {data['release_date']!r}") from None
    if not data["reference"].startswith(("http://", "https://")):
        raise RegistryError(f"{path}: key 'reference' must be a URL, got {data['reference']!r}")
    languages = data.get("languages", ["eng-Latn"])
    if not all(isinstance(item, str) for item in languages):
        raise RegistryError(f"{path}: key 'languages' must be a list of strings like 'eng-Latn'")

    local_weights = None
    if "local_weights" in data:
        table = data["local_weights"]
        extra = set(table) - set(_LOCAL_WEIGHT_KEYS)
        if extra or set(_LOCAL_WEIGHT_KEYS) - set(table):
            raise RegistryError(
                f"{path}: [local_weights] needs exactly the keys {', '.join(_LOCAL_WEIGHT_KEYS)}; got {', '.join(table)}"
            )
        for key, expected in _LOCAL_WEIGHT_KEYS.items():
            _check_type(path, f"local_weights.{key}", table[key], expected)
        if table["kind"] not in LOCAL_WEIGHT_KINDS:
            raise RegistryError(f"{path}: local_weights.kind must be one of {LOCAL_WEIGHT_KINDS}, got {table['kind']!r}")
        if not table["packages"] or not all(isinstance(item, str) for item in table["packages"]):
            raise RegistryError(f"{path}: local_weights.packages must be a non-empty list of package names")
        local_weights = LocalWeights(table["kind"], tuple(table["packages"]), table["folder"], table["install"])

    calibrator_params: dict[str, dict[str, Any]] = {}
    for method, params in data.get("calibrators", {}).items():
        if method not in VARIANT_SUFFIXES:
            raise RegistryError(
                f"{path}: [calibrators.{method}] is not a calibrator; use one of {', '.join(VARIANT_SUFFIXES)}"
            )
        if not isinstance(params, dict):
            raise RegistryError(f"{path}: [calibrators.{method}] must be a table of hyper-parameters")
        calibrator_params[method] = dict(params)

    return BackboneSpec(
        name=name,
        hub_id=data["hub_id"],
        revision=data.get("revision"),
        pooling=pooling,
        max_seq_length=data["max_seq_length"],
        embedding_dim=data["embedding_dim"],
        n_parameters=data["n_parameters"],
        license=data["license"],
        release_date=data["release_date"],
        reference=data["reference"],
        source_file=path,
        description=data.get("description", ""),
        languages=tuple(languages),
        trust_remote_code=data.get("trust_remote_code", False),
        citation=data.get("citation"),
        local_weights=local_weights,
        calibrator_params=calibrator_params,
    )


def load_registry(folders: Iterable[Path] | None = None) -> dict[str, BackboneSpec]:
    """Every backbone in ``folders`` (default :func:`registry_dirs`), by short name."""
    specs: dict[str, BackboneSpec] = {}
    for folder in folders if folders is not None else registry_dirs():
        folder = Path(folder)
        if not folder.is_dir():
            raise RegistryError(f"registry folder {folder} does not exist (check ${REGISTRY_ENV})")
        for path in sorted(folder.glob("*.toml")):
            spec = parse_backbone_file(path)
            specs[spec.name] = spec
    return specs


@functools.lru_cache(maxsize=1)
def _default_registry() -> dict[str, BackboneSpec]:
    return load_registry()


def default_registry(refresh: bool = False) -> dict[str, BackboneSpec]:
    """The registry of :func:`registry_dirs`, read once per process (``refresh`` re-reads it)."""
    if refresh:
        _default_registry.cache_clear()
    return _default_registry()


def all_model_names(registry: dict[str, BackboneSpec] | None = None) -> list[str]:
    registry = registry if registry is not None else default_registry()
    return [name for spec in registry.values() for name in spec.model_names]


def get_backbone(name: str, registry: dict[str, BackboneSpec] | None = None) -> BackboneSpec:
    registry = registry if registry is not None else default_registry()
    short = name.removeprefix(f"{NAMESPACE}/")
    if short in registry:
        return registry[short]
    close = difflib.get_close_matches(short, list(registry), n=3, cutoff=0.5)
    hint = f" Close names: {', '.join(close)}." if close else ""
    raise RegistryError(f"unknown backbone {name!r}.{hint} Known backbones: {', '.join(sorted(registry))}.")


def parse_model_name(model_name: str, registry: dict[str, BackboneSpec] | None = None) -> ModelVariant:
    """``flow_plugin/bert-base-flow`` (or ``bert-base-flow``) -> (bert-base, flow)."""
    registry = registry if registry is not None else default_registry()
    short = model_name.removeprefix(f"{NAMESPACE}/")
    # longest suffix first, so "-sn-natsv" wins over "-natsv"
    for method, suffix in sorted(VARIANT_SUFFIXES.items(), key=lambda item: -len(item[1])):
        if suffix and short.endswith(suffix) and short[: -len(suffix)] in registry:
            return ModelVariant(registry[short[: -len(suffix)]], method)
    if short in registry:
        return ModelVariant(registry[short], "raw")
    names = all_model_names(registry)
    close = difflib.get_close_matches(f"{NAMESPACE}/{short}", names, n=4, cutoff=0.6)
    hint = f" Close names: {', '.join(close)}." if close else ""
    raise RegistryError(
        f"unknown model {model_name!r}.{hint} Model names are {NAMESPACE}/<backbone>[-sn|-natsv|-sn-natsv|-whiten|-flow]"
        f" with backbones {', '.join(sorted(registry))}."
    )
