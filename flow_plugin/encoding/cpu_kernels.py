"""CPU (and low-precision) kernel tuning of a frozen encoder's linear layers: what
:meth:`Backbone.load <flow_plugin.encoding.backbone.Backbone.load>` does to the model once the weights are in,
and what the CPU precision probe (:mod:`flow_plugin.encoding.precision_probe`) times.

- bf16 / fp16: the weights of every ``nn.Linear`` are stored in that dtype once (:func:`store_linear_weights_as`);
- CPU bf16: the linear layers also run through oneDNN on prepacked weights with the bias fused in
  (:func:`pack_linear_weights`, where :func:`onednn_packing_available` says this torch build can);
- CPU int8 (an explicit option, never ``auto``): dynamic int8 quantization of the linear layers, weights
  per output channel, activations per batch (:func:`quantize_linear_layers_int8`).

:func:`prepare_linear_layers` picks what a resolved precision needs; float32 leaves the model as it is.
"""

from __future__ import annotations

import functools
import warnings
from typing import Any

import torch
from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

from flow_plugin.encoding.options import RESOLVED_PRECISIONS

#: CPU bf16: run linear layers on oneDNN-prepacked weights with the bias fused in.
ONEDNN_PACKED_LINEARS = True
#: Tokens of a typical STS sentence with its special tokens (STS-B test+dev, all-MiniLM-L6-v2's tokenizer: mean 14.3,
#: median 12): with the batch size, the rows a linear layer multiplies at once, which its weights are packed and
#: probed for.
TYPICAL_SENTENCE_TOKENS = 16
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def autocast_dtype(precision: str) -> torch.dtype | None:
    """The autocast dtype for a resolved precision (``None`` for float32 and int8: no autocast).

    >>> autocast_dtype("bf16"), autocast_dtype("int8")
    (torch.bfloat16, None)
    """
    return _DTYPES.get(precision)


def precision_of(dtype: Any) -> str | None:
    """The resolved precision a torch dtype computes in (a model loaded by someone else), or ``None``.

    >>> precision_of(torch.float32), precision_of(torch.bfloat16), precision_of(torch.int64)
    ('float32', 'bf16', None)
    """
    names = {torch.float32: RESOLVED_PRECISIONS[0], **{value: name for name, value in _DTYPES.items()}}
    return names.get(dtype)


def _cast_input_to_weight_dtype(module: torch.nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """Forward pre-hook of a low-precision Linear: feed it inputs of its own dtype.

    Under autocast this is the cast autocast would make anyway; outside autocast it keeps the
    module usable with float32 inputs."""
    inputs = args[0] if args else None
    weight_dtype = module.weight.dtype
    if isinstance(inputs, torch.Tensor) and inputs.is_floating_point() and inputs.dtype != weight_dtype:
        return (inputs.to(weight_dtype), *args[1:])
    return None


def store_linear_weights_as(model: torch.nn.Module, dtype: torch.dtype) -> int:
    """Keep the weight and bias of every ``nn.Linear`` in ``dtype``; return how many were converted.

    Autocast does not cache the casts of frozen weights (its cache holds only tensors that
    require grad), so under autocast every forward pass re-casts every float32 weight matrix:
    on a CPU this memory-bound copy took about as long as the bf16 matmuls themselves. Casting
    once at load gives bit-identical outputs (autocast would round the same float32 values to
    the same ``dtype``), halves the weights' memory, and removes that copy. Embeddings and
    LayerNorms stay float32, as autocast runs them (so does the residual stream: a full bf16
    model was measured no faster, and is less exact).
    """
    converted = 0
    for module in model.modules():
        if isinstance(module, torch.nn.Linear) and module.weight.dtype != dtype:
            module.weight = torch.nn.Parameter(module.weight.detach().to(dtype), requires_grad=False)
            if module.bias is not None:
                module.bias = torch.nn.Parameter(module.bias.detach().to(dtype), requires_grad=False)
            module.register_forward_pre_hook(_cast_input_to_weight_dtype)
            converted += 1
    return converted


def prepare_linear_layers(model: torch.nn.Module, precision: str, device: torch.device, *, batch_tokens: int) -> None:
    """Ready the linear layers of ``model`` (already on ``device``) for a resolved ``precision``:
    for bf16/fp16 their weights are stored in that dtype (:func:`store_linear_weights_as`), and on
    a CPU in bf16 they run on oneDNN-packed weights (:func:`pack_linear_weights`, packed for
    ``batch_tokens`` rows); int8 quantizes them (:func:`quantize_linear_layers_int8`, CPU only);
    float32 leaves them as they are. What the backbone does at load, and
    what the CPU precision probe (:mod:`flow_plugin.encoding.precision_probe`) times."""
    if precision == "int8":
        quantize_linear_layers_int8(model)
        return
    dtype = autocast_dtype(precision)
    if dtype is None:
        return
    store_linear_weights_as(model, dtype)
    if ONEDNN_PACKED_LINEARS and device.type == "cpu" and dtype == torch.bfloat16:
        pack_linear_weights(model, batch_tokens=batch_tokens)


def _packed_linear_forward(module: torch.nn.Linear, inputs: torch.Tensor) -> torch.Tensor:
    """``nn.Linear.forward`` through oneDNN with the prepacked weight; plain ``F.linear`` for
    anything else (another dtype or device, or gradients wanted)."""
    packed = module._flow_plugin_packed_weight  # type: ignore[attr-defined]
    if inputs.dtype != module.weight.dtype or inputs.device.type != "cpu" or (torch.is_grad_enabled() and module.weight.requires_grad):
        return torch.nn.functional.linear(inputs.to(module.weight.dtype), module.weight, module.bias)
    if not inputs.is_contiguous():
        inputs = inputs.contiguous()
    return torch.ops.mkldnn._linear_pointwise(inputs, packed, module.bias, "none", [], "")


@functools.lru_cache(maxsize=1)
def onednn_packing_available() -> bool:
    """Whether this torch build has oneDNN's packed bf16 linear operators and they agree with
    ``F.linear`` on a small probe (checked once per process, without any model)."""
    try:
        reorder = torch.ops.mkldnn._reorder_linear_weight
        linear = torch.ops.mkldnn._linear_pointwise
        generator = torch.Generator().manual_seed(0)  # leaves the global RNG alone
        probe_weight = torch.randn(24, 40, generator=generator).to(torch.bfloat16)
        probe_bias = torch.randn(24, generator=generator).to(torch.bfloat16)
        probe = torch.randn(3, 5, 40, generator=generator).to(torch.bfloat16)
        got = linear(probe, reorder(probe_weight, 15), probe_bias, "none", [], "").float()
        want = torch.nn.functional.linear(probe, probe_weight, probe_bias).float()
        return got.shape == want.shape and torch.allclose(got, want, rtol=2e-2, atol=2e-2)
    except (AttributeError, RuntimeError, TypeError):
        return False


def pack_linear_weights(model: torch.nn.Module, *, batch_tokens: int) -> int:
    """CPU bf16: give every bf16 ``nn.Linear`` a oneDNN-prepacked copy of its weight and run it
    through oneDNN's linear primitive (bias fused into the matmul; no per-call weight reorder,
    no bias broadcast copy). ``module.weight`` stays a plain tensor. Returns how many were
    packed; 0 (and nothing changed) where :func:`onednn_packing_available` says no.

    The packed copy is made once and not updated: this is for frozen models. The results
    equal ``F.linear``'s up to bf16 rounding of the accumulation order (bit-identical for
    all-MiniLM-L6-v2, within 0.003 for all-mpnet-base-v2 embeddings; STS-B Spearman moved by
    less than 0.0001), which is why the backbone's key names the packed kernels. Measured on a
    2-core AMX CPU: about 10% more sentences per second.
    """
    if not onednn_packing_available():
        return 0
    reorder = torch.ops.mkldnn._reorder_linear_weight
    packed = 0
    for module in model.modules():
        if type(module) is torch.nn.Linear and module.weight.dtype == torch.bfloat16 and module.weight.device.type == "cpu":
            module._flow_plugin_packed_weight = reorder(module.weight.detach(), batch_tokens)  # type: ignore[attr-defined]
            module.forward = functools.partial(_packed_linear_forward, module)  # type: ignore[method-assign]
            packed += 1
    return packed


def quantize_linear_layers_int8(model: torch.nn.Module) -> int:
    """Replace every ``nn.Linear`` of ``model`` (on the CPU) by torch's dynamically quantized int8 linear:
    weights rounded to int8 once, per output channel; each batch's activations quantized on the fly, per
    tensor; int32 accumulation; float32 in and out (torch's x86 quantized engine: VNNI int8 dot products
    where the CPU has them). Returns how many were replaced.

    This loses accuracy: on all-MiniLM-L6-v2's STS-B test embeddings about 0.7 Spearman points below float32
    (docs/evidence.md gives the measured figure), which is why it is never chosen by ``auto``.
    """
    count = sum(1 for module in model.modules() if type(module) is torch.nn.Linear)
    with warnings.catch_warnings():  # torch announces that these quantization APIs move to torchao (torch 2.13)
        warnings.filterwarnings("ignore", category=UserWarning, message=".*deprecated.*")
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        warnings.filterwarnings("ignore", category=FutureWarning)
        quantize_dynamic(model, {torch.nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8, inplace=True)
    return count
