"""The flow's trainer: the fused fast path against autograd through nflows, the fallback
and its warning, thread and parameter-storage hygiene."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch

from flow_plugin.calibration.flow import FlowCalibrator, _fast, train
from flow_plugin.calibration.flow._fast import FusedGlowLogProb


def _initialised_flow(features: int, n_levels: int, depth: int, permutation: str, seed: int = 0):
    torch.manual_seed(seed)
    calibrator = FlowCalibrator(n_levels=n_levels, depth=depth, permutation=permutation)
    flow = calibrator._build(features)
    data = torch.randn(300, features) * 2 + 1
    flow.train()
    with torch.no_grad():
        flow.log_prob(data)  # data-dependent ActNorm initialisation
        # move off the identity start so every gradient is non-trivial (small enough that the 9 steps
        # stay in a sane range: log-likelihoods of 30-150, not 1e8 where float32 rounding dominates)
        for parameter in flow.parameters():
            parameter.add_(0.02 * torch.randn_like(parameter))
    return flow, data


@pytest.mark.parametrize(
    ("features", "n_levels", "depth", "permutation"),
    [(64, 3, 3, "reverse"), (33, 2, 2, "random"), (10, 1, 3, "reverse"), (17, 3, 1, "random")],
)
def test_fused_log_prob_matches_nflows_value_and_gradient(features, n_levels, depth, permutation) -> None:
    flow, data = _initialised_flow(features, n_levels, depth, permutation)
    batch = data[:64]
    weights_of_rows = torch.randn(64)
    with _fast.flat_parameters(flow, _fast.fused_parameter_order(flow)) as flat:
        reference = flow.log_prob(batch)
        (reference * weights_of_rows).sum().backward()
        reference_gradient = flat.gradient.clone()
        flat.gradient.zero_()
        plan = FusedGlowLogProb.plan(flow, flat)
        assert plan is not None
        fused = FusedGlowLogProb.apply(batch, flat.weights, plan)
        (fused * weights_of_rows).sum().backward()
        gradient = flat.gradient.clone()
    assert torch.count_nonzero(reference_gradient) > 0.5 * reference_gradient.numel()
    # rounding only (addcmul vs multiply-add, flip vs gather): over these 4 shapes x seeds 0..4 the largest
    # difference was 0.21 of the allowed one for values, 0.04 for gradients
    torch.testing.assert_close(fused, reference, rtol=1e-6, atol=1e-5)
    torch.testing.assert_close(gradient, reference_gradient, rtol=1e-5, atol=1e-5 * float(reference_gradient.abs().max()))


def test_fused_plan_refuses_an_uninitialised_or_foreign_flow_or_layout() -> None:
    flow = FlowCalibrator()._build(16)  # ActNorms not initialised yet
    with _fast.flat_parameters(flow, _fast.fused_parameter_order(flow)) as flat:
        assert FusedGlowLogProb.plan(flow, flat) is None
    flow, _ = _initialised_flow(16, 2, 2, "reverse")
    with _fast.flat_parameters(flow) as flat:  # log-scales not leading the flat buffer
        assert FusedGlowLogProb.plan(flow, flat) is None
    with _fast.flat_parameters(flow, _fast.fused_parameter_order(flow)) as flat:
        assert FusedGlowLogProb.plan(flow, flat) is not None
    for other in (FlowCalibrator(coupling="affine"), FlowCalibrator(permutation="lu")):  # not the paper's flow
        foreign = other._build(16)
        assert _fast.fused_parameter_order(foreign) == [] and _fast.unsupported_reason(foreign)
        with _fast.flat_parameters(foreign) as flat:
            assert FusedGlowLogProb.plan(foreign, flat) is None


def test_fused_and_autograd_training_give_the_same_fit() -> None:
    rng = np.random.default_rng(0)
    X = (rng.normal(size=(1500, 24)) @ rng.normal(size=(24, 24)) + 3).astype(np.float32)
    fused = FlowCalibrator(epochs=2, show_progress_bar=False).fit(X)
    plain = FlowCalibrator(epochs=2, fast_path=False, show_progress_bar=False).fit(X)
    assert fused.fast_path_used_ and not plain.fast_path_used_
    # Same arithmetic in another order: rounding differences only. Measured over data seeds 0..5: loss
    # curves differ by at most 2e-6 relative (limit 1e-4: 50x margin); final log-likelihoods by at most
    # 5e-5 of the training gain (limit 2e-3 of the gain: 40x margin).
    np.testing.assert_allclose(fused.loss_curve_, plain.loss_curve_, rtol=1e-4, atol=1e-4)
    gain = plain.fit_log_likelihood_ - plain.initial_log_likelihood_
    assert gain > 1.0
    assert fused.fit_log_likelihood_ == pytest.approx(plain.fit_log_likelihood_, abs=2e-3 * gain)
    assert fused.fit_log_likelihood_ > fused.initial_log_likelihood_


def test_flow_fit_restores_threads_and_parameter_storage() -> None:
    threads = torch.get_num_threads()
    X = np.random.default_rng(1).normal(size=(500, 8)).astype(np.float32)
    calibrator = FlowCalibrator(show_progress_bar=False, n_levels=2).fit(X)
    assert torch.get_num_threads() == threads
    parameters = list(calibrator.flow_.parameters())
    assert all(parameter.grad is None for parameter in parameters)
    storages = {parameter.untyped_storage().data_ptr() for parameter in parameters}
    assert len(storages) == len(parameters)  # each parameter owns its storage again


def test_flow_thread_setting_must_be_an_integer(monkeypatch: pytest.MonkeyPatch) -> None:
    from flow_plugin.errors import InputError

    monkeypatch.setenv(train.FLOW_THREADS_ENV, "many")
    with pytest.raises(InputError, match="must be an integer"):
        FlowCalibrator(show_progress_bar=False, n_levels=1).fit(np.random.default_rng(0).normal(size=(50, 4)))


@pytest.mark.parametrize(("params", "reason"), [({"coupling": "affine"}, "additive couplings only"),
                                                ({"permutation": "lu"}, "fixed permutations only")])
def test_a_flow_the_fast_path_cannot_run_trains_through_autograd_with_a_warning(
    params: dict, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    X = np.random.default_rng(2).normal(size=(400, 8)).astype(np.float32) * 2 + 1
    with caplog.at_level(logging.WARNING, logger="flow_plugin.calibration.flow.train"):
        flow = FlowCalibrator(n_levels=2, show_progress_bar=False, **params).fit(X)
    assert not flow.fast_path_used_ and flow.fit_log_likelihood_ > flow.initial_log_likelihood_
    assert "fast path not used" in caplog.text and reason in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="flow_plugin.calibration.flow.train"):
        FlowCalibrator(n_levels=2, show_progress_bar=False, fast_path=False, **params).fit(X)
    assert "fast path" not in caplog.text  # asked for autograd: nothing to warn about


def test_training_uses_torch_adamw_with_the_official_constants() -> None:
    parameter = torch.nn.Parameter(torch.zeros(3))
    optimizer = train._adamw([parameter], train.TrainingSettings(1.0, 64, 1e-3, 0.01, 1.0, 1024, 0))
    group = optimizer.param_groups[0]
    assert isinstance(optimizer, torch.optim.AdamW)
    assert (group["lr"], group["betas"], group["eps"], group["weight_decay"]) == (1e-3, (0.9, 0.999), 1e-6, 0.01)


def test_actnorm_starts_from_the_cpus_values_and_leaves_a_constant_feature_unscaled() -> None:
    """all-MiniLM-L6-v2 has two features of values near 1e-32: their float32 squares underflow in a CUDA
    reduction (the CPU accumulates in float64), and on a GPU they come out exactly 0. The flow's ActNorms
    initialise on the CPU on every device (there, nflows' own values bit for bit) and give a constant
    feature scale 1 instead of an infinite one."""
    from nflows.transforms.normalization import ActNorm

    from flow_plugin.calibration.flow.glow import DataInitActNorm

    inputs = torch.randn(64, 5, generator=torch.Generator().manual_seed(0))
    inputs[:, 0] *= 1e-32
    ours, reference = DataInitActNorm(5), ActNorm(5)
    ours(inputs), reference(inputs)
    assert torch.isfinite(ours.log_scale).all() and torch.isfinite(ours.shift).all()
    assert torch.equal(ours.log_scale, reference.log_scale) and torch.equal(ours.shift, reference.shift)
    constant = inputs.clone()
    constant[:, 1] = 0.0
    ours = DataInitActNorm(5)
    ours(constant)
    assert ours.log_scale[1] == 0 and ours.shift[1] == 0 and torch.isfinite(ours.log_scale).all()


def test_the_flow_fits_embeddings_with_a_dimension_that_is_exactly_zero() -> None:
    """What a GPU gives for all-MiniLM-L6-v2 (two features exactly 0): the flow fits the other dimensions
    and the zero one stays zero, where the fit used to stop at a non-finite initial likelihood."""
    X = np.random.default_rng(0).normal(size=(400, 8)).astype(np.float32) @ np.diag(np.linspace(0.5, 2, 8))
    X[:, 3] = 0.0
    flow = FlowCalibrator(n_levels=1, depth=2, hidden_features=16, epochs=1, show_progress_bar=False).fit(X)
    Z = flow.transform(X)
    assert np.isfinite(Z).all() and np.isfinite(flow.fit_log_likelihood_)
    assert flow.fit_log_likelihood_ > flow.initial_log_likelihood_


# ----------------------------------------------------------------------------- where a flow fits
def test_a_flow_left_to_choose_fits_on_the_cpu_without_cuda_and_says_so() -> None:
    X = np.random.default_rng(0).normal(size=(256, 8)).astype(np.float32)
    for device in (None, "auto"):
        flow = FlowCalibrator(n_levels=2, epochs=0.5, device=device, show_progress_bar=False).fit(X)
        if not torch.cuda.is_available():
            assert flow.fit_device_choice_.describe() == "auto -> cpu (no CUDA device)"
        assert next(flow.flow_.parameters()).device.type == flow.fit_device_choice_.device
    assert FlowCalibrator(n_levels=2, epochs=0.5, device="cpu").fit(X).fit_device_choice_.source == "requested"


def test_the_fit_device_probe_times_both_devices_and_caches_its_choice(tmp_path) -> None:
    """The probe's schedule and cache, with the devices' fits recorded instead of run (a machine without a GPU
    cannot time one); its real fit, a copy of the flow on synthetic rows, runs on the CPU."""
    from flow_plugin.calibration.flow.device_probe import choose_fit_device, measure_fit_seconds

    fits: list[tuple[str, float]] = []
    seconds = measure_fit_seconds(lambda device, rows, epochs: fits.append((device, epochs)), repeats=2)
    assert fits[:2] == [("cpu", 0.25), ("cuda", 0.25)]  # untimed, then interleaved
    assert fits[2:] == [("cpu", 1.0), ("cuda", 1.0), ("cuda", 1.0), ("cpu", 1.0)]
    assert set(seconds) == {"cpu", "cuda"}
    calls: list[int] = []

    def measure() -> dict[str, float]:
        calls.append(1)
        return {"cpu": 1.2, "cuda": 2.0}  # the H100 machine's MiniLM flow on STS-B (docs/performance.md)

    key = {"width": 384}
    first = choose_fit_device(None, lambda: key, measure, cache_folder=tmp_path, has_cuda=lambda: True)
    second = choose_fit_device("auto", lambda: key, measure, cache_folder=tmp_path, has_cuda=lambda: True)
    assert (first.device, first.source, second.device, second.source, len(calls)) == ("cpu", "probe", "cpu", "cache", 1)
    faster = choose_fit_device(None, lambda: {"width": 1024}, lambda: {"cpu": 3.0, "cuda": 1.0},
                               cache_folder=tmp_path, has_cuda=lambda: True)
    assert faster.device == "cuda" and faster.describe().startswith("auto -> cuda (cuda 3.00x cpu, measured ")
    FlowCalibrator(n_levels=2, show_progress_bar=False)._probe_fit("cpu", 8, 128, 1.0)  # the real fit, on the CPU


def test_a_flow_from_the_registry_fits_on_the_cpu_beside_a_cpu_encoder_and_chooses_beside_a_gpu_one() -> None:
    from flow_plugin.catalog.builders import calibrator_on_device

    assert calibrator_on_device("flow", "cpu").device == "cpu"
    assert calibrator_on_device("flow", "cuda:0").device == calibrator_on_device("flow", None).device == "auto"
    assert calibrator_on_device("flow-glow", "cuda").device == "auto"  # the flow variants too
