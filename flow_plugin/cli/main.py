"""``flow-plugin``: the command line.

Each verb lives in its own module exposing ``configure_parser(parser)`` and
``run(args) -> int``; this file only wires them together. Modules are imported when the
parser is built, so they must import nothing heavy at module level.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys

from flow_plugin.errors import FlowPluginError

#: verb -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "eval": ("flow_plugin.cli.evaluate", "evaluate models (a registry backbone, an MTEB model or a local folder, with a "
                                         "calibrator) on offline or MTEB tasks (MTEB result JSON)"),
    "paper": ("flow_plugin.cli.paper", "run every evaluation of the BERT-flow paper (STS all/wmean, QNLI AUC, lexical, isotropy)"),
    "bench": ("flow_plugin.cli.bench", "run all six variants of a backbone over the 7 STS sets and update its leaderboard"),
    "leaderboard": ("flow_plugin.cli.leaderboard", "build leaderboard JSON, Markdown and PNG from MTEB result folders"),
    "sweep": ("flow_plugin.cli.sweep", "run a sweep file (backbones x calibrators x tasks x fit corpora x seeds) on Ray"),
    "export": ("flow_plugin.cli.export", "write a registry model or a local folder with its fitted calibrator as a "
                                         "sentence-transformers folder"),
    "task-types": ("flow_plugin.cli.task_types", "run a backbone's calibrators over offline tasks of every MTEB type (results + per-item data)"),
    "senteval": ("flow_plugin.cli.senteval", "run SentEval's transfer tasks (MR ... SICK-E) through SentEval's engine, raw and each calibrator"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="flow-plugin", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-v info, -vv debug)")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for verb, (module_name, help_text) in COMMANDS.items():
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as error:
            if error.name != module_name:
                raise
            continue  # a verb whose module is not part of this build
        sub = subparsers.add_parser(verb, help=help_text, description=help_text)
        module.configure_parser(sub)
        sub.set_defaults(run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    level = logging.WARNING if args.verbose == 0 else logging.INFO if args.verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("flow_plugin").setLevel(min(level, logging.INFO))
    # Hugging Face tokenizers' own setting: no tokenizer thread pool next to torch's (set once, here at the edge)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        return int(args.run(args) or 0)
    except FlowPluginError as error:
        print(f"flow-plugin {args.command}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: one line, not a traceback (verbs that keep work say what they kept)
        print(f"flow-plugin {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
