"""How closely an exported sentence-transformers folder reproduces flow-plugin's embeddings.

For each calibrator (default: the six methods, the gentle family and auto) of a backbone (default ``minilm-l6``):
fit on the first N sentences of STS-B train (``--fit-sentences``), export with :func:`export_model`, load the
folder with ``SentenceTransformer`` (float32, the CPU) and encode the distinct sentences of STS-B dev. Compare with
flow-plugin's own calibrated embeddings of the same sentences, its backbone in float32 and in bf16 (the same
fitted calibrator):

- ``rel``: the largest difference in a row over that row's largest component (:func:`relative_difference`, the
  measure ``tests/test_export.py`` uses);
- ``cos``: the largest difference of a cosine similarity, over all pairs of sentences (:func:`cosine_difference`);
- the two parts of the float32 ``rel``: ``pooled``, the folder's modules before the calibrator against
  flow-plugin's pooled embeddings (a wrong layer, pooling or truncation is far off), and ``calib``, the folder's
  calibration modules against the calibrator on the same pooled input (a wrong map is off by ~1);
- the folder's size.

    python -m benchmarks.export_agreement --data ../shared/data/senteval [--threads 1] [--fit-sentences 600]
        [--calibrators whiten,flow] [--sentences 500]

``ONEDNN_MAX_CPU_ISA=AVX2`` in the environment runs bf16 through oneDNN's emulated kernels.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from sentence_transformers import SentenceTransformer

from flow_plugin.calibration import CALIBRATOR_METHODS, GENTLE_CALIBRATORS
from flow_plugin.catalog.builders import build_encoder, resolve
from flow_plugin.catalog.registry import get_backbone
from flow_plugin.encoding.options import EncoderOptions
from flow_plugin.integrations.sentence_transformers.export import export_model
from flow_plugin.integrations.sentence_transformers.modules import centred_affine_map


def relative_difference(ours: np.ndarray, theirs: np.ndarray) -> float:
    """The largest difference in a row over that row's largest component (``ours``' scale)."""
    difference = np.abs(ours.astype(np.float64) - theirs.astype(np.float64))
    scale = np.maximum(np.abs(ours.astype(np.float64)).max(axis=1), np.finfo(np.float32).tiny)
    return float((difference.max(axis=1) / scale).max())


def cosine_difference(ours: np.ndarray, theirs: np.ndarray) -> float:
    """The largest difference between the cosine similarities of two rows, over all pairs of rows."""
    def cosines(matrix: np.ndarray) -> np.ndarray:
        matrix = matrix.astype(np.float64)
        unit = matrix / np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), np.finfo(np.float64).tiny)
        return unit @ unit.T

    return float(np.abs(cosines(ours) - cosines(theirs)).max())


def calibration_module_count(calibrator: Any) -> int:
    """How many of an export's last modules are its calibrator's: the flow's one, a linear map's centring and
    projection ``Dense`` (raw, with no centre: the projection alone)."""
    return 1 if calibrator.method == "flow" else 1 + int(np.any(centred_affine_map(calibrator)[0]))


def folder_parts(folder: Path, calibrator: Any, sentences: list[str], **encode: Any) -> dict[str, np.ndarray]:
    """An exported folder's embeddings of ``sentences`` (``embeddings``), those of its modules before the
    calibrator (``pooled``) and those of its calibrator on that input as flow-plugin computes it (``calibrated``)."""
    model = SentenceTransformer(str(folder), device="cpu", trust_remote_code=calibrator.method == "flow")
    base = SentenceTransformer(modules=list(model)[:-calibration_module_count(calibrator)], device="cpu",
                               prompts=model.prompts, default_prompt_name=model.default_prompt_name)
    pooled = base.encode(sentences, convert_to_numpy=True, show_progress_bar=False, **encode)
    return {"embeddings": model.encode(sentences, convert_to_numpy=True, show_progress_bar=False, **encode),
            "pooled": pooled, "calibrated": calibrator.transform(pooled)}


def agreement(folder: Path, calibrator: Any, sentences: list[str], pooled: dict[str, np.ndarray]) -> dict[str, float]:
    """The figures of one export: ``rel``/``cos`` against flow-plugin's calibrated embeddings for each precision of
    ``pooled`` (flow-plugin's pooled embeddings of ``sentences``: precision -> rows), then the float32 parts."""
    parts = folder_parts(folder, calibrator, sentences)
    figures = {}
    for precision, rows in pooled.items():
        ours = calibrator.transform(rows)
        figures[f"rel {precision}"] = relative_difference(ours, parts["embeddings"])
        figures[f"cos {precision}"] = cosine_difference(ours, parts["embeddings"])
    figures["pooled"] = relative_difference(pooled["float32"], parts["pooled"])
    figures["calib"] = relative_difference(parts["calibrated"], parts["embeddings"])
    return figures


def _sentences(csv_path: Path) -> list[str]:
    rows = [line.rstrip("\n").split("\t") for line in csv_path.read_text(encoding="utf-8").splitlines()]
    return [text.strip() for row in rows if len(row) >= 7 for text in (row[5], row[6]) if text.strip()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="the SentEval folder (containing downstream/)")
    parser.add_argument("--backbone", default="minilm-l6")
    parser.add_argument("--calibrators", default=",".join([*CALIBRATOR_METHODS, *GENTLE_CALIBRATORS, "auto"]))
    parser.add_argument("--fit-sentences", type=int, default=600)
    parser.add_argument("--sentences", type=int, default=None, help="compare on the first N dev sentences (default all)")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    sts = args.data / "downstream" / "STS" / "STSBenchmark"
    probes = list(dict.fromkeys(_sentences(sts / "sts-dev.csv")))[: args.sentences]
    spec = get_backbone(args.backbone)
    pooled = {precision: build_encoder(resolve(spec.model_name("raw")), EncoderOptions(
        precision=precision, device="cpu", show_progress_bar=False)).encode(probes) for precision in ("float32", "bf16")}
    print(f"{args.backbone}: fit on {args.fit_sentences} STS-B train sentences, compared on {len(probes)} STS-B dev "
          f"sentences, {torch.get_num_threads()} threads")
    columns = ["rel float32", "cos float32", "rel bf16", "cos bf16", "pooled", "calib"]
    print(f"{'calibrator':16} " + " ".join(f"{name:>11}" for name in columns) + f" {'MiB':>6} {'s':>5}")
    with tempfile.TemporaryDirectory() as folder:
        corpus = Path(folder) / "fit.txt"
        corpus.write_text("\n".join(_sentences(sts / "sts-train.csv")[: args.fit_sentences]) + "\n", encoding="utf-8")
        for name in args.calibrators.split(","):
            start = time.perf_counter()
            result = export_model(spec.model_name(name), Path(folder) / name, fit_corpus=corpus, device="cpu",
                                  show_progress_bar=False)
            figures = agreement(result.path, result.calibrator, probes, pooled)
            print(f"{name:16} " + " ".join(f"{figures[column]:11.1e}" for column in columns)
                  + f" {result.size_bytes / 2**20:6.1f} {time.perf_counter() - start:5.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
