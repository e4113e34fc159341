"""flow-plugin's encoder beside the encoders a user could pick instead, in one run:
``python -m benchmarks.peers`` (or ``python -m benchmarks.perf --sections peers``).

The backends (:data:`PEERS`): flow-plugin's ``Backbone`` with its defaults (``precision="auto"``), forced
float32, forced bf16 and the explicit int8 option; sentence-transformers on torch in float32 and bf16, on ONNX
Runtime (the plain export, optimum's O3 graph optimisation, dynamic int8 for the CPU's integer instructions)
and on OpenVINO (plain, and static int8 calibrated on STS-B train sentences).

The workload: all-MiniLM-L6-v2 (``--model``), the STS-B test set (1,379 pairs = 2,758 sentences), batch 64,
64 word pieces, 2 threads, each backend in its own process (:mod:`benchmarks.peer_worker`), loaded and warmed
up before any timing; then ``--rounds`` rounds (default 3), each of which asks every backend in turn to encode
all the sentences once, in an order rotated from round to round, so that load from other processes falls on
all backends alike. Per backend: the median sentences/s over rounds and their spread, the load average when
each round started, and the STS-B Spearman (cosine, x 100) of its embeddings, so that a faster but worse path
shows. A backend whose packages are missing is reported with the reason, not silently left out.

**The environments.** sentence-transformers' ``onnx`` extra (optimum-onnx + onnxruntime) and its
``openvino`` extra (optimum-intel + openvino) cannot share one environment, and neither can flow-plugin's:
optimum-onnx pins transformers below 4.58 while sentence-transformers 6 and flow-plugin run on transformers 5,
and optimum-intel pins its own transformers (and brings a torchvision built for the CUDA torch, removed again). So the flow-plugin and sentence-transformers torch
backends run in this process's environment (flow-plugin's ``perf`` extra), and the ONNX and OpenVINO ones in
two virtual environments of their own, which ``--create-venvs`` makes (:func:`venv_commands` gives the exact
commands; torch is pinned in them so that pip does not fetch another torch build) or which the user names with
``--onnx-python`` / ``--openvino-python``. The exports (ONNX, O3, int8, OpenVINO) are made once from the local
model folder into ``--exports`` and reused.

The result is written to ``--output-dir`` (default ``benchmarks/results/``) as JSON and as a Markdown table,
with the machine described (CPU, flags, cores, library versions of every environment, date, load).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import selectors
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.harness import (
    REPO_ROOT,
    WORKER_ENV,
    Runner,
    data_root,
    describe_machine,
    load_average,
    say,
    stsb_workload,
)

#: The environments a backend can run in: this one, or one of the peers' own virtual environments.
ENVIRONMENTS = ("project", "onnx", "openvino")
#: What each peer environment installs besides torch: its sentence-transformers extra (pip picks the newest
#: sentence-transformers whose extra resolves: 5.7 for ONNX on this registry, whose optimum-onnx 0.1 needs
#: transformers < 4.58), and for OpenVINO ``datasets`` (the int8 calibration set), resolved together.
ENVIRONMENT_PACKAGES: dict[str, tuple[str, ...]] = {
    "onnx": ("sentence-transformers[onnx]",),
    "openvino": ("sentence-transformers[openvino]", "datasets"),
}
#: The torch every environment gets first (the local CPU build: any other specification pulls CUDA packages).
TORCH_REQUIREMENT = "torch==2.13.0"
#: How far from the reference's Spearman (x 100), either way, a backend still counts as of equal quality (a
#: quantized path that scores higher on one test set has not kept the model's quality either: it changed it).
EQUAL_QUALITY_POINTS = 0.1
#: The backend whose Spearman is the reference: the model as its authors run it.
REFERENCE = "sentence-transformers torch float32"
#: flow-plugin's default, the one that must win.
DEFAULT = "flow-plugin auto"


@dataclass(frozen=True)
class Peer:
    """One backend: its name (a key of :data:`benchmarks.peer_worker.BACKENDS`) and its environment."""

    name: str
    environment: str
    explicit_option: bool = False  # an opt-in of lower quality (int8): never a default


PEERS: tuple[Peer, ...] = (
    Peer("flow-plugin auto", "project"),
    Peer("flow-plugin float32", "project"),
    Peer("flow-plugin bf16", "project"),
    Peer("flow-plugin int8", "project", explicit_option=True),
    Peer("sentence-transformers torch float32", "project"),
    Peer("sentence-transformers torch bf16", "project"),
    Peer("sentence-transformers onnx", "onnx"),
    Peer("sentence-transformers onnx O3", "onnx"),
    Peer("sentence-transformers onnx int8", "onnx"),
    Peer("sentence-transformers openvino", "openvino"),
    Peer("sentence-transformers openvino int8", "openvino"),
)


# =========================================================================== environments
def peers_cache_dir() -> Path:
    """``perf-peers/`` in the user's cache folder: the peer environments (``venvs/``) and exports (``exports/``)."""
    from flow_plugin._io import user_cache_dir

    return user_cache_dir() / "perf-peers"


def default_venv_folder(environment: str) -> Path:
    """Where ``--create-venvs`` puts a peer environment."""
    return peers_cache_dir() / "venvs" / environment


def venv_commands(environment: str, folder: Path, base_python: str = "python3") -> list[list[str]]:
    """The commands that make the peer environment ``environment`` in ``folder``: a virtual environment,
    the local CPU torch first, then sentence-transformers' extra with torch pinned to the same version (so
    that the extra's requirements cannot replace it by a CUDA build).

    >>> [" ".join(command) for command in venv_commands("onnx", Path("/v/onnx"))]  # doctest: +NORMALIZE_WHITESPACE
    ['python3 -m venv /v/onnx', '/v/onnx/bin/python -m pip install torch==2.13.0',
     '/v/onnx/bin/python -m pip install torch==2.13.0 sentence-transformers[onnx]']
    """
    python = str(folder / "bin" / "python")
    commands = [[base_python, "-m", "venv", str(folder)],
                [python, "-m", "pip", "install", TORCH_REQUIREMENT],
                [python, "-m", "pip", "install", TORCH_REQUIREMENT, *ENVIRONMENT_PACKAGES[environment]]]
    if environment == "openvino":
        # optimum-intel requires torchvision, whose registry wheel is built for the CUDA torch of its version: next to
        # the CPU torch its operators fail to register and transformers then cannot import its auto classes. Text
        # models never use it.
        commands.append([python, "-m", "pip", "uninstall", "-y", "torchvision"])
    return commands


def create_venv(environment: str, folder: Path) -> None:
    """Run :func:`venv_commands` (minutes: the packages come from the registry)."""
    for command in venv_commands(environment, folder):
        say("peers: " + " ".join(command))
        subprocess.run(command, check=True)


def environment_pythons(named: dict[str, str | None], *, create: bool = False) -> dict[str, str | None]:
    """The Python of each environment: this one for ``project``; for a peer environment the one named
    (``--onnx-python``), else ``$FLOW_PLUGIN_PEERS_<NAME>_PYTHON``, else the default folder's when it exists
    (made first with ``create``); ``None`` where there is none."""
    pythons: dict[str, str | None] = {"project": sys.executable}
    for environment in ENVIRONMENTS[1:]:
        given = named.get(environment) or os.environ.get(f"FLOW_PLUGIN_PEERS_{environment.upper()}_PYTHON")
        if given:
            pythons[environment] = given
            continue
        folder = default_venv_folder(environment)
        if create and not (folder / "bin" / "python").exists():
            create_venv(environment, folder)
        pythons[environment] = str(folder / "bin" / "python") if (folder / "bin" / "python").exists() else None
    return pythons


# =========================================================================== the schedule and its summary
def round_orders(names: Sequence[str], rounds: int) -> list[list[str]]:
    """The order the backends encode in, round by round: rotated by one each round, so that each backend
    is first (and last) as often as the others.

    >>> round_orders(["a", "b", "c"], 4)
    [['a', 'b', 'c'], ['b', 'c', 'a'], ['c', 'a', 'b'], ['a', 'b', 'c']]
    """
    names = list(names)
    return [names[r % len(names):] + names[: r % len(names)] if names else [] for r in range(rounds)]


def summarize(n_sentences: int, seconds: dict[str, list[float]], spearman_points: dict[str, float | None],
              explicit: Sequence[str] = (), reference: str = REFERENCE, default: str = DEFAULT) -> dict[str, Any]:
    """Rates, spreads, quality and the verdict from each backend's seconds per round.

    Per backend: ``sentences_per_second`` (the median round), ``min``/``max`` over rounds, the per-round ratio
    to the default (both timed in the same round: the ratio is steadier than either rate under load, and its
    median is reported), and Spearman minus the reference's. A backend is of equal quality when its Spearman
    is within :data:`EQUAL_QUALITY_POINTS` of the reference's; the verdict compares the default with the
    fastest other backend of equal quality that is not an explicit lower-precision option (``explicit``).

    >>> s = summarize(100, {"ours": [1.0, 1.0], "st": [2.0, 4.0], "q8": [0.5, 0.5]}, {"ours": 82.0, "st": 82.0,
    ...               "q8": 81.8}, explicit=["q8"], reference="st", default="ours")
    >>> s["backends"]["st"]["sentences_per_second"], s["backends"]["st"]["default_over_this"], s["verdict"]["wins"]
    (37.5, 3.0, True)
    >>> s["backends"]["q8"]["equal_quality"], s["verdict"]["fastest_equal_quality_peer"]
    (False, 'st')
    """
    reference_points = spearman_points.get(reference)
    backends: dict[str, Any] = {}
    for name, times in seconds.items():
        rates = [n_sentences / value for value in times]
        points = spearman_points.get(name)
        delta = None if points is None or reference_points is None else points - reference_points
        ratios = [own / other for own, other in zip(times, seconds.get(default, []))] if default in seconds else []
        backends[name] = {
            "sentences_per_second": round(statistics.median(rates), 1),
            "min_sentences_per_second": round(min(rates), 1),
            "max_sentences_per_second": round(max(rates), 1),
            "seconds_per_round": [round(value, 3) for value in times],
            "default_over_this": round(statistics.median(ratios), 3) if ratios else None,
            "default_over_this_per_round": [round(value, 3) for value in ratios],
            "stsb_spearman": None if points is None else round(points, 3),
            "spearman_minus_reference": None if delta is None else round(delta, 3),
            "equal_quality": None if delta is None else abs(delta) <= EQUAL_QUALITY_POINTS,
            "explicit_option": name in explicit,
        }
    contenders = {name: entry for name, entry in backends.items()
                  if name != default and entry["equal_quality"] and not entry["explicit_option"]
                  and not name.startswith("flow-plugin")}
    fastest = max(contenders, key=lambda name: contenders[name]["sentences_per_second"], default=None)
    verdict: dict[str, Any] = {"default": default, "reference": reference, "fastest_equal_quality_peer": fastest}
    if fastest is not None and default in backends:
        ratio = backends[fastest]["default_over_this"]
        verdict |= {"default_over_fastest_peer": ratio,
                    "default_over_fastest_peer_per_round": backends[fastest]["default_over_this_per_round"],
                    "wins": bool(ratio is not None and ratio >= 1.0),
                    "wins_every_round": all(value >= 1.0 for value in backends[fastest]["default_over_this_per_round"])}
    fastest_any = max(backends, key=lambda name: backends[name]["sentences_per_second"], default=None)
    verdict["fastest_of_all"] = fastest_any
    return {"backends": backends, "verdict": verdict}


# =========================================================================== the workers
class PeerProcess:
    """One backend's worker process (:mod:`benchmarks.peer_worker`) and its line protocol."""

    def __init__(self, peer: Peer, python: str, arguments: list[str], log: Path, timeout: float) -> None:
        self.peer, self.log_path, self.timeout = peer, log, timeout
        self._buffer = b""
        env = {**os.environ, **WORKER_ENV}
        env.pop("FLOW_PLUGIN_CACHE_DIR", None)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
        self._log = open(log, "wb")  # noqa: SIM115 -- open for the process's whole life
        self.process = subprocess.Popen([python, "-m", "benchmarks.peer_worker", "--backend", peer.name, *arguments],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, cwd=REPO_ROOT,
                                        env=env)

    def answer(self, timeout: float | None = None) -> dict[str, Any]:
        """The next ``@@ {json}`` line; an error when the process ends or ``timeout`` passes first."""
        assert self.process.stdout is not None
        deadline = time.monotonic() + (timeout or self.timeout)
        selector = selectors.DefaultSelector()
        selector.register(self.process.stdout, selectors.EVENT_READ)
        try:
            while True:
                while b"\n" in self._buffer:
                    line, self._buffer = self._buffer.split(b"\n", 1)
                    if line.startswith(b"@@ "):
                        return json.loads(line[3:])
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{self.peer.name}: no answer within {timeout or self.timeout:.0f} s")
                if selector.select(left):
                    chunk = os.read(self.process.stdout.fileno(), 65536)
                    if not chunk:
                        raise RuntimeError(f"{self.peer.name}: the worker ended ({self.process.wait()}); "
                                           f"log {self.log_path}: {self.log_tail()}")
                    self._buffer += chunk
        finally:
            selector.close()

    def send(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write((line + "\n").encode())
        self.process.stdin.flush()

    def log_tail(self, characters: int = 600) -> str:
        try:
            return " ".join(self.log_path.read_text(encoding="utf-8", errors="replace")[-characters:].split())
        except OSError:
            return ""

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                self.send("quit")
                self.process.wait(timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()
        self._log.close()


def spearman_points(embeddings: Any, gold: Sequence[float]) -> float:
    """STS Spearman x 100 of the cosines of the pairs (first half against second half of ``embeddings``)."""
    from flow_plugin.evaluation.sts import paired_cosine, spearman

    n = len(gold)
    return 100 * spearman(paired_cosine(embeddings[:n], embeddings[n:]), list(gold))


def run_peers(args: argparse.Namespace) -> dict[str, Any]:
    """Start every backend, time the rounds, compute quality and the verdict: the report (a dict)."""
    import numpy as np

    from benchmarks.harness import model_location

    from flow_plugin.errors import DataFolderError

    data = data_root(args.data)
    try:
        sentences, gold, calibration = stsb_workload(data, args.pairs)
    except DataFolderError as error:
        raise SystemExit(f"benchmarks.peers: no STS-B data ({error}): give --data the SentEval data folder (the one "
                         "holding downstream/), or set FLOW_PLUGIN_SHARED_DATA to the data folder holding senteval/") from None
    location, pooling = model_location(args.model)
    wanted = [name.strip() for name in args.backends.split(",")] if args.backends else [peer.name for peer in PEERS]
    unknown = sorted(set(wanted) - {peer.name for peer in PEERS})
    if unknown:
        raise SystemExit(f"benchmarks.peers: unknown backend(s) {', '.join(unknown)}; "
                         f"choose from {', '.join(peer.name for peer in PEERS)}")
    peers = [peer for peer in PEERS if peer.name in wanted]
    pythons = environment_pythons({"onnx": args.onnx_python, "openvino": args.openvino_python},
                                  create=args.create_venvs)
    started = datetime.datetime.now(datetime.timezone.utc)
    report: dict[str, Any] = {
        "format": "flow-plugin-peers", "version": 1,
        "command": " ".join(getattr(args, "command_line", None) or ["python", "-m", "benchmarks.peers", *sys.argv[1:]]),
        "started": started.isoformat(timespec="seconds"),
        "machine": describe_machine(args.threads),
        # names, never machine paths: a results file is published
        "workload": {"model": args.model, "location": Path(location).parent.name + "/" + Path(location).name,
                     "pooling": pooling, "set": "STS-B test",
                     "pairs": len(gold), "sentences": len(sentences), "batch_size": args.batch_size,
                     "max_length": args.max_length, "threads": args.threads, "rounds": args.rounds},
        "environments": {name: ("this process's" if name == "project" else "own virtual environment")
                         if python else None for name, python in pythons.items()},
        "backends": {}, "missing": {}, "rounds": [],
    }
    folder = Path(tempfile.mkdtemp(prefix="flow-plugin-peers-"))
    inputs = folder / "sentences.json"
    inputs.write_text(json.dumps({"sentences": sentences, "calibration": calibration,
                                  "warm_up": 2 * args.batch_size}), encoding="utf-8")
    exports = Path(args.exports) if args.exports else peers_cache_dir() / "exports"
    processes: dict[str, PeerProcess] = {}
    try:
        for peer in peers:
            python = pythons.get(peer.environment)
            if python is None:
                report["missing"][peer.name] = (
                    f"no {peer.environment} environment: run with --create-venvs, or name one with "
                    f"--{peer.environment}-python (python -m benchmarks.peers --help)")
                say(f"peers: {peer.name}: skipped ({report['missing'][peer.name]})")
                continue
            say(f"peers: starting {peer.name} ({peer.environment} environment)")
            process = PeerProcess(peer, python, [
                "--model", location, "--exports", str(exports / peer.environment / Path(location).name),
                "--sentences", str(inputs), "--threads", str(args.threads), "--batch-size", str(args.batch_size),
                "--max-length", str(args.max_length), "--pooling", pooling,
            ], folder / f"{re.sub(r'[^a-z0-9]+', '-', peer.name)}.log", args.timeout)
            try:
                ready = process.answer()
            except (RuntimeError, TimeoutError) as error:
                ready = {"ready": False, "error": str(error)}
            if not ready.get("ready"):
                report["missing"][peer.name] = ready.get("error", "did not start")
                say(f"peers: {peer.name}: could not start: {report['missing'][peer.name]}")
                process.close()
                continue
            processes[peer.name] = process
            report["backends"][peer.name] = {"environment": peer.environment, **ready["info"]}
        seconds: dict[str, list[float]] = {name: [] for name in processes}
        cpu_seconds: dict[str, list[float]] = {name: [] for name in processes}
        points: dict[str, float | None] = {}
        for index, order in enumerate(round_orders(list(processes), args.rounds)):
            loads = {}
            for name in order:
                loads[name] = load_average()
                embeddings_path = folder / f"{re.sub(r'[^a-z0-9]+', '-', name)}.npy"
                processes[name].send(f"encode {index} {embeddings_path}" if index == 0 else f"encode {index}")
                answer = processes[name].answer()
                seconds[name].append(answer["seconds"])
                cpu_seconds[name].append(answer["cpu_seconds"])
                if index == 0:
                    embeddings = np.load(embeddings_path)
                    points[name] = spearman_points(embeddings, gold) if answer["finite"] else None
                    embeddings_path.unlink()
                    say(f"peers: {name}: STS-B Spearman x100 {points[name]}")
                say(f"peers: round {index + 1}/{args.rounds}: {name}: {len(sentences) / answer['seconds']:.0f} "
                    f"sentences/s (load {loads[name][0] if loads[name] else '?'})")
            report["rounds"].append({"order": order, "load_average": loads})
            if getattr(args, "partial", None):  # what the rounds so far say, in case the run is cut short
                _summarize_into(report, len(sentences), seconds, points, cpu_seconds, peers)
                write_results(report, args.partial)
    finally:
        for process in processes.values():
            process.close()
    _summarize_into(report, len(sentences), seconds, points, cpu_seconds, peers)
    if args.efficiency and DEFAULT in processes:
        say("peers: matmul efficiency of flow-plugin's default (a fresh process)")
        runner = Runner(args.timeout)
        try:
            report["efficiency"] = runner("matmul-efficiency", {
                "model": args.model, "data": str(data), "threads": args.threads, "batch_size": args.batch_size,
                "max_length": args.max_length, "pairs": args.pairs})
        finally:
            runner.close()
    report["machine"]["load_average_end"] = load_average()
    report["seconds"] = round((datetime.datetime.now(datetime.timezone.utc) - started).total_seconds(), 1)
    return report


def _summarize_into(report: dict[str, Any], n_sentences: int, seconds: dict[str, list[float]],
                    points: dict[str, float | None], cpu_seconds: dict[str, list[float]], peers: list[Peer]) -> None:
    """Add :func:`summarize`'s rates, quality and verdict (over the rounds timed so far) to ``report``."""
    summary = summarize(n_sentences, seconds, points, explicit=[peer.name for peer in peers if peer.explicit_option])
    for name, entry in summary["backends"].items():
        report["backends"][name] |= entry | {"cpu_seconds_per_round": [round(value, 3) for value in cpu_seconds[name]],
                                             "sentences_per_cpu_second": round(
                                                 n_sentences / statistics.median(cpu_seconds[name]), 1)}
    report["verdict"] = summary["verdict"]
    report["rounds_done"] = len(report["rounds"])


def resummarize(report: dict[str, Any]) -> None:
    """Recompute a stored report's rates, quality and verdict from its per-round seconds and Spearman values
    (after a change of the rule; the measurements themselves are kept as they are)."""
    seconds = {name: entry["seconds_per_round"] for name, entry in report["backends"].items() if "seconds_per_round" in entry}
    points = {name: report["backends"][name].get("stsb_spearman") for name in seconds}
    cpu = {name: report["backends"][name]["cpu_seconds_per_round"] for name in seconds}
    explicit = [peer for peer in PEERS if peer.name in seconds]
    _summarize_into(report, report["workload"]["sentences"], seconds, points, cpu, explicit)
    report["rounds_done"] = len(report["rounds"])


# =========================================================================== the table
def format_markdown(report: dict[str, Any]) -> str:
    """The report as a Markdown page: the machine, the workload, the table, the verdict."""
    machine, workload = report["machine"], report["workload"]
    versions = {name: entry for name, entry in report["backends"].items()}
    ort = next((entry.get("onnxruntime") for entry in versions.values() if entry.get("onnxruntime")), None)
    ov = next((entry.get("openvino") for entry in versions.values() if entry.get("openvino")), None)
    st_versions = sorted({f"{entry['environment']}: {entry['sentence_transformers']}" for entry in versions.values()
                          if entry.get("sentence_transformers")})
    lines = [
        f"# Peers on {machine['cpu_model']} ({report['started'][:10]})",
        "",
        f"- CPU: {machine['cpu_model']}, {machine['logical_cores']} logical cores, flags {', '.join(machine['cpu_flags'])}; "
        f"bf16 kernels: {machine['bf16_kernels']}",
        f"- versions: torch {machine['torch']}, transformers {machine['transformers']}, sentence-transformers "
        f"{'; '.join(st_versions) or machine['sentence_transformers']}, ONNX Runtime {ort or '-'}, OpenVINO {ov or '-'}",
        f"- workload: {workload['model']}, {workload['set']} ({workload['pairs']} pairs = {workload['sentences']} "
        f"sentences), batch {workload['batch_size']}, max length {workload['max_length']}, {workload['threads']} threads, "
        f"one process per backend, {report.get('rounds_done', workload['rounds'])} of {workload['rounds']} interleaved "
        "rounds (order rotated), medians",
        f"- load average (1 min) at start {machine.get('load_average_start')}, at end {machine.get('load_average_end')}",
        f"- command: `{report['command']}`",
        "",
        "| backend | sent/s (median) | min..max over rounds | flow-plugin auto / this (median of rounds) | "
        "sent per CPU-second | STS-B Spearman x100 | vs reference | load at its rounds |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name, entry in sorted(report["backends"].items(), key=lambda item: -item[1].get("sentences_per_second", 0)):
        if "sentences_per_second" not in entry:
            continue
        loads = [str(round_["load_average"][name][0]) for round_ in report["rounds"]
                 if round_["load_average"].get(name)]
        label = name + _backend_note(entry)
        delta = entry["spearman_minus_reference"]
        lines.append(
            f"| {label} | {entry['sentences_per_second']:.0f} | {entry['min_sentences_per_second']:.0f}.."
            f"{entry['max_sentences_per_second']:.0f} | {_ratio(entry['default_over_this'])} | "
            f"{entry.get('sentences_per_cpu_second', 0):.0f} | {_points(entry['stsb_spearman'])} | {'-' if delta is None else f'{delta:+.3f}'} | {', '.join(loads)} |")
    for name, why in report.get("missing", {}).items():
        lines.append(f"| {name} | not run: {why} | | | | | | |")
    verdict = report.get("verdict", {})
    lines.append("")
    if verdict.get("fastest_equal_quality_peer"):
        lines.append(
            f"**Verdict:** the fastest peer of equal quality (Spearman within {EQUAL_QUALITY_POINTS} of "
            f"{verdict['reference']}) is {verdict['fastest_equal_quality_peer']}; flow-plugin's default runs "
            f"{_ratio(verdict.get('default_over_fastest_peer'))} its speed (per round: "
            f"{', '.join(_ratio(value) for value in verdict.get('default_over_fastest_peer_per_round', []))}): "
            f"{'the default wins' if verdict.get('wins') else 'the default does NOT win'}.")
    efficiency = report.get("efficiency")
    if efficiency:
        lines.append("")
        lines.append(
            f"**Matmul efficiency of the default** ({efficiency['precision']}, timed in thread CPU seconds): the "
            f"encoder's linear layers ran at "
            f"{efficiency['linear_gflops']:.0f} GFLOP/s, {100 * efficiency['linear_fraction_of_peak']:.0f}% of the "
            f"{efficiency['precision']} matmul peak at the same shapes ({efficiency['peak_gflops']:.0f} GFLOP/s; all "
            f"figures per thread: the encoder ran {efficiency['threads']} threads, each batch on one) and "
            f"{100 * efficiency['linear_fraction_of_square_peak']:.0f}% of its 2048-square peak "
            f"({efficiency['square_peak_gflops']:.0f}); they took "
            f"{100 * efficiency['linear_share_of_forward']:.0f}% of the forward passes' time; all matmul FLOPs "
            f"(attention products too) over the whole encode: {efficiency['end_to_end_gflops']:.0f} GFLOP/s = "
            f"{100 * efficiency['end_to_end_fraction_of_peak']:.0f}% of that peak.")
    return "\n".join(lines) + "\n"


def runtime_version(entry: dict[str, Any]) -> str | None:
    """The runtime a backend ran on and its version ("OpenVINO 2026.4.1", "ONNX Runtime 1.32.0", "torch 2.13.0+cpu").

    >>> runtime_version({"openvino": "2026.4.1-22982-e213a147257-releases/2026/4", "torch": "2.13.0+cpu"})
    'OpenVINO 2026.4.1'
    >>> runtime_version({"onnxruntime": "1.32.0"}), runtime_version({"torch": "2.13.0+cpu"}), runtime_version({})
    ('ONNX Runtime 1.32.0', 'torch 2.13.0+cpu', None)
    """
    if entry.get("openvino"):
        return f"OpenVINO {str(entry['openvino']).split('-')[0]}"  # the release, without the build's tag
    if entry.get("onnxruntime"):
        return f"ONNX Runtime {entry['onnxruntime']}"
    if entry.get("torch"):
        return f"torch {entry['torch']}"
    return None


def _backend_note(entry: dict[str, Any]) -> str:
    notes = [runtime_version(entry)] if runtime_version(entry) else []
    if entry.get("precision") and entry.get("precision_choice", {}).get("source") not in (None, "requested"):
        notes.append(f"resolves to {entry['precision']}")
    if entry.get("int8_variant"):
        notes.append(entry["int8_variant"])
    precision = entry.get("inference_precision")
    if precision and not str(precision).startswith("unknown"):  # (older reports kept a failed probe as "unknown (...)")
        notes.append(f"runs in {precision}")
    if entry.get("sentence_transformers") and entry.get("environment") != "project":
        notes.append(f"ST {entry['sentence_transformers']}")
    return f" ({', '.join(notes)})" if notes else ""


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _points(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def write_results(report: dict[str, Any], folder: Path) -> tuple[Path, Path]:
    """``peers-<date>-<cpu>.json`` and ``.md`` in ``folder``, written atomically."""
    from flow_plugin._io import atomic_write_json, atomic_write_text

    cpu = re.sub(r"[^a-z0-9]+", "-", report["machine"]["cpu_model"].lower()).strip("-") or "cpu"
    stem = folder / f"peers-{report['started'][:10]}-{cpu}"
    json_path, markdown_path = stem.with_suffix(".json"), stem.with_suffix(".md")
    atomic_write_json(json_path, report)
    atomic_write_text(markdown_path, format_markdown(report))
    return json_path, markdown_path


# =========================================================================== command line
def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", type=Path, default=None,
                        help="SentEval data folder (default: $FLOW_PLUGIN_SHARED_DATA/senteval, else ../shared/data/senteval)")
    parser.add_argument("--model", default="minilm-l6", help="registry backbone or local model folder (default minilm-l6)")
    parser.add_argument("--backends", default=None,
                        help=f"comma-separated subset of: {', '.join(peer.name for peer in PEERS)} (default: all)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    parser.add_argument("--threads", type=int, default=2, help="threads of every backend (default 2)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--max-length", type=int, default=64)
    parser.add_argument("--pairs", type=int, default=None, help="only the first N STS-B test pairs (default: all)")
    parser.add_argument("--onnx-python", default=None, help="the Python of an environment with sentence-transformers[onnx]")
    parser.add_argument("--openvino-python", default=None,
                        help="the Python of an environment with sentence-transformers[openvino] and datasets")
    parser.add_argument("--create-venvs", action="store_true",
                        help="create the missing peer environments (in perf-peers/venvs/ of the user cache folder)")
    parser.add_argument("--exports", type=Path, default=None,
                        help="where the ONNX / OpenVINO exports are kept (default: perf-peers/exports/ of the user cache)")
    parser.add_argument("--no-efficiency", dest="efficiency", action="store_false",
                        help="skip the matmul efficiency measurement of the default")
    parser.add_argument("--output-dir", type=Path, default=REPO_ROOT / "benchmarks" / "results",
                        help="where the JSON and Markdown results go (default benchmarks/results/)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds allowed for one answer of a backend")
    parser.add_argument("--from-json", type=Path, default=None,
                        help="do not measure: recompute and rewrite the summary of a stored result JSON")
    parser.add_argument("--partial", type=Path, default=None,
                        help="also write the results so far to this folder after every round")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.peers", description=__doc__.splitlines()[0])
    configure_parser(parser)
    args = parser.parse_args(argv)
    if argv is not None:
        args.command_line = ["python", "-m", "benchmarks.peers", *argv]
    if args.from_json:
        report = json.loads(Path(args.from_json).read_text(encoding="utf-8"))
        resummarize(report)
    else:
        report = run_peers(args)
    json_path, markdown_path = write_results(report, args.output_dir)
    print(format_markdown(report))
    print(f"written: {json_path}, {markdown_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
