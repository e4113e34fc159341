"""``flow-plugin bench``: parses the arguments of :func:`flow_plugin.studies.bench.run_bench`
and prints its report.

    flow-plugin bench -b minilm-l6 --data ../shared/data/senteval
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from flow_plugin.data.tasks import offline_tasks_help
from flow_plugin.cli._options import add_encoder_arguments, encoder_options
from flow_plugin.data.fit_corpus import DEFAULT_DUPLICATES, DUPLICATE_POLICIES, TARGET
from flow_plugin.studies.bench import default_leaderboard, run_bench
from flow_plugin.cli.leaderboard import print_update



def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# ------------------------------------------------------------------------- command line
def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-b", "--backbone", required=True, help="registry backbone, e.g. minilm-l6 (registry/*.toml)")
    parser.add_argument("--data", type=Path, default=None,
                        help="SentEval data folder (the one containing downstream/), or the data folder holding "
                             "senteval/ (default: $FLOW_PLUGIN_SHARED_DATA)")
    parser.add_argument("--output-folder", type=Path, default=Path("results"),
                        help="MTEB output folder; results go to <folder>/results (default: results)")
    parser.add_argument("--leaderboard", type=Path, default=None, metavar="NAME.json",
                        help="leaderboard to update (default: leaderboards/<backbone>.json; a local folder by its own name, "
                             "an MTEB name org/name as org__name)")
    parser.add_argument("--no-leaderboard", action="store_true", help="only compute results")
    parser.add_argument("--tasks", nargs="+", metavar="TASK",
                        help=offline_tasks_help())
    parser.add_argument("--calibrators", nargs="+", metavar="NAME",
                        help="raw sn natsv sn-natsv whiten flow (the default: these six), or flow variants "
                        "(flow-lu flow-affine flow-glow flow-white flow-es flow-ens), or 'all'")
    parser.add_argument("--seeds", type=int, default=1, metavar="N",
                        help="run each seeded calibrator (the flow and its variants) with N seeds: its default "
                        "(1234) and the next N-1; the leaderboard shows their mean ± standard deviation")
    parser.add_argument("--fit-corpus", default=TARGET,
                        help="what the calibrators are fitted on: 'target' (each task's own sentences, the default), "
                        "'eval-splits' (those of its evaluation splits only), "
                        "'per-call' (each encode() call on its own; warns), or a text file with one sentence per line (e.g. NLI sentences: the paper's "
                        "'flow (NLI)')")
    parser.add_argument("--fit-duplicates", default=DEFAULT_DUPLICATES, choices=DUPLICATE_POLICIES,
                        help="fit on every occurrence of a sentence (keep, the official code's way) or on each "
                        "distinct sentence once (unique)")
    add_encoder_arguments(parser)  # --cache-dir defaults to $FLOW_PLUGIN_CACHE_DIR, else <output-folder>/embedding-cache
    parser.add_argument("--overwrite", action="store_true",
                        help="recompute finished results (the leaderboard merge then checks they reproduce)")
    parser.add_argument("--replace", action="store_true",
                        help="let new results replace contradicting leaderboard scores (listed) instead of failing")
    parser.add_argument("--fail-fast", action="store_true", help="stop at the first failing task")


def run(args: argparse.Namespace) -> int:
    leaderboard = None if args.no_leaderboard else (args.leaderboard or default_leaderboard(args.backbone))

    report = run_bench(
        args.backbone, args.data, output_folder=args.output_folder, leaderboard=leaderboard, tasks=args.tasks,
        calibrators=args.calibrators, options=encoder_options(args), seeds=args.seeds, fit_corpus=args.fit_corpus,
        fit_duplicates=args.fit_duplicates, overwrite=args.overwrite, replace=args.replace, fail_fast=args.fail_fast,
        progress=_stderr,
    )
    if report.interrupted:
        kept = len(report.computed) + len(report.skipped)
        print(f"bench {report.backbone}: interrupted; {kept} of {len(report.runs) * len(report.tasks)} results are "
              f"kept in {report.output_folder / 'results'} ({len(report.computed)} computed this run), the one being "
              "computed was dropped, the leaderboard was not updated; rerun the same command to resume",
              file=sys.stderr)
        return 130
    encoded = ("" if report.n_encoded is None else
               f"backbone encoded {report.n_encoded} sentences, {report.n_cache_hits} served from the ")
    print(
        f"bench {report.backbone}: {len(report.computed)} computed, {len(report.skipped)} already done, "
        f"{len(report.failed)} failed in {report.wall_seconds:.1f} s; {encoded}embedding cache {report.cache_dir}"
    )
    for outcome in report.failed:
        print(f"  FAILED {outcome.model} × {outcome.task}: {outcome.error}")
    if report.leaderboard is not None:
        print_update(report.leaderboard)
    if report.failed:
        print("rerun the same command to retry the failed tasks (finished ones are not recomputed)")
        return 1
    return 0


__all__ = ["configure_parser", "run"]
