"""A sweep expands to jobs of one backbone each.

One job loads its backbone once and serves every variant of it: each calibrator, once per
fit corpus (raw embeddings fit nothing, so raw runs once) and once per seed (only seeded
calibrators, the flow). A run is a model name plus the loader kwargs that distinguish it;
MTEB files a run with kwargs under its own experiment folder, so no two runs share a result.

>>> from flow_plugin.cli.sweep.spec import Sweep
>>> sweep = Sweep(Path("s.toml"), "s", ("minilm-l6",), ("raw", "flow"), ("SentEvalSTS13",),
...               ("target", "per-call"), (1, 2))
>>> [run.label for run in expand_jobs(sweep)[0].runs]  # doctest: +NORMALIZE_WHITESPACE
['flow_plugin/minilm-l6',
 'flow_plugin/minilm-l6-flow [seed=1]', 'flow_plugin/minilm-l6-flow [seed=2]',
 'flow_plugin/minilm-l6-flow [fit_corpus=per-call, seed=1]', 'flow_plugin/minilm-l6-flow [fit_corpus=per-call, seed=2]']
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flow_plugin.cli.sweep.spec import Sweep, seeded_calibrators

#: the folder of an output folder where a sweep keeps its own state (next to MTEB's results/)
WORK_FOLDER = ".flow-plugin-sweep"


@dataclass(frozen=True)
class Run:
    """One model to evaluate: a registry model name and its loader kwargs (``fit_corpus``,
    ``calibrator_params``, ``precision``), which become MTEB experiment kwargs."""

    model: str
    kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """The model name plus what sets this run apart, for progress lines.

        >>> Run("flow_plugin/minilm-l6-flow", {"calibrator_params": {"seed": 3}}).label
        'flow_plugin/minilm-l6-flow [seed=3]'
        """
        details = []
        if "fit_corpus" in self.kwargs:
            details.append(f"fit_corpus={Path(str(self.kwargs['fit_corpus'])).name}")
        for key, value in sorted(self.kwargs.get("calibrator_params", {}).items()):
            details.append(f"{key}={value}")
        if "precision" in self.kwargs:
            details.append(f"precision={self.kwargs['precision']}")
        return f"{self.model} [{', '.join(details)}]" if details else self.model


@dataclass(frozen=True)
class Job:
    """Everything one backbone's job evaluates: its runs × the sweep's task names."""

    backbone: str
    runs: tuple[Run, ...]
    tasks: tuple[str, ...]

    @property
    def id(self) -> str:
        return self.backbone


@dataclass(frozen=True)
class Settings:
    """Where and how every job of a sweep runs (the same for all of them)."""

    output: Path
    data: Path | None
    cache_dir: Path
    device: str | None  # "cpu", "cuda" or None (the worker's default)
    precision: str = "auto"
    batch_size: int | None = None

    @property
    def work(self) -> Path:
        """The sweep's own folder: lock, progress files, job-private staging folders."""
        return self.output / WORK_FOLDER

    @property
    def progress(self) -> Path:
        return self.work / "progress"

    @property
    def staging(self) -> Path:
        return self.work / "staging"


def expand_runs(sweep: Sweep, backbone: str) -> tuple[Run, ...]:
    """The runs of one backbone: calibrators × fit corpora (not for raw) × seeds (seeded only)."""
    from flow_plugin.catalog.registry import get_backbone

    spec = get_backbone(backbone)
    from flow_plugin.calibration import default_seed

    seeded = seeded_calibrators()
    default_seeds = {name: default_seed(name) for name in sweep.calibrators if name in seeded}
    runs = []
    for calibrator in sweep.calibrators:
        corpora = ("target",) if calibrator == "raw" else sweep.fit_corpora
        seeds: tuple[int | None, ...] = sweep.seeds if calibrator in seeded and sweep.seeds else (None,)
        for corpus in corpora:
            for seed in seeds:
                kwargs: dict[str, Any] = {}
                if corpus != "target":
                    kwargs["fit_corpus"] = corpus
                if seed is not None and seed != default_seeds[calibrator]:  # the default seed: no kwarg, as in bench
                    kwargs["calibrator_params"] = {"seed": seed}
                if sweep.resources.precision != "auto":
                    kwargs["precision"] = sweep.resources.precision
                runs.append(Run(spec.model_name(calibrator), kwargs))
    return tuple(runs)


def expand_jobs(sweep: Sweep, tasks: tuple[str, ...] | None = None) -> list[Job]:
    """One job per backbone, in the sweep file's order; ``tasks`` (default: the file's task
    names) are what every job evaluates."""
    return [Job(backbone, expand_runs(sweep, backbone), tasks or sweep.tasks) for backbone in sweep.backbones]


def default_output(sweep: Sweep, output: str | os.PathLike[str] | None) -> Path:
    """``output`` (the command line's), else the file's ``output``, else ``./results``."""
    if output is not None:
        return Path(output).expanduser().resolve()
    return sweep.output if sweep.output is not None else Path("results").resolve()
