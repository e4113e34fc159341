"""The leaderboard's compared units: a displayed row (a seed group is one unit, its seeds its
members), its scores under a protocol, and the best linear baseline it is compared with.

Shared by the page's view (:mod:`.view`), the Markdown (:mod:`.render`) and the confidence
intervals (:mod:`.intervals`), so that all three compare the same rows. Standard library only.
"""

from __future__ import annotations

from typing import Any

from flow_plugin.calibration.names import LINEAR_BASELINES
from flow_plugin.leaderboard.merge import baseline_key
from flow_plugin.leaderboard.public import display_columns, display_name

PROTOCOLS = ("all", "wmean")
AVERAGE = "average"


def member_value(row: dict[str, Any], column: str, protocol: str) -> float | None:
    """A member row's score (or average) under a protocol."""
    if column == AVERAGE:
        return row.get("average" if protocol == "all" else "average_wmean")
    entry = row["scores"].get(column)
    if entry is None:
        return None
    return entry.get("score" if protocol == "all" else "wmean")


class Unit:
    """A displayed row: a plain row, or a seed group (its first member's description, every member's scores)."""

    def __init__(self, first: dict[str, Any], members: list[dict[str, Any]], group: dict[str, Any] | None):
        self.first, self.members, self.group = first, members, group
        self.key = group["id"] if group else first["id"]
        self.columns = display_columns(first, group["seeds"] if group else None)
        self.name = display_name(self.columns)
        #: units sharing it are compared with the same best linear baseline: backbone, loader kwargs, fit corpus
        self.linear_key = baseline_key(first) + "|" + str(first.get("fit_corpus"))

    @property
    def record(self) -> dict[str, Any]:
        """Where the unit's derived fields live in the JSON: its seed group, or the row itself."""
        return self.group if self.group is not None else self.first

    @property
    def calibrator(self) -> str | None:
        return self.first.get("calibrator")

    def score_stats(self, column: str, protocol: str) -> dict[str, Any] | None:
        if self.group is None:
            value = member_value(self.first, column, protocol)
            return None if value is None else {"mean": value, "std": None, "n": 1}
        if column == AVERAGE:
            return self.group.get("average" if protocol == "all" else "average_wmean")
        return self.group["scores" if protocol == "all" else "wmean"].get(column)

    def means(self, tasks: list[str], protocol: str) -> dict[str, float]:
        found = {t: self.score_stats(t, protocol) for t in tasks}
        return {t: stats["mean"] for t, stats in found.items() if stats is not None}


def board_units(board: dict[str, Any]) -> list[Unit]:
    """The displayed rows in the leaderboard's order: a seed group in the place of its first member."""
    rows = {row["id"]: row for row in board["rows"]}
    member_of = {row_id: group for group in board.get("seed_groups") or [] for row_id in group["rows"]}
    units = []
    for row in board["rows"]:
        group = member_of.get(row["id"])
        if group is None:
            units.append(Unit(row, [row], None))
        elif row["id"] == group["rows"][0]:
            units.append(Unit(row, [rows[row_id] for row_id in group["rows"]], group))
    return units


def best_linear(units: list[Unit], protocol: str) -> dict[str, Unit]:
    """linear key -> the complete linear-baseline unit with the highest average under ``protocol``."""
    best: dict[str, tuple[float, Unit]] = {}
    for unit in units:
        if unit.calibrator not in LINEAR_BASELINES or not unit.first.get("complete"):
            continue
        average = unit.score_stats(AVERAGE, protocol)
        if average is None:
            continue
        if unit.linear_key not in best or average["mean"] > best[unit.linear_key][0]:
            best[unit.linear_key] = (average["mean"], unit)
    return {key: unit for key, (_, unit) in best.items()}


def linear_reference(unit: Unit, best: dict[str, Unit]) -> Unit | None:
    """The best linear baseline a unit is compared with (none for raw and for that baseline itself)."""
    reference = best.get(unit.linear_key) if unit.calibrator != "raw" else None
    return None if reference is None or reference.key == unit.key else reference


def unit_interval(unit: Unit, protocol: str, reference: str, column: str) -> dict[str, Any] | None:
    """{"delta", "ci95", "significant", "against"} of one cell, or None."""
    compared = (unit.record.get("intervals") or {}).get(protocol, {}).get(reference)
    if not compared or column not in compared["ci95"]:
        return None
    return {"delta": compared["delta"][column], "ci95": compared["ci95"][column],
            "significant": compared["significant"][column], "against": compared["against"]}


def procedure_notes(board: dict[str, Any]) -> list[str]:
    """Why a board, or some of its rows, were computed by an older procedure (empty when none was)."""
    notes = []
    units = board_units(board)
    calibrated = [unit for unit in units if unit.calibrator != "raw"]
    missing = [unit for unit in calibrated if not unit.record.get("intervals")]
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
    return any(not entry.get("fits") or not all(fit.get("member_seeds") for fit in entry["fits"])
               for row in unit.members for entry in row["scores"].values())
