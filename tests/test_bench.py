"""``flow-plugin bench`` for real: all-MiniLM-L6-v2's six variants on SentEvalSTS13.

One scenario, in order: a bench process is killed after its first result; the rerun
resumes (finished results are not recomputed, a truncated result file is set aside and
recomputed, the backbone encodes nothing thanks to the on-disk embedding cache) and
writes the leaderboard; a third run recomputes nothing at all; recomputing the flow
variant reproduces its score exactly.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import mteb
import pytest

from conftest import full_disk_at
from flow_plugin.studies.bench import run_bench
from flow_plugin.encoding.cache import clear_shared_encoders
from flow_plugin.cli.main import main as cli_main
from flow_plugin.integrations.mteb.base_models import registry_model
from flow_plugin.results.files import experiment_name
from flow_plugin.calibration import CALIBRATOR_METHODS
from flow_plugin.catalog.registry import MODEL_NAME_SUFFIXES, parse_model_name

BACKBONE = "minilm-l6"
TASK = "SentEvalSTS13"
MODELS = [f"flow_plugin/{BACKBONE}{MODEL_NAME_SUFFIXES[name]}" for name in CALIBRATOR_METHODS]  # bench's default six
REPO = Path(__file__).resolve().parents[1]


def revision(model: str) -> str:
    """The folder MTEB files the model's results under: its backbone's weights commit + configuration digest."""
    return mteb.get_model_meta(model).revision


def result_path(output: Path, model: str) -> Path:
    """Where MTEB files ``model``'s result (a calibrator's under its backbone, in ``experiments/``): the loaded
    model's meta, which names the precision ``auto`` resolves to on this machine."""
    from flow_plugin.results.files import result_path as mteb_result_path

    return mteb_result_path(output, loaded_meta(model), TASK)


@functools.cache
def loaded_meta(model: str) -> Any:
    return registry_model(model).mteb_model_meta


def finished(output: Path) -> dict[str, int]:
    """model -> mtime_ns of its result file, for the result files that are complete JSON."""
    done = {}
    for model in MODELS:
        path = result_path(output, model)
        try:
            json.loads(path.read_text())
        except (FileNotFoundError, ValueError):
            continue
        done[model] = path.stat().st_mtime_ns
    return done


def cache_files(output: Path) -> set[Path]:
    return set((output / "embedding-cache").rglob("*.npz"))


@pytest.fixture()
def no_cache_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FLOW_PLUGIN_CACHE_DIR", raising=False)
    clear_shared_encoders()
    yield
    clear_shared_encoders()


@pytest.mark.slow
def test_bench_resumes_after_a_kill_and_reruns_recompute_nothing(
    senteval_dir: Path, minilm_path: Path, tmp_path: Path, no_cache_env: None, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "bench"
    board_path = tmp_path / "leaderboards" / f"{BACKBONE}.json"
    arguments = ["bench", "-b", BACKBONE, "--data", str(senteval_dir), "--tasks", TASK,
                 "--output-folder", str(output), "--leaderboard", str(board_path)]

    # 1. a bench process, killed (SIGKILL) as soon as its first result file is complete
    env = {key: value for key, value in os.environ.items() if key != "FLOW_PLUGIN_CACHE_DIR"}
    env["HF_HUB_OFFLINE"] = "1"
    with open(tmp_path / "killed.log", "wb") as log:
        process = subprocess.Popen([sys.executable, "-m", "flow_plugin.cli.main", *arguments], stdout=log,
                                   stderr=subprocess.STDOUT, env=env, cwd=REPO)
        deadline = time.monotonic() + 900
        while not finished(output) and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        process.kill()
        process.wait()
    done = finished(output)
    assert MODELS[0] in done, (tmp_path / "killed.log").read_text()[-3000:]
    assert not board_path.exists() or len(done) == len(MODELS)
    # a result counts only with its run record: the kill may have struck between the two writes
    from flow_plugin.results.runs import recorded_run_keys, result_run_key

    recorded = recorded_run_keys(output)
    unrecorded = [model for model in done if result_run_key(result_path(output, model)) not in recorded]
    done = {model: stamp for model, stamp in done.items() if model not in unrecorded}
    shards = cache_files(output)
    assert shards, "the killed run left no embedding cache"

    # a result file cut short by the kill (MTEB writes them in place): set aside and recomputed
    truncated_model = next((model for model in MODELS if model not in done and model not in unrecorded), None)
    if truncated_model is not None:
        truncated = result_path(output, truncated_model)
        truncated.parent.mkdir(parents=True, exist_ok=True)
        truncated.write_bytes(result_path(output, MODELS[0]).read_bytes()[:300])
    # MTEB writes model_meta.json in place after each result: a kill can leave it empty
    result_path(output, MODELS[0]).with_name("model_meta.json").write_bytes(b"")

    # 2. the rerun resumes: finished results untouched, the rest computed, nothing encoded
    messages: list[str] = []
    report = run_bench(BACKBONE, senteval_dir, output_folder=output, leaderboard=board_path, tasks=[TASK],
                       progress=messages.append)
    assert report.failed == []
    assert sorted(o.model for o in report.skipped) == sorted(done)
    assert sorted(o.model for o in report.computed) == sorted(set(MODELS) - set(done))
    assert report.n_encoded == 0 and report.n_cache_hits > 0  # everything came from the killed run's disk cache
    assert report.cache_dir == output / "embedding-cache"
    if truncated_model is not None:
        assert [path.name.split(".corrupt-")[0] for path in report.quarantined] == [f"{TASK}.json"]
        assert any("cut short" in message for message in messages)
    for model in unrecorded:  # set aside, not reused
        assert list(result_path(output, model).parent.glob(f"{TASK}.json.unrecorded-*"))
    after = finished(output)
    assert set(after) == set(MODELS)
    assert json.loads(result_path(output, MODELS[0]).with_name("model_meta.json").read_text())["name"] == MODELS[0]
    assert all(after[model] == stamp for model, stamp in done.items())  # not recomputed
    assert sum("already done" in message for message in messages) == len(done)
    assert f"[{len(MODELS)}/{len(MODELS)}]" in messages[-1]

    board = json.loads(board_path.read_text())
    assert [row["model"] for row in board["rows"]] == MODELS and board["tasks"] == [TASK]
    assert board_path.with_suffix(".md").is_file() and board_path.with_suffix(".png").is_file()
    for row in board["rows"]:
        data = json.loads(result_path(output, row["model"]).read_text())
        assert row["scores"][TASK]["score"] == round(data["scores"]["test"][0]["main_score"] * 100, 4)
        assert row["calibrator"] == ("raw" if row["model"] == MODELS[0] else row["model"].split(f"{BACKBONE}-")[1])
    for outcome in report.computed:  # hardware recorded for what this run computed
        hardware = next(r for r in board["rows"] if r["model"] == outcome.model)["scores"][TASK]["hardware"]
        assert hardware["device"] == "cpu" and hardware["torch"] and hardware["cpu_cores"] >= 1
    assert {outcome.model: outcome.score for outcome in report.outcomes} == {
        row["model"]: row["scores"][TASK]["score"] for row in board["rows"]
    }

    # 3. a third run (fresh process state) recomputes nothing and re-encodes nothing
    clear_shared_encoders()
    files_before = {path: path.read_bytes() for path in (board_path, board_path.with_suffix(".md"))}
    assert cli_main(arguments) == 0
    printed = capsys.readouterr().out
    assert f"0 computed, {len(MODELS)} already done, 0 failed" in printed
    assert "backbone encoded 0 sentences" in printed
    assert f"{len(MODELS)} unchanged, 0 replaced" in printed
    assert finished(output) == after
    assert cache_files(output) == shards  # no embedding was computed (or written) since the killed run
    assert {path: path.read_bytes() for path in files_before} == files_before  # nothing changed, not even "updated"

    # 4. recomputing the (seeded) flow variant reproduces its score: the merge finds no conflict
    clear_shared_encoders()
    again = run_bench(BACKBONE, senteval_dir, output_folder=output, leaderboard=board_path, tasks=[TASK],
                      calibrators=["flow"], overwrite=True, progress=messages.append)
    assert [o.status for o in again.outcomes] == ["computed"] and again.n_encoded == 0
    # a row's experiment: its kwargs but the calibrator (the model's name says it), the precision auto resolved to
    kwargs = {k: v for k, v in loaded_meta(MODELS[-1]).experiment_kwargs.items() if k != "calibrator"}
    experiment = experiment_name(MODELS[-1], kwargs)
    assert again.leaderboard.report.unchanged == [f"{MODELS[-1]}@{revision(MODELS[-1])} [{experiment}] / {TASK}"]
    assert again.leaderboard.report.replaced == []


def test_bench_rejects_bad_arguments(senteval_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["bench", "--data", str(senteval_dir), "--output-folder", str(tmp_path), "--no-leaderboard"]
    assert cli_main([*base, "-b", "minilm-l7"]) == 2
    said = capsys.readouterr().err
    assert "unknown backbone 'minilm-l7'" in said
    assert "Any other base is an MTEB model name (org/name) or a local folder (./minilm-l7 or an absolute path)" in said
    assert cli_main([*base, "-b", BACKBONE, "--tasks", "STS13"]) == 2
    assert "unknown task(s) STS13" in capsys.readouterr().err
    assert cli_main([*base, "-b", BACKBONE, "--calibrators", "pca"]) == 2
    assert "unknown calibrator(s) pca" in capsys.readouterr().err
    assert cli_main(["bench", "-b", BACKBONE, "--data", str(tmp_path / "nowhere"), "--no-leaderboard"]) == 2
    assert "nowhere" in capsys.readouterr().err
    assert not (tmp_path / "results").exists()


def test_a_bench_of_a_local_folder_writes_its_board_under_leaderboards_and_claims_no_sentence_counts(
        tiny_bert_dir: Path, senteval_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The default board is leaderboards/<folder name>.json, not <the folder's path>.json beside the model; only a
    registry backbone counts the sentences it encodes, so a folder MTEB loads is not said to encode 0."""
    monkeypatch.chdir(tmp_path)
    before = sorted(tiny_bert_dir.parent.iterdir())
    assert cli_main(["bench", "-b", str(tiny_bert_dir), "--data", str(senteval_dir), "--tasks", "SentEvalSTS16",
                     "--calibrators", "raw", "--output-folder", str(tmp_path / "out")]) == 0
    assert (tmp_path / "leaderboards" / f"{tiny_bert_dir.name}.json").is_file()
    assert sorted(tiny_bert_dir.parent.iterdir()) == before
    summary = [line for line in capsys.readouterr().out.splitlines() if line.startswith(f"bench {tiny_bert_dir}:")]
    assert len(summary) == 1 and "1 computed" in summary[0], summary
    assert "encoded" not in summary[0] and summary[0].endswith(f"embedding cache {tmp_path / 'out' / 'embedding-cache'}")


# ------------------------------------------------------------------ a result counts only with its run record
@pytest.fixture()
def tiny_bench(tiny_backbone: str, senteval_dir: Path, tiny_embedding_cache: Path) -> Any:
    """``bench`` of the registry backbone ``tiny`` on SentEvalSTS16 (embeddings from the session's cache)."""
    from flow_plugin.encoding.options import EncoderOptions

    def bench(output: Path, messages: list[str], calibrators: tuple[str, ...] = ("raw", "sn")) -> Any:
        return run_bench(tiny_backbone, senteval_dir, output_folder=output, tasks=["SentEvalSTS16"],
                         calibrators=list(calibrators), progress=messages.append,
                         options=EncoderOptions(precision="float32", cache_dir=tiny_embedding_cache))

    return bench


def run_records(output: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (output / "flow-plugin-runs.jsonl").read_text(encoding="utf-8").splitlines()]


def assert_every_result_has_its_record(output: Path) -> None:
    from flow_plugin.results.runs import record_run_key, result_run_key

    recorded = {record_run_key(record): record for record in run_records(output)}
    results = list((output / "results").rglob("SentEvalSTS16.json"))
    assert results and all(recorded[result_run_key(path)]["hardware"]["device"] == "cpu" for path in results)


def test_a_result_whose_run_record_was_lost_is_recomputed_not_reused(tiny_bench: Any, tmp_path: Path) -> None:
    """A run killed between MTEB's result and our record (or a record lost on a full disk) used to
    leave a result reused as "already done" forever, with ``hardware: null``."""
    output, messages = tmp_path / "out", []
    first = tiny_bench(output, messages)
    assert [outcome.status for outcome in first.outcomes] == ["computed", "computed"]
    records = output / "flow-plugin-runs.jsonl"
    lines = records.read_text(encoding="utf-8").splitlines()
    records.write_text("".join(line + "\n" for line in lines if json.loads(line)["model"] != "flow_plugin/tiny"))

    second = tiny_bench(output, messages)
    assert {o.model: o.status for o in second.outcomes} == {"flow_plugin/tiny": "computed", "flow_plugin/tiny-sn": "skipped"}
    (aside,) = (output / "results").rglob("SentEvalSTS16.json.unrecorded-*")
    assert aside.parent == second.outcomes[0].path.parent
    assert_every_result_has_its_record(output)
    assert second.outcomes[0].score == first.outcomes[0].score  # recomputed: the same number, now with its hardware


def test_a_result_whose_run_record_cannot_be_written_is_not_kept(tiny_bench: Any, tmp_path: Path) -> None:
    """On a full disk the bench used to keep the result JSON and lose its record."""
    output, messages = tmp_path / "out", []
    with pytest.MonkeyPatch.context() as patch:
        full_disk_at(patch, "flow-plugin-runs.jsonl")
        report = tiny_bench(output, messages)
    (failed,) = report.outcomes  # the bench stops: the output folder cannot take results
    assert failed.status == "failed" and failed.model == "flow_plugin/tiny"
    assert "flow-plugin-runs.jsonl: no space left on device (ENOSPC); free some space there" in failed.error
    assert "set aside" in failed.error and any("bench: stopped" in message for message in messages)
    assert not list((output / "results").rglob("SentEvalSTS16.json"))  # no result without its record

    again = tiny_bench(output, messages)
    assert [outcome.status for outcome in again.outcomes] == ["computed", "computed"]
    assert_every_result_has_its_record(output)


def test_a_result_cut_short_by_a_full_disk_is_not_blamed_on_an_interrupted_write(tiny_bench: Any, tmp_path: Path) -> None:
    """MTEB writes its result in place: on a full disk it leaves a cut-short file, which the rerun
    used to call "truncated (interrupted write)"; the failure now names the cause, and the file is set aside."""
    import errno

    from mteb.results import TaskResult

    def to_disk_on_a_full_disk(self: Any, path: Path) -> None:  # the OS fails the write midway
        path.write_text('{"dataset_revision": "sha256:', encoding="utf-8")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    output, messages = tmp_path / "out", []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(TaskResult, "to_disk", to_disk_on_a_full_disk)
        report = tiny_bench(output, messages, calibrators=("raw",))
    (failed,) = report.outcomes
    assert f"cannot write the output folder {output}: no space left on device (ENOSPC)" in failed.error
    assert not list((output / "results").rglob("SentEvalSTS16.json"))

    again = tiny_bench(output, messages, calibrators=("raw",))
    assert [outcome.status for outcome in again.outcomes] == ["computed"]
    assert not any("interrupted" in message or "truncated" in message for message in messages)
    assert_every_result_has_its_record(output)


def test_a_backbone_that_cannot_load_stops_the_bench_at_its_first_task(tiny_backbone: str, senteval_dir: Path,
                                                                         tmp_path: Path) -> None:
    """The bench used to try the missing weights again for every (model, task), printing the same
    Hugging Face error dozens of times; the first failure now stops it with one line."""
    from conftest import tiny_registry
    from flow_plugin.catalog.registry import default_registry
    from flow_plugin.errors import WeightsUnavailableError

    tiny_registry(tmp_path / "registry", tmp_path / "no-such-weights")
    default_registry(refresh=True)
    messages: list[str] = []
    report = run_bench(tiny_backbone, senteval_dir, output_folder=tmp_path / "out", tasks=["SentEvalSTS16", "SentEvalSTS13"],
                       calibrators=["raw", "sn"], progress=messages.append)
    (failed,) = report.outcomes  # one of the 2 x 2 runs was tried
    assert failed.status == "failed" and failed.error.startswith(WeightsUnavailableError.__name__)
    assert "no-such-weights" in failed.error and "\n" not in failed.error
    assert messages[-1] == "bench: stopped: the backbone of tiny cannot be loaded; the tasks left were not run"


@pytest.mark.parametrize(("speedup", "expected"), [(2.0, "bf16"), (0.5, "float32")])
def test_the_run_record_holds_how_auto_precision_was_decided(
    tiny_backbone: str, senteval_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, speedup: float,
    expected: str,
) -> None:
    """``auto`` on a CPU: the record says what it resolved to, the measured bf16 speed ratio and whether the
    measurement came from the cache (faked here: the test asserts no timing)."""
    from flow_plugin.encoding import precision_probe
    from flow_plugin.encoding.options import AUTO_PRECISION_ENV, EncoderOptions

    monkeypatch.delenv(AUTO_PRECISION_ENV, raising=False)
    monkeypatch.setattr(precision_probe, "probe_cache_dir", lambda: tmp_path / "precision-cache")
    monkeypatch.setattr(precision_probe, "measure_bf16_speedup", lambda shapes: precision_probe.Bf16Measurement(
        speedup, 0.01, 0.01 / speedup, 5, 0.2, "2026-11-25T10:00:00+00:00"))
    output, messages = tmp_path / "out", []
    report = run_bench(tiny_backbone, senteval_dir, output_folder=output, tasks=["SentEvalSTS16"], calibrators=["raw"],
                       progress=messages.append,
                       options=EncoderOptions(device="cpu", precision="auto", cache_dir=tmp_path / "embeddings"))
    assert [outcome.status for outcome in report.outcomes] == ["computed"]
    (record,) = run_records(output)
    assert record["hardware"]["precision"] == expected == record["settings"]["encoder"]["precision"]
    assert record["hardware"]["precision_choice"] == {
        "requested": "auto", "precision": expected, "source": "probe", "bf16_speedup": speedup,
        "measured": "2026-11-25T10:00:00+00:00"}
    assert f"bench: tiny: precision auto -> {expected} (bf16 {speedup:.2f}x float32, measured 2026-11-25, probed now)" \
        in messages
