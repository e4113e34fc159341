"""How closely an exported sentence-transformers folder reproduces flow-plugin's embeddings.

For each of the six methods of a backbone (default ``minilm-l6``): fit on the first N sentences
of STS-B train (``--fit-sentences``), export with :func:`export_model`, load the folder with
``SentenceTransformer`` (float32, the CPU) and encode the distinct sentences of STS-B dev. Compare
with flow-plugin's own calibrated embeddings of the same sentences, its backbone in float32 and in
bf16 (the same fitted calibrator):

- ``rel``: the largest difference in a row over that row's largest component (the measure the
  export's own check and ``tests/test_export.py`` use);
- ``cos``: the largest difference of a cosine similarity, over all pairs of sentences;
- the folder's size.

    python -m benchmarks.export_agreement --data ../shared/data/senteval [--threads 1] [--fit-sentences 600]

``ONEDNN_MAX_CPU_ISA=AVX2`` in the environment runs bf16 through oneDNN's emulated kernels.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch


def _sentences(csv_path: Path) -> list[str]:
    rows = [line.rstrip("\n").split("\t") for line in csv_path.read_text(encoding="utf-8").splitlines()]
    return [text.strip() for row in rows if len(row) >= 7 for text in (row[5], row[6]) if text.strip()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="the SentEval folder (containing downstream/)")
    parser.add_argument("--backbone", default="minilm-l6")
    parser.add_argument("--fit-sentences", type=int, default=600)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    from sentence_transformers import SentenceTransformer

    from flow_plugin.calibration import CALIBRATOR_METHODS
    from flow_plugin.catalog.registry import get_backbone
    from flow_plugin.catalog.builders import build_encoder, resolve
    from flow_plugin.encoding.options import EncoderOptions
    from flow_plugin.integrations.sentence_transformers import export_model
    from flow_plugin.integrations.sentence_transformers.export import cosine_difference, embedding_differences

    sts = args.data / "downstream" / "STS" / "STSBenchmark"
    probes = list(dict.fromkeys(_sentences(sts / "sts-dev.csv")))
    with tempfile.TemporaryDirectory() as folder:
        corpus = Path(folder) / "fit.txt"
        corpus.write_text("\n".join(_sentences(sts / "sts-train.csv")[: args.fit_sentences]) + "\n", encoding="utf-8")
        spec = get_backbone(args.backbone)
        variant = resolve(spec.model_name("raw"))
        pooled = {precision: build_encoder(variant, EncoderOptions(precision=precision, device="cpu",
                                                                   show_progress_bar=False)).encode(probes)
                  for precision in ("float32", "bf16")}
        print(f"{args.backbone}: fit on {args.fit_sentences} STS-B train sentences, compared on {len(probes)} STS-B dev "
              f"sentences, {torch.get_num_threads()} threads")
        print(f"{'method':9} {'rel f32':>9} {'cos f32':>9} {'rel bf16':>9} {'cos bf16':>9} {'MiB':>6} {'s':>5}")
        for method in CALIBRATOR_METHODS:
            start = time.perf_counter()
            out = Path(folder) / method
            result = export_model(spec.model_name(method), out, fit_corpus=corpus, device="cpu", show_progress_bar=False)
            calibrator = result.record["calibrator"]
            st = SentenceTransformer(str(out), device="cpu", trust_remote_code=result.needs_flow_plugin)
            theirs = st.encode(probes, convert_to_numpy=True, show_progress_bar=False)
            row = [method]
            for precision in ("float32", "bf16"):
                ours = result.calibrator.transform(pooled[precision])
                row += [f"{embedding_differences(ours, theirs)[1]:9.1e}", f"{cosine_difference(ours, theirs):9.1e}"]
            print(f"{row[0]:9} {' '.join(row[1:])} {result.size_bytes / 2**20:6.1f} {time.perf_counter() - start:5.1f}"
                  f"  ({calibrator['class']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
