"""The benchmark's machinery, shared by every section: worker processes, interleaved timing, the
machine description, memory probes, the sentence sets and the matmul peak.

Each measurement runs in a fresh ``python -m benchmarks.perf --worker JOB`` process (:class:`Runner`), so
memory is a process's own and nothing one job loaded slows the next. Contenders that share a process are
timed *interleaved* (:func:`interleaved_timing`): chunk by chunk, in rotating order, so a burst of load from
other processes hits all of them alike.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
WORKER_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def say(message: str) -> None:
    print(f"[perf] {message}", flush=True)


def data_root(path: Path | None) -> Path:
    """The SentEval folder: ``path``, else the data root's ``senteval/`` (``$FLOW_PLUGIN_SHARED_DATA``, else
    ``../shared/data`` beside the checkout)."""
    from flow_plugin.data.roots import data_part

    found = data_part("senteval", path)
    return found if found is not None else Path(__file__).resolve().parents[2] / "shared" / "data" / "senteval"


# =========================================================================== the machine
def load_average() -> list[float] | None:
    try:
        return [round(value, 2) for value in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def describe_machine(threads: int | None = None) -> dict[str, Any]:
    """flow-plugin's machine description (:func:`flow_plugin._machine.describe_machine`) plus what
    a benchmark also wants: physical cores, memory, library versions, GPUs and the load."""
    import torch

    from flow_plugin._machine import cpu_has_native_bf16
    from flow_plugin._machine import describe_machine as base_description
    from flow_plugin.encoding.device import choose_precision

    physical = None
    total_memory = None
    try:
        import psutil

        physical = psutil.cpu_count(logical=False)
        total_memory = round(psutil.virtual_memory().total / 2**30, 1)
    except ImportError:
        pass
    versions = {}
    for package in ("transformers", "sentence_transformers", "nflows", "mteb", "numpy"):
        try:
            versions[package] = __import__(package).__version__
        except Exception:  # noqa: BLE001 -- a missing optional package is simply "absent"
            versions[package] = None
    gpu = "none"
    if torch.cuda.is_available():
        gpu = ", ".join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
    base = base_description()
    return {
        "cpu_model": base["cpu"],
        "cpu_family": base["cpu_family"],
        "cpu_flags": base["cpu_flags"],
        "bf16_kernels": base["bf16_kernels"],
        "native_bf16": cpu_has_native_bf16(),
        "logical_cores": base["cpu_cores"],
        "physical_cores": physical,
        "memory_gib": total_memory,
        "torch_threads": threads or base["torch_threads"],
        "auto_precision_cpu": (auto := choose_precision("auto", torch.device("cpu"))).precision,
        "auto_precision_cpu_choice": auto.as_dict(),  # the bf16 probe at BERT-base's shapes (cached per machine)
        "python": base["python"],
        "platform": base["platform"],
        "torch": base["torch"],
        **versions,
        "gpu": gpu,
        "load_average_start": load_average(),
    }


# =========================================================================== workers
class Runner:
    """Runs one job in a fresh ``python -m benchmarks.perf --worker`` process."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.folder = Path(tempfile.mkdtemp(prefix="flow-plugin-perf-"))
        self.count = 0
        self.failed = False

    def close(self) -> None:
        """Remove the workers' files, unless one failed (its log is named in the error)."""
        if not self.failed:
            shutil.rmtree(self.folder, ignore_errors=True)

    def __call__(self, job: str, params: dict[str, Any], *, env: dict[str, str] | None = None) -> dict[str, Any]:
        self.count += 1
        stem = self.folder / f"{self.count:02d}-{job}"
        input_path, output_path, log_path = stem.with_suffix(".in.json"), stem.with_suffix(".out.json"), stem.with_suffix(".log")
        input_path.write_text(json.dumps(params, default=str), encoding="utf-8")
        child_env = {**os.environ, **WORKER_ENV, **(env or {})}
        child_env.pop("FLOW_PLUGIN_CACHE_DIR", None)  # an empty, memory-only embedding cache in every worker
        # the workers import this module as ``benchmarks.perf``: the repository root must be importable
        child_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), child_env.get("PYTHONPATH")]))
        command = [sys.executable, "-m", "benchmarks.perf", "--worker", job,
                   "--worker-input", str(input_path), "--worker-output", str(output_path)]
        started = time.perf_counter()
        with open(log_path, "wb") as log:
            try:
                completed = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=child_env,
                                           cwd=REPO_ROOT, timeout=self.timeout, check=False)
                code = completed.returncode
            except subprocess.TimeoutExpired:
                code = "timeout"
        elapsed = time.perf_counter() - started
        if code != 0 or not output_path.is_file():
            self.failed = True
            tail = log_path.read_text(encoding="utf-8", errors="replace")[-3000:]
            raise RuntimeError(f"perf worker {job} failed ({code}); log {log_path}:\n{tail}")
        result = json.loads(output_path.read_text(encoding="utf-8"))
        result["process_seconds"] = round(elapsed, 2)
        return result


# --------------------------------------------------------------------------- memory probes
def peak_rss_mib() -> float:
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / 1024 if sys.platform != "darwin" else peak / 2**20, 1)


def status_mib(field: str) -> float | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return round(int(line.split()[1]) / 1024, 1)
    except (OSError, ValueError, IndexError):
        pass
    return None


def reset_peak() -> bool:
    """Reset this process's peak RSS (Linux >= 4.0); False where not possible."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


class Phase:
    """Wall and CPU seconds, RSS before/after and the peak RSS of one phase of a worker."""

    def __init__(self) -> None:
        self.result: dict[str, Any] = {}

    def __enter__(self) -> Phase:
        import gc

        gc.collect()
        self._peak_ok = reset_peak()
        self.result["rss_before_mib"] = status_mib("VmRSS")
        self._cpu = time.process_time()
        self._wall = time.perf_counter()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.result["seconds"] = round(time.perf_counter() - self._wall, 4)
        self.result["cpu_seconds"] = round(time.process_time() - self._cpu, 4)
        self.result["rss_after_mib"] = status_mib("VmRSS")
        self.result["peak_rss_mib"] = status_mib("VmHWM") if self._peak_ok else None


# --------------------------------------------------------------------------- sentences
def sentence_set(root: str, name: str, limit: int | None) -> list[str]:
    from flow_plugin.data.senteval import SENTEVAL_TASKS, load_eval_subsets

    if name == "stsb-test":
        pairs = load_eval_subsets(root, "STSBenchmark")[0]
        sentences = list(pairs.sentences1) + list(pairs.sentences2)
    elif name == "sts7-test":
        seen: dict[str, None] = {}
        for task in SENTEVAL_TASKS:
            for pairs in load_eval_subsets(root, task):
                for text in (*pairs.sentences1, *pairs.sentences2):
                    seen.setdefault(text, None)
        sentences = list(seen)
    else:
        raise ValueError(name)
    return sentences[:limit] if limit else sentences


def stsb_workload(data: Path, limit: int | None = None) -> tuple[list[str], list[float], list[str]]:
    """``(sentences, gold scores, calibration sentences)``: the STS-B test pairs' first sentences then their
    second ones (the first ``limit`` pairs where given), their gold scores, and the STS-B train sentences
    (the OpenVINO int8 calibration: never the test set)."""
    from flow_plugin.data.senteval import load_eval_subsets, load_split

    pairs = load_eval_subsets(data, "STSBenchmark")[0]
    n = len(pairs.scores) if not limit else min(limit, len(pairs.scores))
    sentences = list(pairs.sentences1[:n]) + list(pairs.sentences2[:n])
    train = load_split(data, "STSBenchmark", "train")[0]
    calibration = list(dict.fromkeys([*train.sentences1, *train.sentences2]))
    return sentences, [float(score) for score in pairs.scores[:n]], calibration


def model_location(spec: str) -> tuple[str, str]:
    """(folder or hub id, pooling) of a registry backbone name or a local model folder."""
    if Path(spec).is_dir():
        return spec, "last-avg"
    from flow_plugin.catalog.registry import get_backbone

    backbone = get_backbone(spec)
    return backbone.weights_location()[0], backbone.pooling


# --------------------------------------------------------------------------- timing
def interleaved_timing(
    contenders: dict[str, Callable[[list[str]], Any]],
    sentences: list[str],
    *,
    chunk: int,
    repeats: int,
    synchronize: Callable[[], None] = lambda: None,
) -> tuple[dict[str, Any], dict[str, list[Any]]]:
    """Time every contender on every chunk of ``sentences``, alternating, ``repeats`` times.

    Returns per-contender wall/CPU seconds per repeat and per chunk, and the outputs of the
    first repeat (chunk by chunk) for quality checks.
    """
    size = chunk if chunk and chunk > 0 else len(sentences)
    chunks = [sentences[start : start + size] for start in range(0, len(sentences), size)]
    names = list(contenders)
    wall = {name: [[0.0] * len(chunks) for _ in range(repeats)] for name in names}
    cpu = {name: [[0.0] * len(chunks) for _ in range(repeats)] for name in names}
    outputs: dict[str, list[Any]] = {name: [None] * len(chunks) for name in names}
    turn = 0
    for repeat in range(repeats):
        for index, part in enumerate(chunks):
            rotation = turn % len(names)
            turn += 1
            for name in names[rotation:] + names[:rotation]:
                synchronize()
                cpu_start, wall_start = time.process_time(), time.perf_counter()
                out = contenders[name](part)
                synchronize()
                wall[name][repeat][index] = time.perf_counter() - wall_start
                cpu[name][repeat][index] = time.process_time() - cpu_start
                if repeat == 0:
                    outputs[name][index] = out
    timings = {
        "n_sentences": len(sentences),
        "n_chunks": len(chunks),
        "chunk": size,
        "repeats": repeats,
        "wall": wall,
        "cpu": cpu,
    }
    return timings, outputs


def ratio_summary(timings: dict[str, Any], slow: str, fast: str) -> dict[str, Any]:
    """Speed-up of ``fast`` over ``slow``: per repeat (total over chunks) and per chunk (noise)."""
    wall = timings["wall"]
    per_repeat = [sum(s) / sum(f) for s, f in zip(wall[slow], wall[fast]) if sum(f) > 0]
    per_chunk = sorted(s / f for rs, rf in zip(wall[slow], wall[fast]) for s, f in zip(rs, rf) if f > 0)
    cpu = timings["cpu"]
    cpu_ratio = [sum(s) / sum(f) for s, f in zip(cpu[slow], cpu[fast]) if sum(f) > 0]
    return {
        "ratio": round(statistics.median(per_repeat), 3),
        "ratio_per_repeat": [round(value, 3) for value in per_repeat],
        "chunk_ratio_p10": round(quantile(per_chunk, 0.1), 3),
        "chunk_ratio_median": round(quantile(per_chunk, 0.5), 3),
        "chunk_ratio_p90": round(quantile(per_chunk, 0.9), 3),
        "cpu_time_ratio": round(statistics.median(cpu_ratio), 3) if cpu_ratio else None,
    }


def quantile(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def throughput(timings: dict[str, Any], name: str) -> dict[str, Any]:
    totals = [sum(row) for row in timings["wall"][name]]
    cpu_totals = [sum(row) for row in timings["cpu"][name]]
    n = timings["n_sentences"]
    return {
        "sentences_per_second": round(n / statistics.median(totals), 2),
        "best_sentences_per_second": round(n / min(totals), 2),
        "seconds_per_repeat": [round(total, 3) for total in totals],
        "cpu_seconds_per_repeat": [round(total, 3) for total in cpu_totals],
    }


# --------------------------------------------------------------------------- FLOPs and the matmul peak
def forward_flops(config: Any, lengths: Sequence[int], batch_size: int, chunk: int) -> dict[str, float]:
    """Matmul FLOPs of a BERT-style encoder over sentences of ``lengths`` tokens.

    Per layer and sentence of L tokens (d = hidden size, f = FFN size): Q, K, V and output
    projections 4·2·L·d², FFN 2·2·L·d·f, attention scores and attention-weighted values
    2·2·L²·d (all heads together). ``useful`` counts real lengths; ``executed`` counts each
    batch of length-sorted sentences (within each timing chunk) at the width of its longest one:
    what a padded batch costs. ``Backbone.encode`` pads nothing (its batches hold one token length
    each, :mod:`flow_plugin.encoding.batching`), so for it ``executed`` is an upper bound. Embeddings, LayerNorm, softmax, GELU and the pooler
    are not counted.
    """
    d = int(config.hidden_size)
    f = int(getattr(config, "intermediate_size", 4 * d))
    layers = int(config.num_hidden_layers)
    per_token = 2 * (4 * d * d + 2 * d * f)

    def cost(length: int) -> float:
        return per_token * length + 4.0 * length * length * d

    useful = layers * sum(cost(length) for length in lengths)
    executed = 0.0
    size = chunk if chunk and chunk > 0 else len(lengths)
    padded_tokens = 0
    for start in range(0, len(lengths), size):
        ordered = sorted(lengths[start : start + size], reverse=True)
        for batch_start in range(0, len(ordered), batch_size):
            batch = ordered[batch_start : batch_start + batch_size]
            executed += layers * len(batch) * cost(batch[0])
            padded_tokens += len(batch) * batch[0]
    return {
        "useful_flops": useful,
        "executed_flops": executed,
        "tokens": float(sum(lengths)),
        "padded_tokens": float(padded_tokens),
    }


def torch_dtype(name: str) -> Any:
    """The torch dtype of a precision name of this benchmark ("bf16", "float32", "fp16")."""
    import torch

    return {"bf16": torch.bfloat16, "float32": torch.float32, "fp16": torch.float16}[name]


def device_sync(device: str) -> Callable[[], None]:
    """What waits for the device's queued work before a clock is read (nothing to wait for on a CPU)."""
    import torch

    return torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)


def matmul_peak(dtype_name: str, device: str, shapes: Sequence[tuple[int, int, int]], seconds: float = 0.5) -> dict[str, Any]:
    """Best sustained GFLOP/s of dense ``torch.matmul`` in ``dtype`` over ``shapes`` (M, K, N).

    Each sample times a run of back-to-back matmuls lasting at least 20 ms (so a single
    lucky iteration cannot set the peak); the best sample over ``seconds`` per shape counts.
    A shape whose single matmul already takes longer than ``seconds`` (bf16 on a CPU without
    bf16 kernels runs at about 1 GFLOP/s: a 2048-cubed product takes 17 s on an AVX2-only AMD
    EPYC) is measured by that one matmul, so the peak costs about ``seconds`` per shape anywhere.
    """
    import torch

    dtype = torch_dtype(dtype_name)
    sync = device_sync(device)
    per_shape = {}
    for m, k, n in shapes:
        a = torch.randn(m, k, device=device).to(dtype)
        b = torch.randn(k, n, device=device).to(dtype)
        start = time.perf_counter()
        torch.matmul(a, b)  # warm-up, and a first timing
        sync()
        best = time.perf_counter() - start
        if best < seconds:
            reps = max(1, math.ceil(0.02 / max(best, 1e-6)))
            deadline = time.perf_counter() + seconds
            while time.perf_counter() < deadline:
                start = time.perf_counter()
                for _ in range(reps):
                    torch.matmul(a, b)
                sync()
                best = min(best, (time.perf_counter() - start) / reps)
        per_shape[f"{m}x{k}x{n}"] = round(2 * m * k * n / best / 1e9, 1)
    return {"best_gflops": max(per_shape.values()), "per_shape_gflops": per_shape}


def square_peak_size(dtype_name: str, device: str, budget: float = 0.1, largest: int = 2048) -> int:
    """The side of the square product the peak is measured on: 2048 where one such matmul takes
    at most ``budget`` seconds, else the largest power of two from 256 whose one matmul does (a CPU
    without kernels for the dtype gets a small square instead of minutes of timing)."""
    import torch

    dtype = torch_dtype(dtype_name)
    sync = device_sync(device)
    size = 256
    while size < largest:
        a = torch.randn(size, size, device=device).to(dtype)
        start = time.perf_counter()
        torch.matmul(a, a)
        sync()
        if 8 * (time.perf_counter() - start) > budget:  # the next size has 8 times the work
            break
        size *= 2
    return size
