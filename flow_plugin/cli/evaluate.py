"""``flow-plugin eval``: registry models × tasks -> MTEB's standard result JSON.

Tasks are our offline SentEval-format STS tasks (the default: all seven), MTEB task names or
MTEB benchmark names (see :mod:`flow_plugin.integrations.mteb.task_lookup`)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from flow_plugin.catalog.tasks import offline_tasks_help



def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-m", "--model", action="append", required=True, metavar="MODEL",
                        help="registry model name, e.g. flow_plugin/minilm-l6-flow (repeatable)")
    parser.add_argument("--data", type=Path, default=None,
                        help="SentEval data folder (the one containing downstream/), needed by the offline tasks "
                             "(default: $FLOW_PLUGIN_SENTEVAL_DATA)")
    parser.add_argument("-t", "--task", action="append", metavar="TASK",
                        help=f"offline task, MTEB task or MTEB benchmark name (repeatable): {offline_tasks_help()}")
    parser.add_argument("--output-folder", type=Path, default=Path("results"),
                        help="MTEB result folder (default: results)")
    parser.add_argument("--fit-corpus", default="target",
                        help="'target' (default), 'inputs', or a text file with one sentence per line")
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:1 ... (default: CUDA if available)")
    parser.add_argument("--precision", default="auto", choices=("auto", "float32", "bf16", "fp16"))
    parser.add_argument("--batch-size", type=int, default=None, help="sentences per backbone forward pass")
    parser.add_argument("--cache-dir", type=Path, default=None,
                        help="on-disk embedding cache (default: $FLOW_PLUGIN_CACHE_DIR, else memory only)")
    parser.add_argument("--overwrite", action="store_true", help="recompute results that already exist")


def evaluate_models(
    models: list[str],
    data: Path | None,
    tasks: Sequence[Any] | None,
    output_folder: Path,
    *,
    model_kwargs: dict[str, Any] | None = None,
    batch_size: int | None = None,
    overwrite: bool = False,
    command: str = "flow-plugin eval",
) -> list[Any]:
    """Run ``mteb.evaluate`` for every model over ``tasks``; return MTEB's results.

    ``tasks`` are offline task names (default: all seven; they read the SentEval folder
    ``data``, else ``$FLOW_PLUGIN_SENTEVAL_DATA``), MTEB task names, MTEB benchmark names or
    MTEB task objects.

    ``model_kwargs`` go to ``mteb.get_model``; MTEB records them as experiment parameters
    (they name a separate result folder), so pass only settings that change the numbers.

    Truncated result files of an interrupted earlier run are set aside first (so MTEB
    recomputes them), and every result this call writes gets a line with its hardware in
    ``<output_folder>/flow-plugin-runs.jsonl``.
    """
    import mteb
    from mteb.cache import ResultCache

    from flow_plugin.integrations.mteb.hook import register
    from flow_plugin._machine import describe_machine
    from flow_plugin.integrations.mteb.results import quarantine_truncated_results, record_run, result_files
    from flow_plugin.integrations.mteb.task_lookup import resolve_tasks
    from flow_plugin.catalog.tasks import OFFLINE_TASKS

    from flow_plugin.catalog.registry import parse_model_name

    register()  # idempotent; makes this work with the start-up hook turned off too
    for model_name in models:  # our registry's error (with close names), not MTEB's hub fallback
        parse_model_name(model_name)
    task_objects = resolve_tasks(list(tasks or OFFLINE_TASKS), data)
    task_names = [task.metadata.name for task in task_objects]
    output = Path(output_folder)
    quarantine_truncated_results(output, models, task_names)
    results = []
    for model_name in models:
        model = mteb.get_model(model_name, **(model_kwargs or {}))
        before = {task: result_files(output, model_name, task) for task in task_names}
        results.append(
            mteb.evaluate(
                model,
                task_objects,
                cache=ResultCache(output),
                overwrite_strategy="always" if overwrite else "only-missing",
                encode_kwargs={"batch_size": batch_size or 64},
                co2_tracker=False,
                show_progress_bar=True,
            )
        )
        backbone = model.encoder.backbone
        hardware = describe_machine(backbone.device, backbone.precision)
        settings = {"batch_size": batch_size or 64, "command": command}
        for task in task_names:
            for path, stamp in result_files(output, model_name, task).items():
                if before[task].get(path) != stamp:
                    record_run(output, path, hardware, settings)
    return results


def run(args: argparse.Namespace) -> int:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if args.cache_dir is not None:  # where embeddings are kept does not change results: not a model kwarg
        from flow_plugin.encoding.cache import CACHE_DIR_ENV

        os.environ[CACHE_DIR_ENV] = str(args.cache_dir)
    kwargs: dict[str, Any] = {}
    if args.device is not None:
        kwargs["device"] = args.device
    if args.precision != "auto":
        kwargs["precision"] = args.precision
    if args.fit_corpus != "target":
        kwargs["fit_corpus"] = args.fit_corpus
    results = evaluate_models(args.model, args.data, args.task, args.output_folder,
                              model_kwargs=kwargs, batch_size=args.batch_size, overwrite=args.overwrite)
    for model_name, model_results in zip(args.model, results):
        for task_result in model_results:
            main = task_result.get_score()
            print(f"{model_name}\t{task_result.task_name}\tcosine_spearman(all)={main:.4f}")
    print(f"results written under {args.output_folder / 'results'}")
    return 0
