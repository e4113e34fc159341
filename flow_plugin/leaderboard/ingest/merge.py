"""The ingest stage's board: create or load a leaderboard (:class:`~flow_plugin.leaderboard.models.Leaderboard`),
and merge the scores of result folders into its rows.

Merging never drops a row; a score that disagrees with the one already recorded (beyond the
tolerance, or on other data) is a conflict: an error that leaves the leaderboard as it was,
or, with ``replace=True``, a replacement that is reported. A result without its run
record is not merged (:meth:`~.results.ResultFolder.unrecorded`), and a sentence-file fit corpus is
told apart by its content (:func:`board_row_id`). The per-pair cosines found next to the results
(those of the merged scores, and of rows already on the board) are handed on in the report for the
compare stage's intervals; nothing derived (averages, deltas, seed groups, intervals) is computed here.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from flow_plugin import __version__
from flow_plugin._io import read_json
from flow_plugin.errors import DataFolderError, LeaderboardConflictError, LeaderboardError
from flow_plugin.leaderboard.ingest.results import ResultFile, find_results, read_score, run_settings_versions
from flow_plugin.leaderboard.ingest.rows import (corpus_sha256, describe_model, public_kwargs, publish_row, row_id,
                                                settled_kwargs)
from flow_plugin.results.files import experiment_name
from flow_plugin.leaderboard.models import (
    DEFAULT_TOLERANCE,
    FORMAT,
    FORMAT_VERSION,
    Leaderboard,
    Row,
    TaskScore,
    check_board,
    is_number,
    validation_problems,
)

if TYPE_CHECKING:  # pragma: no cover
    from flow_plugin.results.pairs import PairScores

#: (row id, task) -> the per-pair cosines of the board's score of that task
Pairs = dict[tuple[str, str], "PairScores"]

logger = logging.getLogger(__name__)


@dataclass
class MergeReport:
    """What one update did: row ids added, and "<row id> / <task>" labels of scores."""

    rows_added: list[str] = field(default_factory=list)
    scores_added: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)
    files_read: int = 0
    #: results read without usable per-pair cosines ("<row id> / <task>: why"), so without intervals
    no_pairs: list[str] = field(default_factory=list)
    #: results not merged because their run record is missing ("<result file>: why")
    unrecorded: list[str] = field(default_factory=list)
    #: "<row id> / <task>" of scores kept without a run record, now replaced by the same score with one
    recorded: list[str] = field(default_factory=list)
    #: the per-pair cosines found for the board's scores, for the compare stage's intervals
    pairs: Pairs = field(default_factory=dict, repr=False)
    #: units given newly computed confidence intervals (by the compare stage), and the seconds that took
    intervals: int = 0
    interval_seconds: float = 0.0


def now_iso() -> str:
    """The current UTC time as the board's ``updated`` stamp writes it."""
    return datetime.datetime.now(tz=datetime.timezone.utc).isoformat(timespec="seconds")


def generated_by() -> str:
    """What a board names as its writer: ``flow-plugin <version>``."""
    return f"flow-plugin {__version__}"


def empty_leaderboard(name: str, tolerance: float = DEFAULT_TOLERANCE) -> Leaderboard:
    """A leaderboard without rows.

    >>> board = empty_leaderboard("minilm-l6")
    >>> board.format, board.name, board.tasks, board.rows, board.tolerance
    ('flow-plugin-leaderboard', 'minilm-l6', [], [], 0.0001)
    """
    return Leaderboard(format=FORMAT, format_version=FORMAT_VERSION, name=name, updated=now_iso(),
                       generated_by=generated_by(), scale="points", tolerance=tolerance, tasks=[], rows=[])


def load_leaderboard(path: str | os.PathLike[str]) -> Leaderboard:
    """Read a leaderboard JSON file as a :class:`~.models.Leaderboard` (errors name the file and what
    is wrong, in one line). A file of an older flow-plugin is brought up to date as it is read: rows
    without ``experiment`` / ``experiment_kwargs`` get the defaults, and a sentence file is published
    by its name (:func:`~.rows.publish_row`)."""
    path = Path(path)
    remedy = (f"restore it (git checkout -- {path}), or rebuild it from its result folders: flow-plugin leaderboard "
              f"RESULTS_DIR ... -o {path.name} in a new file")
    try:
        data = read_json(path, "leaderboard", remedy)
    except DataFolderError as error:
        raise LeaderboardError(str(error)) from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise LeaderboardError(f"{path}: not a {FORMAT} file: 'format' must be {FORMAT!r}; {remedy}")
    if data.get("format_version") != FORMAT_VERSION:
        raise LeaderboardError(f"{path}: not a {FORMAT} file: format_version {data.get('format_version')!r} is not "
                               f"{FORMAT_VERSION} (this flow-plugin's); {remedy}")
    rows = data.get("rows")
    for row in rows if isinstance(rows, list) else []:
        if isinstance(row, dict):  # written before experiments had rows of their own
            row.setdefault("experiment", None)
            row.setdefault("experiment_kwargs", {})
    try:
        board = check_board(data, str(path))
    except LeaderboardError as error:
        raise LeaderboardError(f"{error}; {remedy}") from None
    seen: set[str] = set()
    for row in board.rows:
        publish_row(row)  # a leaderboard written before paths were left out publishes file names from now on
        if row.id in seen:
            raise LeaderboardError(f"{path}: not a {FORMAT} file: row id {row.id!r} appears twice")
        seen.add(row.id)
    return board


def score_difference(old: TaskScore, new: TaskScore, tolerance: float) -> list[str]:
    """Why two score entries of the same model and task are not the same result ([] if they are).

    >>> old = TaskScore(score=80.0, metric=None, protocol="all", split="test", hf_subsets=["default"],
    ...                 dataset_revision="a")
    >>> score_difference(old, old.model_copy(update={"score": 80.0001}), 1e-4)
    []
    >>> score_difference(old, old.model_copy(update={"score": 80.5, "dataset_revision": "b"}), 1e-4)
    ['score 80.0 vs 80.5', 'dataset_revision a vs b']
    """
    limit = tolerance + 1e-9  # points; the 1e-9 absorbs float rounding of the 4-decimal values
    problems = []
    if abs(old.score - new.score) > limit:
        problems.append(f"score {old.score} vs {new.score}")
    if old.dataset_revision != new.dataset_revision:
        problems.append(f"dataset_revision {old.dataset_revision} vs {new.dataset_revision}")
    if old.wmean is not None and new.wmean is not None and abs(old.wmean - new.wmean) > limit:
        problems.append(f"wmean {old.wmean} vs {new.wmean}")
    return problems


def board_row_id(rows: dict[str, Row], result_file: ResultFile) -> str:
    """The row a result belongs to among ``rows`` (id -> row). A sentence-file fit corpus is identified by
    its content: a result whose file has the name of one already on the board but another sha256 (from the
    fit records) gets a row of its own, its id ending in that hash (:func:`~.rows.row_id`); the first file of
    a name keeps the plain id, so published ids stay as they are. A row or result whose records name no
    hash (written before they did) is taken as the same corpus."""
    plain = result_file.row_id
    digest = result_file.corpus_sha256
    if digest is None:
        return plain
    tagged = row_id(result_file.identity.model, result_file.identity.revision, result_file.experiment, digest)
    held = rows.get(plain)
    if tagged in rows or (held is not None and corpus_sha256(held) not in (None, digest)):
        return tagged
    return plain


def settled_result(result_file: ResultFile, entry: TaskScore) -> ResultFile:
    """``result_file`` as the run that produced it: a registry model's result whose experiment does not name the
    precision its run record gives belongs to the row of that precision (:func:`~.rows.settled_kwargs`)."""
    identity = result_file.identity
    kwargs = settled_kwargs(identity.model, identity.experiment_kwargs, {(entry.hardware or {}).get("precision")})
    if kwargs is None:
        return result_file
    settled = dataclasses.replace(identity, experiment_kwargs=kwargs,
                                  experiment=experiment_name(identity.model, kwargs))
    return dataclasses.replace(result_file, identity=settled)


def _new_row(result_file: ResultFile, rid: str) -> Row:
    """The row of a model run not on the board yet: its description, no scores (so no average and no
    baseline until the compare stage)."""
    identity = result_file.identity
    meta = identity.model_meta
    try:
        return Row(
            id=rid,
            model=identity.model,
            revision=identity.revision,
            experiment=result_file.experiment,
            experiment_kwargs=public_kwargs(identity.experiment_kwargs),
            **describe_model(identity.model, identity.experiment_kwargs, adapted_from=getattr(meta, "adapted_from", None),
                             max_tokens=getattr(meta, "max_tokens", None)),
            scores={}, n_tasks=0, average=None, average_wmean=None, complete=False, baseline=None, delta=None,
        )
    except ValidationError as error:  # loader kwargs or a model_meta.json that a row cannot say
        raise LeaderboardError(f"{result_file.path}: its model run does not fit a leaderboard row: "
                               f"{validation_problems(error)}") from None


def merge_results(
    board: Leaderboard,
    folders: Sequence[str | os.PathLike[str]],
    *,
    replace: bool = False,
    models: Iterable[str] | None = None,
    tasks: Iterable[str] | None = None,
    tolerance: float | None = None,
    require_results: bool = True,
    pair_folders: Sequence[str | os.PathLike[str]] = (),
) -> MergeReport:
    """Merge the result files under ``folders`` into ``board``'s rows and scores (in place); the
    derived fields are the compare stage's (:func:`flow_plugin.leaderboard.compare.compare`). Raises
    :class:`LeaderboardConflictError` (and leaves ``board`` as it was) when a new score disagrees with a
    recorded one and ``replace`` is false. The report's ``pairs`` are the per-pair cosines the compare
    stage's intervals need: those of the merged results, and those of rows already on the board found in
    ``folders`` or in ``pair_folders`` (the folders merged into it before; nothing there is merged). A
    result whose run record is missing (its run was killed before the record was written) is not merged,
    with a one-line warning; a recorded result replaces one kept without its record."""
    tolerance = board.tolerance if tolerance is None else tolerance
    if not is_number(tolerance) or tolerance < 0:
        raise LeaderboardError(f"tolerance must be a number >= 0, got {tolerance!r}")
    model_filter = set(models) if models is not None else None
    task_filter = set(tasks) if tasks is not None else None
    merging = _Merging({row.id: row.model_copy(deep=True) for row in board.rows}, tolerance, replace)  # on a copy
    report = merging.report
    for folder in folders:
        found = find_results(folder)
        if require_results and not found.files:
            raise DataFolderError(f"{folder}: no MTEB result files found (expected <model>/<revision>/<Task>.json"
                                  f" next to model_meta.json or run_settings.jsonl, under {found.results})")
        versions: dict[Path, dict[str, dict[str, Any]]] = {}  # run_settings.jsonl, read once per folder
        for result_file in found.files:
            if (model_filter is not None and result_file.identity.model not in model_filter) or (
                    task_filter is not None and result_file.task not in task_filter):
                # not merged; but a row already on the board may be the reference of a merged one (its raw
                # backbone, its best linear baseline)
                _recorded_pairs(merging.rows, result_file, report.pairs)
                continue
            results_folder = result_file.path.parent
            if results_folder not in versions:
                versions[results_folder] = run_settings_versions(results_folder)
            entry = read_score(result_file, found.hardware, versions[results_folder])
            report.files_read += 1
            if found.unrecorded(entry):
                report.unrecorded.append(
                    f"{result_file.path}: not merged: no run record in {found.runs_file} (its run was killed before "
                    "the record was written, or the disk was full); rerun it (flow-plugin eval or bench on that "
                    "folder sets it aside and recomputes it)")
                logger.warning("%s", report.unrecorded[-1])
                continue
            merging.add(settled_result(result_file, entry), entry)
    for folder in pair_folders:  # merged before: the per-pair cosines of rows already on the board
        try:
            earlier = find_results(folder).files
        except DataFolderError as error:  # moved, deleted, or no longer readable: its rows keep their intervals
            logger.info("per-pair cosines not looked up in %s: %s", folder, error)
            continue
        for result_file in earlier:
            _recorded_pairs(merging.rows, result_file, report.pairs)
    if (model_filter is not None or task_filter is not None) and require_results and report.files_read == 0:
        raise LeaderboardError(f"no result files of the selected models/tasks under {', '.join(map(str, folders))}")
    if merging.conflicts:
        raise LeaderboardConflictError(
            f"{len(merging.conflicts)} result(s) disagree with what is already recorded (nothing was written; "
            "pass --replace to replace them):\n  " + "\n  ".join(merging.conflicts),
            merging.conflicts,
        )
    board.rows = [publish_row(row) for row in merging.rows.values()]
    board.tolerance = tolerance
    return report


@dataclass
class _Merging:
    """One merge under way: the board's rows (a copy), what it did so far, where each entry came from, and the
    conflicts found."""

    rows: dict[str, Row]
    tolerance: float
    replace: bool
    report: MergeReport = field(default_factory=MergeReport)
    #: (row id, task) -> the result file the row's current entry came from
    origin: dict[tuple[str, str], str] = field(default_factory=dict)
    conflicts: list[str] = field(default_factory=list)

    def add(self, result_file: ResultFile, entry: TaskScore) -> None:
        """Merge one recorded result into its row (a new row when none is on the board), and keep its per-pair
        cosines; a disagreement with the recorded score is a conflict, or replaces it with ``replace``."""
        # numpy and scipy load when per-pair cosines are read (a merge), not to render a board or start the CLI
        from flow_plugin.results.pairs import pairs_of_result

        rid, task = board_row_id(self.rows, result_file), result_file.task
        if rid not in self.rows:  # the row of a run filed before runs named the precision `auto` resolved to
            rid = _unsettled_row_id(self.rows, result_file, entry) or rid
        label = f"{rid} / {task}"
        row = self.rows.get(rid)
        if row is None:
            row = self.rows[rid] = _new_row(result_file, rid)
            self.report.rows_added.append(rid)
        if not self._reconcile(row, task, entry, label, result_file):
            return
        self.origin[(rid, task)] = str(result_file.path)
        current = row.scores[task]
        kept, why = pairs_of_result(result_file.path, score_points=current.score,
                                    dataset_revision=current.dataset_revision)
        if kept is not None:
            self.report.pairs[(rid, task)] = kept
        else:
            self.report.pairs.pop((rid, task), None)
            self.report.no_pairs.append(f"{label}: {why}")

    def _reconcile(self, row: Row, task: str, entry: TaskScore, label: str, result_file: ResultFile) -> bool:
        """Put ``entry`` in ``row`` as the recorded score allows; False for a conflict (nothing changed)."""
        old, report = row.scores.get(task), self.report
        if old is None:
            row.scores[task] = entry
            report.scores_added.append(label)
            return True
        problems = score_difference(old, entry, self.tolerance)
        where = self.origin.get((row.id, task), "the leaderboard")
        if not problems and old.hardware is None and entry.hardware is not None:
            row.scores[task] = entry  # the same result, now with its run record
            report.recorded.append(label)
        elif not problems:
            report.unchanged.append(label)
        elif self.replace:
            row.scores[task] = entry
            report.replaced.append(f"{label}: {'; '.join(problems)} (was from {where}, now {result_file.path})")
        else:
            self.conflicts.append(f"{label}: {'; '.join(problems)} ({where} vs {result_file.path})")
            return False
        return True


def _recorded_pairs(rows: dict[str, Row], result_file: ResultFile, pairs: Pairs) -> None:
    """Add the per-pair cosines of ``result_file`` to ``pairs`` when its row and task are on the board, have
    none yet, and the cosines reproduce the score recorded there."""
    # numpy and scipy load when per-pair cosines are read (a merge), not to render a board or start the CLI
    from flow_plugin.results.pairs import pairs_of_result

    rid = board_row_id(rows, result_file)
    on_board = rows.get(rid)
    recorded = on_board.scores.get(result_file.task) if on_board is not None else None
    if recorded is not None and (rid, result_file.task) not in pairs:
        kept, _ = pairs_of_result(result_file.path, score_points=recorded.score,
                                  dataset_revision=recorded.dataset_revision)
        if kept is not None:
            pairs[(rid, result_file.task)] = kept


def _unsettled_row_id(rows: dict[str, Row], result_file: ResultFile, entry: TaskScore) -> str | None:
    """The one row of ``result_file``'s model run (whose experiment names its precision) that was filed before
    runs named the precision ``auto`` resolved to: same model, revision and other kwargs, no precision in its
    kwargs, and its scores ran at the result's precision. Its id stays: a published row keeps its id."""
    identity = result_file.identity
    precision = identity.experiment_kwargs.get("precision")
    if precision is None or (entry.hardware or {}).get("precision") != precision:
        return None
    others = public_kwargs({key: value for key, value in identity.experiment_kwargs.items() if key != "precision"})
    found = [row.id for row in rows.values() if row.model == identity.model and row.revision == identity.revision
             and row.experiment_kwargs == others
             and {(score.hardware or {}).get("precision") for score in row.scores.values()} == {precision}]
    return found[0] if len(found) == 1 else None


def board_content(board: Leaderboard) -> str:
    """Everything but the update stamp: what decides whether an update changed anything (a merge that
    changes nothing keeps "updated", so the rewritten file is byte for byte the old one)."""
    return json.dumps(board.model_dump(mode="json", exclude={"updated", "generated_by"}), sort_keys=True)
