"""The frozen backbone: a Hugging Face encoder plus a pooling strategy.

``Backbone`` loads any ``AutoModel``/``AutoTokenizer`` pair by hub id or local folder,
freezes it, and turns sentences into pooled float32 embeddings:

- sentences are tokenized once and batched by the batch plan (:mod:`flow_plugin.encoding.batching`;
  by default each batch holds sentences of one length, so nothing is padded); results come back
  in input order;
- on a CUDA device, a batch that runs out of memory is split in halves and retried (the
  length-exact plan makes the halves give the same embeddings); ``oom_halvings`` counts it;
- the forward pass runs under ``torch.inference_mode()`` with the chosen autocast
  precision (see :mod:`flow_plugin.encoding.device`); for bf16/fp16 the weights of the linear layers
  are stored in that dtype once at load (autocast would otherwise re-cast them on every
  batch), and on a CPU in bf16 they also run through oneDNN with prepacked weights;
- weights load lazily, on the first call that needs them, so building a Backbone (or a
  model whose embeddings are all cached) costs nothing.
"""

from __future__ import annotations

import functools
import itertools
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from flow_plugin._validation import check_sentences
from flow_plugin._machine import bf16_kernel_family, resolve_device
from flow_plugin.encoding.batching import BATCH_PLAN, BATCH_PLANS, plan_batches
from flow_plugin.encoding.device import (
    PrecisionChoice,
    auto_precision_from_environment,
    autocast_dtype,
    check_precision,
    choose_precision,
)
from flow_plugin.encoding.options import DEFAULT_BATCH_SIZE, check_batch_size
from flow_plugin.errors import InputError, WeightsUnavailableError
from flow_plugin.encoding.pooling import Pooling, parse_pooling

logger = logging.getLogger(__name__)

#: The paper truncates every sentence to 64 word pieces (run_siamese.sh: --max_seq_length=64).
DEFAULT_MAX_SEQ_LENGTH = 64
#: Sentences per tokenizer call (the ids are kept as flat arrays between calls).
TOKENIZE_CHUNK = 4096
#: Show a progress bar by default once an input spans more batches than this.
PROGRESS_BAR_MIN_BATCHES = 8
#: CPU bf16: run linear layers on oneDNN-prepacked weights with the bias fused in.
ONEDNN_PACKED_LINEARS = True
#: Tokens of a typical STS sentence with its special tokens (STS-B test+dev, all-MiniLM-L6-v2's tokenizer: mean 14.3, median 12): with the batch size,
#: the rows a linear layer multiplies at once, which its weights are packed and probed for.
TYPICAL_SENTENCE_TOKENS = 16


def weights_unavailable(name: str, error: OSError, install_hint: str | None, source: str | None = None) -> WeightsUnavailableError:
    """The error for weights that Hugging Face could not load (``error``): one line, naming the
    install command when the weights come in a package (``install_hint``), else what to check."""
    cause = " ".join(str(error).split()).split(". ")[0][:200] or type(error).__name__  # its first sentence
    where = f"{source}: " if source else ""
    if install_hint is None:
        return WeightsUnavailableError(
            f"{where}the weights of {name} could not be loaded ({cause}); check the name and revision, the "
            "network, or put them in the Hugging Face cache and set HF_HUB_OFFLINE=1"
        )
    return WeightsUnavailableError(
        f"{where}the weights of {name} are not installed locally and could not be loaded from the Hugging Face "
        f"Hub ({cause}); install them with `{install_hint}`"
    )


@dataclass(frozen=True)
class BackboneKey:
    """Everything that determines a pooled embedding, apart from the text itself: the weights,
    the pooling and truncation, and what can change its last bits: the precision, the kernels
    that run the forward pass and the batch plan."""

    model: str
    revision: str | None
    pooling: str
    max_seq_length: int
    precision: str
    kernels: str = "torch"
    batch_plan: str = BATCH_PLAN

    def as_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "revision": self.revision,
            "pooling": self.pooling,
            "max_seq_length": self.max_seq_length,
            "precision": self.precision,
            "kernels": self.kernels,
            "batch_plan": self.batch_plan,
        }


class Backbone:
    """A frozen Hugging Face encoder with pooling.

    Parameters
    ----------
    model_name_or_path:
        Hub id (``"bert-base-uncased"``) or a local folder holding config, tokenizer and weights.
    name:
        The identity of these weights in cache keys and logs (default: ``model_name_or_path``).
        Give the hub id when loading a local copy, so caches do not depend on the folder.
    revision:
        Hub revision (branch, tag or commit); ignored for local folders.
    pooling:
        ``"cls"``, ``"last-avg"``, ``"last2avg"``, ``"first-last-avg"`` or a list of
        ``hidden_states`` indices (see :mod:`flow_plugin.encoding.pooling`).
    max_seq_length:
        Word pieces kept per sentence (the paper uses 64); more than the tokenizer takes is an
        error when the weights load, never a silent cap.
    batch_size:
        Sentences per forward pass (``None``: 64).
    device:
        ``None``/``"auto"`` (CUDA if available, else CPU), or any torch device.
    precision:
        ``"auto"``, ``"float32"``, ``"bf16"`` or ``"fp16"`` autocast for the forward pass. ``auto`` is
        resolved by :func:`~flow_plugin.encoding.device.choose_precision` (on a CPU: measured, see
        :attr:`precision_choice`); the key and the records hold the resolved one.
    show_progress_bar:
        ``None`` shows a bar for inputs longer than a few batches.
    batch_plan:
        ``"length-exact"`` (default: no padding, an embedding never depends on its batch mates) or
        ``"padded"`` (length-sorted batches padded to their longest; see :mod:`flow_plugin.encoding.batching`).
    trust_remote_code:
        Passed to ``from_pretrained`` for backbones that need custom code.
    expected_embedding_dim, source:
        The width the weights must have (a registry file's ``embedding_dim``), checked as soon as
        the model's config is read; ``source`` names where that number (and ``max_seq_length``,
        checked against the tokenizer's limit when the weights load) came from in the error.
    install_hint:
        The command that installs these weights where the Hub cannot be reached (a registry file's
        ``[local_weights] install``). When config, tokenizer or weights fail to load, the error
        (:class:`~flow_plugin.errors.WeightsUnavailableError`, one line) names it, or what to check
        when there is none, instead of the raw Hugging Face one.
    """

    def __init__(
        self,
        model_name_or_path: str | os.PathLike[str],
        *,
        name: str | None = None,
        revision: str | None = None,
        pooling: str | list[int] | Pooling = "first-last-avg",
        max_seq_length: int = DEFAULT_MAX_SEQ_LENGTH,
        batch_size: int | None = None,
        device: str | torch.device | None = None,
        precision: str = "auto",
        show_progress_bar: bool | None = None,
        batch_plan: str = BATCH_PLAN,
        trust_remote_code: bool = False,
        expected_embedding_dim: int | None = None,
        source: str | None = None,
        install_hint: str | None = None,
    ) -> None:
        if not isinstance(max_seq_length, int) or max_seq_length < 2:
            raise InputError(f"max_seq_length must be an int >= 2, got {max_seq_length!r}")
        if batch_plan not in BATCH_PLANS:
            raise InputError(f"unknown batch_plan {batch_plan!r}; use one of {', '.join(BATCH_PLANS)}")
        self.batch_plan = batch_plan
        #: batches split in halves after a CUDA out-of-memory error, since this backbone was built
        self.oom_halvings = 0
        batch_size = check_batch_size(batch_size)
        self.model_name_or_path = str(model_name_or_path)
        self.name = name or self.model_name_or_path
        self.revision = revision
        self.pooling = parse_pooling(pooling)
        self.max_seq_length = max_seq_length
        self.batch_size = DEFAULT_BATCH_SIZE if batch_size is None else batch_size
        self.device = resolve_device(device)
        #: the precision asked for; :attr:`precision` is what it resolved to
        self.requested_precision = check_precision(precision)
        # On a CPU, "auto" is measured for this model's shapes: decided on first use (reading the config, not the weights)
        needs_probe = precision == "auto" and self.device.type == "cpu" and auto_precision_from_environment() is None
        self._precision_choice: PrecisionChoice | None = None if needs_probe else choose_precision(precision, self.device)
        self._precision_lock = threading.Lock()
        self.show_progress_bar = show_progress_bar
        self.trust_remote_code = trust_remote_code
        self.expected_embedding_dim = expected_embedding_dim
        self.source = source
        self.install_hint = install_hint
        self._config: Any = None
        self._tokenizer: Any = None
        self._model: torch.nn.Module | None = None
        self._load_lock = threading.Lock()

    # ------------------------------------------------------------------ identity
    @property
    def precision_choice(self) -> PrecisionChoice:
        """The resolved precision and why (:func:`flow_plugin.encoding.device.choose_precision`). On a
        CPU, ``auto`` is decided on first use by the bf16 probe (cached per machine) at this model's
        width (``expected_embedding_dim``, else the config's ``hidden_size``; the weights are not
        loaded) and this backbone's batch size."""
        if self._precision_choice is None:
            with self._precision_lock:
                if self._precision_choice is None:
                    from flow_plugin.encoding.precision_probe import ProbeShapes

                    width = self.expected_embedding_dim or int(self.config.hidden_size)
                    shapes = ProbeShapes.for_width(width, self.batch_size)
                    choice = choose_precision(self.requested_precision, self.device, shapes=shapes)
                    logger.info("%s: precision %s", self.name, choice.describe())
                    self._precision_choice = choice
        return self._precision_choice

    @property
    def precision(self) -> str:
        """The forward pass's precision: ``float32``, ``bf16`` or ``fp16`` (``auto`` resolved)."""
        return self.precision_choice.precision

    @property
    def key(self) -> BackboneKey:
        """The cache identity of this backbone's embeddings."""
        return BackboneKey(
            model=self.name,
            revision=self.revision,
            pooling=self.pooling.name,
            max_seq_length=self.max_seq_length,
            precision=self.precision,
            kernels=self.kernels,
            batch_plan=self.batch_plan,
        )

    @property
    def kernels(self) -> str:
        """Which kernels run the forward pass: the device, the precision, for bf16 on a CPU the
        CPU's bf16 family (AMX, AVX512-BF16, or emulated: each accumulates in its own order),
        and whether the linear layers run on oneDNN-packed weights. Known without loading."""
        name = f"{self.device.type}-{self.precision}"
        if self.device.type == "cuda":
            major, minor = torch.cuda.get_device_capability(self.device)
            name += f"-sm{major}{minor}"
        elif self.precision == "bf16":
            name += f"-{bf16_kernel_family()}"
            if ONEDNN_PACKED_LINEARS and onednn_packing_available():
                name += "+onednn-packed"
        return name

    def __repr__(self) -> str:
        return (
            f"Backbone({self.model_name_or_path!r}, revision={self.revision!r}, pooling={self.pooling.name!r}, "
            f"max_seq_length={self.max_seq_length}, device={str(self.device)!r}, precision={self.precision!r})"
        )

    # ------------------------------------------------------------------ loading
    def _pretrained_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"trust_remote_code": self.trust_remote_code}
        if self.revision and not Path(self.model_name_or_path).is_dir():
            kwargs["revision"] = self.revision
        return kwargs

    def _from_pretrained(self, auto_class: Any) -> Any:
        """``auto_class.from_pretrained`` of these weights; a failure to find them (Hugging Face raises
        ``OSError``: offline, unreachable, not cached, no such folder) is a
        :class:`~flow_plugin.errors.WeightsUnavailableError` naming the install command, if any."""
        try:
            return auto_class.from_pretrained(self.model_name_or_path, **self._pretrained_kwargs())
        except OSError as error:
            raise weights_unavailable(self.name, error, self.install_hint, self.source) from error

    @property
    def config(self) -> Any:
        """The model's ``PretrainedConfig`` (loaded on first access; no weights)."""
        if self._config is None:
            from transformers import AutoConfig

            config = self._from_pretrained(AutoConfig)
            self._check_width(config)
            self._config = config
        return self._config

    def _check_width(self, config: Any) -> None:
        width = getattr(config, "hidden_size", None)
        if self.expected_embedding_dim is not None and width != self.expected_embedding_dim:
            where = f"{self.source}: " if self.source else ""
            raise InputError(
                f"{where}embedding_dim is {self.expected_embedding_dim}, but the weights of {self.model_name_or_path} "
                f"give {width}-dimensional embeddings (hidden_size); correct embedding_dim"
            )

    def _check_length(self, tokenizer: Any) -> None:
        """``max_seq_length`` within the tokenizer's limit: it is never capped silently, since the
        cache key, the MTEB metadata and the run records all say ``max_seq_length``."""
        limit = getattr(tokenizer, "model_max_length", None)
        # (a tokenizer that states no limit has a huge placeholder, int(1e30))
        if isinstance(limit, int) and 0 < limit < self.max_seq_length and limit < 10**9:
            where = f"{self.source}: " if self.source else ""
            raise InputError(
                f"{where}max_seq_length is {self.max_seq_length}, but {self.model_name_or_path} takes at most {limit} "
                f"tokens (its tokenizer's model_max_length); set max_seq_length to {limit} or less"
            )

    @property
    def embedding_dim(self) -> int:
        return int(self.config.hidden_size)

    @property
    def is_loaded(self) -> bool:
        return self._model is not None

    def load(self) -> Backbone:
        """Load tokenizer and weights now (otherwise the first ``encode`` does it)."""
        with self._load_lock:
            if self._model is not None:
                return self
            from transformers import AutoModel, AutoTokenizer

            logger.info("loading backbone %s (revision %s) on %s", self.model_name_or_path, self.revision, self.device)
            tokenizer = self._from_pretrained(AutoTokenizer)
            model = self._from_pretrained(AutoModel)
            model.eval()
            for parameter in model.parameters():
                parameter.requires_grad_(False)
            model.to(self.device)
            prepare_linear_layers(model, self.precision, self.device, batch_tokens=self.batch_size * TYPICAL_SENTENCE_TOKENS)
            n_hidden_states = int(model.config.num_hidden_layers) + 1
            self.pooling.validate_depth(n_hidden_states)
            self._check_width(model.config)
            self._check_length(tokenizer)
            drop_unused_layers(model, self.pooling.deepest_layer(n_hidden_states))
            self._config = model.config
            self._tokenizer = tokenizer
            self._model = model
        return self

    @property
    def model(self) -> torch.nn.Module:
        return self.load()._model  # type: ignore[return-value]

    @property
    def tokenizer(self) -> Any:
        return self.load()._tokenizer

    # ------------------------------------------------------------------ encoding
    def tokenize(self, sentences: list[str]) -> list[list[int]]:
        """Word-piece ids of each sentence, truncated to ``max_seq_length`` (special tokens included;
        loading checked that the tokenizer takes that many)."""
        encoded = self.tokenizer(
            sentences,
            add_special_tokens=True,
            truncation=True,
            max_length=self.max_seq_length,
            padding=False,
            return_attention_mask=False,
            return_token_type_ids=False,
        )
        return encoded["input_ids"]

    def _token_arrays(self, sentences: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """``(lengths, flat ids)`` of ``tokenize(sentences)`` as int64 arrays, tokenized in
        chunks so that the tokenizer's per-sentence Python objects never exist for the whole
        input at once (for 100k sentences they took about 400 MB; the arrays take 15 MB)."""
        lengths_parts, ids_parts = [], []
        for start in range(0, len(sentences), TOKENIZE_CHUNK):
            token_ids = self.tokenize(sentences[start : start + TOKENIZE_CHUNK])
            lengths = np.fromiter((len(ids) for ids in token_ids), dtype=np.int64, count=len(token_ids))
            lengths_parts.append(lengths)
            ids_parts.append(np.fromiter(itertools.chain.from_iterable(token_ids), dtype=np.int64, count=int(lengths.sum())))
        return np.concatenate(lengths_parts), np.concatenate(ids_parts)

    def encode(
        self,
        sentences: list[str],
        *,
        batch_size: int | None = None,
        show_progress_bar: bool | None = None,
    ) -> np.ndarray:
        """Pooled embeddings, float32 array of shape (len(sentences), embedding_dim), in input order.
        ``batch_size`` (default: the backbone's) is checked like the constructor's."""
        batch_size = self.batch_size if batch_size is None else check_batch_size(batch_size)
        sentences = check_sentences(sentences)
        if not sentences:
            return np.empty((0, self.embedding_dim), dtype=np.float32)
        lengths, flat_ids = self._token_arrays(sentences)
        batches = plan_batches(self.batch_plan, lengths, batch_size)
        if show_progress_bar is None:
            show_progress_bar = self.show_progress_bar
        if show_progress_bar is None:
            show_progress_bar = len(batches) > PROGRESS_BAR_MIN_BATCHES
        output = np.empty((len(sentences), self.embedding_dim), dtype=np.float32)
        # every id in one flat array, so a batch is gathered with one vectorised index
        starts = np.zeros(len(sentences), dtype=np.int64)
        np.cumsum(lengths[:-1], out=starts[1:])
        dtype = autocast_dtype(self.precision)
        with torch.inference_mode(), torch.autocast(
            device_type=self.device.type, dtype=dtype or torch.float32, enabled=dtype is not None
        ):
            for batch_index in tqdm(
                batches,
                desc=f"encode {Path(self.model_name_or_path).name}",
                unit="batch",
                disable=not show_progress_bar,
            ):
                self._encode_batch(batch_index, lengths, starts, flat_ids, output)
        if not np.isfinite(output).all():
            bad = np.flatnonzero(~np.isfinite(output).all(axis=1))
            raise InputError(
                f"backbone {self.model_name_or_path} produced NaN/inf embeddings for {len(bad)} sentence(s), "
                f"e.g. index {int(bad[0])}: {sentences[int(bad[0])]!r:.80}; try precision='float32'"
            )
        return output


    def _encode_batch(self, batch_index: np.ndarray, lengths: np.ndarray, starts: np.ndarray, flat_ids: np.ndarray,
                      output: np.ndarray) -> None:
        """Pool one batch into ``output[batch_index]``; after a CUDA out-of-memory error, each half of it."""
        try:
            output[batch_index] = self._forward(batch_index, lengths, starts, flat_ids)
        except torch.OutOfMemoryError:
            if len(batch_index) == 1:
                raise InputError(
                    f"backbone {self.model_name_or_path} ran out of {self.device} memory on a single sentence of "
                    f"{int(lengths[batch_index[0]])} tokens; use a smaller max_seq_length or another device"
                ) from None
            if self.device.type == "cuda":
                torch.cuda.empty_cache()
            self.oom_halvings += 1
            half = len(batch_index) // 2
            logger.warning("%s: out of %s memory on a batch of %d sentences; going on with batches of %d",
                           self.model_name_or_path, self.device, len(batch_index), half)
            self._encode_batch(batch_index[:half], lengths, starts, flat_ids, output)
            self._encode_batch(batch_index[half:], lengths, starts, flat_ids, output)

    def _forward(self, batch_index: np.ndarray, lengths: np.ndarray, starts: np.ndarray,
                 flat_ids: np.ndarray) -> np.ndarray:
        """The pooled embeddings of one batch (ids to the device once, pooled rows back once)."""
        batch_lengths = lengths[batch_index]
        width = int(batch_lengths.max())
        positions = np.arange(width, dtype=np.int64)
        if int(batch_lengths.min()) == width:  # one length: no padding (the length-exact plan's every batch)
            ids = flat_ids[starts[batch_index, None] + positions]
            mask = None
        else:
            valid = positions < batch_lengths[:, None]
            gathered = flat_ids[starts[batch_index, None] + np.minimum(positions, batch_lengths[:, None] - 1)]
            ids = np.where(valid, gathered, self.tokenizer.pad_token_id or 0)
            mask = torch.from_numpy(valid.astype(np.int64)).to(self.device, non_blocking=True)
        input_ids = torch.from_numpy(ids).to(self.device, non_blocking=True)
        attention_mask = torch.ones_like(input_ids) if mask is None else mask
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            output_hidden_states=self.pooling.needs_all_hidden_states,
            return_dict=True,
        )
        hidden_states = outputs.hidden_states if self.pooling.needs_all_hidden_states else None
        if not hidden_states:  # last layer only, or no transformer layer kept (pooling [0])
            hidden_states = (outputs.last_hidden_state,)
        return self.pooling(hidden_states, attention_mask).float().cpu().numpy()


def drop_unused_layers(model: torch.nn.Module, deepest: int) -> int:
    """Run only the transformer layers the pooling reads: keep the first ``deepest`` layers of an
    encoder whose layers sit in ``model.encoder.layer`` (BERT, RoBERTa, MPNet, ...); return how
    many were dropped. The kept layers compute exactly what they computed before (each layer
    sees only the layers below it), so ``hidden_states[0..deepest]`` are unchanged; pooling the
    embedding layer (``[0]``) then costs no transformer layer at all."""
    layers = getattr(getattr(model, "encoder", None), "layer", None)
    if not isinstance(layers, torch.nn.ModuleList) or not 0 <= deepest < len(layers):
        return 0
    dropped = len(layers) - deepest
    model.encoder.layer = torch.nn.ModuleList(list(layers)[:deepest])
    model.config.num_hidden_layers = deepest
    return dropped


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
    ``batch_tokens`` rows); float32 leaves them as they are. What the backbone does at load, and
    what the CPU precision probe (:mod:`flow_plugin.encoding.precision_probe`) times."""
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
