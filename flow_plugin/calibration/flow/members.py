"""The flows of a :class:`~flow_plugin.calibration.flow.calibrator.FlowCalibrator` (its ensemble's members), on
torch's side: built from a seed, trained on rows, run over rows, and restored from saved arrays.

The calibrator imports this module the first time it builds, trains, runs or restores a flow; it imports
torch and nflows (through :mod:`.glow` and :mod:`.train`), which checking a flow's hyper-parameters does not need.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
from nflows.flows.base import Flow

from flow_plugin._machine import resolve_device
from flow_plugin.calibration.flow.glow import build_glow, glow_of
from flow_plugin.calibration.flow.train import (INFERENCE_CHUNK, EarlyStopping, TrainingResult, TrainingSettings,
                                                mean_log_likelihood, train_flow)


def seeded_flow(n_features: int, seed: int, **architecture: Any) -> Flow:
    """The untrained flow (:func:`.glow.build_glow` with ``architecture``), its random start fixed by ``seed``;
    torch's global random state is left as it was."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        return build_glow(n_features, **architecture)


def fit_member(X: np.ndarray, flow: Flow, settings: TrainingSettings, *, device: str, validation_fraction: float,
               patience: int, fast_path: bool, show_progress_bar: bool | None) -> tuple[TrainingResult, float]:
    """Train ``flow`` on the rows of ``X`` on ``device`` (in place): with ``validation_fraction`` > 0, a random
    share of the rows (drawn from ``settings.seed``) is held out for early stopping. Returns the training result
    and the mean log-likelihood of the rows it trained on."""
    where = resolve_device(device)
    data = torch.from_numpy(X).to(where)
    stopping = None
    if validation_fraction > 0:
        order = torch.randperm(len(X), generator=torch.Generator().manual_seed(settings.seed + 10_000))
        n_held = max(1, int(round(validation_fraction * len(X))))
        stopping = EarlyStopping(data[order[:n_held].to(where)], patience)
        data = data[order[n_held:].to(where)]
    flow.to(where)
    result = train_flow(flow, data, settings, fast_path=fast_path, show_progress_bar=show_progress_bar,
                        early_stopping=stopping)
    return result, mean_log_likelihood(flow, data)


def run_rows(flow: Flow, X: np.ndarray, function: Callable[[torch.Tensor], torch.Tensor]) -> np.ndarray:
    """``function`` (a method of ``flow``, or of its inverse) over the rows of ``X``, in chunks, on the flow's
    device, without gradients; float32 rows back (a row of ``function``'s output per row of ``X``)."""
    device = next(flow.parameters()).device
    chunks = []
    with torch.inference_mode():
        for start in range(0, X.shape[0], INFERENCE_CHUNK):
            chunk = torch.from_numpy(X[start : start + INFERENCE_CHUNK]).to(device)
            chunks.append(function(chunk).float().cpu().numpy())
    return np.concatenate(chunks, axis=0)


def inverse_rows(flow: Flow, Z: np.ndarray) -> np.ndarray:
    """The inputs whose latents are the rows of ``Z`` (the flow run backwards)."""
    glow = glow_of(flow)
    return run_rows(flow, Z, lambda z: glow.inverse(z)[0])


def restored(flow: Flow, arrays: Mapping[str, np.ndarray], device: Any) -> Flow:
    """``flow`` with the saved weights ``arrays`` (every parameter and buffer by name, none missing or extra),
    on ``device``, in eval mode."""
    flow.load_state_dict({key: torch.from_numpy(np.array(value)) for key, value in arrays.items()}, strict=True)
    return flow.to(resolve_device(device)).eval()


def wait_for(device: str) -> None:
    """Return once the work queued on ``device`` has run (CUDA runs asynchronously; a CPU has nothing queued)."""
    if device.startswith("cuda"):
        torch.cuda.synchronize()


# TrainingSettings with them: the calibrator states its training through this module
__all__ = ["TrainingSettings", "fit_member", "inverse_rows", "restored", "run_rows", "seeded_flow", "wait_for"]
