"""``flow-plugin task-types``: parses the arguments of :func:`flow_plugin.studies.task_types.run_task_types`
and prints its table.

    flow-plugin task-types -b minilm-l6 --data ../shared/data --calibrators raw whiten flow --seeds 3
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from flow_plugin.calibration.names import STUDY_CALIBRATORS
from flow_plugin.cli._options import add_encoder_arguments, encoder_options
from flow_plugin.studies.task_types import DEFAULT_EVALUATOR_SEEDS, STUDY_MAX_FIT_SENTENCES, build_board, run_task_types


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-b", "--backbone", required=True,
                        help="registry backbone (minilm-l6), MTEB model name (intfloat/e5-small-v2) or local "
                             "sentence-transformers folder (/path/to/model)")
    parser.add_argument("--data", type=Path, default=None,
                        help="the shared data folder holding senteval/, glue/ and mteb/ (default: "
                             "$FLOW_PLUGIN_SHARED_DATA)")
    parser.add_argument("--output-folder", type=Path, default=Path("results/task-types"),
                        help="MTEB output folder (default: results/task-types)")
    parser.add_argument("--calibrators", nargs="+", metavar="NAME", default=None,
                        help="calibrator names (raw sn natsv sn-natsv whiten flow, flow variants, flow-ens); "
                             f"default: {' '.join(STUDY_CALIBRATORS)}; with --board-only, the rows of the board (default: "
                             "every calibrator found)")
    parser.add_argument("--seeds", type=int, default=1, metavar="N",
                        help="seeds of each seeded calibrator: its default and the next N-1")
    parser.add_argument("--evaluator-seeds", type=int, default=DEFAULT_EVALUATOR_SEEDS, metavar="N",
                        help="seeds of MTEB's evaluator where it draws at random (classification, clustering): "
                             f"MTEB's 42 and the next N-1 (default {DEFAULT_EVALUATOR_SEEDS}); their spread enters "
                             "each interval")
    parser.add_argument("--workers", type=int, default=None, metavar="N",
                        help="worker processes that run the steps side by side (default: one per core, at most 4)")
    parser.add_argument("--tasks", nargs="+", metavar="TASK", help="a subset of the study's tasks (default: all)")
    parser.add_argument("--max-fit-sentences", type=int, default=STUDY_MAX_FIT_SENTENCES,
                        help=f"fit on at most this many distinct sentences per task (default {STUDY_MAX_FIT_SENTENCES:,})")
    parser.add_argument("--senteval-task-path", type=Path, default=None, metavar="DIR",
                        help="also run SentEval's transfer tasks on this folder (the one holding downstream/)")
    add_encoder_arguments(parser)
    parser.add_argument("--overwrite", action="store_true", help="recompute finished results")
    parser.add_argument("--board", type=Path, default=None, metavar="JSON",
                        help="then build the backbone's task-types board from the output folder, a row for every "
                             "calibrator with results there (this run's and earlier ones'): JSON, Markdown and HTML "
                             "(e.g. leaderboards/task-types-minilm-l6.json)")
    parser.add_argument("--board-only", action="store_true",
                        help="build the --board from the results already in the output folder; run nothing")


def run(args: argparse.Namespace) -> int:
    if args.board_only:
        if args.board is None:
            _stderr("flow-plugin task-types: --board-only needs --board JSON (where to write the board)")
            return 2
        _, paths = build_board(args.output_folder, args.backbone, args.board, tasks=args.tasks,
                               calibrators=args.calibrators)
        print(f"task-types board written: {', '.join(str(path) for path in paths if path is not None)}")
        return 0

    senteval = {"task_path": args.senteval_task_path} if args.senteval_task_path is not None else None
    report = run_task_types(args.backbone, args.data, output_folder=args.output_folder, calibrators=args.calibrators or STUDY_CALIBRATORS,
                            seeds=args.seeds, tasks=args.tasks, max_fit_sentences=args.max_fit_sentences,
                            evaluator_seeds=args.evaluator_seeds, workers=args.workers,
                            options=encoder_options(args), overwrite=args.overwrite, senteval=senteval,
                            progress=_stderr)
    table = report.scores()
    labels = list(dict.fromkeys(step.label for step in report.steps))
    print("task\t" + "\t".join(label.removeprefix("flow_plugin/") for label in labels))
    for task, row in table.items():
        print(task + "\t" + "\t".join("FAILED" if row.get(label) is None else f"{100 * row[label]:.2f}"
                                      for label in labels))
    failed = [step for step in report.steps if step.status == "failed"]
    print(f"task types {report.backbone}: {len(report.steps) - len(failed)} results, {len(failed)} failed, in "
          f"{report.wall_seconds:.0f} s; written under {report.output_folder}")
    if report.interrupted:
        print("interrupted: rerun the same command to resume (finished results are reused)", file=sys.stderr)
        return 130
    if args.board is not None and not failed:
        _, paths = build_board(args.output_folder, args.backbone, args.board, tasks=args.tasks,
                               study=report.totals())
        print(f"task-types board written: {', '.join(str(path) for path in paths if path is not None)}")
    return 1 if failed else 0


__all__ = ["configure_parser", "run"]
