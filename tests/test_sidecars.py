"""The files kept next to MTEB's results: a per-pair or per-item file that is damaged, of another format or
missing an array is a one-line error naming the file and the remedy, never a traceback or a wrong number."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from flow_plugin.errors import DataFolderError
from flow_plugin.results.items import read_items, write_items
from flow_plugin.results.pairs import read_pairs, write_pairs
from flow_plugin.results.sidecars import write_array_sidecar


def test_written_files_read_back(tmp_path: Path) -> None:
    result = tmp_path / "STS12.json"
    pairs = read_pairs(write_pairs(result, task="STS12", split="test", hf_subset="default", dataset_revision="r",
                                   main_score=0.5, gold=[1.0, 2.0, 3.0], cosine=[0.1, 0.3, 0.2],
                                   subsets=["a", "a", "b"]))
    assert pairs.subset_names == ("a", "b") and pairs.subset_sizes == (2, 1) and pairs.main_score == 0.5
    items = read_items(write_items(tmp_path / "T.json", task="T", task_type="Classification", split="test",
                                   hf_subset="default", dataset_revision="r", main_score="accuracy",
                                   main_score_value=1.0, arrays={"gold": [0, 1], "predictions": [[0, 1]]}))
    assert items.meta["task"] == "T" and items.arrays["predictions"].shape == (1, 2)


def test_damaged_files_are_one_line_errors_naming_file_and_remedy(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.npz"
    garbage.write_bytes(b"not an archive")
    other = write_array_sidecar(tmp_path / "other.npz", {"format": "something-else", "format_version": 1}, {})
    missing = write_array_sidecar(tmp_path / "missing.npz", {"format": "flow-plugin-pairs", "format_version": 1,
                                                             "task": "t", "dataset_revision": "r", "main_score": 0.5},
                                  {"gold": np.zeros(2)})  # no cosines
    uneven = write_array_sidecar(tmp_path / "uneven.npz", {"format": "flow-plugin-pairs", "format_version": 1,
                                                           "task": "t", "dataset_revision": "r", "main_score": 0.5},
                                 {"gold": np.zeros(3), "cosine": np.zeros(2), "subset_names": np.array(["a"]),
                                  "subset_sizes": np.array([3])})
    for path in (garbage, other, missing, uneven):
        with pytest.raises(DataFolderError, match=rf"^{path}: unreadable per-pair file \(.*\); delete it and rerun"):
            read_pairs(path)
    with pytest.raises(DataFolderError, match=rf"^{other}: unreadable per-item file \(not flow-plugin-items version 1\)"):
        read_items(other)
