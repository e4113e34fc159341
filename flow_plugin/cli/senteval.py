"""``flow-plugin senteval``: parses the arguments of :func:`flow_plugin.studies.senteval_transfer.run_transfer`
(SentEval's transfer tasks through SentEval's own engine) and prints its table.

    FLOW_PLUGIN_SENTEVAL_PATH=~/src/SentEval flow-plugin senteval -b minilm-l6 --data ../shared/data/senteval
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from flow_plugin.calibration.names import STUDY_CALIBRATORS
from flow_plugin.integrations.senteval_transfer import CLASSIFIERS, SENTEVAL_PATH_ENV, TRANSFER_TASKS


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-b", "--backbone", required=True,
                        help="the base model: a registry backbone (minilm-l6), a local sentence-transformers folder "
                             "(./my-model) or a model MTEB loads by name (org/name)")
    parser.add_argument("--data", type=Path, default=None,
                        help="SentEval's task_path (the folder holding downstream/), or the data folder holding "
                             "senteval/ (default: $FLOW_PLUGIN_SHARED_DATA)")
    parser.add_argument("--calibrators", nargs="+", metavar="NAME", default=list(STUDY_CALIBRATORS),
                        help=f"calibrator names (default: {' '.join(STUDY_CALIBRATORS)})")
    parser.add_argument("--tasks", nargs="+", metavar="TASK", choices=TRANSFER_TASKS,
                        help=f"SentEval transfer tasks (default: {' '.join(TRANSFER_TASKS)})")
    parser.add_argument("--seeds", type=int, default=1, metavar="N", help="seeds of each seeded calibrator")
    parser.add_argument("--classifier", default="auto", choices=["auto", *CLASSIFIERS],
                        help="SentEval's PyTorch logistic regression (CUDA only) or its scikit-learn one (CPU); "
                             "auto: PyTorch with CUDA, else scikit-learn")
    parser.add_argument("--senteval-path", type=Path, default=None,
                        help=f"a SentEval checkout's folder (default: ${SENTEVAL_PATH_ENV}, else an importable senteval)")
    parser.add_argument("--output", type=Path, default=None, metavar="FILE.json", help="write the report as JSON")


def run(args: argparse.Namespace) -> int:
    from flow_plugin.studies.senteval_transfer import run_transfer  # numpy loads when SentEval runs, not to parse

    report = run_transfer(args.backbone, args.data, calibrators=args.calibrators, tasks=args.tasks, seeds=args.seeds,
                          classifier=args.classifier, senteval_path=args.senteval_path, output=args.output,
                          progress=_stderr)
    print(f"SentEval {report.senteval_commit or '(commit unknown)'}, classifier {report.classifier}: {report.params}")
    print("model\tseed\ttask\tacc\tdev acc")
    for row in report.results:
        print(f"{row.model}\t{row.seed if row.seed is not None else '-'}\t{row.task}\t{row.accuracy:.2f}\t"
              f"{row.dev_accuracy:.2f}")
    print(f"{len(report.results)} results in {report.wall_seconds:.0f} s")
    return 0


__all__ = ["configure_parser", "run"]
