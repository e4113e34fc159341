"""Bad command lines and interrupted runs end in one line that names the problem, not a traceback."""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import full_disk_at
from flow_plugin.cli.main import main as cli_main

REPO = Path(__file__).resolve().parents[1]


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = cli_main(argv)
    return code, capsys.readouterr().err


def test_a_command_loads_its_own_verb_and_no_other() -> None:
    """``flow-plugin leaderboard --schema`` imports the leaderboard verb's module, none of the other verbs' (the
    paper's evaluations, SentEval, the export); ``flow-plugin --help`` still lists every verb; an unknown verb is
    argparse's one-line error naming the verbs."""
    from flow_plugin.cli.main import COMMANDS

    code = ("import sys; from flow_plugin.cli.main import main; main(['leaderboard', '--schema'])\n"
            "print(sorted(m for m in sys.modules if m.startswith('flow_plugin.cli.') or m == 'flow_plugin.studies.paper'),"
            " file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[-1] == "['flow_plugin.cli.leaderboard', 'flow_plugin.cli.main']"
    listed = subprocess.run([sys.executable, "-m", "flow_plugin.cli.main", "--help"], capture_output=True, text=True,
                            cwd=REPO, timeout=300)
    assert listed.returncode == 0 and all(f"    {verb} " in listed.stdout for verb in COMMANDS)
    unknown = subprocess.run([sys.executable, "-m", "flow_plugin.cli.main", "evaluate"], capture_output=True,
                             text=True, cwd=REPO, timeout=300)
    assert unknown.returncode == 2 and "invalid choice: 'evaluate' (choose from 'eval', 'paper'" in unknown.stderr


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["-m", "minilm-l6-flow"], "lacks the 'flow_plugin/' prefix.*did you mean 'flow_plugin/minilm-l6-flow'"),
        (["-m", "flow_plugin/minilm-l6", "--batch-size", "0"], "batch_size must be a positive int, got 0"),
        (["-m", "flow_plugin/minilm-l6", "--device", "cuda"], "no usable CUDA device|CUDA"),
    ],
)
def test_bad_eval_arguments_are_one_line_errors(
    extra: list[str], message: str, senteval_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if "cuda" in extra:
        from flow_plugin._machine import cuda_available

        if cuda_available():
            pytest.skip("this machine has CUDA")
    code, err = run_cli(["eval", *extra, "--data", str(senteval_dir), "-t", "SentEvalSTS16",
                         "--output-folder", str(tmp_path)], capsys)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("flow-plugin eval: error: ")
    assert re.search(message, err), err


@pytest.mark.parametrize("command", ["task-types", "bench"])
@pytest.mark.parametrize(("folder", "message"), [
    ("missing", "no such folder"), ("empty", "not a sentence-transformers folder")])
def test_a_study_of_a_folder_without_a_model_stops_before_it_runs(
        command: str, folder: str, message: str, shared_data_dir: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """One line and exit 2 up front, and no output folder: not one failure per calibrator and task."""
    (tmp_path / "empty").mkdir()
    output = tmp_path / "out"
    code, err = run_cli([command, "-b", str(tmp_path / folder), "--output-folder", str(output),
                         "--data", str(shared_data_dir / ("senteval" if command == "bench" else ""))], capsys)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith(f"flow-plugin {command}: error: {tmp_path / folder}: {message}"), err
    assert not output.exists()


@pytest.mark.parametrize("command", ["task-types", "bench"])
def test_a_study_of_a_model_outside_the_registry_refuses_a_precision_before_it_runs(
        command: str, minilm_path: Path, shared_data_dir: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """As `flow-plugin eval` does: one line and exit 2 up front, not one failure per calibrator and task (the
    model's own loader decides how it encodes)."""
    output = tmp_path / "out"
    code, err = run_cli([command, "-b", str(minilm_path), "--precision", "float32", "--output-folder", str(output),
                         "--data", str(shared_data_dir / ("senteval" if command == "bench" else ""))], capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"flow-plugin {command}: error: {minilm_path}: the encoder options precision apply to "
                          "registry backbones only"), err
    assert not output.exists()


@pytest.mark.parametrize(("command", "message"), [
    ("bench", "the offline task(s) SentEvalSTS16 read a SentEval data folder: give --data DIR"),
    ("paper", "the paper's evaluations read the shared data folder (senteval/, glue/): give --data DIR"),
    ("senteval", "the offline task(s) MR read a SentEval data folder: give --data DIR")])
def test_bench_and_paper_without_a_data_folder_say_how_to_name_one(command: str, message: str, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str],
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from flow_plugin.data.roots import DATA_ENV, PARTS

    for variable in (DATA_ENV, *PARTS.values()):
        monkeypatch.delenv(variable, raising=False)
    output = tmp_path / "out"
    where = {"bench": ["--output-folder", str(output), "--tasks", "SentEvalSTS16"],
             "paper": ["--out", str(output), "--tasks", "STS16"],
             "senteval": ["--output", str(output / "transfer.json"), "--tasks", "MR"]}[command]
    code, err = run_cli([command, "-m" if command == "paper" else "-b", "minilm-l6", *where], capsys)
    assert code == 2 and err.count("\n") == 1 and message in err and DATA_ENV in err, err
    assert not output.exists()


def test_bench_and_paper_read_the_data_root_when_no_data_folder_is_given(shared_data_dir: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """As eval and task-types do: --data wins, else $FLOW_PLUGIN_SHARED_DATA."""
    from flow_plugin.data.roots import DATA_ENV
    from flow_plugin.integrations.mteb.task_resolver import offline_data_root
    from flow_plugin.studies.paper import resolve_data

    monkeypatch.setenv(DATA_ENV, str(shared_data_dir))
    assert offline_data_root(None, ["SentEvalSTS16"]) == shared_data_dir / "senteval"
    assert resolve_data(None, None)[:2] == (shared_data_dir / "senteval", shared_data_dir / "glue")


@pytest.mark.parametrize(("flag", "value", "message"), [
    ("--workers", "0", "workers must be a positive number of processes (1 runs every step in this process), got 0"),
    ("--workers", "-2", "workers must be a positive number of processes (1 runs every step in this process), got -2"),
    ("--evaluator-seeds", "0", "evaluator_seeds must be a positive number of seeds, got 0; give --evaluator-seeds 1"),
])
def test_a_study_refuses_a_count_below_one(flag: str, value: str, message: str, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """A count below one is an error up front, not a study run in this process as if it were 1."""
    output = tmp_path / "out"
    code, err = run_cli(["task-types", "-b", "minilm-l6", flag, value, "--output-folder", str(output)], capsys)
    assert code == 2 and err.count("\n") == 1 and message in err, err
    assert not output.exists()


@pytest.mark.parametrize("command", ["task-types", "bench"])
def test_a_study_on_a_device_this_machine_lacks_stops_before_it_runs(command: str, shared_data_dir: Path,
                                                                     tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    from flow_plugin._machine import cuda_available

    if cuda_available():
        pytest.skip("this machine has CUDA")
    output = tmp_path / "out"
    code, err = run_cli([command, "-b", "minilm-l6", "--device", "cuda", "--output-folder", str(output),
                         "--data", str(shared_data_dir / ("senteval" if command == "bench" else ""))], capsys)
    assert code == 2 and err.count("\n") == 1 and "no usable CUDA device" in err, err
    assert not output.exists()


def test_a_bad_auto_precision_variable_is_one_line_naming_it(
    senteval_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from flow_plugin.encoding.options import AUTO_PRECISION_ENV

    monkeypatch.setenv(AUTO_PRECISION_ENV, "fastest")
    code, err = run_cli(["eval", "-m", "flow_plugin/minilm-l6", "--data", str(senteval_dir), "-t", "SentEvalSTS16",
                         "--device", "cpu", "--output-folder", str(tmp_path)], capsys)
    assert code == 2 and err.count("\n") == 1, err[-2000:]
    assert err == (f"flow-plugin eval: error: {AUTO_PRECISION_ENV}='fastest' is not a precision; set it to one of "
                   "float32, bf16, fp16, or unset it to let 'auto' decide\n")


def test_an_unknown_task_is_one_line_without_mtebs_warnings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """Listing MTEB's names for the close-name hint used to log ~250 "task X is in beta" warnings first."""
    with caplog.at_level(logging.WARNING):
        code, err = run_cli(["eval", "-m", "flow_plugin/minilm-l6", "-t", "STS99", "--output-folder", str(tmp_path)],
                            capsys)
    assert code == 2 and err.count("\n") == 1, err[:2000]
    assert err.startswith("flow-plugin eval: error: unknown task or benchmark 'STS99'. Close names: ")
    assert [record.getMessage()[:100] for record in caplog.records if record.name.startswith("mteb")] == []


def test_a_lone_surrogate_is_named_not_a_traceback(minilm_path: Path) -> None:
    from flow_plugin.errors import InputError
    from flow_plugin.integrations.senteval import SentEvalAdapter

    adapter = SentEvalAdapter("flow_plugin/minilm-l6", precision="float32")
    with pytest.raises(InputError, match=r"sentences\[1\] holds '\\ud800' \(a lone surrogate, U\+D800\)"):
        adapter.encoder.encode(["fine", "broken \ud800 text"])


@pytest.mark.slow
def test_ctrl_c_ends_bench_with_a_one_line_summary(senteval_dir: Path, tmp_path: Path, minilm_path: Path) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    env.pop("FLOW_PLUGIN_CACHE_DIR", None)
    command = [sys.executable, "-m", "flow_plugin.cli.main", "bench", "-b", "minilm-l6", "--data", str(senteval_dir),
               "--tasks", "SentEvalSTS16", "SentEvalSTS13", "--calibrators", "raw", "sn", "whiten",
               "--output-folder", str(tmp_path / "out"), "--no-leaderboard", "--precision", "float32"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
    lines: list[str] = []
    assert process.stderr is not None
    # Wait for the first finished result however long a loaded machine takes (a fixed deadline of 300 s sent
    # Ctrl-C before any result on a busy 2-core machine), then press Ctrl-C. The bench ends by itself only
    # if it finishes every job, which the loop sees as the end of its stderr.
    while True:
        line = process.stderr.readline()
        lines.append(line)
        if ": computed in " in line or not line:
            break
    assert line, "the bench ended before its first result:\n" + "".join(lines)[-2000:]
    process.send_signal(signal.SIGINT)
    stdout, rest = process.communicate(timeout=900)
    err = "".join(lines) + rest
    assert process.returncode == 130, err[-2000:]
    assert "Traceback" not in err
    summary = [line for line in err.splitlines() if "interrupted" in line]
    assert len(summary) == 1 and "kept in" in summary[0] and "rerun the same command to resume" in summary[0]
    assert list((tmp_path / "out" / "results").rglob("SentEvalSTS16.json"))  # the finished result is kept


# ------------------------------------------------------------------ output folders that cannot be written
def verb_arguments(verb: str, output: Path, data: Path, cache: Path) -> list[str]:
    encoder = ["--precision", "float32", "--cache-dir", str(cache)]
    return {
        "eval": ["eval", "-m", "flow_plugin/tiny", "--data", str(data), "-t", "SentEvalSTS16", "--output-folder",
                 str(output), *encoder],
        "bench": ["bench", "-b", "tiny", "--data", str(data), "--tasks", "SentEvalSTS16", "--calibrators", "raw",
                  "--output-folder", str(output), "--leaderboard", str(output / "board.json"), *encoder],
        "leaderboard": ["leaderboard", str(data), "-o", str(output / "board.json")],
        "paper": ["paper", "-m", "flow_plugin/tiny-sn", "--data", str(data), "--tasks", "STS16", "--skip",
                  "qnli,lexical,isotropy", "--max-pairs", "40", "--out", str(output), *encoder],
    }[verb]


@pytest.mark.parametrize("verb", ["eval", "bench", "leaderboard", "paper"])
def test_an_output_folder_under_a_file_is_one_line_naming_it(
    verb: str, tiny_backbone: str, senteval_dir: Path, tiny_embedding_cache: Path, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """(As root, chmod stops no write: a folder that cannot be made is one whose parent is a file.)"""
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder", encoding="utf-8")
    output = blocked / "out"
    code, err = run_cli(verb_arguments(verb, output, senteval_dir, tiny_embedding_cache), capsys)
    assert code == 2 and err.count("\n") == 1, err[-3000:]
    assert err.startswith(f"flow-plugin {verb}: error: cannot ") and str(output) in err
    assert "not a directory (ENOTDIR)" in err and "choose another" in err


@pytest.mark.parametrize("verb", ["eval", "bench", "leaderboard", "paper"])
def test_a_full_disk_is_named_as_the_cause(
    verb: str, tiny_backbone: str, senteval_dir: Path, tiny_embedding_cache: Path, tmp_path: Path,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    output = tmp_path / "out"
    if verb == "leaderboard":  # results to merge, written while the disk had room
        assert cli_main(verb_arguments("eval", output, senteval_dir, tiny_embedding_cache)) == 0
        capsys.readouterr()
        verb_argv = ["leaderboard", str(output), "-o", str(tmp_path / "boards" / "board.json")]
        written = "board.json"
    else:
        verb_argv = verb_arguments(verb, output, senteval_dir, tiny_embedding_cache)
        written = {"eval": "flow-plugin-runs.jsonl", "bench": "flow-plugin-runs.jsonl", "paper": "paper.json"}[verb]
    full_disk_at(monkeypatch, written)
    code = cli_main(verb_argv)
    captured = capsys.readouterr()
    err = captured.err if verb != "bench" else captured.out  # bench lists its failed tasks in its summary
    assert code == (1 if verb == "bench" else 2), captured.err[-3000:] + captured.out[-3000:]
    assert "Traceback" not in captured.err and "interrupted write" not in captured.err + captured.out
    assert re.search(rf"cannot write [^\n]*{re.escape(written)}: no space left on device \(ENOSPC\); free some "
                     r"space there or choose another", err), err


@pytest.mark.slow
def test_eval_of_a_local_folder_says_the_precision_it_ran_at(minilm_path: Path, senteval_dir: Path, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """A model MTEB's loader loads reports the dtype its module ran in (float32 on a CPU), not "precision None"."""
    name = f"flow_plugin/{minilm_path}-sn"
    assert cli_main(["eval", "-m", name, "--data", str(senteval_dir), "-t", "SentEvalSTS16",
                     "--output-folder", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert f"{name}\tprecision float32" in lines and not any(line.endswith("precision None") for line in lines), lines



def test_an_mteb_task_whose_data_the_hub_cannot_give_is_one_line(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """(Before, a 50-line traceback ending in datasets' ConnectionError.) The tests run offline
    (``HF_HUB_OFFLINE=1``): MTEB's own STS12 reads its data from the Hub."""
    code, err = run_cli(["eval", "-m", "flow_plugin/minilm-l6", "-t", "STS12", "--output-folder", str(tmp_path)],
                        capsys)
    assert code != 0 and "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("flow-plugin eval: error: task STS12: its data could not be fetched from the Hugging "
                           "Face Hub (") and "run it where the Hub is reachable" in last, err


def test_an_mteb_model_whose_weights_the_hub_cannot_give_is_one_line(tmp_path: Path, senteval_dir: Path,
                                                                    capsys: pytest.CaptureFixture[str],
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """(Before, a traceback ending in transformers' OSError.) A model MTEB's registry knows, whose files are not in
    the (empty) Hugging Face cache of this offline test."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub-cache"))
    code, err = run_cli(["eval", "-m", "flow_plugin/sentence-transformers/all-MiniLM-L12-v2-sn", "--data",
                         str(senteval_dir), "-t", "SentEvalSTS16", "--output-folder", str(tmp_path / "out")], capsys)
    assert code != 0 and "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("flow-plugin eval: error: the weights of sentence-transformers/all-MiniLM-L12-v2 could "
                           "not be loaded (") and "put them in the Hugging Face cache" in last, err


def test_a_study_of_a_model_whose_weights_the_hub_cannot_give_stops_at_its_first_result(
        tmp_path: Path, shared_data_dir: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """(Before, one traceback per result, then a RuntimeError's.) Every result would fail the same way: the study
    stops at the first, in one line naming the remedy."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub-cache"))
    code, err = run_cli(["task-types", "-b", "sentence-transformers/all-MiniLM-L12-v2", "--data", str(shared_data_dir),
                         "--calibrators", "raw", "sn", "whiten", "--tasks", "FlowPluginSICKReranking",
                         "FlowPluginMRPCRetrieval", "--workers", "1", "--output-folder", str(tmp_path / "out")], capsys)
    assert code == 2 and "Traceback" not in err
    assert len(re.findall(r"task types \[\d+/6\].*FAILED", err)) == 1, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("flow-plugin task-types: error: the weights of sentence-transformers/all-MiniLM-L12-v2 "
                           "could not be loaded (") and last.endswith("the study stopped there (rerun it to resume)"), err


def test_export_on_a_full_disk_is_one_line_and_leaves_no_folder(minilm_path: Path, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str],
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The folder is built beside --out and renamed into place: a disk full at that rename is one line naming the
    folder, and neither --out nor the hidden staging folder is left."""
    out = tmp_path / "exports" / "model"
    full_disk_at(monkeypatch, "model")
    code, err = run_cli(["export", "flow_plugin/minilm-l6-layer0", "--out", str(out)], capsys)
    assert code == 2 and "Traceback" not in err, err[-3000:]  # (above it: transformers' loading and writing bars)
    assert err.strip().splitlines()[-1].startswith(f"flow-plugin export: error: cannot write the export folder {out}: "
                                                   "no space left on device (ENOSPC); free some space there"), err
    assert list(out.parent.iterdir()) == []
