"""The leaderboard's compared units: a displayed row (a seed group is one unit, its seeds its
members), its scores under a protocol, and the best linear baseline it is compared with.

Shared by the page's view (:mod:`.view`), the Markdown (:mod:`.render`) and the confidence
intervals (:mod:`.intervals`), so that all three compare the same rows. A unit holds the board's own
:class:`~.models.Row` and :class:`~.models.SeedGroup` models; its :class:`Stats` are derived, for display.
"""

from __future__ import annotations

from dataclasses import dataclass

from flow_plugin.calibration.names import LINEAR_BASELINES
from flow_plugin.errors import LeaderboardError
from flow_plugin.leaderboard.merge import baseline_key
from flow_plugin.leaderboard.models import (
    Comparison,
    Leaderboard,
    ProtocolName,
    ReferenceName,
    Row,
    SeedGroup,
    SeedSpread,
)
from flow_plugin.leaderboard.public import display_columns, display_name
from flow_plugin.leaderboard.schema import round_points
from flow_plugin.leaderboard.seeds import spread

PROTOCOLS: tuple[ProtocolName, ...] = ("all", "wmean")
AVERAGE = "average"


@dataclass(frozen=True)
class Stats:
    """A value as a unit shows it: a row's own (``std`` None, ``n`` 1), or the mean over a seed group's
    seeds with its sample standard deviation."""

    mean: float
    std: float | None
    n: int

    @classmethod
    def over_seeds(cls, spread: SeedSpread) -> Stats:
        return cls(spread.mean, spread.std, spread.n)


def member_value(row: Row, column: str, protocol: ProtocolName) -> float | None:
    """A member row's score (or average) under a protocol."""
    if column == AVERAGE:
        return row.average if protocol == "all" else row.average_wmean
    entry = row.scores.get(column)
    if entry is None:
        return None
    return entry.score if protocol == "all" else entry.wmean


class Unit:
    """A displayed row: a plain row, or a seed group (its first member's description, every member's scores)."""

    def __init__(self, first: Row, members: list[Row], group: SeedGroup | None) -> None:
        self.first, self.members, self.group = first, members, group
        self.key = group.id if group is not None else first.id
        self.columns = display_columns(first, group.seeds if group is not None else None)
        self.name = display_name(self.columns)
        #: units sharing it are compared with the same best linear baseline: backbone, loader kwargs, fit corpus
        self.linear_key = baseline_key(first) + "|" + str(first.fit_corpus)

    @property
    def record(self) -> Row | SeedGroup:
        """Where the unit's derived fields (its intervals) live in the board: its seed group, or the row itself."""
        return self.group if self.group is not None else self.first

    @property
    def calibrator(self) -> str:
        return self.first.calibrator

    @property
    def complete(self) -> bool:
        """Every task of the board: the row's, and for a group every seed's."""
        return self.first.complete and (self.group is None or len(self.group.scores) == len(self.first.scores))

    def score_stats(self, column: str, protocol: ProtocolName) -> Stats | None:
        """A task's score (or ``"average"``) under a protocol."""
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
            return {column: Stats.over_seeds(spread) for column, spread in (self.group.delta or {}).items()}
        return {column: Stats(value, None, 1) for column, value in (self.first.delta or {}).items()}


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


def best_linear(units: list[Unit], protocol: ProtocolName) -> dict[str, Unit]:
    """linear key -> the complete linear-baseline unit with the highest average under ``protocol``."""
    best: dict[str, tuple[float, Unit]] = {}
    for unit in units:
        if unit.calibrator not in LINEAR_BASELINES or not unit.first.complete:
            continue
        average = unit.score_stats(AVERAGE, protocol)
        if average is None:
            continue
        if unit.linear_key not in best or average.mean > best[unit.linear_key][0]:
            best[unit.linear_key] = (average.mean, unit)
    return {key: unit for key, (_, unit) in best.items()}


def linear_reference(unit: Unit, best: dict[str, Unit]) -> Unit | None:
    """The best linear baseline a unit is compared with (none for raw and for that baseline itself)."""
    reference = best.get(unit.linear_key) if unit.calibrator != "raw" else None
    return None if reference is None or reference.key == unit.key else reference


#: how far a stored per-task Δ may lie from the difference of the board's scores it compares (points): it
#: absorbs the 4-decimal rounding of the scores and of the Δ computed from the per-pair cosines
DELTA_TOLERANCE = 1e-3
#: slack of a 4-decimal value against a 4-decimal bound
_ROUNDING = 1e-4 + 1e-9


def task_label(task: str) -> str:
    """A column header: SentEval's task names without the prefix.

    >>> task_label("SentEvalSTS12"), task_label("SentEvalSTSBenchmark"), task_label("STS22")
    ('STS12', 'STS-B', 'STS22')
    """
    return _SHORT_TASKS.get(task, task.removeprefix("SentEval"))


_SHORT_TASKS = {"SentEvalSTSBenchmark": "STS-B", "SentEvalSICKR": "SICK-R"}


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


def _stats(values: list[float]) -> Stats:
    """Mean and spread of one value per member (no spread for a single run), in stored decimals."""
    mean, std = spread(values)
    return Stats(round_points(mean), round_points(std) if len(values) > 1 else None, len(values))


class BoardDeltas:
    """Every Δ a board shows, for its units: against the raw backbone and against the best linear baseline,
    under both protocols, per task and on the average.

    A Δ is the difference of the board's scores: the board's own ``delta`` fields against raw under "all"
    (:func:`~.merge.finalize`, :mod:`.seeds`), otherwise per member row its score minus the reference's (4
    decimals), then mean and spread over the members; the average is the mean of a member's per-task deltas.
    Where the board holds a :class:`~.models.Comparison` (:mod:`.intervals`), a cell carries that comparison's
    95% interval and the average runs over that comparison's tasks, the ones its interval was computed over,
    saying which of the board's tasks it leaves out; :meth:`problems` checks that the comparison's own Δ is
    that difference of the scores. The one place the Markdown, the chart and the page take their deltas from.
    """

    def __init__(self, board: Leaderboard) -> None:
        self.tasks = list(board.tasks)
        self.units = board_units(board)
        self._unit_of_row = {row.id: unit for unit in self.units for row in unit.members}
        self._best = {protocol: best_linear(self.units, protocol) for protocol in PROTOCOLS}

    def reference(self, unit: Unit, protocol: ProtocolName, name: ReferenceName) -> Unit | None:
        """What ``unit`` is compared with: its raw backbone's unit, or its best linear baseline (None for raw)."""
        if unit.calibrator == "raw":
            return None
        if name == "raw":
            return self._unit_of_row.get(unit.first.baseline or "")
        return linear_reference(unit, self._best[protocol])

    def member_deltas(self, unit: Unit, reference: Unit, protocol: ProtocolName,
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

    def stored(self, unit: Unit, protocol: ProtocolName, name: ReferenceName) -> Comparison | None:
        """The comparison the board holds for a unit, protocol and reference (None when it has none)."""
        return (unit.record.intervals or {}).get(protocol, {}).get(name)

    def cells(self, unit: Unit, protocol: ProtocolName, name: ReferenceName) -> dict[str, DeltaCell]:
        """Column (a task or ``"average"``) -> the Δ cell of a unit against a reference ({} when it has none)."""
        reference = self.reference(unit, protocol, name)
        if reference is None:
            return {}
        per_member = self.member_deltas(unit, reference, protocol, name)
        if not per_member:
            return {}
        compared = self.stored(unit, protocol, name)
        if compared is not None and compared.against != reference.key:
            compared = None  # compared with another unit than the board's reference (check_deltas refuses it)
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
        reference = self.reference(unit, protocol, name)
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
        problems = []
        mine, theirs = unit.means(self.tasks, protocol), reference.means(self.tasks, protocol)
        for task in tasks:
            if task not in mine or task not in theirs:
                problems.append(f"{task}: the board has no score of one side")
            elif abs(mine[task] - theirs[task] - compared.delta[task]) > DELTA_TOLERANCE:
                problems.append(f"{task}: Δ {compared.delta[task]:+.4f}, but the scores differ by "
                                f"{mine[task] - theirs[task]:+.4f}")
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
        for column, cell in self.cells(unit, protocol, name).items():  # what is shown
            if cell.interval is not None:
                (low, high), shown = cell.interval.ci95, cell.stats.mean
                if not low - _ROUNDING <= shown <= high + _ROUNDING:
                    problems.append(f"{column}: Δ {shown:+.4f} lies outside its interval [{low:+.4f}, {high:+.4f}]")
        return problems


def _with_comparison(stats: Stats, compared: Comparison | None, column: str) -> DeltaCell:
    """A cell: its Δ with the comparison's interval where the comparison has the column, else alone."""
    if compared is None or column not in compared.ci95:
        return DeltaCell(stats)
    return DeltaCell(stats, CellInterval(compared.ci95[column], compared.significant[column]))


def check_deltas(board: Leaderboard, where: str) -> None:
    """Refuse a board whose stored intervals do not describe its scores (:meth:`BoardDeltas.problems`): a
    one-line :class:`~flow_plugin.errors.LeaderboardError` naming ``where``, the first row and the remedy."""
    problems = BoardDeltas(board).problems()
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise LeaderboardError(
            f"{where}: its intervals do not match its scores: {problems[0]}{more}; the scores were changed after "
            "the intervals were computed: restore them, or merge the result folders again with "
            "`flow-plugin leaderboard RESULTS... -o <board>.json --replace` to recompute both")


def procedure_notes(board: Leaderboard) -> list[str]:
    """Why a board, or some of its rows, were computed by an older procedure (empty when none was)."""
    notes = []
    units = board_units(board)
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
