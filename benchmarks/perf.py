"""``python -m benchmarks.perf``: the speed and memory benchmark, in one command.

Sections (``--sections``, default all CPU sections):

``encode`` (with ``efficiency``), ``flow``, ``variants``, ``scaling``
    :mod:`benchmarks.cpu`: our encoder against ``SentenceTransformer.encode``, hardware efficiency, flow
    fitting against encoding, six variants against one, scaling to 100k sentences.
``gpu`` (the default with ``--device cuda``)
    :mod:`benchmarks.gpu`: ours against sentence-transformers on a CUDA device at equal precision.
``--peers`` (on its own; the same as ``python -m benchmarks.peers``, whose options it takes)
    :mod:`benchmarks.peers`: flow-plugin's encoder beside sentence-transformers' torch, ONNX Runtime and
    OpenVINO backends, one process per backend (the ONNX and OpenVINO ones in their own virtual
    environments), interleaved rounds, each with its STS-B Spearman.

The machinery (worker processes, interleaved timing, the machine description) is :mod:`benchmarks.harness`,
the text report :mod:`benchmarks.report`. Every measurement that reports memory runs in a fresh
subprocess and reads its peak RSS. The result is printed as a table and written (atomically) as JSON with
the machine described. ``--quick`` runs every section on small inputs (a functional check, not a benchmark).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.cpu import (
    TARGETS,
    job_encode,
    job_encode_memory,
    job_flow,
    job_matmul_efficiency,
    job_scaling,
    job_variants,
    memory_summary,
    section_encode,
    section_flow,
    section_scaling,
    section_variants,
)
from benchmarks.gpu import job_gpu_encode, job_gpu_flow, section_gpu
from benchmarks.harness import Runner, data_root, describe_machine, load_average, peak_rss_mib, say
from benchmarks import peers
from benchmarks.report import format_report

SECTIONS: tuple[str, ...] = ("encode", "flow", "variants", "scaling")
#: the sections a CUDA device adds (the default with --device cuda)
GPU_SECTIONS: tuple[str, ...] = ("gpu",)
DEFAULT_MODELS = "minilm-l6,mpnet-base"
SENTENCE_SETS = ("stsb-test", "sts7-test")
#: --quick's small inputs
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
                        help="SentEval data folder (default: $FLOW_PLUGIN_SHARED_DATA/senteval, else ../shared/data/senteval)")
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
    arguments = list(sys.argv[1:] if argv is None else argv)
    if "--peers" in arguments:  # the peer comparison: its own command line (python -m benchmarks.peers --help)
        arguments.remove("--peers")
        return peers.main(arguments)
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
    say(f"machine: {report['machine']['cpu_model']} | {report['machine']['logical_cores']} logical cores | "
         f"threads {report['machine']['torch_threads']} | torch {report['machine']['torch']} | GPU: {report['machine']['gpu']}")
    runner = Runner(args.timeout)
    try:
        if "encode" in plan["sections"]:
            report["sections"]["encode"] = section_encode(runner, plan)
            atomic_write_json(args.output, report)
        if "flow" in plan["sections"]:
            report["sections"]["flow"] = section_flow(runner, plan)
            atomic_write_json(args.output, report)
        if "variants" in plan["sections"]:
            report["sections"]["variants"] = section_variants(runner, plan)
            atomic_write_json(args.output, report)
        if "scaling" in plan["sections"]:
            report["sections"]["scaling"] = section_scaling(runner, plan)
            atomic_write_json(args.output, report)
        if "gpu" in plan["sections"]:
            report["sections"]["gpu"] = section_gpu(runner, plan, say)
    finally:
        runner.close()
        report["memory"] = memory_summary(report["sections"])
        report["seconds"] = round(time.time() - started, 1)
        report["machine"]["load_average_end"] = load_average()
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
        "data": data_root(args.data),
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


def _worker_main(args: argparse.Namespace) -> int:
    from flow_plugin._io import atomic_write_json

    params = json.loads(Path(args.worker_input).read_text(encoding="utf-8"))
    jobs = {
        "gpu-encode": job_gpu_encode,
        "gpu-flow": job_gpu_flow,
        "encode": job_encode,
        "encode-memory": job_encode_memory,
        "flow": job_flow,
        "variants": job_variants,
        "scaling": job_scaling,
        "matmul-efficiency": job_matmul_efficiency,
    }
    if params.get("threads"):
        import torch

        torch.set_num_threads(int(params["threads"]))
    result = jobs[args.worker](params)
    result["peak_rss_mib"] = peak_rss_mib()
    atomic_write_json(args.worker_output, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
