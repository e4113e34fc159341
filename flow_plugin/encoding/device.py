"""Numeric-precision choices for the backbone (devices: :func:`flow_plugin._machine.resolve_device`).

``precision="auto"`` picks, per device:
- CUDA: bfloat16 autocast where the GPU supports it, else float16 autocast;
- CPU: bfloat16 autocast when the processor has native bf16 matrix instructions
  (AMX-BF16 or AVX512-BF16), where a bf16 matmul is several times faster than float32;
  float32 everywhere else, where emulated bf16 would be slower, not faster.
Pooling, and everything after it (calibrators, cosine), always runs in float32.
"""

from __future__ import annotations

import torch

from flow_plugin._machine import cpu_has_native_bf16
from flow_plugin.encoding.options import PRECISIONS
from flow_plugin.errors import InputError

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


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
