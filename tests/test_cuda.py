"""The GPU path, on a CUDA device: ``python -m pytest -m cuda`` runs exactly these (issue 20).

Every test here needs a CUDA device and is skipped, with the reason, on a machine without one. They
run what a GPU user runs: the backbone's encode, the calibrators' fit and transform (the flow on the
GPU), the MTEB wrapper on an offline task, a bench of one backbone and a one-job sweep with
``device = "cuda"``, and compare each with the CPU in float32. The tolerances are first guesses from the
CPU's measured bf16-against-float32 differences (0.018 points on STS16, docs/reproducibility.md),
widened for GPU kernels; a GPU run that measures them writes its figures into docs/performance.md.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine (torch "
                       f"{torch.__version__}, CUDA build: {torch.version.cuda or 'no'})"),
]

SENTENCES = ["A man is playing a guitar.", "A woman is slicing an onion.", "Two dogs run through a park.",
             "The stock market fell sharply today.", "A child reads a book under a tree.", "It is raining."]


def cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def test_the_backbone_encodes_on_the_gpu_like_on_the_cpu(minilm_path: Path) -> None:
    from flow_plugin.encoding.backbone import Backbone
    from flow_plugin.encoding.device import precision_for_capability

    gpu = Backbone(minilm_path, pooling="last-avg", device="cuda", show_progress_bar=False)
    assert gpu.precision == precision_for_capability(torch.cuda.get_device_capability())
    assert gpu.key.kernels.startswith(f"cuda-{gpu.precision}-sm")
    cpu = Backbone(minilm_path, pooling="last-avg", device="cpu", precision="float32").encode(SENTENCES)
    on_gpu = gpu.encode(SENTENCES)
    assert on_gpu.dtype == np.float32 and on_gpu.shape == cpu.shape
    assert cosine(on_gpu, cpu).min() > 0.999  # the CPU's bf16 measured above 0.9999
    float32 = Backbone(minilm_path, pooling="last-avg", device="cuda", precision="float32").encode(SENTENCES)
    np.testing.assert_allclose(float32, cpu, rtol=0, atol=1e-4 * np.abs(cpu).max())
    # the batch plan holds on the GPU: a sentence's embedding does not depend on its batch mates in bf16
    alone = np.stack([gpu.encode([sentence], batch_size=1)[0] for sentence in SENTENCES])
    np.testing.assert_allclose(gpu.encode(SENTENCES, batch_size=64), alone, rtol=0, atol=1e-3 * np.abs(alone).max())


def test_the_calibrators_fit_and_transform_on_the_gpu(minilm_path: Path, tmp_path: Path) -> None:
    from flow_plugin.calibration import CALIBRATOR_METHODS, Calibrator, make_calibrator
    from flow_plugin.encoding.backbone import Backbone

    backbone = Backbone(minilm_path, pooling="last-avg", device="cuda", precision="float32", show_progress_bar=False)
    X = backbone.encode([f"{s} ({i})" for i in range(120) for s in SENTENCES])
    for name in CALIBRATOR_METHODS:
        params = {"device": "cuda", "show_progress_bar": False} if name == "flow" else {}
        calibrator = make_calibrator(name, **params).fit(X)
        Z = calibrator.transform(X)
        assert Z.dtype == np.float32 and np.isfinite(Z).all(), name
        calibrator.save(tmp_path / f"{name}.npz")
        loaded = Calibrator.load(tmp_path / f"{name}.npz")  # a GPU flow loads wherever flow-plugin runs
        np.testing.assert_allclose(loaded.transform(X), Z, rtol=0, atol=1e-4 * np.abs(Z).max())
        if name == "flow":
            assert calibrator.fit_log_likelihood_ > calibrator.initial_log_likelihood_
            assert next(calibrator.flow_.parameters()).device.type == "cuda"


def test_the_mteb_wrapper_scores_an_offline_task_on_the_gpu_like_on_the_cpu(senteval_dir: Path, minilm_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    import mteb

    monkeypatch.setenv("FLOW_PLUGIN_SHARED_DATA", str(senteval_dir.parent))
    monkeypatch.delenv("FLOW_PLUGIN_CACHE_DIR", raising=False)
    task = mteb.get_tasks(tasks=["SentEvalSTS16"])
    scores = {}
    for device, precision in (("cuda", "auto"), ("cpu", "float32")):
        model = mteb.get_model("flow_plugin/minilm-l6-whiten", device=device, precision=precision)
        result = mteb.evaluate(model, task, cache=None, co2_tracker=False)
        scores[device] = result.task_results[0].scores["test"][0]["main_score"]
    assert scores["cuda"] == pytest.approx(scores["cpu"], abs=1e-3)  # 0.1 points


def test_bench_and_a_one_job_sweep_run_on_the_gpu_and_record_it(senteval_dir: Path, minilm_path: Path,
                                                                tmp_path: Path) -> None:
    from flow_plugin.cli.main import main as cli_main

    out = tmp_path / "bench"
    assert cli_main(["bench", "-b", "minilm-l6", "--calibrators", "raw", "whiten", "--tasks", "SentEvalSTS16",
                     "--data", str(senteval_dir), "--output-folder", str(out), "--device", "cuda",
                     "--no-leaderboard"]) == 0
    records = [json.loads(line) for line in (out / "flow-plugin-runs.jsonl").read_text().splitlines()]
    assert records and all(record["hardware"]["gpu"] and record["hardware"]["device"].startswith("cuda")
                           for record in records)

    sweep = tmp_path / "sweep.toml"
    sweep.write_text(f'backbones = ["minilm-l6"]\ncalibrators = ["raw", "flow"]\ntasks = ["SentEvalSTS16"]\n'
                     f'data = "{senteval_dir}"\noutput = "out"\n[resources]\ndevice = "cuda"\ngpus_per_job = 1\n')
    done = subprocess.run(["flow-plugin", "sweep", str(sweep), "--no-progress-bar"], capture_output=True, text=True,
                          cwd=tmp_path, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    records = [json.loads(line) for line in (tmp_path / "out" / "flow-plugin-runs.jsonl").read_text().splitlines()]
    assert len(records) == 2 and all(record["hardware"]["gpu"] for record in records)
