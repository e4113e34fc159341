"""The sweep file: :class:`Sweep`, the frozen pydantic model of its keys, and :func:`load_sweep`,
which checks it all.

A sweep file is TOML. Unknown keys, wrong types and unknown names (backbones, calibrators,
fit corpora) are errors that name the file and the key, with the name you probably meant.
Relative paths in the file are relative to the file's folder. Task names need MTEB and are
checked when the jobs are planned (:func:`flow_plugin.sweep.plan.resolve_task_refs`).

>>> import tempfile
>>> with tempfile.TemporaryDirectory() as folder:
...     path = Path(folder) / "demo.toml"
...     _ = path.write_text('backbones = ["minilm-l6"]\\ncalibrators = ["raw", "flow"]\\nseeds = [1, 2]\\n')
...     sweep = load_sweep(path)
>>> sweep.name, sweep.backbones, sweep.calibrators, sweep.seeds, sweep.resources.max_retries
('demo', ('minilm-l6',), ('raw', 'flow'), (1, 2), 2)
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError

from flow_plugin.data.tasks import OFFLINE_TASKS
from flow_plugin.data.fit_corpus import POLICIES as FIT_POLICIES, TARGET
from flow_plugin.encoding.options import PRECISIONS
from flow_plugin._io import read_toml
from flow_plugin._validation_errors import describe_validation_error
from flow_plugin.errors import RegistryError, SweepError, did_you_mean
from flow_plugin.calibration import CALIBRATOR_METHODS, CALIBRATOR_NAMES, calibrator_class
from flow_plugin.catalog.registry import get_backbone


_NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


# ---------------------------------------------------------------------------- the file schema
class ResourcesTable(BaseModel):
    """``[resources]``: what each job asks Ray for, and how it runs (validated, frozen, used as is)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    device: Literal["auto", "cpu", "cuda"] = "auto"
    cpus_per_job: float = Field(default=1, gt=0)
    gpus_per_job: float = Field(default=1, gt=0, le=1)
    precision: Literal[PRECISIONS] = "auto"  # type: ignore[valid-type]  # (the tuple spreads into the Literal)
    batch_size: int | None = Field(default=None, ge=1)
    max_retries: int = Field(default=2, ge=0, le=20)


class Sweep(BaseModel):
    """A sweep file, validated and frozen (unknown keys are errors). :func:`load_sweep` returns it
    checked and completed, as a copy of the same model: registry names, fit corpora as "target",
    "per-call" or absolute sentence-file paths, absolute paths (``None`` where the file leaves the
    choice to the command line's defaults), the name (default: the file's stem) and ``source``, the
    file it was read from (which the file itself may not set). TOML lists are kept as tuples."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    name: str | None = None
    backbones: tuple[StrictStr, ...] = Field(min_length=1, strict=False)
    calibrators: tuple[StrictStr, ...] | None = Field(default=None, strict=False)
    tasks: tuple[StrictStr, ...] = Field(default=tuple(OFFLINE_TASKS), min_length=1, strict=False)
    fit_corpora: tuple[StrictStr, ...] = Field(default=(TARGET,), min_length=1, strict=False)
    seeds: tuple[StrictInt, ...] = Field(default=(), strict=False)
    data: Path | None = Field(default=None, strict=False)
    output: Path | None = Field(default=None, strict=False)
    leaderboard: Path | None = Field(default=None, strict=False)
    resources: ResourcesTable = ResourcesTable()
    source: Path | None = None


def _known_keys(location: tuple[Any, ...]) -> list[str]:
    fields = ResourcesTable.model_fields if location[:1] == ("resources",) else Sweep.model_fields
    return [key for key in fields if key != "source"]


def _messages(path: Path, error: ValidationError) -> str:
    """One line naming the file and every bad key (:func:`flow_plugin._validation_errors.describe_validation_error`)."""
    return f"{path}: " + "; ".join(describe_validation_error(error, _known_keys))


def seeded_calibrators() -> tuple[str, ...]:
    """The calibrators with a ``seed`` hyper-parameter: the only ones a seed changes.

    >>> seeded_calibrators()[:3]
    ('flow', 'flow-lu', 'flow-affine')
    """
    return tuple(name for name in CALIBRATOR_NAMES if "seed" in calibrator_class(name)._get_param_names())


def _unique(values: Iterable[Any]) -> tuple[Any, ...]:
    return tuple(dict.fromkeys(values))


def _check_backbones(path: Path, names: tuple[str, ...]) -> tuple[str, ...]:
    checked = []
    for name in names:
        try:
            checked.append(get_backbone(name).name)
        except RegistryError as error:
            raise RegistryError(f"{path}: key 'backbones': {error}") from None
    return _unique(checked)


def _check_calibrators(path: Path, names: tuple[str, ...] | None) -> tuple[str, ...]:
    if names is None:
        return tuple(CALIBRATOR_METHODS)  # like bench: the six methods; flow variants by name
    if not names:
        raise SweepError(f"{path}: key 'calibrators' is empty; leave it out for the six methods "
                         f"({', '.join(CALIBRATOR_METHODS)})")
    for name in names:
        if name not in CALIBRATOR_NAMES:
            raise RegistryError(
                f"{path}: key 'calibrators': unknown calibrator {name!r}{did_you_mean(name, CALIBRATOR_NAMES)}; choose "
                f"from {', '.join(CALIBRATOR_NAMES)}"
            )
    return _unique(names)


def _check_fit_corpora(path: Path, values: tuple[str, ...]) -> tuple[str, ...]:
    checked = []
    for value in values:
        if value in FIT_POLICIES:
            checked.append(value)
            continue
        file = (path.parent / value).expanduser().resolve()
        if not file.is_file():
            raise SweepError(
                f"{path}: key 'fit_corpora': {value!r} is neither a policy ({', '.join(FIT_POLICIES)}) nor a sentence file"
                f"{did_you_mean(value, FIT_POLICIES)}: "
                f"{file} does not exist"
            )
        checked.append(str(file))
    return _unique(checked)


def _path(path: Path, value: Path | None) -> Path | None:
    return None if value is None else (path.parent / value).expanduser().resolve()


def load_sweep(path: str | Path) -> Sweep:
    """Read and check a sweep file; every problem is an error naming the file and the key."""
    path = Path(path)
    data = read_toml(path, "sweep file", SweepError)
    if "source" in data:
        raise SweepError(f"{path}: key 'source' is not a sweep key (it is the file the sweep was read from); remove it")
    try:
        parsed = Sweep.model_validate(data)
    except ValidationError as error:
        raise SweepError(_messages(path, error)) from None
    name = parsed.name if parsed.name is not None else path.stem
    if not _NAME_PATTERN.match(name):
        raise SweepError(f"{path}: key 'name' must be letters, digits, '.', '_' and '-', got {name!r}")
    calibrators = _check_calibrators(path, parsed.calibrators)
    seeds = _unique(parsed.seeds)
    if seeds and not set(calibrators) & set(seeded_calibrators()):
        raise SweepError(
            f"{path}: key 'seeds': none of the calibrators {', '.join(calibrators)} takes a seed "
            f"(only {', '.join(seeded_calibrators())} does); remove 'seeds' or add such a calibrator"
        )
    return parsed.model_copy(update={
        "source": path,
        "name": name,
        "backbones": _check_backbones(path, parsed.backbones),
        "calibrators": calibrators,
        "tasks": _unique(parsed.tasks),
        "fit_corpora": _check_fit_corpora(path, parsed.fit_corpora),
        "seeds": seeds,
        "data": _path(path, parsed.data),
        "output": _path(path, parsed.output),
        "leaderboard": _path(path, parsed.leaderboard),
    })
