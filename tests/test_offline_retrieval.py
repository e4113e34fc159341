"""The offline retrieval task (GLUE QNLI dev: questions -> the sentences that answer them),
end to end through the real ``mteb run`` CLI, without the Hub."""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

import mteb
import pytest

from flow_plugin.errors import DataFolderError
from flow_plugin.results.fits import fits_path, read_fits
from flow_plugin.data.roots import DATA_ENV, PARTS
from flow_plugin.integrations.mteb.retrieval_tasks import GlueQNLIRetrieval

from conftest import result_file, tiny_registry


@pytest.fixture(scope="module")
def glue_dir(shared_data_dir: Path) -> Path:
    path = shared_data_dir / "glue"
    if not (path / "QNLI" / "dev.tsv").is_file():
        pytest.skip(f"GLUE QNLI dev not found: {path / 'QNLI' / 'dev.tsv'}")
    return path


def test_qnli_retrieval_data(glue_dir: Path) -> None:
    task = GlueQNLIRetrieval(data_dir=glue_dir)
    task.load_data()
    split = task.dataset["default"]["test"]
    relevant = split["relevant_docs"]
    assert sum(len(docs) for docs in relevant.values()) <= 2702  # entailment pairs (docs/mteb.md), repeats merged
    assert len(split["queries"]) == len(relevant) > 2000
    assert 3000 < len(split["corpus"]) <= 5463 and set(split["queries"].column_names) >= {"id", "text"}
    assert task.metadata.dataset["revision"].startswith("sha256:")
    assert "GlueQNLIRetrieval" in [t.metadata.name for t in mteb.get_tasks(tasks=["GlueQNLIRetrieval"])]


def test_qnli_retrieval_needs_its_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for variable in (DATA_ENV, *PARTS.values()):
        monkeypatch.delenv(variable, raising=False)
    with pytest.raises(DataFolderError, match=DATA_ENV):
        GlueQNLIRetrieval().load_data()
    with pytest.raises(DataFolderError, match="QNLI/dev.tsv"):
        GlueQNLIRetrieval(data_dir=tmp_path).load_data()


@pytest.mark.slow
def test_qnli_retrieval_through_mteb_run(glue_dir: Path, tiny_minilm_vocab_bert: Path, tmp_path: Path) -> None:
    registry = tmp_path / "registry"
    registry.mkdir()
    tiny_registry(registry, tiny_minilm_vocab_bert)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", DATA_ENV: str(glue_dir.parent), "FLOW_PLUGIN_REGISTRY": str(registry),
           "FLOW_PLUGIN_CACHE_DIR": str(tmp_path / "cache")}
    output = tmp_path / "out"
    done = subprocess.run(
        ["mteb", "run", "-m", "flow_plugin/tiny-whiten", "-t", "GlueQNLIRetrieval", "--output-folder", str(output),
         "--no-co2-tracker"],
        capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    # the one-line summary prints under mteb run (its CLI shows only the mteb logger)
    assert "flow-plugin: flow_plugin/tiny-whiten: fitted whiten for GlueQNLIRetrieval/default" in done.stderr
    result_path = result_file(output, "flow_plugin/tiny-whiten", "GlueQNLIRetrieval")
    scores = json.loads(result_path.read_text())["scores"]["test"][0]
    assert math.isfinite(scores["ndcg_at_10"]) and 0 < scores["ndcg_at_10"] <= 1
    (record,) = read_fits(fits_path(result_path))["fits"]
    task = GlueQNLIRetrieval(data_dir=glue_dir)
    task.load_data()
    split = task.dataset["default"]["test"]
    # queries and corpus, fitted once and shared by both
    assert record["n_sentences"] == len(split["queries"]) + len(split["corpus"])
    assert sorted(record["sampling"]["parts"]) == ["test/corpus", "test/queries"]
    assert {call["prompt_type"] for call in record["served"]} == {"query", "document"}
    assert record["sampling"]["sampled"] is False and record["sampling"]["max_fit_sentences"] == 100_000
