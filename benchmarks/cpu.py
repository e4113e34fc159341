"""The CPU sections of the benchmark (``python -m benchmarks.perf``): their worker jobs, how each
section runs them, and the targets they are read against.

``encode``
    Sentences per second of our ``Backbone`` (``precision="auto"``) against ``SentenceTransformer.encode``
    in float32 (and our float32 where ``auto`` is not float32): same model, sentences, batch size,
    ``max_seq_length`` 64 and threads, timed interleaved; STS-B test Spearman of each; achieved matmul
    FLOP/s against the dense bf16 and float32 matmul peaks timed in the same process (``efficiency``);
    with CUDA available, the same comparison on the GPU. Peak RSS of each contender alone.
``flow``
    Flow fitting time against encoding time for the same task corpus, with the log-likelihood reached, and
    the same fit by the pre-optimisation implementation (:func:`reference_flow_fit`) for comparison.
``variants``
    The six variants of a backbone on the seven STS sets through ``flow-plugin eval``'s code path, against one.
``scaling``
    Encoding and flow fitting of 1k, 10k, 100k sentences: time and memory per sentence.
"""

from __future__ import annotations

import math
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.harness import (
    Phase,
    Runner,
    device_sync,
    forward_flops,
    interleaved_timing,
    matmul_peak,
    model_location,
    ratio_summary,
    say,
    sentence_set,
    square_peak_size,
    stsb_workload,
    throughput,
)

#: The CPU sections' targets (benchmark targets, never test assertions).
TARGETS: dict[str, Any] = {
    "encode_ratio_min": {"mpnet-base": 2.0, "minilm-l6": 1.5},
    "encode_quality_max_abs_diff": 0.0005,
    "bf16_peak_fraction_min": 0.40,
    "fit_over_encode_max": 0.25,
    "six_over_one_max": 1.3,
}


# --------------------------------------------------------------------------- job: encode
def job_encode(p: dict[str, Any]) -> dict[str, Any]:
    import numpy as np
    import torch
    from sentence_transformers import SentenceTransformer

    from flow_plugin.encoding.backbone import Backbone
    from flow_plugin.evaluation.sts import paired_cosine, spearman
    from flow_plugin.data.senteval import load_eval_subsets

    location, pooling = model_location(p["model"])
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
        warm = sentence_set(p["data"], "stsb-test", 2 * p["batch_size"])
        for encode in contenders.values():
            encode(warm)
        squares = {dtype: square_peak_size(dtype, device) for dtype in ("bf16", "float32")}

        def measure_peaks() -> dict[str, dict[str, Any]]:
            return {dtype: matmul_peak(dtype, device, peak_shapes(fast.config, p["batch_size"], square))
                    for dtype, square in squares.items()}

        peaks_before = measure_peaks()
        per_set: dict[str, Any] = {}
        for set_name in p["sets"]:
            sentences = sentence_set(p["data"], set_name, p.get("sentences"))
            names = list(contenders) if set_name == "stsb-test" else [slow_name, fast_name]
            repeats = p["repeats"] if set_name == "stsb-test" else p["repeats_sts7"]
            timings, outputs = interleaved_timing({name: contenders[name] for name in names}, sentences,
                                                  chunk=p["chunk"], repeats=repeats, synchronize=sync)
            entry: dict[str, Any] = {
                "n_sentences": len(sentences),
                "timings": timings,
                "throughput": {name: throughput(timings, name) for name in names},
                "speedup_vs_sentence_transformers": ratio_summary(timings, slow_name, fast_name),
            }
            if "flow-plugin float32" in names:
                entry["speedup_float32_ours_vs_sentence_transformers"] = ratio_summary(timings, slow_name, "flow-plugin float32")
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


def peak_shapes(config: Any, batch_size: int, square: int = 2048) -> list[tuple[int, int, int]]:
    d = int(config.hidden_size)
    f = int(getattr(config, "intermediate_size", 4 * d))
    tokens = batch_size * 32
    return [(square, square, square), (tokens, d, f), (tokens, f, d)]


# --------------------------------------------------------------------------- job: encode memory
def job_encode_memory(p: dict[str, Any]) -> dict[str, Any]:
    """Peak RSS of loading one contender and encoding the STS-B test set once."""
    location, pooling = model_location(p["model"])
    sentences = sentence_set(p["data"], "stsb-test", p.get("sentences"))
    with Phase() as load:
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
    with Phase() as encoding:
        encode(sentences)
    return {"contender": p["contender"], "model": p["model"], "n_sentences": len(sentences),
            "load": load.result, "encode": encoding.result}


# --------------------------------------------------------------------------- job: flow
def job_flow(p: dict[str, Any]) -> dict[str, Any]:
    import numpy as np

    from flow_plugin.encoding.cache import CachedEncoder
    from flow_plugin.calibration.flow import FlowCalibrator
    from flow_plugin.encoding.backbone import Backbone
    from flow_plugin.data.senteval import task_sentences

    location, pooling = model_location(p["model"])
    sentences = task_sentences(p["data"], p["task"])
    if p.get("sentences"):
        sentences = sentences[: p["sentences"]]
    backbone = Backbone(location, pooling=pooling, max_seq_length=p["max_length"], batch_size=p["batch_size"],
                        device=p["device"], precision="auto", show_progress_bar=False).load()
    backbone.encode(sentences[: 2 * p["batch_size"]])  # warm-up, not timed
    result: dict[str, Any] = {"task": p["task"], "model": p["model"], "n_sentences": len(sentences),
                              "n_unique_sentences": len(set(sentences)), "precision": backbone.precision}
    encoder = CachedEncoder(backbone)
    with Phase() as encoding:
        embeddings = encoder.encode(sentences)
    result["encode_cached"] = encoding.result  # the real path: each unique sentence once
    if p.get("encode_all"):
        with Phase() as encoding_all:
            backbone.encode(sentences)
        result["encode_every_sentence"] = encoding_all.result
    result["embeddings_mib"] = round(embeddings.nbytes / 2**20, 1)
    calibrator = FlowCalibrator(show_progress_bar=False, device=p["device"])
    with Phase() as fitting:
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
        with Phase() as reference_phase:
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

    from flow_plugin.calibration.flow.glow import ShiftNetwork  # the coupling network the flow ships

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
def job_variants(p: dict[str, Any]) -> dict[str, Any]:
    from flow_plugin.integrations.mteb.evaluate import evaluate_models
    from flow_plugin.encoding.options import EncoderOptions

    with tempfile.TemporaryDirectory(prefix="flow-plugin-perf-variants-") as folder, Phase() as phase:
        evaluations = evaluate_models(p["models"], Path(p["data"]), p.get("tasks"), Path(folder),
                                      options=EncoderOptions(batch_size=p["batch_size"]), command="benchmarks/perf.py")
    scores = {evaluation.model: {run.task: round(run.score, 6) for run in evaluation.runs} for evaluation in evaluations}
    return {"models": p["models"], "tasks": p.get("tasks"), "evaluate": phase.result, "scores": scores}


# --------------------------------------------------------------------------- job: scaling
def scaling_sentences(root: str, n: int) -> list[str]:
    from flow_plugin.data.senteval import SENTEVAL_TASKS, task_sentences

    pool: dict[str, None] = {}
    for task in SENTEVAL_TASKS:
        for text in task_sentences(root, task):
            pool.setdefault(text, None)
    base = list(pool)
    return [base[i % len(base)] + (f" ({i // len(base)})" if i >= len(base) else "") for i in range(n)]


def job_scaling(p: dict[str, Any]) -> dict[str, Any]:
    from flow_plugin.calibration.flow import FlowCalibrator
    from flow_plugin.encoding.backbone import Backbone

    location, pooling = model_location(p["model"])
    sentences = scaling_sentences(p["data"], p["n"])
    backbone = Backbone(location, pooling=pooling, max_seq_length=p["max_length"], batch_size=p["batch_size"],
                        device=p["device"], precision="auto", show_progress_bar=False).load()
    backbone.encode(sentences[: 2 * p["batch_size"]])  # warm-up
    with Phase() as encoding:
        embeddings = backbone.encode(sentences)
    calibrator = FlowCalibrator(show_progress_bar=False, device=p["device"])
    with Phase() as fitting:
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
def common_params(plan: dict[str, Any]) -> dict[str, Any]:
    return {
        "data": str(plan["data"]),
        "device": plan["device"],
        "threads": plan["threads"],
        "batch_size": plan["batch_size"],
        "max_length": plan["max_length"],
    }


def section_encode(runner: Runner, plan: dict[str, Any]) -> dict[str, Any]:
    section: dict[str, Any] = {}
    for model in plan["models"]:
        say(f"encode: {model} (interleaved timing, {plan['repeats']} repeat(s) on STS-B test)")
        params = common_params(plan) | {
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
            say(f"encode memory: {model}, {contender}")
            memory[contender] = runner("encode-memory", common_params(plan) | {
                "model": model, "contender": contender, "sentences": plan["sentences"]})
        entry["memory"] = memory
        if plan["device"] == "cpu":
            say(f"encode: {model}: matmul efficiency of the default (linear layers per thread CPU second)")
            entry["matmul_efficiency"] = runner("matmul-efficiency", common_params(plan) | {
                "model": model, "pairs": (plan["sentences"] or 0) // 2 or None})
        section[model] = entry
        say(f"encode: {model} done: " + encode_headline(entry))
    return section


def section_flow(runner: Runner, plan: dict[str, Any]) -> dict[str, Any]:
    section: dict[str, Any] = {}
    for task in plan["flow_tasks"]:
        say(f"flow: {plan['main_model']} on {task} (all splits){' + reference fit' if plan['flow_reference'] else ''}")
        section[task] = runner("flow", common_params(plan) | {
            "model": plan["main_model"],
            "task": task,
            "sentences": plan["flow_sentences"],
            "reference": plan["flow_reference"],
            "encode_all": plan["flow_encode_all"],
        })
        entry = section[task]
        say(f"flow: {task}: fit {entry['fit']['seconds']:.2f}s / encode {entry['encode_cached']['seconds']:.2f}s "
             f"= {entry['fit_over_encode']:.3f}")
    return section


def section_variants(runner: Runner, plan: dict[str, Any]) -> dict[str, Any]:
    from flow_plugin.calibration import CALIBRATOR_METHODS
    from flow_plugin.catalog.registry import get_backbone

    spec = get_backbone(plan["main_model"])
    six = [spec.model_name(name) for name in CALIBRATOR_METHODS]  # the six methods, not the flow variants
    runs = {"raw": [spec.model_name("raw")], "flow": [spec.model_name("flow")], "all six": six}
    section: dict[str, Any] = {"model": plan["main_model"], "tasks": plan["variant_tasks"] or "all seven", "runs": {}}
    for label, models in runs.items():
        say(f"variants: {label} ({len(models)} model(s)) in a fresh process")
        section["runs"][label] = runner("variants", common_params(plan) | {"models": models, "tasks": plan["variant_tasks"]})
    runs_out = section["runs"]
    six_seconds = runs_out["all six"]["evaluate"]["seconds"]
    section["six_over_raw"] = round(six_seconds / runs_out["raw"]["evaluate"]["seconds"], 3)
    section["six_over_flow"] = round(six_seconds / runs_out["flow"]["evaluate"]["seconds"], 3)
    section["six_over_raw_process"] = round(runs_out["all six"]["process_seconds"] / runs_out["raw"]["process_seconds"], 3)
    section["six_over_flow_process"] = round(runs_out["all six"]["process_seconds"] / runs_out["flow"]["process_seconds"], 3)
    section["peak_rss_mib"] = {label: run["peak_rss_mib"] for label, run in runs_out.items()}
    say(f"variants: six/raw {section['six_over_raw']}, six/flow {section['six_over_flow']}")
    return section


def section_scaling(runner: Runner, plan: dict[str, Any]) -> dict[str, Any]:
    rows = []
    for n in plan["sizes"]:
        say(f"scaling: {n} sentences ({plan['main_model']}: encode, then flow fit) in a fresh process")
        rows.append(runner("scaling", common_params(plan) | {"model": plan["main_model"], "n": n}))
    section: dict[str, Any] = {"model": plan["main_model"], "rows": rows}
    for row in rows:
        n = row["n_sentences"]
        encode, fit = row["encode"], row["fit"]
        row["encode_ms_per_sentence"] = round(1000 * encode["seconds"] / n, 4)
        row["encode_us_per_token"] = round(1e6 * encode["seconds"] / row["n_tokens"], 3) if row.get("n_tokens") else None
        row["fit_ms_per_sentence"] = round(1000 * fit["seconds"] / n, 4)
        row["encode_rss_growth_mib"] = difference(encode.get("peak_rss_mib"), encode.get("rss_before_mib"))
        row["fit_rss_growth_mib"] = difference(fit.get("peak_rss_mib"), fit.get("rss_before_mib"))
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


def difference(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round(a - b, 1)


def memory_summary(sections: dict[str, Any]) -> dict[str, Any]:
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
def encode_headline(entry: dict[str, Any]) -> str:
    parts = []
    for device, data in entry["devices"].items():
        for set_name, values in data["sets"].items():
            ratio = values["speedup_vs_sentence_transformers"]
            parts.append(f"{device} {set_name} x{ratio['ratio']:.2f}")
    return ", ".join(parts)


# --------------------------------------------------------------------------- job: matmul efficiency
def thread_matmul_peak(dtype_name: str, shapes: list[tuple[int, int, int]], seconds: float = 0.3) -> dict[str, float]:
    """GFLOP/s of dense ``torch.matmul`` in ``dtype`` on one thread, per shape (M, K, N), timed in the thread's
    own CPU seconds (``time.thread_time``: other processes on the machine do not count), best of runs of at
    least 20 ms over ``seconds`` per shape; a shape whose one matmul already takes ``seconds`` (a dtype without
    kernels on this CPU) is measured by that one matmul. The caller sets torch to one thread."""
    import time

    import torch

    from benchmarks.harness import torch_dtype

    dtype = torch_dtype(dtype_name)
    result = {}
    for m, k, n in shapes:
        a, b = torch.randn(m, k).to(dtype), torch.randn(k, n).to(dtype)
        start = time.thread_time()
        torch.matmul(a, b)
        once = max(time.thread_time() - start, 1e-6)
        reps, best = max(1, math.ceil(0.02 / once)), once
        deadline = time.perf_counter() + seconds
        while once < seconds and time.perf_counter() < deadline:
            start = time.thread_time()
            for _ in range(reps):
                torch.matmul(a, b)
            best = min(best, max(time.thread_time() - start, 1e-9) / reps)
        result[f"{m}x{k}x{n}"] = round(2 * m * k * n / best / 1e9, 1)
    return result


def job_matmul_efficiency(p: dict[str, Any]) -> dict[str, Any]:
    """How close flow-plugin's default encoder comes to the matmul peak on this CPU.

    The default ``Backbone`` (``precision="auto"``) encodes the STS-B test sentences once untimed (every
    shape's kernels built), then once with every linear layer timed: its FLOPs (2 x rows x in x out) and the
    CPU seconds of the thread that ran it (batches run one per thread, each on one thread, so a thread's CPU
    time is the product's own, whatever else the machine runs). Against: the one-thread matmul peak of each
    dtype, at a square (2048, or smaller where one such matmul would take over 0.1 s in that dtype:
    :func:`benchmarks.harness.square_peak_size`) and at the encoder's own shapes (a batch of 64 sentences of 16
    tokens). Also the whole encode: every matmul FLOP (attention products too;
    :func:`benchmarks.harness.forward_flops`) over the CPU seconds of all its threads, and over its wall time x
    threads.
    """
    import threading
    import time

    import torch

    from flow_plugin.encoding.backbone import Backbone

    location, pooling = model_location(p["model"])
    sentences = stsb_workload(p["data"], p.get("pairs"))[0]
    backbone = Backbone(location, pooling=pooling, max_seq_length=p["max_length"], batch_size=p["batch_size"],
                        precision="auto", show_progress_bar=False).load()
    threads = torch.get_num_threads()
    backbone.encode(sentences)  # untimed
    local = threading.local()
    calls: list[tuple[float, float]] = []  # (flops, thread CPU seconds) per linear call

    def before(module: Any, args: tuple[Any, ...]) -> None:
        local.start = time.thread_time()

    def after(module: Any, args: tuple[Any, ...], output: Any) -> None:
        seconds = time.thread_time() - local.start
        rows = args[0].numel() // module.in_features
        calls.append((2.0 * rows * module.in_features * module.out_features, seconds))

    handles = []
    for module in backbone.model.modules():
        if isinstance(module, torch.nn.Linear):
            handles += [module.register_forward_pre_hook(before), module.register_forward_hook(after)]
    cpu_start, wall_start = time.process_time(), time.perf_counter()
    backbone.encode(sentences)
    cpu_seconds, wall_seconds = time.process_time() - cpu_start, time.perf_counter() - wall_start
    for handle in handles:
        handle.remove()
    config = backbone.config
    hidden, intermediate = int(config.hidden_size), int(getattr(config, "intermediate_size", 4 * config.hidden_size))
    own_shapes = [(64 * 16, hidden, hidden), (64 * 16, hidden, intermediate), (64 * 16, intermediate, hidden)]
    torch.set_num_threads(1)
    try:
        squares = {dtype: square_peak_size(dtype, "cpu") for dtype in ("float32", "bf16")}
        peaks = {dtype: {"square": thread_matmul_peak(dtype, [(side, side, side)]),
                         "encoder_shapes": thread_matmul_peak(dtype, own_shapes)} for dtype, side in squares.items()}
    finally:
        torch.set_num_threads(threads)
    peak_of = {dtype: {"square": max(value["square"].values()), "encoder_shapes": max(value["encoder_shapes"].values())}
               for dtype, value in peaks.items()}
    faster = max(peak_of, key=lambda dtype: peak_of[dtype]["encoder_shapes"])
    linear_flops, linear_seconds = sum(flops for flops, _ in calls), sum(seconds for _, seconds in calls)
    linear_gflops = linear_flops / max(linear_seconds, 1e-9) / 1e9
    lengths = [len(ids) for ids in backbone.tokenize(sentences)]
    all_flops = forward_flops(config, lengths, p["batch_size"], 0)["useful_flops"]
    end_to_end = all_flops / max(cpu_seconds, 1e-9) / 1e9  # per CPU second: per thread
    return {
        "precision": backbone.precision,
        "precision_choice": backbone.precision_choice.as_dict(),
        "threads": threads,
        "faster_dtype": faster,
        "n_sentences": len(sentences),
        "linear_calls": len(calls),
        "linear_gflops": round(linear_gflops, 1),
        "peak_gflops": peak_of[faster]["encoder_shapes"],
        "square_peak_gflops": peak_of[faster]["square"],
        "linear_fraction_of_peak": round(linear_gflops / peak_of[faster]["encoder_shapes"], 3),
        "linear_fraction_of_square_peak": round(linear_gflops / peak_of[faster]["square"], 3),
        "linear_share_of_forward": round(linear_seconds / max(cpu_seconds, 1e-9), 3),
        "end_to_end_gflops": round(end_to_end, 1),
        "end_to_end_fraction_of_peak": round(end_to_end / peak_of[faster]["encoder_shapes"], 3),
        "encode_cpu_seconds": round(cpu_seconds, 3),
        "encode_wall_seconds": round(wall_seconds, 3),
        "wall_gflops_per_thread": round(all_flops / max(wall_seconds * threads, 1e-9) / 1e9, 1),
        "peaks_per_thread_gflops": peaks,
        "peak_square_side": squares,
        "note": "GFLOP/s per thread (CPU seconds of the threads that ran the work), one-thread peaks",
    }
