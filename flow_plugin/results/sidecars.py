"""Files flow-plugin keeps next to an MTEB task result: where they go, and how the array files are
written and read.

MTEB writes ``<output>/results/<model>/<revision>/[experiments/<name>/]<Task>.json``. A sidecar is
``<folder>/<Task><suffix>`` next to it: the subfolder keeps it out of what mteb's ``ResultCache``
(``*/*/*.json``) and flow-plugin's result scans (``<Task>.json``) read as task results. The fit
records (:mod:`.fits`) are JSON; the per-pair (:mod:`.pairs`) and per-item
(:mod:`.items`) scores are NumPy ``.npz`` archives with a JSON ``meta`` entry that names their
format and version. Every sidecar is written atomically.

Examples
--------
>>> sidecar_path(Path("out/results/m/rev/STS12.json"), "fits").as_posix()
'out/results/m/rev/flow-plugin-fits/STS12.fits.json'
"""

from __future__ import annotations

import io
import json
import os
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from flow_plugin._io import atomic_write_bytes
from flow_plugin.errors import DataFolderError

if TYPE_CHECKING:  # numpy is imported where an array file is read or written: the leaderboard's modules import
    import numpy as np  # the path rule without it

T = TypeVar("T")


#: every kind of file kept with a result: kind -> (its folder next to the result, its suffix)
SIDE_FILES = {
    "fits": ("flow-plugin-fits", ".fits.json"),
    "pairs": ("flow-plugin-pairs", ".pairs.npz"),
    "items": ("flow-plugin-items", ".items.npz"),
}


def sidecar_path(result_path: str | os.PathLike[str], kind: str) -> Path:
    """The file of ``kind`` (a key of :data:`SIDE_FILES`) kept with an MTEB task result: ``<folder>/<Task><suffix>``
    next to it, out of what result scans read."""
    folder, suffix = SIDE_FILES[kind]
    result_path = Path(result_path)
    return result_path.parent / folder / f"{result_path.stem}{suffix}"


def side_files(result_path: str | os.PathLike[str]) -> list[Path]:
    """Every file a result may have next to it (whether it exists or not), in :data:`SIDE_FILES` order."""
    return [sidecar_path(result_path, kind) for kind in SIDE_FILES]


def write_array_sidecar(path: str | os.PathLike[str], meta: dict[str, Any], arrays: dict[str, Any], *,
                        compress: bool = False) -> Path:
    """Write ``arrays`` and ``meta`` (JSON, keys sorted; it holds ``format`` and ``format_version``) as one
    ``.npz`` archive, atomically; returns the path."""
    import numpy as np  # not with the CLI, which imports this module

    buffer = io.BytesIO()
    save = np.savez_compressed if compress else np.savez
    save(buffer, meta=np.array(json.dumps(meta, sort_keys=True)), **{name: np.asarray(value) for name, value in arrays.items()})
    return atomic_write_bytes(path, buffer.getvalue())


def read_array_sidecar(path: str | os.PathLike[str], file_format: str, version: int, what: str,
                       make: Callable[[dict[str, Any], dict[str, np.ndarray]], T]) -> T:
    """``make(meta, arrays)`` of a sidecar written by :func:`write_array_sidecar`, checked to be ``file_format``
    ``version``; a file that is not, or that ``make`` cannot use (a missing key or array), is a one-line error
    naming the file (a ``what``: "per-item file") and the remedy."""
    import numpy as np  # not with the CLI, which imports this module

    try:
        with np.load(path, allow_pickle=False) as data:
            meta = json.loads(str(data["meta"]))
            if meta.get("format") != file_format or meta.get("format_version") != version:
                raise ValueError(f"not {file_format} version {version}")
            arrays = {name: data[name] for name in data.files if name != "meta"}
        return make(meta, arrays)
    except (OSError, ValueError, KeyError, TypeError, EOFError, zipfile.BadZipFile) as error:  # a cut-short archive
        raise DataFolderError(f"{path}: unreadable {what} ({error}); delete it and rerun the task") from None
