"""Per-item scores next to MTEB's results: what a paired bootstrap of a non-STS task resamples.

MTEB's result JSON keeps a task's averages; an interval of a delta between two models needs each
test item's outcome under both. The labelled tasks (:mod:`flow_plugin.integrations.mteb.labelled_tasks`)
capture what MTEB's own evaluator computed while it scores a model inside ``mteb.evaluate`` and write it next
to ``<Task>.json`` as ``flow-plugin-items/<Task>.items.npz``:

=================  ==============================================================================================
type               arrays (item order = the order of the task's scored split)
=================  ==============================================================================================
Classification     ``gold`` (n,) label codes; ``predictions`` (n_experiments, n) predicted codes, one row per
                   MTEB experiment (a logistic regression on that experiment's undersampled train items):
                   ``predictions == gold`` is each item's correctness; meta ``label_names``
PairClassification ``gold`` (n,) 0/1; ``cosine``, ``dot``, ``euclidean``, ``manhattan``, ``similarity`` (n,): the
                   five scores MTEB computed per pair (``max_ap`` is the best AP over them)
Clustering         ``gold`` (levels, n) label codes of every embedded item; ``draws`` and ``assignments``
                   (levels, experiments, draw size): the items each bootstrap experiment drew (indices into
                   ``gold``) and the cluster MiniBatchKMeans gave each; meta ``label_names`` per level
Retrieval,         ``query_ids`` (q,); one (q,) array per pytrec_eval measure MTEB computed per query
Reranking          (``ndcg_cut_10``, ``map_cut_1000``, ``recall_100``, ``P_1``, ``success_10`` ...): the main score is
                   the mean of its measure's array (``ndcg_at_10`` <- ``ndcg_cut_10``)
=================  ==============================================================================================

``meta`` (a JSON string) holds the format and version, task, type, split, hf_subset, dataset revision,
main-score name and value, and each array's meaning. :func:`items_of_result` reads a file back and checks
that it reproduces its result's main score (:func:`main_score_of`), so a stale file never feeds an interval.

>>> items_path(Path("out/results/m/rev/FlowPluginMRClassification.json")).as_posix()
'out/results/m/rev/flow-plugin-items/FlowPluginMRClassification.items.npz'
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from flow_plugin.errors import DataFolderError
from flow_plugin.results.sidecars import read_array_sidecar, sidecar_path, write_array_sidecar

ITEMS_FORMAT = "flow-plugin-items"
ITEMS_VERSION = 1
#: a file must reproduce its result's main score this closely (0-1 scale): MTEB keeps classification, pair
#: classification and clustering scores as computed, and rounds retrieval scores to 5 decimals
SCORE_TOLERANCE = 1e-5
#: what each array holds, per task type (written into every file's meta)
ARRAYS: dict[str, dict[str, str]] = {
    "Classification": {
        "gold": "label code of each scored item",
        "predictions": "predicted label code, one row per MTEB experiment",
    },
    "PairClassification": {
        "gold": "0/1 label of each scored pair",
        **{name: f"MTEB's {name} score of each pair" for name in ("cosine", "dot", "euclidean", "manhattan", "similarity")},
    },
    "Clustering": {
        "gold": "label code of each embedded item, one row per level",
        "draws": "items drawn by each bootstrap experiment (indices into gold), [level, experiment, draw]",
        "assignments": "cluster of each drawn item, [level, experiment, draw]",
    },
    "Retrieval": {"query_ids": "scored queries", "<measure>": "pytrec_eval's per-query value of the measure"},
}
ARRAYS["Reranking"] = ARRAYS["Retrieval"]


@dataclass(frozen=True)
class ItemScores:
    """One task's per-item data as read back: meta and arrays."""

    meta: dict[str, Any]
    arrays: dict[str, np.ndarray]

    @property
    def task_type(self) -> str:
        return str(self.meta["type"])


def items_path(result_path: str | os.PathLike[str]) -> Path:
    """The per-item file of an MTEB task result file."""
    return sidecar_path(result_path, "items")


#: two computations of one score agree to this (scores lie in [-1, 1]; a second implementation rounds otherwise)
SAME_SCORE = 1e-9


def holds_score(task_result: Any, split: str, hf_subset: str, main_score: str, value: float) -> bool:
    """Whether an MTEB ``TaskResult`` holds ``value`` as ``main_score`` of ``split`` and ``hf_subset``."""
    for entry in (getattr(task_result, "scores", None) or {}).get(split, []):
        if str(entry.get("hf_subset")) == str(hf_subset) and main_score in entry:
            return abs(float(entry[main_score]) - value) <= SAME_SCORE
    return False


def write_items(result_path: str | os.PathLike[str], *, task: str, task_type: str, split: str, hf_subset: str,
                dataset_revision: str, main_score: str, main_score_value: float, arrays: dict[str, Any],
                extra: dict[str, Any] | None = None) -> Path:
    """Write the per-item file of ``result_path`` atomically; returns it."""
    meta = {"format": ITEMS_FORMAT, "format_version": ITEMS_VERSION, "task": task, "type": task_type, "split": split,
            "hf_subset": hf_subset, "dataset_revision": dataset_revision, "main_score": main_score,
            "main_score_value": float(main_score_value), "arrays": ARRAYS.get(task_type, {}), **(extra or {})}
    return write_array_sidecar(items_path(result_path), meta, arrays, compress=True)


def read_items(path: str | os.PathLike[str]) -> ItemScores:
    """A per-item file, checked for its format; errors name the file."""
    return read_array_sidecar(path, ITEMS_FORMAT, ITEMS_VERSION, "per-item file", ItemScores)


def main_score_of(items: ItemScores) -> float:
    """The task's main score recomputed from its items, as MTEB computes it (0-1 scale)."""
    arrays, name = items.arrays, str(items.meta["main_score"])
    kind = items.task_type
    if kind == "Classification":
        if name != "accuracy":
            raise DataFolderError(f"{items.meta['task']}: recomputing {name} from items is not supported")
        return float(np.mean(arrays["predictions"] == arrays["gold"][None, :]))
    if kind in ("Retrieval", "Reranking"):
        measure = retrieval_measure(name)
        return float(np.mean(arrays[measure]))
    # the other types' scores are scikit-learn's (it takes seconds to import: here, not with this module)
    from sklearn.metrics import adjusted_mutual_info_score, average_precision_score, v_measure_score

    if kind == "PairClassification":
        if name != "max_ap":
            raise DataFolderError(f"{items.meta['task']}: recomputing {name} from items is not supported")
        gold = arrays["gold"]
        best = []
        for score, larger_is_closer in (("similarity", True), ("cosine", True), ("manhattan", False),
                                        ("euclidean", False), ("dot", True)):
            values = np.asarray(arrays[score], dtype=np.float64)
            best.append(average_precision_score(gold, values if larger_is_closer else -values))
        return float(max(best))
    if kind == "Clustering":
        metric = {"v_measure": v_measure_score, "ami": adjusted_mutual_info_score}.get(name)
        if metric is None:
            raise DataFolderError(f"{items.meta['task']}: recomputing {name} from items is not supported")
        gold, draws, assignments = arrays["gold"], arrays["draws"], arrays["assignments"]
        values = [metric(gold[level][draws[level, run]], assignments[level, run])
                  for level in range(draws.shape[0]) for run in range(draws.shape[1])]
        return float(np.mean(values))
    raise DataFolderError(f"{items.meta['task']}: unknown task type {kind!r}")


def retrieval_measure(main_score: str) -> str:
    """pytrec_eval's per-query measure behind an MTEB retrieval score name.

    >>> retrieval_measure("ndcg_at_10"), retrieval_measure("map_at_1000"), retrieval_measure("precision_at_1")
    ('ndcg_cut_10', 'map_cut_1000', 'P_1')
    """
    kind, _, k = main_score.rpartition("_at_")
    names = {"ndcg": "ndcg_cut", "map": "map_cut", "recall": "recall", "precision": "P", "hit_rate": "success"}
    if kind not in names or not k.isdigit():
        raise DataFolderError(f"no per-query measure for the retrieval score {main_score!r}")
    return f"{names[kind]}_{k}"


def items_of_result(result_path: str | os.PathLike[str], *, main_score: float,
                    dataset_revision: str) -> tuple[ItemScores | None, str | None]:
    """The per-item data kept with a result, checked against it: (items, None), or (None, why not)."""
    path = items_path(result_path)
    if not path.is_file():
        return None, "no per-item scores kept with this result"
    try:
        items = read_items(path)
        recomputed = main_score_of(items)
    except DataFolderError as error:
        return None, str(error)
    if items.meta.get("dataset_revision") != dataset_revision:
        return None, f"{path}: of other data ({items.meta.get('dataset_revision')}, the result's is {dataset_revision})"
    if not abs(recomputed - main_score) <= SCORE_TOLERANCE:
        return None, f"{path}: its items give {recomputed:.6f}, not the result's score {main_score:.6f}"
    return items, None


__all__ = ["ARRAYS", "ItemScores", "items_of_result", "items_path", "main_score_of", "read_items",
           "retrieval_measure", "write_items"]
