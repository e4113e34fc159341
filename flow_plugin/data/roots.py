"""Where the evaluation data is: one data root, named by one environment variable.

The data root holds ``senteval/`` (SentEval's ``downstream/``: the STS sets and the classification files),
``glue/`` (GLUE QNLI) and ``mteb/`` (the Banking77 files): the layout of the shared data folder.
``$FLOW_PLUGIN_SHARED_DATA`` names it; a command's ``--data`` or a task's ``data_dir`` wins over it. Every reader
takes its part of it through :func:`data_part`; :func:`resolve_senteval_root` finds the SentEval folder in any of
the forms a user may name it by.

``FLOW_PLUGIN_SENTEVAL_DATA`` and ``FLOW_PLUGIN_GLUE_DATA`` (one part each) are still read when
``FLOW_PLUGIN_SHARED_DATA`` is unset, with a warning that names the variable to set instead.

Examples
--------
>>> import os, tempfile
>>> saved = os.environ.get(DATA_ENV)
>>> folder = Path(tempfile.mkdtemp())
>>> (folder / "senteval").mkdir()
>>> os.environ[DATA_ENV] = str(folder)
>>> data_part("senteval") == folder / "senteval", data_part("glue") == folder
(True, True)
>>> _ = os.environ.pop(DATA_ENV); os.environ.update({DATA_ENV: saved} if saved is not None else {})
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

from flow_plugin.errors import DataFolderError, InputTypeError

#: the environment variable that names the data root
DATA_ENV = "FLOW_PLUGIN_SHARED_DATA"
#: the parts of a data root, and the variable that named each one before there was one root
PARTS = {"senteval": "FLOW_PLUGIN_SENTEVAL_DATA", "glue": "FLOW_PLUGIN_GLUE_DATA"}

_warned: set[str] = set()


def data_root(explicit: str | os.PathLike[str] | None = None, *, beside_checkout: bool = True) -> Path | None:
    """The data root: ``explicit``, else ``$FLOW_PLUGIN_SHARED_DATA``, else the parent of a part named by an
    older variable, else (``beside_checkout``) ``../shared/data`` beside a source checkout; ``None`` when none."""
    if explicit is not None:
        return Path(explicit).expanduser()
    value = os.environ.get(DATA_ENV)
    if value:
        return Path(value).expanduser()
    for part in PARTS:
        folder = _older_variable(part)
        if folder is not None:
            return folder.resolve().parent
    checkout = Path(__file__).resolve().parents[2]
    beside = checkout.parent / "shared" / "data"
    if beside_checkout and (checkout / "pyproject.toml").is_file() and beside.is_dir():
        return beside
    return None


def data_part(part: str, explicit: str | os.PathLike[str] | None = None, *,
              beside_checkout: bool = True) -> Path | None:
    """The folder of one part (``"senteval"``, ``"glue"``) of the data root: ``<root>/<part>`` when it exists,
    else the folder an ``explicit`` argument or ``$FLOW_PLUGIN_SHARED_DATA`` names (which may be the part's own
    folder; its reader checks it). ``None`` when nothing is configured, or a root found beside the checkout lacks
    the part."""
    if part not in PARTS:
        raise ValueError(f"unknown data part {part!r}; the parts: {', '.join(PARTS)}")
    if explicit is None and not os.environ.get(DATA_ENV):
        older = _older_variable(part)
        if older is not None:
            return older
    root = data_root(explicit, beside_checkout=beside_checkout)
    if root is None:
        return None
    if (root / part).is_dir():
        return root / part
    named = explicit is not None or bool(os.environ.get(DATA_ENV))
    return root if named else None  # (its reader says what is missing)


def _older_variable(part: str) -> Path | None:
    """The folder an older per-part variable names (with a warning, once per process), or ``None``."""
    name = PARTS[part]
    value = os.environ.get(name)
    if not value:
        return None
    if name not in _warned:
        _warned.add(name)
        warnings.warn(f"{name} is read for now; set {DATA_ENV} to the folder that holds {part}/ instead (one "
                      "variable for every part of the data)", FutureWarning, stacklevel=3)
    return Path(value).expanduser()


def resolve_senteval_root(path: str | os.PathLike[str]) -> Path:
    """Return the SentEval data folder, i.e. the folder that contains ``downstream/``.

    ``path`` may be that folder (SentEval's ``task_path``, e.g. ``shared/data/senteval``), the
    ``downstream`` folder itself, or the data root holding ``senteval/``.
    Anything else raises :class:`DataFolderError`.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise InputTypeError(f"SentEval root must be a path, got {type(path).__name__}")
    root = Path(path).expanduser()
    if not root.exists():
        raise DataFolderError(f"SentEval data folder {root} does not exist")
    if not root.is_dir():
        raise DataFolderError(f"SentEval data folder {root} is not a folder")
    if (root / "downstream").is_dir():
        return root
    if root.name == "downstream" and ((root / "STS").is_dir() or (root / "SICK").is_dir()):
        return root.parent
    if (root / "senteval" / "downstream").is_dir():  # the data root
        return root / "senteval"
    raise DataFolderError(
        f"{root} is not a SentEval data folder: expected a folder containing downstream/ "
        f"(SentEval's task_path, e.g. .../senteval) or the downstream/ folder itself "
        f"(containing STS/ or SICK/), or the data folder holding senteval/"
    )


__all__ = ["DATA_ENV", "PARTS", "data_part", "data_root", "resolve_senteval_root"]
