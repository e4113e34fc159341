"""Is bf16 faster than float32 on this CPU, for this model? Measured, and the measurement cached.

Having bf16 instructions says little: on an AMD EPYC with AVX512-BF16 bf16 matmuls ran much
faster than float32, on an Intel Xeon with AVX512-BF16 and no AMX half as fast. So
``precision="auto"`` on a CPU times what the backbone would run instead of reading CPU flags.

What the probe times: one transformer layer's linear layers at the model's own shapes (query,
key, value and output projections, ``hidden -> hidden``; the feed-forward pair
``hidden -> 4 x hidden -> hidden``) on ``batch size x 16`` rows (at most 512) of synthetic float32 input,
prepared exactly as :meth:`Backbone.load <flow_plugin.encoding.backbone.Backbone.load>` prepares
them (:func:`~flow_plugin.encoding.cpu_kernels.prepare_linear_layers`: bf16 weights, oneDNN-packed
where available, run under autocast). These products are most of a forward pass on short
sentences, and they are where the two precisions differ; a forward of the real model would also
need its weights loaded twice and take seconds. The rest of the pass (LayerNorm, softmax,
tokenization, pooling) runs alike in both, so the end-to-end gain is smaller than the probe's.

How it stays robust on a busy machine: it runs on one torch thread, as the backbone runs each batch on a
CPU (a multi-threaded product on a busy machine times the scheduler; see :func:`measure_bf16_speedup`) and times each product on its
own, so each is short. First a pilot: :data:`PILOT_REPEATS` runs of each precision on 64 rows,
giving up on bf16 at once where it runs at under :data:`PILOT_GIVE_UP` of float32's speed (emulated
bf16, ~50x slower, would otherwise take seconds). Then one untimed run of each precision (oneDNN
builds its kernels), and :data:`MIN_PAIRS` to :data:`PROBE_REPEATS` timed (float32, bf16) pairs,
interleaved in alternating order, until :data:`PROBE_BUDGET_SECONDS` have passed. Each product's
best time counts, since another process can only add time; a precision's time is their sum.

The measurement is cached per machine in ``precision/`` of the user's cache folder
(:func:`flow_plugin._io.user_cache_dir`), one JSON file per :func:`probe_key` (CPU model and flags,
torch version and the thread count the backbone runs with, ``ONEDNN_MAX_CPU_ISA``, the shapes, the probe's version), written
atomically under a file lock (so two processes starting together do not probe at once and slow
each other down). A file that is unreadable, invalid or of another key is ignored and replaced.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from flow_plugin._io import cached_measurement, read_cached, user_cache_dir
from flow_plugin._machine import cpu_flags, cpu_model
from flow_plugin.encoding.cpu_kernels import TYPICAL_SENTENCE_TOKENS, prepare_linear_layers
from flow_plugin.encoding.options import BF16_MIN_SPEEDUP

#: Raised when what the probe times or how it decides changes, so older cached results are not reused.
PROBE_VERSION = 1
#: Timed (float32, bf16) pairs at most, and at least.
PROBE_REPEATS = 7
MIN_PAIRS = 3
#: Stop adding timed pairs once the probe has run this long (seconds; at least MIN_PAIRS are timed).
PROBE_BUDGET_SECONDS = 0.4
#: Rows the probe multiplies at most. The ratio was the same at 512 and 1024 rows (all-MiniLM-L6-v2's and
#: mpnet-base's widths, 2-core AMD EPYC: 4.29-4.36 against 4.33-4.46), and 512 keep a 768-wide probe at ~0.45 s.
PROBE_MAX_TOKENS = 512
#: Rows of the pilot runs, and how many of each precision.
PILOT_TOKENS = 64
PILOT_REPEATS = 3
#: Below this bf16 / float32 speed on the pilot, bf16 is slower by far (emulated) and the probe stops.
PILOT_GIVE_UP = 0.25
#: The precisions the probe compares.
PROBED = ("float32", "bf16")

#: ``timer(precision, tokens)``: the seconds of each probed product in ``precision`` on ``tokens`` rows, in a
#: fixed order; a pass's time is the sum over products of each one's best time.
Timer = Callable[[str, int], "tuple[float, ...]"]


@dataclass(frozen=True)
class ProbeShapes:
    """The matrix sizes the probe multiplies: a model's hidden and feed-forward widths, and the
    rows of a typical batch (batch size x tokens of a typical sentence)."""

    hidden_size: int
    intermediate_size: int
    tokens: int

    @classmethod
    def for_width(cls, hidden_size: int, batch_size: int) -> ProbeShapes:
        """The shapes of an encoder ``hidden_size`` wide run ``batch_size`` sentences at a time: rows
        for ``batch_size`` typical sentences, at most :data:`PROBE_MAX_TOKENS`. The feed-forward
        width is taken as 4 x hidden, as in BERT-family encoders (all-MiniLM-L6-v2: 384 -> 1536,
        mpnet-base: 768 -> 3072), so the shapes follow from the embedding width alone, which a
        registry file states: no config has to be read to decide.

        >>> ProbeShapes.for_width(384, 64), ProbeShapes.for_width(768, 8)
        (ProbeShapes(hidden_size=384, intermediate_size=1536, tokens=512), ProbeShapes(hidden_size=768, intermediate_size=3072, tokens=128))
        """
        tokens = min(int(batch_size) * TYPICAL_SENTENCE_TOKENS, PROBE_MAX_TOKENS)
        return cls(int(hidden_size), 4 * int(hidden_size), tokens)

    def flops(self, tokens: int | None = None) -> int:
        """Multiply-adds x 2 of one pass (4 square projections and the feed-forward pair).

        >>> ProbeShapes(384, 1536, 1024).flops()
        3623878656
        """
        rows = self.tokens if tokens is None else tokens
        return 2 * rows * (4 * self.hidden_size**2 + 2 * self.hidden_size * self.intermediate_size)


@dataclass(frozen=True)
class Bf16Measurement:
    """What the probe measured: ``bf16_speedup`` is float32's best time over bf16's (2.0: bf16 twice
    as fast; 0.5: half as fast), from ``pairs`` timed pairs (0 when the pilot decided)."""

    bf16_speedup: float
    float32_seconds: float
    bf16_seconds: float
    pairs: int
    probe_seconds: float
    measured: str  # when, ISO 8601 UTC

    def is_valid(self) -> bool:
        """Finite, positive times and ratio: only such a measurement decides or is cached."""
        def positive(value: Any) -> bool:
            return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0

        return (positive(self.bf16_speedup) and positive(self.float32_seconds) and positive(self.bf16_seconds)
                and (self.probe_seconds == 0 or positive(self.probe_seconds))
                and isinstance(self.pairs, int) and self.pairs >= 0 and isinstance(self.measured, str))

    @property
    def precision(self) -> str:
        """``bf16`` where it measured at least :data:`BF16_MIN_SPEEDUP` times as fast, else ``float32``."""
        return bf16_or_float32(self.bf16_speedup)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def bf16_or_float32(bf16_speedup: float) -> str:
    """The CPU's ``auto`` precision for a measured bf16 / float32 speed ratio.

    >>> bf16_or_float32(2.0), bf16_or_float32(0.5), bf16_or_float32(1.19), bf16_or_float32(float("nan"))
    ('bf16', 'float32', 'float32', 'float32')
    """
    return "bf16" if math.isfinite(bf16_speedup) and bf16_speedup >= BF16_MIN_SPEEDUP else "float32"


# ---------------------------------------------------------------------------- timing
def _probe_layers(shapes: ProbeShapes, precision: str) -> torch.nn.Module:
    """The probed linear layers with random weights (a private generator: the global RNG is untouched),
    prepared for ``precision`` as the backbone prepares its own."""
    generator = torch.Generator().manual_seed(0)
    hidden, intermediate = shapes.hidden_size, shapes.intermediate_size
    layers = torch.nn.ModuleList()
    for n_in, n_out in [(hidden, hidden)] * 4 + [(hidden, intermediate), (intermediate, hidden)]:
        layer = torch.nn.utils.skip_init(torch.nn.Linear, n_in, n_out)
        with torch.no_grad():
            layer.weight.copy_(torch.randn(n_out, n_in, generator=generator) / math.sqrt(n_in))
            layer.bias.copy_(torch.randn(n_out, generator=generator) * 0.02)
        layer.requires_grad_(False)
        layers.append(layer)
    prepare_linear_layers(layers, precision, torch.device("cpu"), batch_tokens=shapes.tokens)
    return layers


def linear_layer_timer(shapes: ProbeShapes) -> Timer:
    """The real :data:`Timer`: the seconds of each of the probed products on the CPU, as the
    backbone runs them (``torch.inference_mode``, bf16 autocast for bf16, float32 input), on one
    thread (see :func:`measure_bf16_speedup`)."""
    layers = {precision: _probe_layers(shapes, precision) for precision in PROBED}
    generator = torch.Generator().manual_seed(1)
    inputs: dict[tuple[int, int], torch.Tensor] = {}

    def timer(precision: str, tokens: int) -> tuple[float, ...]:
        seconds = []
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            for layer in layers[precision]:
                shape = (tokens, layer.in_features)
                if shape not in inputs:
                    inputs[shape] = torch.randn(shape, generator=generator)
                start = time.perf_counter()
                layer(inputs[shape])
                seconds.append(time.perf_counter() - start)
        return tuple(seconds)

    return timer


def measure_bf16_speedup(shapes: ProbeShapes, *, timer: Timer | None = None, repeats: int = PROBE_REPEATS,
                         budget_seconds: float = PROBE_BUDGET_SECONDS) -> Bf16Measurement:
    """Time float32 against bf16 (see the module's text for the schedule) on one torch thread,
    restoring the thread count afterwards; ``timer`` replaces the real one
    (:func:`linear_layer_timer`), e.g. in tests.

    Why one thread: on a machine other processes keep busy, a multi-threaded product waits at every
    synchronisation for whichever of its threads was descheduled, and its times measure the scheduler
    (on the 2-core AMD EPYC this was written on, with two other busy processes: ratios of 0.8 to 1.3 at
    2 threads, against 4.2-4.3 at 1 thread and 4.2-4.4 at 2 threads on the idle machine). A single
    thread's best time is that of an uninterrupted run, and the bf16 / float32 ratio of per-core
    kernel speeds is what decides.

    >>> fake = lambda precision, tokens: ({"float32": 0.010, "bf16": 0.005}[precision],)
    >>> measured = measure_bf16_speedup(ProbeShapes(8, 32, 64), timer=fake)
    >>> measured.bf16_speedup, measured.precision
    (2.0, 'bf16')
    """
    wall_start = time.perf_counter()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _measure(shapes, timer or linear_layer_timer(shapes), repeats, budget_seconds, wall_start)
    finally:
        torch.set_num_threads(threads)


def _best(times: list[tuple[float, ...]]) -> float:
    """The sum over products of each product's best time."""
    return float(sum(min(column) for column in zip(*times)))


def _measure(shapes: ProbeShapes, timer: Timer, repeats: int, budget_seconds: float, wall_start: float
             ) -> Bf16Measurement:
    pilot_tokens = min(PILOT_TOKENS, shapes.tokens)
    pilot = {precision: _best([timer(precision, pilot_tokens) for _ in range(PILOT_REPEATS)]) for precision in PROBED}
    times: dict[str, list[tuple[float, ...]]] = {precision: [] for precision in PROBED}
    pairs = 0
    if pilot["float32"] < PILOT_GIVE_UP * pilot["bf16"]:  # bf16 under a quarter of float32's speed
        best = {precision: pilot[precision] * shapes.tokens / pilot_tokens for precision in PROBED}  # scaled up
    else:
        for precision in PROBED:
            timer(precision, shapes.tokens)  # untimed: kernels are built on the first call
        while pairs < repeats and (pairs < MIN_PAIRS or time.perf_counter() - wall_start < budget_seconds):
            for precision in PROBED if pairs % 2 == 0 else reversed(PROBED):
                times[precision].append(timer(precision, shapes.tokens))
            pairs += 1
        best = {precision: _best(values) for precision, values in times.items()}
    speedup = best["float32"] / best["bf16"] if best["bf16"] > 0 else float("nan")
    return Bf16Measurement(
        bf16_speedup=round(speedup, 4) if math.isfinite(speedup) else speedup,
        float32_seconds=best["float32"], bf16_seconds=best["bf16"], pairs=pairs,
        probe_seconds=round(time.perf_counter() - wall_start, 4),
        measured=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    )


# ---------------------------------------------------------------------------- the cache
def probe_cache_dir() -> Path:
    """Where measurements are kept: ``precision/`` in the user's cache folder."""
    return user_cache_dir() / "precision"


def probe_key(shapes: ProbeShapes) -> dict[str, Any]:
    """Everything a measurement depends on: the CPU (model and flags), torch's version and thread
    count, oneDNN's instruction-set cap (``ONEDNN_MAX_CPU_ISA``), the shapes and the probe."""
    flags = " ".join(sorted(cpu_flags()))
    return {
        "probe_version": PROBE_VERSION,
        "cpu": cpu_model(),
        "cpu_flags_sha256": hashlib.sha256(flags.encode()).hexdigest()[:16],
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "onednn_max_cpu_isa": os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA"),
        "shapes": asdict(shapes),
    }


def _cache_file(folder: Path, key: dict[str, Any]) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]
    return folder / f"bf16-probe-{digest}.json"


def _parse(content: dict[str, Any]) -> Bf16Measurement | None:
    measurement = Bf16Measurement(**content)
    return measurement if measurement.is_valid() else None


def read_cached_measurement(path: Path, key: dict[str, Any]) -> Bf16Measurement | None:
    """The measurement in ``path`` when it is a valid one for ``key``; ``None`` otherwise (absent,
    unreadable, not JSON, another key, missing or invalid numbers)."""
    return read_cached(path, key, _parse)


def cached_bf16_measurement(shapes: ProbeShapes, *, folder: Path | None = None,
                            measure: Callable[[ProbeShapes], Bf16Measurement] = measure_bf16_speedup,
                            ) -> tuple[Bf16Measurement, bool]:
    """``(measurement, from_cache)`` for ``shapes`` on this machine: the cached one when there is a
    valid one, else a fresh ``measure(shapes)``, cached if valid. A cache folder that cannot be
    written costs the caching (a warning), not the decision (:func:`flow_plugin._io.cached_measurement`)."""
    folder = probe_cache_dir() if folder is None else Path(folder)
    key = probe_key(shapes)
    return cached_measurement(_cache_file(folder, key), key, lambda: measure(shapes), _parse,
                              lambda value: value.as_dict() if value.is_valid() else None,
                              lambda value: {"precision": value.precision})


__all__ = ["Bf16Measurement", "ProbeShapes", "bf16_or_float32", "cached_bf16_measurement", "linear_layer_timer",
           "measure_bf16_speedup", "probe_cache_dir", "probe_key", "read_cached_measurement"]
