"""The BLAS thread count of scikit-learn's evaluators: measured once per process, or set by the environment."""

from __future__ import annotations

import pytest
from threadpoolctl import threadpool_info

from flow_plugin.errors import InputError
from flow_plugin.evaluation import blas_threads as module


@pytest.fixture(autouse=True)
def fresh_decision():
    module.blas_threads.cache_clear()
    yield
    module.blas_threads.cache_clear()


def _blas_threads_now() -> set[int]:
    return {pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"}


def test_the_environment_sets_it_for_the_block_only(monkeypatch: pytest.MonkeyPatch) -> None:
    import numpy  # noqa: F401 -- loads the BLAS library threadpoolctl reports

    before = _blas_threads_now()
    monkeypatch.setenv(module.BLAS_THREADS_ENV, "1")
    with module.evaluator_threads() as chosen:
        assert chosen == 1 and _blas_threads_now() == {1}
    assert _blas_threads_now() == before
    module.blas_threads.cache_clear()
    monkeypatch.setenv(module.BLAS_THREADS_ENV, "default")
    with module.evaluator_threads() as chosen:
        assert chosen is None and _blas_threads_now() == before


def test_a_bad_value_is_a_one_line_error_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(module.BLAS_THREADS_ENV, "two")
    with pytest.raises(InputError, match=module.BLAS_THREADS_ENV):
        module.blas_threads()


def test_the_probe_keeps_the_faster_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    """With a probe whose time depends on the thread limit in force, the faster setting is chosen either way."""
    monkeypatch.delenv(module.BLAS_THREADS_ENV, raising=False)
    if _blas_threads_now() == {1}:
        pytest.skip("BLAS runs on one thread here by default: the two settings are the same")
    for one_thread_is_faster in (True, False):
        def probe() -> float:
            single = _blas_threads_now() == {1}
            return 1.0 if single == one_thread_is_faster else 2.0

        monkeypatch.setattr(module, "_probe_fit", probe)
        module.blas_threads.cache_clear()
        assert module.blas_threads() == (1 if one_thread_is_faster else None)


def test_flow_plugin_eval_measures_it_once_before_mteb_evaluates(tiny_backbone: str, senteval_dir, tmp_path,
                                                                 monkeypatch: pytest.MonkeyPatch,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    """``evaluate_models`` (``flow-plugin eval``, the studies, sweeps, bench) runs MTEB's evaluators under the
    probe's choice: the probe runs once in the process however many models and evaluator seeds follow."""
    from flow_plugin.encoding.options import AUTO_PRECISION_ENV
    from flow_plugin.integrations.mteb.evaluate import evaluate_models

    monkeypatch.delenv(module.BLAS_THREADS_ENV, raising=False)
    monkeypatch.setenv(AUTO_PRECISION_ENV, "float32")
    with caplog.at_level("INFO", logger=module.__name__):
        evaluate_models([f"flow_plugin/{tiny_backbone}", f"flow_plugin/{tiny_backbone}-whiten"], senteval_dir,
                        ["SentEvalSTS13"], tmp_path / "out", evaluator_seeds=[42, 43])
    probes = [record for record in caplog.records if "BLAS threads for the evaluators" in record.getMessage()]
    assert len(probes) == 1
