"""The embedding cache: what a model gave for a text, kept so that no text goes through the model twice.

:class:`EmbeddingCache` is the one store. It holds the embeddings of one model (named by its *key*: weights,
loader, pooling, precision, prompts, library versions) in blocks, per *context* (what the model is told besides
the text: the task, subset and side a model with prompts embeds for; none for a registry backbone). A block is
either

- *texts*: rows for texts embedded for their own sake, each of which later serves that text again in its context
  (a backbone's sentences, a fit's text); or
- *a call*: the rows a model returned for one ``encode`` call, which serve that same call again (the same texts in
  the same batches, split and keywords), bit for bit.

In memory it keeps every context, or those of the most recent tasks (``memory_tasks``). With a ``cache_dir`` each
block is also a shard on disk, read back by the next process:

    <cache_dir>/<digest of the model key>/key.json                           the key, for humans
    <cache_dir>/<digest of the model key>/shard-<id>.npz                     a block without context
    <cache_dir>/<digest of the model key>/<digest of the context>/shard-<id>.npz

A shard is written atomically, once, with its key, context, call and a checksum of its arrays; its arrays are
checked (shape, float32, finite) before it is written and after it is read. A shard that cannot be read, belongs to
another key or context, or fails a check is reported, removed and recomputed, never trusted.

:class:`CachedEncoder` is a registry backbone behind such a cache, and :func:`shared_encoder` returns one per
backbone key in the process, so the variants of a backbone share one model in memory and one embedding per
sentence. A model MTEB loads sits behind one through
:class:`flow_plugin.integrations.mteb.base_encoders.CachedBase`.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from flow_plugin._io import atomic_write_bytes, atomic_write_json
from flow_plugin._validation import check_sentences
from flow_plugin.encoding.backbone import Backbone
from flow_plugin.encoding.options import check_batch_size, default_cache_dir
from flow_plugin.errors import InputError

logger = logging.getLogger(__name__)

CACHE_FORMAT = "flow-plugin-embedding-cache"
CACHE_VERSION = 2  # 2: the key names the kernels and the batch plan


def text_digest(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8")).digest()


def key_digest(key: Mapping[str, Any]) -> str:
    """A short, stable digest of a JSON-ready key (its folder or file name)."""
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]


def _arrays_checksum(*arrays: np.ndarray) -> str:
    digest = hashlib.sha256()
    for array in arrays:
        digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()


class _Rows:
    """The blocks of one context: each block an (n, d) array, as it was computed or read. ``where`` maps a text's
    digest to ``block << 32 | row`` (text blocks only), ``calls`` a call's digest to its block; a lookup is a few
    vectorised gathers per block instead of stacking one small array per text."""

    def __init__(self) -> None:
        self.blocks: list[np.ndarray] = []
        self.where: dict[bytes, int] = {}
        self.calls: dict[str, int] = {}
        self.loaded = False

    def add(self, digests: Sequence[bytes], embeddings: np.ndarray, call: str | None) -> None:
        block = len(self.blocks)
        self.blocks.append(embeddings)
        if call is not None:
            self.calls.setdefault(call, block)
            return
        for row, digest in enumerate(digests):
            self.where.setdefault(digest, block << 32 | row)  # a known text keeps its row

    def gather(self, digests: Sequence[bytes]) -> np.ndarray:
        codes = np.fromiter((self.where[digest] for digest in digests), dtype=np.int64, count=len(digests))
        blocks, rows = codes >> 32, codes & 0xFFFFFFFF
        output = np.empty((len(digests), self.blocks[int(blocks[0])].shape[1]), dtype=np.float32)
        for block in np.unique(blocks):
            chosen = blocks == block
            output[chosen] = self.blocks[int(block)][rows[chosen]]
        return output


class EmbeddingCache:
    """What one model gave for each text and each call, in memory and, with a folder, on disk (module doc).

    Parameters
    ----------
    key:
        JSON-ready: everything that decides the model's output apart from the texts and their context (weights,
        loader, pooling, precision, prompts, library versions).
    cache_dir:
        The cache folder; ``None``: memory only.
    owner:
        The model's name, for messages.
    width:
        Gives the embedding width, called once when it is first needed; ``None``: that of the first rows kept.
    memory_tasks:
        How many tasks' contexts memory keeps (the most recently used; a context's task is its ``"task"``; the
        folder keeps them all); ``None``: every context.

    Attributes
    ----------
    n_computed : int
        Rows the model computed and the cache kept.
    n_served : int
        Rows served from the cache.
    """

    def __init__(self, key: Mapping[str, Any], cache_dir: str | os.PathLike[str] | None = None, *, owner: str,
                 width: Callable[[], int] | None = None, memory_tasks: int | None = None) -> None:
        self.key = dict(key)
        self.cache_dir = Path(cache_dir).expanduser() if cache_dir is not None else None
        self.owner, self.memory_tasks = owner, memory_tasks
        self._width_of, self._width = width, None
        self._contexts: OrderedDict[str, tuple[dict[str, Any], _Rows]] = OrderedDict()
        self._digests: dict[str, bytes] = {}  # text -> sha256, so a text is hashed once (unbounded memory only)
        self._lock = threading.RLock()
        self._writable = True
        self.n_computed = self.n_served = 0

    @property
    def folder(self) -> Path | None:
        """The key's folder (``None``: memory only)."""
        return None if self.cache_dir is None else self.cache_dir / key_digest(self.key)

    @property
    def width(self) -> int | None:
        if self._width is None and self._width_of is not None:
            self._width = int(self._width_of())
        return self._width

    def __len__(self) -> int:
        """The texts kept in memory, over every context."""
        return sum(len(rows.where) for _, rows in self._contexts.values())

    # ------------------------------------------------------------------ texts
    def embed(self, texts: Sequence[str], compute: Callable[[list[str]], np.ndarray],
              context: Mapping[str, Any] | None = None) -> np.ndarray:
        """The rows of ``texts`` in their order: each text not kept yet is computed once, by ``compute`` (given
        the new texts, it returns their rows), checked and kept."""
        texts = check_sentences(texts)
        with self._lock:
            rows = self._rows(context)
            digests = [self._digest(text) for text in texts]
            new: dict[bytes, str] = {}
            for digest, text in zip(digests, texts):
                if digest not in rows.where and digest not in new:
                    new[digest] = text
            if new:
                self._keep(rows, context, list(new), compute(list(new.values())), None)
            self.n_computed += len(new)
            self.n_served += len(texts) - len(new)
            if not texts:
                return np.empty((0, self.width or 0), dtype=np.float32)
            return rows.gather(digests)

    def get(self, texts: Sequence[str], context: Mapping[str, Any] | None = None) -> np.ndarray | None:
        """The rows of ``texts`` when every one of them is kept (as texts, :meth:`embed`), else ``None``."""
        with self._lock:
            rows = self._rows(context)
            digests = [self._digest(text) for text in texts]
            if not digests or any(digest not in rows.where for digest in digests):
                return None
            self.n_served += len(digests)
            return rows.gather(digests)

    # ------------------------------------------------------------------ whole calls
    def get_call(self, call: str, n_rows: int, context: Mapping[str, Any] | None = None) -> np.ndarray | None:
        """The rows kept for the call ``call`` (a digest of it), or ``None``."""
        with self._lock:
            rows = self._rows(context)
            block = rows.calls.get(call)
            if block is None or rows.blocks[block].shape[0] != n_rows:
                return None
            self.n_served += n_rows
            return rows.blocks[block].copy()  # the caller may change what it is given; the cache stays as kept

    def put_call(self, call: str, texts: Sequence[str], embeddings: np.ndarray,
                 context: Mapping[str, Any] | None = None) -> None:
        """Keep a copy of the rows a model returned for one call (``texts``: the call's texts, in order)."""
        with self._lock:
            rows = self._rows(context)
            self._keep(rows, context, [self._digest(text) for text in texts], np.array(embeddings), call)
            self.n_computed += len(texts)

    # ------------------------------------------------------------------ memory
    def _digest(self, text: str) -> bytes:
        if self.memory_tasks is not None:
            return text_digest(text)
        digest = self._digests.get(text)
        if digest is None:
            digest = self._digests[text] = text_digest(text)
        return digest

    def _rows(self, context: Mapping[str, Any] | None) -> _Rows:
        """The rows of ``context``, read from the folder on first use; the least recent tasks' leave memory."""
        wanted = dict(context or {})
        name = key_digest(wanted) if wanted else ""
        if name not in self._contexts:
            self._contexts[name] = (wanted, _Rows())
        self._contexts.move_to_end(name)
        if self.memory_tasks is not None:
            tasks = list(dict.fromkeys(kept.get("task") for kept, _ in self._contexts.values()))
            stale = set(tasks[:-self.memory_tasks])
            for other in [other for other, (kept, _) in self._contexts.items() if kept.get("task") in stale]:
                del self._contexts[other]
        rows = self._contexts[name][1]
        if not rows.loaded:
            rows.loaded = True
            self._load(wanted, rows)
        return rows

    def _context_folder(self, context: Mapping[str, Any] | None) -> Path | None:
        """Where the shards of ``context`` are: the key's folder, or a folder of its own in it for a context."""
        folder = self.folder
        return folder / key_digest(context) if folder is not None and context else folder

    def _keep(self, rows: _Rows, context: Mapping[str, Any] | None, digests: list[bytes], embeddings: np.ndarray,
              call: str | None) -> None:
        """Check new rows (an error if they are no valid block), keep them, and write them to the folder; a folder
        that cannot be written leaves them in memory (with one warning), so the run's work is never lost."""
        hashes = np.frombuffer(b"".join(digests), dtype=np.uint8).reshape(len(digests), 32)
        embeddings = np.asarray(embeddings)
        problem = self._arrays_problem(hashes, embeddings)
        if problem:  # checked with or without a folder: memory keeps only what passed here
            raise InputError(f"embeddings of {self.owner} not written to the embedding cache "
                             f"{self.folder or '(memory)'}: {problem} (shape {np.shape(embeddings)}); "
                             "nothing invalid is cached")
        self._width = embeddings.shape[1]
        rows.add(digests, embeddings, call)
        folder = self._context_folder(context)
        if folder is None or not self._writable:
            return
        header = {"format": CACHE_FORMAT, "version": CACHE_VERSION, "key": self.key, "count": len(digests),
                  "checksum": _arrays_checksum(hashes, embeddings)}
        if context:
            header["context"] = dict(context)
        if call is not None:
            header["call"] = call
        try:
            self._write(folder, header, hashes=hashes, embeddings=embeddings)
        except OSError as error:
            self._writable = False
            logger.warning("embedding cache folder %s cannot be written (%s); this run keeps its embeddings in "
                           "memory only", folder, error)

    def _arrays_problem(self, hashes: np.ndarray, embeddings: np.ndarray) -> str | None:
        """What makes these arrays no valid block of this cache (None: nothing); checked on every shard read and
        before every block is kept."""
        width = self.width
        if hashes.ndim != 2 or hashes.shape[1] != 32 or embeddings.ndim != 2 or \
                embeddings.shape[0] != hashes.shape[0] or (width is not None and embeddings.shape[1] != width):
            return (f"shapes {hashes.shape} and {embeddings.shape} do not fit "
                    f"{width if width is not None else 'd'}-dimensional embeddings")
        if embeddings.dtype != np.float32:
            return f"embeddings of dtype {embeddings.dtype}, not float32"
        if not np.isfinite(embeddings).all():
            return "non-finite embeddings"
        return None

    # ------------------------------------------------------------------ disk
    def _write(self, folder: Path, header: dict[str, Any], **arrays: np.ndarray) -> None:
        """One shard, written atomically, with the key folder's ``key.json`` and a context folder's
        ``context.json`` (written once, for humans); an ``OSError`` when it cannot."""
        buffer = io.BytesIO()
        np.savez(buffer, header=np.array(json.dumps(header)), **arrays)
        for path, value in ((self.folder / "key.json", self.key), (folder / "context.json", header.get("context"))):
            if value is not None and not path.exists():
                atomic_write_json(path, value)
        atomic_write_bytes(folder / f"shard-{uuid.uuid4().hex}.npz", buffer.getvalue())

    def _load(self, context: dict[str, Any], rows: _Rows) -> None:
        if self.cache_dir is not None:
            _point_out_unread(self.cache_dir)
        folder = self._context_folder(context)
        if folder is None or not folder.is_dir():
            return
        try:
            shards = sorted(folder.glob("shard-*.npz"))
        except OSError as error:
            logger.warning("embedding cache folder %s cannot be read (%s); embeddings are computed anew", folder, error)
            return
        for shard in shards:
            problem = self._read_shard(shard, context, rows)
            if not problem:
                continue
            try:
                shard.unlink(missing_ok=True)
            except OSError as error:
                logger.warning("embedding cache file %s ignored (%s) and cannot be removed (%s); it will be "
                               "recomputed", shard, problem, error)
            else:
                logger.warning("embedding cache file %s ignored and removed (%s); it will be recomputed", shard,
                               problem)

    def _read_shard(self, shard: Path, context: dict[str, Any], rows: _Rows) -> str | None:
        """Merge one shard into ``rows``; return why it was rejected, or ``None``."""
        try:
            with np.load(shard, allow_pickle=False) as archive:
                header = json.loads(str(archive["header"]))
                hashes, embeddings = archive["hashes"], archive["embeddings"]
        except Exception as error:  # noqa: BLE001 -- any unreadable file is simply not trusted
            return f"unreadable: {type(error).__name__}: {error}"
        if header.get("format") != CACHE_FORMAT or header.get("version") != CACHE_VERSION:
            return f"format {header.get('format')!r} version {header.get('version')!r}"
        if header.get("key") != self.key or header.get("context", {}) != context:
            return f"it belongs to another key {header.get('key')} or context {header.get('context')}"
        problem = self._arrays_problem(hashes, embeddings)
        if problem:
            return problem
        if header.get("checksum") != _arrays_checksum(hashes, embeddings):
            return "checksum mismatch"
        self._width = embeddings.shape[1]
        rows.add([digest.tobytes() for digest in hashes], embeddings, header.get("call"))
        return None


#: the cache folders whose unread folders this process has pointed out
_POINTED_OUT: set[Path] = set()


def _point_out_unread(cache_dir: Path) -> None:
    """Once per process and cache folder: a warning naming its ``calls-*`` folders (whole calls of a model MTEB
    loads, in a layout this version does not read), which only take space."""
    if cache_dir in _POINTED_OUT:
        return
    _POINTED_OUT.add(cache_dir)
    try:
        unread = sorted(path.name for path in cache_dir.glob("calls-*") if path.is_dir())
    except OSError:
        return
    if unread:
        logger.warning("embedding cache folder %s holds %d folder(s) in a layout this flow-plugin does not read (%s): "
                       "their calls are computed again and kept in the current layout; delete them to free their "
                       "space", cache_dir, len(unread), ", ".join(unread[:3]) + (", ..." if len(unread) > 3 else ""))


class CachedEncoder:
    """A backbone behind an :class:`EmbeddingCache` (memory, plus disk if ``cache_dir``): each new text goes through
    the backbone once."""

    def __init__(self, backbone: Backbone, cache_dir: str | os.PathLike[str] | None = None) -> None:
        self.backbone = backbone
        self.cache_dir = Path(cache_dir).expanduser() if cache_dir is not None else None
        self._cache: EmbeddingCache | None = None

    @property
    def cache(self) -> EmbeddingCache:
        """The backbone's cache (made on first use: its key may measure the precision ``auto`` stands for)."""
        if self._cache is None:
            self._cache = EmbeddingCache(self.key, self.cache_dir, owner=self.backbone.name,
                                         width=lambda: self.backbone.embedding_dim)
        return self._cache

    @property
    def key(self) -> dict[str, Any]:
        return self.backbone.key.as_dict()

    @property
    def embedding_dim(self) -> int:
        return self.backbone.embedding_dim

    @property
    def key_folder(self) -> Path | None:
        return self.cache.folder

    @property
    def n_encoded(self) -> int:
        """Sentences the backbone encoded (each unique text once)."""
        return self.cache.n_computed

    @property
    def n_cache_hits(self) -> int:
        """Sentences served from the cache."""
        return self.cache.n_served

    def __len__(self) -> int:
        return len(self.cache)

    def encode(self, sentences: list[str], *, batch_size: int | None = None,
               show_progress_bar: bool | None = None) -> np.ndarray:
        """Pooled embeddings in input order; the backbone sees each new unique text once.
        ``batch_size`` is checked even when every sentence is cached."""
        batch_size = check_batch_size(batch_size)
        return self.cache.embed(sentences, lambda new: self.backbone.encode(new, batch_size=batch_size,
                                                                             show_progress_bar=show_progress_bar))


_SHARED: dict[tuple[Any, ...], CachedEncoder] = {}
_SHARED_LOCK = threading.Lock()


def shared_encoder(
    backbone: Backbone | str | os.PathLike[str],
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    **backbone_kwargs: Any,
) -> CachedEncoder:
    """The process-wide ``CachedEncoder`` for this backbone configuration (created once): ``backbone`` itself, or the
    :class:`~flow_plugin.encoding.backbone.Backbone` of a model name or folder and ``backbone_kwargs``.

    ``cache_dir=None`` falls back to ``FLOW_PLUGIN_CACHE_DIR`` (unset: memory only).
    """
    if not isinstance(backbone, Backbone):
        backbone = Backbone(backbone, **backbone_kwargs)
    elif backbone_kwargs:
        raise InputError(f"shared_encoder: {', '.join(sorted(backbone_kwargs))} apply to a model name or folder, not "
                         "to a Backbone already built; give them to Backbone(...)")
    folder = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    identity = (backbone.key, str(backbone.device), str(folder) if folder else None, backbone.trust_remote_code)
    with _SHARED_LOCK:
        encoder = _SHARED.get(identity)
        if encoder is None:
            encoder = _SHARED[identity] = CachedEncoder(backbone, folder)
        return encoder


def clear_shared_encoders() -> None:
    """Forget every shared encoder (frees their models and in-memory embeddings)."""
    with _SHARED_LOCK:
        _SHARED.clear()
