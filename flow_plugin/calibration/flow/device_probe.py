"""Where a flow fits fastest, the CPU or the GPU: measured once per machine and flow shape, and cached.

A flow's training step is a few small matrix products on a batch of 64 embeddings: on a GPU each of its
many kernels waits for its launch, while the CPU's cores run them at once. So neither device is always faster
(a MiniLM-sized flow on STS-B fitted in 1.1-1.2 s on an H100 machine's 16 CPU cores and in 2.0 s on the GPU,
docs/performance.md). A flow whose ``device`` is ``None``/``"auto"`` therefore fits where a short probe
measured it faster, on a machine with a CUDA device; on a machine without one it fits on the CPU, unmeasured.

- **What is timed.** The flow itself (its hyper-parameters, the embeddings' width) fitted for one epoch of
  :data:`PROBE_ROWS` synthetic Gaussian rows on each device, after an untimed quarter epoch (kernels chosen, the
  device started); the best of :data:`PROBE_REPEATS` fits counts.
- **The rule.** The GPU only where it fitted at least :data:`GPU_MIN_SPEEDUP` times as fast as the CPU: a fit on
  the CPU is the one a machine without a GPU makes too.
- **The cache.** ``flow-device/`` in the user's cache folder, one JSON file per :func:`fit_device_key` (the CPU,
  torch's threads, the GPU, torch's version, the width and the flow's shape), as every probe of this machine
  caches (:func:`flow_plugin._io.cached_measurement`).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from flow_plugin._io import cached_measurement, user_cache_dir
from flow_plugin._machine import cpu_model, cuda_available

#: Raised when what the probe times or how it decides changes, so older cached results are not reused.
PROBE_VERSION = 1
#: Synthetic rows of each timed fit (one epoch: this many / batch size steps), and timed fits per device.
PROBE_ROWS = 1536
PROBE_REPEATS = 2
#: The GPU fits only where it measured at least this many times as fast as the CPU.
GPU_MIN_SPEEDUP = 1.1
#: The flow's hyper-parameters a step's cost depends on (its results do not matter here).
SHAPE_PARAMS: tuple[str, ...] = ("n_levels", "depth", "hidden_features", "permutation", "coupling", "batch_size",
                                 "fast_path", "whiten_first")
#: ``fit(device, rows, epochs)``: fit the flow on ``rows`` synthetic rows for ``epochs`` on ``device``
Fitter = Callable[[str, int, float], None]


@dataclass(frozen=True)
class FitDeviceChoice:
    """Where a flow fits and why: asked for (``requested``), the machine's rule (``device``: no CUDA device), or
    the probe, measured now (``probe``) or earlier (``cache``), with each device's seconds per timed fit.

    >>> FitDeviceChoice("auto", "cpu", "cache", {"cpu": 0.5, "cuda": 0.9}, "2026-11-29T10:00:00+00:00").describe()
    'auto -> cpu (cuda 0.56x cpu, measured 2026-11-29, cached)'
    """

    requested: str
    device: str
    source: str
    seconds: dict[str, float] | None = None
    measured: str | None = None

    def describe(self) -> str:
        if self.source in ("requested", "device"):
            return f"{self.requested} -> {self.device} ({'requested' if self.source == 'requested' else 'no CUDA device'})"
        seconds = self.seconds or {}
        ratio = seconds.get("cpu", math.nan) / seconds.get("cuda", math.nan)
        return (f"{self.requested} -> {self.device} (cuda {ratio:.2f}x cpu, measured {(self.measured or '?')[:10]}, "
                f"{'cached' if self.source == 'cache' else 'probed now'})")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def is_valid(seconds: Any) -> bool:
    """Finite positive seconds for both devices: only such a measurement decides or is cached."""
    return (isinstance(seconds, dict) and set(seconds) == {"cpu", "cuda"}
            and all(isinstance(value, (int, float)) and math.isfinite(value) and value > 0 for value in seconds.values()))


def faster_device(seconds: dict[str, float]) -> str:
    """``cuda`` where it fitted at least :data:`GPU_MIN_SPEEDUP` times as fast, else ``cpu``.

    >>> faster_device({"cpu": 1.2, "cuda": 2.0}), faster_device({"cpu": 3.0, "cuda": 1.0})
    ('cpu', 'cuda')
    """
    return "cuda" if is_valid(seconds) and seconds["cpu"] >= GPU_MIN_SPEEDUP * seconds["cuda"] else "cpu"


def measure_fit_seconds(fit: Fitter, repeats: int = PROBE_REPEATS) -> dict[str, float]:
    """The best seconds of ``repeats`` one-epoch fits of :data:`PROBE_ROWS` rows on each device, after one
    untimed quarter-epoch fit on each (``fit`` waits for the device before it returns)."""
    seconds = {"cpu": math.inf, "cuda": math.inf}
    for device in seconds:
        fit(device, PROBE_ROWS, 0.25)
    for repeat in range(repeats):
        for device in ("cpu", "cuda") if repeat % 2 == 0 else ("cuda", "cpu"):
            started = time.perf_counter()
            fit(device, PROBE_ROWS, 1.0)
            seconds[device] = min(seconds[device], round(time.perf_counter() - started, 4))
    return seconds


def fit_device_key(width: int, params: dict[str, Any]) -> dict[str, Any]:
    """Everything the measurement depends on: the CPU and torch's threads, the GPU, torch's version, the width
    and the flow's shape (:data:`SHAPE_PARAMS`), the probe's version."""
    # torch loads when a flow is fitted
    import torch

    return {"probe_version": PROBE_VERSION, "cpu": cpu_model(), "torch_threads": torch.get_num_threads(),
            "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None, "torch": torch.__version__,
            "width": int(width), "flow": {name: params.get(name) for name in SHAPE_PARAMS}}


def _cache_file(folder: Path, key: dict[str, Any]) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:24]
    return folder / f"flow-device-{digest}.json"


def _parse(content: dict[str, Any]) -> dict[str, Any] | None:
    return content if is_valid(content.get("seconds")) and isinstance(content.get("measured"), str) else None


def choose_fit_device(requested: str | None, key: Callable[[], dict[str, Any]],
                      measure: Callable[[], dict[str, float]], *, cache_folder: Path | None = None,
                      has_cuda: Callable[[], bool] = cuda_available) -> FitDeviceChoice:
    """Where a flow of ``device=requested`` fits: an explicit device as asked; ``None``/``"auto"`` on the CPU without
    a CUDA device, else where the cached measurement for ``key()`` (:func:`fit_device_key`), or a fresh
    ``measure()`` (:func:`measure_fit_seconds`), says it is faster (:func:`faster_device`)."""
    asked = "auto" if requested is None or str(requested).strip().lower() == "auto" else str(requested)
    if asked != "auto":
        return FitDeviceChoice(asked, asked, "requested")
    if not has_cuda():
        return FitDeviceChoice(asked, "cpu", "device")
    folder = user_cache_dir() / "flow-device" if cache_folder is None else Path(cache_folder)
    stamp = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    wanted = key()
    content, from_cache = cached_measurement(
        _cache_file(folder, wanted), wanted, lambda: {"seconds": measure(), "measured": stamp}, _parse,
        lambda value: value if is_valid(value["seconds"]) else None)
    return FitDeviceChoice(asked, faster_device(content["seconds"]), "cache" if from_cache else "probe",
                           dict(content["seconds"]), content["measured"])


__all__ = ["FitDeviceChoice", "GPU_MIN_SPEEDUP", "choose_fit_device", "faster_device", "fit_device_key",
           "measure_fit_seconds"]
