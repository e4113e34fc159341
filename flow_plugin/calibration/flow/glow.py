"""BERT-flow's Glow, composed from small nflows transforms, and nothing else.

The structure follows the official code (bohanli/BERT-flow, ``flow/glow_1x1.py`` and
``flow/glow_ops_1x1.py``, config ``config_l3_d3_w32``)::

    step   = ActNorm -> permutation -> coupling            (:class:`GlowStep`)
    level  = depth x step                                  (nflows ``CompositeTransform``)
    glow   = n_levels levels, multi-scale: after every level but the last, half of the
             features leave and are scored under the N(0, I) prior
             (nflows ``MultiscaleCompositeTransform``)

The paper's flow uses a fixed channel reversal and additive couplings
(x₂ ← x₂ + NN(x₁): volume-preserving, so the log-determinant comes from ActNorm alone).
The other choices here are the official code's alternatives: a seeded random permutation,
Glow's invertible 1×1 convolution in LU form (``"lu"``), and affine couplings
(x₂ ← x₂ · σ(s + 2) + t, as Glow).

Examples
--------
>>> flow = build_glow(16, n_levels=2, depth=2, hidden_features=8, permutation="reverse", coupling="additive")
>>> [type(step.coupling).__name__ for step in glow_steps(flow)]
['AdditiveCouplingTransform', 'AdditiveCouplingTransform', 'AdditiveCouplingTransform', 'AdditiveCouplingTransform']
"""

from __future__ import annotations

from typing import Any

import torch
from nflows.distributions.normal import StandardNormal
from nflows.flows.base import Flow
from nflows.transforms.base import CompositeTransform, MultiscaleCompositeTransform, Transform
from nflows.transforms.coupling import AdditiveCouplingTransform, AffineCouplingTransform
from nflows.transforms.lu import LULinear
from nflows.transforms.normalization import ActNorm
from nflows.transforms.permutations import RandomPermutation, ReversePermutation
from torch import nn


class DataInitActNorm(ActNorm):
    """nflows' ``ActNorm``, its data-dependent initialisation computed on the CPU whatever the device,
    and a constant feature left unscaled.

    The initial scale is ``1 / std`` of each feature over the first batch. A CPU reduction of float32
    accumulates in float64, a CUDA one in float32, where the squares of a feature of values near 1e-32
    (all-MiniLM-L6-v2 has two) underflow: initialised on the CPU, every device starts from the CPU's
    values, bit for bit. A feature constant over the batch (on a GPU those two features come out exactly
    0) has no scale to learn from: it keeps scale 1 instead of an infinite one, and is only centred.
    """

    def _initialize(self, inputs: torch.Tensor) -> None:
        device = inputs.device
        with torch.no_grad():
            inputs = inputs.detach().cpu()
            std = inputs.std(dim=0)
            std = torch.where(std > 0, std, torch.ones_like(std))
            self.log_scale.data = -torch.log(std).to(device)
            self.shift.data = -(inputs / std).mean(dim=0).to(device)
            self.initialized.data = torch.tensor(True, dtype=torch.bool, device=device)


class ShiftNetwork(nn.Module):
    """The coupling's network NN(x₁) (official ``conv_stack`` on 1×1 "images"):
    Linear → ActNorm → ReLU → Linear → ActNorm → ReLU → Linear, the last layer zero-initialised
    so that every coupling starts as the identity."""

    def __init__(self, in_features: int, out_features: int, hidden_features: int) -> None:
        super().__init__()
        self.hidden1 = nn.Linear(in_features, hidden_features, bias=False)
        self.norm1 = DataInitActNorm(hidden_features)
        self.hidden2 = nn.Linear(hidden_features, hidden_features, bias=False)
        self.norm2 = DataInitActNorm(hidden_features)
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


class GlowStep(Transform):
    """One flow step with named parts: ``actnorm`` (data-initialised), ``permutation`` and
    ``coupling`` (which keeps the first half of the features and moves the second)."""

    def __init__(self, features: int, *, hidden_features: int, permutation: str, coupling: str) -> None:
        super().__init__()
        self.actnorm = DataInitActNorm(features)
        if permutation == "reverse":
            self.permutation: Transform = ReversePermutation(features)
        elif permutation == "random":
            self.permutation = RandomPermutation(features)
        elif permutation == "lu":
            self.permutation = LULinear(features, identity_init=True)
        else:
            raise ValueError(f"unknown permutation {permutation!r}")
        if coupling not in ("additive", "affine"):
            raise ValueError(f"unknown coupling {coupling!r}")
        mask = torch.zeros(features)
        mask[features // 2 :] = 1  # x₁ = first half (kept), x₂ = second half (moved), as officially
        coupling_class = AdditiveCouplingTransform if coupling == "additive" else AffineCouplingTransform
        self.coupling = coupling_class(
            mask, transform_net_create_fn=lambda n_in, n_out: ShiftNetwork(n_in, n_out, hidden_features)
        )

    def forward(self, inputs: torch.Tensor, context: Any = None) -> tuple[torch.Tensor, torch.Tensor]:
        outputs, logabsdet = self.actnorm(inputs, context)
        outputs, permutation_logabsdet = self.permutation(outputs, context)
        outputs, coupling_logabsdet = self.coupling(outputs, context)
        return outputs, logabsdet + permutation_logabsdet + coupling_logabsdet

    def inverse(self, inputs: torch.Tensor, context: Any = None) -> tuple[torch.Tensor, torch.Tensor]:
        outputs, logabsdet = self.coupling.inverse(inputs, context)
        outputs, permutation_logabsdet = self.permutation.inverse(outputs, context)
        outputs, actnorm_logabsdet = self.actnorm.inverse(outputs, context)
        return outputs, logabsdet + permutation_logabsdet + actnorm_logabsdet


class GlowLevel(CompositeTransform):
    """``depth`` steps on the features a level sees; ``steps`` names them."""

    def __init__(self, steps: list[GlowStep]) -> None:
        super().__init__(steps)

    @property
    def steps(self) -> list[GlowStep]:
        return [module for module in self.modules() if isinstance(module, GlowStep)]


class Glow(MultiscaleCompositeTransform):
    """The multi-scale stack of :class:`GlowLevel`; ``levels`` names them."""

    def __init__(self, features: int, *, n_levels: int, depth: int, hidden_features: int, permutation: str,
                 coupling: str) -> None:
        super().__init__(n_levels, split_dim=1)
        self.level_features: list[int] = []
        level_features = features
        for _ in range(n_levels):
            self.level_features.append(level_features)
            level = GlowLevel([
                GlowStep(level_features, hidden_features=hidden_features, permutation=permutation, coupling=coupling)
                for _ in range(depth)
            ])
            next_shape = self.add_transform(level, (level_features,))
            if next_shape is not None:
                level_features = next_shape[0]

    @property
    def levels(self) -> list[GlowLevel]:
        return [level for child in self.children() for level in child.children() if isinstance(level, GlowLevel)]


def build_glow(features: int, *, n_levels: int, depth: int, hidden_features: int, permutation: str,
               coupling: str) -> Flow:
    """The flow: a :class:`Glow` transform under a standard normal prior (random initial
    weights come from torch's global generator; seed it first for a reproducible start)."""
    return Flow(
        Glow(features, n_levels=n_levels, depth=depth, hidden_features=hidden_features,
             permutation=permutation, coupling=coupling),
        StandardNormal([features]),
    )


def glow_of(flow: Flow) -> Glow:
    """The :class:`Glow` transform inside a flow built by :func:`build_glow`."""
    found = [module for module in flow.children() if isinstance(module, Glow)]
    if len(found) != 1:
        raise TypeError("not a flow built by build_glow")
    return found[0]


def glow_steps(flow: Flow) -> list[GlowStep]:
    """Every step of the flow, level by level."""
    return [step for level in glow_of(flow).levels for step in level.steps]
