"""How a backbone runs, as one value: device, precision, batch size, embedding cache, progress.

Every entry point (the MTEB loader, the SentEval adapter, ``flow-plugin eval``/``bench``/
``paper``) takes these five options, so they are defined once here, checked once here, and
turned into command-line flags from here (:func:`flow_plugin.cli._options.add_encoder_arguments`).
None of them changes what an embedding means; ``precision`` can change its last bits, so it is
part of the embedding cache's key (:class:`flow_plugin.encoding.backbone.BackboneKey`).

Examples
--------
>>> EncoderOptions(precision="float32", batch_size=32).backbone_kwargs()
{'device': None, 'precision': 'float32', 'batch_size': 32, 'show_progress_bar': None}
>>> EncoderOptions(batch_size=0)
Traceback (most recent call last):
...
flow_plugin.errors.InputError: batch_size must be a positive int, got 0; give the number of sentences per forward pass, e.g. 64 (the default)
"""

from __future__ import annotations

import dataclasses
import numbers
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flow_plugin.errors import InputError

#: The numeric precisions of the forward pass (see :mod:`flow_plugin.encoding.device`). ``int8`` (CPU only:
#: dynamically quantized linear layers, :func:`flow_plugin.encoding.cpu_kernels.quantize_linear_layers_int8`)
#: is faster on some CPUs at a measurable cost in quality, so it is only ever used when asked for.
PRECISIONS: tuple[str, ...] = ("auto", "float32", "bf16", "fp16", "int8")
DEFAULT_PRECISION = PRECISIONS[0]
#: What ``auto`` can stand for: the precisions that keep the model's quality (never int8).
RESOLVED_PRECISIONS: tuple[str, ...] = ("float32", "bf16", "fp16")
#: The environment variable that says what ``precision="auto"`` means on this machine, instead of
#: the GPU rule or the CPU measurement (:func:`flow_plugin.encoding.device.choose_precision`).
AUTO_PRECISION_ENV = "FLOW_PLUGIN_AUTO_PRECISION"
#: On a CPU, ``auto`` is bf16 only where the probe (:mod:`flow_plugin.encoding.precision_probe`) ran the
#: model's linear products at least this many times as fast in bf16 as in float32. The rest of a forward pass
#: does not speed up, so the gain end to end is smaller than the probe's, and a smaller one is not worth
#: bf16's rounding (up to 0.02 STS points, docs/reproducibility.md); 1.2 is also well clear of the probe's
#: spread between runs (a few percent on one thread, docs/evidence.md).
BF16_MIN_SPEEDUP = 1.2
#: Sentences per forward pass when none is given. Length-sorted batches of short STS sentences keep this cheap.
DEFAULT_BATCH_SIZE = 64
#: Environment variable that turns the on-disk embedding cache on for every shared encoder.
CACHE_DIR_ENV = "FLOW_PLUGIN_CACHE_DIR"
#: The options that change no embedding (where embeddings are kept, whether progress shows): given to a model's
#: loader, they name no result (a calibrated model leaves them out of the experiment MTEB files results under).
UNNAMED_OPTIONS: tuple[str, ...] = ("cache_dir", "show_progress_bar")
#: The folder under a run's output where a bench, a study or a sweep keeps its embeddings unless told otherwise.
CACHE_SUBFOLDER = "embedding-cache"


def default_cache_dir() -> Path | None:
    """The folder named by ``FLOW_PLUGIN_CACHE_DIR``, or ``None`` (memory only)."""
    value = os.environ.get(CACHE_DIR_ENV)
    return Path(value).expanduser() if value else None


def disk_cache_dir(output_folder: Path, cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """``cache_dir``, else ``$FLOW_PLUGIN_CACHE_DIR`` (:func:`default_cache_dir`), else
    ``<output_folder>/embedding-cache``: where a bench, a study or a sweep, which always keep their embeddings on
    disk, keep them."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    return default_cache_dir() or output_folder / CACHE_SUBFOLDER


def check_batch_size(value: Any) -> int | None:
    """``value`` as an int when it is a valid batch size (a positive whole number; ``None``
    means the default and is returned as is), else an error naming it and the remedy. The one
    check of a batch size, wherever one is accepted (these options, ``Backbone``, ``encode``).

    Examples
    --------
    >>> check_batch_size(1.5)
    Traceback (most recent call last):
    ...
    flow_plugin.errors.InputError: batch_size must be a positive int, got 1.5; give the number of sentences per forward pass, e.g. 64 (the default)
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise InputError(f"batch_size must be a positive int, got {value!r}; give the number of sentences per "
                         f"forward pass, e.g. {DEFAULT_BATCH_SIZE} (the default)")
    return int(value)


@dataclass(frozen=True)
class EncoderOptions:
    """How a backbone runs (the ``help`` metadata is the command line's help text)."""

    device: str | None = field(default=None, metadata={
        "help": "cpu, cuda, cuda:1 ... (default: CUDA if available, else CPU)"})
    precision: str = field(default="auto", metadata={
        "help": "forward-pass precision: auto (GPU: bf16 from compute capability 8.0, else fp16; CPU: bf16 only "
                f"where a short probe of the model's matmuls measured it at least {BF16_MIN_SPEEDUP}x as fast as float32, else "
                "float32; the measurement is cached per machine in the user's cache folder, and "
                f"${AUTO_PRECISION_ENV}={'|'.join(RESOLVED_PRECISIONS)} overrides it), float32, bf16, fp16, or int8 (CPU only: quantized linear layers, faster where "
                "the CPU has int8 dot products, at a cost in quality: docs/performance.md)", "choices": PRECISIONS})
    batch_size: int | None = field(default=None, metadata={
        "help": f"sentences per backbone forward pass (default {DEFAULT_BATCH_SIZE})"})
    cache_dir: str | os.PathLike[str] | None = field(default=None, metadata={
        "help": "on-disk embedding cache (default: $FLOW_PLUGIN_CACHE_DIR, else memory only)"})
    show_progress_bar: bool | None = field(default=None, metadata={"cli": False})

    def __post_init__(self) -> None:
        if self.device is not None and not isinstance(self.device, str):
            raise InputError(f"device must be a string such as 'cpu' or 'cuda:0', got {self.device!r}")
        if self.precision not in PRECISIONS:
            raise InputError(f"unknown precision {self.precision!r}; use one of {', '.join(PRECISIONS)}")
        object.__setattr__(self, "batch_size", check_batch_size(self.batch_size))

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(item.name for item in dataclasses.fields(cls))

    @classmethod
    def split(cls, kwargs: dict[str, Any]) -> tuple[EncoderOptions, dict[str, Any]]:
        """``(options, the other kwargs)`` from a mapping of keyword arguments."""
        names = set(cls.names())
        options = cls(**{key: value for key, value in kwargs.items() if key in names})
        return options, {key: value for key, value in kwargs.items() if key not in names}

    def backbone_kwargs(self) -> dict[str, Any]:
        """The arguments :class:`flow_plugin.encoding.backbone.Backbone` takes (all but the cache)."""
        return {"device": self.device, "precision": self.precision, "batch_size": self.batch_size,
                "show_progress_bar": self.show_progress_bar}

    def loader_kwargs(self) -> dict[str, Any]:
        """The options a registry model's MTEB loader takes as arguments: an explicit precision (MTEB files a
        result with loader arguments under an experiment folder of its own, so the default is left out)."""
        return {} if self.precision == DEFAULT_PRECISION else {"precision": self.precision}

    def replace(self, **changes: Any) -> EncoderOptions:
        return dataclasses.replace(self, **changes)
