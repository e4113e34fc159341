"""Numeric-precision choices for the backbone (devices: :func:`flow_plugin._machine.resolve_device`).

``precision="auto"`` picks, per device:
- CUDA: bfloat16 autocast on compute capability 8.0 and above (Ampere, Hopper, ...: bf16 tensor cores),
  float16 autocast below (Volta, Turing: fp16 tensor cores only; their bf16 is emulated and slow);
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
#: the first compute capability with bf16 tensor cores (NVIDIA A100, sm80)
BF16_MIN_CAPABILITY = (8, 0)


def precision_for_capability(capability: tuple[int, int]) -> str:
    """The ``auto`` precision of a CUDA device of compute capability ``(major, minor)``.

    >>> precision_for_capability((9, 0)), precision_for_capability((8, 6)), precision_for_capability((7, 5))
    ('bf16', 'bf16', 'fp16')
    """
    return "bf16" if tuple(capability) >= BF16_MIN_CAPABILITY else "fp16"


def resolve_precision(precision: str, device: torch.device) -> str:
    """Turn ``precision`` into a concrete ``float32``/``bf16``/``fp16`` for ``device``."""
    if precision not in PRECISIONS:
        raise InputError(f"unknown precision {precision!r}; use one of {', '.join(PRECISIONS)}")
    if precision != "auto":
        return precision
    if device.type == "cuda":
        # (torch.cuda.is_bf16_supported() also says yes where bf16 is only emulated, e.g. on a V100)
        return precision_for_capability(torch.cuda.get_device_capability(device))
    if device.type == "cpu" and cpu_has_native_bf16():
        return "bf16"
    return "float32"


def autocast_dtype(precision: str) -> torch.dtype | None:
    """The autocast dtype for a resolved precision (``None`` for float32: no autocast)."""
    return _DTYPES.get(precision)
