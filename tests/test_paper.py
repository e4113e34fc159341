"""``flow-plugin paper`` end to end through the CLI, on the real data and the real MiniLM weights.

To stay fast it runs a smoke setting: STS-B only, raw + whitening + flow, and ``--max-pairs 250``
(the first 250 pairs of each STS-B split and of QNLI dev). Every section still runs for real.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
from pathlib import Path

import numpy as np
import pytest

from flow_plugin.encoding.cache import clear_shared_encoders
from flow_plugin.encoding.options import CACHE_DIR_ENV
from flow_plugin.cli.main import main
from flow_plugin.evaluation import lexical_similarity_correlations
from flow_plugin.data.senteval import load_qnli_dev, load_split

MAX_PAIRS = 250
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def paper_run(shared_data_dir: Path, minilm_path: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("paper")
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv(CACHE_DIR_ENV, raising=False)  # memory cache only, so the counters see every pass
        clear_shared_encoders()  # a fresh encoder: nothing embedded before this run
        code, stdout, stderr = run_cli([
            "paper", "-m", "minilm-l6", "--calibrators", "whiten,flow", "--tasks", "STS-B",
            "--max-pairs", str(MAX_PAIRS), "--data", str(shared_data_dir), "--out", str(out),
        ])
    assert code == 0, stderr
    report = json.loads((out / "paper.json").read_text(encoding="utf-8"))
    return {"out": out, "report": report, "stdout": stdout, "stderr": stderr}


def first_pairs(root: Path, task: str, split: str):
    (pairs,) = load_split(root, task, split)
    return pairs.sentences1[:MAX_PAIRS], pairs.sentences2[:MAX_PAIRS], pairs.scores[:MAX_PAIRS]


def test_model_data_and_protocols_are_recorded(paper_run: dict, shared_data_dir: Path) -> None:
    report = paper_run["report"]
    assert report["format"] == "flow-plugin-paper" and report["errors"] == []
    assert list(report["model"]["calibrators"]) == ["raw", "whiten", "flow"]
    backbone = report["model"]["backbone"]
    assert backbone["name"] == "minilm-l6" and backbone["pooling"] == "last-avg" and backbone["embedding_dim"] == 384
    assert report["model"]["calibrators"]["flow"]["model_name"] == "flow_plugin/minilm-l6-flow"
    assert report["model"]["calibrators"]["flow"]["params"]["n_levels"] == 3
    assert report["data"]["senteval_root"] == str(shared_data_dir / "senteval")
    assert report["data"]["max_pairs"] == MAX_PAIRS and any("NOT the paper" in note for note in report["notes"])
    for key in ("spearman.all", "spearman.wmean", "qnli.AUC", "lexical", "isotropy", "sts_fit"):
        assert report["protocols"][key]
    assert report["sections"] == ["sts", "qnli", "lexical", "isotropy"]
    assert report["timings_seconds"]["total"] >= 0 and report["machine"]["python"]  # a measured time: never its value
    assert report["encoder"]["precision"] in ("float32", "bf16", "fp16")


def test_sts_numbers_per_calibrator_and_protocol(paper_run: dict, shared_data_dir: Path) -> None:
    report = paper_run["report"]
    assert list(report["sts"]) == ["STSBenchmark"]
    stsb = report["sts"]["STSBenchmark"]
    root = shared_data_dir / "senteval"
    corpus: list[str] = []
    for split in ("train", "dev", "test"):
        s1, s2, _ = first_pairs(root, "STSBenchmark", split)
        corpus += [*s1, *s2]
    assert stsb["fit_corpus"]["n_sentences"] == len(corpus) == 6 * MAX_PAIRS
    assert stsb["fit_corpus"]["n_unique_sentences"] == len(set(corpus))
    assert stsb["n_test_pairs"] == MAX_PAIRS
    for name in ("raw", "whiten", "flow"):
        result = stsb["calibrators"][name]
        assert set(result["spearman"]) == {"all", "wmean", "mean"} and "wmean" in result["protocols"]
        assert 0.5 < result["spearman"]["all"] < 1.0
        assert result["spearman"]["all"] == pytest.approx(result["spearman"]["wmean"])  # one subset
        assert result["subsets"]["default"]["n"] == MAX_PAIRS
        for protocol in ("all", "wmean"):
            row = report["summary"][f"sts_spearman_{protocol}"][name]
            assert row["STSBenchmark"] == row["avg"] == result["spearman"][protocol]
    fits = {(fit["corpus"], fit["calibrator"]): fit for fit in report["fits"]}
    assert len(fits) == len(report["fits"]) == 6  # 3 calibrators x (STS-B, QNLI): lexical/isotropy reuse STS-B's
    flow_fit = fits[("STSBenchmark (target)", "flow")]
    assert flow_fit["n_sentences"] == 6 * MAX_PAIRS and flow_fit["n_steps"] == math.ceil(6 * MAX_PAIRS / 64)
    assert math.isfinite(flow_fit["fit_log_likelihood"]) and flow_fit["fit_log_likelihood"] > flow_fit["initial_log_likelihood"]


def test_qnli_auc(paper_run: dict) -> None:
    qnli = paper_run["report"]["qnli"]
    assert qnli["metric"] == "AUC" and qnli["n_pairs"] == MAX_PAIRS
    assert qnli["fit_corpus"]["n_sentences"] == 2 * MAX_PAIRS
    for name in ("raw", "whiten", "flow"):
        assert 0.5 < qnli["auc"][name] < 1.0
        assert paper_run["report"]["summary"]["qnli_auc"][name] == qnli["auc"][name]


def test_lexical_correlations_use_the_stsb_test_pairs(paper_run: dict, shared_data_dir: Path) -> None:
    lexical = paper_run["report"]["lexical"]
    s1, s2, gold = first_pairs(shared_data_dir / "senteval", "STSBenchmark", "test")
    expected = lexical_similarity_correlations(s1, s2, gold, {}, max_edit_distance=4)
    assert lexical["max_edit_distance"] == 4 and lexical["n_pairs"] == expected["n_pairs"]
    assert lexical["n_pairs"]["all"] == MAX_PAIRS and lexical["n_pairs"]["small_edit"] >= 2
    assert lexical["spearman"]["gold"] == pytest.approx(expected["spearman"]["gold"])
    for name in ("raw", "whiten", "flow"):
        for subset in ("all", "small_edit"):
            assert -1.0 <= lexical["spearman"][name][subset] <= 1.0


def test_isotropy_and_spectra_plots(paper_run: dict, shared_data_dir: Path) -> None:
    isotropy = paper_run["report"]["isotropy"]
    s1, s2, _ = first_pairs(shared_data_dir / "senteval", "STSBenchmark", "test")
    n_unique = len(set(s1) | set(s2))
    raw, whiten, flow = (isotropy["calibrators"][name] for name in ("raw", "whiten", "flow"))
    for report in (raw, whiten, flow):
        assert report["n"] == n_unique and report["d"] == 384 and len(report["singular_values"]) == 384
        assert 0 < report["unit_rows"]["isotropy_score"] <= 1
    # anisotropic raw embeddings; whitening and the flow spread them out
    assert raw["mean_random_cosine"] > 0.05
    assert abs(whiten["mean_random_cosine"]) < raw["mean_random_cosine"] / 2
    assert flow["mean_random_cosine"] < raw["mean_random_cosine"]
    assert whiten["effective_rank"] > raw["effective_rank"]
    assert whiten["top_k_variance_share"]["1"] < raw["top_k_variance_share"]["1"]
    assert isotropy["plots"] == ["spectra.png", "spectra-raw-vs-whiten.png", "spectra-raw-vs-flow.png"]
    for name in isotropy["plots"]:
        data = (paper_run["out"] / name).read_bytes()
        assert data.startswith(PNG_SIGNATURE) and len(data) > 1000


def test_the_backbone_encoded_each_unique_sentence_once(paper_run: dict, shared_data_dir: Path) -> None:
    root = shared_data_dir / "senteval"
    expected: set[str] = set()
    for split in ("train", "dev", "test"):
        s1, s2, _ = first_pairs(root, "STSBenchmark", split)
        expected.update(s1, s2)
    qnli = load_qnli_dev(shared_data_dir / "glue")
    expected.update(qnli.questions[:MAX_PAIRS], qnli.sentences[:MAX_PAIRS])
    encoder = paper_run["report"]["encoder"]
    assert encoder["n_unique_sentences_requested"] == len(expected)
    assert encoder["n_backbone_encoded"] == len(expected)
    assert encoder["n_cache_hits"] == encoder["n_sentences_requested"] - len(expected) > 0
    assert encoder["one_backbone_pass_per_unique_sentence"] is True


def test_printed_table(paper_run: dict) -> None:
    stdout = paper_run["stdout"]
    for text in ("protocol 'wmean'", "protocol 'all'", "STS-B", "AUC", "edit<=4", "iso(unit)", "backbone passes",
                 "NOT the paper's protocol", "paper.json", "run time: "):
        assert text in stdout, text
    flow_wmean = paper_run["report"]["summary"]["sts_spearman_wmean"]["flow"]["STSBenchmark"]
    flow_row = next(line for line in stdout.splitlines() if line.startswith("minilm-l6-flow ") and "." in line)
    assert f"{100 * flow_wmean:.2f}" in flow_row


def test_a_senteval_folder_alone_skips_qnli_and_reuses_the_cache(paper_run: dict, senteval_dir: Path,
                                                                 tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CACHE_DIR_ENV, raising=False)  # the same shared in-memory encoder as the first run
    code, stdout, stderr = run_cli([
        "paper", "-m", "flow_plugin/minilm-l6-whiten", "--tasks", "STSBenchmark", "--max-pairs", str(MAX_PAIRS),
        "--skip", "lexical,isotropy", "--data", str(senteval_dir), "--out", str(tmp_path),
    ])
    assert code == 0, stderr
    assert "QNLI skipped" in stderr and "--glue" in stderr
    report = json.loads((tmp_path / "paper.json").read_text(encoding="utf-8"))
    assert list(report["model"]["calibrators"]) == ["raw", "whiten"] and report["sections"] == ["sts"]
    assert "qnli" not in report and any("QNLI skipped" in note for note in report["notes"])
    assert report["encoder"]["n_backbone_encoded"] == 0  # every sentence is in the first run's cache
    first = paper_run["report"]["sts"]["STSBenchmark"]["calibrators"]
    for name in ("raw", "whiten"):
        assert report["sts"]["STSBenchmark"]["calibrators"][name]["spearman"] == pytest.approx(
            first[name]["spearman"], abs=1e-6)
    assert not list(tmp_path.glob("*.png"))


def test_without_matplotlib_the_plots_are_skipped_with_a_warning(paper_run: dict, shared_data_dir: Path,
                                                                  tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  without_matplotlib: None) -> None:
    monkeypatch.delenv(CACHE_DIR_ENV, raising=False)  # the same shared in-memory encoder as the first run
    code, stdout, stderr = run_cli([
        "paper", "-m", "minilm-l6", "--calibrators", "whiten", "--tasks", "STS-B", "--max-pairs", str(MAX_PAIRS),
        "--skip", "sts,qnli,lexical", "--data", str(shared_data_dir), "--out", str(tmp_path),
    ])
    assert code == 0, stderr
    assert stderr.count("spectra plots skipped") == 1 and "pip install 'flow-plugin[plots]'" in stderr
    report = json.loads((tmp_path / "paper.json").read_text(encoding="utf-8"))
    isotropy = report["isotropy"]
    assert isotropy["plots"] == [] and "flow-plugin[plots]" in isotropy["plots_skipped"]
    assert any("spectra plots skipped" in note for note in report["notes"])
    assert "plots: none (matplotlib is not installed" in stdout
    assert sorted(path.name for path in tmp_path.iterdir()) == ["paper.json"]
    first = paper_run["report"]["isotropy"]["calibrators"]
    for name in ("raw", "whiten"):  # the numbers do not need matplotlib
        assert isotropy["calibrators"][name]["singular_values"] == pytest.approx(first[name]["singular_values"])


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["-m", "minilm-l7"], "unknown model"),
        (["-m", "minilm-l6", "--calibrators", "flow,flows"], "unknown calibrator"),
        (["-m", "minilm-l6", "--tasks", "STS17"], "unknown task"),
        (["-m", "minilm-l6", "--skip", "sts,qnli,lexical,isotropy"], "nothing to run"),
        (["-m", "minilm-l6", "--skip", "plots"], "unknown section"),
        (["-m", "minilm-l6", "--max-pairs", "1"], "at least 2"),
    ],
)
def test_bad_arguments_are_clear_errors(shared_data_dir: Path, tmp_path: Path, extra: list[str], message: str) -> None:
    code, _, stderr = run_cli(["paper", *extra, "--data", str(shared_data_dir), "--out", str(tmp_path / "out")])
    assert code == 2 and message in stderr, stderr
    assert not (tmp_path / "out" / "paper.json").exists()


def test_a_folder_without_data_is_a_clear_error(tmp_path: Path) -> None:
    code, _, stderr = run_cli(["paper", "-m", "minilm-l6", "--data", str(tmp_path), "--out", str(tmp_path / "out")])
    assert code == 2 and "not a SentEval data folder" in stderr
    code, _, stderr = run_cli(["paper", "-m", "minilm-l6", "--data", str(tmp_path / "missing"), "--out", str(tmp_path)])
    assert code == 2 and "does not exist" in stderr


def test_numbers_are_finite_json(paper_run: dict) -> None:
    text = (paper_run["out"] / "paper.json").read_text(encoding="utf-8")
    assert "NaN" not in text and "Infinity" not in text
    values = np.array(json.loads(text)["isotropy"]["calibrators"]["flow"]["singular_values"])
    assert np.all(np.diff(values) <= 0)
