"""Atomic file writes: a reader sees the old file or the new one, never a partial one; and the one
way every verb reports an output it cannot write (:func:`output_errors`)."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from filelock import FileLock, Timeout
from platformdirs import user_cache_path

from flow_plugin.errors import DataFolderError, FlowPluginError, OutputError

logger = logging.getLogger(__name__)
Measured = TypeVar("Measured")

#: the remedy for each way an output can fail to be written
_REMEDIES = {
    errno.ENOSPC: "free some space there or choose another output folder",
    errno.EDQUOT: "free some space there or choose another output folder",
    errno.EACCES: "make it writable or choose another output folder",
    errno.EPERM: "make it writable or choose another output folder",
    errno.EROFS: "choose an output folder on a writable file system",
    errno.ENOTDIR: "a file stands where a folder is needed: choose another output folder",
    errno.EEXIST: "a file stands where a folder is needed: choose another output folder",
    errno.EISDIR: "a folder stands where a file is needed: choose another output path",
}


def write_failure(error: OSError) -> str:
    """Why a write failed, in words, with the errno's name and the remedy.

    >>> write_failure(OSError(errno.ENOSPC, "No space left on device"))
    'no space left on device (ENOSPC); free some space there or choose another output folder'
    """
    reason = (error.strerror or str(error)).rstrip(".")
    reason = reason[:1].lower() + reason[1:]
    code = errno.errorcode.get(error.errno) if error.errno is not None else None
    remedy = _REMEDIES.get(error.errno, "check that the folder can be written, or choose another output folder")
    return f"{reason}{f' ({code})' if code else ''}; {remedy}"


def _on_the_way(path: str | os.PathLike[str], target: Path) -> bool:
    """Whether ``path`` is ``target``, inside it or one of its parents (a folder made for it)."""
    try:
        path, target = Path(os.path.abspath(path)), Path(os.path.abspath(target))
    except (TypeError, ValueError):
        return False
    return path.is_relative_to(target) or target.is_relative_to(path)


@contextlib.contextmanager
def output_errors(path: str | os.PathLike[str], what: str, *, within: str | os.PathLike[str] | None = None
                  ) -> Iterator[None]:
    """Turn a failure to write ``path`` (a ``what``: "output folder", "file", ...) in the block
    into one :class:`~flow_plugin.errors.OutputError` naming it, the cause (ENOSPC: "no space
    left on device") and the remedy. Converted: an ``OSError`` with an errno whose file is
    ``path`` (or its folder ``within``), inside it or one of its parents, or that names no file
    (a failed ``write``); others (a model that cannot be loaded, a data file elsewhere) and
    flow-plugin's own errors pass unchanged. The one mechanism by which every verb reports an
    output it cannot write.

    >>> with output_errors("/tmp/out", "output folder"):
    ...     raise OSError(errno.ENOSPC, "No space left on device")
    Traceback (most recent call last):
    ...
    flow_plugin.errors.OutputError: cannot write the output folder /tmp/out: no space left on device (ENOSPC); free some space there or choose another output folder
    """
    path = Path(path)
    try:
        yield
    except FlowPluginError:
        raise
    except OSError as error:
        if error.errno is None or (error.filename is not None and not _on_the_way(error.filename, Path(within or path))):
            raise
        failed = Path(os.path.abspath(error.filename)) if error.filename is not None else None
        inside = failed is not None and failed != Path(os.path.abspath(path)) and failed.is_relative_to(os.path.abspath(path))
        failure = OutputError(f"cannot write the {what} {path}{f' ({error.filename})' if inside else ''}: "
                              f"{write_failure(error)}")
        failure.errno = error.errno
        raise failure from error


def make_output_folder(path: str | os.PathLike[str], what: str = "output folder") -> Path:
    """Create the folder ``path`` (and its parents) if needed; an :class:`OutputError` naming it
    when it cannot be."""
    folder = Path(path).expanduser()
    with output_errors(folder, what):
        folder.mkdir(parents=True, exist_ok=True)
    return folder


def user_cache_dir() -> Path:
    """flow-plugin's folder in the user's cache (``platformdirs``: ``~/.cache/flow-plugin`` or
    ``$XDG_CACHE_HOME/flow-plugin`` on Linux, ``~/Library/Caches/flow-plugin`` on macOS,
    ``%LOCALAPPDATA%\\flow-plugin\\Cache`` on Windows); not created here.

    >>> user_cache_dir().name in ("flow-plugin", "Cache")
    True
    """
    return user_cache_path("flow-plugin", appauthor=False)


def _default_file_mode() -> int:
    """0o666 minus the process umask: the mode ``open()`` would give a new file."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


#: what the temporary file of an atomic write of ``<name>`` is called: ``.<name>.<random>.tmp`` in its folder
_TEMPORARY_SUFFIX = ".tmp"


def _temporary_prefix(target: Path) -> str:
    return f".{target.name}."


def remove_stale_temporaries(path: str | os.PathLike[str]) -> list[Path]:
    """Remove the temporary files that atomic writes of ``path`` (:func:`atomic_write_bytes`) left in its
    folder when their process was killed between creating and renaming them. Call it only while holding
    the lock every writer of ``path`` takes: then no live writer has a temporary file of its own there, so
    every one found is stale. Returns the files removed.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     _ = (Path(folder) / ".runs.jsonl.k3x9q.tmp").write_text("cut short")
    ...     _ = (Path(folder) / ".other.jsonl.k3x9q.tmp").write_text("another file's")
    ...     [p.name for p in remove_stale_temporaries(Path(folder) / "runs.jsonl")]
    ['.runs.jsonl.k3x9q.tmp']
    """
    target = Path(path)
    prefix = _temporary_prefix(target)
    removed = []
    try:
        candidates = list(target.parent.iterdir())
    except OSError:
        return []
    for candidate in candidates:
        name = candidate.name
        if not (name.startswith(prefix) and name.endswith(_TEMPORARY_SUFFIX)
                and len(name) > len(prefix) + len(_TEMPORARY_SUFFIX)):
            continue
        with contextlib.suppress(OSError):  # gone already, or a folder: not ours to remove
            if candidate.is_file() and not candidate.is_symlink():
                candidate.unlink()
                removed.append(candidate)
    return removed


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``path`` through a temporary file in the same folder and ``os.replace``.

    The file gets the permissions a plain ``open(path, "wb")`` would give it (``mkstemp``'s
    temporary files are private, 0600). A failure (no folder, no permission, a full disk) is an
    :class:`~flow_plugin.errors.OutputError` naming the file and the cause; nothing is left behind.
    """
    target = Path(path)
    make_output_folder(target.parent)
    with output_errors(target, "file", within=target.parent):
        handle, tmp_name = tempfile.mkstemp(prefix=_temporary_prefix(target), suffix=_TEMPORARY_SUFFIX,
                                            dir=target.parent)
        try:
            with os.fdopen(handle, "wb") as tmp_file:
                tmp_file.write(data)
                tmp_file.flush()
                os.fsync(tmp_file.fileno())
            os.chmod(tmp_name, _default_file_mode())
            os.replace(tmp_name, target)
        except BaseException:
            Path(tmp_name).unlink(missing_ok=True)
            raise
    return target


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def plain_json_value(value: Any) -> Any:
    """``json.dumps``'s ``default``: a NumPy scalar (``np.int64(3)``, a hyper-parameter from a grid) as the Python
    number it holds; anything else is JSON's usual error.

    >>> import numpy as np; json.dumps({"seed": np.int64(3), "strength": np.float32(0.5)}, default=plain_json_value)
    '{"seed": 3, "strength": 0.5}'
    """
    if getattr(value, "shape", None) == () and callable(getattr(value, "item", None)):
        return value.item()
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def atomic_write_json(path: str | os.PathLike[str], obj: Any, *, indent: int = 2) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=indent, sort_keys=False, ensure_ascii=False,
                                              default=plain_json_value) + "\n")


@contextlib.contextmanager
def atomic_folder(path: str | os.PathLike[str], what: str = "output folder") -> Iterator[Path]:
    """Yield an empty hidden sibling of the folder ``path`` (``.<name>.<random>.partial``, on the same file system)
    that becomes ``path`` when the block ends without an error; on an error or Ctrl-C it is removed. A non-empty
    folder at ``path`` (the caller decides whether it may be replaced) is renamed aside, the new one renamed into
    place, then the old one deleted: a reader sees the old folder or the new one, never a mix. A process killed
    outright leaves only the hidden sibling, never a half-written ``path``.

    >>> with tempfile.TemporaryDirectory() as parent:
    ...     with atomic_folder(Path(parent) / "model") as stage:
    ...         _ = (stage / "a.txt").write_text("a")
    ...         written_yet = (Path(parent) / "model").exists()
    ...     written_yet, sorted(path.name for path in Path(parent).rglob("*"))
    (False, ['a.txt', 'model'])
    """
    target = Path(os.path.abspath(path))  # "." has no name of its own; links are kept
    stage = target.parent / f".{target.name}.{os.urandom(6).hex()}.partial"
    with output_errors(target, what, within=target.parent):  # a full disk while writing or moving: one line
        target.parent.mkdir(parents=True, exist_ok=True)
        stage.mkdir()  # the mode mkdir gives (mkdtemp's is private)
        try:
            yield stage
            if not target.is_dir() or not any(target.iterdir()):
                os.replace(stage, target)  # rename(2) replaces an empty folder
                return
            aside = stage.with_suffix(".replaced")
            os.replace(target, aside)
            try:
                os.replace(stage, target)
            except BaseException:
                os.replace(aside, target)  # put the old folder back
                raise
            shutil.rmtree(aside, ignore_errors=True)
        except BaseException:
            shutil.rmtree(stage, ignore_errors=True)
            raise


@contextlib.contextmanager
def file_lock(path: str | os.PathLike[str], *, blocking: bool = True) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created if absent, and left in place: deleting a lock
    file races with the next taker) while the block runs.

    ``filelock``'s ``FileLock``: ``flock`` on POSIX (other machines too where the shared file system
    supports locks: NFSv4, Lustre, GPFS), ``msvcrt`` on Windows. Every taking of the lock excludes
    every other, threads of one process included. With ``blocking=False`` a lock held elsewhere is
    a ``BlockingIOError`` at once; a lock file that cannot be made is an
    :class:`~flow_plugin.errors.OutputError` naming it.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder, file_lock(Path(folder) / "runs.lock"):
    ...     pass
    """
    target = Path(path)
    make_output_folder(target.parent)
    lock = FileLock(target, mode=_default_file_mode(), blocking=blocking)
    try:
        with output_errors(target, "lock file", within=target.parent):
            lock.acquire()
    except Timeout:
        raise BlockingIOError(errno.EWOULDBLOCK, "held by another process", str(target)) from None
    try:
        yield
    finally:
        lock.release()


def read_cached(path: Path, key: dict[str, Any], parse: Callable[[dict[str, Any]], Measured | None]
                ) -> Measured | None:
    """``parse`` of the measurement cached in ``path`` for ``key``; ``None`` when absent, unreadable, not JSON,
    of another key, or refused by ``parse`` (which may also raise ``TypeError``, ``KeyError`` or ``ValueError``)."""
    try:
        content = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(content, dict) or content.get("key") != key:
            return None
        return parse(content["measurement"])
    except (OSError, UnicodeDecodeError, ValueError, TypeError, KeyError):
        return None


def cached_measurement(path: Path, key: dict[str, Any], measure: Callable[[], Measured],
                       parse: Callable[[dict[str, Any]], Measured | None],
                       to_json: Callable[[Measured], dict[str, Any] | None],
                       extra: Callable[[Measured], dict[str, Any]] = lambda value: {}) -> tuple[Measured, bool]:
    """``(measurement, from_cache)``: what ``path`` holds for ``key`` (:func:`read_cached`), else a fresh
    ``measure()``, written to ``path`` (atomically, under a file lock, so that two processes starting together
    measure once) when ``to_json`` gives it a JSON form (``None``: not worth caching), with ``extra``'s fields
    beside it. A file that is corrupt or of another key is replaced; a folder that cannot be written costs
    the caching (a warning), not the measurement. Every probe that decides how this machine runs caches so."""
    cached = read_cached(path, key, parse)
    if cached is not None:
        return cached, True
    measurement = None
    try:
        with file_lock(path.with_suffix(".lock")):
            cached = read_cached(path, key, parse)  # another process may have measured meanwhile
            if cached is not None:
                return cached, True
            measurement = measure()
            content = to_json(measurement)
            if content is not None:
                atomic_write_json(path, {"key": key, "measurement": content, **extra(measurement)})
    except (FlowPluginError, OSError) as error:  # no lock or no write: the measurement stands, uncached
        logger.warning("cannot cache a measurement in %s (%s)", path.parent, error)
    if measurement is None:
        measurement = measure()
    return measurement, False


def file_sha256(path: str | os.PathLike[str], what: str = "file") -> str:
    """The sha256 (hex) of a file's bytes, read in blocks: what identifies a file by its content, whatever
    its name or folder. A file that cannot be read is a :class:`~flow_plugin.errors.DataFolderError`
    naming it (a ``what``: "fit corpus file" ...)."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    except OSError as error:
        raise DataFolderError(f"cannot read {what} {path}: {error.strerror or error}") from None
    return digest.hexdigest()


def read_json(path: str | os.PathLike[str], what: str, remedy: str = "") -> Any:
    """The parsed content of a JSON file; errors name the file, ``what`` it should be, the
    problem (unreadable, empty, not valid JSON) and the ``remedy`` where one is given.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     path = Path(folder) / "board.json"
    ...     _ = path.write_text('{"rows": []}')
    ...     read_json(path, "leaderboard")
    {'rows': []}
    """
    path = Path(path)
    then = f"; {remedy}" if remedy else ""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise DataFolderError(f"{path}: cannot read {what}: {error}{then}") from None
    if not text.strip():
        raise DataFolderError(f"{path}: {what} is empty (an interrupted write?){then}")
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise DataFolderError(f"{path}: {what} is not valid JSON: {error}{then}") from None


def split_lines(text: str) -> list[str]:
    """The lines of ``text`` as files mean them: split at ``\\n`` (with a ``\\r`` before it,
    ``\\r\\n``) and nowhere else. ``str.splitlines`` also ends a line at a form feed, U+0085,
    U+2028 ... which are text inside a line of a file. A final line end adds no empty line.

    >>> split_lines("a\\x0cb\\u2028c\\r\\nd\\n")
    ['a\\x0cb\\u2028c', 'd']
    """
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # the final line end, not an empty line
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def read_text_lines(path: str | os.PathLike[str], what: str) -> list[str]:
    """The lines of the UTF-8 text file ``path`` (a ``what``: "fit corpus file" ...), split by
    :func:`split_lines`; a byte-order mark is dropped. The one reader of line-based data files.
    Errors name the file (and the line): missing, unreadable, not UTF-8, or a ``\\r`` not
    followed by ``\\n`` (old Mac line ends: neither silently a line end nor silently text)."""
    path = Path(path)
    if not path.exists():
        raise DataFolderError(f"{what} {path} does not exist")
    if not path.is_file():
        raise DataFolderError(f"{what} {path} is not a file")
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise DataFolderError(f"cannot read {what} {path}: {error.strerror or error}") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = raw[: error.start].count(b"\n") + 1
        raise DataFolderError(f"{path}, line {line}: not valid UTF-8 ({error.reason})") from None
    lone = re.search("\r(?!\n)", text)
    if lone is not None:
        line = text.count("\n", 0, lone.start()) + 1
        raise DataFolderError(f"{path}, line {line}: a carriage return (\\r) not followed by a line feed; "
                              "save the file with \\n or \\r\\n line ends")
    return split_lines(text)


def read_json_lines(path: str | os.PathLike[str], what: str) -> Iterator[tuple[int, Any]]:
    """(line number, parsed value) for every non-blank line of a JSON-lines file; errors name
    the file and the line."""
    path = Path(path)
    try:
        lines = split_lines(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as error:
        raise DataFolderError(f"{path}: cannot read {what}: {error}") from None
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise DataFolderError(f"{path}: line {number} is not valid JSON: {error}") from None
        yield number, record


def read_toml(path: str | os.PathLike[str], what: str, error: type[Exception]) -> dict[str, Any]:
    """The table of the TOML file ``path`` (a ``what``: "registry file", "sweep file"), or
    ``error`` with a message naming the file and what is wrong with it.

    >>> read_toml("/nonexistent.toml", "sweep file", ValueError)
    Traceback (most recent call last):
    ...
    ValueError: /nonexistent.toml: sweep file not found
    """
    path = Path(path)
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise error(f"{path}: {what} not found") from None
    except (OSError, UnicodeDecodeError) as problem:
        raise error(f"{path}: cannot read {what}: {problem}") from None
    except tomllib.TOMLDecodeError as problem:
        raise error(f"{path}: not valid TOML: {problem}") from None
