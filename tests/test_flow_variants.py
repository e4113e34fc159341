"""The flow variants (``flow-lu``, ``flow-affine``, ``flow-glow``, ``flow-white``, ``flow-es``,
``flow-ens``) keep the properties of the paper's flow: invertible, a likelihood above an
untrained flow's, saved and loaded exactly, deterministic for a seed."""

from __future__ import annotations

import numpy as np
import pytest

from flow_plugin.calibration import FLOW_VARIANTS, Calibrator, make_calibrator, member_seeds
from flow_plugin.errors import NotFittedError

DIM = 16
QUICK = {"n_levels": 2, "show_progress_bar": False}


def anisotropic(n: int, seed: int) -> np.ndarray:
    """A narrow, curved cloud: "banana" pairs (x2 += x1^2) under a fast-decaying linear mixing and
    an offset. Not Gaussian, so no linear map (whitening first, say) leaves a flow nothing to learn."""
    rng = np.random.default_rng(seed)
    latent = rng.normal(size=(n, DIM))
    latent[:, 1::2] += 0.8 * (latent[:, ::2] ** 2 - 1)
    # the smallest scale 0.3 against an offset of 6: whitened, the rows keep their cosine order under bf16-size
    # rounding (cosine stability 0.996; 0.93 with 0.05, which fit refuses as rounding noise)
    mixing = np.random.default_rng(123).normal(size=(DIM, DIM)) * np.geomspace(4.0, 0.3, DIM)[:, None]
    return (latent @ mixing + np.random.default_rng(7).normal(size=DIM) * 6.0).astype(np.float32)


@pytest.fixture(scope="module")
def train() -> np.ndarray:
    return anisotropic(3000, seed=0)


@pytest.fixture(scope="module")
def heldout() -> np.ndarray:
    return anisotropic(500, seed=1)


@pytest.fixture(scope="module")
def fitted(train: np.ndarray) -> dict[str, Calibrator]:
    return {name: make_calibrator(name, **QUICK).fit(train) for name in FLOW_VARIANTS}


@pytest.mark.parametrize("name", list(FLOW_VARIANTS))
def test_a_variant_learns_more_than_an_untrained_flow(name: str, fitted: dict, train: np.ndarray,
                                                      heldout: np.ndarray) -> None:
    untrained = make_calibrator(name, **QUICK, learning_rate=1e-30).fit(train)
    # held-out gain over the untrained flow, measured for seeds 1234, 1, 2 (nats): lu 10.6-10.7, affine
    # 10.1-10.4, glow 12.7-13.1, es 18.3-19.9, ens 8.6; white only 0.26-0.36 (whitening has already done
    # the linear part, and one epoch on unit-scale inputs moves the couplings little): limit 0.1
    assert fitted[name].score(heldout) > untrained.score(heldout) + 0.1
    assert fitted[name].fit_log_likelihood_ > fitted[name].initial_log_likelihood_


@pytest.mark.parametrize("name", [name for name in FLOW_VARIANTS if name != "flow-ens"])
def test_a_variant_is_invertible(name: str, fitted: dict, heldout: np.ndarray) -> None:
    calibrator = fitted[name]
    restored = calibrator.inverse_transform(calibrator.transform(heldout))
    # whitening first maps no direction to 0 here (full rank), so the round trip is exact too
    assert np.abs(restored - heldout).max() / np.abs(heldout).max() < 1e-4


@pytest.mark.parametrize("name", list(FLOW_VARIANTS))
def test_a_variant_saves_and_loads_exactly(name: str, fitted: dict, heldout: np.ndarray, tmp_path) -> None:
    path = tmp_path / f"{name}.npz"
    fitted[name].save(path)
    loaded = Calibrator.load(path, n_features=DIM)
    assert loaded.get_params() == fitted[name].get_params()
    np.testing.assert_array_equal(loaded.transform(heldout), fitted[name].transform(heldout))
    np.testing.assert_array_equal(loaded.score_samples(heldout), fitted[name].score_samples(heldout))


@pytest.mark.parametrize("name", list(FLOW_VARIANTS))
def test_a_variant_is_deterministic_for_a_seed(name: str, fitted: dict, train: np.ndarray,
                                               heldout: np.ndarray) -> None:
    again = make_calibrator(name, **QUICK).fit(train).transform(heldout)
    other = make_calibrator(name, **QUICK, seed=7).fit(train).transform(heldout)
    np.testing.assert_array_equal(again, fitted[name].transform(heldout))
    assert not np.allclose(other, again)


def test_an_ensemble_is_the_mean_of_its_flows_cosines(fitted: dict, train: np.ndarray, heldout: np.ndarray) -> None:
    ensemble = fitted["flow-ens"]
    assert ensemble.n_features_out_ == 5 * DIM and len(ensemble.flows_) == 5
    joint = ensemble.transform(heldout)
    members = [make_calibrator("flow", **QUICK, seed=seed).fit(train).transform(heldout)
               for seed in member_seeds(ensemble.seed, 5)]

    def cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)

    pairs = np.arange(len(heldout) // 2), np.arange(len(heldout) // 2, len(heldout))
    expected = np.mean([cosine(z[pairs[0]], z[pairs[1]]) for z in members], axis=0)
    np.testing.assert_allclose(cosine(joint[pairs[0]], joint[pairs[1]]), expected, rtol=0, atol=1e-5)
    with pytest.raises(NotImplementedError, match="not invertible"):
        ensemble.inverse_transform(joint)


def test_early_stopping_keeps_the_best_held_out_likelihood(fitted: dict) -> None:
    stopped = fitted["flow-es"]
    curve = stopped.validation_curve_
    assert curve is not None and curve.shape[1] == 2 and len(curve) >= 3
    best = int(np.argmax(curve[:, 1]))
    assert stopped.best_step_ == int(curve[best, 0])
    # it stopped after `patience` checks without a rise, or ran its 10 epochs
    ran_out = stopped.n_steps_ >= int(np.ceil(10 * 0.9 * 3000 / 64))
    assert ran_out or len(curve) - 1 - best == stopped.patience


def test_whitening_first_sees_whitened_inputs(fitted: dict, train: np.ndarray) -> None:
    white = fitted["flow-white"]
    Z = white.whitening_.transform(train)
    np.testing.assert_allclose(np.cov(Z, rowvar=False), np.eye(DIM), atol=1e-3)
    with pytest.raises(NotFittedError):
        make_calibrator("flow-white").transform(train)


def test_whitening_first_models_only_the_directions_the_rows_span(train: np.ndarray) -> None:
    """all-MiniLM-L6-v2's embeddings span 381 of 384 directions, and n rows span at most n - 1: a null
    direction holds only rounding error, which ActNorm's data-dependent scale would blow up to unit
    variance. The whitening drops it; the flow models the rest and the dropped latent coordinate is 0."""
    rank_deficient = train.copy()
    rank_deficient[:, -1] = rank_deficient[:, 0] - 2.0 * rank_deficient[:, 1]  # exactly dependent
    white = make_calibrator("flow-white", **QUICK).fit(rank_deficient)
    assert white.n_flow_features_ == DIM - 1 and white.whitening_.n_degenerate_ == 1
    Z = white.transform(rank_deficient)
    assert Z.shape == (len(train), DIM) and np.isfinite(white.fit_log_likelihood_) and np.isfinite(Z).all()
    np.testing.assert_array_equal(Z[:, -1], 0.0)
    # invertible on the rows' span (the input space up to the null direction, where the rows have no variance)
    np.testing.assert_allclose(white.inverse_transform(Z), rank_deficient, rtol=0, atol=1e-3 * np.abs(train).max())
    assert make_calibrator("flow-white", **QUICK).fit(train).n_flow_features_ == DIM  # full rank: every direction
    few = train[:DIM]  # as many rows as dimensions: they span DIM - 1 directions, and the fit whitens half of them
    assert make_calibrator("flow-white", **{**QUICK, "n_levels": 2}).fit(few).n_flow_features_ == (DIM - 1) // 2


def test_ensembles_of_different_seeds_share_no_member(train: np.ndarray) -> None:
    """Seeds 1234..1238 of flow-ens are independent runs only if no member flow is shared (they were
    seed, seed + 1, ...: seeds 1234 and 1235 shared four of five); the fit record names them."""
    import torch

    from flow_plugin.catalog.fitting import fit_calibrator

    members = {seed: set(member_seeds(seed, 5)) for seed in range(1234, 1239)}
    assert all(members[a].isdisjoint(members[b]) for a in members for b in members if a < b)

    class Rows:  # an encoder that hands back fixed rows
        def encode(self, sentences: list[str]) -> np.ndarray:
            return train[[int(s) for s in sentences]]

    sentences = [str(i) for i in range(600)]
    first, record = fit_calibrator(Rows(), make_calibrator("flow-ens", seed=1234, **QUICK), sentences, model="m",
                                   source="rows")
    second, _ = fit_calibrator(Rows(), make_calibrator("flow-ens", seed=1235, **QUICK), sentences, model="m",
                               source="rows")
    assert record.member_seeds == first.member_seeds_ == [6170, 6171, 6172, 6173, 6174]
    assert record.as_dict()["member_seeds"] == [6170, 6171, 6172, 6173, 6174]
    # no member flow of seed 1234 is one of seed 1235: their latents of the same rows all differ
    latents = [flow.transform_to_noise(torch.from_numpy(train[:5])).detach().numpy()
               for flow in (*first.flows_, *second.flows_)]
    assert not any(np.allclose(latents[i], latents[5 + j]) for i in range(5) for j in range(5))
