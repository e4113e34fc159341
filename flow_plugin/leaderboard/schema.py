"""The leaderboard's file format: its name and version, the points scale and the column order
(the fields themselves are typed in :mod:`.models`, and the JSON schema is generated from them).
Standard library only.
"""

from __future__ import annotations

import math
from typing import Any, TypeGuard

from flow_plugin.calibration.names import CALIBRATOR_NAMES
from flow_plugin.catalog.tasks import OFFLINE_TASKS

FORMAT = "flow-plugin-leaderboard"
FORMAT_VERSION = 1
#: Two scores of the same model and task are "the same" when they differ by at most this
#: many points: 1e-4 points = 1e-6 on MTEB's 0-1 scale, one unit of the last decimal it stores.
DEFAULT_TOLERANCE = 1e-4
#: Row order within a backbone, and the calibrators a model name's suffix can name.
CALIBRATOR_ORDER = CALIBRATOR_NAMES  # table order: the methods, then the flow variants
DECIMALS = 4  # points with 4 decimals = MTEB's 6 decimals on the 0-1 scale



def to_points(value: float) -> float:
    """An MTEB score (0-1 scale) in points, with every decimal MTEB stores.

    >>> to_points(0.820441)
    82.0441
    """
    return round(float(value) * 100.0, DECIMALS)


def round_points(value: float) -> float:
    """A value already in points, rounded to the stored decimals.

    >>> round_points(1.234567)
    1.2346
    """
    return round(float(value), DECIMALS)


def is_number(value: Any) -> TypeGuard[float]:
    """True for a finite int or float (not a bool).

    Examples
    --------
    >>> [is_number(v) for v in (1, 0.5, True, float("nan"), "1")]
    [True, True, False, False, False]
    """
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def task_sort_key(task: str) -> tuple[int, str]:
    """Column order: the offline SentEval tasks in their order, then the others by name.

    >>> sorted(["STS12", "SentEvalSICKR", "SentEvalSTS12"], key=task_sort_key)
    ['SentEvalSTS12', 'SentEvalSICKR', 'STS12']
    """
    return (OFFLINE_TASKS.index(task), "") if task in OFFLINE_TASKS else (len(OFFLINE_TASKS), task)
