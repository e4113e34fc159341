"""The MTEB internals flow-plugin touches (``integrations/mteb/compat.py``), the version check before
registering, misspelt ``flow_plugin/`` names, damaged results and fit records written once per task.

Every test here runs against the installed mteb: CI runs them with the newest release (README's set-up)
and with the lowest supported one (``.ci/lower-bounds.txt``), so each internal is checked at both ends.
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import mteb
import pytest
from mteb.cache import ResultCache
from mteb.mocks.mock_tasks import (
    MockMultilingualClusteringFastTask,
    MockMultilingualSTSTask,
    MockRetrievalTask,
    MockSTSTask,
)

from flow_plugin.errors import RegistryError, UnknownModelError, UnsupportedVersionError
from flow_plugin.results import fits as fit_records
from flow_plugin.results.files import result_path
from flow_plugin.integrations.mteb import compat, hook, registration, versions
from flow_plugin.integrations.mteb.base_models import load_calibrated, registry_model

REPO = Path(__file__).resolve().parents[1]


def installed(name: str) -> str:
    return importlib.metadata.version(name)


# ------------------------------------------------------------------ versions
def test_the_installed_mteb_and_transformers_are_in_the_declared_range() -> None:
    ranges = versions.supported_ranges()
    assert set(ranges) == {"mteb", "transformers"}, ranges  # read from the installed flow-plugin's metadata
    assert versions.unsupported_message() is None
    versions.require_supported()  # nothing raised


def test_the_declared_ranges_are_pyprojects() -> None:
    import tomllib

    declared = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    assert versions.supported_ranges(declared) == versions.supported_ranges(), (
        "the installed metadata is older than pyproject.toml: reinstall (pip install -e .)")


def test_outside_the_range_the_message_names_the_installed_release_and_the_remedy() -> None:
    requirements = ["mteb>=99.0,<100", f"transformers>={installed('transformers')}"]
    message = versions.unsupported_message(requirements)
    assert message is not None and "\n" not in message
    assert message.startswith(f"flow-plugin: mteb {installed('mteb')} is installed, but flow-plugin supports "
                              f"mteb>=99.0,<100 and transformers>={installed('transformers')}")
    assert message.endswith("(pip install 'mteb>=99.0,<100')")
    with pytest.raises(UnsupportedVersionError, match=r"^mteb \S+ is installed, but flow-plugin supports"):
        versions.require_supported(requirements)
    both = versions.unsupported_message(["mteb<2", "transformers<1"])
    assert both is not None and f"mteb {installed('mteb')} and transformers {installed('transformers')} are installed" in both


def test_outside_the_range_the_hook_registers_nothing_and_says_one_line(
        tiny_backbone: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The real mteb's registry modules; only the supported range is moved, through the argument."""
    models = sys.modules[compat.MODELS_MODULE]
    tasks = sys.modules[compat.TASKS_MODULE]
    saved = dict(models.MODEL_REGISTRY), dict(tasks._TASKS_REGISTRY)
    monkeypatch.setattr(hook, "_registered", set())
    monkeypatch.setattr(hook, "_said", set())
    # what earlier registrations in this process added (the hook at start-up, or a test that registered again)
    for name in [name for name in tasks._TASKS_REGISTRY if name.startswith("SentEval")]:
        del tasks._TASKS_REGISTRY[name]
    for name in [name for name in models.MODEL_REGISTRY if name.startswith("flow_plugin/")]:
        del models.MODEL_REGISTRY[name]
    try:
        _registers_nothing_outside_the_range(models, tasks, monkeypatch, capsys)
    finally:  # MTEB's registries as they were
        for registry, before in zip((models.MODEL_REGISTRY, tasks._TASKS_REGISTRY), saved):
            registry.clear()
            registry.update(before)


def _registers_nothing_outside_the_range(models: Any, tasks: Any, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    outside = ["mteb>=99.0,<100"]
    assert hook._run_callback(compat.MODELS_MODULE, models, requirements=outside) is False
    assert hook._run_callback(compat.TASKS_MODULE, tasks, requirements=outside) is False
    said = capsys.readouterr().err.splitlines()
    assert len(said) == 1 and said[0].startswith(f"flow-plugin: mteb {installed('mteb')} is installed"), said
    assert "flow_plugin/tiny-sn" not in models.MODEL_REGISTRY and "SentEvalSTS12" not in tasks._TASKS_REGISTRY
    assert mteb.get_model_meta("sentence-transformers/all-MiniLM-L6-v2").name  # MTEB itself goes on
    with pytest.raises(UnsupportedVersionError):
        hook.register(requirements=outside)
    assert "flow_plugin/tiny-sn" not in models.MODEL_REGISTRY
    # inside the range the same call registers
    monkeypatch.setattr(hook, "_registered", set())
    assert hook._run_callback(compat.MODELS_MODULE, models, requirements=["mteb>=2"]) is True
    assert mteb.get_model_meta("flow_plugin/tiny-sn").name == "flow_plugin/tiny"  # the backbone's: sn is its variant


def test_a_failing_registration_is_one_line_and_never_breaks_mteb(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(hook, "_registered", set())
    monkeypatch.setattr(hook, "_said", set())
    monkeypatch.setitem(hook._CALLBACKS, compat.MODELS_MODULE, lambda module, requirements=None: 1 / 0)
    assert hook._run_callback(compat.MODELS_MODULE, None) is False
    assert capsys.readouterr().err == (
        f"flow-plugin: could not register with {compat.MODELS_MODULE}: ZeroDivisionError: division by zero\n")


# ------------------------------------------------------------------ unknown flow_plugin/ names
@pytest.mark.parametrize("first", [f"flow_plugin.integrations.mteb.{name}" for name in (
    "compat", "sts_tasks", "retrieval_tasks", "labelled_tasks", "registration", "meta", "calibrated", "base_models")])
def test_our_tasks_and_models_are_registered_whichever_module_imports_mteb_first(first: str) -> None:
    code = (f"import {first}, mteb, sys; mteb.get_tasks(tasks=['SentEvalSTS12', 'GlueQNLIRetrieval', "
            "'FlowPluginMRClassification']); mteb.get_model_meta('flow_plugin/minilm-l6-flow'); print('registered')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.stdout.strip() == "registered", done.stderr[-2000:]
    assert "could not register" not in done.stderr


def test_a_misspelt_name_is_one_error_with_close_names_not_a_hub_lookup() -> None:
    assert os.environ["HF_HUB_OFFLINE"] == "1"  # (conftest) a Hub lookup would fail with OfflineModeIsEnabled
    with pytest.raises(UnknownModelError) as caught:
        mteb.get_model("flow_plugin/minilm-l6-flw")
    message = str(caught.value)
    assert message.startswith("unknown model 'flow_plugin/minilm-l6-flw'. Close names: flow_plugin/minilm-l6-flow")
    assert "\n" not in message
    assert isinstance(caught.value, KeyError) and isinstance(caught.value, RegistryError)  # as MTEB's own unknown names
    with pytest.raises(UnknownModelError):
        mteb.get_model_meta("flow_plugin/nope", fetch_from_hf=True)
    # names outside flow_plugin/ still go to the Hub (offline here: not our error)
    with pytest.raises(Exception) as other:
        mteb.get_model_meta("someone-else/no-such-model", fetch_from_hf=True)
    assert not isinstance(other.value, UnknownModelError)


def test_refuse_unknown_names_is_installed_once() -> None:
    from mteb.models.model_meta import ModelMeta

    before = ModelMeta.__dict__["from_hub"]
    compat.refuse_unknown_names("flow_plugin/", registration.resolve_spelling)
    assert ModelMeta.__dict__["from_hub"] is before  # not wrapped twice


def test_a_cut_short_result_of_ours_is_set_aside_and_recomputed_as_eval_does(tmp_path: Path,
                                                                              caplog: pytest.LogCaptureFixture) -> None:
    """(Before, ``mteb run`` ended in a JSONDecodeError traceback.) MTEB loads a result through the check before it
    evaluates a task; another model's damaged result stays MTEB's to report. The check is installed once."""
    hook.register()
    before = ResultCache.__dict__["load_task_result"]
    compat.check_results_before_loading("flow_plugin/", lambda path: None)
    assert ResultCache.__dict__["load_task_result"] is before  # not wrapped twice
    cache = ResultCache(tmp_path)
    meta = mteb.get_model_meta("flow_plugin/minilm-l6")
    path = cache.get_task_result_path("STS12", meta)
    path.parent.mkdir(parents=True)
    path.write_text('{"dataset_revision": "x", "task_na', encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        assert cache.load_task_result("STS12", meta) is None
    assert not path.exists() and [item.name.split("-")[0] for item in path.parent.iterdir()] == ["STS12.json.corrupt"]
    assert f"result file {path} is not valid JSON (cut short: a killed run or a full disk): renamed to" in caplog.text
    other = cache.get_task_result_path("STS12", "someone__model", "rev")
    other.parent.mkdir(parents=True)
    other.write_text('{"dataset_revision": "x", "task_na', encoding="utf-8")
    with pytest.raises(ValueError):
        cache.load_task_result("STS12", "someone__model", "rev")
    assert other.exists()


@pytest.mark.slow
def test_a_misspelt_name_through_the_mteb_command_names_close_names_and_never_reaches_the_hub(tmp_path: Path) -> None:
    """MTEB's command prints its traceback (flow-plugin leaves the interpreter's hooks alone); its last line is
    flow-plugin's error, with close names, and the Hub is never asked."""
    done = subprocess.run(["mteb", "run", "-m", "flow_plugin/minilm-l6-flw", "-t", "STS12", "--output-folder",
                           str(tmp_path / "out")], capture_output=True, text=True, timeout=600, cwd=tmp_path,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode != 0
    assert "OfflineModeIsEnabled" not in done.stderr, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert "unknown model 'flow_plugin/minilm-l6-flw'. Close names: flow_plugin/minilm-l6-flow" in last, last
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------ the running evaluation
def test_a_fit_under_mtebs_own_evaluate_reads_the_very_task_object_evaluated(tiny_backbone: str,
                                                                            senteval_dir: Path) -> None:
    """The task comes from what encode() is given (its name) and the tasks flow-plugin's own classes register: not
    a fresh object from MTEB's registry (which would read another data folder), and no stack walk."""
    from flow_plugin.integrations.mteb.sts_tasks import get_offline_task

    model = registry_model(f"flow_plugin/{tiny_backbone}-sn")
    task = get_offline_task("SentEvalSTS13", senteval_dir)
    mock = MockSTSTask()  # a task object of MTEB's own classes: registered as it was built
    mteb.evaluate(model, [task, mock], cache=None, co2_tracker=False, show_progress_bar=False)
    assert model.fits.task_of(task.metadata) is task and model.fits.task_of(mock.metadata) is mock


class CountingCache(ResultCache):
    """MTEB's result cache, counting its saves."""

    saves = 0

    def save_to_cache(self, *args: Any, **kwargs: Any) -> Any:
        self.saves += 1
        return super().save_to_cache(*args, **kwargs)


def test_after_each_save_writes_the_records_beside_the_result_on_mtebs_own_route(tiny_backbone: str,
                                                                                 tmp_path: Path) -> None:
    """(Fails without the wrapper of ``ResultCache.save_to_cache``: MTEB tells a model nothing of where its result
    goes.)"""
    before = ResultCache.__dict__["save_to_cache"]
    compat.after_each_save(lambda *args: None)
    assert ResultCache.__dict__["save_to_cache"] is before  # wrapped once (by the start-up hook)
    model = registry_model(f"flow_plugin/{tiny_backbone}-whiten")
    mteb.evaluate(model, MockSTSTask(), cache=ResultCache(tmp_path), co2_tracker=False, show_progress_bar=False)
    path = result_path(tmp_path, model.mteb_model_meta, "MockSTSTask")
    (records,) = fit_records.read_fits(fit_records.fits_path(path))["fits"]
    assert records["calibrator"] == "whiten" and records["task"] == "MockSTSTask"


def test_task_result_path_is_mtebs_and_creates_nothing(tiny_backbone: str, tmp_path: Path) -> None:
    meta = registry_model(f"flow_plugin/{tiny_backbone}-sn").mteb_model_meta
    path = result_path(tmp_path / "missing", meta, "SentEvalSTS13")
    assert not (tmp_path / "missing").exists()
    assert path == ResultCache(tmp_path / "missing").get_task_result_path("SentEvalSTS13", meta)


def test_pair_scored_sts_adds_metrics_per_split_and_subset(tiny_backbone: str) -> None:
    class Scored(compat.PairScoredSTS, MockMultilingualSTSTask):
        def pair_scores(self, gold: list[float], cosine: Any, *, hf_split: str | None,
                        hf_subset: str | None) -> dict[str, Any]:
            return {"n_gold": len(gold), "n_cosine": len(cosine), "where": f"{hf_split}/{hf_subset}"}

    model = registry_model(f"flow_plugin/{tiny_backbone}-sn")
    result = mteb.evaluate(model, Scored(), cache=None, co2_tracker=False, show_progress_bar=False).task_results[0]
    scores = {score["hf_subset"]: score for score in result.scores["test"]}
    assert {subset: (score["n_gold"], score["where"]) for subset, score in scores.items()} == {
        "eng": (2, "test/eng"), "fra": (2, "test/fra")}
    assert all(score["n_cosine"] == 2 and "cosine_spearman" in score for score in scores.values())  # MTEB's kept


def test_fresh_evaluator_state_is_the_state_mteb_gives_a_new_task_of_that_seed() -> None:
    """MTEB's clustering draws from ``rng_state``: after an evaluation has drawn from it, the reset gives the task the
    generators a task built now with its seed has (fails if MTEB renames them or seeds them otherwise)."""
    used = MockMultilingualClusteringFastTask(seed=7)
    used.rng_state.choices(range(100), k=50)  # what a clustering experiment draws
    used.np_rng.random(10)
    compat.fresh_evaluator_state(used)
    new = MockMultilingualClusteringFastTask(seed=7)
    assert used.rng_state.getstate() == new.rng_state.getstate()
    assert used.np_rng.random(5).tolist() == new.np_rng.random(5).tolist()


def test_scored_queries_are_those_mteb_encodes() -> None:
    from datasets import Dataset

    queries = Dataset.from_dict({"id": ["q1", "q2", "q3"], "text": ["one", "two", "three"]})
    # q2 has an empty judgement list and q3 none: MTEB's retrieval evaluation encodes q1 only
    kept = compat.scored_queries({"q1": {"d1": 1}, "q2": {}}, queries)
    assert kept["id"] == ["q1"] and kept["text"] == ["one"]


def test_registered_model_reads_mtebs_registry() -> None:
    entry = compat.registered_model("sentence-transformers/all-MiniLM-L6-v2")
    assert entry is not None and entry.name == "sentence-transformers/all-MiniLM-L6-v2"
    assert compat.registered_model("no-such/model") is None
    assert compat.registered_model("flow_plugin/minilm-l6").loader is load_calibrated


@pytest.mark.parametrize("first", ["flow_plugin.integrations.mteb.base_models", "flow_plugin.integrations.mteb.compat",
                                   "flow_plugin.integrations.mteb.evaluate"])
def test_importing_one_of_our_mteb_modules_before_mteb_still_registers_everything_quietly(first: str) -> None:
    """(``base_models`` before MTEB: MTEB's registry asked the half-loaded module for its loader, and no
    flow_plugin/ model was registered; ``compat`` before MTEB, as ``flow-plugin eval`` does: the hook printed
    "could not register" twice, as compat's names did not exist yet.)"""
    code = (f"import {first}, mteb; print(mteb.get_model_meta('flow_plugin/minilm-l6').name); "
            "print(len(mteb.get_tasks(tasks=['FlowPluginTRECClassification'])))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.split() == ["flow_plugin/minilm-l6", "1"], done.stderr[-2000:]
    assert "could not register" not in done.stderr, done.stderr[-2000:]


def test_task_objects_mteb_builds_while_it_imports_are_tracked() -> None:
    """MTEB builds its mock task grid while ``import mteb`` runs, after its task registry is whole: the task
    registration runs then, not once MTEB's package is whole, so those objects are tracked too (a calibrated model
    reads the text of the object being evaluated; an untracked one was a TaskCorpusError)."""
    code = ("import mteb; from mteb.mocks import MOCK_TASK_TEST_GRID; "
            "from flow_plugin.integrations.mteb.compat import live_task; "
            "print(sum(live_task(task.metadata.name) is None for task in MOCK_TASK_TEST_GRID), "
            "len(MOCK_TASK_TEST_GRID))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    untracked, built = done.stdout.split() if done.returncode == 0 else (None, None)
    assert untracked == "0" and int(built) > 10, done.stderr[-2000:]


# ------------------------------------------------------------------ fit records once per task
@pytest.mark.parametrize("task_class", [MockRetrievalTask, MockMultilingualSTSTask],
                         ids=["two-splits-four-calls", "two-subsets"])
def test_fit_records_are_written_once_per_task(task_class: type, tiny_backbone: str, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    writes: list[str] = []
    real_write = fit_records.write_fits

    def counting_write(*args: Any, **kwargs: Any) -> Path:
        writes.append(kwargs["task"])
        return real_write(*args, **kwargs)

    monkeypatch.setattr(fit_records, "write_fits", counting_write)
    model = registry_model(f"flow_plugin/{tiny_backbone}-whiten")
    task, cache = task_class(), CountingCache(tmp_path)
    mteb.evaluate(model, task, cache=cache, co2_tracker=False, show_progress_bar=False)
    name = task.metadata.name
    calls = sum(record["calls"] for record in model.fit_log)
    # written when MTEB saves the task's result (after each subset, then once more), never on an encode() call
    assert calls >= 2 and set(writes) == {name} and len(writes) <= cache.saves < calls + 2, (calls, writes)
    (path,) = (tmp_path / "results").rglob(f"flow-plugin-fits/{name}.fits.json")
    written = fit_records.read_fits(path)["fits"]
    assert sum(record["calls"] for record in written) == calls  # every call is in the one file
