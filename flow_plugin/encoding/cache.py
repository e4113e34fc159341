"""Embedding cache: each sentence goes through a backbone once per process (and, with a
cache folder, once ever), whatever number of calibrators reads it.

``CachedEncoder`` wraps a :class:`~flow_plugin.encoding.backbone.Backbone`. It deduplicates its
input, serves known sentences from memory, and encodes only the new ones. With a
``cache_dir`` it also keeps them on disk:

    <cache_dir>/<digest of the backbone key>/key.json         the key, for humans
    <cache_dir>/<digest of the backbone key>/shard-<id>.npz   sha256 of each text + embeddings

A shard is written atomically, once, and carries its key and a checksum of its arrays;
its arrays are checked (shape, float32, finite) before it is written and after it is read.
A shard that cannot be read, belongs to another key, or fails a check is reported,
removed and recomputed, never trusted.

``shared_encoder`` returns one ``CachedEncoder`` per backbone key in the process, so the
six variants of a backbone share one model in memory and one embedding per sentence.

``CallStore`` keeps whole ``encode`` calls of a model we do not run ourselves (a model MTEB loads, with its
own prompts and batching): a call made again with the same inputs returns the embeddings stored the first
time, bit for bit what the model returned then. Layout, checks and atomic writes are those of the shards:

    <cache_dir>/calls-<digest of the model key>/key.json          the model key, for humans
    <cache_dir>/calls-<digest of the model key>/<call digest>.npz  the call key + its embeddings
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import threading
import uuid
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


def key_digest(key: dict[str, Any]) -> str:
    """A short, stable digest of a JSON-ready key (its folder or file name)."""
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]


def _arrays_checksum(*arrays: np.ndarray) -> str:
    digest = hashlib.sha256()
    for array in arrays:
        digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()


def _write_archive(path: Path, key: dict[str, Any], header: dict[str, Any], **arrays: np.ndarray) -> None:
    """Write ``header`` and ``arrays`` as one ``.npz`` at ``path``, atomically, with the folder's ``key.json``
    (written once, for humans); an ``OSError`` (an :class:`~flow_plugin.errors.OutputError`) when it cannot."""
    buffer = io.BytesIO()
    np.savez(buffer, header=np.array(json.dumps(header)), **arrays)
    if not (path.parent / "key.json").exists():
        atomic_write_json(path.parent / "key.json", key)
    atomic_write_bytes(path, buffer.getvalue())


class CachedEncoder:
    """A backbone behind a per-sentence embedding cache (memory, plus disk if ``cache_dir``)."""

    def __init__(self, backbone: Backbone, cache_dir: str | os.PathLike[str] | None = None) -> None:
        self.backbone = backbone
        self.cache_dir = Path(cache_dir).expanduser() if cache_dir is not None else None
        # Embeddings are kept as the (n, d) blocks they were computed or read in; ``_where``
        # maps a text's digest to ``block << 32 | row``. A lookup is then a few vectorised
        # gathers per block instead of stacking one small array per sentence.
        self._blocks: list[np.ndarray] = []
        self._where: dict[bytes, int] = {}
        self._digests: dict[str, bytes] = {}  # text -> sha256, so a text is hashed once
        self._lock = threading.Lock()
        self._disk_loaded = False
        self._disk_writable = True
        #: sentences the backbone actually encoded (each unique text counts once)
        self.n_encoded = 0
        #: sentences served from the cache
        self.n_cache_hits = 0

    @property
    def key(self) -> dict[str, Any]:
        return self.backbone.key.as_dict()

    @property
    def embedding_dim(self) -> int:
        return self.backbone.embedding_dim

    @property
    def key_folder(self) -> Path | None:
        if self.cache_dir is None:
            return None
        return self.cache_dir / key_digest(self.key)

    def __len__(self) -> int:
        return len(self._where)

    def _add_block(self, digests: list[bytes], embeddings: np.ndarray) -> None:
        """Keep ``embeddings`` (one row per digest) for later lookups; known digests keep their row."""
        block = len(self._blocks) << 32
        self._blocks.append(embeddings)
        for row, digest in enumerate(digests):
            self._where.setdefault(digest, block | row)

    def _lookup(self, digests: list[bytes]) -> np.ndarray:
        codes = np.fromiter((self._where[digest] for digest in digests), dtype=np.int64, count=len(digests))
        blocks, rows = codes >> 32, codes & 0xFFFFFFFF
        width = self._blocks[int(blocks[0])].shape[1]  # (not embedding_dim: that may read the model config)
        output = np.empty((len(digests), width), dtype=np.float32)
        for block in np.unique(blocks):
            where = blocks == block
            output[where] = self._blocks[int(block)][rows[where]]
        return output

    def _digest(self, text: str) -> bytes:
        digest = self._digests.get(text)
        if digest is None:
            digest = self._digests[text] = text_digest(text)
        return digest

    # ------------------------------------------------------------------ disk
    def _load_disk(self) -> None:
        folder = self.key_folder
        self._disk_loaded = True
        if folder is None or not folder.is_dir():
            return
        try:
            shards = sorted(folder.glob("shard-*.npz"))
        except OSError as error:
            logger.warning("embedding cache folder %s cannot be read (%s); embeddings are computed anew", folder, error)
            return
        for shard in shards:
            problem = self._read_shard(shard)
            if problem:
                try:
                    shard.unlink(missing_ok=True)
                except OSError as error:
                    logger.warning("embedding cache file %s ignored (%s) and cannot be removed (%s); it will be "
                                   "recomputed", shard, problem, error)
                else:
                    logger.warning("embedding cache file %s ignored and removed (%s); it will be recomputed", shard, problem)

    def _read_shard(self, shard: Path) -> str | None:
        """Merge one shard into memory; return why it was rejected, or ``None``."""
        try:
            with np.load(shard, allow_pickle=False) as archive:
                header = json.loads(str(archive["header"]))
                hashes = archive["hashes"]
                embeddings = archive["embeddings"]
        except Exception as error:  # noqa: BLE001 -- any unreadable file is simply not trusted
            return f"unreadable: {type(error).__name__}: {error}"
        if header.get("format") != CACHE_FORMAT or header.get("version") != CACHE_VERSION:
            return f"format {header.get('format')!r} version {header.get('version')!r}"
        if header.get("key") != self.key:
            return f"it belongs to another backbone key {header.get('key')}"
        problem = self._arrays_problem(hashes, embeddings)
        if problem:
            return problem
        if header.get("checksum") != _arrays_checksum(hashes, embeddings):
            return "checksum mismatch"
        self._add_block([digest.tobytes() for digest in hashes], embeddings)
        return None

    def _arrays_problem(self, hashes: np.ndarray, embeddings: np.ndarray) -> str | None:
        """What makes these arrays no valid shard of this key (None: nothing); checked on every
        shard read and before every shard is written."""
        dim = self.embedding_dim
        if hashes.ndim != 2 or hashes.shape[1] != 32 or embeddings.shape != (hashes.shape[0], dim):
            return f"shapes {hashes.shape} and {embeddings.shape} do not fit {dim}-dimensional embeddings"
        if embeddings.dtype != np.float32:
            return f"embeddings of dtype {embeddings.dtype}, not float32"
        if not np.isfinite(embeddings).all():
            return "non-finite embeddings"
        return None

    def _write_shard(self, digests: list[bytes], embeddings: np.ndarray) -> None:
        """Check new embeddings (an error if they are no valid shard), then keep them on disk too;
        a folder that cannot be written leaves them in memory (with one warning), so the run's
        work is never lost."""
        if not digests:
            return
        hashes = np.frombuffer(b"".join(digests), dtype=np.uint8).reshape(len(digests), 32)
        problem = self._arrays_problem(hashes, np.asarray(embeddings))
        if problem:  # checked with or without a folder: encode() keeps in memory only what passed here
            raise InputError(f"embeddings of {self.backbone.name} not written to the embedding cache "
                             f"{self.key_folder or '(memory)'}: {problem} (shape {np.shape(embeddings)}); "
                             "nothing invalid is cached")
        folder = self.key_folder
        if folder is None or not self._disk_writable:
            return
        header = {
            "format": CACHE_FORMAT,
            "version": CACHE_VERSION,
            "key": self.key,
            "count": len(digests),
            "checksum": _arrays_checksum(hashes, embeddings),
        }
        try:
            _write_archive(folder / f"shard-{uuid.uuid4().hex}.npz", self.key, header, hashes=hashes,
                           embeddings=embeddings)
        except OSError as error:
            self._disk_writable = False
            logger.warning("embedding cache folder %s cannot be written (%s); this run keeps its embeddings in "
                           "memory only", folder, error)

    # ------------------------------------------------------------------ encoding
    def encode(self, sentences: list[str], *, batch_size: int | None = None,
               show_progress_bar: bool | None = None) -> np.ndarray:
        """Pooled embeddings in input order; the backbone sees each new unique text once.
        ``batch_size`` is checked even when every sentence is cached."""
        batch_size = check_batch_size(batch_size)
        sentences = check_sentences(sentences)
        with self._lock:
            digests = [self._digest(text) for text in sentences]
            if not self._disk_loaded:
                self._load_disk()
            new: dict[bytes, str] = {}
            known = self._where
            for digest, text in zip(digests, sentences):
                if digest not in known and digest not in new:
                    new[digest] = text
            if new:
                embeddings = self.backbone.encode(list(new.values()), batch_size=batch_size,
                                                  show_progress_bar=show_progress_bar)
                self._write_shard(list(new), embeddings)  # (checks them first)
                self._add_block(list(new), embeddings)
            self.n_encoded += len(new)
            self.n_cache_hits += len(sentences) - len(new)
            if not sentences:
                return np.empty((0, self.embedding_dim), dtype=np.float32)
            return self._lookup(digests)


class CallStore:
    """The embeddings of whole ``encode`` calls of one model, on disk (see the module's docstring).

    A call key is JSON-ready: the texts (a digest of them, in their batches), the task, split, subset, side
    and keywords of the call. A stored file that cannot be read, belongs to another key or fails a check
    (rows, floating dtype, finite, checksum) is removed and the call computed again; embeddings that fail a
    check are returned to the caller but never stored.

    Parameters
    ----------
    model_key:
        JSON-ready: everything that determines the model's output apart from the call (weights, loader,
        prompts, device, dtype, library versions).
    cache_dir:
        The embedding cache folder.
    """

    def __init__(self, model_key: dict[str, Any], cache_dir: str | os.PathLike[str]) -> None:
        self.model_key = model_key
        self.folder = Path(cache_dir).expanduser() / f"calls-{key_digest(model_key)}"
        self._writable = True
        #: calls served from disk, and calls computed and stored
        self.n_hits = self.n_stored = 0

    def _path(self, call_key: dict[str, Any]) -> Path:
        return self.folder / f"{key_digest(call_key)}.npz"

    def get(self, call_key: dict[str, Any], n_rows: int) -> np.ndarray | None:
        """The stored embeddings of this call (``n_rows`` rows), or ``None``."""
        path = self._path(call_key)
        if not path.is_file():
            return None
        try:
            with np.load(path, allow_pickle=False) as archive:
                header, embeddings = json.loads(str(archive["header"])), archive["embeddings"]
        except Exception as error:  # noqa: BLE001 -- any unreadable file is simply not trusted
            problem: str | None = f"unreadable: {type(error).__name__}: {error}"
        else:
            problem = self._problem(embeddings, n_rows)
            if header.get("format") != CACHE_FORMAT or header.get("model") != self.model_key or \
                    header.get("call") != call_key:
                problem = "it belongs to another model or call"
            elif not problem and header.get("checksum") != _arrays_checksum(embeddings):
                problem = "checksum mismatch"
        if problem:
            logger.warning("embedding cache file %s ignored and removed (%s); the call is computed again", path,
                           problem)
            path.unlink(missing_ok=True)
            return None
        self.n_hits += 1
        return embeddings

    def put(self, call_key: dict[str, Any], embeddings: np.ndarray, n_rows: int) -> None:
        """Store a call's embeddings (checked first; a folder that cannot be written: one warning, then memory
        only for the rest of the run)."""
        problem = self._problem(embeddings, n_rows)
        if problem:
            logger.warning("embeddings of a call not stored in the embedding cache %s: %s", self.folder, problem)
            return
        if not self._writable:
            return
        header = {"format": CACHE_FORMAT, "model": self.model_key, "call": call_key,
                  "checksum": _arrays_checksum(embeddings)}
        try:
            _write_archive(self._path(call_key), self.model_key, header, embeddings=embeddings)
        except OSError as error:
            self._writable = False
            logger.warning("embedding cache folder %s cannot be written (%s); this run computes its calls again",
                           self.folder, error)
            return
        self.n_stored += 1

    @staticmethod
    def _problem(embeddings: np.ndarray, n_rows: int) -> str | None:
        if embeddings.ndim != 2 or embeddings.shape[0] != n_rows:
            return f"shape {embeddings.shape} for {n_rows} inputs"
        if embeddings.dtype.kind != "f":
            return f"dtype {embeddings.dtype}, not floating point"
        if not np.isfinite(embeddings).all():
            return "non-finite embeddings"
        return None


_SHARED: dict[tuple[Any, ...], CachedEncoder] = {}
_SHARED_LOCK = threading.Lock()


def shared_encoder(
    model_name_or_path: str,
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    **backbone_kwargs: Any,
) -> CachedEncoder:
    """The process-wide ``CachedEncoder`` for this backbone configuration (created once).

    ``cache_dir=None`` falls back to ``FLOW_PLUGIN_CACHE_DIR`` (unset: memory only).
    """
    backbone = Backbone(model_name_or_path, **backbone_kwargs)
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
