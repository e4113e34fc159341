"""The GPU section of the benchmark: ``python -m benchmarks.perf --device cuda``.

On one CUDA device, for each backbone (default MiniLM-L6 and mpnet-base):

``encode``
    Sentences per second of flow-plugin's ``Backbone`` against ``SentenceTransformer.encode`` on the
    same GPU, at equal precision (fp16 against ST in fp16, bf16 against ST in bf16), same sentences
    (the unique sentences of the seven STS test sets), ``max_seq_length`` 64, batch sizes 32 to 512;
    ours with both batch plans (length-exact: no padding, bit-exact; padded: length-sorted, padded to
    the batch's longest), timed interleaved as the CPU section is. Peak GPU memory of each contender.
    Quality: STS-B test Spearman x 100 of each contender's raw embeddings against ours in float32
    (target: within 0.05 points).
``flow``
    The paper's flow fitted on the same embeddings on the GPU and on the CPU (STS-B, all splits): seconds
    and log-likelihood of each, so the default device of a fit can be chosen by measurement.

Targets (benchmark targets, never test assertions): ours at least ST's throughput at equal precision.
Each measurement runs in a fresh worker process (:class:`benchmarks.harness.Runner`). The jobs take a
``device`` (default ``cuda``) so that a CPU can check their code paths on small inputs (the tests do).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

#: the GPU section's targets (benchmark targets, never test assertions)
GPU_TARGETS: dict[str, Any] = {"throughput_ratio_min": 1.0, "spearman_max_abs_diff_points": 0.05}
BATCH_SIZES = (32, 64, 128, 256, 512)
PLANS = ("length-exact", "padded")


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


def job_gpu_encode(p: dict[str, Any]) -> dict[str, Any]:
    """One backbone on the GPU: throughput of ours (both plans) and ST at equal precisions, memory, quality."""
    import numpy as np
    import torch

    from benchmarks.harness import interleaved_timing, model_location, sentence_set
    from flow_plugin.data.senteval import load_eval_subsets
    from flow_plugin.encoding.backbone import Backbone
    from flow_plugin.encoding.device import precision_for_capability
    from flow_plugin.evaluation.sts import paired_cosine, spearman

    device = p.get("device", "cuda")
    synchronize, reset_peak, peak_mib = _cuda_tools(device)
    location, pooling = model_location(p["model"])
    sentences = sentence_set(p["data"], "sts7-test", p.get("sentences"))
    gold = load_eval_subsets(p["data"], "STSBenchmark")[0]
    n_pairs = p.get("pairs") or len(gold.scores)  # a CPU check takes the first few
    scores = np.asarray(gold.scores[:n_pairs])
    stsb = list(gold.sentences1[:n_pairs]) + list(gold.sentences2[:n_pairs])
    on_cuda = device.startswith("cuda")
    auto = precision_for_capability(torch.cuda.get_device_capability(device)) if on_cuda else "bf16"
    precisions = p.get("precisions") or (["fp16", "bf16"] if auto == "bf16" else ["fp16"])
    result: dict[str, Any] = {"model": p["model"], "gpu": torch.cuda.get_device_name(device) if on_cuda else device,
                              "auto_precision": auto,
                              "n_sentences": len(sentences), "batch_sizes": {}, "quality": {}, "peak_memory_mib": {}}

    def spearman_points(embeddings: np.ndarray) -> float:
        return round(100 * spearman(paired_cosine(embeddings[:n_pairs], embeddings[n_pairs:]), scores), 4)

    reference32 = Backbone(location, pooling=pooling, max_seq_length=p["max_length"], device=device,
                           precision="float32", show_progress_bar=False)
    result["quality"]["flow-plugin float32"] = spearman_points(reference32.encode(stsb))
    del reference32
    for precision in precisions:
        st = _st_model(location, precision, p["max_length"], device)
        ours = {plan: Backbone(location, pooling=pooling, max_seq_length=p["max_length"], device=device,
                               precision=precision, batch_plan=plan, show_progress_bar=False).load() for plan in PLANS}
        for batch_size in p.get("batch_sizes") or BATCH_SIZES:
            contenders = {
                f"sentence-transformers {precision}": lambda part, b=batch_size: st.encode(
                    part, batch_size=b, convert_to_numpy=True, show_progress_bar=False),
                **{f"flow-plugin {precision} {plan}": (lambda part, b=batch_size, m=model: m.encode(part, batch_size=b))
                   for plan, model in ours.items()},
            }
            for encode in contenders.values():  # warm-up: kernels chosen, memory pools grown
                encode(sentences[: 2 * batch_size])
            timings, _ = interleaved_timing(contenders, sentences, chunk=p["chunk"], repeats=p["repeats"],
                                            synchronize=synchronize)
            per_second = {name: round(len(sentences) * p["repeats"] / sum(sum(r) for r in timings["wall"][name]), 1)
                          for name in contenders}
            st_name = f"sentence-transformers {precision}"
            result["batch_sizes"].setdefault(str(batch_size), {})[precision] = {
                "sentences_per_second": per_second,
                "ratio_vs_sentence_transformers": {
                    name: round(statistics.median(sum(s) / sum(f) for s, f in zip(timings["wall"][st_name],
                                                                                   timings["wall"][name])), 3)
                    for name in contenders if name != st_name},
            }
        for name, encode in {f"sentence-transformers {precision}": lambda part: st.encode(
                part, batch_size=64, convert_to_numpy=True, show_progress_bar=False),
                **{f"flow-plugin {precision} {plan}": model.encode for plan, model in ours.items()}}.items():
            synchronize()
            reset_peak()
            embeddings = np.asarray(encode(stsb), dtype=np.float32)
            synchronize()
            result["peak_memory_mib"][name] = peak_mib()
            result["quality"][name] = spearman_points(embeddings)
        del st, ours
        if on_cuda:
            torch.cuda.empty_cache()
    result["quality_minus_float32_points"] = {
        name: round(value - result["quality"]["flow-plugin float32"], 4)
        for name, value in result["quality"].items() if name != "flow-plugin float32"}
    return result


def job_gpu_flow(p: dict[str, Any]) -> dict[str, Any]:
    """The paper's flow on the same embeddings, fitted on the GPU and on the CPU."""
    from benchmarks.harness import model_location
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
    return result


def section_gpu(runner: Any, plan: dict[str, Any], say: Any) -> dict[str, Any]:
    """Run the GPU jobs in fresh workers: the section's JSON."""
    common = {"data": str(plan["data"]), "max_length": plan["max_length"], "threads": plan["threads"]}
    section: dict[str, Any] = {"targets": GPU_TARGETS, "encode": {}, "flow": {}}
    for model in plan["models"]:
        say(f"gpu: encode {model}: batch sizes {', '.join(map(str, plan.get('gpu_batch_sizes') or BATCH_SIZES))}")
        section["encode"][model] = runner("gpu-encode", common | {
            "model": model, "chunk": plan["chunk"], "repeats": plan["repeats"], "sentences": plan["sentences"],
            "batch_sizes": plan.get("gpu_batch_sizes")})
    say(f"gpu: flow fit of {plan['main_model']} on STS-B, on the GPU and on the CPU")
    section["flow"] = runner("gpu-flow", common | {"model": plan["main_model"], "task": "STSBenchmark"})
    return section


def format_gpu(section: dict[str, Any]) -> str:
    """The section as text tables."""
    lines = ["GPU: sentences/s (ratio against sentence-transformers at the same precision)"]
    for model, entry in section["encode"].items():
        lines.append(f"  {model} on {entry['gpu']} (auto precision {entry['auto_precision']}):")
        for batch_size, by_precision in entry["batch_sizes"].items():
            for precision, numbers in by_precision.items():
                cells = ", ".join(f"{name}: {value:.0f}/s" + (
                    f" ({numbers['ratio_vs_sentence_transformers'][name]:.2f}x)"
                    if name in numbers["ratio_vs_sentence_transformers"] else "")
                    for name, value in numbers["sentences_per_second"].items())
                lines.append(f"    batch {batch_size:>3} {precision}: {cells}")
        lines.append("    peak memory MiB: " + ", ".join(f"{k}: {v}" for k, v in entry["peak_memory_mib"].items()))
        lines.append("    STS-B Spearman - float32 (points): " + ", ".join(
            f"{k}: {v:+.4f}" for k, v in entry["quality_minus_float32_points"].items()))
    flow = section.get("flow") or {}
    if flow:
        lines.append(f"  flow fit ({flow['n_sentences']} sentences): GPU {flow['cuda']['seconds']}s, CPU "
                     f"{flow['cpu']['seconds']}s (CPU/GPU {flow['cpu_over_gpu_seconds']})")
    return "\n".join(lines)
