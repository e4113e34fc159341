"""What a task-types board says, read from the board alone: its answer to "which calibrator should I use?"
(:func:`types_headline`, which every picture, the page and the index read) and whether it describes itself
(:func:`board_problems`). Pure Python on the board's models: rendering and checking a board load no numpy."""

from __future__ import annotations

from dataclasses import dataclass

from flow_plugin.calibration.names import AUTO_CALIBRATORS
from flow_plugin.leaderboard.models import AVERAGE, TaskTypesBoard, TypeRow

#: how far a row's published Δ may lie outside its interval (points): the 4-decimal rounding of both
_ROUNDING = 1e-4 + 1e-9


@dataclass(frozen=True)
class TypesHeadline:
    """What a task-types board answers to "which calibrator should I use?", per column (each task type, then the
    average of the types): the fixed calibrator (one map for every task: not raw, not auto) with the highest Δ
    against raw there, and the auto row (None where the board has none). Every picture, the page and the index
    read it; none chooses again."""

    backbone: str
    #: the board's task types, then "average"
    columns: tuple[str, ...]
    #: column -> the fixed row with the highest Δ in that column (absent where the board has no fixed row)
    best_fixed: dict[str, TypeRow]
    auto: TypeRow | None


def types_headline(board: TaskTypesBoard) -> TypesHeadline:
    """The board's :class:`TypesHeadline`: per column the fixed row with the highest Δ against raw (the first in the
    board's order on a tie), and its auto row."""
    columns = (*board.types, AVERAGE)
    fixed = [row for row in board.rows if row.delta is not None and row.calibrator not in AUTO_CALIBRATORS]
    best = {}
    for column in columns:
        ranked = [row for row in fixed if column in row.delta]  # type: ignore[operator]
        if ranked:
            best[column] = max(ranked, key=lambda row: row.delta[column].delta)  # type: ignore[index]
    auto = next((row for row in board.rows if row.calibrator in AUTO_CALIBRATORS and row.delta is not None), None)
    return TypesHeadline(board.backbone, columns, best, auto)


def board_problems(board: TaskTypesBoard) -> list[str]:
    """Why a task-types board does not describe itself (one line each; [] when it does): a Δ that is not the
    difference of the row's and raw's scores, a Δ outside its interval, or a significance its interval does not
    say."""
    raw = next((row for row in board.rows if row.calibrator == "raw"), None)
    if raw is None:
        return ["the board has no raw row"]
    problems = []
    for row in board.rows:
        for column, found in (row.delta or {}).items():
            low, high = found.ci95
            where = f"{row.id}, {column}"
            if column not in row.scores or column not in raw.scores:
                problems.append(f"{where}: a Δ without both scores")
                continue
            if abs(row.scores[column].mean - raw.scores[column].mean - found.delta) > 1e-3:
                problems.append(f"{where}: Δ {found.delta:+.4f}, but the scores differ by "
                                f"{row.scores[column].mean - raw.scores[column].mean:+.4f}")
            if not low - _ROUNDING <= found.delta <= high + _ROUNDING:
                problems.append(f"{where}: Δ {found.delta:+.4f} lies outside its interval [{low:+.4f}, {high:+.4f}]")
            if found.significant != (low > 0 or high < 0):
                problems.append(f"{where}: its significance does not match its interval")
    return problems


__all__ = ["TypesHeadline", "board_problems", "types_headline"]
