"""``flow-plugin leaderboard`` on real MTEB result files from a real (small) run.

The module fixture runs all-MiniLM-L6-v2 raw and whitened on SentEvalSTS13 through
``evaluate_models`` (what ``flow-plugin eval`` runs), the whitened model once more with loader
kwargs (``fit_corpus="per-call"``: an MTEB experiment folder), plus the raw model on MTEB's own
``MockSTSTask`` (a result without flow-plugin's extra keys), once.
"""

from __future__ import annotations

import io
import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import conftest

from flow_plugin.catalog.registry import parse_model_name
from flow_plugin import leaderboard as lb
from flow_plugin.leaderboard import write as lb_write
from flow_plugin.leaderboard.write import LOCK_FILE
from flow_plugin.cli.main import main as cli_main
from flow_plugin.errors import DataFolderError

REPO = Path(__file__).resolve().parents[1]
RAW = "flow_plugin/minilm-l6"
WHITEN = "flow_plugin/minilm-l6-whiten"
TASK = "SentEvalSTS13"


def sts_boards(folder: Path) -> list[Path]:
    """The STS boards of a leaderboards folder (the task-types boards beside them: test_task_types_board.py)."""
    return sorted(path for path in folder.glob("*.json") if not path.name.startswith("task-types-"))


@pytest.fixture(scope="module")
def result_dirs(tmp_path_factory: pytest.TempPathFactory, senteval_dir: Path, minilm_path: Path) -> dict[str, Path]:
    """{"sts": output folder of the SentEvalSTS13 run, "experiment": of the run with loader kwargs,
    "mock": of the MockSTSTask run}."""
    import mteb
    from mteb.cache import ResultCache
    from mteb.mocks.mock_tasks.sts import MockSTSTask

    from flow_plugin.integrations.mteb.evaluate import evaluate_models

    sts = tmp_path_factory.mktemp("sts-results")
    evaluate_models([RAW, WHITEN], senteval_dir, [TASK], sts)
    experiment = tmp_path_factory.mktemp("experiment-results")
    evaluate_models([WHITEN], senteval_dir, [TASK], experiment, model_kwargs={"fit_corpus": "per-call"})
    mock = tmp_path_factory.mktemp("mteb-own-results")
    mteb.evaluate(mteb.get_model(RAW), MockSTSTask(), cache=ResultCache(mock), co2_tracker=False)
    return {"sts": sts, "experiment": experiment, "mock": mock}


def result_file(output: Path, model: str, task: str = TASK) -> Path:
    return conftest.result_file(output, model, task)


def copy_results(source: Path, target: Path) -> Path:
    shutil.copytree(source, target)
    return target


def row(board: dict, model: str) -> dict:
    """The row of ``model`` in a leaderboard file as JSON reads it."""
    matches = [r for r in board["rows"] if r["model"] == model]
    assert len(matches) == 1, [r["id"] for r in board["rows"]]
    return matches[0]


def model_row(board: lb.Leaderboard, model: str) -> lb.Row:
    """The row of ``model`` in a leaderboard in memory (the typed model)."""
    matches = [r for r in board.rows if r.model == model]
    assert len(matches) == 1, [r.id for r in board.rows]
    return matches[0]


def markdown_tables(text: str) -> dict[str, list[list[str]]]:
    """Section title -> table rows (cells, header first) of the first table in each section."""
    tables: dict[str, list[list[str]]] = {}
    section = "scores"
    for line in text.splitlines():
        if line.startswith("## "):
            section = line[3:].strip()
        elif line.startswith("|") and not line.startswith("|---"):
            tables.setdefault(section, []).append([cell.strip() for cell in line.strip("|").split("|")])
    return tables


# ------------------------------------------------------------------ reading real results
def test_offline_task_list_matches_the_tasks_module() -> None:
    from flow_plugin.integrations.mteb.sts_tasks import TASK_NAMES

    assert lb.OFFLINE_TASKS == TASK_NAMES


def test_rows_hold_the_scores_of_the_result_files(result_dirs: dict[str, Path], tmp_path: Path) -> None:
    update = lb.update_leaderboard([result_dirs["sts"], result_dirs["mock"]], tmp_path / "board.json")
    board = json.loads((tmp_path / "board.json").read_text())
    assert board == update.board.model_dump(mode="json")
    assert board["format"] == lb.FORMAT and board["scale"] == "points"
    assert board["tasks"] == [TASK, "MockSTSTask"]  # offline tasks first
    assert [r["model"] for r in board["rows"]] == [RAW, WHITEN]

    for model in (RAW, WHITEN):
        data = json.loads(result_file(result_dirs["sts"], model).read_text())
        scores = data["scores"]["test"][0]
        entry = row(board, model)["scores"][TASK]
        assert entry["score"] == round(scores["main_score"] * 100, 4)
        assert entry["score"] == round(scores["cosine_spearman"] * 100, 4)
        assert entry["wmean"] == round(scores["cosine_spearman_wmean"] * 100, 4)
        assert entry["protocol"] == "all" and entry["metric"] == "cosine_spearman"
        assert entry["dataset_revision"] == data["dataset_revision"] == scores["data_revision"]
        assert entry["dataset_revision"].startswith("sha256:")
        assert entry["mteb_version"] == data["mteb_version"]
        assert entry["date"].startswith("20") and entry["versions"]["torch"]
        assert entry["hardware"]["device"] == "cpu" and entry["hardware"]["torch"]  # recorded by evaluate_models

    raw, whiten = row(board, RAW), row(board, WHITEN)
    assert raw["backbone"] == whiten["backbone"] == "minilm-l6"
    assert raw["backbone_model"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert (raw["calibrator"], whiten["calibrator"]) == ("raw", "whiten")
    assert raw["pooling"] == whiten["pooling"] == "last-avg"
    assert (raw["fit_corpus"], whiten["fit_corpus"]) == (None, "target")
    # the weights' commit, then the digest of the registry configuration (pooling, length, calibrator, ...)
    assert raw["revision"] == parse_model_name(RAW).revision
    # the precision the backbone ran at names the run (as `auto` resolved it: the run record says the same)
    assert raw["experiment_kwargs"] == {"precision": raw["scores"][TASK]["hardware"]["precision"]}
    assert raw["experiment"] == f"precision_{raw['scores'][TASK]['hardware']['precision']}"
    assert raw["revision"].startswith("8b3219a92973c328a8e22fadcfa821b5dc75636a-")

    # MTEB's own task: no wmean, protocol "all"
    mock = raw["scores"]["MockSTSTask"]
    mock_data = json.loads(result_file(result_dirs["mock"], RAW, "MockSTSTask").read_text())
    assert mock["score"] == round(mock_data["scores"]["test"][0]["main_score"] * 100, 4)
    assert mock["protocol"] == "all" and mock["wmean"] is None

    # averages and deltas
    assert raw["complete"] and not whiten["complete"]
    assert raw["average"] == round((raw["scores"][TASK]["score"] + mock["score"]) / 2, 4)
    assert whiten["average"] == whiten["scores"][TASK]["score"] and whiten["n_tasks"] == 1
    assert raw["delta"] is None and whiten["baseline"] == raw["id"]
    expected = round(whiten["scores"][TASK]["score"] - raw["scores"][TASK]["score"], 4)
    assert whiten["delta"] == {TASK: expected, "average": expected}


def test_markdown_and_png_agree_with_the_json(result_dirs: dict[str, Path], tmp_path: Path) -> None:
    from PIL import Image

    lb.update_leaderboard([result_dirs["sts"], result_dirs["mock"]], tmp_path / "board.json")
    board = json.loads((tmp_path / "board.json").read_text())
    tables = markdown_tables((tmp_path / "board.md").read_text())

    scores = tables["scores"]
    header, body = scores[0], scores[1:]
    assert header[-len(board["tasks"]) - 1:] == [*board["tasks"], "Avg"]
    assert [cells[:2] for cells in body] == [[r["backbone"], r["calibrator"]] for r in board["rows"]]  # no hashes
    for task in board["tasks"]:
        column = header.index(task)
        values = {r["model"]: r["scores"].get(task, {}).get("score") for r in board["rows"]}
        best = max(v for v in values.values() if v is not None)
        for cells, r in zip(body, board["rows"]):
            cell = cells[column]
            value = values[r["model"]]
            assert cell.startswith("**") == (value == best), (task, cell)
            assert cell.strip("*") == ("—" if value is None else f"{value:.2f}")
    avg_column = header.index("Avg")
    assert body[0][avg_column] == f"**{board['rows'][0]['average']:.2f}**"  # the only complete row
    assert body[1][avg_column] == f"{board['rows'][1]['average']:.2f} (1/2)"

    deltas = tables["Δ against the raw backbone"]
    ran_at = row(board, WHITEN)["experiment_kwargs"]["precision"]  # `auto` as it resolved here: an option of the run
    assert len(deltas) == 2 and deltas[1][:5] == ["minilm-l6", "whiten", "target", "keep", f"precision={ran_at}"]
    whiten = row(board, WHITEN)
    raw = row(board, RAW)
    expected = whiten["scores"][TASK]["score"] - raw["scores"][TASK]["score"]
    interval = whiten["intervals"]["all"]["raw"]  # the results of this test keep their per-pair cosines
    low, high = interval["ci95"][TASK]
    assert deltas[1][deltas[0].index(TASK)] == (f"{expected:+.2f} [{low:+.2f}, {high:+.2f}]"
                                                + ("*" if interval["significant"][TASK] else ""))
    assert deltas[1][deltas[0].index("MockSTSTask")] == "—"
    # the average is over the one task both rows have, and says which it leaves out
    assert deltas[1][deltas[0].index("Avg")].endswith(" (without MockSTSTask)")

    png = (tmp_path / "board.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    with Image.open(io.BytesIO(png)) as image:
        image.load()
        assert image.size[0] > 300 and image.size[1] > 200
        drawn = json.loads(image.text["Description"])
    assert drawn["labels"] == [*board["tasks"], "Avg"]
    series = f"minilm-l6 whiten (precision={ran_at}) (Avg without MockSTSTask)"
    assert drawn["series"] == {series: [whiten["delta"][TASK], None, whiten["delta"]["average"]]}


def test_external_model_uses_model_meta(result_dirs: dict[str, Path], tmp_path: Path) -> None:
    """A model outside flow-plugin: backbone from its name, calibrator "raw", pooling unknown."""
    source = result_file(result_dirs["sts"], RAW).parent
    target = tmp_path / "out" / "results" / "acme__encoder" / "rev1"
    shutil.copytree(source, target)
    meta = json.loads((target / "model_meta.json").read_text())
    meta.update(name="acme/encoder", revision="rev1", adapted_from=None, experiment_kwargs=None)
    (target / "model_meta.json").write_text(json.dumps(meta))
    board = lb.update_leaderboard([tmp_path / "out"], tmp_path / "board.json").board
    external = model_row(board, "acme/encoder")
    assert external.id == "acme/encoder@rev1"
    assert (external.backbone, external.calibrator, external.pooling) == ("acme/encoder", "raw", None)
    assert external.metadata_source == "model_meta"


def test_experiment_run_gets_its_own_row_with_its_hardware(result_dirs: dict[str, Path], tmp_path: Path) -> None:
    """A model run with loader kwargs: MTEB's experiments/<name>/ folder is its own row."""
    board = lb.update_leaderboard([result_dirs["sts"], result_dirs["experiment"]], tmp_path / "board.json").board
    raw = model_row(board, RAW)
    whiten, experiment = sorted((r for r in board.rows if r.model == WHITEN), key=lambda r: len(r.experiment_kwargs))
    path = result_file(result_dirs["experiment"], WHITEN)
    precision = whiten.experiment_kwargs["precision"]  # what the backbone ran at (`auto` resolved)
    assert whiten.experiment_kwargs == {"precision": precision}
    assert experiment.experiment_kwargs == {"fit_corpus": "per-call", "precision": precision}
    assert path.parent.name == f"calibrator_whiten__fit_corpus_per-call__precision_{precision}"  # MTEB's folder
    assert experiment.id == f"{WHITEN}@{whiten.revision} [{experiment.experiment}]" != whiten.id
    assert (experiment.calibrator, experiment.fit_corpus) == ("whiten", "per-call")
    assert experiment.baseline == whiten.baseline == raw.id  # the fit corpus is not part of the baseline
    entry = experiment.scores[TASK]
    data = json.loads(path.read_text())
    assert entry.score == round(data["scores"]["test"][0]["main_score"] * 100, 4)
    assert entry.hardware is not None and entry.hardware["device"] == "cpu"  # the run record names the same experiment


def _row_id(model_result: Any) -> str:
    """The row id of an MTEB ``ModelResult``: a calibrated run is MTEB's experiment ``calibrator_<name>[__...]`` of
    its backbone, which our rows spell as the calibrated model's name, the rest of the experiment after it."""
    from flow_plugin.catalog.registry import spell_model

    model, experiment = model_result.model_name, model_result.experiment_name
    if experiment and experiment.startswith("calibrator_"):
        calibrator, _, rest = experiment.removeprefix("calibrator_").partition("__")
        model, experiment = spell_model(model, calibrator), rest or None
    return lb.row_id(model, model_result.model_revision, experiment)


def test_scores_are_what_mteb_itself_reads(result_dirs: dict[str, Path], tmp_path: Path) -> None:
    """Every row and score is the model run and main score mteb's own ResultCache and
    TaskResult make of the same folders, and every result file of them was read."""
    from mteb.cache import ResultCache

    folders = [result_dirs["sts"], result_dirs["experiment"], result_dirs["mock"]]
    update = lb.update_leaderboard(folders, tmp_path / "board.json")
    rows = {r.id: r for r in update.board.rows}
    compared = 0
    for folder in folders:
        results = ResultCache(folder).load_results(include_remote=False, load_experiments="match_name")
        for model_result in results.model_results:
            found = rows[_row_id(model_result)]
            for task_result in model_result.task_results:
                entry = found.scores[task_result.task_name]
                assert entry.score == round(float(task_result.get_score(splits=["test"])) * 100, 4)
                assert entry.hf_subsets == [s["hf_subset"] for s in task_result.scores["test"]]
                assert entry.dataset_revision == task_result.dataset_revision
                assert entry.mteb_version == task_result.mteb_version
                assert entry.date == task_result.date.isoformat(timespec="seconds")
                compared += 1
    assert compared == update.report.files_read == sum(len(r.scores) for r in rows.values()) == 4


@pytest.mark.parametrize("json_path", sts_boards(REPO / "leaderboards"), ids=lambda p: p.stem)
def test_committed_leaderboards_are_reproduced(json_path: Path) -> None:
    """The published leaderboards, re-derived and re-rendered by this code, are byte for byte
    what is committed (JSON, Markdown and HTML page), and the chart draws the same bars at the same size."""
    from PIL import Image

    compared = lb.compare(lb.load_leaderboard(json_path))
    board = compared.board
    assert board.file_text() == json_path.read_text(encoding="utf-8")
    assert json.dumps(board.model_dump(mode="json"), indent=2, ensure_ascii=False) + "\n" == board.file_text()
    assert lb.render_markdown(compared) == json_path.with_suffix(".md").read_text(encoding="utf-8")
    assert lb.render_html(compared, json_path.stem) == json_path.with_suffix(".html").read_text(encoding="utf-8")
    with Image.open(json_path.with_suffix(".png")) as committed, Image.open(io.BytesIO(lb.render_png(compared))) as drawn:
        assert json.loads(drawn.text["Description"]) == json.loads(committed.text["Description"])
        # the tight bounding box follows matplotlib's text metrics: 3.8.4 (the lower bound) draws these charts
        # 3-8 px wider than 3.10 (0.2-0.5% of ~1550 px, same height), so the size agrees within 2%
        assert drawn.size == pytest.approx(committed.size, rel=0.02)


# ------------------------------------------------------------------ merging
def test_merging_keeps_every_row_and_identical_duplicates_are_quiet(result_dirs: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "board.json"
    first = lb.update_leaderboard([result_dirs["sts"]], out, models=[WHITEN])
    assert [r.model for r in first.board.rows] == [WHITEN] and first.board.rows[0].baseline is None
    second = lb.update_leaderboard([result_dirs["mock"]], out)  # another folder, another task, another model
    assert [r.model for r in second.board.rows] == [RAW, WHITEN]
    assert second.board.tasks == [TASK, "MockSTSTask"]
    assert model_row(second.board, WHITEN).baseline is None  # the raw row has no SentEvalSTS13 yet: no common task
    third = lb.update_leaderboard([result_dirs["sts"], result_dirs["sts"]], out)  # the same files twice
    # whiten was recorded: unchanged twice; raw/STS13 is new from the first copy, unchanged from the second
    assert len(third.report.unchanged) == 3 and third.report.replaced == []
    assert sorted(third.report.scores_added) == [f"{model_row(third.board, RAW).id} / {TASK}"]
    board = json.loads(out.read_text())
    assert [r["model"] for r in board["rows"]] == [RAW, WHITEN]
    assert set(row(board, RAW)["scores"]) == {TASK, "MockSTSTask"}
    assert row(board, WHITEN)["baseline"] == row(board, RAW)["id"]


def test_conflicting_duplicate_is_reported_and_replace_replaces(result_dirs: dict[str, Path], tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "lb" / "board.json"
    lb.update_leaderboard([result_dirs["sts"]], out)
    before = {path.name: path.read_bytes() for path in out.parent.iterdir()}

    changed = copy_results(result_dirs["sts"], tmp_path / "rerun")
    path = result_file(changed, WHITEN)
    data = json.loads(path.read_text())
    old_score = data["scores"]["test"][0]["main_score"]
    data["scores"]["test"][0]["main_score"] = old_score + 0.0123
    path.write_text(json.dumps(data))
    other_data = result_file(changed, RAW)
    raw_data = json.loads(other_data.read_text())
    raw_data["dataset_revision"] = "sha256:" + "0" * 64  # same score, other data
    other_data.write_text(json.dumps(raw_data))

    with pytest.raises(lb.LeaderboardConflictError) as caught:
        lb.update_leaderboard([changed], out)
    message = str(caught.value)
    assert len(caught.value.conflicts) == 2
    assert f"{WHITEN}@" in message and "score" in message and str(path) in message
    assert f"{RAW}@" in message and "dataset_revision" in message
    assert {p.name: p.read_bytes() for p in out.parent.iterdir()} == before  # nothing written

    assert cli_main(["leaderboard", str(changed), "-o", str(out)]) == 2
    assert "disagree" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in out.parent.iterdir()} == before

    assert cli_main(["leaderboard", str(changed), "-o", str(out), "--replace"]) == 0
    printed = capsys.readouterr().out
    assert printed.count("replaced: ") == 2 and WHITEN in printed
    board = json.loads(out.read_text())
    assert row(board, WHITEN)["scores"][TASK]["score"] == round((old_score + 0.0123) * 100, 4)
    assert row(board, RAW)["scores"][TASK]["dataset_revision"] == "sha256:" + "0" * 64


def test_a_result_without_its_run_record_is_set_aside_until_a_recorded_one_comes(
        result_dirs: dict[str, Path], tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A run killed between writing a result and its run record left a result that used to be merged with
    hardware null and no word; and once merged, the recomputed result with its record was "unchanged"."""
    from flow_plugin.results.runs import RUNS_FILE

    killed = copy_results(result_dirs["sts"], tmp_path / "killed")
    runs = killed / RUNS_FILE
    lines = runs.read_text(encoding="utf-8").splitlines(keepends=True)
    runs.write_text("".join(line for line in lines if json.loads(line)["model"] != WHITEN), encoding="utf-8")
    out = tmp_path / "lb" / "board.json"
    with caplog.at_level(logging.WARNING, logger="flow_plugin.leaderboard"):
        update = lb.update_leaderboard([killed], out)
    assert [r.model for r in update.board.rows] == [RAW]  # the unrecorded result is not on the board
    (line,) = update.report.unrecorded
    assert str(result_file(killed, WHITEN)) in line and "no run record" in line and "\n" not in line
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [line]
    assert all(entry.hardware for r in update.board.rows for entry in r.scores.values())

    # a board that took such a result in before (hardware null) gets the recorded one when it comes
    lb.update_leaderboard([result_dirs["sts"]], out)
    data = json.loads(out.read_text(encoding="utf-8"))
    row(data, WHITEN)["scores"][TASK]["hardware"] = None
    out.write_text(json.dumps(data, indent=2), encoding="utf-8")
    again = lb.update_leaderboard([result_dirs["sts"]], out)
    assert again.report.recorded == [f"{model_row(again.board, WHITEN).id} / {TASK}"]
    assert row(json.loads(out.read_text(encoding="utf-8")), WHITEN)["scores"][TASK]["hardware"]


def test_a_board_merged_in_two_steps_finds_the_per_pair_cosines_of_both(result_dirs: dict[str, Path],
                                                                       tmp_path: Path) -> None:
    """The raw backbone merged from one folder, the calibrated row later from another: the second merge
    used to look for the raw row's per-pair cosines in its own folder only, so the calibrated row got no
    interval and the board a false "computed by an older procedure ... were not kept" banner."""
    raw_only = copy_results(result_dirs["sts"], tmp_path / "raw-run")
    shutil.rmtree(result_file(raw_only, WHITEN).parent)  # the calibrated run's experiment folder
    whiten_only = copy_results(result_dirs["sts"], tmp_path / "whiten-run")
    result_file(whiten_only, RAW).unlink()  # the raw result, beside the calibrated run's experiment folder
    at_once = lb.update_leaderboard([result_dirs["sts"]], tmp_path / "once" / "board.json").board

    out = tmp_path / "lb" / "board.json"
    lb.update_leaderboard([raw_only], out)
    second = lb.update_leaderboard([whiten_only], out)
    assert second.report.intervals == 1
    assert model_row(second.board, WHITEN).intervals == model_row(at_once, WHITEN).intervals
    assert "older procedure" not in out.with_suffix(".md").read_text(encoding="utf-8")
    # the folders are listed next to the board, which publishes no path
    assert str(raw_only) in lb_write.sources_path(out).read_text(encoding="utf-8")
    assert str(tmp_path) not in out.read_text(encoding="utf-8")


def test_difference_within_tolerance_is_identical(result_dirs: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "board.json"
    lb.update_leaderboard([result_dirs["sts"]], out)
    # the board's files (not the list of folders merged into it, which gains the new one)
    before = {path.name: path.read_bytes() for path in tmp_path.iterdir() if path != lb_write.sources_path(out)}
    changed = copy_results(result_dirs["sts"], tmp_path / "rerun")
    path = result_file(changed, WHITEN)
    data = json.loads(path.read_text())
    data["scores"]["test"][0]["main_score"] += 1e-6  # one unit of MTEB's last stored decimal
    path.write_text(json.dumps(data))
    update = lb.update_leaderboard([changed], out)
    assert len(update.report.unchanged) == 2 and not update.report.replaced
    assert {name: (tmp_path / name).read_bytes() for name in before} == before  # byte for byte, "updated" too


# ------------------------------------------------------------------ bad input
def _main_score(value: object):
    def change(data: dict) -> None:
        data["scores"]["test"][0]["main_score"] = value
    return change


def _task_name(value: str):
    def change(data: dict) -> None:
        data["task_name"] = value
    return change


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ('{"task_name": "SentEvalSTS13", "scores": {"test": [{"main_', "not valid JSON"),
        ("", "empty"),
        ('{"task_name": "SentEvalSTS13", "dataset_revision": "x"}', "missing required key 'scores'"),
        # one field of the real result file changed (the rest is what mteb requires of a result)
        (_main_score("high"), "main_score must be a finite number"),
        (_task_name("SentEvalSTS12"), "file is named"),
        (_main_score(1.5), r"main_score 1.5 is outside \[-1, 1\]"),
        # mteb's TaskResult requires what every MTEB result has
        ('{"task_name": "SentEvalSTS13", "dataset_revision": "x", "scores": {"test": [{"main_score": 0.5}]}}',
         "missing required key 'mteb_version'.*hf_subset should be in scores"),
    ],
)
def test_malformed_result_file_error_names_it(result_dirs: dict[str, Path], tmp_path: Path, content: object,
                                              problem: str, capsys: pytest.CaptureFixture[str]) -> None:
    broken = copy_results(result_dirs["sts"], tmp_path / "broken")
    path = result_file(broken, WHITEN)
    if callable(content):
        data = json.loads(path.read_text())
        content(data)
        path.write_text(json.dumps(data))
    else:
        path.write_text(content)
    with pytest.raises(DataFolderError, match=problem) as caught:
        lb.update_leaderboard([broken], tmp_path / "board.json")
    assert str(path) in str(caught.value)
    assert not (tmp_path / "board.json").exists()
    assert cli_main(["leaderboard", str(broken), "-o", str(tmp_path / "board.json")]) == 2
    assert str(path) in capsys.readouterr().err


def test_missing_or_empty_folder_and_bad_leaderboard(tmp_path: Path, result_dirs: dict[str, Path]) -> None:
    with pytest.raises(DataFolderError, match="does not exist"):
        lb.update_leaderboard([tmp_path / "nowhere"], tmp_path / "board.json")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataFolderError, match="no MTEB result files"):
        lb.update_leaderboard([tmp_path / "empty"], tmp_path / "board.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "something-else"}')
    with pytest.raises(lb.LeaderboardError, match=f"{bad}.*not a flow-plugin-leaderboard file"):
        lb.update_leaderboard([result_dirs["sts"]], bad)
    with pytest.raises(lb.LeaderboardError, match="must end in .json"):
        lb.update_leaderboard([result_dirs["sts"]], tmp_path / "board.txt")


def test_a_results_folder_under_another_name_is_a_clear_error(result_dirs: dict[str, Path], tmp_path: Path) -> None:
    renamed = tmp_path / "my-results"
    shutil.copytree(result_dirs["sts"] / "results", renamed)
    with pytest.raises(DataFolderError, match=f"{renamed}: holds MTEB results but is not named 'results'"):
        lb.update_leaderboard([renamed], tmp_path / "board.json")
    assert not (tmp_path / "board.json").exists()


# ------------------------------------------------------------------ matplotlib is optional
def test_without_matplotlib_the_chart_is_skipped_with_one_warning(
    result_dirs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, without_matplotlib: None,
    caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "board.json"
    with caplog.at_level(logging.WARNING):
        update = lb.update_leaderboard([result_dirs["sts"]], out)
    warnings = [r.getMessage() for r in caplog.records if r.name.startswith("flow_plugin") and r.levelno >= logging.WARNING]
    assert len(warnings) == 1, warnings
    assert str(tmp_path / "board.png") in warnings[0] and "pip install 'flow-plugin[plots]'" in warnings[0]
    assert update.paths == (out, tmp_path / "board.md", None, tmp_path / "board.html")
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != LOCK_FILE) == [".board.json.sources", "board.html",
                                                                                "board.json", "board.md", "index.html"]
    from flow_plugin.cli.leaderboard import print_update

    print_update(update)
    assert "no chart" in capsys.readouterr().out
    written = {name: (tmp_path / name).read_bytes() for name in ("board.json", "board.md", "board.html")}
    assert [r["model"] for r in json.loads(written["board.json"])["rows"]] == [RAW, WHITEN]
    # the pages say there is no chart, and link none
    for name in ("board.md", "board.html"):
        assert "No chart: matplotlib is missing" in written[name].decode() and "board.png" not in written[name].decode()

    monkeypatch.undo()  # matplotlib is back: the same update changes nothing in the board and draws the chart
    again = lb.update_leaderboard([result_dirs["sts"]], out)
    assert len(again.report.unchanged) == 2
    assert (tmp_path / "board.json").read_bytes() == written["board.json"]
    assert (tmp_path / "board.png").read_bytes().startswith(b"\x89PNG")
    for name in ("board.md", "board.html"):  # which the pages now show first
        text = (tmp_path / name).read_text(encoding="utf-8")
        assert "No chart" not in text and text.index("board.png") < text.index("Who wins" if name == "board.html"
                                                                                else "| Calibrator")


# ------------------------------------------------------------------ atomic writes
@pytest.mark.parametrize("failure", ["fsync", "replace", "render"])
def test_interrupted_write_keeps_the_old_files(result_dirs: dict[str, Path], tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch, failure: str) -> None:
    out = tmp_path / "lb" / "board.json"
    lb.update_leaderboard([result_dirs["sts"]], out, models=[RAW])
    before = {path.name: path.read_bytes() for path in out.parent.iterdir()}
    assert sorted(before) == [".board.json.sources", LOCK_FILE, "board.html", "board.json", "board.md", "board.png",
                              "index.html"]

    def boom(*args: object, **kwargs: object) -> None:
        raise OSError(f"simulated failure in {failure}")

    if failure == "fsync":  # the temporary file is half written when the write fails
        monkeypatch.setattr(os, "fsync", boom)
    elif failure == "replace":
        monkeypatch.setattr(os, "replace", boom)
    else:  # the serialiser fails midway (after the JSON and Markdown were rendered)
        monkeypatch.setattr(lb_write, "render_png", boom)
    with pytest.raises(OSError, match="simulated failure"):
        lb.update_leaderboard([result_dirs["sts"]], out)  # would add the whiten row
    monkeypatch.undo()
    assert {path.name: path.read_bytes() for path in out.parent.iterdir()} == before  # no temp file left
    assert [r.model for r in lb.load_leaderboard(out).rows] == [RAW]


# ------------------------------------------------------------------ command line
def test_cli_writes_four_files_and_the_index_and_prints_the_schema(result_dirs: dict[str, Path], tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "leaderboards" / "minilm-l6.json"
    assert cli_main(["leaderboard", str(result_dirs["sts"] / "results"), "-o", str(out), "-m", RAW, "-m", WHITEN]) == 0
    assert "2 new rows" in capsys.readouterr().out
    assert sorted(p.name for p in out.parent.iterdir() if p.name != LOCK_FILE) == [
        ".minilm-l6.json.sources", "index.html", "minilm-l6.html", "minilm-l6.json", "minilm-l6.md", "minilm-l6.png"]
    assert json.loads(out.read_text())["name"] == "minilm-l6"
    assert cli_main(["leaderboard", "--schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema["title"] == "Leaderboard" and schema["properties"]["format"]["const"] == "flow-plugin-leaderboard"
    assert cli_main(["leaderboard", str(result_dirs["sts"])]) == 2
    assert "-o NAME.json" in capsys.readouterr().err


def test_modules_import_nothing_heavy() -> None:
    code = (
        "import sys, flow_plugin.leaderboard, flow_plugin.cli.bench\n"
        "heavy = [m for m in ('torch', 'mteb', 'transformers', 'matplotlib', 'numpy') if m in sys.modules]\n"
        "print(heavy)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_the_schema_is_generated_from_the_typed_models_and_the_docs_show_it() -> None:
    import subprocess
    import sys

    from flow_plugin.leaderboard.models import schema_text

    # the docs page holds no copy: the site's build hook puts the command's output in place of the marker
    page = (Path(__file__).resolve().parents[1] / "docs" / "bench.md").read_text(encoding="utf-8")
    assert page.count("<!-- schema: flow-plugin leaderboard --schema -->") == 1
    printed = subprocess.run([sys.executable, "-c", "import sys; from flow_plugin.cli.main import main; sys.exit(main(['leaderboard', '--schema']))"], capture_output=True,
                             text=True, check=True).stdout
    assert printed.rstrip("\n") == schema_text().rstrip("\n") and '"intervals"' in printed


def test_published_boards_fit_the_typed_models_and_a_bad_board_is_refused(tmp_path: Path) -> None:
    from flow_plugin.leaderboard.models import Leaderboard, check_board

    published = sts_boards(Path(__file__).resolve().parents[1] / "leaderboards")
    assert published
    for path in published:
        board = check_board(json.loads(path.read_text(encoding="utf-8")), str(path))
        assert isinstance(board, Leaderboard) and board.rows
    broken = json.loads(published[0].read_text(encoding="utf-8"))
    del broken["rows"][0]["scores"]
    broken["rows"][0]["colour"] = "red"
    with pytest.raises(lb.LeaderboardError, match=r"missing required key 'rows\[0\]\.scores'.*unknown key 'rows\[0\]\.colour'"):
        check_board(broken, str(tmp_path / "broken.json"))
    # a board changed in memory into something the format does not allow is not written
    compared = lb.compare(lb.load_leaderboard(published[0]))
    board = compared.board
    board.rows[0].metadata_source = "elsewhere"  # type: ignore[assignment]
    board.rows[0].scores[board.tasks[0]].wmean = float("nan")
    with pytest.raises(lb.LeaderboardError, match=rf"{tmp_path / 'broken.json'} does not fit the leaderboard format: "
                       rf"key 'rows\[0\]\.metadata_source' must be one of .*; key 'rows\[0\]\.scores\.{board.tasks[0]}\.wmean'"):
        lb_write.write_leaderboard(compared, tmp_path / "broken.json")
    assert list(tmp_path.iterdir()) == []


def test_a_loaded_board_is_the_typed_model() -> None:
    published = sts_boards(Path(__file__).resolve().parents[1] / "leaderboards")
    for path in published:
        board = lb.load_leaderboard(path)
        assert isinstance(board, lb.Leaderboard) and board.rows and board.seed_groups
        assert all(isinstance(row, lb.Row) for row in board.rows)
        assert all(isinstance(entry, lb.TaskScore) for row in board.rows for entry in row.scores.values())
        assert all(isinstance(group, lb.SeedGroup) for group in board.seed_groups)
        compared = [c for unit in [*board.rows, *board.seed_groups] for by_name in (unit.intervals or {}).values()
                    for c in by_name.values()]
        assert compared and all(isinstance(c, lb.Comparison) and isinstance(c.ci95["average"], tuple) for c in compared)
        assert board.model_dump(mode="json") == json.loads(path.read_text(encoding="utf-8"))


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda data: data["rows"][0].pop("scores"), r"missing required key 'rows\[0\]\.scores'"),
        (lambda data: data["rows"][0]["scores"]["SentEvalSTS12"].update(score="82.5"),
         r"key 'rows\[0\]\.scores\.SentEvalSTS12\.score' must be a number, got str '82\.5'"),
        (lambda data: data["rows"][0]["scores"]["SentEvalSTS12"].update(score=True),
         r"key 'rows\[0\]\.scores\.SentEvalSTS12\.score' must be a number, got bool True"),
        (lambda data: data["rows"][1].update(id=data["rows"][0]["id"]), r"row id '.*' appears twice"),
        (lambda data: data.update(format_version=2), r"format_version 2 is not 1"),
        (lambda data: data.update(rows={}), r"key 'rows' must be a list, got dict \{\}"),
    ],
    ids=["row-without-scores", "score-a-string", "score-a-bool", "duplicate-id", "version", "rows-not-a-list"],
)
def test_a_broken_board_file_is_one_line_naming_the_file_and_the_key(tmp_path: Path, change: Any, problem: str,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    data = json.loads((REPO / "leaderboards" / "minilm-l6.json").read_text(encoding="utf-8"))
    change(data)
    path = tmp_path / "board.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(lb.LeaderboardError, match=problem) as caught:
        lb.load_leaderboard(path)
    message = str(caught.value)
    assert message.startswith(f"{path}") and "\n" not in message
    assert cli_main(["leaderboard", "--render-only", str(path)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and len(err.strip().splitlines()) == 1


def _row(calibrator: str, kwargs: dict[str, Any]) -> Any:
    from flow_plugin.leaderboard.models import Row

    return Row(id=f"flow_plugin/m-{calibrator}@r", model=f"flow_plugin/m-{calibrator}", revision="r",
               experiment=None, experiment_kwargs=kwargs, backbone="m", backbone_model="acme/m",
               calibrator=calibrator, calibrator_params={}, pooling="last-avg", max_seq_length=128,
               fit_corpus="target", metadata_source="registry", scores={}, n_tasks=0, average=None,
               average_wmean=None, complete=False, baseline=None, delta=None)


@pytest.mark.parametrize("setting", [{"fit_sides": "per-side"}, {"fit_duplicates": "unique"},
                                     {"fit_corpus": "eval-splits"}, {"max_fit_sentences": 500, "fit_seed": 7}])
def test_a_row_that_differs_only_in_its_fit_settings_is_compared_with_the_raw_backbone(setting: dict) -> None:
    from flow_plugin.leaderboard.compare import baseline_key

    raw = baseline_key(_row("raw", {}))
    assert baseline_key(_row("flow", setting)) == raw
    # a loader argument that changes the embeddings themselves is another backbone
    assert baseline_key(_row("flow", {**setting, "layers": 2})) != raw
