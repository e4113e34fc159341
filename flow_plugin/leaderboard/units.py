"""The leaderboard's compared units: a displayed row (a seed group is one unit, its seeds its
members), its scores under a protocol, and the best linear baseline it is compared with.

Shared by the page's view (:mod:`.view`), the Markdown (:mod:`.render`) and the confidence
intervals (:mod:`.intervals`), so that all three compare the same rows. A unit holds the board's own
:class:`~.models.Row` and :class:`~.models.SeedGroup` models; its :class:`Stats` are derived, for display.
"""

from __future__ import annotations

from dataclasses import dataclass

from flow_plugin.calibration.names import LINEAR_BASELINES
from flow_plugin.leaderboard.merge import baseline_key
from flow_plugin.leaderboard.models import Leaderboard, ProtocolName, ReferenceName, Row, SeedGroup, SeedSpread
from flow_plugin.leaderboard.public import display_columns, display_name

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


@dataclass(frozen=True)
class CellInterval:
    """A delta cell's 95% interval and whether it excludes 0, as the board's :class:`~.models.Comparison` holds them."""

    ci95: tuple[float, float]
    significant: bool


def unit_interval(unit: Unit, protocol: ProtocolName, reference: ReferenceName, column: str) -> CellInterval | None:
    """The interval of one cell (a task or ``"average"``) of a unit's delta against a reference, or None."""
    compared = (unit.record.intervals or {}).get(protocol, {}).get(reference)
    if compared is None or column not in compared.ci95:
        return None
    return CellInterval(compared.ci95[column], compared.significant[column])


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
