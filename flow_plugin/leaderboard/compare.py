"""The compare stage: every number a leaderboard derives from its scores, computed once.

The board's rows hold scores (the ingest stage's). This stage derives, in order:

1. :func:`finalize`: the fields the file stores on each row and seed group: the column order, the row
   order, each row's averages, its raw backbone (``baseline``) and its Δ against it under "all"
   (``delta``), and the seed groups (mean and spread over seeds of every score, average and Δ);
2. :func:`annotate_intervals`: each unit's :class:`~.models.Comparison` per protocol and reference
   (the Δ and its 95% interval per task and on the average, against the raw backbone and against the
   best linear baseline), stored on its row or seed group (``intervals``), from the per-pair cosines a
   merge found; a comparison that cannot be recomputed keeps its earlier value while it still describes
   the scores;
3. :class:`Compared`: what every rendering shows, read from those fields: each displayed unit's score
   cells and Δ cells (value, spread over seeds, interval, the tasks an average leaves out), each
   column's best value, the best row per backbone (:class:`Headline`), and the reasons a board was
   computed by an older procedure. It also says where the stored comparisons contradict the scores
   (:meth:`Compared.problems`).

:func:`compare` runs the three. A **unit** is a displayed row: a plain row, or a seed group (the rows
that differ only in their seed), which shows the mean and spread over its seeds. Each unit is compared
with its raw backbone (the raw row of the same weights, pooling, length and loader kwargs) and with the
best linear baseline (of SN, NATSV, SN+NATSV and whitening, the complete one with the highest average
under the protocol) of the same backbone, loader kwargs and fit corpus. A Δ is the difference of the
board's scores (the board's own ``delta`` against raw under "all"; otherwise per member row its score
minus the reference's, 4 decimals, then mean and spread over the members); an average is the mean of a
member's per-task deltas, over the tasks of the comparison's interval where the board has one.

The intervals are the paired, stratified, two-stage percentile bootstrap of
:mod:`flow_plugin.evaluation.intervals` (:class:`~flow_plugin.evaluation.intervals.SharedBootstrap`): every
unit is scored on the same resampled pairs of a task, and a seeded unit's seeds are drawn with
replacement once, shared by its tasks. The file writes a unit's comparisons as::

    "intervals": {"all": {"raw": {"against": <row id>, "delta": {task: Δ, ..., "average": Δ},
                                  "ci95": {task: [low, high], ...}, "significant": {task: bool, ...}},
                          "linear": {"against": <unit id>, ..., "calibrator": "sn-natsv"}},
                  "wmean": {...}}

in points (4 decimals); the board's ``interval_method`` says how they were computed.
"""

from __future__ import annotations

import functools
import json
import statistics
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from flow_plugin.calibration import default_seed
from flow_plugin.calibration.names import AUTO_CALIBRATORS, CALIBRATOR_NAMES, IDENTITY_ARGUMENTS, LINEAR_BASELINES
from flow_plugin.catalog.registry import MODEL_PREFIX, weights_revision
from flow_plugin.data.tasks import task_label
from flow_plugin.data.fit_corpus import FIT_ARGUMENTS
from flow_plugin.errors import LeaderboardError
from flow_plugin.leaderboard.ingest.rows import display_columns, display_name
from flow_plugin.leaderboard.models import (
    AVERAGE,
    Comparison,
    IntervalMethod,
    Intervals,
    Leaderboard,
    ProtocolName,
    ReferenceName,
    Row,
    SeedGroup,
    SeedSpread,
    round_points,
    task_sort_key,
)
from flow_plugin.protocols import PROTOCOLS

if TYPE_CHECKING:  # pragma: no cover
    from flow_plugin.results.pairs import PairScores

#: what a unit is compared with: its raw backbone, and the best linear baseline of its setting
REFERENCES: tuple[ReferenceName, ...] = ("raw", "linear")
#: how far a stored per-task Δ may lie from the difference of the board's scores it compares (points): it
#: absorbs the 4-decimal rounding of the scores and of the Δ computed from the per-pair cosines
DELTA_TOLERANCE = 1e-3
#: slack of a 4-decimal value against a 4-decimal bound
_ROUNDING = 1e-4 + 1e-9


# ============================================================================ 1. the file's derived fields
def baseline_key(row: Row) -> str:
    """Rows sharing this key differ only in the calibrator (its identity arguments too: ``auto``'s rule) and what it
    was fitted on (:data:`~flow_plugin.data.fit_corpus.FIT_ARGUMENTS`: the corpus, the duplicate policy ...): the same
    backbone, weights commit (a flow-plugin result revision adds a configuration digest, which names the
    calibrator too), pooling, length and other loader kwargs."""
    ignored = (*FIT_ARGUMENTS, *IDENTITY_ARGUMENTS, "calibrator_params", "calibrator")
    kwargs = {k: v for k, v in row.experiment_kwargs.items() if k not in ignored}
    return json.dumps([row.backbone, _weights(row), row.pooling, row.max_seq_length, kwargs], sort_keys=True)


def _weights(row: Row) -> str:
    """The weights commit of a row's revision (without flow-plugin's configuration digest)."""
    return weights_revision(row.revision) if row.model.startswith(MODEL_PREFIX) else row.revision


def finalize(board: Leaderboard) -> Leaderboard:
    """Derive the fields the file stores (in place): task order, row order, averages, baselines, deltas
    against raw, seed groups (whose intervals are kept while their rows are the same)."""
    board.tasks = sorted({task for row in board.rows for task in row.scores} | set(board.tasks), key=task_sort_key)
    order = {method: index for index, method in enumerate(CALIBRATOR_NAMES)}
    board.rows.sort(key=lambda r: (r.backbone, _weights(r), r.experiment or "", order.get(r.calibrator, len(order)),
                                   r.calibrator, r.id))
    raw_rows: dict[str, Row] = {}
    for row in board.rows:
        row.scores = {task: row.scores[task] for task in board.tasks if task in row.scores}
        values = [entry.score for entry in row.scores.values()]
        wmeans = [entry.wmean for entry in row.scores.values() if entry.wmean is not None]
        row.n_tasks = len(values)
        row.average = round_points(sum(values) / len(values)) if values else None
        row.average_wmean = round_points(sum(wmeans) / len(wmeans)) if wmeans and len(wmeans) == len(values) else None
        row.complete = len(values) == len(board.tasks)
        if row.calibrator == "raw":
            raw_rows.setdefault(baseline_key(row), row)
    for row in board.rows:
        baseline = raw_rows.get(baseline_key(row)) if row.calibrator != "raw" else None
        if baseline is None:
            row.baseline, row.delta = None, None
            continue
        deltas = {
            task: round_points(entry.score - baseline.scores[task].score)
            for task, entry in row.scores.items()
            if task in baseline.scores
        }
        if deltas:
            deltas[AVERAGE] = round_points(sum(deltas.values()) / len(deltas))
        row.baseline, row.delta = (baseline.id, deltas) if deltas else (None, None)
    _annotate_seed_groups(board, board.max_seeds)
    return board


# ---------------------------------------------------------------------------- seed groups
def spread(values: list[float]) -> tuple[float, float]:
    """(mean, sample standard deviation) of ``values`` (the deviation of one value is 0).

    >>> spread([80.0, 81.0, 82.0]), spread([80.0])
    ((81.0, 1.0), (80.0, 0.0))
    """
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


@functools.lru_cache(maxsize=None)
def _default_seed(calibrator: str) -> int | None:
    """The seed a calibrator uses when none is given (``None`` for unseeded or unknown ones)."""
    return default_seed(calibrator) if calibrator in CALIBRATOR_NAMES else None


def row_seed(row: Row) -> int | None:
    """The seed a row's calibrator ran with, ``None`` for a calibrator without one."""
    seed: int | None = row.calibrator_params.get("seed")
    if seed is None and row.model.startswith(MODEL_PREFIX):
        seed = _default_seed(row.calibrator)
    return seed


def _group_key(row: Row) -> str:
    kwargs = json.loads(json.dumps(row.experiment_kwargs))
    params = kwargs.get("calibrator_params")
    if isinstance(params, dict):
        params.pop("seed", None)
        if not params:
            kwargs.pop("calibrator_params")
    # the fit corpus label carries a sentence file's hash: two files of one name are two groups
    return json.dumps([row.model, row.revision, kwargs, row.fit_corpus], sort_keys=True)


def _seed_spread(values: list[float]) -> SeedSpread:
    mean, std = spread(values)
    return SeedSpread(mean=round_points(mean), std=round_points(std), n=len(values), values=values)


def seed_groups(board: Leaderboard, max_seeds: int | None = None) -> list[SeedGroup]:
    """The groups of two or more rows that differ only in their seed (at most ``max_seeds`` seeds each,
    the lowest first), with mean and standard deviation of every score, average and Δ against the raw
    backbone. Whether a difference is significant is not decided here: only a confidence interval that
    excludes 0 decides it."""
    grouped: dict[str, list[tuple[int, Row]]] = {}
    for row in board.rows:
        seed = row_seed(row)
        if seed is not None:
            grouped.setdefault(_group_key(row), []).append((seed, row))
    groups = []
    for members in grouped.values():
        members.sort(key=lambda item: item[0])
        members = members[:max_seeds] if max_seeds else members
        if len(members) < 2:
            continue
        rows = [row for _, row in members]
        tasks = [task for task in board.tasks if all(task in row.scores for row in rows)]
        wmeans = {task: [w for row in rows if (w := row.scores[task].wmean) is not None] for task in tasks}
        group = SeedGroup(
            id=f"{rows[0].id} (seeds {members[0][0]}-{members[-1][0]})",
            model=rows[0].model,
            calibrator=rows[0].calibrator,
            seeds=[seed for seed, _ in members],
            rows=[row.id for row in rows],
            scores={task: _seed_spread([row.scores[task].score for row in rows]) for task in tasks},
            wmean={task: _seed_spread(values) for task, values in wmeans.items() if len(values) == len(rows)},
        )
        if tasks and all(row.average is not None for row in rows):
            group.average = _seed_spread([round_points(sum(row.scores[t].score for t in tasks) / len(tasks))
                                          for row in rows])
        if tasks and len(group.wmean) == len(tasks):
            group.average_wmean = _seed_spread([round_points(sum(wmeans[t][i] for t in tasks) / len(tasks))
                                                for i in range(len(rows))])
        deltas = [row.delta for row in rows if row.delta]
        if len(deltas) == len(rows) and len({row.baseline for row in rows}) == 1:
            group.baseline = rows[0].baseline
            group.delta = {task: _seed_spread([delta[task] for delta in deltas]) for task in [*tasks, AVERAGE]
                           if all(task in delta for delta in deltas)}
        groups.append(group)
    return groups


def _annotate_seed_groups(board: Leaderboard, max_seeds: int | None = None) -> None:
    """Set ``board.seed_groups`` (None, left out of the file, when no calibrator ran with several seeds),
    keeping a group's intervals while its rows are the same (only a merge reads the per-pair cosines)."""
    groups = seed_groups(board, max_seeds)
    earlier = {group.id: group for group in board.seed_groups or []}
    for group in groups:
        kept = earlier.get(group.id)
        if kept is not None and kept.intervals is not None and kept.rows == group.rows:
            group.intervals = kept.intervals
    if groups:
        board.seed_groups = groups
        if max_seeds:
            board.max_seeds = max_seeds
    else:
        board.seed_groups = None
        board.max_seeds = None


# ============================================================================ units and their references
@dataclass(frozen=True)
class Stats:
    """A value as a unit shows it: a row's own (``std`` None, ``n`` 1), or the mean over a seed group's
    seeds with its sample standard deviation."""

    mean: float
    std: float | None
    n: int

    @classmethod
    def over_seeds(cls, found: SeedSpread) -> Stats:
        return cls(found.mean, found.std, found.n)


def _stats(values: list[float]) -> Stats:
    """Mean and spread of one value per member (no spread for a single run), in stored decimals."""
    mean, std = spread(values)
    return Stats(round_points(mean), round_points(std) if len(values) > 1 else None, len(values))


def member_value(row: Row, column: str, protocol: ProtocolName) -> float | None:
    """A member row's score (or average) under a protocol."""
    if column == AVERAGE:
        return row.average if protocol == "all" else row.average_wmean
    entry = row.scores.get(column)
    if entry is None:
        return None
    return entry.score if protocol == "all" else entry.wmean


@dataclass(frozen=True)
class CellInterval:
    """A delta cell's 95% interval and whether it excludes 0, as the board's :class:`~.models.Comparison` holds them."""

    ci95: tuple[float, float]
    significant: bool


@dataclass(frozen=True)
class DeltaCell:
    """One Δ cell as every rendering shows it: the value (with its spread over seeds), the 95% interval
    computed with it where the board has one, and (the average only) the board's tasks it leaves out."""

    stats: Stats
    interval: CellInterval | None = None
    without: tuple[str, ...] = ()

    def left_out(self) -> str:
        """The tasks an average leaves out, in words ("" when it leaves out none).

        >>> DeltaCell(Stats(1.0, None, 1), without=("SentEvalSTSBenchmark", "SentEvalSICKR")).left_out()
        'without STS-B, SICK-R'
        """
        return f"without {', '.join(map(task_label, self.without))}" if self.without else ""

    def note(self) -> str:
        """What a cell adds after its value when the average leaves tasks out: " (without STS-B)"."""
        return f" ({self.left_out()})" if self.without else ""


class Unit:
    """A displayed row: a plain row, or a seed group (its first member's description, every member's
    scores). After :class:`Compared` it holds every cell the renderings show: ``scores`` (protocol ->
    column -> :class:`Stats` or None), ``deltas`` (protocol -> reference -> column -> :class:`DeltaCell`,
    empty when it has no such Δ) and ``against`` (protocol -> reference -> the unit those deltas are
    against, or None)."""

    def __init__(self, first: Row, members: list[Row], group: SeedGroup | None) -> None:
        self.first, self.members, self.group = first, members, group
        self.key = group.id if group is not None else first.id
        self.columns = display_columns(first, group.seeds if group is not None else None)
        self.name = display_name(self.columns)
        self.short_name = display_name(self.columns, backbone=False)
        #: units sharing it are compared with the same best linear baseline: backbone, loader kwargs, fit corpus
        self.linear_key = baseline_key(first) + "|" + str(first.fit_corpus)
        self.scores: dict[ProtocolName, dict[str, Stats | None]] = {}
        self.deltas: dict[ProtocolName, dict[ReferenceName, dict[str, DeltaCell]]] = {}
        self.against: dict[ProtocolName, dict[ReferenceName, Unit | None]] = {}

    @property
    def record(self) -> Row | SeedGroup:
        """Where the unit's comparisons live in the board: its seed group, or the row itself."""
        return self.group if self.group is not None else self.first

    @property
    def calibrator(self) -> str:
        return self.first.calibrator

    @property
    def complete(self) -> bool:
        """Every task of the board: the row's, and for a group every seed's."""
        return self.first.complete and (self.group is None or len(self.group.scores) == len(self.first.scores))

    def score_stats(self, column: str, protocol: ProtocolName) -> Stats | None:
        """A task's score (or ``"average"``) under a protocol, from the board."""
        if self.group is None:
            value = member_value(self.first, column, protocol)
            return None if value is None else Stats(value, None, 1)
        if column == AVERAGE:
            found = self.group.average if protocol == "all" else self.group.average_wmean
        else:
            found = (self.group.scores if protocol == "all" else self.group.wmean).get(column)
        return None if found is None else Stats.over_seeds(found)

    def means(self, tasks: list[str], protocol: ProtocolName) -> dict[str, float]:
        found = {t: self.score_stats(t, protocol) for t in tasks}
        return {t: stats.mean for t, stats in found.items() if stats is not None}

    def recorded_deltas(self) -> dict[str, Stats]:
        """The Δ against the raw backbone the board holds (protocol "all"), per task and ``"average"``:
        the row's, or the group's over its seeds ({} when there is none)."""
        if self.group is not None:
            return {column: Stats.over_seeds(found) for column, found in (self.group.delta or {}).items()}
        return {column: Stats(value, None, 1) for column, value in (self.first.delta or {}).items()}

    def stored(self, protocol: ProtocolName, name: ReferenceName) -> Comparison | None:
        """The comparison the board holds for a protocol and reference (None when it has none)."""
        return (self.record.intervals or {}).get(protocol, {}).get(name)


def board_units(board: Leaderboard) -> list[Unit]:
    """The displayed rows in the leaderboard's order: a seed group in the place of its first member."""
    rows = {row.id: row for row in board.rows}
    member_of = {row_id: group for group in board.seed_groups or [] for row_id in group.rows}
    units = []
    for row in board.rows:
        group = member_of.get(row.id)
        if group is None:
            units.append(Unit(row, [row], None))
        elif row.id == group.rows[0]:
            units.append(Unit(row, [rows[row_id] for row_id in group.rows], group))
    return units


class References:
    """What each unit is compared with: its raw backbone's unit, and per protocol the best linear baseline
    of its setting (the complete linear unit with the highest average), never itself."""

    def __init__(self, units: list[Unit]) -> None:
        self._unit_of_row = {row.id: unit for unit in units for row in unit.members}
        self._best: dict[ProtocolName, dict[str, Unit]] = {}
        for protocol in PROTOCOLS:
            best: dict[str, tuple[float, Unit]] = {}
            for unit in units:
                if unit.calibrator not in LINEAR_BASELINES or not unit.first.complete:
                    continue
                average = unit.score_stats(AVERAGE, protocol)
                if average is not None and (unit.linear_key not in best or average.mean > best[unit.linear_key][0]):
                    best[unit.linear_key] = (average.mean, unit)
            self._best[protocol] = {key: unit for key, (_, unit) in best.items()}

    def of(self, unit: Unit, protocol: ProtocolName, name: ReferenceName) -> Unit | None:
        """The unit ``unit`` is compared with under ``protocol`` (None for raw, and for the best linear
        baseline against itself)."""
        if unit.calibrator == "raw":
            return None
        if name == "raw":
            return self._unit_of_row.get(unit.first.baseline or "")
        reference = self._best[protocol].get(unit.linear_key)
        return None if reference is None or reference.key == unit.key else reference


def _describes(compared: Comparison, unit: Unit, reference: Unit, tasks: list[str], protocol: ProtocolName) -> list[str]:
    """Why a comparison's per-task Δ do not match the board's scores of ``unit`` and ``reference`` (within
    :data:`DELTA_TOLERANCE`; [] when they all do)."""
    mine, theirs = unit.means(tasks, protocol), reference.means(tasks, protocol)
    problems = []
    for task, delta in compared.delta.items():
        if task == AVERAGE:
            continue
        if task not in mine or task not in theirs:
            problems.append(f"{task}: the board has no score of one side")
        elif abs(mine[task] - theirs[task] - delta) > DELTA_TOLERANCE:
            problems.append(f"{task}: Δ {delta:+.4f}, but the scores differ by {mine[task] - theirs[task]:+.4f}")
    return problems


# ============================================================================ 2. the intervals
def annotate_intervals(board: Leaderboard, pairs: Mapping[tuple[str, str], PairScores], *,
                       n_resamples: int | None = None, confidence: float | None = None, seed: int = 0) -> int:
    """Compute the comparisons of every unit whose pairs (and its references' pairs) are in ``pairs``
    ((row id, task) -> per-pair cosines), in place, stored on the unit's row or seed group. A comparison that
    cannot be computed now (its pairs or its reference's pairs are not in ``pairs``) keeps its earlier value
    when that was against the same reference and its deltas still match the board's scores. Returns the
    number of units given at least one newly computed interval."""
    # numpy and scipy load when intervals are computed (a merge), not to render a board or start the CLI
    from flow_plugin.evaluation.intervals import DEFAULT_CONFIDENCE, DEFAULT_RESAMPLES, METHOD, SharedBootstrap

    settings = IntervalMethod(method=METHOD, confidence=DEFAULT_CONFIDENCE if confidence is None else confidence,
                              n_resamples=DEFAULT_RESAMPLES if n_resamples is None else n_resamples, seed=seed)
    tasks = list(board.tasks)
    units = board_units(board)
    references = References(units)
    bootstrap = SharedBootstrap(settings.n_resamples, settings.confidence, settings.seed)
    for task in tasks:
        runs = {unit.key: [pairs.get((row.id, task)) for row in unit.members] for unit in units}
        found = {key: [p for p in scored if p is not None] for key, scored in runs.items() if scored and None not in scored}
        if not found:
            continue
        first = next(iter(found.values()))[0]  # every unit is scored on the same gold scores
        bootstrap.add_set(task, first.subsets(first.gold), {
            key: [p.subsets(p.cosine) for p in scored] for key, scored in found.items()
            if all(p.same_pairs(first) for p in scored)})
    computed = 0
    for unit in units:
        old, unit.record.intervals = unit.record.intervals, None
        for member in unit.members:
            if member is not unit.record:
                member.intervals = None
        if unit.calibrator == "raw":
            continue
        intervals: Intervals = {}
        fresh = False
        for protocol in PROTOCOLS:
            for name in REFERENCES:
                reference = references.of(unit, protocol, name)
                if reference is None:
                    continue
                found = bootstrap.compare(unit.key, reference.key, protocol, tasks)
                compared: Comparison | None = None
                if found is not None:
                    fresh = True
                    common, per_task, average = found
                    compared = Comparison(against=reference.key, delta={}, ci95={}, significant={},
                                          tasks=common if len(common) < len(tasks) else None,
                                          calibrator=reference.calibrator if name == "linear" else None)
                    for column, interval in [*per_task.items(), (AVERAGE, average)]:
                        estimate, low, high = interval.points()
                        compared.delta[column] = estimate
                        compared.ci95[column] = (low, high)
                        compared.significant[column] = interval.significant
                else:
                    earlier = (old or {}).get(protocol, {}).get(name)
                    if (earlier is not None and earlier.against == reference.key
                            and not _describes(earlier, unit, reference, tasks, protocol)):
                        compared = earlier
                        covered = [t for t in earlier.delta if t != AVERAGE]  # the board may have more tasks now
                        compared.tasks = covered if covered != tasks else None
                if compared is not None:
                    intervals.setdefault(protocol, {})[name] = compared
        unit.record.intervals = intervals or None
        computed += fresh
    board.interval_method = settings if any(unit.record.intervals is not None for unit in units) else None
    return computed


# ============================================================================ 3. what every rendering shows
@dataclass(frozen=True)
class Headline:
    """The answer to "which calibrator wins on this backbone", under one protocol: the complete unit with
    the highest average, and (when that is the raw backbone) the best calibrated one; and the two a user
    chooses between: the fixed calibrator (not raw, not one that chooses per task, such as auto) with the
    highest average, and the auto unit with the highest average (None where the board has none)."""

    backbone: str
    protocol: ProtocolName
    best: Unit
    best_calibrated: Unit | None
    best_fixed: Unit | None = None
    auto: Unit | None = None

    @property
    def raw_wins(self) -> bool:
        return self.best.calibrator == "raw"


@dataclass
class Compared:
    """The compare stage's result: the board, its units with every cell the renderings show (see
    :class:`Unit`), each column's best value, the best row per backbone and protocol, and the reasons the
    board (or some rows) were computed by an older procedure. Built by :func:`compare`; the renderings read
    it and compute nothing."""

    board: Leaderboard
    units: list[Unit] = field(init=False)
    #: the board's tasks, then "average"
    columns: list[str] = field(init=False)
    #: protocol -> column -> the best value of the column (an average: among the complete units)
    best: dict[ProtocolName, dict[str, float | None]] = field(init=False)
    #: per backbone (in board order) and protocol, the best row
    headlines: list[Headline] = field(init=False)
    #: why the board, or some of its rows, were computed by an older procedure (empty when none was)
    notes: list[str] = field(init=False)
    #: the board's tasks
    tasks: list[str] = field(init=False)
    #: units given newly computed intervals by :func:`compare` (0 when it was given no per-pair cosines), and
    #: the seconds that took
    intervals_computed: int = 0
    interval_seconds: float = 0.0

    def __post_init__(self) -> None:
        self.tasks = list(self.board.tasks)
        self.columns = [*self.tasks, AVERAGE]
        self.units = board_units(self.board)
        self._references = References(self.units)
        for unit in self.units:
            for protocol in PROTOCOLS:
                unit.scores[protocol] = {column: unit.score_stats(column, protocol) for column in self.columns}
                unit.deltas[protocol], unit.against[protocol] = {}, {}
                for name in REFERENCES:
                    reference = self._references.of(unit, protocol, name)
                    cells = self._cells(unit, reference, protocol, name) if reference is not None else {}
                    unit.deltas[protocol][name] = cells
                    unit.against[protocol][name] = reference if cells else None
        self.best = {protocol: {column: _highest([unit.scores[protocol][column] for unit in self.units
                                                  if column != AVERAGE or unit.complete])
                                for column in self.columns} for protocol in PROTOCOLS}
        self.headlines = self._headlines()
        self.notes = _procedure_notes(self.units)

    # ------------------------------------------------------------ the cells
    def _member_deltas(self, unit: Unit, reference: Unit, protocol: ProtocolName,
                       name: ReferenceName) -> list[dict[str, float]]:
        """Per member row, task -> its score minus the reference's (mean) score, 4 decimals, over the tasks
        every member and the reference have (the board's own ``Row.delta`` against raw under "all")."""
        if name == "raw" and protocol == "all":
            per_member = [{t: v for t, v in (row.delta or {}).items() if t != AVERAGE} for row in unit.members]
        else:
            base = reference.means(self.tasks, protocol)
            per_member = [{t: round_points(value - base[t]) for t in self.tasks
                           if t in base and (value := member_value(row, t, protocol)) is not None}
                          for row in unit.members]
        common = [t for t in self.tasks if all(t in deltas for deltas in per_member)]
        return [{t: deltas[t] for t in common} for deltas in per_member] if common else []

    def _cells(self, unit: Unit, reference: Unit, protocol: ProtocolName, name: ReferenceName) -> dict[str, DeltaCell]:
        """Column (a task or ``"average"``) -> the Δ cell of a unit against a reference ({} when it has none)."""
        per_member = self._member_deltas(unit, reference, protocol, name)
        if not per_member:
            return {}
        compared = unit.stored(protocol, name)
        if compared is not None and compared.against != reference.key:
            compared = None  # compared with another unit than the board's reference (problems() says so)
        recorded = unit.recorded_deltas() if name == "raw" and protocol == "all" else {}
        out: dict[str, DeltaCell] = {}
        for task in per_member[0]:
            stats = recorded.get(task) or _stats([deltas[task] for deltas in per_member])
            out[task] = _with_comparison(stats, compared, task)
        covered = [t for t in (compared.delta if compared is not None else per_member[0]) if t != AVERAGE]
        if covered == list(per_member[0]) and AVERAGE in recorded:
            stats = recorded[AVERAGE]
        else:
            stats = _stats([round_points(sum(deltas[t] for t in covered) / len(covered)) for deltas in per_member])
        cell = _with_comparison(stats, compared, AVERAGE)
        out[AVERAGE] = DeltaCell(cell.stats, cell.interval, tuple(t for t in self.tasks if t not in covered))
        return out

    def _headlines(self) -> list[Headline]:
        backbones: dict[str, list[Unit]] = {}
        for unit in self.units:
            if unit.complete and unit.scores["all"][AVERAGE] is not None:
                backbones.setdefault(unit.columns["backbone"], []).append(unit)
        headlines = []
        for backbone, units in backbones.items():
            for protocol in PROTOCOLS:
                ranked = [unit for unit in units if unit.scores[protocol][AVERAGE] is not None]
                if not ranked:
                    continue
                ranked.sort(key=lambda unit: -unit.scores[protocol][AVERAGE].mean)  # type: ignore[union-attr]
                calibrated = next((unit for unit in ranked if unit.calibrator != "raw"), None)
                fixed = next((unit for unit in ranked if unit.calibrator not in ("raw", *AUTO_CALIBRATORS)), None)
                auto = next((unit for unit in ranked if unit.calibrator in AUTO_CALIBRATORS), None)
                headlines.append(Headline(backbone, protocol, ranked[0], calibrated, fixed, auto))
        return headlines

    # ------------------------------------------------------------ the check
    def problems(self) -> list[str]:
        """Why the board's stored comparisons do not describe its scores (one line each; [] when they do):
        a comparison against another unit than its reference, a per-task Δ that is not the difference of
        the scores (within :data:`DELTA_TOLERANCE`), an average that is not the mean of its tasks' deltas,
        a significance that its interval does not say, or a shown Δ outside its interval."""
        found = []
        for unit in self.units:
            for protocol, references in (unit.record.intervals or {}).items():
                for name, compared in references.items():
                    where = f"row {unit.key!r}, Δ against {name} ({protocol})"
                    found += [f"{where}: {problem}" for problem in self._comparison_problems(unit, protocol, name,
                                                                                              compared)]
        return found

    def _comparison_problems(self, unit: Unit, protocol: ProtocolName, name: ReferenceName,
                             compared: Comparison) -> list[str]:
        reference = self._references.of(unit, protocol, name)
        if reference is None or reference.key != compared.against:
            now = "none" if reference is None else repr(reference.key)
            return [f"computed against {compared.against!r}, but its reference is now {now}"]
        columns = set(compared.delta)
        if AVERAGE not in columns or set(compared.ci95) != columns or set(compared.significant) != columns:
            return ["its delta, ci95 and significant do not name the same tasks and the average"]
        tasks = [t for t in compared.delta if t != AVERAGE]
        if (compared.tasks or self.tasks) != tasks:
            return [f"its average is over {', '.join(tasks)} but says it is over "
                    f"{', '.join(compared.tasks or self.tasks)}"]
        problems = _describes(compared, unit, reference, self.tasks, protocol)
        mean = sum(compared.delta[t] for t in tasks) / len(tasks)
        if abs(mean - compared.delta[AVERAGE]) > DELTA_TOLERANCE:
            problems.append(f"average: Δ {compared.delta[AVERAGE]:+.4f}, but its tasks' deltas average {mean:+.4f}")
        for column in compared.delta:
            low, high = compared.ci95[column]
            if compared.significant[column] != (low > 0 or high < 0):
                problems.append(f"{column}: marked {'' if compared.significant[column] else 'not '}significant, "
                                f"but its interval is [{low:+.4f}, {high:+.4f}]")
        if problems:
            return problems
        for column, cell in unit.deltas[protocol][name].items():  # what is shown
            if cell.interval is not None:
                (low, high), shown = cell.interval.ci95, cell.stats.mean
                if not low - _ROUNDING <= shown <= high + _ROUNDING:
                    problems.append(f"{column}: Δ {shown:+.4f} lies outside its interval [{low:+.4f}, {high:+.4f}]")
        return problems

    def check(self, where: str) -> None:
        """Refuse a board whose stored intervals do not describe its scores (:meth:`problems`): a one-line
        :class:`~flow_plugin.errors.LeaderboardError` naming ``where``, the first row and the remedy."""
        problems = self.problems()
        if problems:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise LeaderboardError(
                f"{where}: its intervals do not match its scores: {problems[0]}{more}; the scores were changed after "
                "the intervals were computed: restore them, or merge the result folders again with "
                "`flow-plugin leaderboard RESULTS... -o <board>.json --replace` to recompute both")


def _highest(values: list[Stats | None]) -> float | None:
    present = [value.mean for value in values if value is not None]
    return max(present) if present else None


def _with_comparison(stats: Stats, compared: Comparison | None, column: str) -> DeltaCell:
    """A cell: its Δ with the comparison's interval where the comparison has the column, else alone."""
    if compared is None or column not in compared.ci95:
        return DeltaCell(stats)
    return DeltaCell(stats, CellInterval(compared.ci95[column], compared.significant[column]))


def _procedure_notes(units: list[Unit]) -> list[str]:
    """Why a board, or some of its rows, were computed by an older procedure (empty when none was)."""
    notes = []
    calibrated = [unit for unit in units if unit.calibrator != "raw"]
    missing = [unit for unit in calibrated if not unit.record.intervals]
    if missing:
        notes.append(f"{len(missing)} of {len(calibrated)} calibrated rows have no "
                     "confidence intervals: their per-pair cosines were not kept (results computed before "
                     "flow-plugin kept them, or by a task that does not); rerun them to get intervals")
    overlapping = sorted({", ".join(unit.columns[key] for key in ("backbone", "fit_corpus", "duplicates"))
                          for unit in units if _ensemble_without_member_seeds(unit)})
    if overlapping:
        notes.append("ensemble rows whose fit records name no member seeds (computed when the members of "
                     "consecutive seeds overlapped, so their spread over seeds is understated): "
                     + "; ".join(f"flow-ens ({text})" for text in overlapping))
    return notes


def _ensemble_without_member_seeds(unit: Unit) -> bool:
    """An ensemble (``flow-ens``) unit with a score whose fit records do not list the members' seeds."""
    if unit.calibrator != "flow-ens":
        return False
    return any(not entry.fits or not all(fit.get("member_seeds") for fit in entry.fits)
               for row in unit.members for entry in row.scores.values())


# ============================================================================ the stage
def compare(board: Leaderboard, pairs: Mapping[tuple[str, str], PairScores] | None = None) -> Compared:
    """Run the compare stage on ``board`` (in place): :func:`finalize`, then :func:`annotate_intervals` from
    ``pairs`` when a merge found per-pair cosines (``None``: keep the stored intervals, as a re-render does),
    and return the :class:`Compared` every rendering reads."""
    finalize(board)
    computed, seconds = 0, 0.0
    if pairs is not None:
        started = time.perf_counter()
        computed = annotate_intervals(board, pairs)
        seconds = time.perf_counter() - started
    compared = Compared(board)
    compared.intervals_computed, compared.interval_seconds = computed, seconds
    return compared


__all__ = ["DELTA_TOLERANCE", "REFERENCES", "CellInterval", "Compared", "DeltaCell", "Headline", "References", "Stats",
           "Unit", "annotate_intervals", "baseline_key", "board_units", "compare", "finalize", "member_value",
           "row_seed", "seed_groups", "spread"]
