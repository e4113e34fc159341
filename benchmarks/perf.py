"""``flow-plugin perf``: the speed and memory benchmark (issue #6), in one command.

Sections (``--sections``, default all):

``encode``
    Sentences per second of our ``Backbone`` (``precision="auto"``: bf16 autocast on a CPU
    with AMX/AVX512-BF16) against ``SentenceTransformer.encode`` in float32: same model, same
    sentences (the STS-B test set, and the unique sentences of all seven STS test sets), same
    batch size, ``max_seq_length`` 64, same threads. The contenders are timed *interleaved*:
    the sentences are cut into chunks and every chunk is encoded by each contender in turn
    (the order rotating), so a burst of load from other processes hits all of them alike;
    the ratio is the median over repeats, and the spread of the per-chunk ratios is printed
    as the noise of the run. Also: STS-B test Spearman (cosine of raw embeddings) of the fast
    path and of float32, and, with CUDA, the same comparison on the GPU (else the report says
    "no GPU available").
``efficiency`` (part of ``encode``)
    Achieved FLOP/s of our forward passes, counted from the real token counts, against the
    best dense bf16 and float32 matmul timed in the same process.
``flow``
    Flow fitting time against encoding time for the same task (STS-B and SICK-R, all splits:
    the paper's "target" corpus), with the log-likelihood reached, and the same fit by the
    pre-optimisation implementation (kept below as :func:`reference_flow_fit`) for comparison.
``variants``
    The six variants of a backbone on the seven STS sets, through ``flow-plugin eval``'s
    code path (MTEB, the shared embedding cache), against one variant; fresh processes with
    an empty cache.
``scaling``
    Encoding and flow fitting of 1k, 10k, 100k sentences: time and memory per sentence.
``gpu`` (the default with ``--device cuda``)
    On a CUDA device: ours against ``SentenceTransformer.encode`` at equal precision (fp16, bf16),
    batch sizes 32-512, both batch plans, peak GPU memory, Spearman against float32; the flow fit on
    the GPU against the CPU (:mod:`benchmarks.gpu`).

Every measurement that reports memory runs in a fresh subprocess and reads its peak RSS
(``ru_maxrss``; per phase through ``/proc/self/clear_refs`` where Linux allows it). The
result is printed as a table and written (atomically) as JSON with the machine described.
``--quick`` runs every section on small inputs (a functional check, not a benchmark).

Also runnable as ``python -m benchmarks.perf``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

SECTIONS: tuple[str, ...] = ("encode", "flow", "variants", "scaling")
#: the sections a CUDA device adds (the default with --device cuda)
GPU_SECTIONS: tuple[str, ...] = ("gpu",)
DEFAULT_MODELS = "minilm-l6,mpnet-base"
SENTENCE_SETS = ("stsb-test", "sts7-test")
#: The targets of issue #6 (benchmark targets, never test assertions).
TARGETS: dict[str, Any] = {
    "encode_ratio_min": {"mpnet-base": 2.0, "minilm-l6": 1.5},
    "encode_quality_max_abs_diff": 0.0005,
    "bf16_peak_fraction_min": 0.40,
    "fit_over_encode_max": 0.25,
    "six_over_one_max": 1.3,
}
#: the folder that holds ``benchmarks/`` (workers run ``python -m benchmarks.perf`` from there)
REPO_ROOT = Path(__file__).resolve().parents[1]
_WORKER_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
_QUICK = {
    "sentences": 384,
    "repeats": 1,
    "chunk": 128,
    "flow_sentences": 1200,
    "variant_tasks": ["SentEvalSTS16"],
    "sizes": [300, 1000, 3000],
}


# =========================================================================== command line
def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true",
                        help="small inputs, MiniLM only, one repeat: checks every code path in a few minutes")
    parser.add_argument("--sections", default=None,
                        help=f"comma-separated subset of {','.join(SECTIONS + GPU_SECTIONS)} (default: all CPU sections; "
                             "with --device cuda: gpu; 'encode' includes efficiency)")
    parser.add_argument("--models", default=None,
                        help=f"registry backbones (or local model folders) for the encode section (default: {DEFAULT_MODELS}; "
                             "--quick: minilm-l6)")
    parser.add_argument("--model", dest="main_model", default="minilm-l6",
                        help="backbone of the flow, variants and scaling sections (default: minilm-l6)")
    parser.add_argument("--data", type=Path, default=None,
                        help="SentEval data folder (default: $FLOW_PLUGIN_SENTEVAL_DATA, else ../shared/data/senteval)")
    parser.add_argument("--output", type=Path, default=Path("perf-results.json"),
                        help="JSON result file (default: perf-results.json)")
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda: the GPU section (with CUDA "
                                                       "available the encode section also runs on the GPU either way)")
    parser.add_argument("--gpu-batch-sizes", default=None,
                        help="batch sizes of the GPU section (default 32,64,128,256,512)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch intra-op threads in every worker (default: torch's default)")
    parser.add_argument("--batch-size", type=int, default=64, help="sentences per forward pass, all contenders")
    parser.add_argument("--max-length", type=int, default=64, help="word pieces per sentence, all contenders")
    parser.add_argument("--sets", default=",".join(SENTENCE_SETS),
                        help="encode section sentence sets: stsb-test (STS-B test) and/or sts7-test "
                             "(unique sentences of the 7 STS test sets)")
    parser.add_argument("--repeats", type=int, default=None, help="interleaved repeats on STS-B test (default 3)")
    parser.add_argument("--repeats-sts7", type=int, default=1, help="interleaved repeats on the 7 STS sets (default 1)")
    parser.add_argument("--chunk", type=int, default=None,
                        help="sentences per interleaving chunk (default 512; 0 = the whole set at once)")
    parser.add_argument("--sentences", type=int, default=None,
                        help="use only the first N sentences of each encode set (default: all)")
    parser.add_argument("--flow-tasks", default="STSBenchmark,SICKRelatedness", help="SentEval tasks of the flow section")
    parser.add_argument("--flow-sentences", type=int, default=None,
                        help="use only the first N sentences of each flow corpus (default: all)")
    parser.add_argument("--no-flow-reference", action="store_true",
                        help="skip the pre-optimisation flow fit used for comparison")
    parser.add_argument("--variant-tasks", default=None,
                        help="offline MTEB tasks of the variants section (default: all seven)")
    parser.add_argument("--sizes", default=None, help="scaling sizes (default 1000,10000,100000)")
    parser.add_argument("--timeout", type=float, default=4 * 3600, help="seconds allowed per worker process")
    # internal: one measurement in a fresh process
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--worker-input", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--worker-output", type=Path, default=None, help=argparse.SUPPRESS)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.perf", description=__doc__.splitlines()[0])
    configure_parser(parser)
    args = parser.parse_args(argv)
    if argv is not None:
        args.command_line = ["python", "-m", "benchmarks.perf", *argv]
    return run(args)


def run(args: argparse.Namespace) -> int:
    if args.worker:
        return _worker_main(args)
    from flow_plugin._io import atomic_write_json

    plan = _plan(args)
    started = time.time()
    report: dict[str, Any] = {
        "format": "flow-plugin-perf",
        "version": 1,
        "command": " ".join(getattr(args, "command_line", None) or _command_line()),
        "quick": bool(args.quick),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
        "machine": describe_machine(args.threads),
        "settings": {key: value for key, value in plan.items() if key != "data"} | {"data": str(plan["data"])},
        "targets": TARGETS,
        "sections": {},
    }
    _say(f"machine: {report['machine']['cpu_model']} | {report['machine']['logical_cores']} logical cores | "
         f"threads {report['machine']['torch_threads']} | torch {report['machine']['torch']} | GPU: {report['machine']['gpu']}")
    runner = _Runner(args.timeout)
    try:
        if "encode" in plan["sections"]:
            report["sections"]["encode"] = _section_encode(runner, plan)
            atomic_write_json(args.output, report)
        if "flow" in plan["sections"]:
            report["sections"]["flow"] = _section_flow(runner, plan)
            atomic_write_json(args.output, report)
        if "variants" in plan["sections"]:
            report["sections"]["variants"] = _section_variants(runner, plan)
            atomic_write_json(args.output, report)
        if "scaling" in plan["sections"]:
            report["sections"]["scaling"] = _section_scaling(runner, plan)
            atomic_write_json(args.output, report)
        if "gpu" in plan["sections"]:
            from benchmarks.gpu import section_gpu

            report["sections"]["gpu"] = section_gpu(runner, plan, _say)
    finally:
        runner.close()
        report["memory"] = _memory_summary(report["sections"])
        report["seconds"] = round(time.time() - started, 1)
        report["machine"]["load_average_end"] = _load_average()
        atomic_write_json(args.output, report)
    print()
    print(format_report(report))
    print(f"\nJSON written to {args.output}")
    return 0


def _command_line() -> list[str]:
    """How this run was started, for the report."""
    if sys.argv[1:2] == ["perf"]:
        return ["flow-plugin", "perf", *sys.argv[2:]]
    return ["python", "-m", "benchmarks.perf", *sys.argv[1:]]


def _say(message: str) -> None:
    print(f"[perf] {message}", flush=True)


def _plan(args: argparse.Namespace) -> dict[str, Any]:
    default = GPU_SECTIONS if str(args.device).startswith("cuda") else SECTIONS
    sections = [name.strip() for name in (args.sections or ",".join(default)).split(",") if name.strip()]
    sections = ["encode" if name == "efficiency" else name for name in sections]
    unknown = sorted(set(sections) - set(SECTIONS + GPU_SECTIONS))
    if unknown:
        raise SystemExit(f"flow-plugin perf: unknown section(s) {', '.join(unknown)}; "
                         f"choose from {', '.join(SECTIONS + GPU_SECTIONS)}")
    if "gpu" in sections:
        import torch

        if not torch.cuda.is_available():
            raise SystemExit(f"flow-plugin perf: the gpu section needs a CUDA device, and this machine has none "
                             f"(torch {torch.__version__}, CUDA build: {torch.version.cuda or 'no'})")
    sets = [name.strip() for name in args.sets.split(",") if name.strip()]
    if set(sets) - set(SENTENCE_SETS):
        raise SystemExit(f"flow-plugin perf: --sets takes {', '.join(SENTENCE_SETS)}")
    quick = args.quick
    models = args.models or ("minilm-l6" if quick else DEFAULT_MODELS)
    sizes = args.sizes or (",".join(map(str, _QUICK["sizes"])) if quick else "1000,10000,100000")
    return {
        "sections": sections,
        "data": _data_root(args.data),
        "models": [name.strip() for name in models.split(",") if name.strip()],
        "main_model": args.main_model,
        "device": args.device,
        "threads": args.threads,
        "batch_size": args.batch_size,
        "max_length": args.max_length,
        "sets": sets,
        "repeats": args.repeats or (_QUICK["repeats"] if quick else 3),
        "repeats_sts7": 1 if quick else args.repeats_sts7,
        "chunk": args.chunk if args.chunk is not None else (_QUICK["chunk"] if quick else 512),
        "sentences": args.sentences or (_QUICK["sentences"] if quick else None),
        "flow_tasks": [name.strip() for name in args.flow_tasks.split(",") if name.strip()],
        "flow_sentences": args.flow_sentences or (_QUICK["flow_sentences"] if quick else None),
        "flow_reference": not args.no_flow_reference,
        "flow_encode_all": not quick,
        "variant_tasks": (
            [name.strip() for name in args.variant_tasks.split(",") if name.strip()]
            if args.variant_tasks
            else (_QUICK["variant_tasks"] if quick else None)
        ),
        "sizes": [int(size) for size in sizes.split(",") if size.strip()],
        "gpu_batch_sizes": [int(size) for size in args.gpu_batch_sizes.split(",")] if args.gpu_batch_sizes else None,
    }


def _data_root(path: Path | None) -> Path:
    if path is not None:
        return path
    value = os.environ.get("FLOW_PLUGIN_SENTEVAL_DATA")
    if value:
        return Path(value)
    shared = os.environ.get("FLOW_PLUGIN_SHARED_DATA")
    if shared:
        return Path(shared) / "senteval"
    return Path(__file__).resolve().parents[2] / "shared" / "data" / "senteval"


# =========================================================================== the machine
def _load_average() -> list[float] | None:
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
        "load_average_start": _load_average(),
    }


# =========================================================================== workers
class _Runner:
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
        child_env = {**os.environ, **_WORKER_ENV, **(env or {})}
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


def _worker_main(args: argparse.Namespace) -> int:
    from flow_plugin._io import atomic_write_json

    params = json.loads(Path(args.worker_input).read_text(encoding="utf-8"))
    from benchmarks.gpu import job_gpu_encode, job_gpu_flow

    jobs = {
        "gpu-encode": job_gpu_encode,
        "gpu-flow": job_gpu_flow,
        "encode": _job_encode,
        "encode-memory": _job_encode_memory,
        "flow": _job_flow,
        "variants": _job_variants,
        "scaling": _job_scaling,
    }
    if params.get("threads"):
        import torch

        torch.set_num_threads(int(params["threads"]))
    result = jobs[args.worker](params)
    result["peak_rss_mib"] = _peak_rss_mib()
    atomic_write_json(args.worker_output, result)
    return 0


# --------------------------------------------------------------------------- memory probes
def _peak_rss_mib() -> float:
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / 1024 if sys.platform != "darwin" else peak / 2**20, 1)


def _status_mib(field: str) -> float | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return round(int(line.split()[1]) / 1024, 1)
    except (OSError, ValueError, IndexError):
        pass
    return None


def _reset_peak() -> bool:
    """Reset this process's peak RSS (Linux >= 4.0); False where not possible."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


class _Phase:
    """Wall and CPU seconds, RSS before/after and the peak RSS of one phase of a worker."""

    def __init__(self) -> None:
        self.result: dict[str, Any] = {}

    def __enter__(self) -> _Phase:
        import gc

        gc.collect()
        self._peak_ok = _reset_peak()
        self.result["rss_before_mib"] = _status_mib("VmRSS")
        self._cpu = time.process_time()
        self._wall = time.perf_counter()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.result["seconds"] = round(time.perf_counter() - self._wall, 4)
        self.result["cpu_seconds"] = round(time.process_time() - self._cpu, 4)
        self.result["rss_after_mib"] = _status_mib("VmRSS")
        self.result["peak_rss_mib"] = _status_mib("VmHWM") if self._peak_ok else None


# --------------------------------------------------------------------------- sentences
def _sentence_set(root: str, name: str, limit: int | None) -> list[str]:
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


def _model_location(spec: str) -> tuple[str, str]:
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


def _ratio_summary(timings: dict[str, Any], slow: str, fast: str) -> dict[str, Any]:
    """Speed-up of ``fast`` over ``slow``: per repeat (total over chunks) and per chunk (noise)."""
    wall = timings["wall"]
    per_repeat = [sum(s) / sum(f) for s, f in zip(wall[slow], wall[fast]) if sum(f) > 0]
    per_chunk = sorted(s / f for rs, rf in zip(wall[slow], wall[fast]) for s, f in zip(rs, rf) if f > 0)
    cpu = timings["cpu"]
    cpu_ratio = [sum(s) / sum(f) for s, f in zip(cpu[slow], cpu[fast]) if sum(f) > 0]
    return {
        "ratio": round(statistics.median(per_repeat), 3),
        "ratio_per_repeat": [round(value, 3) for value in per_repeat],
        "chunk_ratio_p10": round(_quantile(per_chunk, 0.1), 3),
        "chunk_ratio_median": round(_quantile(per_chunk, 0.5), 3),
        "chunk_ratio_p90": round(_quantile(per_chunk, 0.9), 3),
        "cpu_time_ratio": round(statistics.median(cpu_ratio), 3) if cpu_ratio else None,
    }


def _quantile(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _throughput(timings: dict[str, Any], name: str) -> dict[str, Any]:
    totals = [sum(row) for row in timings["wall"][name]]
    cpu_totals = [sum(row) for row in timings["cpu"][name]]
    n = timings["n_sentences"]
    return {
        "sentences_per_second": round(n / statistics.median(totals), 2),
        "best_sentences_per_second": round(n / min(totals), 2),
        "seconds_per_repeat": [round(total, 3) for total in totals],
        "cpu_seconds_per_repeat": [round(total, 3) for total in cpu_totals],
    }


# --------------------------------------------------------------------------- FLOPs
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


# --------------------------------------------------------------------------- job: encode
def _job_encode(p: dict[str, Any]) -> dict[str, Any]:
    import numpy as np
    import torch
    from sentence_transformers import SentenceTransformer

    from flow_plugin.encoding.backbone import Backbone
    from flow_plugin.evaluation.sts import paired_cosine, spearman
    from flow_plugin.data.senteval import load_eval_subsets

    location, pooling = _model_location(p["model"])
    devices = ["cpu"] if p["device"] == "cpu" else [p["device"]]
    if torch.cuda.is_available() and not any(device.startswith("cuda") for device in devices):
        devices.append("cuda")
    result: dict[str, Any] = {"model": p["model"], "location": location, "pooling": pooling, "devices": {}}
    if not any(device.startswith("cuda") for device in devices):
        result["gpu"] = "no GPU available"
    gold = load_eval_subsets(p["data"], "STSBenchmark")[0]
    for device in devices:
        sync = device_sync(device)
        if device.startswith("cuda"):
            torch.cuda.reset_peak_memory_stats(device)
        fast = Backbone(location, pooling=pooling, max_seq_length=p["max_length"], batch_size=p["batch_size"],
                        device=device, precision="auto", show_progress_bar=False).load()
        reference = SentenceTransformer(location, device=device)
        reference.max_seq_length = p["max_length"]
        contenders: dict[str, Callable[[list[str]], Any]] = {
            "sentence-transformers float32": lambda part: reference.encode(
                part, batch_size=p["batch_size"], convert_to_numpy=True, show_progress_bar=False),
            f"flow-plugin {fast.precision} (auto)": lambda part: fast.encode(part),
        }
        slow_name, fast_name = list(contenders)
        ours32 = None
        if fast.precision != "float32":
            ours32 = Backbone(location, pooling=pooling, max_seq_length=p["max_length"], batch_size=p["batch_size"],
                              device=device, precision="float32", show_progress_bar=False).load()
            contenders["flow-plugin float32"] = lambda part: ours32.encode(part)
        warm = _sentence_set(p["data"], "stsb-test", 2 * p["batch_size"])
        for encode in contenders.values():
            encode(warm)
        squares = {dtype: square_peak_size(dtype, device) for dtype in ("bf16", "float32")}

        def measure_peaks() -> dict[str, dict[str, Any]]:
            return {dtype: matmul_peak(dtype, device, _peak_shapes(fast.config, p["batch_size"], square))
                    for dtype, square in squares.items()}

        peaks_before = measure_peaks()
        per_set: dict[str, Any] = {}
        for set_name in p["sets"]:
            sentences = _sentence_set(p["data"], set_name, p.get("sentences"))
            names = list(contenders) if set_name == "stsb-test" else [slow_name, fast_name]
            repeats = p["repeats"] if set_name == "stsb-test" else p["repeats_sts7"]
            timings, outputs = interleaved_timing({name: contenders[name] for name in names}, sentences,
                                                  chunk=p["chunk"], repeats=repeats, synchronize=sync)
            entry: dict[str, Any] = {
                "n_sentences": len(sentences),
                "timings": timings,
                "throughput": {name: _throughput(timings, name) for name in names},
                "speedup_vs_sentence_transformers": _ratio_summary(timings, slow_name, fast_name),
            }
            if "flow-plugin float32" in names:
                entry["speedup_float32_ours_vs_sentence_transformers"] = _ratio_summary(timings, slow_name, "flow-plugin float32")
            lengths = [len(ids) for ids in fast.tokenize(sentences)]
            flops = forward_flops(fast.config, lengths, p["batch_size"], timings["chunk"])
            entry["flops"] = flops
            entry["achieved_gflops"] = {
                name: {
                    "useful": round(flops["useful_flops"] / statistics.median(sum(r) for r in timings["wall"][name]) / 1e9, 1),
                    "executed": round(flops["executed_flops"] / statistics.median(sum(r) for r in timings["wall"][name]) / 1e9, 1),
                }
                for name in names
            }
            if set_name == "stsb-test" and p.get("sentences") in (None, 0):
                n_pairs = len(gold)
                quality = {}
                for name in names:
                    embeddings = np.concatenate([np.asarray(part, dtype=np.float32) for part in outputs[name]])
                    cosines = paired_cosine(embeddings[:n_pairs], embeddings[n_pairs:])
                    quality[name] = round(spearman(cosines, gold.scores), 6)
                entry["stsb_test_spearman"] = quality
                entry["spearman_fast_minus_sentence_transformers"] = round(quality[fast_name] - quality[slow_name], 6)
                if "flow-plugin float32" in quality:
                    entry["spearman_fast_minus_ours_float32"] = round(quality[fast_name] - quality["flow-plugin float32"], 6)
            elif set_name == "stsb-test":
                embeddings = {name: np.concatenate([np.asarray(part, dtype=np.float32) for part in outputs[name]])
                              for name in names}
                entry["min_cosine_fast_vs_sentence_transformers"] = round(float(
                    paired_cosine(embeddings[fast_name], embeddings[slow_name]).min()), 6)
            per_set[set_name] = entry
        peaks_after = measure_peaks()
        peaks = {dtype: max(peaks_before[dtype]["best_gflops"], peaks_after[dtype]["best_gflops"]) for dtype in peaks_before}
        # the same peak measured before and after the timings: how much the load moved it
        peaks_low = {dtype: min(peaks_before[dtype]["best_gflops"], peaks_after[dtype]["best_gflops"]) for dtype in peaks_before}
        for entry in per_set.values():
            fast_gflops = entry["achieved_gflops"][fast_name]["useful"]
            slow_gflops = entry["achieved_gflops"][slow_name]["useful"]
            entry["efficiency"] = {
                "fast_fraction_of_bf16_peak": round(fast_gflops / peaks["bf16"], 3) if fast.precision == "bf16" else None,
                "fast_fraction_of_lower_bf16_peak_measurement": (
                    round(fast_gflops / peaks_low["bf16"], 3) if fast.precision == "bf16" else None),
                "fast_fraction_of_own_dtype_peak": round(
                    fast_gflops / peaks["bf16" if fast.precision == "bf16" else "float32"], 3),
                "fast_executed_fraction_of_bf16_peak": round(entry["achieved_gflops"][fast_name]["executed"] / peaks["bf16"], 3),
                "sentence_transformers_fraction_of_float32_peak": round(slow_gflops / peaks["float32"], 3),
            }
        result["devices"][device] = {
            "threads": torch.get_num_threads(),
            "precision_auto": fast.precision,
            "contenders": {"slow": slow_name, "fast": fast_name},
            "peak_gflops": peaks,
            "peak_gflops_lower_measurement": peaks_low,
            "peak_square_side": squares,
            "peak_detail": {"before": peaks_before, "after": peaks_after},
            "sets": per_set,
        }
        if device.startswith("cuda"):
            result["devices"][device]["gpu_peak_memory_mib"] = round(torch.cuda.max_memory_allocated(device) / 2**20, 1)
        del fast, reference, ours32
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
    return result


def _peak_shapes(config: Any, batch_size: int, square: int = 2048) -> list[tuple[int, int, int]]:
    d = int(config.hidden_size)
    f = int(getattr(config, "intermediate_size", 4 * d))
    tokens = batch_size * 32
    return [(square, square, square), (tokens, d, f), (tokens, f, d)]


# --------------------------------------------------------------------------- job: encode memory
def _job_encode_memory(p: dict[str, Any]) -> dict[str, Any]:
    """Peak RSS of loading one contender and encoding the STS-B test set once."""
    location, pooling = _model_location(p["model"])
    sentences = _sentence_set(p["data"], "stsb-test", p.get("sentences"))
    with _Phase() as load:
        if p["contender"] == "sentence-transformers":
            from sentence_transformers import SentenceTransformer

            model = SentenceTransformer(location, device=p["device"])
            model.max_seq_length = p["max_length"]

            def encode(part: list[str]) -> Any:
                return model.encode(part, batch_size=p["batch_size"], convert_to_numpy=True, show_progress_bar=False)
        else:
            from flow_plugin.encoding.backbone import Backbone

            backbone = Backbone(location, pooling=pooling, max_seq_length=p["max_length"], batch_size=p["batch_size"],
                                device=p["device"], precision="auto", show_progress_bar=False).load()

            def encode(part: list[str]) -> Any:
                return backbone.encode(part)
    with _Phase() as encoding:
        encode(sentences)
    return {"contender": p["contender"], "model": p["model"], "n_sentences": len(sentences),
            "load": load.result, "encode": encoding.result}


# --------------------------------------------------------------------------- job: flow
def _job_flow(p: dict[str, Any]) -> dict[str, Any]:
    import numpy as np

    from flow_plugin.encoding.cache import CachedEncoder
    from flow_plugin.calibration.flow import FlowCalibrator
    from flow_plugin.encoding.backbone import Backbone
    from flow_plugin.data.senteval import task_sentences

    location, pooling = _model_location(p["model"])
    sentences = task_sentences(p["data"], p["task"])
    if p.get("sentences"):
        sentences = sentences[: p["sentences"]]
    backbone = Backbone(location, pooling=pooling, max_seq_length=p["max_length"], batch_size=p["batch_size"],
                        device=p["device"], precision="auto", show_progress_bar=False).load()
    backbone.encode(sentences[: 2 * p["batch_size"]])  # warm-up, not timed
    result: dict[str, Any] = {"task": p["task"], "model": p["model"], "n_sentences": len(sentences),
                              "n_unique_sentences": len(set(sentences)), "precision": backbone.precision}
    encoder = CachedEncoder(backbone)
    with _Phase() as encoding:
        embeddings = encoder.encode(sentences)
    result["encode_cached"] = encoding.result  # the real path: each unique sentence once
    if p.get("encode_all"):
        with _Phase() as encoding_all:
            backbone.encode(sentences)
        result["encode_every_sentence"] = encoding_all.result
    result["embeddings_mib"] = round(embeddings.nbytes / 2**20, 1)
    calibrator = FlowCalibrator(show_progress_bar=False, device=p["device"])
    with _Phase() as fitting:
        calibrator.fit(embeddings)
    result["fit"] = fitting.result | {
        "n_steps": calibrator.n_steps_,
        "ms_per_step_including_likelihood_passes": round(1000 * fitting.result["seconds"] / calibrator.n_steps_, 3),
        "initial_log_likelihood": calibrator.initial_log_likelihood_,
        "fit_log_likelihood": calibrator.fit_log_likelihood_,
        "fit_bits_per_dim": calibrator.fit_bits_per_dim_,
        "final_loss_mean_last_10_steps": float(np.mean(calibrator.loss_curve_[-10:])),
    }
    result["fit_over_encode"] = round(fitting.result["seconds"] / encoding.result["seconds"], 4)
    if p.get("encode_all"):
        result["fit_over_encode_every_sentence"] = round(
            fitting.result["seconds"] / result["encode_every_sentence"]["seconds"], 4)
    if p.get("reference"):
        with _Phase() as reference_phase:
            reference = reference_flow_fit(embeddings, device=p["device"])
        result["reference_fit"] = reference_phase.result | reference
        result["fit_speedup_vs_reference"] = round(reference_phase.result["seconds"] / fitting.result["seconds"], 2)
        result["log_likelihood_minus_reference"] = calibrator.fit_log_likelihood_ - reference["fit_log_likelihood"]
    return result


def reference_flow_fit(X: Any, *, seed: int = 1234, device: str = "cpu") -> dict[str, Any]:
    """The flow fit as implemented before issue #6 (the same defaults, the same nflows
    modules, plain autograd, ``torch.optim.AdamW``, per-tensor clipping), kept only to
    compare time and log-likelihood. Returns its fit and initial mean log-likelihoods."""
    import numpy as np
    import torch
    from nflows.distributions.normal import StandardNormal
    from nflows.flows.base import Flow
    from nflows.transforms.base import CompositeTransform, MultiscaleCompositeTransform
    from nflows.transforms.coupling import AdditiveCouplingTransform
    from nflows.transforms.normalization import ActNorm
    from nflows.transforms.permutations import ReversePermutation
    from torch import nn

    class ShiftNetwork(nn.Module):
        def __init__(self, in_features: int, out_features: int, hidden: int) -> None:
            super().__init__()
            self.hidden1 = nn.Linear(in_features, hidden, bias=False)
            self.norm1 = ActNorm(hidden)
            self.hidden2 = nn.Linear(hidden, hidden, bias=False)
            self.norm2 = ActNorm(hidden)
            self.output = nn.Linear(hidden, out_features)
            nn.init.normal_(self.hidden1.weight, std=0.05)
            nn.init.normal_(self.hidden2.weight, std=0.05)
            nn.init.zeros_(self.output.weight)
            nn.init.zeros_(self.output.bias)

        def forward(self, inputs: torch.Tensor, context: Any = None) -> torch.Tensor:
            hidden = torch.relu(self.norm1(self.hidden1(inputs))[0])
            hidden = torch.relu(self.norm2(self.hidden2(hidden))[0])
            return self.output(hidden)

    n_levels, depth, width, epochs, batch_size = 3, 3, 32, 1.0, 64
    X = np.asarray(X, dtype=np.float32)
    n_samples, n_features = X.shape
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        multiscale = MultiscaleCompositeTransform(n_levels, split_dim=1)
        features = n_features
        for _ in range(n_levels):
            steps = []
            for _ in range(depth):
                mask = torch.zeros(features)
                mask[features // 2 :] = 1
                steps.append(CompositeTransform([
                    ActNorm(features), ReversePermutation(features),
                    AdditiveCouplingTransform(mask, lambda n_in, n_out: ShiftNetwork(n_in, n_out, width)),
                ]))
            shape = multiscale.add_transform(CompositeTransform(steps), (features,))
            if shape is not None:
                features = shape[0]
    flow = Flow(multiscale, StandardNormal([n_features])).to(device)
    data = torch.from_numpy(X).to(device)
    generator = torch.Generator().manual_seed(seed)

    def mean_log_likelihood() -> float:
        flow.eval()
        with torch.inference_mode():
            total = sum(flow.log_prob(data[start : start + 8192]).double().sum().item()
                        for start in range(0, n_samples, 8192))
        flow.train()
        return total / n_samples

    init_rows = torch.randperm(n_samples, generator=generator)[:1024].to(device)
    flow.train()
    with torch.no_grad():
        flow.log_prob(data[init_rows])
    initial = mean_log_likelihood()
    options = {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-6, "weight_decay": 0.01}
    try:
        optimizer = torch.optim.AdamW(flow.parameters(), fused=True, **options)
    except (RuntimeError, TypeError, ValueError):
        optimizer = torch.optim.AdamW(flow.parameters(), **options)
    n_steps = max(1, math.ceil(epochs * n_samples / batch_size))
    order, position = torch.randperm(n_samples, generator=generator), 0
    for _ in range(n_steps):
        if position >= n_samples:
            order, position = torch.randperm(n_samples, generator=generator), 0
        rows = order[position : position + batch_size].to(device)
        position += batch_size
        loss = -flow.log_prob(data[rows]).mean()
        if not torch.isfinite(loss):
            raise RuntimeError("reference flow fit diverged")
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(flow.parameters(), 1.0)
        optimizer.step()
        loss.item()
    return {"n_steps": n_steps, "initial_log_likelihood": initial, "fit_log_likelihood": mean_log_likelihood()}


# --------------------------------------------------------------------------- job: variants
def _job_variants(p: dict[str, Any]) -> dict[str, Any]:
    from flow_plugin.integrations.mteb.evaluate import evaluate_models
    from flow_plugin.encoding.options import EncoderOptions

    with tempfile.TemporaryDirectory(prefix="flow-plugin-perf-variants-") as folder, _Phase() as phase:
        evaluations = evaluate_models(p["models"], Path(p["data"]), p.get("tasks"), Path(folder),
                                      options=EncoderOptions(batch_size=p["batch_size"]), command="benchmarks/perf.py")
    scores = {evaluation.model: {run.task: round(run.score, 6) for run in evaluation.runs} for evaluation in evaluations}
    return {"models": p["models"], "tasks": p.get("tasks"), "evaluate": phase.result, "scores": scores}


# --------------------------------------------------------------------------- job: scaling
def _scaling_sentences(root: str, n: int) -> list[str]:
    from flow_plugin.data.senteval import SENTEVAL_TASKS, task_sentences

    pool: dict[str, None] = {}
    for task in SENTEVAL_TASKS:
        for text in task_sentences(root, task):
            pool.setdefault(text, None)
    base = list(pool)
    return [base[i % len(base)] + (f" ({i // len(base)})" if i >= len(base) else "") for i in range(n)]


def _job_scaling(p: dict[str, Any]) -> dict[str, Any]:
    from flow_plugin.calibration.flow import FlowCalibrator
    from flow_plugin.encoding.backbone import Backbone

    location, pooling = _model_location(p["model"])
    sentences = _scaling_sentences(p["data"], p["n"])
    backbone = Backbone(location, pooling=pooling, max_seq_length=p["max_length"], batch_size=p["batch_size"],
                        device=p["device"], precision="auto", show_progress_bar=False).load()
    backbone.encode(sentences[: 2 * p["batch_size"]])  # warm-up
    with _Phase() as encoding:
        embeddings = backbone.encode(sentences)
    calibrator = FlowCalibrator(show_progress_bar=False, device=p["device"])
    with _Phase() as fitting:
        calibrator.fit(embeddings)
    n_tokens = int(backbone._token_arrays(sentences)[0].sum())  # untimed: for per-token costs
    return {
        "n_sentences": len(sentences),
        "n_tokens": n_tokens,
        "n_unique": len(set(sentences)),
        "embeddings_mib": round(embeddings.nbytes / 2**20, 2),
        "encode": encoding.result,
        "fit": fitting.result | {"n_steps": calibrator.n_steps_, "fit_log_likelihood": calibrator.fit_log_likelihood_},
    }


# =========================================================================== sections
def _common(plan: dict[str, Any]) -> dict[str, Any]:
    return {
        "data": str(plan["data"]),
        "device": plan["device"],
        "threads": plan["threads"],
        "batch_size": plan["batch_size"],
        "max_length": plan["max_length"],
    }


def _section_encode(runner: _Runner, plan: dict[str, Any]) -> dict[str, Any]:
    section: dict[str, Any] = {}
    for model in plan["models"]:
        _say(f"encode: {model} (interleaved timing, {plan['repeats']} repeat(s) on STS-B test)")
        params = _common(plan) | {
            "model": model,
            "sets": plan["sets"],
            "repeats": plan["repeats"],
            "repeats_sts7": plan["repeats_sts7"],
            "chunk": plan["chunk"],
            "sentences": plan["sentences"],
        }
        entry = runner("encode", params)
        memory = {}
        for contender in ("sentence-transformers", "flow-plugin"):
            _say(f"encode memory: {model}, {contender}")
            memory[contender] = runner("encode-memory", _common(plan) | {
                "model": model, "contender": contender, "sentences": plan["sentences"]})
        entry["memory"] = memory
        section[model] = entry
        _say(f"encode: {model} done: " + _encode_headline(entry))
    return section


def _section_flow(runner: _Runner, plan: dict[str, Any]) -> dict[str, Any]:
    section: dict[str, Any] = {}
    for task in plan["flow_tasks"]:
        _say(f"flow: {plan['main_model']} on {task} (all splits){' + reference fit' if plan['flow_reference'] else ''}")
        section[task] = runner("flow", _common(plan) | {
            "model": plan["main_model"],
            "task": task,
            "sentences": plan["flow_sentences"],
            "reference": plan["flow_reference"],
            "encode_all": plan["flow_encode_all"],
        })
        entry = section[task]
        _say(f"flow: {task}: fit {entry['fit']['seconds']:.2f}s / encode {entry['encode_cached']['seconds']:.2f}s "
             f"= {entry['fit_over_encode']:.3f}")
    return section


def _section_variants(runner: _Runner, plan: dict[str, Any]) -> dict[str, Any]:
    from flow_plugin.calibration import CALIBRATOR_METHODS
    from flow_plugin.catalog.registry import get_backbone

    spec = get_backbone(plan["main_model"])
    six = [spec.model_name(name) for name in CALIBRATOR_METHODS]  # the six methods, not the flow variants
    runs = {"raw": [spec.model_name("raw")], "flow": [spec.model_name("flow")], "all six": six}
    section: dict[str, Any] = {"model": plan["main_model"], "tasks": plan["variant_tasks"] or "all seven", "runs": {}}
    for label, models in runs.items():
        _say(f"variants: {label} ({len(models)} model(s)) in a fresh process")
        section["runs"][label] = runner("variants", _common(plan) | {"models": models, "tasks": plan["variant_tasks"]})
    runs_out = section["runs"]
    six_seconds = runs_out["all six"]["evaluate"]["seconds"]
    section["six_over_raw"] = round(six_seconds / runs_out["raw"]["evaluate"]["seconds"], 3)
    section["six_over_flow"] = round(six_seconds / runs_out["flow"]["evaluate"]["seconds"], 3)
    section["six_over_raw_process"] = round(runs_out["all six"]["process_seconds"] / runs_out["raw"]["process_seconds"], 3)
    section["six_over_flow_process"] = round(runs_out["all six"]["process_seconds"] / runs_out["flow"]["process_seconds"], 3)
    section["peak_rss_mib"] = {label: run["peak_rss_mib"] for label, run in runs_out.items()}
    _say(f"variants: six/raw {section['six_over_raw']}, six/flow {section['six_over_flow']}")
    return section


def _section_scaling(runner: _Runner, plan: dict[str, Any]) -> dict[str, Any]:
    rows = []
    for n in plan["sizes"]:
        _say(f"scaling: {n} sentences ({plan['main_model']}: encode, then flow fit) in a fresh process")
        rows.append(runner("scaling", _common(plan) | {"model": plan["main_model"], "n": n}))
    section: dict[str, Any] = {"model": plan["main_model"], "rows": rows}
    for row in rows:
        n = row["n_sentences"]
        encode, fit = row["encode"], row["fit"]
        row["encode_ms_per_sentence"] = round(1000 * encode["seconds"] / n, 4)
        row["encode_us_per_token"] = round(1e6 * encode["seconds"] / row["n_tokens"], 3) if row.get("n_tokens") else None
        row["fit_ms_per_sentence"] = round(1000 * fit["seconds"] / n, 4)
        row["encode_rss_growth_mib"] = _difference(encode.get("peak_rss_mib"), encode.get("rss_before_mib"))
        row["fit_rss_growth_mib"] = _difference(fit.get("peak_rss_mib"), fit.get("rss_before_mib"))
    if len(rows) >= 2:
        first, last = rows[0], rows[-1]
        factor = last["n_sentences"] / first["n_sentences"]
        section["growth"] = {
            "size_factor": factor,
            "encode_time_factor": round(last["encode"]["seconds"] / first["encode"]["seconds"], 2),
            "fit_time_factor": round(last["fit"]["seconds"] / first["fit"]["seconds"], 2),
            "encode_time_per_sentence_last_over_first": round(
                last["encode_ms_per_sentence"] / first["encode_ms_per_sentence"], 3),
            "encode_time_per_token_last_over_first": (
                round(last["encode_us_per_token"] / first["encode_us_per_token"], 3)
                if last.get("encode_us_per_token") and first.get("encode_us_per_token") else None),
            "fit_time_per_sentence_last_over_first": round(last["fit_ms_per_sentence"] / first["fit_ms_per_sentence"], 3),
        }
    return section


def _difference(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round(a - b, 1)


def _memory_summary(sections: dict[str, Any]) -> dict[str, Any]:
    """Peak RSS (MiB) of every worker process, by section."""
    summary: dict[str, Any] = {}
    for model, entry in sections.get("encode", {}).items():
        summary[f"encode {model} (timing process, all contenders loaded)"] = entry.get("peak_rss_mib")
        for contender, memory in entry.get("memory", {}).items():
            summary[f"encode {model} {contender} alone (STS-B test)"] = memory.get("peak_rss_mib")
    for task, entry in sections.get("flow", {}).items():
        summary[f"flow {task} (encode + fit{' + reference fit' if 'reference_fit' in entry else ''})"] = entry.get("peak_rss_mib")
    for label, run in sections.get("variants", {}).get("runs", {}).items():
        summary[f"variants: {label}"] = run.get("peak_rss_mib")
    for row in sections.get("scaling", {}).get("rows", []):
        summary[f"scaling {row['n_sentences']} sentences"] = row.get("peak_rss_mib")
    return summary


# =========================================================================== the table
def _encode_headline(entry: dict[str, Any]) -> str:
    parts = []
    for device, data in entry["devices"].items():
        for set_name, values in data["sets"].items():
            ratio = values["speedup_vs_sentence_transformers"]
            parts.append(f"{device} {set_name} x{ratio['ratio']:.2f}")
    return ", ".join(parts)


def _mark(ok: bool | None) -> str:
    return "n/a" if ok is None else ("met" if ok else "NOT met")


def format_report(report: dict[str, Any]) -> str:
    """The human-readable table of a perf report."""
    lines: list[str] = []
    machine = report["machine"]
    lines.append("=" * 100)
    lines.append(f"flow-plugin perf  ({'QUICK: functional check, not a benchmark' if report.get('quick') else 'full run'})")
    lines.append(f"machine: {machine['cpu_model']}; {machine['logical_cores']} logical / {machine['physical_cores']} physical cores; "
                 f"torch threads {machine['torch_threads']}; flags {','.join(machine['cpu_flags'])}")
    lines.append(f"torch {machine['torch']}, transformers {machine['transformers']}, sentence-transformers "
                 f"{machine['sentence_transformers']}; precision 'auto' on CPU = {machine['auto_precision_cpu']}; GPU: {machine['gpu']}")
    lines.append(f"load average at start {machine.get('load_average_start')}, at end {machine.get('load_average_end')} "
                 "(other processes compete for the cores when these exceed 0; ratios below were measured interleaved)")
    sections = report["sections"]
    encode = sections.get("encode")
    if encode:
        lines.append("-" * 100)
        lines.append("1. ENCODING THROUGHPUT (sentences/s; ours = Backbone precision auto vs SentenceTransformer.encode float32)")
        lines.append(f"   {'model':<12} {'device':<6} {'set':<10} {'ST fp32/s':>10} {'ours/s':>9} {'our fp32/s':>10} "
                     f"{'ratio':>6} {'noise p10..p90':>15} {'target':>7} {'':>8}")
        for model, entry in encode.items():
            target = TARGETS["encode_ratio_min"].get(model)
            for device, data in entry["devices"].items():
                slow, fast = data["contenders"]["slow"], data["contenders"]["fast"]
                for set_name, values in data["sets"].items():
                    thr = values["throughput"]
                    ratio = values["speedup_vs_sentence_transformers"]
                    ours32 = thr.get("flow-plugin float32", {}).get("sentences_per_second")
                    ok = None if target is None else ratio["ratio"] >= target
                    lines.append(
                        f"   {model:<12} {device:<6} {set_name:<10} {thr[slow]['sentences_per_second']:>10.1f} "
                        f"{thr[fast]['sentences_per_second']:>9.1f} {ours32 if ours32 is not None else '-':>10} "
                        f"{ratio['ratio']:>6.2f} {ratio['chunk_ratio_p10']:>7.2f}..{ratio['chunk_ratio_p90']:<6.2f} "
                        f"{('>=' + str(target)) if target else '-':>7} {_mark(ok):>8}")
            if "gpu" in entry:
                lines.append(f"   {model:<12} cuda   {entry['gpu']}")
        lines.append("   quality, STS-B test Spearman of raw-embedding cosines (x100 points):")
        for model, entry in encode.items():
            for device, data in entry["devices"].items():
                values = data["sets"].get("stsb-test", {})
                if "stsb_test_spearman" in values:
                    quality = values["stsb_test_spearman"]
                    diff = values["spearman_fast_minus_sentence_transformers"]
                    ok = abs(diff) <= TARGETS["encode_quality_max_abs_diff"]
                    text = ", ".join(f"{name} {100 * value:.3f}" for name, value in quality.items())
                    lines.append(f"   {model:<12} {device:<6} {text}; fast - ST = {100 * diff:+.3f} points "
                                 f"(target |diff| <= 0.05): {_mark(ok)}")
                elif "min_cosine_fast_vs_sentence_transformers" in values:
                    lines.append(f"   {model:<12} {device:<6} (subset: no Spearman) min cosine fast vs ST = "
                                 f"{values['min_cosine_fast_vs_sentence_transformers']}")
        lines.append("-" * 100)
        lines.append("2. HARDWARE EFFICIENCY (matmul FLOPs from real token counts / wall time of encode(), vs dense matmul peak "
                     "timed in the same process)")
        for model, entry in encode.items():
            for device, data in entry["devices"].items():
                peaks = data["peak_gflops"]
                for set_name, values in data["sets"].items():
                    eff = values["efficiency"]
                    fast = data["contenders"]["fast"]
                    achieved = values["achieved_gflops"][fast]
                    padded = values["flops"]["padded_tokens"] / max(values["flops"]["tokens"], 1) - 1
                    frac = eff["fast_fraction_of_bf16_peak"]
                    ok = None if frac is None else frac >= TARGETS["bf16_peak_fraction_min"]
                    low = data.get("peak_gflops_lower_measurement", peaks)
                    frac_low = eff.get("fast_fraction_of_lower_bf16_peak_measurement")
                    lines.append(
                        f"   {model:<12} {device:<6} {set_name:<10} ours {achieved['useful']:.0f} GFLOP/s useful "
                        f"({achieved['executed']:.0f} executed, padding +{100 * padded:.1f}% tokens); ST "
                        f"{values['achieved_gflops'][data['contenders']['slow']]['useful']:.0f}")
                    lines.append(
                        f"   {'':<30} peak bf16 {peaks['bf16']:.0f} (other measurement {low['bf16']:.0f}), fp32 "
                        f"{peaks['float32']:.0f} GFLOP/s; ours/bf16 peak {'-' if frac is None else f'{100 * frac:.0f}%'}"
                        f"{'' if frac_low is None else f' ({100 * frac_low:.0f}% of the other)'} (target >= 40%: "
                        f"{_mark(ok)}); ST/fp32 peak {100 * eff['sentence_transformers_fraction_of_float32_peak']:.0f}%")
    flow = sections.get("flow")
    if flow:
        lines.append("-" * 100)
        lines.append("3. FLOW FITTING vs ENCODING, same task corpus (all splits), defaults 3x3 levels, w32, 1 epoch, batch 64")
        for task, entry in flow.items():
            fit, enc = entry["fit"], entry["encode_cached"]
            ok = entry["fit_over_encode"] <= TARGETS["fit_over_encode_max"]
            line = (f"   {task:<16} {entry['n_sentences']} sentences ({entry['n_unique_sentences']} unique): encode "
                    f"{enc['seconds']:.2f}s (cache: unique only), fit {fit['seconds']:.2f}s ({fit['n_steps']} steps, "
                    f"{fit['ms_per_step_including_likelihood_passes']:.1f} ms/step incl. likelihood passes) -> fit/encode "
                    f"{entry['fit_over_encode']:.3f} (target <= 0.25: {_mark(ok)})")
            lines.append(line)
            if "encode_every_sentence" in entry:
                lines.append(f"   {'':<16} encoding every sentence (no cache) {entry['encode_every_sentence']['seconds']:.2f}s "
                             f"-> fit/encode {entry['fit_over_encode_every_sentence']:.3f}")
            ll = f"   {'':<16} mean log-likelihood {fit['fit_log_likelihood']:.3f} (start {fit['initial_log_likelihood']:.3f})"
            if "reference_fit" in entry:
                reference = entry["reference_fit"]
                ll += (f"; pre-optimisation implementation {reference['fit_log_likelihood']:.3f} in "
                       f"{reference['seconds']:.2f}s (speed-up x{entry['fit_speedup_vs_reference']:.1f}, "
                       f"LL difference {entry['log_likelihood_minus_reference']:+.4f})")
            lines.append(ll)
    variants = sections.get("variants")
    if variants:
        lines.append("-" * 100)
        lines.append(f"4. SIX VARIANTS vs ONE ({variants['model']}, tasks: {variants['tasks']}; fresh processes, empty cache)")
        for label, run in variants["runs"].items():
            lines.append(f"   {label:<8} evaluate {run['evaluate']['seconds']:.1f}s (process {run['process_seconds']:.1f}s), "
                         f"peak RSS {run['peak_rss_mib']:.0f} MiB")
        ok = variants["six_over_flow"] <= TARGETS["six_over_one_max"]
        lines.append(f"   six/flow {variants['six_over_flow']:.2f} (target <= 1.3: {_mark(ok)}); six/raw "
                     f"{variants['six_over_raw']:.2f} (raw encodes only test sentences; the calibrated variants also "
                     "encode the train/dev splits they fit on)")
    scaling = sections.get("scaling")
    if scaling:
        lines.append("-" * 100)
        lines.append(f"6. SCALING ({scaling['model']}: encode, then flow fit, one fresh process per size)")
        lines.append(f"   {'sentences':>10} {'tokens':>9} {'encode s':>9} {'ms/sent':>8} {'us/token':>8} {'fit s':>7} "
                     f"{'ms/sent':>8} {'emb MiB':>8} {'enc +RSS':>9} {'fit +RSS':>9} {'peak RSS':>9}")
        for row in scaling["rows"]:
            lines.append(f"   {row['n_sentences']:>10} {row.get('n_tokens', '-'):>9} {row['encode']['seconds']:>9.2f} "
                         f"{row['encode_ms_per_sentence']:>8.3f} {_num3(row.get('encode_us_per_token')):>8} "
                         f"{row['fit']['seconds']:>7.2f} {row['fit_ms_per_sentence']:>8.3f} {row['embeddings_mib']:>8.1f} "
                         f"{_num(row['encode_rss_growth_mib']):>9} {_num(row['fit_rss_growth_mib']):>9} {row['peak_rss_mib']:>9.0f}")
        if "growth" in scaling:
            growth = scaling["growth"]
            lines.append(f"   {growth['size_factor']:.0f}x the sentences: encode x{growth['encode_time_factor']}, fit "
                         f"x{growth['fit_time_factor']} (per-sentence cost last/first: encode "
                         f"{growth['encode_time_per_sentence_last_over_first']} (per token "
                         f"{growth.get('encode_time_per_token_last_over_first')}), fit "
                         f"{growth['fit_time_per_sentence_last_over_first']})")
            lines.append("   (the largest sizes repeat sentences with a ' (k)' suffix, so their sentences have more tokens)")
    memory = report.get("memory")
    if memory:
        lines.append("-" * 100)
        lines.append("5. PEAK RSS per worker process (MiB)")
        for label, value in memory.items():
            lines.append(f"   {label:<70} {_num(value):>8}")
    gpu = report["sections"].get("gpu")
    if gpu:
        from benchmarks.gpu import format_gpu

        lines.append("-" * 100)
        lines.append("6. " + format_gpu(gpu))
    lines.append("=" * 100)
    return "\n".join(lines)


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _num3(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


if __name__ == "__main__":
    raise SystemExit(main())
