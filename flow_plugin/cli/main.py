"""``flow-plugin``: the command line.

Each verb lives in its own module exposing ``configure_parser(parser)`` and
``run(args) -> int``; this file only wires them together. A command imports its own verb's
module and no other (``flow-plugin --help`` none); a verb's module keeps torch, MTEB and other
heavy packages out of its module level, so ``--help`` and an argument error answer at once.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Iterable, Sequence

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


def build_parser(verbs: Iterable[str] | None = None) -> argparse.ArgumentParser:
    """The command line's parser. Every verb is listed with its help; only the ``verbs`` given (all of them when
    None) have their module imported and their options added, so a command loads the modules it runs and no
    other verb's."""
    parser = argparse.ArgumentParser(prog="flow-plugin", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-v info, -vv debug)")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    wanted = set(COMMANDS if verbs is None else verbs)
    for verb, (module_name, help_text) in COMMANDS.items():
        module = None
        if verb in wanted:
            try:
                module = importlib.import_module(module_name)
            except ModuleNotFoundError as error:
                if error.name != module_name:
                    raise
                continue  # a verb whose module is not part of this build
        sub = subparsers.add_parser(verb, help=help_text, description=help_text)
        if module is not None:
            module.configure_parser(sub)
            sub.set_defaults(run=module.run)
    return parser


def invoked_verb(argv: Sequence[str]) -> str | None:
    """The verb ``argv`` names: its first argument that is not an option (``flow-plugin -v eval ...``)."""
    return next((argument for argument in argv if not argument.startswith("-")), None)


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    parser = build_parser([verb] if (verb := invoked_verb(arguments)) in COMMANDS else [])
    args = parser.parse_args(arguments)
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
