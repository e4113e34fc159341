"""The machine a computation runs on: devices, CPU features, and one description of it.

This is the one place that reads ``/proc/cpuinfo``, resolves ``device="auto"`` and
describes the hardware of a result (the leaderboard's ``hardware``, the paper report's
``machine``, the benchmark's header). Torch is imported inside the functions that need it.
"""

from __future__ import annotations

import contextlib
import functools
import os
import platform
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from flow_plugin.errors import InputError

#: CPU instruction sets with bf16 matrix products: they name the kernels bf16 runs on (and so its last bits),
#: not whether bf16 is faster than float32, which the bf16 probe measures (flow_plugin.encoding.precision_probe)
BF16_CPU_FLAGS: tuple[str, ...] = ("amx_bf16", "avx512_bf16")
_REPORTED_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8")


@functools.lru_cache(maxsize=1)
def _cpuinfo() -> tuple[str, frozenset[str], str | None]:
    model, flags = platform.processor() or platform.machine() or "unknown", frozenset()
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return model, flags, None
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if not key.strip() and fields:  # the first processor's block ends
            break
        fields.setdefault(key.strip(), value.strip())
    model = fields.get("model name") or model
    flags = frozenset(fields.get("flags", "").split())
    family = (f"family {fields['cpu family']} model {fields['model']}"
              if fields.get("cpu family") and fields.get("model") else None)
    return model, flags, family


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), or what :mod:`platform` knows.

    >>> isinstance(cpu_model(), str) and len(cpu_model()) > 0
    True
    """
    return _cpuinfo()[0]


def cpu_family() -> str | None:
    """The CPU's family and model numbers (``/proc/cpuinfo``, e.g. "family 26 model 2"), which tell apart CPU
    generations a virtual machine names alike ("AMD EPYC"); None where they are not known."""
    return _cpuinfo()[2]


def cpu_flags() -> frozenset[str]:
    """The CPU feature flags of ``/proc/cpuinfo`` (empty where there is none)."""
    return _cpuinfo()[1]


def cpu_has_native_bf16() -> bool:
    """True when the CPU has bf16 matrix instructions (AMX-BF16 or AVX512-BF16). Recorded for
    information: having them does not make bf16 faster than float32 (on an Intel Xeon with
    AVX512-BF16 and no AMX it was half as fast), so ``precision="auto"`` measures instead.

    >>> cpu_has_native_bf16() in (True, False)
    True
    """
    return bool(set(BF16_CPU_FLAGS) & cpu_flags())


def bf16_kernel_family() -> str:
    """Which bf16 matrix kernels a CPU runs: ``"amx"``, ``"avx512-bf16"`` or ``"emulated"``.

    bf16 products accumulate in another order on each family, so embeddings computed in
    bf16 can differ in their last bits from one family to the next.
    """
    flags = cpu_flags()
    if "amx_bf16" in flags:
        return "amx"
    if "avx512_bf16" in flags:
        return "avx512-bf16"
    return "emulated"


def _torch() -> Any:
    """The ``torch`` module, imported the first time a device is resolved or described."""
    # torch is heavy: it loads here, not with the package's light rooms that import this module
    import torch

    return torch


def resolve_device(device: Any = None) -> Any:
    """``None``/``"auto"`` -> CUDA when available, else CPU; anything else is checked and
    passed to torch. Asking for CUDA on a machine without it is an error that says so.

    >>> str(resolve_device("cpu"))
    'cpu'
    """
    torch = _torch()
    if device is None or (isinstance(device, str) and device.strip().lower() == "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if isinstance(device, int) and not isinstance(device, bool):
        device = torch.device("cuda", device)
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError) as error:
        raise InputError(f"unknown device {device!r}: {error}") from None
    if resolved.type == "cuda":
        if not torch.cuda.is_available():
            raise InputError(
                f"device {str(resolved)!r} was asked for, but this machine has no usable CUDA device "
                f"(torch {torch.__version__}, CUDA build: {torch.version.cuda or 'no'}); use device 'cpu' or 'auto'"
            )
        if resolved.index is not None and resolved.index >= torch.cuda.device_count():
            raise InputError(
                f"device {str(resolved)!r} does not exist: this machine has {torch.cuda.device_count()} CUDA device(s)"
            )
    return resolved


def cuda_available() -> bool:
    """Whether torch sees a usable CUDA device."""
    return bool(_torch().cuda.is_available())


def describe_machine(device: Any = None, precision: str | None = None,
                     precision_choice: dict[str, Any] | None = None, *,
                     batch_plan_choice: dict[str, Any] | None = None) -> dict[str, Any]:
    """Where a result is computed: CPU (model, cores, bf16 kernel family), torch and its
    threads, the device (GPU name, CUDA version) and the precision; with ``precision_choice``
    (a backbone's ``precision_choice.as_dict()``) also how that precision was chosen: asked for,
    set by the environment, the device's rule, or for ``auto`` on a CPU the bf16 probe's
    measured speed ratio and whether it was measured now or read from the cache; with
    ``batch_plan_choice`` (a backbone's ``batch_plan_choice.as_dict()``) how its batch plan was chosen,
    on a GPU with each plan's measured speed.

    >>> info = describe_machine("cpu", "float32")
    >>> info["device"], info["precision"], info["cpu_cores"] >= 1
    ('cpu', 'float32', True)
    """
    torch = _torch()
    info: dict[str, Any] = {
        "cpu": cpu_model(),
        "cpu_family": cpu_family(),
        "cpu_flags": sorted(cpu_flags() & set(_REPORTED_FLAGS)),
        "bf16_kernels": bf16_kernel_family(),
        "cpu_cores": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "device": str(device) if device is not None else None,
        "precision": precision,
        **({"precision_choice": dict(precision_choice)} if precision_choice is not None else {}),
        **({"batch_plan_choice": dict(batch_plan_choice)} if batch_plan_choice is not None else {}),
        "platform": platform.platform(),
        "python": platform.python_version(),
    }
    if device is not None and str(device).startswith("cuda") and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(torch.device(device))
        info["cuda"] = torch.version.cuda
    return info


class StageTimes:
    """Wall and CPU seconds (this process, all its threads) spent per named stage ("encode", "fit", ...).

    >>> times = StageTimes()
    >>> with times.measure("fit"):
    ...     _ = sum(range(1000))
    >>> sorted(times.as_dict()["fit"]), times.as_dict()["fit"]["wall"] >= 0
    (['cpu', 'wall'], True)
    """

    def __init__(self) -> None:
        self.wall: dict[str, float] = {}
        self.cpu: dict[str, float] = {}

    @contextlib.contextmanager
    def measure(self, stage: str) -> Iterator[None]:
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            self.wall[stage] = self.wall.get(stage, 0.0) + time.perf_counter() - wall
            self.cpu[stage] = self.cpu.get(stage, 0.0) + time.process_time() - cpu

    def as_dict(self) -> dict[str, dict[str, float]]:
        return {stage: {"wall": round(self.wall[stage], 3), "cpu": round(self.cpu[stage], 3)} for stage in self.wall}
