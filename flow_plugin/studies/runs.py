"""The one run plan of ``flow-plugin bench`` and ``flow-plugin sweep``: calibrators × fit corpora × seeds.

A run is a registry model name plus the loader kwargs that set it apart (``fit_corpus``,
``fit_duplicates``, ``calibrator_params``, ``precision``); MTEB files a run with kwargs under its
own experiment folder, so no two runs share a result. Raw embeddings fit nothing, so raw runs
once (the default fit corpus, no duplicate policy); a seeded calibrator (the flow and its
variants) runs once per seed, its default seed (the registry's pinned one, else the
calibrator's own, the paper's 1234) without a ``calibrator_params`` kwarg.

Examples
--------
>>> from flow_plugin.catalog.registry import get_backbone
>>> [run.label for run in expand_runs(get_backbone("minilm-l6"), ["raw", "flow"], seeds=2)]
['flow_plugin/minilm-l6', 'flow_plugin/minilm-l6-flow [seed=1234]', 'flow_plugin/minilm-l6-flow [seed=1235]']
>>> runs = expand_runs(get_backbone("minilm-l6"), ["raw", "flow"], fit_corpora=["target", "per-call"], seeds=[1, 1234])
>>> [run.label for run in runs]  # doctest: +NORMALIZE_WHITESPACE
['flow_plugin/minilm-l6',
 'flow_plugin/minilm-l6-flow [seed=1]', 'flow_plugin/minilm-l6-flow [seed=1234]',
 'flow_plugin/minilm-l6-flow [fit_corpus=per-call, seed=1]', 'flow_plugin/minilm-l6-flow [fit_corpus=per-call, seed=1234]']
>>> [run.kwargs for run in runs[1:3]]
[{'calibrator_params': {'seed': 1}}, {}]
>>> [run.kwargs for run in expand_runs(get_backbone("minilm-l6"), ["raw"], precision="float32")]
[{'precision': 'float32'}]
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flow_plugin.catalog.registry import ForeignBase, get_base
from flow_plugin.data.fit_corpus import DEFAULT_DUPLICATES, TARGET
from flow_plugin.encoding.options import DEFAULT_PRECISION, EncoderOptions
from flow_plugin.calibration import make_calibrator
from flow_plugin.errors import InputError


@dataclass(frozen=True)
class Run:
    """One model to evaluate: a registry model name, the loader kwargs of this run (which become
    MTEB experiment kwargs), and its seed (``None`` for a calibrator without one)."""

    model: str
    kwargs: dict[str, Any] = field(default_factory=dict, hash=False)
    seed: int | None = None

    @property
    def label(self) -> str:
        """The model name plus what sets this run apart, for progress lines.

        >>> Run("flow_plugin/minilm-l6-flow", {"fit_corpus": "/data/nli.txt", "calibrator_params": {"seed": 3}}, 3).label
        'flow_plugin/minilm-l6-flow [fit_corpus=nli.txt, seed=3]'
        """
        details = []
        if "fit_corpus" in self.kwargs:
            details.append(f"fit_corpus={Path(str(self.kwargs['fit_corpus'])).name}")
        if "fit_duplicates" in self.kwargs:
            details.append(f"fit_duplicates={self.kwargs['fit_duplicates']}")
        if self.seed is not None:
            details.append(f"seed={self.seed}")
        if "precision" in self.kwargs:
            details.append(f"precision={self.kwargs['precision']}")
        return f"{self.model} [{', '.join(details)}]" if details else self.model


def default_seed(backbone: Any, calibrator: str) -> int | None:
    """The seed ``calibrator`` of ``backbone`` (a registry spec or a foreign base) uses when none is given: the
    registry's pinned one, else the calibrator's own; ``None`` for a calibrator without a seed.

    >>> from flow_plugin.catalog.registry import get_backbone
    >>> default_seed(get_backbone("minilm-l6"), "flow"), default_seed(get_backbone("minilm-l6"), "whiten")
    (1234, None)
    """
    return make_calibrator(calibrator, **backbone.calibrator_params.get(calibrator, {})).get_params().get("seed")


def check_count(name: str, value: Any, what: str) -> int:
    """A count a user gives (``name``, the option ``--name``: seeds, workers) that must be a whole number of 1 or
    more.

    >>> check_count("workers", 2, "processes")
    2
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise InputError(f"{name} must be a positive number of {what}, got {value!r}; give "
                         f"--{name.replace('_', '-')} 1 or more")
    return int(value)


def expand_runs(backbone: Any, calibrators: Sequence[str], *, fit_corpora: Sequence[str] = (TARGET,),
                seeds: int | Sequence[int] = 1, fit_duplicates: str = DEFAULT_DUPLICATES,
                precision: str = DEFAULT_PRECISION) -> tuple[Run, ...]:
    """The runs of one backbone (a registry spec or a :class:`~flow_plugin.catalog.registry.ForeignBase`): each calibrator × each fit corpus (raw: once) ×
    each seed (seeded calibrators only). ``seeds`` is a count (the default seed and the next
    ones, as ``bench --seeds N``) or the seeds themselves (as a sweep file's ``seeds``; empty:
    the default seed); a count below 1 is an error."""
    if isinstance(seeds, (bool, numbers.Integral)):
        seeds = check_count("seeds", seeds, "seeds")
    options = EncoderOptions(precision=precision)
    runs = []
    for calibrator in calibrators:
        model = backbone.model_name(calibrator)
        seed_of_default = default_seed(backbone, calibrator)
        if seed_of_default is None:
            chosen_seeds: Sequence[int | None] = (None,)
        elif isinstance(seeds, int):
            chosen_seeds = range(seed_of_default, seed_of_default + seeds)
        else:
            chosen_seeds = tuple(seeds) or (seed_of_default,)
        for corpus in (TARGET,) if calibrator == "raw" else fit_corpora:
            for seed in chosen_seeds:
                kwargs: dict[str, Any] = {}
                if corpus != TARGET:
                    kwargs["fit_corpus"] = corpus
                if fit_duplicates != DEFAULT_DUPLICATES and calibrator != "raw":
                    kwargs["fit_duplicates"] = fit_duplicates
                if seed is not None and seed != seed_of_default:  # the default seed: no kwarg
                    kwargs["calibrator_params"] = {"seed": seed}
                kwargs.update(options.loader_kwargs())
                runs.append(Run(model, kwargs, seed))
    return tuple(runs)


def loadable_base(name: str, options: EncoderOptions | None = None) -> Any:
    """:func:`~flow_plugin.catalog.registry.get_base` of ``name``, once a base outside the registry is known to
    load (a local folder holding a saved model; a name MTEB's registry or the Hugging Face Hub knows) and to take
    ``options`` (the encoder options a registry backbone alone takes are refused), so that a study of a mistyped
    base ends in one line before it runs, not in one failure per result."""
    spec = get_base(name)
    if isinstance(spec, ForeignBase):
        from flow_plugin.integrations.mteb.base_models import base_meta, refuse_encoder_options  # heavy: loads MTEB

        base_meta(spec.name)
        refuse_encoder_options(spec.name, (options or EncoderOptions()).loader_kwargs())
    return spec


__all__ = ["Run", "default_seed", "expand_runs", "loadable_base"]
