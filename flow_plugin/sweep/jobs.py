"""A sweep expands to jobs of one backbone each.

One job loads its backbone once and serves all of its runs, planned by the one run expander of
bench and sweep (:func:`flow_plugin.studies.runs.expand_runs`: calibrators × fit corpora × seeds).

>>> from flow_plugin.sweep.spec import Sweep
>>> sweep = Sweep(source=Path("s.toml"), name="s", backbones=("minilm-l6",), calibrators=("raw", "flow"),
...               tasks=("SentEvalSTS13",), fit_corpora=("target", "per-call"), seeds=(1, 2))
>>> [run.label for run in expand_jobs(sweep)[0].runs]  # doctest: +NORMALIZE_WHITESPACE
['flow_plugin/minilm-l6',
 'flow_plugin/minilm-l6-flow [seed=1]', 'flow_plugin/minilm-l6-flow [seed=2]',
 'flow_plugin/minilm-l6-flow [fit_corpus=per-call, seed=1]', 'flow_plugin/minilm-l6-flow [fit_corpus=per-call, seed=2]']
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from flow_plugin.sweep.spec import Sweep
from flow_plugin.studies.runs import Run, expand_runs
from flow_plugin.catalog.registry import get_backbone

#: the folder of an output folder where a sweep keeps its own state (next to MTEB's results/)
WORK_FOLDER = ".flow-plugin-sweep"


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


def expand_jobs(sweep: Sweep, tasks: tuple[str, ...] | None = None) -> list[Job]:
    """One job per backbone, in the sweep file's order; ``tasks`` (default: the file's task
    names) are what every job evaluates."""
    return [Job(backbone, expand_runs(get_backbone(backbone), sweep.calibrators, fit_corpora=sweep.fit_corpora,
                                      seeds=sweep.seeds, precision=sweep.resources.precision),
                tasks or sweep.tasks)
            for backbone in sweep.backbones]


def default_output(sweep: Sweep, output: str | os.PathLike[str] | None) -> Path:
    """``output`` (the command line's), else the file's ``output``, else ``./results``."""
    if output is not None:
        return Path(output).expanduser().resolve()
    return sweep.output if sweep.output is not None else Path("results").resolve()
