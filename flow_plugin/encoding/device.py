"""Device and numeric-precision choices for the backbone.

``precision="auto"`` picks, per device:
- CUDA: bfloat16 autocast where the GPU supports it, else float16 autocast;
- CPU: bfloat16 autocast when the processor has native bf16 matrix instructions
  (AMX-BF16 or AVX512-BF16), where a bf16 matmul is several times faster than float32;
  float32 everywhere else, where emulated bf16 would be slower, not faster.
Pooling, and everything after it (calibrators, cosine), always runs in float32.
"""

from __future__ import annotations

import functools
from pathlib import Path

import torch

from flow_plugin.errors import InputError

PRECISIONS: tuple[str, ...] = ("auto", "float32", "bf16", "fp16")
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def resolve_device(device: str | torch.device | None = None) -> torch.device:
    """``None``/``"auto"`` -> CUDA when available, else CPU; anything else is passed to torch."""
    if device is None or (isinstance(device, str) and device == "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if isinstance(device, int):
        return torch.device("cuda", device)
    try:
        return torch.device(device)
    except (RuntimeError, TypeError) as error:
        raise InputError(f"unknown device {device!r}: {error}") from None


@functools.lru_cache(maxsize=1)
def cpu_has_native_bf16() -> bool:
    """True when /proc/cpuinfo lists AMX-BF16 or AVX512-BF16 (Linux x86); False elsewhere."""
    try:
        flags = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    words = set(flags.split())
    return bool({"amx_bf16", "avx512_bf16"} & words)


def resolve_precision(precision: str, device: torch.device) -> str:
    """Turn ``precision`` into a concrete ``float32``/``bf16``/``fp16`` for ``device``."""
    if precision not in PRECISIONS:
        raise InputError(f"unknown precision {precision!r}; use one of {', '.join(PRECISIONS)}")
    if precision != "auto":
        return precision
    if device.type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    if device.type == "cpu" and cpu_has_native_bf16():
        return "bf16"
    return "float32"


def autocast_dtype(precision: str) -> torch.dtype | None:
    """The autocast dtype for a resolved precision (``None`` for float32: no autocast)."""
    return _DTYPES.get(precision)
