"""The ``packed`` batch plan's forward pass: a batch's sentences end to end, nothing padded.

A batch of sentences of different lengths goes through the encoder as one sequence of all their tokens
(``input_ids`` of shape ``(1, total tokens)``), each sentence's position ids starting again at 0. Every
operator but attention works token by token, so it computes on the real tokens only; attention is kept
inside each sentence by an attention function of our own, registered with Hugging Face's
``AttentionInterface`` under :data:`ATTENTION_NAME`, which reads the sentences' boundaries (cumulative
lengths) that :func:`packed_hidden_states` sets for the call:

- on a CUDA device in bf16 or fp16, torch's variable-length flash attention
  (``torch.nn.attention.varlen.varlen_attn``, torch 2.9 and later): one kernel for the whole batch;
- elsewhere (a CPU, float32, an older torch), one ``scaled_dot_product_attention`` per group of
  sentences of one length: correct everywhere, and what the CPU tests check the plan with.

The pooled hidden states are laid back into a padded ``(sentences, longest, width)`` block with the padding
masked, so pooling is the padded plan's own arithmetic. Supported for the encoder types in
:data:`PACKED_MODEL_TYPES`, whose embeddings take absolute position ids from 0; the probe
(:mod:`flow_plugin.encoding.plan_probe`) also checks, before choosing it, that it agrees with the exact plan.
"""

from __future__ import annotations

import contextvars
from typing import Any

import numpy as np
import torch

#: the name the attention function is registered under (a model in the packed plan has it as its implementation)
ATTENTION_NAME = "flow_plugin_packed"
#: encoder types whose position ids count from 0 in every sentence (BERT and its distillations such as MiniLM)
PACKED_MODEL_TYPES: tuple[str, ...] = ("bert",)
#: the boundaries of the sentences in the sequence a packed forward pass is running: (cumulative lengths
#: as an int32 tensor on the device, the same as a list, the longest length)
_SEGMENTS: contextvars.ContextVar[tuple[torch.Tensor, list[int], int] | None] = contextvars.ContextVar(
    "flow_plugin_packed_segments", default=None)
_REGISTERED: list[bool] = []


def varlen_attention() -> Any:
    """torch's variable-length attention (``varlen_attn``), or ``None`` where this torch has none."""
    try:
        from torch.nn.attention.varlen import varlen_attn  # torch >= 2.9
    except ImportError:
        return None
    return varlen_attn


def _attention_interface() -> Any:
    """transformers' ``AttentionInterface`` (transformers >= 4.48), or ``None`` where this transformers has none."""
    try:
        # heavy (transformers' modelling code): loads when a model is set up, not with this module
        from transformers import AttentionInterface
    except ImportError:
        return None
    return AttentionInterface


def unsupported_reason(config: Any) -> str | None:
    """Why a model of ``config`` cannot run packed, or ``None`` when it can (its encoder type; the attention
    registration transformers offers)."""
    model_type = getattr(config, "model_type", None)
    if model_type not in PACKED_MODEL_TYPES:
        return f"model type {model_type!r} is not one of {', '.join(PACKED_MODEL_TYPES)}"
    if _attention_interface() is None:
        return "this transformers has no AttentionInterface"
    return None


def use_packed_attention(model: torch.nn.Module) -> None:
    """Make ``model`` attend within the sentences :func:`packed_hidden_states` names (registered once)."""
    if not _REGISTERED:
        _attention_interface().register(ATTENTION_NAME, _attention)
        _REGISTERED.append(True)
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation(ATTENTION_NAME)
    else:  # (older transformers)
        model.config._attn_implementation = ATTENTION_NAME


def _attention(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask: Any,
               scaling: float | None = None, dropout: float = 0.0, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """Hugging Face's attention-function interface: ``query``/``key``/``value`` ``(1, heads, tokens, head
    width)``, the result ``(1, tokens, heads, head width)``; each sentence attends to itself only."""
    segments = _SEGMENTS.get()
    if segments is None:
        raise RuntimeError(f"the {ATTENTION_NAME} attention runs only inside packed_hidden_states()")
    cumulative, bounds, longest = segments
    q, k, v = (tensor[0].transpose(0, 1) for tensor in (query, key, value))  # (tokens, heads, head width)
    varlen = varlen_attention()
    if varlen is not None and q.is_cuda and q.dtype in (torch.bfloat16, torch.float16) and v.dtype == q.dtype:
        # (the default scale is 1/sqrt(head width), BERT's; positional arguments: their names changed across torch)
        return varlen(q, k.to(q.dtype), v, cumulative, cumulative, longest, longest).unsqueeze(0), None
    return _attention_by_length(q, k, v, bounds, scaling).unsqueeze(0), None


def _attention_by_length(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bounds: list[int],
                         scaling: float | None) -> torch.Tensor:
    """Attention within each sentence, one ``scaled_dot_product_attention`` per group of sentences of one length."""
    output = torch.empty_like(q if q.dtype == v.dtype else v)
    starts, lengths = np.asarray(bounds[:-1]), np.diff(bounds)
    for length in np.unique(lengths):
        rows = torch.as_tensor(starts[lengths == length, None] + np.arange(length), device=q.device).reshape(-1)
        n = len(rows) // int(length)
        part = [tensor[rows].reshape(n, int(length), *tensor.shape[1:]).transpose(1, 2) for tensor in (q, k, v)]
        attended = torch.nn.functional.scaled_dot_product_attention(*part, scale=scaling)
        output[rows] = attended.transpose(1, 2).reshape(len(rows), *q.shape[1:]).to(output.dtype)
    return output


def packed_hidden_states(model: torch.nn.Module, ids: np.ndarray, lengths: np.ndarray, device: torch.device,
                         *, all_hidden_states: bool) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
    """``(hidden states, attention mask)`` of a batch given as ``ids`` (its sentences' ids end to end) and their
    ``lengths``, laid out as the padded plan's: each ``(sentences, longest, width)``, the mask ``(sentences,
    longest)``; only the last layer's unless ``all_hidden_states``."""
    bounds = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    longest = int(lengths.max())
    positions = np.arange(int(bounds[-1])) - np.repeat(bounds[:-1], lengths)
    input_ids = torch.from_numpy(ids).to(device, non_blocking=True).unsqueeze(0)
    position_ids = torch.from_numpy(positions).to(device, non_blocking=True).unsqueeze(0)
    cumulative = torch.from_numpy(bounds.astype(np.int32)).to(device, non_blocking=True)
    token = _SEGMENTS.set((cumulative, bounds.tolist(), longest))
    try:
        outputs = model(input_ids=input_ids, position_ids=position_ids, attention_mask=None,
                        output_hidden_states=all_hidden_states, return_dict=True)
    finally:
        _SEGMENTS.reset(token)
    states = outputs.hidden_states if all_hidden_states and outputs.hidden_states else (outputs.last_hidden_state,)
    valid = np.arange(longest) < lengths[:, None]
    rows, columns = (torch.from_numpy(index).to(device) for index in np.nonzero(valid))
    unpacked = []
    for state in states:
        block = state.new_zeros(len(lengths), longest, state.shape[-1])
        block[rows, columns] = state[0]
        unpacked.append(block)
    return tuple(unpacked), torch.from_numpy(valid.astype(np.int64)).to(device, non_blocking=True)
