"""An export folder appears whole or not at all.

The folder is built in a hidden sibling (``.<name>.<random>.partial``, on the same file system)
and renamed into place when it is complete. An error or Ctrl-C on the way removes the sibling;
a process killed outright leaves only the hidden sibling, never a half-written ``<name>``. While
it builds, the export holds a lock on ``.<name>.<random>.partial.lock``; the next export to the
same destination removes every sibling whose lock nobody holds any more (its exporter was killed),
and leaves those of exports still running alone.

An existing destination is refused unless it is empty, or ``overwrite`` is given and it holds a
model (``modules.json``: a sentence-transformers folder, an earlier export included). Then the
old folder is renamed aside, the new one renamed into place, and the old one deleted: a reader
sees the old folder or the new one (or, for the instant between the two renames, none), never a
mix. A folder that holds no model is never replaced, so a mistyped ``--out`` cannot delete it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from flow_plugin._io import file_lock, output_errors
from flow_plugin.errors import InputError, OutputError

logger = logging.getLogger(__name__)

#: the file every sentence-transformers model folder has; only such a folder may be overwritten
MODEL_MARKER = "modules.json"


def check_destination(destination: Path, *, overwrite: bool) -> None:
    """Refuse a destination that is a file, or a non-empty folder (unless ``overwrite`` and it
    holds a model)."""
    if destination.is_file():
        raise InputError(f"--out {destination} is a file; give a folder path that does not exist yet")
    existing = next(folder for folder in Path(os.path.abspath(destination)).parents if folder.exists())
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        problem = "is a file, not a folder" if not existing.is_dir() else "is not writable"
        raise OutputError(f"cannot write the export folder {destination}: {existing} {problem}; choose another folder")
    if not destination.is_dir() or not any(destination.iterdir()):
        return
    if not overwrite:
        raise InputError(f"--out {destination} exists and is not empty; pass --overwrite (overwrite=True) to replace it, "
                         "or choose another folder")
    if not (destination / MODEL_MARKER).is_file():
        raise InputError(f"--out {destination} is not empty and holds no sentence-transformers model ({MODEL_MARKER}); "
                         "--overwrite replaces only a model folder: choose another folder")


def _default_modes(folder: Path) -> None:
    """Give the folder and its files the modes ``mkdir``/``open`` would (``mkdtemp`` makes 0700,
    and some writers make private 0600 files)."""
    umask = os.umask(0)
    os.umask(umask)
    for path in [folder, *folder.rglob("*")]:
        if not path.is_symlink():
            os.chmod(path, (0o777 if path.is_dir() else 0o666) & ~umask)


def remove_killed_stages(destination: Path) -> list[Path]:
    """Remove the staging folders of exports to ``destination`` that were killed outright (their
    lock is free); returns them. Those of exports still running hold their lock and are kept."""
    removed = []
    for lock in sorted(destination.parent.glob(f".{destination.name}.*.partial.lock")):
        stage = lock.with_suffix("")  # .<name>.<random>.partial
        try:
            with file_lock(lock, blocking=False):
                if stage.exists():
                    shutil.rmtree(stage)
                    removed.append(stage)
        except BlockingIOError:
            continue  # an export still running
        lock.unlink(missing_ok=True)
    for stage in removed:
        logger.info("removed %s, left by an export that was killed", stage)
    return removed


@contextlib.contextmanager
def staged_folder(destination: str | os.PathLike[str], *, overwrite: bool = False) -> Iterator[Path]:
    """Yield an empty staging folder beside ``destination``; when the block ends without an
    error, the staging folder becomes ``destination``; otherwise it is removed."""
    destination = Path(os.path.abspath(destination))  # "." has no name and no parent of its own; links are kept
    check_destination(destination, overwrite=overwrite)
    with output_errors(destination, "export folder"):
        destination.parent.mkdir(parents=True, exist_ok=True)
    remove_killed_stages(destination)
    stage = destination.parent / f".{destination.name}.{secrets.token_hex(6)}.partial"
    lock = stage.with_name(stage.name + ".lock")
    try:
        with file_lock(lock):  # taken before the folder exists, released after it is gone (moved or removed)
            stage.mkdir(mode=0o700)
            try:
                yield stage
                _default_modes(stage)
                _move_into_place(stage, destination, overwrite=overwrite)
            except BaseException:
                shutil.rmtree(stage, ignore_errors=True)
                raise
    finally:
        lock.unlink(missing_ok=True)


def _move_into_place(stage: Path, destination: Path, *, overwrite: bool) -> None:
    check_destination(destination, overwrite=overwrite)  # again: another process may have written there meanwhile
    if not destination.exists() or not any(destination.iterdir()):
        os.replace(stage, destination)  # rename(2) replaces an empty folder
        return
    aside = Path(tempfile.mkdtemp(prefix=f".{destination.name}.", suffix=".replaced", dir=destination.parent))
    os.replace(destination, aside)  # an empty folder is replaced by the old one
    try:
        os.replace(stage, destination)
    except BaseException:
        os.replace(aside, destination)  # put the old folder back
        raise
    shutil.rmtree(aside, ignore_errors=True)
