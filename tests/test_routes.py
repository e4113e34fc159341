"""One number per (model, task, precision), whichever route computes it.

A calibrated model on one labelled task of each MTEB type, through every route a user has: ``mteb run``,
``flow-plugin eval``, ``flow-plugin task-types`` (which evaluates raw and SN on the same task objects before the
flow, the order in which an evaluator's random state used to leak from one model's evaluation into the next),
a sweep job on a local Ray, and Python's ``mteb.evaluate``. Each route runs in a process of its own, as a user
runs it, and every main score must be identical: the routes share the data, the weights, the precision, the
fit's seed and the evaluator's seed, so nothing may differ.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import ONE_PER_TYPE

MODEL = "flow_plugin/tiny-flow"
TINY_REGISTRY_FILE = """
description = "a tiny random BERT (2 layers, 32 dims) with all-MiniLM-L6-v2's vocabulary, saved by the test"
hub_id = "{folder}"
revision = "tiny0001"
pooling = "first-last-avg"
max_seq_length = 64
embedding_dim = 32
n_parameters = 40000
license = "mit"
release_date = "2024-01-02"
reference = "https://example.org/tiny-bert"
"""


def main_scores(output: Path) -> dict[str, float]:
    """task -> main score of ``MODEL``'s result on each task under an MTEB output folder."""
    from flow_plugin.results.files import result_files

    scores = {}
    for task in ONE_PER_TYPE.values():
        for path in result_files(output, MODEL, task):
            result = json.loads(path.read_text(encoding="utf-8"))
            (split,) = result["scores"].values()
            assert task not in scores, f"two results of {task} under {output}"
            scores[task] = split[0]["main_score"]
    return scores


@pytest.mark.slow
def test_every_route_gives_the_same_main_score_on_every_task_type(subset_root: Path, tiny_minilm_vocab_bert: Path,
                                                                  tmp_path: Path) -> None:
    registry = tmp_path / "registry"
    registry.mkdir()
    (registry / "tiny.toml").write_text(TINY_REGISTRY_FILE.format(folder=tiny_minilm_vocab_bert))
    env = {key: value for key, value in os.environ.items()
           if key not in ("FLOW_PLUGIN_CACHE_DIR", "RAY_ADDRESS", "FLOW_PLUGIN_TASKS")}
    env.update(FLOW_PLUGIN_REGISTRY=str(registry), FLOW_PLUGIN_SHARED_DATA=str(subset_root), HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1")
    tasks = list(ONE_PER_TYPE.values())
    task_arguments = [argument for task in tasks for argument in ("-t", task)]
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(f'backbones = ["tiny"]\ncalibrators = ["flow"]\ntasks = {json.dumps(tasks)}\n'
                     f'data = "{subset_root}"\noutput = "sweep"\n')
    evaluate = textwrap.dedent(f"""
        import mteb
        from mteb.cache import ResultCache
        model = mteb.get_model({MODEL!r})
        mteb.evaluate(model, mteb.get_tasks(tasks={tasks!r}), cache=ResultCache({str(tmp_path / 'python')!r}),
                      co2_tracker=False)
    """)
    routes = {
        "mteb run": ["mteb", "run", "-m", MODEL, "-t", *tasks, "--output-folder", "mteb-run", "--no-co2-tracker"],
        "flow-plugin eval": ["flow-plugin", "eval", "-m", MODEL, *task_arguments, "--output-folder", "eval"],
        "flow-plugin task-types": ["flow-plugin", "task-types", "-b", "tiny", "--calibrators", "raw", "sn", "flow",
                                   "--tasks", *tasks, "--output-folder", "study"],
        "sweep": [sys.executable, "-m", "flow_plugin.cli.main", "sweep", str(sweep), "--num-cpus", "2",
                  "--no-progress-bar"],
        "mteb.evaluate": [sys.executable, "-c", evaluate],
    }
    folders = {"mteb run": "mteb-run", "flow-plugin eval": "eval", "flow-plugin task-types": "study",
               "sweep": "sweep", "mteb.evaluate": "python"}
    scores = {}
    for route, command in routes.items():
        done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=900)
        assert done.returncode == 0, f"{route}: {done.stderr[-3000:]}"
        scores[route] = main_scores(tmp_path / folders[route])
        assert sorted(scores[route]) == sorted(tasks), route
    reference = scores["mteb run"]
    for route, found in scores.items():
        assert found == reference, f"{route} differs from mteb run: {found} vs {reference}"
