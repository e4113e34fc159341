"""The output folder's one owner: a run prepared and recorded through ``ResultStore``, what readers list, and
a sweep's publication carrying every file kept with a result. Real MTEB results of MTEB's own random encoder
on its mock STS task (no weights, no data)."""

from __future__ import annotations

import os
from pathlib import Path

import mteb
import pytest
from mteb.cache import ResultCache
from mteb.mocks.mock_tasks.sts import MockSTSTask

from flow_plugin.errors import DataFolderError, OutputError
from flow_plugin.results import ResultStore
from flow_plugin.results.runs import result_run_key
from flow_plugin.results.sidecars import SIDE_FILES, side_files
from flow_plugin.sweep.publish import Stage

HARDWARE = {"device": "cpu", "cpu": "test"}


def evaluate_into(store: ResultStore) -> tuple[object, object, Path]:
    """MTEB's random encoder on its mock STS task, written by ``mteb.evaluate`` into ``store``; the meta, the
    task and the result file."""
    model = mteb.get_model("mteb/baseline-random-encoder")
    task = MockSTSTask()
    mteb.evaluate(model, task, cache=ResultCache(store.folder), co2_tracker=False, show_progress_bar=False)
    path = store.result_path(model.mteb_model_meta, task.metadata.name)
    assert path.is_file()  # where the store says, MTEB wrote it
    return model.mteb_model_meta, task, path


def test_a_recorded_result_is_kept_and_an_unrecorded_one_set_aside(tmp_path: Path) -> None:
    store = ResultStore(tmp_path / "out")
    meta, task, path = evaluate_into(store)
    store.record([path], HARDWARE, {"command": "test"})
    assert result_run_key(path) in store.recorded_run_keys()
    assert [record["hardware"] for record in store.run_records()] == [HARDWARE]
    store.prepare(meta, [task], overwrite=False)
    assert path.is_file()  # recorded: a rerun reuses it

    store.runs_file.unlink()  # as if the run had been killed between the result and its record
    store.prepare(meta, [task], overwrite=False)
    assert not path.exists()
    assert [p.name.split("-")[0] for p in path.parent.glob(f"{path.name}.*")] == [f"{path.name}.unrecorded"]
    assert store.task_result_paths() == []  # what is set aside is no result for a reader


def test_a_record_that_cannot_be_written_sets_its_result_aside(tmp_path: Path) -> None:
    store = ResultStore(tmp_path / "out")
    _, _, path = evaluate_into(store)
    store.runs_file.mkdir()  # the records cannot be written there (an OSError, as a full disk gives)
    with pytest.raises(OutputError, match="a result is kept only with its run record"):
        store.record([path], HARDWARE, {})
    assert not path.exists() and list(path.parent.glob(f"{path.name}.unrecorded-*"))


def test_a_truncated_result_is_quarantined_and_a_readers_folder_is_resolved(tmp_path: Path) -> None:
    store = ResultStore(tmp_path / "out")
    meta, _, path = evaluate_into(store)
    assert ResultStore.existing(store.folder / "results").folder == store.folder  # its results/ folder names it too
    assert store.task_result_paths() == [path]
    path.write_text('{"task_name": "Mock', encoding="utf-8")  # cut short
    (moved,) = store.quarantine_truncated([meta.name], [path.stem])
    assert moved.name.startswith(f"{path.name}.corrupt-") and not path.exists()

    with pytest.raises(DataFolderError, match="does not exist"):
        ResultStore.existing(tmp_path / "missing")
    renamed = tmp_path / "renamed"
    os.rename(store.folder / "results", renamed)
    with pytest.raises(DataFolderError, match="not named 'results'"):
        ResultStore.existing(renamed)


def test_a_sweep_publishes_every_file_kept_with_a_result(tmp_path: Path) -> None:
    """Fit records, per-pair and per-item data all travel with the result (the per-item file was left behind)."""
    output = tmp_path / "out"
    stage = Stage(output / ".staging", "job", "attempt-1", output).open()
    final = output / "results" / "m" / "rev" / "Task.json"
    staged = stage.staged(final)
    staged.parent.mkdir(parents=True)
    staged.write_text("{}", encoding="utf-8")
    for number, side in enumerate(side_files(staged)):
        side.parent.mkdir(parents=True)
        side.write_bytes(bytes([number]) * 8)
    ResultStore(stage.folder).append_run_records([{"task": "Task"}])
    stage.publish(final)
    assert final.is_file() and len(side_files(final)) == len(SIDE_FILES)
    assert [side.read_bytes() for side in side_files(final)] == [bytes([n]) * 8 for n in range(len(SIDE_FILES))]
    assert [record["task"] for record in ResultStore(output).run_records()] == ["Task"]
    assert not ResultStore(stage.folder).runs_file.exists()


def test_mteb_saves_into_a_folder_while_no_other_process_reads_its_files(tmp_path: Path) -> None:
    """A study's workers evaluate into one folder, and MTEB writes a result and ``model_meta.json`` in place: a
    worker recording its result while another's MTEB saved once read an empty ``model_meta.json`` and failed its
    step. Our evaluations save through a cache that waits for the folder's write lock, which the store's readers
    hold."""
    import threading

    from flow_plugin.integrations.mteb.compat import locked_result_cache

    evaluate_into(ResultStore(tmp_path / "first"))  # MTEB's first evaluation in this process imports and loads
    store = ResultStore(tmp_path / "out")
    model = mteb.get_model("mteb/baseline-random-encoder")
    task = MockSTSTask()
    path = store.result_path(model.mteb_model_meta, task.metadata.name)
    saved = threading.Event()

    def evaluate() -> None:
        mteb.evaluate(model, task, cache=locked_result_cache(store.folder, store.writing), co2_tracker=False,
                      show_progress_bar=False)
        saved.set()

    evaluation = threading.Thread(target=evaluate)
    with store.writing():  # as another process reading the folder's files does
        evaluation.start()
        # the random encoder on MTEB's mock pairs evaluates in well under a second; its save waits for the lock
        assert not saved.wait(timeout=5) and not path.exists()
    evaluation.join(timeout=120)
    assert saved.is_set() and path.is_file()
    store.record([path], HARDWARE, {"command": "test"})  # reads model_meta.json, under the same lock
    assert result_run_key(path) in store.recorded_run_keys()
