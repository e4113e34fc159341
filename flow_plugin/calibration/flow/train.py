"""Maximum-likelihood training of a flow (BERT-flow paper, section 3.2).

:func:`train_flow` initialises every ActNorm from the data (the official ``GlowInitHook``),
then runs minibatch AdamW with global gradient-norm clipping over a seeded shuffle of the
rows, and records the loss of every step. With ``fast_path=True`` the flows of the paper
train through :mod:`flow_plugin.calibration.flow._fast` (the same arithmetic, about twice as
fast on a CPU); any other flow, or ``fast_path=False``, trains through autograd and nflows.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
from nflows.flows.base import Flow
from tqdm.auto import tqdm

from flow_plugin.calibration.flow import _fast
from flow_plugin.errors import InputError

logger = logging.getLogger(__name__)

#: Rows per forward pass when scoring (no gradients, so memory is small; 2048 rows of 384-768
#: features keep each intermediate within a core's L2 cache).
INFERENCE_CHUNK = 2048
#: Show a progress bar by default when training takes more steps than this.
PROGRESS_BAR_MIN_STEPS = 200
#: Environment variable: intra-op threads for the CPU training loop (default 1; 0 = unchanged).
FLOW_THREADS_ENV = "FLOW_PLUGIN_FLOW_THREADS"


@dataclass(frozen=True)
class TrainingSettings:
    """How to train (the defaults and their sources live on :class:`FlowCalibrator`)."""

    epochs: float
    batch_size: int
    learning_rate: float
    weight_decay: float
    clip_grad_norm: float
    init_samples: int
    seed: int


@dataclass
class TrainingResult:
    loss_curve: np.ndarray  # mean negative log-likelihood of each step's minibatch (nats)
    initial_log_likelihood: float  # mean over the data, after the ActNorm initialisation
    n_steps: int
    fast_path: bool  # whether the fused trainer ran
    #: with early stopping: (step, mean held-out log-likelihood) of every check, and the step kept
    validation_curve: np.ndarray | None = None
    best_step: int | None = None


@dataclass(frozen=True)
class EarlyStopping:
    """Stop when the mean log-likelihood of held-out rows has not risen for ``patience`` checks
    (``checks_per_epoch`` of them per epoch), and keep the parameters of the best check."""

    validation: torch.Tensor
    patience: int
    checks_per_epoch: int = 4


def mean_log_likelihood(flow: Flow, data: torch.Tensor) -> float:
    """Mean log-likelihood of the rows of ``data`` (nats), in chunks, in eval mode."""
    was_training = flow.training
    flow.eval()
    total = 0.0
    with torch.inference_mode():
        for start in range(0, data.shape[0], INFERENCE_CHUNK):
            total += flow.log_prob(data[start : start + INFERENCE_CHUNK]).double().sum().item()
    flow.train(was_training)
    return total / data.shape[0]


@contextlib.contextmanager
def small_op_threads(device: torch.device) -> Iterator[None]:
    """Run a CPU training loop on one intra-op thread, restoring the setting afterwards.

    Each step is a few hundred operations on 64-row tensors: far too small to gain from
    splitting, while every parallel region pays a fork/join and, on a busy machine, waits for
    a descheduled worker thread. On a 2-core machine, idle, 1 and 2 threads took the same time
    per step; busy with other processes, 2 threads were 5-30x slower. The setting is
    process-wide while the fit runs. ``FLOW_PLUGIN_FLOW_THREADS`` overrides it (0 = leave
    torch's setting as it is).
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


def _check_finite_losses(losses: torch.Tensor, start: int, stop: int, n_steps: int) -> None:
    """Raise on the first non-finite loss among ``losses[start:stop]``."""
    block = losses[start:stop]
    finite = torch.isfinite(block)
    if not bool(finite.all()):
        first = start + int(torch.nonzero(~finite)[0, 0])
        raise InputError(f"flow training diverged at step {first + 1} of {n_steps} (loss {float(losses[first])})")


def _adamw(parameters: list[torch.nn.Parameter], settings: TrainingSettings) -> torch.optim.AdamW:
    """AdamW with the official optimiser's constants (optimization_bert_flow.py's
    AdamWeightDecayOptimizer: decoupled weight decay, β=(0.9, 0.999), ε=1e-6), fused into one
    kernel where torch supports it for these parameters."""
    fused = all(p.device.type in ("cpu", "cuda") and p.dtype == torch.float32 for p in parameters)
    return torch.optim.AdamW(parameters, lr=settings.learning_rate, betas=(0.9, 0.999), eps=1e-6,
                             weight_decay=settings.weight_decay, fused=fused)


def train_flow(
    flow: Flow,
    data: torch.Tensor,
    settings: TrainingSettings,
    *,
    fast_path: bool = True,
    show_progress_bar: bool | None = None,
    early_stopping: EarlyStopping | None = None,
) -> TrainingResult:
    """Fit ``flow`` to the rows of ``data`` by maximum likelihood (in place); with
    ``early_stopping``, for at most ``settings.epochs`` epochs."""
    n_samples = data.shape[0]
    device = data.device
    generator = torch.Generator().manual_seed(settings.seed)
    # data-dependent initialisation of every ActNorm (official GlowInitHook)
    init_rows = torch.randperm(n_samples, generator=generator)[: settings.init_samples].to(device)
    flow.train()
    with torch.no_grad():
        flow.log_prob(data[init_rows])
    initial = mean_log_likelihood(flow, data)
    if not math.isfinite(initial):
        raise InputError(
            "flow initialisation gave a non-finite likelihood: some embedding dimensions are constant "
            "or the embeddings are degenerate"
        )
    n_steps = max(1, math.ceil(settings.epochs * n_samples / settings.batch_size))
    show = show_progress_bar if show_progress_bar is not None else n_steps > PROGRESS_BAR_MIN_STEPS
    trainer, reason = _fast.fast_trainer(flow) if fast_path else (None, None)
    if fast_path and trainer is None:
        logger.warning("flow fast path not used (%s); training through autograd, about twice as slow", reason)
    with small_op_threads(device), trainer or contextlib.nullcontext():
        if trainer is not None:
            parameters, log_prob = trainer.parameters, trainer.log_prob
        else:
            parameters, log_prob = [p for p in flow.parameters() if p.requires_grad], flow.log_prob
        monitor = _Monitor(flow, parameters, early_stopping, n_samples, settings.batch_size) if early_stopping else None
        losses = _run(parameters, log_prob, data, settings, generator, n_steps, show, monitor)
        if monitor is not None:
            monitor.restore_best()
    flow.eval()
    result = TrainingResult(losses, initial, len(losses), trainer is not None)
    if monitor is not None:
        result.validation_curve = np.array(monitor.curve, dtype=np.float64)
        result.best_step = monitor.best_step
    return result


class _Monitor:
    """Early stopping: the held-out log-likelihood every few steps, the best parameters so far."""

    def __init__(self, flow: Flow, parameters: list[torch.nn.Parameter], rule: EarlyStopping, n_samples: int,
                 batch_size: int) -> None:
        self.flow, self.parameters, self.rule = flow, parameters, rule
        self.every = max(1, math.ceil(n_samples / batch_size / rule.checks_per_epoch))
        self.curve: list[tuple[int, float]] = []
        self.best = -math.inf
        self.best_step = 0
        self.best_values = [p.detach().clone() for p in parameters]
        self.since_best = 0

    def check(self, step: int) -> bool:
        """Score the held-out rows after ``step`` steps; ``True`` when training should stop."""
        if step % self.every:
            return False
        value = mean_log_likelihood(self.flow, self.rule.validation)
        self.curve.append((step, value))
        if value > self.best:
            self.best, self.best_step, self.since_best = value, step, 0
            self.best_values = [p.detach().clone() for p in self.parameters]
            return False
        self.since_best += 1
        return self.since_best >= self.rule.patience

    def restore_best(self) -> None:
        with torch.no_grad():
            for parameter, value in zip(self.parameters, self.best_values):
                parameter.copy_(value)


def _run(
    parameters: list[torch.nn.Parameter],
    log_prob: Callable[[torch.Tensor], torch.Tensor],
    data: torch.Tensor,
    settings: TrainingSettings,
    generator: torch.Generator,
    n_steps: int,
    show_progress_bar: bool,
    monitor: _Monitor | None = None,
) -> np.ndarray:
    """The minibatch loop: shuffle, loss, backward, clip, AdamW step; a reshuffle every epoch;
    with a ``monitor``, a held-out check every few steps that may stop it early."""
    device = data.device
    n_samples = data.shape[0]
    optimizer = _adamw(parameters, settings)
    # CUDA: keep the losses on the device and check them in blocks, not with a sync per step
    check_every = 1 if device.type == "cpu" else 50
    losses = torch.empty(n_steps, dtype=torch.float32, device=device)
    order = torch.randperm(n_samples, generator=generator)
    position = 0
    checked = 0
    for step in tqdm(range(n_steps), desc="fit flow", unit="step", disable=not show_progress_bar):
        if position >= n_samples:  # next epoch: reshuffle
            order, position = torch.randperm(n_samples, generator=generator), 0
        batch = data[order[position : position + settings.batch_size].to(device, non_blocking=True)]
        position += settings.batch_size
        loss = -log_prob(batch).mean()
        losses[step] = loss.detach()
        if step + 1 - checked >= check_every or step + 1 == n_steps:
            _check_finite_losses(losses, checked, step + 1, n_steps)
            checked = step + 1
        optimizer.zero_grad(set_to_none=False)
        loss.backward()
        if settings.clip_grad_norm:
            torch.nn.utils.clip_grad_norm_(parameters, settings.clip_grad_norm, foreach=True)
        optimizer.step()
        if monitor is not None and monitor.check(step + 1):
            losses = losses[: step + 1]
            break
    return losses.cpu().numpy()
