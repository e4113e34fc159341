"""Which batch plan is fastest on this GPU, for this model? Measured, and the measurement cached.

``batch_plan="auto"`` (the backbone's default) is ``length-exact`` on a CPU: there batches run side by side, one
per thread (:data:`flow_plugin.encoding.backbone.CPU_BATCH_THREADS`), each as fast as its tokens allow, and
nothing is padded. On a GPU a small batch leaves most of the device idle, and which plan wins depends on the
device, the model's width and depth, the precision and the batch size (on an H100 the padded plan ran 0.65x
to 4.3x the exact one, docs/performance.md). So on a CUDA device ``auto`` times the plans:

- **What is timed.** Each plan of :data:`~flow_plugin.encoding.batching.BATCH_PLANS` that can run there
  (``packed`` needs a supported encoder type, :mod:`flow_plugin.encoding.packed`) encodes the same synthetic
  workload with a randomly initialised model of the backbone's own configuration, prepared as the backbone
  prepares its weights (so no weights are loaded to decide, and the decision holds for any weights of that
  shape): :data:`PROBE_BATCHES` batches of the backbone's batch size (at most :data:`PROBE_MAX_SENTENCES`
  sentences) of random token ids, their lengths spread like STS sentences' (:func:`probe_lengths`).
- **How.** One untimed pass of each plan (kernels chosen, memory pools grown), then :data:`PROBE_REPEATS`
  timed passes of each, interleaved; each plan's best pass counts.
- **What is checked.** Each plan's embeddings against the exact plan's, relative to the embeddings' largest
  magnitude: a plan beyond the precision's rounding (:data:`AGREEMENT`) or one that fails is left out, with
  the reason recorded.
- **The rule.** The fastest plan, if it ran at least :data:`PLAN_MIN_SPEEDUP` times as fast as the exact plan;
  otherwise the exact plan, whose embeddings never depend on their batch mates.

The measurement is cached in ``batch-plan/`` of the user's cache folder, one JSON file per :func:`plan_key`
(the GPU, torch, CUDA and transformers versions, the model's shape, pooling, precision, batch size and
sequence limit, the probe's version), as the CPU's precision probe caches its own
(:func:`flow_plugin._io.cached_measurement`). ``$FLOW_PLUGIN_BATCH_PLAN`` names a plan for ``auto`` instead.
"""

from __future__ import annotations

import datetime
import hashlib
import importlib.metadata
import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from flow_plugin._io import cached_measurement, user_cache_dir
from flow_plugin.encoding.batching import BATCH_PLAN, BATCH_PLANS, REQUESTABLE_BATCH_PLANS
from flow_plugin.encoding.cpu_kernels import TYPICAL_SENTENCE_TOKENS
from flow_plugin.encoding.options import RESOLVED_PRECISIONS
from flow_plugin.errors import InputError

#: Raised when what the probe times or how it decides changes, so older cached results are not reused.
PROBE_VERSION = 1
#: Batches of the backbone's batch size the probe encodes per pass, at most this many sentences in all.
PROBE_BATCHES = 8
PROBE_MAX_SENTENCES = 2048
#: Timed passes of each plan (after one untimed pass).
PROBE_REPEATS = 3
#: Another plan replaces the exact one only when it ran at least this many times as fast: a smaller gain is not
#: worth embeddings that depend on their batch mates in their last bits.
PLAN_MIN_SPEEDUP = 1.1
#: The largest difference of a plan's embeddings from the exact plan's, as a fraction of the embeddings' largest
#: magnitude, that the precision's rounding explains. bf16: padding a sentence moved all-MiniLM-L6-v2's bf16
#: embeddings by up to 5.5e-3 of that scale on an AMD EPYC (3.5e-3 with AMX, tests/test_batching.py), so 2e-2 leaves
#: a margin of 3.6x; fp16 keeps 3 more mantissa bits (8x finer); float32: measured about 1e-6 (100x margin).
#: A plan that is wrong (attention across sentences, shifted positions) is off by the embeddings' own size.
AGREEMENT: dict[str, float] = dict(zip(RESOLVED_PRECISIONS, (1e-4, 2e-2, 5e-3)))  # float32, bf16, fp16
#: The environment variable that says what ``batch_plan="auto"`` means on this machine instead of the measurement.
BATCH_PLAN_ENV = "FLOW_PLUGIN_BATCH_PLAN"

#: ``run(plan, lengths, flat_ids)``: the embeddings of the probe's sentences (given as their lengths and their
#: ids end to end) encoded under ``plan``, as a float32 array (so the device has finished).
Runner = Callable[[str, np.ndarray, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class PlanMeasurement:
    """What the probe measured: each plan's sentences per second, its largest difference from the exact plan's
    embeddings (a fraction of their scale), the plans left out and why, and when (ISO 8601, UTC)."""

    sentences_per_second: dict[str, float]
    max_difference: dict[str, float]
    rejected: dict[str, str] = field(default_factory=dict)
    measured: str = ""

    def is_valid(self) -> bool:
        """The exact plan measured, every speed finite and positive: only such a measurement decides or is cached."""
        speeds = self.sentences_per_second
        return (BATCH_PLAN in speeds and all(isinstance(value, (int, float)) and math.isfinite(value) and value > 0
                                             for value in speeds.values())
                and set(speeds) <= set(BATCH_PLANS) and isinstance(self.measured, str))

    @property
    def plan(self) -> str:
        """The fastest plan when it ran at least :data:`PLAN_MIN_SPEEDUP` times as fast as the exact one.

        >>> PlanMeasurement({"length-exact": 100.0, "padded": 300.0, "packed": 350.0}, {}).plan
        'packed'
        >>> PlanMeasurement({"length-exact": 100.0, "padded": 105.0}, {}).plan
        'length-exact'
        """
        speeds = self.sentences_per_second
        fastest = max(speeds, key=speeds.__getitem__)
        return fastest if speeds[fastest] >= PLAN_MIN_SPEEDUP * speeds[BATCH_PLAN] else BATCH_PLAN

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class PlanChoice:
    """The batch plan a backbone runs and why: asked for (``requested``), set by ``$FLOW_PLUGIN_BATCH_PLAN``
    (``environment``), by the device's rule (``device``: a CPU), or on a GPU by the probe, measured now
    (``probe``) or earlier (``cache``), with each plan's measured speed.

    >>> PlanChoice("auto", "length-exact", "device").describe()
    'auto -> length-exact (device rule)'
    >>> PlanChoice("auto", "packed", "cache", {"length-exact": 1000.0, "packed": 2500.0},
    ...            measured="2026-11-29T10:00:00+00:00").describe()
    'auto -> packed (2.50x length-exact, measured 2026-11-29, cached)'
    """

    requested: str
    plan: str
    source: str
    sentences_per_second: dict[str, float] | None = None
    rejected: dict[str, str] | None = None
    measured: str | None = None

    def describe(self) -> str:
        if self.source == "requested":
            return f"{self.plan} (requested)"
        if self.source in ("environment", "device"):
            return f"{self.requested} -> {self.plan} ({'$' + BATCH_PLAN_ENV if self.source == 'environment' else 'device rule'})"
        speeds = self.sentences_per_second or {}
        ratio = speeds.get(self.plan, math.nan) / speeds.get(BATCH_PLAN, math.nan)
        when = (self.measured or "?")[:10]
        return (f"{self.requested} -> {self.plan} ({ratio:.2f}x {BATCH_PLAN}, measured {when}, "
                f"{'cached' if self.source == 'cache' else 'probed now'})")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def check_batch_plan(plan: Any) -> str:
    """``plan`` when it is one of :data:`~flow_plugin.encoding.batching.REQUESTABLE_BATCH_PLANS`, else an error.

    >>> check_batch_plan("sorted")
    Traceback (most recent call last):
    ...
    flow_plugin.errors.InputError: unknown batch_plan 'sorted'; use one of auto, length-exact, padded, packed
    """
    if plan not in REQUESTABLE_BATCH_PLANS:
        raise InputError(f"unknown batch_plan {plan!r}; use one of {', '.join(REQUESTABLE_BATCH_PLANS)}")
    return plan


def plan_from_environment() -> str | None:
    """``$FLOW_PLUGIN_BATCH_PLAN`` when set (``None`` when unset or empty); anything but a plan is an error."""
    value = os.environ.get(BATCH_PLAN_ENV, "").strip()
    if not value:
        return None
    if value not in BATCH_PLANS:
        raise InputError(f"{BATCH_PLAN_ENV}={value!r} is not a batch plan; set it to one of {', '.join(BATCH_PLANS)}, "
                         "or unset it to let 'auto' decide")
    return value


def plan_without_probe(requested: str, device: torch.device) -> PlanChoice | None:
    """The choice where nothing needs measuring (asked for, the environment, a device other than CUDA); ``None``
    where ``auto`` must be measured."""
    check_batch_plan(requested)
    if requested != "auto":
        return PlanChoice(requested, requested, "requested")
    from_environment = plan_from_environment()
    if from_environment is not None:
        return PlanChoice(requested, from_environment, "environment")
    if device.type != "cuda":
        return PlanChoice(requested, BATCH_PLAN, "device")
    return None


# ---------------------------------------------------------------------------- the measurement
def probe_lengths(max_seq_length: int, n_sentences: int, seed: int = 0) -> np.ndarray:
    """Token counts of the probe's sentences: log-normally spread around :data:`TYPICAL_SENTENCE_TOKENS`
    (STS sentences: median 12, mean 14.3), at least 3 and at most ``max_seq_length``.

    >>> lengths = probe_lengths(64, 1000)
    >>> int(lengths.min()) >= 3, int(lengths.max()) <= 64, 10 < float(np.median(lengths)) < 20
    (True, True, True)
    """
    rng = np.random.default_rng(seed)
    drawn = np.rint(rng.lognormal(math.log(TYPICAL_SENTENCE_TOKENS - 2), 0.45, size=n_sentences))
    return np.clip(drawn, 3, max_seq_length).astype(np.int64)


def probe_workload(max_seq_length: int, batch_size: int, vocab_size: int) -> tuple[np.ndarray, np.ndarray]:
    """``(lengths, ids end to end)`` of the probe's sentences: :data:`PROBE_BATCHES` batches of ``batch_size``."""
    n_sentences = max(2, min(PROBE_BATCHES * batch_size, PROBE_MAX_SENTENCES))
    lengths = probe_lengths(max_seq_length, n_sentences)
    ids = np.random.default_rng(1).integers(1, max(2, vocab_size), size=int(lengths.sum()), dtype=np.int64)
    return lengths, ids


def _relative_difference(got: np.ndarray, want: np.ndarray) -> float:
    scale = float(np.abs(want).max()) or 1.0
    return float(np.abs(got - want).max()) / scale


def measure_plans(run: Runner, candidates: tuple[str, ...], lengths: np.ndarray, flat_ids: np.ndarray,
                  precision: str, repeats: int = PROBE_REPEATS) -> PlanMeasurement:
    """Time each of ``candidates`` (the exact plan first) on the workload, check it against the exact plan's
    embeddings (:data:`AGREEMENT`), and return the speeds of those that held."""
    reference: np.ndarray | None = None
    working: list[str] = []
    differences: dict[str, float] = {}
    rejected: dict[str, str] = {}
    for plan in candidates:  # the untimed pass, and the check
        try:
            embeddings = run(plan, lengths, flat_ids)
        except Exception as error:  # noqa: BLE001 -- a plan this device or library cannot run is left out
            rejected[plan] = f"{type(error).__name__}: {str(error).splitlines()[0][:200] if str(error) else ''}"
            continue
        if reference is None:
            reference = embeddings
        differences[plan] = round(_relative_difference(embeddings, reference), 8)
        if differences[plan] > AGREEMENT.get(precision, AGREEMENT["bf16"]):
            rejected[plan] = f"differs from {candidates[0]} by {differences[plan]:.2e} of the scale"
        else:
            working.append(plan)
    best = {plan: math.inf for plan in working}
    for repeat in range(repeats):
        for plan in working if repeat % 2 == 0 else working[::-1]:
            started = time.perf_counter()
            run(plan, lengths, flat_ids)
            best[plan] = min(best[plan], time.perf_counter() - started)
    return PlanMeasurement({plan: round(len(lengths) / seconds, 1) for plan, seconds in best.items() if seconds > 0},
                           differences, rejected,
                           datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))


# ---------------------------------------------------------------------------- the cache
def probe_cache_dir() -> Path:
    """Where measurements are kept: ``batch-plan/`` in the user's cache folder."""
    return user_cache_dir() / "batch-plan"


def plan_key(device: torch.device, config: Any, *, layers: int, pooling: str, precision: str, batch_size: int,
             max_seq_length: int) -> dict[str, Any]:
    """Everything a measurement depends on: the device (its name and compute capability on CUDA), torch's,
    CUDA's and transformers' versions, the model's shape (type, width, heads, feed-forward width, and the
    ``layers`` the pooling runs), the pooling, precision, batch size, sequence limit and the probe's version."""
    described: dict[str, Any] = {"type": device.type}
    if device.type == "cuda":
        described.update(name=torch.cuda.get_device_name(device), capability=list(torch.cuda.get_device_capability(device)),
                         cuda=torch.version.cuda)
    shape = {name: getattr(config, name, None) for name in ("model_type", "hidden_size", "num_attention_heads",
                                                            "intermediate_size")} | {"layers": int(layers)}
    return {"probe_version": PROBE_VERSION, "device": described, "torch": torch.__version__,
            "transformers": importlib.metadata.version("transformers"), "model": shape, "pooling": pooling,
            "precision": precision, "batch_size": int(batch_size), "max_seq_length": int(max_seq_length)}


def _cache_file(folder: Path, key: dict[str, Any]) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]
    return folder / f"plan-probe-{digest}.json"


def _parse(content: dict[str, Any]) -> PlanMeasurement | None:
    measurement = PlanMeasurement(**content)
    return measurement if measurement.is_valid() else None


def choose_batch_plan(requested: str, device: torch.device, key: dict[str, Any],
                      measure: Callable[[], PlanMeasurement], *, cache_folder: Path | None = None) -> PlanChoice:
    """Turn ``requested`` into a plan for ``device`` and say why; ``auto`` on a GPU reads the cached measurement
    for ``key`` (:func:`plan_key`) or runs ``measure()`` and caches it when valid. An invalid measurement means
    the exact plan, uncached."""
    fixed = plan_without_probe(requested, device)
    if fixed is not None:
        return fixed
    folder = probe_cache_dir() if cache_folder is None else Path(cache_folder)
    measurement, from_cache = cached_measurement(
        _cache_file(folder, key), key, measure, _parse,
        lambda value: value.as_dict() if value.is_valid() else None)
    plan = measurement.plan if measurement.is_valid() else BATCH_PLAN
    return PlanChoice(requested, plan, "cache" if from_cache else "probe", dict(measurement.sentences_per_second),
                      dict(measurement.rejected), measurement.measured)


__all__ = ["AGREEMENT", "BATCH_PLAN_ENV", "PLAN_MIN_SPEEDUP", "PlanChoice", "PlanMeasurement", "check_batch_plan",
           "choose_batch_plan", "measure_plans", "plan_from_environment", "plan_key", "plan_without_probe",
           "probe_cache_dir", "probe_lengths", "probe_workload"]
