"""``flow-plugin export``: a registry model or a local folder with its fitted calibrator -> a sentence-transformers
folder.

One call of :func:`flow_plugin.integrations.sentence_transformers.export_model`; this module
parses the arguments and prints what was written.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from flow_plugin.data.fit_corpus import DEFAULT_DUPLICATES, DUPLICATE_POLICIES
from flow_plugin.cli._options import add_encoder_arguments
from flow_plugin.encoding.options import EncoderOptions
from flow_plugin.leaderboard.ingest.merge import load_leaderboard
from flow_plugin.leaderboard.render.card import benchmark_scores


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", metavar="MODEL", help="flow_plugin/<backbone>-<calibrator> (a registry model, e.g. flow_plugin/minilm-l6-whiten) or "
                             "flow_plugin/<folder>-<calibrator> (a local sentence-transformers folder: "
                             "flow_plugin/./my-model-flow or an absolute path)")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR",
                        help="the folder to write (must not exist, or be empty; see --overwrite)")
    parser.add_argument("--fit-corpus", type=Path, metavar="FILE",
                        help="fit the calibrator on this text file, one sentence per line (as the MTEB model does "
                             "with fit_corpus=FILE)")
    parser.add_argument("--calibrator", type=Path, metavar="PATH",
                        help="take this saved calibrator (Calibrator.save's .npz) instead of fitting one")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an existing model folder at --out (atomically)")
    parser.add_argument("--leaderboard", type=Path, metavar="NAME.json",
                        help="put MODEL's scores from this leaderboard JSON in the model card")
    parser.add_argument("--fit-duplicates", choices=DUPLICATE_POLICIES, default=DEFAULT_DUPLICATES,
                        help="fit on every occurrence of a sentence (keep, default) or on each once (unique)")
    parser.add_argument("--max-fit-sentences", type=int, default=None, metavar="N",
                        help="a larger fit corpus is fitted on a seeded sample of N distinct sentences (default 100000)")
    parser.add_argument("--fit-seed", type=int, default=None, help="seed of that sample (default 0)")
    add_encoder_arguments(parser)
    parser.epilog = ("A registry backbone runs in float32 for the fit unless --precision says otherwise (a local "
                     "folder's model runs as it was saved): the folder computes "
                     "in float32. A linear calibrator loads with SentenceTransformer(DIR) alone; a flow needs "
                     "flow-plugin installed and SentenceTransformer(DIR, trust_remote_code=True).")


def run(args: argparse.Namespace) -> int:
    # sentence-transformers (and torch) load when an export runs, not to parse the command line
    from flow_plugin.integrations.sentence_transformers import export_model

    benchmark = None
    if args.leaderboard is not None:
        benchmark = benchmark_scores(load_leaderboard(args.leaderboard), args.model, board_name=args.leaderboard.name)
    given = {name: getattr(args, name) for name in EncoderOptions.names() if getattr(args, name, None) is not None}
    sampling = {name: getattr(args, name) for name in ("max_fit_sentences", "fit_seed") if getattr(args, name) is not None}
    result = export_model(
        args.model, args.out, fit_corpus=args.fit_corpus, calibrator_path=args.calibrator, overwrite=args.overwrite,
        benchmark=benchmark,
        fit_duplicates=args.fit_duplicates, **sampling, **given,
    )
    print(f"wrote {result.path} ({result.size_bytes / 2**20:.1f} MiB): {result.model} for sentence-transformers")
    print("\n".join(f"  {index}. {line}" for index, line in enumerate(result.modules)))
    if result.fit is not None:
        print(f"  fit: {result.fit.summary()}")
    remote = ", trust_remote_code=True" if result.needs_flow_plugin else ""
    print(f'  load with SentenceTransformer("{result.path}"{remote})'
          + (" (needs flow-plugin installed)" if result.needs_flow_plugin else ""))
    return 0
