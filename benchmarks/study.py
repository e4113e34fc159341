"""``python -m benchmarks.study``: what a task-types study and a calibrated ``mteb run`` cost, stage by stage.

Two measurements, each of whole commands run as a user runs them (one process tree each, sampled every half
second for its memory and CPU):

``study``
    ``flow-plugin task-types`` on a backbone (its tasks and calibrators as given): wall and CPU seconds, each
    stage's share (encode, fit, evaluate: the study file's own account), the peak memory of the process tree and
    how busy the cores were. With ``--baseline-python`` the same study runs with another environment first (an
    older checkout: its own ``python``), and the report gives the ratios of the two, measured in one run.
``mteb-run``
    ``mteb run`` of the backbone's raw model and of a calibrated one on one labelled task of each type: the
    calibrated run's wall time over the raw run's (``--runs`` repeats each, the median counts), and the main
    scores. With ``--mteb-run-fit-corpus`` the calibrated models get that ``fit_corpus`` (``eval-splits``, say), and
    every run, raw included, goes through ``mteb.evaluate`` (``mteb run`` takes no loader arguments).

The report goes to ``benchmarks/results/study-<date>-<cpu>.json`` and ``.md`` (``--output-dir``), with the
machine and the load average, and names each result whose score differs from the baseline's; ``--keep-folder``
keeps both studies' output (results, per-item and fit files) to compare them further. Targets (issue "a whole
board in 20 minutes"): mpnet-base's board at most 20 minutes wall, minilm-l6's at most 8, peak memory at most
6 GB, a calibrated ``mteb run`` at most 1.15 times the raw one.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks.harness import describe_machine, load_average
from flow_plugin._io import atomic_write_json, atomic_write_text

#: one labelled task of each MTEB type (the calibrated mteb run's cost is measured on each)
ONE_PER_TYPE = {"Classification": "FlowPluginTRECClassification",
                "PairClassification": "FlowPluginMRPCPairClassification",
                "Clustering": "FlowPluginTRECClustering", "Reranking": "FlowPluginQNLIReranking",
                "Retrieval": "FlowPluginQNLIRetrieval"}
TARGETS = {"mpnet-base study wall (s)": 20 * 60, "minilm-l6 study wall (s)": 8 * 60, "peak memory (GiB)": 6.0,
           "calibrated / raw mteb run": 1.15}


def say(message: str) -> None:
    print(f"[study-bench] {message}", flush=True)


def run_sampled(command: list[str], env: dict[str, str], cwd: Path) -> dict[str, Any]:
    """Run ``command``; its wall seconds, the CPU seconds of its process tree (the kernel's account of the
    command and every descendant it waited for, as ``time`` gives it), the tree's peak memory (sampled every 0.5 s)
    and the share of the cores it kept busy."""
    import psutil

    started = time.perf_counter()
    # stderr goes to a file, not a pipe: a long study's progress lines would fill a pipe nobody reads until the
    # end, and the study would wait on its write forever
    log = tempfile.TemporaryFile(mode="w+", encoding="utf-8", dir=cwd)
    process = subprocess.Popen(command, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=log, text=True)
    root = psutil.Process(process.pid)
    peak = 0
    while True:
        pid, status, usage = os.wait4(process.pid, os.WNOHANG)  # reaps it once it ended: its own and its children's CPU
        if pid:
            break
        try:
            tree = [root, *root.children(recursive=True)]
            peak = max(peak, sum(p.memory_info().rss for p in tree if p.is_running()))
        except psutil.Error:
            pass
        time.sleep(0.5)
    process.returncode = os.waitstatus_to_exitcode(status)
    log.seek(0)
    stderr = log.read()
    log.close()
    wall = time.perf_counter() - started
    cpu = usage.ru_utime + usage.ru_stime
    if process.returncode != 0:
        raise RuntimeError(f"{' '.join(command[:4])} ... failed ({process.returncode}): {stderr[-2000:]}")
    return {"wall_seconds": round(wall, 1), "cpu_seconds": round(cpu, 1), "peak_gib": round(peak / 2**30, 2),
            "core_use": round(cpu / wall / (os.cpu_count() or 1), 2)}


def study(python: str, backbone: str, data: Path, tasks: list[str] | None, calibrators: list[str] | None,
          seeds: int, extra: list[str], folder: Path) -> dict[str, Any]:
    """One ``task-types`` study with ``python``: its cost, and the study file's per-stage account."""
    command = [python, "-m", "flow_plugin.cli.main", "task-types", "-b", backbone, "--data", str(data),
               "--seeds", str(seeds), "--output-folder", str(folder), *extra]
    if tasks:
        command += ["--tasks", *tasks]
    if calibrators:
        command += ["--calibrators", *calibrators]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env.pop("FLOW_PLUGIN_CACHE_DIR", None)
    say(f"study: {' '.join(command[1:])}")
    measured = run_sampled(command, env, folder.parent)
    recorded = json.loads((folder / "task-types-study.json").read_text(encoding="utf-8"))
    measured["stages"] = recorded.get("stages")
    measured["results"] = len(recorded.get("steps", []))
    measured["scores"] = {f"{step['model']} | {step['task']} | {step.get('seed')}": step["score"]
                          for step in recorded.get("steps", [])
                          if step.get("score") is not None and step.get("evaluator_seed", 42) == 42}
    return measured


def score_agreement(baseline: dict[str, float], study: dict[str, float]) -> dict[str, Any]:
    """How the scores both studies computed compare (same model, task and seed; MTEB's evaluator seed 42):
    how many, how many are equal, and the largest difference (0-1 scale).

    >>> score_agreement({"a": 0.5, "b": 0.25}, {"a": 0.5, "b": 0.2501, "c": 1.0})
    {'compared': 2, 'equal': 1, 'max_abs_difference': 0.0001, 'differing': {'b': [0.25, 0.2501]}}
    """
    common = sorted(set(baseline) & set(study))
    differences = [abs(study[key] - baseline[key]) for key in common]
    return {"compared": len(common), "equal": sum(difference == 0 for difference in differences),
            "max_abs_difference": round(max(differences, default=0.0), 6),
            "differing": {key: [baseline[key], study[key]] for key in common if study[key] != baseline[key]}}


#: one evaluation as ``mteb run`` makes it, with loader arguments (which ``mteb run`` cannot pass): argv is the
#: model name, the task, the output folder and the loader arguments as JSON
_EVALUATE = """import json, sys, mteb
from mteb.cache import ResultCache
model = mteb.get_model(sys.argv[1], **json.loads(sys.argv[4]))
mteb.evaluate(model, mteb.get_tasks(tasks=[sys.argv[2]]), cache=ResultCache(sys.argv[3]), co2_tracker=False)
"""


def _run_command(model: str, task: str, out: Path, arguments: dict[str, Any] | None) -> list[str]:
    """``mteb run`` itself; with loader ``arguments``, the same evaluation through ``mteb.evaluate``."""
    if arguments is None:
        return ["mteb", "run", "-m", model, "-t", task, "--output-folder", str(out), "--no-co2-tracker"]
    return [sys.executable, "-c", _EVALUATE, model, task, str(out), json.dumps(arguments)]


def _main_score(out: Path, task: str) -> float | None:
    for path in out.rglob(f"{task}.json"):
        scores = json.loads(path.read_text(encoding="utf-8"))["scores"]
        return round(100 * next(iter(scores.values()))[0]["main_score"], 2)
    return None


def mteb_runs(backbone: str, calibrators: list[str], data: Path, repeats: int, folder: Path,
              fit_corpus: str | None = None, types: list[str] | None = None) -> dict[str, Any]:
    """Each calibrated ``mteb run`` of one task per type over the raw one (wall seconds, median of repeats), and
    the main scores; ``fit_corpus`` gives the calibrated models that loader argument."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "FLOW_PLUGIN_SHARED_DATA": str(data)}
    env.pop("FLOW_PLUGIN_CACHE_DIR", None)
    folder.mkdir(parents=True, exist_ok=True)
    found: dict[str, Any] = {}
    for kind, task in ONE_PER_TYPE.items():
        if types and kind not in types:
            continue
        walls: dict[str, list[float]] = {name: [] for name in ("raw", *calibrators)}
        scores: dict[str, float | None] = {}
        for repeat in range(repeats):
            for name in walls:  # alternated, so that a burst of load hits every model alike
                model = f"flow_plugin/{backbone}" + ("" if name == "raw" else f"-{name}")
                out = folder / f"{kind}-{name}-{repeat}"
                # with a fit corpus every run (raw too) takes the mteb.evaluate route, so a ratio compares like with like
                arguments = None if fit_corpus is None else {} if name == "raw" else {"fit_corpus": fit_corpus}
                command = _run_command(model, task, out, arguments)
                walls[name].append(run_sampled(command, env, folder)["wall_seconds"])
                scores[name] = _main_score(out, task)
        raw = statistics.median(walls["raw"])
        found[kind] = {"task": task, "raw_seconds": raw, "raw_score": scores["raw"], "calibrated": {
            name: {"seconds": statistics.median(walls[name]), "ratio": round(statistics.median(walls[name]) / raw, 3),
                   "score": scores[name]}
            for name in calibrators}}
        say(f"mteb run {kind} ({task}): raw {raw:.1f} s, " + ", ".join(
            f"{name} {entry['seconds']:.1f} s ({entry['ratio']:.2f}x)" for name, entry in found[kind]["calibrated"].items()))
    return found


@contextlib.contextmanager
def _scratch(kept: Path | None) -> Iterator[Path]:
    """The folder the commands run in: ``kept`` (created, left in place), else a temporary one."""
    if kept is not None:
        kept.mkdir(parents=True)
        yield kept
        return
    with tempfile.TemporaryDirectory(prefix="study-bench-") as scratch:
        yield Path(scratch)


def report_markdown(report: dict[str, Any]) -> str:
    """The report as Markdown."""
    machine = report["machine"]
    lines = [f"# Study and calibrated mteb run cost on {machine.get('cpu_model', 'this CPU')} ({report['date']})", "",
             f"- CPU: {machine.get('cpu_model')} ({machine.get('cpu_family') or 'family unknown'}), "
             f"{machine.get('logical_cores')} logical cores; load average at start "
             f"{report['load_average_start']}, at end {report['load_average_end']}",
             f"- command: `{report['command']}`", ""]
    for name in ("baseline", "study"):
        found = report.get(name)
        if not found:
            continue
        lines += [f"## {name}", "", "| wall s | CPU s | peak GiB | core use | results |", "|---:|---:|---:|---:|---:|",
                  f"| {found['wall_seconds']} | {found['cpu_seconds']} | {found['peak_gib']} | {found['core_use']} | "
                  f"{found.get('results')} |", ""]
        if found.get("stages"):
            lines += ["| stage | wall s (summed over workers) | CPU s |", "|---|---:|---:|"]
            lines += [f"| {stage} | {spent['wall']} | {spent['cpu']} |" for stage, spent in found["stages"].items()]
            lines.append("")
    if report.get("ratios"):
        lines += ["## Ratios (this code over the baseline, one run)", ""]
        lines += [f"- {key}: {value}" for key, value in report["ratios"].items()] + [""]
    if report.get("scores"):
        found = report["scores"]
        lines += [f"Scores of both (same model, task and seed; evaluator seed 42): {found['equal']} of "
                  f"{found['compared']} equal, largest difference {found['max_abs_difference']} (0-1 scale)", ""]
        lines += [f"- {key}: {old} -> {new}" for key, (old, new) in found.get("differing", {}).items()]
        lines += [""] if found.get("differing") else []
    if report.get("mteb_run"):
        names = list(next(iter(report["mteb_run"].values()))["calibrated"])
        lines += ["## A calibrated mteb run over the raw one (wall seconds, median of the repeats; ratio to raw)", "",
                  "| type | task | raw s | " + " | ".join(names) + " |", "|---|---|---:|" + "---:|" * len(names)]
        lines += [f"| {kind} | {found['task']} | {found['raw_seconds']} | " + " | ".join(
            f"{entry['seconds']} ({entry['ratio']}×)" for entry in found["calibrated"].values()) + " |"
            for kind, found in report["mteb_run"].items()] + [""]
        if "raw_score" in next(iter(report["mteb_run"].values())):
            lines += ["Main scores (×100) of those runs:", "", "| task | raw | " + " | ".join(names) + " |",
                      "|---|---:|" + "---:|" * len(names)]
            lines += [f"| {found['task']} | {found['raw_score']} | " + " | ".join(
                str(entry["score"]) for entry in found["calibrated"].values()) + " |"
                for found in report["mteb_run"].values()] + [""]
    lines += ["Targets: " + ", ".join(f"{key} ≤ {value}" for key, value in TARGETS.items()), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.study", description=__doc__.split("\n\n")[0])
    parser.add_argument("--backbone", default="minilm-l6")
    parser.add_argument("--data", type=Path, default=Path(os.environ.get("FLOW_PLUGIN_SHARED_DATA", "../shared/data")))
    parser.add_argument("--tasks", nargs="+", default=None, help="a subset of the study's tasks (default: all)")
    parser.add_argument("--calibrators", nargs="+", default=None, help="the study's rows (default: its own)")
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--baseline-python", default=None,
                        help="the python of an older checkout's environment: its study runs first, for the ratios")
    parser.add_argument("--baseline-args", type=shlex.split, default=[],
                        help="extra arguments of the baseline's study, as one string (--baseline-args='--x 1')")
    parser.add_argument("--study-args", type=shlex.split, default=[],
                        help="extra arguments of this code's study, as one string (--study-args='--evaluator-seeds 1': "
                             "the baseline's work)")
    parser.add_argument("--mteb-run-calibrators", nargs="*", default=["whiten"],
                        help="the calibrators of the calibrated mteb runs (none: skip them)")
    parser.add_argument("--mteb-run-fit-corpus", default=None,
                        help="the calibrated runs' fit_corpus (e.g. eval-splits); every run then goes through "
                             "mteb.evaluate, which takes loader arguments")
    parser.add_argument("--mteb-run-types", nargs="+", default=None, choices=list(ONE_PER_TYPE),
                        help="the task types of the mteb runs (default: all)")
    parser.add_argument("--runs", type=int, default=1, help="repeats of each mteb run (the median counts)")
    parser.add_argument("--skip-study", action="store_true")
    parser.add_argument("--output-dir", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--keep-folder", type=Path, default=None,
                        help="run in this (new) folder and keep both studies' output there (default: a temporary one)")
    args = parser.parse_args(argv)
    if not args.data.is_dir():
        print(f"benchmarks.study: no data folder {args.data}: give --data the shared data folder", file=sys.stderr)
        return 2
    machine = describe_machine()
    report: dict[str, Any] = {"date": time.strftime("%Y-%m-%d"), "machine": machine,
                              "command": "python -m benchmarks.study " + " ".join(argv or sys.argv[1:]),
                              "load_average_start": load_average()}
    if args.keep_folder is not None and args.keep_folder.exists():
        print(f"benchmarks.study: {args.keep_folder} exists: give --keep-folder a new folder", file=sys.stderr)
        return 2
    with _scratch(args.keep_folder) as folder:
        if args.baseline_python and not args.skip_study:
            report["baseline"] = study(args.baseline_python, args.backbone, args.data, args.tasks, args.calibrators,
                                       args.seeds, args.baseline_args, folder / "baseline")
        if not args.skip_study:
            report["study"] = study(sys.executable, args.backbone, args.data, args.tasks, args.calibrators,
                                    args.seeds, args.study_args, folder / "study")
        if report.get("baseline") and report.get("study"):
            report["ratios"] = {key: round(report["study"][key] / report["baseline"][key], 3)
                                for key in ("wall_seconds", "cpu_seconds", "peak_gib")}
            report["scores"] = score_agreement(report["baseline"].pop("scores"), report["study"]["scores"])
        for side in ("baseline", "study"):
            report.get(side, {}).pop("scores", None)
        if args.mteb_run_calibrators:
            report["mteb_run"] = mteb_runs(args.backbone, args.mteb_run_calibrators, args.data, args.runs,
                                           folder / "mteb-run", args.mteb_run_fit_corpus,
                                           args.mteb_run_types)
    report["load_average_end"] = load_average()
    args.output_dir.mkdir(parents=True, exist_ok=True)
    cpu = str(machine.get("cpu_model", "cpu")).lower().replace(" ", "-")[:24]
    fit = f"-fit-{args.mteb_run_fit_corpus}" if args.mteb_run_fit_corpus else ""
    backbone = Path(args.backbone).name if os.path.isdir(args.backbone) else args.backbone.replace("/", "__")
    stem = args.output_dir / f"study-{report['date']}-{backbone}-{cpu}{fit}"
    atomic_write_json(stem.with_suffix(".json"), report)
    atomic_write_text(stem.with_suffix(".md"), report_markdown(report))
    say(f"written {stem}.json and .md")
    print(report_markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
