"""BERT-flow's calibrator: a Glow-style normalizing flow fitted by maximum likelihood.

The flow is composed from small nflows transforms, as in the official code
(bohanli/BERT-flow, ``flow/glow_1x1.py`` and ``flow/glow_ops_1x1.py``, config
``config_l3_d3_w32``):

    level ℓ = depth × [ ActNorm  →  fixed permutation  →  additive coupling ]
    levels are chained multi-scale: after every level but the last, half of the
    features leave the flow and are scored directly under the N(0, I) prior.

The additive coupling keeps half of the features x₁ and shifts the other half,
x₂ ← x₂ + NN(x₁), so every step is volume-preserving and trivially invertible; the
log-determinant comes from ActNorm alone. Training maximises the likelihood of the
embeddings under a standard normal prior (paper section 3.2); the latent z is the
calibrated embedding.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np
import torch
from nflows.distributions.normal import StandardNormal
from nflows.flows.base import Flow
from nflows.transforms.base import CompositeTransform, MultiscaleCompositeTransform, Transform
from nflows.transforms.coupling import AdditiveCouplingTransform
from nflows.transforms.normalization import ActNorm
from nflows.transforms.permutations import RandomPermutation, ReversePermutation
from torch import nn
from tqdm.auto import tqdm

from .._validation import check_embeddings
from ..device import resolve_device
from ..errors import InputError
from .base import Calibrator

logger = logging.getLogger(__name__)

PERMUTATIONS = ("reverse", "random")
#: Rows per forward pass when transforming or scoring (no gradients, so memory is small).
_INFERENCE_CHUNK = 8192
#: Show a progress bar by default when training takes more steps than this.
_PROGRESS_BAR_MIN_STEPS = 200


class ShiftNetwork(nn.Module):
    """The coupling layer's shift network NN(x₁) (official ``conv_stack`` on 1×1 "images"):
    Linear → ActNorm → ReLU → Linear → ActNorm → ReLU → Linear, the last layer zero-initialised
    so that every coupling starts as the identity."""

    def __init__(self, in_features: int, out_features: int, hidden_features: int) -> None:
        super().__init__()
        self.hidden1 = nn.Linear(in_features, hidden_features, bias=False)
        self.norm1 = ActNorm(hidden_features)
        self.hidden2 = nn.Linear(hidden_features, hidden_features, bias=False)
        self.norm2 = ActNorm(hidden_features)
        self.output = nn.Linear(hidden_features, out_features)
        # official conv init: N(0, 0.05) weights; the last layer starts at zero ("zeros" conv_init)
        nn.init.normal_(self.hidden1.weight, std=0.05)
        nn.init.normal_(self.hidden2.weight, std=0.05)
        nn.init.zeros_(self.output.weight)
        nn.init.zeros_(self.output.bias)

    def forward(self, inputs: torch.Tensor, context: Any = None) -> torch.Tensor:
        hidden = torch.relu(self.norm1(self.hidden1(inputs))[0])
        hidden = torch.relu(self.norm2(self.hidden2(hidden))[0])
        return self.output(hidden)


def glow_step(features: int, hidden_features: int, permutation: str) -> Transform:
    """One flow step: ActNorm, a fixed permutation, an additive coupling."""
    mask = torch.zeros(features)
    mask[features // 2 :] = 1  # x₁ = first half (kept), x₂ = second half (shifted), as officially
    permute = ReversePermutation(features) if permutation == "reverse" else RandomPermutation(features)
    return CompositeTransform(
        [
            ActNorm(features),
            permute,
            AdditiveCouplingTransform(
                mask,
                transform_net_create_fn=lambda n_in, n_out: ShiftNetwork(n_in, n_out, hidden_features),
            ),
        ]
    )


def build_glow_transform(
    features: int, *, n_levels: int, depth: int, hidden_features: int, permutation: str
) -> MultiscaleCompositeTransform:
    """``n_levels`` levels of ``depth`` steps, splitting off half the features after each level."""
    multiscale = MultiscaleCompositeTransform(n_levels, split_dim=1)
    level_features = features
    for _ in range(n_levels):
        level = CompositeTransform(
            [glow_step(level_features, hidden_features, permutation) for _ in range(depth)]
        )
        next_shape = multiscale.add_transform(level, (level_features,))
        if next_shape is not None:
            level_features = next_shape[0]
    return multiscale


def _adamw(flow: nn.Module, learning_rate: float, weight_decay: float) -> torch.optim.Optimizer:
    """AdamW, fused into one kernel per step where torch supports it on this device."""
    options = {"lr": learning_rate, "betas": (0.9, 0.999), "eps": 1e-6, "weight_decay": weight_decay}
    try:
        return torch.optim.AdamW(flow.parameters(), fused=True, **options)
    except (RuntimeError, TypeError, ValueError):
        return torch.optim.AdamW(flow.parameters(), **options)


class FlowCalibrator(Calibrator):
    """BERT-flow: map embeddings onto an isotropic Gaussian with a learned invertible flow.

    Parameters (defaults follow the paper and its official code)
    ------------------------------------------------------------
    n_levels, depth, hidden_features:
        3 levels × 3 steps, shift networks 32 wide: the official default config
        ``config_l3_d3_w32`` (run_siamese.py ``--flow_model_config``; paper appendix, table 7).
    permutation:
        ``"reverse"``: the official config's ``"permutation": true`` selects a fixed channel
        reversal instead of Glow's learned 1×1 convolution. ``"random"`` draws a fixed,
        seeded random permutation per step.
    epochs:
        1 pass over the corpus (README of the official code: ``--num_train_epochs=1.0``).
    batch_size:
        64 sentences per step: the official run uses ``train_batch_size=32`` sentence pairs and
        sums the flow loss of both sentences.
    learning_rate, weight_decay:
        Adam with lr 1e-3 (``--flow_learning_rate=1e-3``) and decoupled weight decay 0.01,
        β=(0.9, 0.999), ε=1e-6 (optimization_bert_flow.py's AdamWeightDecayOptimizer).
    clip_grad_norm:
        Global gradient-norm clip at 1.0 (optimization_bert_flow.py ``clip_by_global_norm``).
    init_samples:
        Rows used for the data-dependent ActNorm initialisation. The official code uses its
        first minibatch; up to 1024 rows give a steadier start at no real cost.
    seed:
        1234, the official ``--seed`` default; fixes initial weights, permutations and
        shuffling so a refit gives identical results on the same device.
    device:
        ``None``/``"auto"``: CUDA when available, else CPU (the backbone's choice).
    show_progress_bar:
        ``None`` shows a bar for long fits.
    """

    method = "flow"
    label = "flow"

    def __init__(
        self,
        n_levels: int = 3,
        depth: int = 3,
        hidden_features: int = 32,
        permutation: str = "reverse",
        epochs: float = 1.0,
        batch_size: int = 64,
        learning_rate: float = 1e-3,
        weight_decay: float = 0.01,
        clip_grad_norm: float = 1.0,
        init_samples: int = 1024,
        seed: int = 1234,
        device: str | None = None,
        show_progress_bar: bool | None = None,
    ) -> None:
        self.n_levels = n_levels
        self.depth = depth
        self.hidden_features = hidden_features
        self.permutation = permutation
        self.epochs = epochs
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.weight_decay = weight_decay
        self.clip_grad_norm = clip_grad_norm
        self.init_samples = init_samples
        self.seed = seed
        self.device = device
        self.show_progress_bar = show_progress_bar

    # ------------------------------------------------------------ construction
    def min_samples(self, n_features: int) -> int:
        return 2  # ActNorm's data-dependent initialisation needs a standard deviation

    def _check_params(self, n_features: int) -> None:
        if self.permutation not in PERMUTATIONS:
            raise InputError(f"permutation must be one of {PERMUTATIONS}, got {self.permutation!r}")
        for name in ("n_levels", "depth", "hidden_features", "batch_size", "init_samples"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise InputError(f"FlowCalibrator {name} must be a positive int, got {value!r}")
        if not self.epochs > 0 or not self.learning_rate > 0:
            raise InputError("FlowCalibrator epochs and learning_rate must be > 0")
        smallest_level = n_features // 2 ** (self.n_levels - 1)
        if smallest_level < 2:
            raise InputError(
                f"{n_features}-dimensional embeddings are too small for {self.n_levels} levels: the last level "
                f"would see {smallest_level} feature(s); use fewer levels"
            )

    def _build(self, n_features: int) -> Flow:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            transform = build_glow_transform(
                n_features,
                n_levels=self.n_levels,
                depth=self.depth,
                hidden_features=self.hidden_features,
                permutation=self.permutation,
            )
        return Flow(transform, StandardNormal([n_features]))

    # ------------------------------------------------------------ fitting
    def _fit(self, X: np.ndarray) -> None:
        n_samples, n_features = X.shape
        if n_samples < n_features:
            logger.warning(
                "fitting a flow on %d sentences for %d-dimensional embeddings: expect a poor fit", n_samples, n_features
            )
        device = resolve_device(self.device)
        flow = self._build(n_features).to(device)
        data = torch.from_numpy(X).to(device)
        generator = torch.Generator().manual_seed(self.seed)

        # data-dependent initialisation of every ActNorm (official GlowInitHook)
        init_rows = torch.randperm(n_samples, generator=generator)[: self.init_samples].to(device)
        flow.train()
        with torch.no_grad():
            flow.log_prob(data[init_rows])
        self.initial_log_likelihood_ = self._mean_log_likelihood(flow, data)
        if not math.isfinite(self.initial_log_likelihood_):
            raise InputError(
                "flow initialisation gave a non-finite likelihood: some embedding dimensions are constant "
                "or the embeddings are degenerate"
            )

        optimizer = _adamw(flow, self.learning_rate, self.weight_decay)
        n_steps = max(1, math.ceil(self.epochs * n_samples / self.batch_size))
        show = self.show_progress_bar if self.show_progress_bar is not None else n_steps > _PROGRESS_BAR_MIN_STEPS
        losses = np.empty(n_steps, dtype=np.float32)
        order = torch.randperm(n_samples, generator=generator)
        position = 0
        flow.train()
        for step in tqdm(range(n_steps), desc="fit flow", unit="step", disable=not show):
            if position >= n_samples:  # next epoch: reshuffle
                order, position = torch.randperm(n_samples, generator=generator), 0
            batch_rows = order[position : position + self.batch_size].to(device)
            position += self.batch_size
            loss = -flow.log_prob(data[batch_rows]).mean()
            if not torch.isfinite(loss):
                raise InputError(f"flow training diverged at step {step + 1} of {n_steps} (loss {loss.item()})")
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if self.clip_grad_norm:
                torch.nn.utils.clip_grad_norm_(flow.parameters(), self.clip_grad_norm)
            optimizer.step()
            losses[step] = loss.item()
        flow.eval()
        self.flow_ = flow
        self.loss_curve_ = losses
        self.n_steps_ = n_steps
        self.fit_log_likelihood_ = self._mean_log_likelihood(flow, data)
        self.fit_bits_per_dim_ = -self.fit_log_likelihood_ / (n_features * math.log(2))

    # ------------------------------------------------------------ inference
    def _device(self) -> torch.device:
        return next(self.flow_.parameters()).device

    @staticmethod
    def _mean_log_likelihood(flow: Flow, data: torch.Tensor) -> float:
        was_training = flow.training
        flow.eval()
        total = 0.0
        with torch.inference_mode():
            for start in range(0, data.shape[0], _INFERENCE_CHUNK):
                total += flow.log_prob(data[start : start + _INFERENCE_CHUNK]).double().sum().item()
        flow.train(was_training)
        return total / data.shape[0]

    def _apply(self, X: np.ndarray, function: Any) -> np.ndarray:
        device = self._device()
        chunks = []
        with torch.inference_mode():
            for start in range(0, X.shape[0], _INFERENCE_CHUNK):
                chunk = torch.from_numpy(X[start : start + _INFERENCE_CHUNK]).to(device)
                chunks.append(function(chunk).float().cpu().numpy())
        return np.concatenate(chunks, axis=0)

    def _transform(self, X: np.ndarray) -> np.ndarray:
        return self._apply(X, self.flow_.transform_to_noise)

    def _inverse_transform(self, Z: np.ndarray) -> np.ndarray:
        return self._apply(Z, lambda z: self.flow_._transform.inverse(z)[0])

    def score_samples(self, X: Any) -> np.ndarray:
        """Log-likelihood of each row under the fitted flow (nats)."""
        self._check_is_fitted()
        X = check_embeddings(X, name="X", n_features=self.n_features_in_)
        if X.shape[0] == 0:
            return np.empty((0,), dtype=np.float64)
        return self._apply(X, self.flow_.log_prob).astype(np.float64)

    def score(self, X: Any) -> float:
        """Mean log-likelihood of ``X`` (nats per sample), as scikit-learn density models do."""
        return float(self.score_samples(X).mean())

    def bits_per_dim(self, X: Any) -> float:
        """Negative mean log-likelihood in bits per dimension."""
        return -self.score(X) / (self.n_features_in_ * math.log(2))

    # ------------------------------------------------------------ persistence
    def _get_state(self) -> dict[str, np.ndarray]:
        state = {f"flow/{key}": value.detach().cpu().numpy() for key, value in self.flow_.state_dict().items()}
        state["loss_curve"] = self.loss_curve_
        state["fit_log_likelihood"] = np.float64(self.fit_log_likelihood_)
        state["initial_log_likelihood"] = np.float64(self.initial_log_likelihood_)
        return state

    def _set_state(self, state: dict[str, np.ndarray]) -> None:
        n_features = self.n_features_in_
        self._check_params(n_features)
        flow = self._build(n_features)
        weights = {key[len("flow/") :]: torch.from_numpy(np.array(value)) for key, value in state.items() if key.startswith("flow/")}
        flow.load_state_dict(weights, strict=True)
        self.flow_ = flow.to(resolve_device(self.device)).eval()
        self.loss_curve_ = state["loss_curve"]
        self.n_steps_ = int(len(self.loss_curve_))
        self.fit_log_likelihood_ = float(state["fit_log_likelihood"])
        self.initial_log_likelihood_ = float(state["initial_log_likelihood"])
        self.fit_bits_per_dim_ = -self.fit_log_likelihood_ / (n_features * math.log(2))
