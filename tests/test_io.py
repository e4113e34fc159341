"""Atomic writes: all or nothing, with ordinary file permissions."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from flow_plugin._io import atomic_write_bytes, atomic_write_json


def test_atomic_write_replaces_whole_file_with_normal_permissions(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "out.json"
    atomic_write_json(target, {"a": 1})
    atomic_write_json(target, {"b": 2})
    assert target.read_text() == '{\n  "b": 2\n}\n'
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~umask
    assert [p.name for p in target.parent.iterdir()] == ["out.json"]


def test_failed_write_leaves_old_file_and_no_temporary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "out.bin"
    atomic_write_bytes(target, b"old")

    def broken_replace(src: str, dst: str) -> None:
        raise OSError("disk gone")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk gone"):
        atomic_write_bytes(target, b"new")
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.bin"]


def test_a_file_lock_excludes_another_taker_until_released(tmp_path: Path) -> None:
    import subprocess
    import sys

    from flow_plugin._io import file_lock

    lock = tmp_path / "folder" / "runs.lock"
    probe = ("import sys; from flow_plugin._io import file_lock\n"
             "try:\n    with file_lock(sys.argv[1], blocking=False): print('free')\n"
             "except BlockingIOError: print('busy')\n")
    with file_lock(lock):
        assert lock.is_file()
        held = subprocess.run([sys.executable, "-c", probe, str(lock)], capture_output=True, text=True, timeout=60)
        assert held.stdout.strip() == "busy", held.stderr
        with pytest.raises(BlockingIOError):  # another taking in this very process is excluded too
            with file_lock(lock, blocking=False):
                pass
    free = subprocess.run([sys.executable, "-c", probe, str(lock)], capture_output=True, text=True, timeout=60)
    assert free.stdout.strip() == "free", free.stderr


def test_a_second_sweep_on_one_output_folder_is_refused(tmp_path: Path) -> None:
    from flow_plugin.sweep.publish import sweep_lock
    from flow_plugin.errors import SweepError

    with sweep_lock(tmp_path / ".flow-plugin-sweep"):
        with pytest.raises(SweepError, match="another sweep is running on this output folder"):
            with sweep_lock(tmp_path / ".flow-plugin-sweep"):
                pass
    with sweep_lock(tmp_path / ".flow-plugin-sweep"):  # released: the next sweep goes ahead
        pass


def test_the_runs_file_writer_removes_temporaries_of_killed_writers_but_not_a_live_one(tmp_path: Path) -> None:
    """A run killed while it renamed its run records into place left ``.flow-plugin-runs.jsonl.<random>.tmp``
    that no later run removed. The next writer removes it under the writers' lock, so a temporary file of a
    writer that still holds the lock is left alone until that writer is done."""
    import threading

    from flow_plugin._io import file_lock
    from flow_plugin.results.runs import (
        RUNS_FILE,
        RUNS_LOCK_FILE,
        append_run_records,
        read_run_records,
    )

    killed = tmp_path / f".{RUNS_FILE}.k1ll3d.tmp"
    killed.write_text('{"format": "flow-plugin-runs", "task": "cut', encoding="utf-8")
    other = tmp_path / ".results.json.k1ll3d.tmp"  # another file's: not the runs file's to remove
    other.write_text("x", encoding="utf-8")
    append_run_records(tmp_path, [{"task": "STS12"}])
    assert not killed.exists() and other.exists()
    assert [record["task"] for record in read_run_records(tmp_path / RUNS_FILE)] == ["STS12"]

    live = tmp_path / f".{RUNS_FILE}.l1v3.tmp"
    with file_lock(tmp_path / RUNS_LOCK_FILE):  # a writer in the middle of its write
        live.write_text("being written", encoding="utf-8")
        second = threading.Thread(target=append_run_records, args=(tmp_path, [{"task": "STS13"}]))
        second.start()
        second.join(timeout=1.0)
        assert second.is_alive() and live.exists()  # the next writer waits; the live file stays
    second.join(timeout=30)
    assert not live.exists()  # once its writer is gone (killed mid-write), it is stale
    assert [record["task"] for record in read_run_records(tmp_path / RUNS_FILE)] == ["STS12", "STS13"]
