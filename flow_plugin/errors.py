"""Exceptions raised by flow-plugin.

Each class also derives from the built-in exception a caller would naturally catch
(``ValueError``, ``TypeError``, ``FileNotFoundError``, ``OSError``, ``LookupError``, ``ImportError``), so code that
does not know flow-plugin still handles them sensibly.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the known name closest to ``name``, or ``""`` when none is close: the hint every
    error about an unknown name ends with.

    >>> did_you_mean("devise", ["device", "precision"]), did_you_mean("zzz", ["device"])
    (" (did you mean 'device'?)", '')
    """
    close = difflib.get_close_matches(name, list(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


class FlowPluginError(Exception):
    """Base class of every error flow-plugin raises on purpose."""


class InputError(FlowPluginError, ValueError):
    """Bad values: empty corpus, NaN/inf embeddings, wrong shape, too few samples."""


class EncoderOutputError(FlowPluginError, ValueError):
    """A base model's ``encode()`` returned something other than one row of finite numbers per input text; the
    message names the model, the task and what it returned."""


class CalibrationError(InputError):
    """A calibrator fitted on a corpus gives a space whose cosines are rounding noise (dominated by
    near-null directions); the message names the corpus, what was measured and the remedy."""


class InputTypeError(FlowPluginError, TypeError):
    """Bad types: a sentence that is not a ``str``, an array that is not numeric."""


class NotFittedError(FlowPluginError, ValueError, AttributeError):
    """A calibrator was used before ``fit`` (same contract as scikit-learn's)."""


class CalibratorFileError(FlowPluginError, ValueError):
    """A saved calibrator cannot be loaded: wrong method, wrong dimension, bad file."""


class DataFolderError(FlowPluginError, FileNotFoundError):
    """A data folder is missing, unreadable or malformed. The message names the file."""


class OutputError(FlowPluginError, OSError):
    """An output folder or file cannot be written: a file where a folder should be, no permission,
    a read-only file system, a full disk. The message names the path, the cause and the remedy;
    ``errno`` is the operating system's."""


class WeightsUnavailableError(FlowPluginError, OSError):
    """A backbone's weights are neither installed locally nor loadable from the Hugging Face Hub
    (offline, not reachable, no such model or folder); the message names the command that installs
    them, or what to check."""


class DatasetUnavailableError(FlowPluginError, ConnectionError):
    """A task's data lives on the Hugging Face Hub and could not be fetched (offline, not reachable, not cached);
    the message names the task, the dataset and the ways on."""


class RegistryError(FlowPluginError, LookupError):
    """An unknown backbone or model name, or a malformed ``registry/*.toml`` file."""


class UnsupportedVersionError(FlowPluginError, ImportError):
    """An installed mteb or transformers is outside the range flow-plugin supports; the message names
    both and the ``pip install`` that fixes it."""


class UnknownNameError(RegistryError, KeyError):
    """A name MTEB does not know, raised where MTEB raises a ``KeyError`` (so that its callers' handling holds);
    printed as its message, unquoted."""

    def __str__(self) -> str:  # KeyError would print the message quoted
        return str(self.args[0]) if self.args else ""


class UnknownModelError(UnknownNameError):
    """A model name under ``flow_plugin/`` that is no registry model; the message names close names."""


class UnknownTaskError(UnknownNameError):
    """A task name MTEB's registry lacks (``mteb run -t``, ``mteb.get_task``): MTEB's close name, and where a user's
    own task would come from."""


class MissingExtraError(FlowPluginError, ImportError):
    """An optional dependency is not installed; the message names the extra that installs it,
    e.g. ``pip install 'flow-plugin[plots]'`` for matplotlib."""


class SweepError(FlowPluginError, ValueError):
    """A sweep cannot start or run: a malformed sweep file (the message names the file and the
    key), an unreachable Ray cluster, resources the cluster cannot give."""


class LeaderboardError(FlowPluginError, ValueError):
    """A leaderboard file is malformed, or the inputs cannot make a leaderboard."""


class LeaderboardConflictError(LeaderboardError):
    """New results disagree with recorded ones; ``conflicts`` lists them (one line each)."""

    def __init__(self, message: str, conflicts: list[str]) -> None:
        super().__init__(message)
        self.conflicts = conflicts
