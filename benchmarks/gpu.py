"""The GPU benchmark: ``python -m benchmarks.gpu --quick`` (and the GPU section of ``python -m benchmarks.perf``).

``python -m benchmarks.gpu --quick`` fits a short loan of a GPU (4 minutes on an H200): on random-weight stand-ins of
all-MiniLM-L6-v2's and BERT-base's architectures (:mod:`benchmarks.stand_ins`, built on the fly: no weights
travel), it times ours against ``SentenceTransformer.encode`` and runs one whole ``mteb run`` of a stand-in.
``--device cpu`` runs the same code on small inputs and the stand-ins ``tiny`` and ``minilm-l6``: a smoke check of
every path on a machine without a GPU. The report goes to ``benchmarks/results/gpu-<date>-<device>.json`` and
``.md`` (``--output-dir``).

``encode`` (one fresh worker process per stand-in)
    Sentences per second of ``SentenceTransformer.encode`` and of ours under each batch plan (length-exact,
    padded, packed; and which one ``batch_plan="auto"`` picks there), at equal precision (the device's ``auto``:
    bf16 from compute capability 8.0), same sentences (the first 6,000 unique sentences of the seven STS test
    sets), ``max_seq_length`` 64, at batch sizes 32, 128 and 512, handed over whole and in MTEB-sized chunks (as
    many sentences as one side of the STS-B test set: what MTEB passes to ``encode`` at once), interleaved. Peak
    GPU memory of each contender; STS-B test Spearman x 100 of each against ours in float32 (target: within
    0.05 points).
``flow``
    The paper's flow fitted on a stand-in's STS-B embeddings on the GPU and on the CPU, and where
    ``FlowCalibrator(device="auto")`` fits it (measured, cached).
``mteb run``
    ``mteb run -m flow_plugin/<stand-in>-flow -t SentEvalSTSBenchmark``, as typed, in a fresh process: its seconds
    and score.

Targets (benchmark targets, never test assertions): ours at least 1.5x ST at batch 32 and 1.3x at 128 on both
shapes, the same STS-B score within 0.05 points of float32.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.harness import (
    REPO_ROOT,
    WORKER_ENV,
    Runner,
    data_root,
    describe_machine,
    interleaved_timing,
    model_location,
    sentence_set,
)
from benchmarks.stand_ins import build_stand_ins, stand_in_name

#: the GPU section's targets (benchmark targets, never test assertions)
GPU_TARGETS: dict[str, Any] = {"ratio_min": {"32": 1.5, "128": 1.3}, "spearman_max_abs_diff_points": 0.05}
BATCH_SIZES = (32, 128, 512)
PLANS = ("length-exact", "padded", "packed")
#: --quick on a GPU, and the smoke check on a CPU (--device cpu)
QUICK = {"cuda": {"shapes": ["minilm-l6", "bert-base"], "sentences": 6000, "batch_sizes": list(BATCH_SIZES),
                  "pairs": None},
         "cpu": {"shapes": ["tiny", "minilm-l6"], "sentences": 96, "batch_sizes": [8, 32], "pairs": 40}}
MTEB_TASK = "SentEvalSTSBenchmark"


def _cuda_tools(device: str) -> tuple[Any, Any, Any]:
    """(synchronize, reset peak memory, peak memory MiB) for ``device``; no-ops and None off CUDA."""
    import torch

    if device.startswith("cuda"):
        return (torch.cuda.synchronize, torch.cuda.reset_peak_memory_stats,
                lambda: round(torch.cuda.max_memory_allocated() / 2**20, 1))
    return (lambda: None), (lambda: None), (lambda: None)


def _st_model(location: str, precision: str, max_length: int, device: str) -> Any:
    import torch
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(location, device=device)
    model.max_seq_length = max_length
    if precision != "float32":
        model = model.to({"fp16": torch.float16, "bf16": torch.bfloat16}[precision])
    return model


def _stsb_pairs(data: str, pairs: int | None) -> tuple[Any, list[str], int]:
    """(gold scores, the STS-B test sentences: first sides then second sides, how many pairs)."""
    import numpy as np

    from flow_plugin.data.senteval import load_eval_subsets

    gold = load_eval_subsets(data, "STSBenchmark")[0]
    n = pairs or len(gold.scores)  # a CPU check takes the first few
    return np.asarray(gold.scores[:n]), list(gold.sentences1[:n]) + list(gold.sentences2[:n]), n


def _contenders(location: str, pooling: str, precision: str, p: dict[str, Any]) -> dict[str, Any]:
    """name -> ``encode(sentences, batch_size)`` of sentence-transformers and of ours under each plan."""
    from flow_plugin.encoding.backbone import Backbone

    device = p.get("device", "cuda")
    st = _st_model(location, precision, p["max_length"], device)
    contenders = {f"sentence-transformers {precision}": lambda part, b: st.encode(
        part, batch_size=b, convert_to_numpy=True, show_progress_bar=False)}
    for plan in p.get("plans") or PLANS:
        model = Backbone(location, pooling=pooling, max_seq_length=p["max_length"], device=device,
                         precision=precision, batch_plan=plan, show_progress_bar=False).load()
        contenders[f"flow-plugin {precision} {plan}"] = lambda part, b, m=model: m.encode(part, batch_size=b)
    return contenders


def _time_row(contenders: dict[str, Any], sentences: list[str], batch_size: int, chunk: int, repeats: int,
              synchronize: Any) -> dict[str, Any]:
    """One batch size and chunking: each contender's sentences per second and ratio against ST (the first)."""
    bound = {name: (lambda part, e=encode: e(part, batch_size)) for name, encode in contenders.items()}
    for encode in bound.values():  # warm-up: kernels chosen, memory pools grown
        encode(sentences[: 2 * batch_size])
    timings, _ = interleaved_timing(bound, sentences, chunk=chunk, repeats=repeats, synchronize=synchronize)
    st_name = next(iter(bound))
    return {"sentences_per_second": {name: round(len(sentences) * repeats / sum(sum(r) for r in timings["wall"][name]), 1)
                                     for name in bound},
            "ratio_vs_sentence_transformers": {
                name: round(statistics.median(sum(s) / sum(f) for s, f in zip(timings["wall"][st_name],
                                                                               timings["wall"][name])), 3)
                for name in bound if name != st_name}}


def _quality_and_memory(contenders: dict[str, Any], stsb: list[str], points: Any, device: str) -> dict[str, Any]:
    """Each contender's STS-B Spearman x 100 and peak GPU memory on the STS-B test sentences (batch 64)."""
    import numpy as np

    synchronize, reset_peak, peak_mib = _cuda_tools(device)
    quality, memory = {}, {}
    for name, encode in contenders.items():
        synchronize()
        reset_peak()
        embeddings = np.asarray(encode(stsb, 64), dtype=np.float32)
        synchronize()
        memory[name], quality[name] = peak_mib(), points(embeddings)
    return {"quality": quality, "peak_memory_mib": memory}


def job_gpu_encode(p: dict[str, Any]) -> dict[str, Any]:
    """One backbone on the device: throughput of ST and of ours under each plan, whole and in chunks, at each
    batch size; which plan ``auto`` picks; memory; quality against ours in float32."""
    import torch

    from flow_plugin.encoding.backbone import Backbone
    from flow_plugin.encoding.device import choose_precision
    from flow_plugin.evaluation.sts import paired_cosine, spearman

    device = p.get("device", "cuda")
    location, pooling = model_location(p["model"])
    sentences = sentence_set(p["data"], "sts7-test", p.get("sentences"))
    scores, stsb, n_pairs = _stsb_pairs(p["data"], p.get("pairs"))

    def points(embeddings: Any) -> float:
        return round(100 * spearman(paired_cosine(embeddings[:n_pairs], embeddings[n_pairs:]), scores), 4)

    precision = p.get("precision") or choose_precision("auto", torch.device(device)).precision
    reference = Backbone(location, pooling=pooling, max_seq_length=p["max_length"], device=device,
                         precision="float32", show_progress_bar=False)
    result: dict[str, Any] = {"model": p["model"], "device": torch.cuda.get_device_name(device) if device.startswith(
        "cuda") else device, "precision": precision, "n_sentences": len(sentences), "rows": [], "auto_plan": {}}
    float32 = points(reference.encode(stsb))
    contenders = _contenders(location, pooling, precision, p)
    chunks = {"whole": 0, "mteb": n_pairs}  # one side of STS-B's test set: what MTEB hands to encode at once
    for batch_size in p.get("batch_sizes") or BATCH_SIZES:
        auto = Backbone(location, pooling=pooling, max_seq_length=p["max_length"], device=device, precision=precision,
                        batch_size=batch_size, show_progress_bar=False)
        result["auto_plan"][str(batch_size)] = auto.batch_plan_choice.as_dict()
        for chunking, chunk in chunks.items():
            row = _time_row(contenders, sentences, batch_size, chunk, p.get("repeats", 1), _cuda_tools(device)[0])
            result["rows"].append({"batch_size": batch_size, "chunking": chunking, "chunk": chunk or len(sentences),
                                   "auto": auto.batch_plan, **row})
    result.update(_quality_and_memory(contenders, stsb, points, device))
    result["quality"]["flow-plugin float32"] = float32
    result["quality_minus_float32_points"] = {name: round(value - float32, 4) for name, value in
                                              result["quality"].items() if name != "flow-plugin float32"}
    return result


def job_gpu_flow(p: dict[str, Any]) -> dict[str, Any]:
    """The paper's flow on the same embeddings, fitted on the GPU and on the CPU, and where ``auto`` fits it."""
    from flow_plugin.calibration.flow import FlowCalibrator
    from flow_plugin.data.senteval import task_sentences
    from flow_plugin.encoding.backbone import Backbone

    gpu = p.get("device", "cuda")
    location, pooling = model_location(p["model"])
    sentences = task_sentences(p["data"], p["task"])[: p.get("sentences") or None]
    embeddings = Backbone(location, pooling=pooling, max_seq_length=p["max_length"], device=gpu,
                          show_progress_bar=False).encode(sentences)
    result: dict[str, Any] = {"model": p["model"], "task": p["task"], "n_sentences": len(sentences)}
    for label, device in (("cuda", gpu), ("cpu", "cpu")):
        synchronize = _cuda_tools(device)[0]
        FlowCalibrator(device=device, show_progress_bar=False, epochs=0.05).fit(embeddings)  # warm-up
        synchronize()
        started = time.perf_counter()
        flow = FlowCalibrator(device=device, show_progress_bar=False).fit(embeddings)
        synchronize()
        result[label] = {"device": device, "seconds": round(time.perf_counter() - started, 3), "n_steps": flow.n_steps_,
                         "fast_path": bool(flow.fast_path_used_), "fit_log_likelihood": flow.fit_log_likelihood_}
    result["cpu_over_gpu_seconds"] = round(result["cpu"]["seconds"] / result["cuda"]["seconds"], 3)
    result["auto"] = FlowCalibrator(show_progress_bar=False, epochs=0.05).fit(embeddings).fit_device_choice_.as_dict()
    return result


def section_gpu(runner: Any, plan: dict[str, Any], say: Any) -> dict[str, Any]:
    """The GPU section of ``python -m benchmarks.perf --device cuda``: the jobs in fresh workers, its JSON."""
    common = {"data": str(plan["data"]), "max_length": plan["max_length"], "threads": plan["threads"]}
    section: dict[str, Any] = {"targets": GPU_TARGETS, "encode": {}, "flow": {}}
    for model in plan["models"]:
        say(f"gpu: encode {model}: batch sizes {', '.join(map(str, plan.get('gpu_batch_sizes') or BATCH_SIZES))}")
        section["encode"][model] = runner("gpu-encode", common | {
            "model": model, "repeats": plan["repeats"], "sentences": plan["sentences"],
            "batch_sizes": plan.get("gpu_batch_sizes")})
    say(f"gpu: flow fit of {plan['main_model']} on STS-B, on the GPU and on the CPU")
    section["flow"] = runner("gpu-flow", common | {"model": plan["main_model"], "task": "STSBenchmark"})
    return section


def format_gpu(section: dict[str, Any]) -> str:
    """The section as text tables."""
    lines = ["GPU: sentences/s (ratio against sentence-transformers at the same precision)"]
    for model, entry in section["encode"].items():
        lines.append(f"  {model} on {entry['device']} ({entry['precision']}):")
        for row in entry["rows"]:
            numbers = row["ratio_vs_sentence_transformers"]
            cells = ", ".join(f"{name.removeprefix('flow-plugin ')}: {value:.0f}/s" + (
                f" ({numbers[name]:.2f}x)" if name in numbers else "") for name, value in row["sentences_per_second"].items())
            lines.append(f"    batch {row['batch_size']:>3} {row['chunking']:>5} (auto: {row['auto']}): {cells}")
        lines.append("    peak memory MiB: " + ", ".join(f"{k}: {v}" for k, v in entry["peak_memory_mib"].items()))
        lines.append("    STS-B Spearman - float32 (points): " + ", ".join(
            f"{k}: {v:+.4f}" for k, v in entry["quality_minus_float32_points"].items()))
    flow = section.get("flow") or {}
    if flow:
        lines.append(f"  flow fit ({flow['n_sentences']} sentences): GPU {flow['cuda']['seconds']}s, CPU "
                     f"{flow['cpu']['seconds']}s (CPU/GPU {flow['cpu_over_gpu_seconds']}); auto: "
                     f"{flow.get('auto', {}).get('device')}")
    run = section.get("mteb_run") or {}
    if run:
        lines.append(f"  mteb run {run['model']} -t {run['task']}: {run['seconds']}s, exit {run['returncode']}, "
                     f"score {run.get('score')}")
    return "\n".join(lines)


# =========================================================================== python -m benchmarks.gpu
def job_mteb_run(model: str, data: Path, env: dict[str, str], device: str, folder: Path) -> dict[str, Any]:
    """One whole ``mteb run`` of ``model`` on :data:`MTEB_TASK`, as typed, in a fresh process."""
    command = [sys.executable, "-m", "mteb", "run", "-m", model, "-t", MTEB_TASK, "--output-folder", str(folder)]
    child = {**os.environ, **WORKER_ENV, **env, "FLOW_PLUGIN_SHARED_DATA": str(data.parent)}
    if device == "cpu":  # the smoke check: the CPU even where there is a GPU
        child["CUDA_VISIBLE_DEVICES"] = ""
    child["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    folder.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=child, cwd=folder, check=False)
    scores = [json.loads(path.read_text())["scores"]["test"][0]["main_score"]
              for path in folder.rglob(f"{MTEB_TASK}.json")]
    return {"model": model, "task": MTEB_TASK, "seconds": round(time.perf_counter() - started, 1),
            "returncode": done.returncode, "score": round(100 * scores[0], 4) if scores else None,
            "output_tail": (done.stdout + done.stderr)[-1500:] if done.returncode else ""}


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help="the loan-sized run: 6,000 sentences, one repeat")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                        help="cuda (default), or cpu: the same code on small inputs and small stand-ins (a smoke check)")
    parser.add_argument("--shapes", default=None, help="stand-ins to time (default minilm-l6,bert-base; cpu: tiny,minilm-l6)")
    parser.add_argument("--batch-sizes", default=None, help="batch sizes (default 32,128,512; cpu: 8,32)")
    parser.add_argument("--sentences", type=int, default=None, help="sentences timed (default 6000; cpu: 96)")
    parser.add_argument("--repeats", type=int, default=None, help="interleaved repeats (default: 1 with --quick, else 3)")
    parser.add_argument("--mteb-model", default=None, help="the mteb run's stand-in (default: the last shape's)")
    parser.add_argument("--no-mteb-run", action="store_true", help="skip the whole mteb run")
    parser.add_argument("--data", type=Path, default=None, help="SentEval data folder (default: as benchmarks.perf)")
    parser.add_argument("--output-dir", type=Path, default=REPO_ROOT / "benchmarks" / "results",
                        help="where the JSON and Markdown reports go (default benchmarks/results/)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds allowed per worker process")


def _plan(args: argparse.Namespace) -> dict[str, Any]:
    defaults = QUICK[args.device]
    return {"device": args.device, "data": data_root(args.data), "max_length": 64,
            "shapes": args.shapes.split(",") if args.shapes else defaults["shapes"],
            "batch_sizes": [int(b) for b in args.batch_sizes.split(",")] if args.batch_sizes else defaults["batch_sizes"],
            "sentences": args.sentences or defaults["sentences"], "pairs": defaults["pairs"],
            "repeats": args.repeats or (1 if args.quick else 3)}


def run_gpu_benchmark(args: argparse.Namespace) -> dict[str, Any]:
    """Build the stand-ins, run the jobs in fresh workers and the mteb run: the report, written after each job (so
    a run stopped at a loan's limit leaves what it measured)."""
    plan = _plan(args)
    if plan["device"] == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise SystemExit("python -m benchmarks.gpu: no CUDA device here; use --device cpu for the smoke check")
    started = time.time()
    report: dict[str, Any] = {"format": "flow-plugin-gpu", "version": 1, "command": " ".join(sys.argv),
                              "quick": bool(args.quick), "settings": {**plan, "data": str(plan["data"])},
                              "machine": describe_machine(), "targets": GPU_TARGETS, "encode": {}}
    with tempfile.TemporaryDirectory(prefix="flow-plugin-stand-ins-") as folder:
        registry = build_stand_ins(Path(folder), plan["shapes"])
        env = {"FLOW_PLUGIN_REGISTRY": str(registry)}
        runner = Runner(args.timeout)
        common = {"data": str(plan["data"]), "max_length": plan["max_length"], "device": plan["device"]}
        try:
            for shape in plan["shapes"]:
                print(f"[gpu] encode {stand_in_name(shape)}", flush=True)
                report["encode"][stand_in_name(shape)] = runner("gpu-encode", common | {
                    "model": stand_in_name(shape), "sentences": plan["sentences"], "pairs": plan["pairs"],
                    "batch_sizes": plan["batch_sizes"], "repeats": plan["repeats"]}, env=env)
                write_report(report | {"seconds": round(time.time() - started, 1)}, args.output_dir)
            print("[gpu] flow fit on the device and on the CPU", flush=True)
            report["flow"] = runner("gpu-flow", common | {"model": stand_in_name(plan["shapes"][0]),
                                                          "task": "STSBenchmark"}, env=env)
        finally:
            runner.close()
        if not args.no_mteb_run:
            model = f"flow_plugin/{stand_in_name(args.mteb_model or plan['shapes'][-1])}-flow"
            print(f"[gpu] mteb run -m {model} -t {MTEB_TASK}", flush=True)
            report["mteb_run"] = job_mteb_run(model, plan["data"], env, plan["device"], Path(folder) / "mteb")
    report["seconds"] = round(time.time() - started, 1)
    return report


def write_report(report: dict[str, Any], folder: Path) -> Path:
    """The report as ``gpu-<date>-<device>-<machine>.json`` and ``.md`` in ``folder`` (made if absent); the JSON's
    path."""
    from flow_plugin._io import atomic_write_json, atomic_write_text

    device = report["settings"]["device"]
    name = (report["machine"]["gpu"] if device == "cuda" else report["machine"]["cpu_model"]).split(",")[0]
    slug = "-".join(name.lower().replace("nvidia", "").split())[:40].strip("-")
    folder.mkdir(parents=True, exist_ok=True)
    stem = folder / f"gpu-{time.strftime('%Y-%m-%d')}-{device}-{slug}{'-quick' if report['quick'] else ''}"
    atomic_write_json(stem.with_suffix(".json"), report)
    atomic_write_text(stem.with_suffix(".md"), f"# GPU benchmark ({report['command']})\n\n```\n"
                      f"{format_gpu(report)}\n```\n")
    return stem.with_suffix(".json")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu", description=__doc__.splitlines()[0])
    configure_parser(parser)
    args = parser.parse_args(argv)
    report = run_gpu_benchmark(args)
    path = write_report(report, args.output_dir)
    print(format_gpu(report))
    print(f"\n{report['seconds']} s; written to {path} (and .md)")
    return 0 if report.get("mteb_run", {}).get("returncode", 0) == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
