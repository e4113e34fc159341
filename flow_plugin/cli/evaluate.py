"""``flow-plugin eval``: registry models × tasks -> MTEB's standard result JSON; parses the
arguments, calls :func:`flow_plugin.integrations.mteb.evaluate.evaluate_models` and prints."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from flow_plugin.data.fit_corpus import TARGET
from flow_plugin.data.tasks import offline_tasks_help
from flow_plugin.cli._options import add_encoder_arguments, encoder_options
from flow_plugin.integrations.mteb.evaluate import evaluate_models


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-m", "--model", action="append", required=True, metavar="MODEL",
                        help="flow_plugin/<base>[-<calibrator>] (repeatable): the base a registry backbone "
                             "(flow_plugin/minilm-l6-flow), an MTEB model name (flow_plugin/intfloat/e5-small-v2-whiten) "
                             "or a local folder (flow_plugin//data/my-model-flow); no suffix is the raw embeddings")
    parser.add_argument("--data", type=Path, default=None,
                        help="the data folder holding senteval/ (or the SentEval folder itself, containing "
                             "downstream/), needed by the offline tasks (default: $FLOW_PLUGIN_SHARED_DATA)")
    parser.add_argument("-t", "--task", action="append", metavar="TASK",
                        help=f"offline task, MTEB task or MTEB benchmark name (repeatable): {offline_tasks_help()}")
    parser.add_argument("--output-folder", type=Path, default=Path("results"),
                        help="MTEB result folder (default: results)")
    parser.add_argument("--fit-corpus", default=TARGET,
                        help="'target' (default: each task's text), 'eval-splits' (that of its evaluation splits only), "
                        "'per-call', or a text file with one sentence per line")
    add_encoder_arguments(parser)
    parser.add_argument("--overwrite", action="store_true", help="recompute results that already exist")


def run(args: argparse.Namespace) -> int:
    options = encoder_options(args)  # its cache_dir reaches the models as data (evaluate_models)
    kwargs: dict[str, Any] = {}
    if args.fit_corpus != TARGET:
        kwargs["fit_corpus"] = args.fit_corpus

    evaluations = evaluate_models(args.model, args.data, args.task, args.output_folder, options=options,
                                  model_kwargs=kwargs, overwrite=args.overwrite)
    for evaluation in evaluations:
        if evaluation.precision is not None:
            print(f"{evaluation.model}\tprecision {evaluation.precision}")
        for run in evaluation.runs:
            origin = "computed now" if run.status == "computed" else f"reused: computed {run.date or 'earlier'}"
            print(f"{run.model}\t{run.task}\tmain_score={run.score:.4f}\t({origin})")
    print(f"results written under {args.output_folder / 'results'}")
    return 0
