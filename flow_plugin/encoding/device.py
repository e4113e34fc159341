"""Numeric-precision choices for the backbone (devices: :func:`flow_plugin._machine.resolve_device`).

``precision="auto"`` picks, per device:
- CUDA: bfloat16 autocast on compute capability 8.0 and above (Ampere, Hopper, ...: bf16 tensor cores),
  float16 autocast below (Volta, Turing: fp16 tensor cores only; their bf16 is emulated and slow);
- CPU: whatever a short probe measured faster on this machine, for this model's shapes
  (:mod:`flow_plugin.encoding.precision_probe`): bfloat16 autocast where bf16 ran at least
  :data:`~flow_plugin.encoding.options.BF16_MIN_SPEEDUP` times as fast as float32, float32
  elsewhere. CPU flags do not decide: with the same AVX512-BF16 instructions bf16 was much
  faster on an AMD EPYC and half as fast on an Intel Xeon. The measurement is cached per machine.
``$FLOW_PLUGIN_AUTO_PRECISION`` (float32, bf16 or fp16), where set, is what ``auto`` means instead,
on every device; an explicit precision is never changed.
Pooling, and everything after it (calibrators, cosine), always runs in float32.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from threadpoolctl import threadpool_limits

from flow_plugin.encoding import precision_probe
from flow_plugin.encoding.options import AUTO_PRECISION_ENV, PRECISIONS, RESOLVED_PRECISIONS
from flow_plugin.errors import InputError

#: the first compute capability with bf16 tensor cores (NVIDIA A100, sm80)
BF16_MIN_CAPABILITY = (8, 0)
#: The shapes probed when no model is named: BERT-base's widths at the default batch (64 x 16 tokens).
DEFAULT_PROBE_SHAPES = (768, 3072, 1024)

#: where a precision came from (``PrecisionChoice.source``)
SOURCES = ("requested", "environment", "device", "probe", "cache")


@dataclass(frozen=True)
class PrecisionChoice:
    """The precision a backbone runs in and why: asked for (``requested``), set by
    ``$FLOW_PLUGIN_AUTO_PRECISION`` (``environment``), by the device's rule (``device``: a GPU's compute
    capability; float32 on devices other than CUDA and CPU), or
    on a CPU by the bf16 probe, measured now (``probe``) or earlier (``cache``), with bf16's speed
    relative to float32 (``bf16_speedup``) and when it was measured.

    >>> PrecisionChoice("auto", "float32", "cache", 0.52, "2026-11-25T10:00:00+00:00").describe()
    'auto -> float32 (bf16 0.52x float32, measured 2026-11-25, cached)'
    >>> PrecisionChoice("float32", "float32", "requested").describe()
    'float32 (requested)'
    """

    requested: str
    precision: str
    source: str
    bf16_speedup: float | None = None
    measured: str | None = None

    def describe(self) -> str:
        if self.source == "requested":
            return f"{self.precision} (requested)"
        if self.source == "environment":
            why = f"${AUTO_PRECISION_ENV}"
        elif self.source == "device":
            why = "device rule"
        else:
            when = (self.measured or "?")[:10]
            why = (f"bf16 {self.bf16_speedup:.2f}x float32, measured {when}, "
                   f"{'cached' if self.source == 'cache' else 'probed now'}")
        return f"{self.requested} -> {self.precision} ({why})"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def precision_for_capability(capability: tuple[int, int]) -> str:
    """The ``auto`` precision of a CUDA device of compute capability ``(major, minor)``.

    Examples
    --------
    >>> precision_for_capability((9, 0)), precision_for_capability((8, 6)), precision_for_capability((7, 5))
    ('bf16', 'bf16', 'fp16')
    """
    return "bf16" if tuple(capability) >= BF16_MIN_CAPABILITY else "fp16"


def check_precision(precision: Any) -> str:
    """``precision`` when it is one of :data:`~flow_plugin.encoding.options.PRECISIONS`, else an error naming them.

    >>> check_precision("fp32")
    Traceback (most recent call last):
    ...
    flow_plugin.errors.InputError: unknown precision 'fp32'; use one of auto, float32, bf16, fp16, int8
    """
    if precision not in PRECISIONS:
        raise InputError(f"unknown precision {precision!r}; use one of {', '.join(PRECISIONS)}")
    return precision


def auto_precision_from_environment() -> str | None:
    """``$FLOW_PLUGIN_AUTO_PRECISION`` when set (``None`` when unset or empty); a value that is not a
    concrete precision is an error naming the variable and the allowed values."""
    value = os.environ.get(AUTO_PRECISION_ENV, "").strip()
    if not value:
        return None
    if value not in RESOLVED_PRECISIONS:
        raise InputError(f"{AUTO_PRECISION_ENV}={value!r} is not a precision; set it to one of "
                         f"{', '.join(RESOLVED_PRECISIONS)}, or unset it to let 'auto' decide")
    return value


def choose_precision(precision: str, device: torch.device, *, shapes: Any = None,
                     cache_folder: str | os.PathLike[str] | None = None, measure: Any = None) -> PrecisionChoice:
    """Turn ``precision`` into a concrete ``float32``/``bf16``/``fp16`` for ``device``, and say why.

    On a CPU, ``auto`` runs (or reads from the cache) the bf16 probe for ``shapes`` (a
    :class:`~flow_plugin.encoding.precision_probe.ProbeShapes`; default: BERT-base at batch 64).
    ``cache_folder`` and ``measure`` replace the probe cache's folder and the measurement
    (``measure(shapes) -> Bf16Measurement``), e.g. in tests.
    """
    check_precision(precision)
    if precision == "int8" and device.type != "cpu":
        raise InputError(f"precision 'int8' runs on a CPU only, not on {device}; use bf16 or fp16 there, or device='cpu'")
    if precision != "auto":
        return PrecisionChoice(precision, precision, "requested")
    from_environment = auto_precision_from_environment()
    if from_environment is not None:
        return PrecisionChoice(precision, from_environment, "environment")
    if device.type == "cuda":
        # (torch.cuda.is_bf16_supported() also says yes where bf16 is only emulated, e.g. on a V100)
        return PrecisionChoice(precision, precision_for_capability(torch.cuda.get_device_capability(device)), "device")
    if device.type != "cpu":
        return PrecisionChoice(precision, "float32", "device")

    shapes = shapes or precision_probe.ProbeShapes(*DEFAULT_PROBE_SHAPES)
    measurement, from_cache = precision_probe.cached_bf16_measurement(
        shapes, folder=Path(cache_folder) if cache_folder is not None else None,
        measure=measure or precision_probe.measure_bf16_speedup)
    chosen = measurement.precision if measurement.is_valid() else "float32"
    return PrecisionChoice(precision, chosen, "cache" if from_cache else "probe", measurement.bf16_speedup,
                           measurement.measured)


def process_threads() -> int:
    """The torch threads this process runs with (torch's default: one per physical core, unless limited)."""
    return torch.get_num_threads()


def limit_process_threads(threads: int) -> None:
    """This process's torch and BLAS (NumPy, SciPy, scikit-learn) use ``threads`` threads from now on: what each
    worker of a pool that fills the cores together runs with."""
    torch.set_num_threads(threads)
    _LIMITS.append(threadpool_limits(limits=threads))  # kept for the life of the process


_LIMITS: list[Any] = []
