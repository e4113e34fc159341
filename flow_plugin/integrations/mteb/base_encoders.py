"""The base models a calibrated model embeds with, behind the one embedding cache, and what they return.

A base is any MTEB encoder. Flow-plugin reads it through a :class:`BaseEncoder`, which adds one method to MTEB's
``encode``: :meth:`BaseEncoder.embed`, the rows of a list of texts for a task's subset and side, each new text
through the model once. Two kinds exist:

- a registry backbone (:class:`flow_plugin.integrations.mteb.base_models.RegistryEncoder`), whose
  :class:`~flow_plugin.encoding.cache.CachedEncoder` keeps one row per text;
- any other MTEB encoder behind :class:`CachedBase`: an :class:`~flow_plugin.encoding.cache.EmbeddingCache` keyed by
  the model (:func:`model_key`: loader, name, revision, prompts, weights, versions) and, per task, subset and side,
  by text. MTEB's own ``encode`` calls are kept whole and served again bit for bit; the texts a fit or SentEval
  embeds are kept per text and serve MTEB's later calls of those texts, so calibration adds the fit, not a second
  pass of the model. Memory keeps the :data:`MEMORY_TASKS` most recent tasks; a cache folder keeps every one.

Whatever a base returns enters flow-plugin through :func:`base_output`, checked.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
from abc import abstractmethod
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
from mteb.models.abs_encoder import AbsEncoder

from flow_plugin._validation import check_sentences
from flow_plugin.encoding.cache import EmbeddingCache
from flow_plugin.encoding.options import default_cache_dir
from flow_plugin.errors import DataFolderError, EncoderOutputError
from flow_plugin.integrations.mteb.compat import prompt_type, text_loader

#: the tasks whose embeddings a base's cache keeps in memory at once (MTEB evaluates one task at a time)
MEMORY_TASKS = 2
#: keyword values an ``encode`` call may carry and still be kept (others always reach the model)
_PLAIN = (str, int, float, bool, type(None))


class BaseEncoder(AbsEncoder):
    """An MTEB encoder flow-plugin embeds with: MTEB's ``encode``, and :meth:`embed` for a list of texts."""

    @abstractmethod
    def embed(self, texts: list[str], task_metadata: Any, hf_subset: str, side: str | None,
              batch_size: int | None = None) -> np.ndarray:
        """The (len(texts), d) float32 rows the base gives ``texts`` for this task's subset and side (its prompt),
        as MTEB's calls would get them; each text not seen before goes through the model once."""

    @abstractmethod
    def kept(self, texts: list[str], task_metadata: Any, hf_subset: str, side: str | None) -> np.ndarray | None:
        """The rows of ``texts`` when :meth:`embed` has kept every one of them for this task, subset and side,
        else ``None``."""


class CachedBase(BaseEncoder):
    """Any MTEB encoder behind an :class:`~flow_plugin.encoding.cache.EmbeddingCache` (module doc): in memory, and
    in ``cache_dir`` when one is given. A call whose batches carry more than text (an instruction, an image), or
    keywords that are not plain values, always reaches the model."""

    def __init__(self, base: Any, cache_dir: str | os.PathLike[str] | None = None) -> None:
        self.base, self.model = base, getattr(base, "model", None)  # model: the torch module, where it has one
        self.mteb_model_meta = base.mteb_model_meta
        self.cache = EmbeddingCache(model_key(base) if cache_dir is not None else {}, cache_dir,
                                    owner=base_name(base), memory_tasks=MEMORY_TASKS)

    def encode(self, inputs: Any, *, task_metadata: Any, hf_split: str, hf_subset: str, prompt_type: Any = None,
               **kwargs: Any) -> Any:
        options = {key: value for key, value in sorted(kwargs.items()) if key != "show_progress_bar"}
        if not all(isinstance(value, _PLAIN) for value in options.values()) or has_more_than_text(inputs):
            return self.base.encode(inputs, task_metadata=task_metadata, hf_split=hf_split, hf_subset=hf_subset,
                                    prompt_type=prompt_type, **kwargs)
        texts, call = _call_of(inputs, hf_split, options)
        context = _context(task_metadata, hf_subset, getattr(prompt_type, "value", prompt_type))
        stored = self.cache.get_call(call, len(texts), context) if texts else None
        if stored is not None:
            return stored
        output = self.base.encode(inputs, task_metadata=task_metadata, hf_split=hf_split, hf_subset=hf_subset,
                                  prompt_type=prompt_type, **kwargs)
        rows = base_output(output, len(texts), self.base, task_metadata.name)  # nothing invalid enters the cache
        if texts:
            self.cache.put_call(call, texts, rows, context)
        return output

    def embed(self, texts: list[str], task_metadata: Any, hf_subset: str, side: str | None,
              batch_size: int | None = None) -> np.ndarray:
        def compute(new: list[str]) -> np.ndarray:
            loader = text_loader(new, task_metadata, **({"batch_size": batch_size} if batch_size else {}))
            output = self.base.encode(loader, task_metadata=task_metadata, hf_split=first_split(task_metadata),
                                      hf_subset=hf_subset, prompt_type=prompt_type(side))
            return base_output(output, len(new), self.base, task_metadata.name)

        return self.cache.embed(texts, compute, _context(task_metadata, hf_subset, side))

    def kept(self, texts: list[str], task_metadata: Any, hf_subset: str, side: str | None) -> np.ndarray | None:
        return self.cache.get(texts, _context(task_metadata, hf_subset, side))


def as_base_encoder(base: Any, cache_dir: str | os.PathLike[str] | None = None) -> BaseEncoder:
    """``base`` itself when it is a :class:`BaseEncoder`, else ``base`` behind a :class:`CachedBase` (in
    ``cache_dir`` too, when given)."""
    return base if isinstance(base, BaseEncoder) else CachedBase(base, cache_dir)


def loaded_base(base: Any, cache_dir: str | os.PathLike[str] | None = None) -> BaseEncoder:
    """A base flow-plugin loaded by name or folder (:func:`as_base_encoder`), kept in ``cache_dir``, else in
    ``$FLOW_PLUGIN_CACHE_DIR`` when it is set (a base the user built is kept in memory only: its key cannot name
    everything the user may have changed)."""
    return as_base_encoder(base, cache_dir if cache_dir is not None else default_cache_dir())


def _context(task_metadata: Any, hf_subset: str, side: str | None) -> dict[str, Any]:
    """What a base is told besides the text, as the cache keys it: the task (its prompt), subset and side."""
    return {"task": task_metadata.name, "subset": hf_subset, "side": side}


def _call_of(inputs: Any, hf_split: str, options: dict[str, Any]) -> tuple[list[str], str]:
    """A call's texts, and a digest of the call: its texts in their batches, its split and keywords."""
    digest = hashlib.sha256(json.dumps({"split": hf_split, "options": options}, sort_keys=True).encode())
    texts: list[str] = []
    for batch in _text_batches(inputs):
        digest.update(b"\x1e%d" % len(batch))
        for text in batch:
            digest.update(b"\x1f" + str(text).encode("utf-8"))
        texts.extend(batch)
    return check_sentences(texts), digest.hexdigest()


def model_key(base: Any) -> dict[str, Any]:
    """What determines a base's output apart from the call: its loader, name, revision, loader keywords and
    prompts, the library versions; for a torch module its architecture (``repr``), sequence limit and a
    fingerprint of its weights (a strided sample of every tensor, with names, shapes, dtypes and devices); for a
    local folder the name, size and modification time of each of its files."""
    meta = base.mteb_model_meta
    key: dict[str, Any] = {
        "loader": f"{type(base).__module__}.{type(base).__qualname__}", "name": meta.name, "revision": meta.revision,
        "loader_kwargs": {name: repr(value) for name, value in sorted((meta.loader_kwargs or {}).items())},
        "prompts": repr(getattr(base, "model_prompts", None)),
        "versions": {package: _version(package) for package in ("mteb", "sentence-transformers", "transformers",
                                                                "torch")}}
    module = getattr(base, "model", None)
    if hasattr(module, "state_dict"):
        weights = hashlib.sha256()
        for name, tensor in module.state_dict().items():
            flat = tensor.detach().reshape(-1)
            weights.update(f"{name}{tuple(tensor.shape)}{tensor.dtype}{tensor.device}".encode())
            weights.update(flat[::max(1, flat.numel() // 1024)].float().cpu().numpy().tobytes())
        key["weights"] = weights.hexdigest()
        key["architecture"] = "" if " at 0x" in repr(module) else repr(module)
        key["max_seq_length"] = getattr(module, "max_seq_length", None)
    if meta.name and Path(meta.name).is_dir():  # a local folder: its files as they are now (configs, tokenizer)
        files = sorted(path for path in Path(meta.name).rglob("*") if path.is_file())
        key["files"] = hashlib.sha256(repr([(str(path.relative_to(meta.name)), path.stat().st_size,
                                              path.stat().st_mtime_ns) for path in files]).encode()).hexdigest()
    return key


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


# ------------------------------------------------------------------ what a base is given and returns
def base_output(output: Any, n_inputs: int, base: Any, task: str | None) -> np.ndarray:
    """What a base model's ``encode()`` returned for ``n_inputs`` texts, checked where it enters flow-plugin and
    given as a (n_inputs, d) float32 NumPy array (torch tensors on any device included): anything else (another
    number of rows, text, NaN or inf) is an :class:`~flow_plugin.errors.EncoderOutputError` naming the model,
    the task and what came back, whatever the calibrator (``raw`` included)."""
    if hasattr(output, "detach"):
        output = output.detach().float().cpu().numpy()
    try:
        array = np.asarray(output)
    except (TypeError, ValueError) as error:  # ragged rows
        return _refuse(base, task, n_inputs, f"rows that are not one array ({error})")
    if array.dtype.kind not in "biuf":
        return _refuse(base, task, n_inputs, f"{array.dtype} values, not numbers")
    if array.ndim != 2 or array.shape[0] != n_inputs:
        return _refuse(base, task, n_inputs, f"an array of shape {array.shape}, not ({n_inputs}, d)")
    array = array.astype(np.float32, copy=False)
    bad = ~np.isfinite(array).all(axis=1)
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        return _refuse(base, task, n_inputs, f"NaN or inf in {int(bad.sum())} row(s) (the first: row {first})")
    return array


def _refuse(base: Any, task: str | None, n_inputs: int, what: str) -> np.ndarray:
    raise EncoderOutputError(f"the base model {base_name(base)} returned {what} for {n_inputs} input text(s) of task "
                             f"{task or 'unknown'}: its encode() must return one row of finite numbers per "
                             "input; check the model (its weights, precision, or a wrapper's encode)")


def base_name(base: Any) -> str:
    """A base's name: its ``ModelMeta``'s, else its class's."""
    return getattr(getattr(base, "mteb_model_meta", None), "name", None) or type(base).__name__


def texts_of(inputs: Any) -> list[str]:
    """The texts of an MTEB DataLoader (batches with a "text" column), or of a plain list."""
    return check_sentences(text for batch in _text_batches(inputs) for text in batch)


def _text_batches(inputs: Any) -> Iterable[list[Any]]:
    if isinstance(inputs, (list, tuple)):
        yield check_sentences(inputs)
        return
    for batch in inputs:
        if not isinstance(batch, dict) or "text" not in batch:
            raise DataFolderError(f"expected MTEB batches with a 'text' column, got {type(batch).__name__}")
        yield list(batch["text"])


def count_inputs(inputs: Any) -> int:
    """How many items a call gives a model: a plain list's length, or the rows of MTEB's batches (any columns)."""
    if isinstance(inputs, (list, tuple)):
        return len(inputs)
    return sum(len(next(iter(batch.values()), ())) if isinstance(batch, dict) else len(batch) for batch in inputs)


def has_more_than_text(inputs: Any) -> bool:
    """Whether MTEB's batches carry something the model reads besides the text (an instruction, an image ...)."""
    if isinstance(inputs, (list, tuple)):
        return False
    read = {"text", "id", "query", "title", "body"}  # the text, and the fields MTEB builds it from
    return any(set(batch) - read for batch in _first(inputs))


def _first(inputs: Iterable[Any]) -> list[Any]:
    for batch in inputs:
        return [batch]
    return []


def first_split(task_metadata: Any) -> str:
    """The split a base is told it embeds a task's fit text for: the first MTEB scores."""
    splits = list(getattr(task_metadata, "eval_splits", None) or ["test"])
    return str(splits[0])


__all__ = ["MEMORY_TASKS", "BaseEncoder", "CachedBase", "as_base_encoder", "base_name", "base_output", "count_inputs",
           "first_split", "has_more_than_text", "loaded_base", "model_key", "texts_of"]
