"""``flow-plugin paper``: the BERT-flow paper's evaluations for one backbone, in one run.

Parses the arguments, calls :func:`flow_plugin.studies.paper.run_paper` and prints its table
(:func:`~flow_plugin.studies.paper.format_report`); what each section computes is said there.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from flow_plugin.cli._options import add_encoder_arguments, encoder_options
from flow_plugin.studies.paper import RESULT_FILE, SECTIONS, format_report, run_paper


def _comma_list(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-m", "--model", required=True, metavar="MODEL",
                        help="a backbone name (minilm-l6: raw and the paper's five calibrators sn, natsv, sn-natsv, "
                        "whiten, flow) or one registry model name (flow_plugin/minilm-l6-flow: raw and that calibrator)")
    parser.add_argument("--data", type=Path, default=None,
                        help="the shared data folder (containing senteval/ and glue/), or a SentEval data folder "
                        "(containing downstream/) (default: $FLOW_PLUGIN_SHARED_DATA)")
    parser.add_argument("--out", required=True, type=Path, help=f"output folder ({RESULT_FILE} and PNG plots)")
    parser.add_argument("--glue", type=Path, default=None,
                        help="GLUE folder (containing QNLI/dev.tsv); default: DATA/glue when present")
    parser.add_argument("--calibrators", action="append", type=_comma_list, metavar="LIST",
                        help="calibrators to run, comma-separated, from sn, natsv, sn-natsv, whiten, flow and the flow "
                        "variants (flow-lu, flow-ens, ...; raw always runs as the baseline)")
    parser.add_argument("--tasks", action="append", type=_comma_list, metavar="LIST",
                        help="STS sets, comma-separated (STS12..STS16, STSBenchmark/STS-B, SICKRelatedness/SICK-R); "
                        "default: all seven")
    parser.add_argument("--skip", action="append", type=_comma_list, metavar="LIST",
                        help=f"sections to leave out, comma-separated, from {', '.join(SECTIONS)}")
    parser.add_argument("--max-pairs", type=int, default=None, metavar="N",
                        help="smoke runs only: read just the first N scored pairs of every subset and split "
                        "(fit corpora included) and of QNLI dev; the numbers are then NOT the paper's protocol")
    add_encoder_arguments(parser)


def _flatten(values: list[list[str]] | None) -> list[str] | None:
    if values is None:
        return None
    return [item for chunk in values for item in chunk]


def _jsonable(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_jsonable(item) for item in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def run(args: argparse.Namespace) -> int:
    report = run_paper(
        args.model,
        args.data,
        args.out,
        glue=args.glue,
        calibrators=_flatten(args.calibrators),
        tasks=_flatten(args.tasks),
        skip=_flatten(args.skip) or (),
        max_pairs=args.max_pairs,
        options=encoder_options(args),
        arguments={key: _jsonable(value) for key, value in vars(args).items() if key != "run"},
    )
    print(format_report(report))
    return 1 if report["errors"] else 0
