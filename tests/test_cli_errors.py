"""Bad command lines and interrupted runs end in one line that names the problem, not a traceback."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flow_plugin.cli.main import main as cli_main

REPO = Path(__file__).resolve().parents[1]


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = cli_main(argv)
    return code, capsys.readouterr().err


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
    import re

    assert re.search(message, err), err


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


def test_ctrl_c_ends_bench_with_a_one_line_summary(senteval_dir: Path, tmp_path: Path, minilm_path: Path) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    env.pop("FLOW_PLUGIN_CACHE_DIR", None)
    command = [sys.executable, "-m", "flow_plugin.cli.main", "bench", "-b", "minilm-l6", "--data", str(senteval_dir),
               "--tasks", "SentEvalSTS16", "SentEvalSTS13", "--calibrators", "raw", "sn", "whiten",
               "--output-folder", str(tmp_path / "out"), "--no-leaderboard", "--precision", "float32"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
    lines: list[str] = []
    deadline = time.monotonic() + 300
    assert process.stderr is not None
    while time.monotonic() < deadline:  # wait for the first finished result, then press Ctrl-C
        line = process.stderr.readline()
        lines.append(line)
        if ": computed in " in line or not line:
            break
    process.send_signal(signal.SIGINT)
    stdout, rest = process.communicate(timeout=120)
    err = "".join(lines) + rest
    assert process.returncode == 130, err[-2000:]
    assert "Traceback" not in err
    summary = [line for line in err.splitlines() if "interrupted" in line]
    assert len(summary) == 1 and "kept in" in summary[0] and "rerun the same command to resume" in summary[0]
    assert list((tmp_path / "out" / "results").rglob("SentEvalSTS16.json"))  # the finished result is kept
