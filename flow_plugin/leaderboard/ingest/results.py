"""MTEB result folders -> leaderboard score entries, read with mteb's own classes.

A folder is an MTEB output folder (``<dir>/results/<model>/<revision>/...``) or its
``results/`` folder; mteb's ``ResultCache`` lists its result files (experiments too),
``TaskResult`` parses each one and ``ModelMeta`` says whose it is (see
:mod:`flow_plugin.results`). On top of that this module checks what a
leaderboard needs (the file's task, one evaluated split, main scores in [-1, 1]), converts
to points, and adds what MTEB does not keep in the result: flow-plugin's "wmean" protocol
field, the library versions of ``run_settings.jsonl`` and the hardware of
``flow-plugin-runs.jsonl`` and what each calibrator was fitted on (the fit records written
next to the result, :mod:`flow_plugin.results.fits`). Every error names the file. The first step of the
leaderboard's ingest stage (:mod:`.merge` merges what is read here).
"""

from __future__ import annotations

import datetime
import functools
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flow_plugin._io import read_json_lines
from flow_plugin.errors import DataFolderError
from flow_plugin.results.fits import fits_of_result, summarize_fit
from flow_plugin.results import ResultStore
from flow_plugin.results.files import RESULTS_FOLDER, ResultIdentity, load_task_result, result_identity
from flow_plugin.results.runs import RUNS_FILE, RUNS_LOCK_FILE, read_run_records, record_run_key, run_key
from flow_plugin.leaderboard.ingest.rows import public_experiment, public_fits, row_id
from flow_plugin.leaderboard.models import TaskScore, is_number, to_points
from flow_plugin.protocols import DEFAULT_PROTOCOL

if TYPE_CHECKING:  # pragma: no cover
    from mteb.results import TaskResult

#: main scores may exceed [-1, 1] by float noise only
_SCORE_SLACK = 1e-9


@dataclass(frozen=True)
class ResultFile:
    """One task result file of a result folder, and the model run it belongs to."""

    path: Path
    identity: ResultIdentity

    @property
    def task(self) -> str:
        """The task, from the file name (the file's own ``task_name`` must match it)."""
        return self.path.stem

    @property
    def experiment(self) -> str | None:
        """The MTEB experiment name as published (a sentence file named by its file name, not its path)."""
        return public_experiment(self.identity.experiment, self.identity.experiment_kwargs)

    @property
    def row_id(self) -> str:
        """The row of its model run, by the published name of its fit corpus (see :func:`row_id`)."""
        return row_id(self.identity.model, self.identity.revision, self.experiment)

    @functools.cached_property
    def corpus_sha256(self) -> str | None:
        """The sha256 of the sentence file its calibrator was fitted on, from its fit records (None for
        other fit corpora, or records that do not say)."""
        found = {fit.get("corpus_sha256") for fit in fits_of_result(self.path) or []} - {None}
        return found.pop() if len(found) == 1 else None


@dataclass
class ResultFolder:
    """The task result files of one MTEB output (or results) folder."""

    folder: Path  # as given
    results: Path  # <output>/results, where the files are looked for
    files: list[ResultFile]
    #: run key (see :func:`run_key`) -> hardware, from flow-plugin-runs.jsonl next to results/
    hardware: dict[tuple[Any, ...], dict[str, Any]]
    #: where flow-plugin keeps the run records of this folder's results, when it has written (or begun to
    #: write) some: its flow-plugin-runs.jsonl, or the lock file its writers take; None for a folder only
    #: MTEB wrote (``mteb run``), whose results have no records
    runs_file: Path | None = None

    def unrecorded(self, entry: TaskScore) -> bool:
        """Whether a result read from this folder lacks the run record flow-plugin writes with every result
        (its run was killed between the two writes, or the disk was full): no result until recomputed."""
        return self.runs_file is not None and entry.hardware is None


def find_results(folder: str | os.PathLike[str]) -> ResultFolder:
    """List the task result files of ``folder`` with mteb's ``ResultCache`` (nothing is parsed
    yet but each run's ``model_meta.json``), with the hardware records of the folder and where they are
    kept."""
    store = ResultStore.existing(folder)
    files = [ResultFile(path, result_identity(path)) for path in store.task_result_paths()]
    output = store.folder
    folders = [output, output / RESULTS_FOLDER]
    runs_file = next((place / RUNS_FILE for place in folders
                      if (place / RUNS_FILE).is_file() or (place / RUNS_LOCK_FILE).is_file()), None)
    return ResultFolder(Path(folder), output / RESULTS_FOLDER, files, hardware_index(folders), runs_file)


def read_score(result_file: ResultFile, hardware: dict[tuple[Any, ...], dict[str, Any]] | None = None,
               versions: dict[str, dict[str, Any]] | None = None) -> TaskScore:
    """The leaderboard score entry (points) of one result file, with its library versions
    (``versions``: task -> versions of its folder's ``run_settings.jsonl``, read when not
    given) and hardware (looked up in ``hardware``, see :func:`hardware_index`)."""
    path = result_file.path
    result = load_task_result(path)
    entry = score_entry(result, path)
    if versions is None:
        versions = run_settings_versions(path.parent)
    entry.versions = versions.get(result.task_name)
    identity = result_file.identity
    key = run_key(identity.model, identity.revision, identity.experiment, result_file.task,
                  result.date.timestamp() if result.date is not None else None)
    entry.hardware = (hardware or {}).get(key)
    fits = fits_of_result(path)
    entry.fits = None if fits is None else public_fits([summarize_fit(record) for record in fits],
                                                        identity.experiment_kwargs)
    return entry


def score_entry(result: TaskResult, path: Path) -> TaskScore:
    """Check an mteb ``TaskResult`` read from ``path`` and turn it into a score entry: the
    main score of its "test" split (or its only split) in points, averaged over subsets as
    mteb's ``get_score`` does, with the metric, the protocol, the "wmean" field and the
    result's provenance. ``versions``, ``hardware`` and ``fits`` are left None."""

    def bad(problem: str) -> DataFolderError:
        return DataFolderError(f"{path}: malformed MTEB task result: {problem}")

    if not result.task_name:
        raise bad("missing 'task_name'")
    if result.task_name != path.stem:
        raise bad(f"'task_name' is {result.task_name!r} but the file is named {path.name!r}")
    if not result.scores:
        raise bad("missing 'scores' (an object of split -> list of subset scores)")
    split = "test" if "test" in result.scores else next(iter(result.scores)) if len(result.scores) == 1 else None
    if split is None:
        raise bad(f"no 'test' split and several others ({', '.join(result.scores)}): which one is the result is ambiguous")
    entries = result.scores[split]
    if not entries:
        raise bad(f"'scores.{split}' must be a non-empty list of subset scores")
    for index, subset in enumerate(entries):
        main = subset["main_score"]
        if not is_number(main):
            raise bad(f"scores.{split}[{index}].main_score must be a finite number, got {main!r}")
        if not -1.0 - _SCORE_SLACK <= main <= 1.0 + _SCORE_SLACK:
            raise bad(f"scores.{split}[{index}].main_score {main} is outside [-1, 1]: not an MTEB score")
    if not result.dataset_revision:
        raise bad("missing 'dataset_revision'")
    score = float(result.get_score(splits=[split]))
    if not is_number(score):
        raise bad(f"no main score of split {split!r} counts for any of its languages")
    metric, protocol = _metric_and_protocol(entries[0])
    wmeans = [float(subset["cosine_spearman_wmean"]) for subset in entries if is_number(subset.get("cosine_spearman_wmean"))]
    evaluation_time = result.evaluation_time
    return TaskScore(
        score=to_points(score),
        metric=metric,
        protocol=protocol,
        wmean=to_points(sum(wmeans) / len(wmeans)) if len(wmeans) == len(entries) else None,
        split=split,
        hf_subsets=[str(subset["hf_subset"]) for subset in entries],
        dataset_revision=result.dataset_revision,
        mteb_version=result.mteb_version,
        date=_iso(result.date),
        evaluation_time_s=round(evaluation_time, 3) if is_number(evaluation_time) else None,
    )


def _metric_and_protocol(subset: Mapping[str, Any]) -> tuple[str | None, str]:
    """("cosine_spearman", its protocol) when that is the main score, else (None, the default protocol).

    flow-plugin's tasks name the protocol of each metric in ``protocols`` ("all: ...");
    MTEB's own tasks have none and are "all" (every test pair pooled)."""
    main = subset["main_score"]
    spearman = subset.get("cosine_spearman")
    if not (is_number(spearman) and abs(spearman - main) <= 1e-12):
        return None, DEFAULT_PROTOCOL
    protocols = subset.get("protocols")
    if isinstance(protocols, dict) and isinstance(protocols.get("cosine_spearman"), str):
        return "cosine_spearman", protocols["cosine_spearman"].split(":", 1)[0].strip() or DEFAULT_PROTOCOL
    return "cosine_spearman", DEFAULT_PROTOCOL


def _iso(date: datetime.datetime | None) -> str | None:
    if date is None:
        return None
    if date.tzinfo is None:
        date = date.replace(tzinfo=datetime.timezone.utc)
    return date.astimezone(datetime.timezone.utc).isoformat(timespec="seconds")


# ------------------------------------------------------------------------- run_settings.jsonl (versions)
def run_settings_versions(folder: Path) -> dict[str, dict[str, Any]]:
    """task -> the last ``versions`` record of MTEB's run_settings.jsonl in ``folder``."""
    path = folder / "run_settings.jsonl"
    if not path.is_file():
        return {}
    versions: dict[str, dict[str, Any]] = {}
    for _, record in read_json_lines(path, "run_settings.jsonl"):
        if not isinstance(record, dict) or not isinstance(record.get("task"), str):
            continue
        found = record.get("version", record.get("versions"))  # MTEB 2 writes "version"
        if isinstance(found, dict):
            versions[record["task"]] = found
    return versions


# ------------------------------------------------------------------------- flow-plugin-runs.jsonl (hardware)
def hardware_index(folders: Iterable[Path]) -> dict[tuple[Any, ...], dict[str, Any]]:
    """run key -> hardware, from the ``flow-plugin-runs.jsonl`` of each folder (later wins)."""
    index: dict[tuple[Any, ...], dict[str, Any]] = {}
    for folder in folders:
        for record in read_run_records(folder / RUNS_FILE):
            if isinstance(record.get("hardware"), dict):
                index[record_run_key(record)] = record["hardware"]
    return index
