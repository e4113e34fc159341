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

import contextlib
import logging
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from nflows.distributions.normal import StandardNormal
from nflows.flows.base import Flow
from nflows.transforms.base import CompositeTransform, MultiscaleCompositeTransform, Transform
from nflows.transforms.coupling import AdditiveCouplingTransform
from nflows.transforms.normalization import ActNorm
from nflows.transforms.permutations import Permutation, RandomPermutation, ReversePermutation
from torch import nn
from tqdm.auto import tqdm

from flow_plugin._validation import check_embeddings
from flow_plugin._machine import resolve_device
from flow_plugin.errors import InputError
from flow_plugin.calibration.base import Calibrator

logger = logging.getLogger(__name__)

PERMUTATIONS = ("reverse", "random")
#: Rows per forward pass when transforming or scoring (no gradients, so memory is small;
#: 2048 rows of 384-768 features keep each intermediate within a core's L2 cache).
_INFERENCE_CHUNK = 2048
#: Show a progress bar by default when training takes more steps than this.
_PROGRESS_BAR_MIN_STEPS = 200
#: Environment variable: intra-op threads for the CPU training loop (default 1; 0 = unchanged).
FLOW_THREADS_ENV = "FLOW_PLUGIN_FLOW_THREADS"


class FastActNorm(ActNorm):
    """nflows' ``ActNorm`` with a leaner 2-D forward pass: ``scale * x + shift`` as one fused
    multiply-add, and its batch-constant log-determinant broadcast instead of multiplied by a
    ones vector. Same parameters, buffers, initialisation and inverse as nflows'."""

    def affine(self, inputs: torch.Tensor) -> torch.Tensor:
        """``scale * inputs + shift`` (initialising from ``inputs`` first, in training, when needed)."""
        if self.training and not self.initialized:
            self._initialize(inputs)
        return torch.addcmul(self.shift, inputs, torch.exp(self.log_scale))

    def forward(self, inputs: torch.Tensor, context: Any = None) -> tuple[torch.Tensor, torch.Tensor]:
        if inputs.dim() != 2:
            return super().forward(inputs, context)
        return self.affine(inputs), self.log_scale.sum().expand(inputs.shape[0]).clone()


class FastReversePermutation(ReversePermutation):
    """nflows' ``ReversePermutation`` as ``torch.flip`` (a plain copy whose gradient is a flip,
    where ``index_select`` needs an index tensor and a scatter-add backward)."""

    def permuted(self, inputs: torch.Tensor) -> torch.Tensor:
        if inputs.dim() <= self._dim or inputs.shape[self._dim] != len(self._permutation):
            return self._permute(inputs, self._permutation, self._dim)[0]  # nflows' own error messages
        return torch.flip(inputs, (self._dim,))

    def forward(self, inputs: torch.Tensor, context: Any = None) -> tuple[torch.Tensor, torch.Tensor]:
        return self.permuted(inputs), inputs.new_zeros(inputs.shape[0])

    def inverse(self, inputs: torch.Tensor, context: Any = None) -> tuple[torch.Tensor, torch.Tensor]:
        return self.forward(inputs, context)  # a reversal is its own inverse


class HalfSplitAdditiveCoupling(AdditiveCouplingTransform):
    """nflows' ``AdditiveCouplingTransform`` for the mask "first half kept, second half shifted",
    computed with slices and one concatenation instead of index gathers, ``index_put`` scatters
    and the multiply-by-ones / ``log(1)`` of the affine base class. Same outputs; any other
    mask falls back to nflows' general code."""

    def __init__(self, mask: torch.Tensor, transform_net_create_fn: Any) -> None:
        super().__init__(mask, transform_net_create_fn)
        split = self.num_identity_features
        contiguous = torch.equal(self.identity_features, torch.arange(split)) and torch.equal(
            self.transform_features, torch.arange(split, self.features)
        )
        self._split = split if contiguous else None

    def coupled(self, inputs: torch.Tensor, context: Any = None, *, inverse: bool = False) -> torch.Tensor:
        if self._split is None or inputs.dim() != 2 or inputs.shape[1] != self.features:
            method = super().inverse if inverse else super().forward
            return method(inputs, context)[0]
        kept = inputs[:, : self._split]
        shift = self.transform_net(kept, context)
        moved = inputs[:, self._split :]
        return torch.cat((kept, moved - shift if inverse else moved + shift), dim=1)

    def forward(self, inputs: torch.Tensor, context: Any = None) -> tuple[torch.Tensor, torch.Tensor]:
        return self.coupled(inputs, context), inputs.new_zeros(inputs.shape[0])

    def inverse(self, inputs: torch.Tensor, context: Any = None) -> tuple[torch.Tensor, torch.Tensor]:
        return self.coupled(inputs, context, inverse=True), inputs.new_zeros(inputs.shape[0])


class GlowStep(CompositeTransform):
    """``CompositeTransform([ActNorm, permutation, additive coupling])`` whose forward pass skips
    adding the permutation's and the coupling's log-determinants, which are zero (both are
    volume-preserving)."""

    def forward(self, inputs: torch.Tensor, context: Any = None) -> tuple[torch.Tensor, torch.Tensor]:
        norm, permute, coupling = self._transforms
        if not (
            isinstance(norm, FastActNorm)
            and isinstance(permute, FastReversePermutation)
            and isinstance(coupling, HalfSplitAdditiveCoupling)
        ):
            return super().forward(inputs, context)
        outputs, logabsdet = norm(inputs, context)
        return coupling.coupled(permute.permuted(outputs), context), logabsdet


class ShiftNetwork(nn.Module):
    """The coupling layer's shift network NN(x₁) (official ``conv_stack`` on 1×1 "images"):
    Linear → ActNorm → ReLU → Linear → ActNorm → ReLU → Linear, the last layer zero-initialised
    so that every coupling starts as the identity."""

    def __init__(self, in_features: int, out_features: int, hidden_features: int) -> None:
        super().__init__()
        self.hidden1 = nn.Linear(in_features, hidden_features, bias=False)
        self.norm1 = FastActNorm(hidden_features)
        self.hidden2 = nn.Linear(hidden_features, hidden_features, bias=False)
        self.norm2 = FastActNorm(hidden_features)
        self.output = nn.Linear(hidden_features, out_features)
        # official conv init: N(0, 0.05) weights; the last layer starts at zero ("zeros" conv_init)
        nn.init.normal_(self.hidden1.weight, std=0.05)
        nn.init.normal_(self.hidden2.weight, std=0.05)
        nn.init.zeros_(self.output.weight)
        nn.init.zeros_(self.output.bias)

    def forward(self, inputs: torch.Tensor, context: Any = None) -> torch.Tensor:
        hidden = torch.relu(self.norm1.affine(self.hidden1(inputs)))
        hidden = torch.relu(self.norm2.affine(self.hidden2(hidden)))
        return self.output(hidden)


def glow_step(features: int, hidden_features: int, permutation: str) -> Transform:
    """One flow step: ActNorm, a fixed permutation, an additive coupling."""
    mask = torch.zeros(features)
    mask[features // 2 :] = 1  # x₁ = first half (kept), x₂ = second half (shifted), as officially
    permute = FastReversePermutation(features) if permutation == "reverse" else RandomPermutation(features)
    return GlowStep(
        [
            FastActNorm(features),
            permute,
            HalfSplitAdditiveCoupling(
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


class FlatAdamW:
    """AdamW over one flat parameter tensor: ``torch.optim.AdamW``'s arithmetic (decoupled
    weight decay, bias-corrected moments, no amsgrad), as seven whole-tensor operations.

    Used instead of ``torch.optim.AdamW`` because the flow's parameters live in one tensor (see
    :class:`FlatParameters`), so the per-step bookkeeping of ``torch.optim`` (about a third of a
    millisecond) was its whole cost, and building the first ``torch.optim`` optimiser of a
    process imports ``torch._dynamo`` (about two seconds).
    """

    def __init__(
        self,
        weights: torch.Tensor,
        learning_rate: float,
        weight_decay: float,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-6,
    ) -> None:
        self.weights = weights
        self.learning_rate = learning_rate
        self.weight_decay = weight_decay
        self.betas = betas
        self.eps = eps
        self.exp_avg = torch.zeros_like(weights, memory_format=torch.preserve_format)
        self.exp_avg_sq = torch.zeros_like(weights, memory_format=torch.preserve_format)
        self.n_steps = 0

    @torch.no_grad()
    def step(self, gradient: torch.Tensor) -> None:
        self.n_steps += 1
        beta1, beta2 = self.betas
        self.weights.mul_(1 - self.learning_rate * self.weight_decay)
        self.exp_avg.lerp_(gradient, 1 - beta1)
        self.exp_avg_sq.mul_(beta2).addcmul_(gradient, gradient, value=1 - beta2)
        bias_correction1 = 1 - beta1**self.n_steps
        bias_correction2 = 1 - beta2**self.n_steps
        denominator = (self.exp_avg_sq.sqrt() / math.sqrt(bias_correction2)).add_(self.eps)
        self.weights.addcdiv_(self.exp_avg, denominator, value=-self.learning_rate / bias_correction1)


def _clip_grad_norm_(gradient: torch.Tensor, max_norm: float) -> None:
    """``torch.nn.utils.clip_grad_norm_`` for one flat gradient (the same arithmetic: scale by
    ``max_norm / (norm + 1e-6)`` when that is below 1), without its per-call bookkeeping."""
    norm = torch.linalg.vector_norm(gradient)
    gradient.mul_(torch.clamp(max_norm / (norm + 1e-6), max=1.0))


def _check_finite_losses(losses: torch.Tensor, start: int, stop: int, n_steps: int) -> None:
    """Raise on the first non-finite loss among ``losses[start:stop]``."""
    block = losses[start:stop]
    finite = torch.isfinite(block)
    if not bool(finite.all()):
        first = start + int(torch.nonzero(~finite)[0, 0])
        raise InputError(f"flow training diverged at step {first + 1} of {n_steps} (loss {float(losses[first])})")


class FlatParameters:
    """Every trainable parameter of a module stored in one flat tensor, its gradient in another.

    ``weights`` (an ``nn.Parameter``) and ``gradient`` (its ``.grad``) alias the storage of the
    module's parameters and of their ``.grad``: an optimiser over ``weights`` updates the whole
    module, and autograd, which adds into an existing ``.grad`` in place, accumulates there.
    The flow has about a hundred small parameter tensors; this makes AdamW, the global-norm
    clip and the zeroing one kernel each instead of one per tensor.
    """

    def __init__(self, module: nn.Module, first: list[nn.Parameter] | None = None) -> None:
        trainable = [parameter for parameter in module.parameters() if parameter.requires_grad]
        leading = {id(parameter) for parameter in first or ()}
        #: ``first`` (those of them that belong to ``module``) in its order, then the rest in module order
        self.parameters = [p for p in first or () if any(p is q for q in trainable)]
        self.parameters += [parameter for parameter in trainable if id(parameter) not in leading]
        if not self.parameters:
            raise InputError("the flow has no trainable parameters")
        first = self.parameters[0]
        if any(p.dtype != first.dtype or p.device != first.device for p in self.parameters):
            raise InputError("FlatParameters needs every parameter in one dtype on one device")
        total = sum(parameter.numel() for parameter in self.parameters)
        flat = torch.empty(total, dtype=first.dtype, device=first.device)
        self.gradient = torch.zeros_like(flat)
        #: id(parameter) -> (offset, shape) inside ``weights`` / ``gradient``
        self.slots: dict[int, tuple[int, torch.Size]] = {}
        offset = 0
        with torch.no_grad():
            for parameter in self.parameters:
                size = parameter.numel()
                flat[offset : offset + size].copy_(parameter.reshape(-1))
                parameter.data = flat[offset : offset + size].view_as(parameter)
                parameter.grad = self.gradient[offset : offset + size].view_as(parameter)
                self.slots[id(parameter)] = (offset, parameter.shape)
                offset += size
        self.weights = nn.Parameter(flat)
        self.weights.grad = self.gradient

    def view(self, buffer: torch.Tensor, parameter: torch.Tensor) -> torch.Tensor:
        """The part of a flat ``buffer`` (shaped like ``weights``) that belongs to ``parameter``."""
        offset, shape = self.slots[id(parameter)]
        return buffer[offset : offset + shape.numel()].view(shape)

    def release(self) -> None:
        """Give every parameter its own storage back (with its current value) and drop gradients."""
        with torch.no_grad():
            for parameter in self.parameters:
                parameter.data = parameter.data.clone()
                parameter.grad = None


@contextlib.contextmanager
def _flat_parameters(module: nn.Module, first: list[nn.Parameter] | None = None) -> Iterator[FlatParameters]:
    flat = FlatParameters(module, first)
    try:
        yield flat
    finally:
        flat.release()


@contextlib.contextmanager
def _small_op_threads(device: torch.device) -> Iterator[None]:
    """Run a CPU training loop on one intra-op thread, restoring the setting afterwards.

    Each step is a few hundred operations on 64-row tensors: far too small to gain from
    splitting, while every parallel region pays a fork/join and, on a busy machine, waits for
    a descheduled worker thread. On the 2-core development machine, idle, 1 and 2 threads
    took the same time per step; busy with other processes, 2 threads were 5-30x slower.
    Set ``FLOW_PLUGIN_FLOW_THREADS`` to override (0 = leave torch's setting as it is).
    """
    value = os.environ.get(FLOW_THREADS_ENV, "1").strip() or "0"
    try:
        wanted = int(value)
    except ValueError:
        raise InputError(f"{FLOW_THREADS_ENV} must be an integer, got {value!r}") from None
    previous = torch.get_num_threads()
    if device.type != "cpu" or wanted <= 0 or wanted == previous:
        yield
        return
    torch.set_num_threads(wanted)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


#: Train with :class:`FusedGlowLogProb` where the flow's structure allows (else plain autograd).
FUSED_TRAINING = True


@dataclass
class _FusedStep:
    """One glow step as :class:`FusedGlowLogProb` sees it: detached views of its parameters
    (they alias the trained storage, so they follow every optimiser update), the views of
    the flat gradient buffer its backward pass writes, and where its three ActNorms' scales
    sit in the flat block of all log-scales."""

    shift: torch.Tensor
    w1: torch.Tensor
    shift1: torch.Tensor
    w2: torch.Tensor
    shift2: torch.Tensor
    w3: torch.Tensor
    b3: torch.Tensor
    scales: tuple[slice, slice, slice]  # ActNorm, shift-network ActNorm 1 and 2
    gradients: tuple[torch.Tensor, ...]  # log_scale, shift, w1, log_scale1, shift1, w2, log_scale2, shift2, w3, b3
    permutation: torch.Tensor | None  # None: reversal (a flip)
    inverse_permutation: torch.Tensor | None
    split: int


@dataclass
class _FusedPlan:
    levels: list[list[_FusedStep]]
    weights: torch.Tensor  # FlatParameters.weights, detached
    gradient: torch.Tensor  # flat, like ``weights``; rewritten by every backward pass
    n_log_scales: int  # weights[:n_log_scales]: every ActNorm's log-scale ...
    n_flow_log_scales: int  # ... of which the first n_flow_log_scales belong to the flow's own ActNorms
    log_z: float


def _glow_steps(flow: Flow) -> list[list[tuple[Any, Any, Any]]] | None:
    """(ActNorm, permutation, coupling) of every step, level by level, or ``None`` when the
    flow is not one that :func:`build_glow_transform` builds."""
    transform = flow._transform
    if not isinstance(transform, MultiscaleCompositeTransform) or transform._split_dim != 1:
        return None
    if not isinstance(flow._distribution, StandardNormal) or not isinstance(flow._embedding_net, nn.Identity):
        return None
    levels = []
    for level in transform._transforms:
        if type(level) is not CompositeTransform:
            return None
        steps = []
        for step in level._transforms:
            if not isinstance(step, GlowStep) or len(step._transforms) != 3:
                return None
            norm, permute, coupling = step._transforms
            if not (
                isinstance(norm, FastActNorm)
                and isinstance(permute, Permutation)
                and permute._dim == 1
                and isinstance(coupling, HalfSplitAdditiveCoupling)
                and coupling._split is not None
                and coupling.unconditional_transform is None
                and type(coupling.transform_net) is ShiftNetwork
                and isinstance(coupling.transform_net.norm1, FastActNorm)
                and isinstance(coupling.transform_net.norm2, FastActNorm)
                and coupling.transform_net.output.bias is not None
            ):
                return None
            steps.append((norm, permute, coupling))
        levels.append(steps)
    return levels


def fused_parameter_order(flow: Flow) -> list[nn.Parameter]:
    """The parameters :class:`FusedGlowLogProb` wants first in the flat buffer: the log-scales
    of the flow's ActNorms, then those of the shift networks' ActNorms (one ``exp`` per step
    for all of them, one multiply for all their gradients). Empty for other flows."""
    levels = _glow_steps(flow)
    if levels is None:
        return []
    steps = [step for level in levels for step in level]
    return [norm.log_scale for norm, _, _ in steps] + [
        norm.log_scale for _, _, coupling in steps for norm in (coupling.transform_net.norm1, coupling.transform_net.norm2)
    ]


class FusedGlowLogProb(torch.autograd.Function):
    """``flow.log_prob(x)`` for the flows :func:`build_glow_transform` builds, as one autograd node.

    The flow is still the nflows model: the forward pass reads the parameters of its
    ``ActNorm``, permutation and ``AdditiveCouplingTransform`` modules (and their shift
    networks) and computes what nflows computes, op for op; only the gradient with respect
    to those parameters is written out by hand, straight into a flat buffer (see
    :class:`FlatParameters`), instead of being taped by autograd. A training step on a 64-row
    minibatch is a few hundred tiny tensor operations, and their per-operation overhead, not
    arithmetic, is its cost: through nflows and autograd a step made about 2,200 ATen calls
    (about 10 ms on the 2-core development machine), this way about 1,100 (about 4-5 ms).
    The tests check the value and the gradient against autograd through nflows. Used only
    for training; inference and likelihoods go through nflows.

    Inputs: ``(inputs, weights, plan)`` where ``weights`` is ``FlatParameters.weights`` (its
    gradient is the flat gradient) and ``plan`` comes from :meth:`plan`.
    """

    @staticmethod
    def plan(flow: Flow, flat: FlatParameters) -> _FusedPlan | None:
        """How to run ``flow`` fused, or ``None`` when its structure or its flat layout (see
        :func:`fused_parameter_order`) is not the expected one, or its ActNorms are not yet
        initialised (nflows' own forward pass does that)."""
        levels = _glow_steps(flow)
        if levels is None:
            return None
        order = fused_parameter_order(flow)
        offset = 0
        for parameter in order:  # the log-scales must lead the flat buffer, in this order
            if flat.slots.get(id(parameter), (None,))[0] != offset:
                return None
            offset += parameter.numel()
        n_log_scales = offset
        n_flow_log_scales = sum(norm.log_scale.numel() for level in levels for norm, _, _ in level)
        gradient = torch.empty_like(flat.weights)
        covered: set[int] = set()
        fused_levels: list[list[_FusedStep]] = []
        for level in levels:
            steps: list[_FusedStep] = []
            for norm, permute, coupling in level:
                net = coupling.transform_net
                if not all(bool(module.initialized) for module in (norm, net.norm1, net.norm2)):
                    return None
                named = (
                    norm.log_scale, norm.shift, net.hidden1.weight, net.norm1.log_scale, net.norm1.shift,
                    net.hidden2.weight, net.norm2.log_scale, net.norm2.shift, net.output.weight, net.output.bias,
                )
                if any(id(parameter) not in flat.slots for parameter in named):
                    return None
                covered.update(id(parameter) for parameter in named)

                def scale_slice(log_scale: torch.Tensor) -> slice:
                    start = flat.slots[id(log_scale)][0]
                    return slice(start, start + log_scale.numel())

                reverse = isinstance(permute, FastReversePermutation)
                steps.append(
                    _FusedStep(
                        shift=norm.shift.detach(),
                        w1=net.hidden1.weight.detach(),
                        shift1=net.norm1.shift.detach(),
                        w2=net.hidden2.weight.detach(),
                        shift2=net.norm2.shift.detach(),
                        w3=net.output.weight.detach(),
                        b3=net.output.bias.detach(),
                        scales=(scale_slice(norm.log_scale), scale_slice(net.norm1.log_scale), scale_slice(net.norm2.log_scale)),
                        gradients=tuple(flat.view(gradient, parameter) for parameter in named),
                        permutation=None if reverse else permute._permutation,
                        inverse_permutation=None if reverse else torch.argsort(permute._permutation),
                        split=coupling._split,
                    )
                )
            fused_levels.append(steps)
        if covered != set(flat.slots):
            return None  # a parameter this code would not differentiate
        return _FusedPlan(
            levels=fused_levels,
            weights=flat.weights.detach(),
            gradient=gradient,
            n_log_scales=n_log_scales,
            n_flow_log_scales=n_flow_log_scales,
            log_z=float(flow._distribution._log_z),
        )

    @staticmethod
    def forward(ctx: Any, inputs: torch.Tensor, weights: torch.Tensor, plan: _FusedPlan) -> torch.Tensor:
        scales = torch.exp(plan.weights[: plan.n_log_scales])  # every ActNorm scale at once
        saved: list[list[tuple[torch.Tensor, ...]]] = []
        outputs: list[torch.Tensor] = []
        hidden = inputs
        for index, steps in enumerate(plan.levels):
            level_saved = []
            for step in steps:
                scale_slice, scale1_slice, scale2_slice = step.scales
                split = step.split
                scale = scales[scale_slice]
                normed = torch.addcmul(step.shift, hidden, scale)  # ActNorm
                if step.permutation is None:
                    permuted = torch.flip(normed, (1,))
                else:
                    permuted = normed.index_select(1, step.permutation)
                kept = permuted[:, :split]
                # shift network: Linear, ActNorm, ReLU, Linear, ActNorm, ReLU, Linear
                pre1 = kept.mm(step.w1.t())
                scale1 = scales[scale1_slice]
                act1 = torch.relu(torch.addcmul(step.shift1, pre1, scale1))
                pre2 = act1.mm(step.w2.t())
                scale2 = scales[scale2_slice]
                act2 = torch.relu(torch.addcmul(step.shift2, pre2, scale2))
                # additive coupling, in place: ``permuted`` is this step's own new tensor, and
                # ``kept`` (its other half) is what the backward pass needs of it
                permuted[:, split:].add_(torch.addmm(step.b3, act2, step.w3.t()))
                level_saved.append((hidden, scale, kept, pre1, scale1, act1, pre2, scale2, act2))
                hidden = permuted
            saved.append(level_saved)
            if index < len(plan.levels) - 1:
                leaving, hidden = torch.chunk(hidden, 2, dim=1)  # multi-scale split
                outputs.append(leaving)
        outputs.append(hidden)
        noise = torch.cat(outputs, dim=1) if len(outputs) > 1 else hidden
        ctx.plan, ctx.saved, ctx.noise, ctx.scales = plan, saved, noise, scales
        ctx.widths = [part.shape[1] for part in outputs]
        log_det = plan.weights[: plan.n_flow_log_scales].sum()  # every flow ActNorm's sum(log_scale)
        return -0.5 * noise.square().sum(dim=1) - plan.log_z + log_det

    @staticmethod
    def backward(ctx: Any, grad_log_prob: torch.Tensor) -> tuple[None, torch.Tensor, None]:
        plan: _FusedPlan = ctx.plan
        threshold_backward = torch.ops.aten.threshold_backward
        # d log_prob / d noise = -noise; d log_prob / d (a flow ActNorm's log_scale) = 1 per row
        grad_noise = ctx.noise * (-grad_log_prob).unsqueeze(1)
        bounds = np.cumsum([0, *ctx.widths]).tolist()
        grad_hidden = grad_noise[:, bounds[-2] : bounds[-1]]
        for index in range(len(plan.levels) - 1, -1, -1):
            if index < len(plan.levels) - 1:
                grad_hidden = torch.cat((grad_noise[:, bounds[index] : bounds[index + 1]], grad_hidden), dim=1)
            for step, saved in zip(reversed(plan.levels[index]), reversed(ctx.saved[index])):
                hidden, scale, kept, pre1, scale1, act1, pre2, scale2, act2 = saved
                g_log_scale, g_shift, g_w1, g_log_scale1, g_shift1, g_w2, g_log_scale2, g_shift2, g_w3, g_b3 = step.gradients
                split = step.split
                grad_moved = grad_hidden[:, split:]  # = the gradient of the coupling's shift
                # the shift network, last layer first; log-scale gradients still lack their
                # factor ``scale``, applied below to all of them at once
                torch.mm(grad_moved.t(), act2, out=g_w3)
                torch.sum(grad_moved, dim=0, out=g_b3)
                grad_pre = threshold_backward(grad_moved.mm(step.w3), act2, 0)
                torch.sum(grad_pre * pre2, dim=0, out=g_log_scale2)
                torch.sum(grad_pre, dim=0, out=g_shift2)
                grad_pre = grad_pre * scale2
                torch.mm(grad_pre.t(), act1, out=g_w2)
                grad_pre = threshold_backward(grad_pre.mm(step.w2), act1, 0)
                torch.sum(grad_pre * pre1, dim=0, out=g_log_scale1)
                torch.sum(grad_pre, dim=0, out=g_shift1)
                grad_pre = grad_pre * scale1
                torch.mm(grad_pre.t(), kept, out=g_w1)
                grad_hidden[:, :split].addmm_(grad_pre, step.w1)  # the kept half's total gradient
                # the permutation and the ActNorm
                if step.permutation is None:
                    grad_normed = torch.flip(grad_hidden, (1,))
                else:
                    grad_normed = grad_hidden.index_select(1, step.inverse_permutation)
                torch.sum(grad_normed * hidden, dim=0, out=g_log_scale)
                torch.sum(grad_normed, dim=0, out=g_shift)
                grad_hidden = grad_normed * scale
        gradient = plan.gradient
        gradient[: plan.n_log_scales].mul_(ctx.scales)
        gradient[: plan.n_flow_log_scales].add_(grad_log_prob.sum())
        del ctx.saved, ctx.noise, ctx.scales
        return None, gradient, None


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

        n_steps = max(1, math.ceil(self.epochs * n_samples / self.batch_size))
        show = self.show_progress_bar if self.show_progress_bar is not None else n_steps > _PROGRESS_BAR_MIN_STEPS
        first = fused_parameter_order(flow) if FUSED_TRAINING else None
        with _flat_parameters(flow, first) as flat, _small_op_threads(device):
            losses = self._train(flow, data, flat, generator, n_steps, show)
        flow.eval()
        self.flow_ = flow
        self.loss_curve_ = losses
        self.n_steps_ = n_steps
        self.fit_log_likelihood_ = self._mean_log_likelihood(flow, data)
        self.fit_bits_per_dim_ = -self.fit_log_likelihood_ / (n_features * math.log(2))

    def _train(
        self,
        flow: Flow,
        data: torch.Tensor,
        flat: FlatParameters,
        generator: torch.Generator,
        n_steps: int,
        show_progress_bar: bool,
    ) -> np.ndarray:
        """Minibatch maximum likelihood: AdamW on the flat parameters, global-norm clipping."""
        device = data.device
        n_samples = data.shape[0]
        weights, gradient = flat.weights, flat.gradient
        optimizer = FlatAdamW(weights, self.learning_rate, self.weight_decay)
        fused = FusedGlowLogProb.plan(flow, flat) if FUSED_TRAINING else None
        # CUDA: keep the losses on the device and check them in blocks, not with a sync per step
        check_every = 1 if device.type == "cpu" else 50
        losses = torch.empty(n_steps, dtype=torch.float32, device=device)
        order = torch.randperm(n_samples, generator=generator)
        position = 0
        checked = 0
        flow.train()
        for step in tqdm(range(n_steps), desc="fit flow", unit="step", disable=not show_progress_bar):
            if position >= n_samples:  # next epoch: reshuffle
                order, position = torch.randperm(n_samples, generator=generator), 0
            batch = data[order[position : position + self.batch_size].to(device, non_blocking=True)]
            position += self.batch_size
            if fused is not None:
                log_prob = FusedGlowLogProb.apply(batch, weights, fused)
            else:
                log_prob = flow.log_prob(batch)
            loss = -log_prob.mean()
            losses[step] = loss.detach()
            if step + 1 - checked >= check_every or step + 1 == n_steps:
                _check_finite_losses(losses, checked, step + 1, n_steps)
                checked = step + 1
            gradient.zero_()
            loss.backward()
            if self.clip_grad_norm:
                _clip_grad_norm_(gradient, self.clip_grad_norm)
            optimizer.step(gradient)
        return losses.cpu().numpy()

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
