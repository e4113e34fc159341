"""Per-pair cosines next to MTEB's results: what a confidence interval of a score is computed from.

A leaderboard's interval of a delta resamples the test pairs (:mod:`flow_plugin.evaluation.intervals`),
so it needs every pair's gold score and predicted cosine, which MTEB's result JSON does not keep.
flow-plugin's offline STS tasks (:mod:`flow_plugin.integrations.mteb.sts_tasks`) write them when they score a
model inside ``mteb.evaluate``: next to ``<Task>.json``, ``flow-plugin-pairs/<Task>.pairs.npz`` holds

* ``gold`` and ``cosine``: one value per test pair, in the order of the task's data, as scored
  (the dtype MTEB computed them in; nothing is rounded);
* ``subset_names`` and ``subset_sizes``: the subsets (STS12's MSRpar, ...), in order, and how many
  consecutive pairs each has;
* ``meta``: a JSON string with the task, split, hf_subset, dataset revision and main score.

Size: 16 bytes a pair in float64 (as MTEB computes them), 12 in float32: for the seven STS sets' 18,850 test
pairs 0.30 MB (0.23) per model run. The subfolder and the ``.pairs.npz`` suffix keep it out of result scans. A file whose
Spearman correlation does not reproduce its result's score, or that is of other data, is not used
(:func:`pairs_of_result`), so a stale file never feeds an interval.

>>> pairs_path(Path("out/results/m/rev/SentEvalSTS12.json")).as_posix()
'out/results/m/rev/flow-plugin-pairs/SentEvalSTS12.pairs.npz'
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import spearmanr

from flow_plugin.errors import DataFolderError
from flow_plugin.results.sidecars import read_array_sidecar, sidecar_path, write_array_sidecar

PAIRS_FORMAT = "flow-plugin-pairs"
PAIRS_VERSION = 1
#: points: a file must reproduce its result's main score this closely (the leaderboard's tolerance)
SCORE_TOLERANCE = 1e-4


@dataclass(frozen=True)
class PairScores:
    """One task's test pairs as a model scored them: gold, cosine, and the subsets they belong to."""

    task: str
    dataset_revision: str
    main_score: float  # the result's main score (Spearman, "all"), correlation scale
    gold: np.ndarray
    cosine: np.ndarray
    subset_names: tuple[str, ...]
    subset_sizes: tuple[int, ...]

    def __post_init__(self) -> None:
        if len(self.gold) != len(self.cosine) or sum(self.subset_sizes) != len(self.gold):
            raise DataFolderError(f"{self.task}: {len(self.gold)} gold scores, {len(self.cosine)} cosines and "
                                  f"subsets of {sum(self.subset_sizes)} pairs do not match")

    def subsets(self, values: np.ndarray) -> list[np.ndarray]:
        """``values`` (one per pair) cut into the subsets."""
        return np.split(np.asarray(values), np.cumsum(self.subset_sizes)[:-1])

    def same_pairs(self, other: PairScores) -> bool:
        """Whether ``other`` scores the same pairs: the same subsets and gold scores (so their cosines compare)."""
        return self.subset_sizes == other.subset_sizes and bool(np.array_equal(self.gold, other.gold))


def pairs_path(result_path: str | os.PathLike[str]) -> Path:
    """The per-pair file of an MTEB task result file."""
    return sidecar_path(result_path, "pairs")


def _runs(labels: Sequence[str]) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """Consecutive runs of equal labels: (names, sizes). A subset split into two runs is an error."""
    names: list[str] = []
    sizes: list[int] = []
    for label in labels:
        if names and names[-1] == label:
            sizes[-1] += 1
        else:
            if label in names:
                raise DataFolderError(f"subset {label!r}'s pairs are not consecutive")
            names.append(str(label))
            sizes.append(1)
    return tuple(names), tuple(sizes)


def write_pairs(result_path: str | os.PathLike[str], *, task: str, split: str, hf_subset: str, dataset_revision: str,
                main_score: float, gold: Any, cosine: Any, subsets: Sequence[str]) -> Path:
    """Write the per-pair file of ``result_path`` atomically; returns it."""
    names, sizes = _runs(subsets)
    gold, cosine = np.asarray(gold), np.asarray(cosine)
    if len(gold) != len(cosine) or len(gold) != len(subsets):
        raise DataFolderError(f"{task}: {len(gold)} gold scores, {len(cosine)} cosines, {len(subsets)} subset labels")
    meta = {"format": PAIRS_FORMAT, "format_version": PAIRS_VERSION, "task": task, "split": split,
            "hf_subset": hf_subset, "dataset_revision": dataset_revision, "main_score": float(main_score)}
    arrays = {"gold": gold, "cosine": cosine, "subset_names": np.array(names), "subset_sizes": np.array(sizes, dtype=np.int64)}
    return write_array_sidecar(pairs_path(result_path), meta, arrays)


def read_pairs(path: str | os.PathLike[str]) -> PairScores:
    """A per-pair file, checked; errors name the file."""
    def make(meta: dict[str, Any], data: dict[str, np.ndarray]) -> PairScores:
        return PairScores(task=meta["task"], dataset_revision=meta["dataset_revision"],
                          main_score=float(meta["main_score"]), gold=data["gold"], cosine=data["cosine"],
                          subset_names=tuple(str(name) for name in data["subset_names"]),
                          subset_sizes=tuple(int(size) for size in data["subset_sizes"]))

    return read_array_sidecar(path, PAIRS_FORMAT, PAIRS_VERSION, "per-pair file", make)


def pairs_of_result(result_path: str | os.PathLike[str], *, score_points: float,
                    dataset_revision: str) -> tuple[PairScores | None, str | None]:
    """The per-pair scores kept with a result, checked against it: (pairs, None), or (None, why not).

    The pairs are used only when they are of the same data and their Spearman correlation (all pairs
    pooled) reproduces the result's score within :data:`SCORE_TOLERANCE` points."""
    path = pairs_path(result_path)
    if not path.is_file():
        return None, "no per-pair cosines kept with this result"
    try:
        pairs = read_pairs(path)
    except DataFolderError as error:
        return None, str(error)
    if pairs.dataset_revision != dataset_revision:
        return None, f"{path}: of other data ({pairs.dataset_revision}, the result's is {dataset_revision})"
    rho = 100 * float(spearmanr(pairs.gold, pairs.cosine).statistic)
    if not abs(rho - score_points) <= SCORE_TOLERANCE + 1e-9:
        return None, f"{path}: its Spearman correlation {rho:.4f} is not the result's score {score_points}"
    return pairs, None
