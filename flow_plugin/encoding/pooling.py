"""Pooling strategies: hidden states of a transformer -> one vector per sentence.

Every strategy except ``cls`` is an attention-masked mean over tokens (padding is
excluded; [CLS]/[SEP] are included, as in the official BERT-flow code and in
sentence-transformers), averaged over a set of layers. Layer indices refer to
Hugging Face's ``hidden_states`` tuple: 0 is the embedding output, 1 the first
transformer layer, -1 the last one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is needed only to pool, not to parse or validate a pooling spec
    import torch

from flow_plugin.errors import InputError, InputTypeError

#: Named strategies and the ``hidden_states`` indices they average.
NAMED_LAYER_POOLINGS: dict[str, tuple[int, ...]] = {
    # mean over tokens of the last layer (sentence-transformers' "mean pooling")
    "last-avg": (-1,),
    # the true last two layers
    "last2avg": (-2, -1),
    # layer 1 and the last layer. The official BERT-flow code computes this under the name
    # "avg-last-2" (run_siamese.py loops ``all_encoder_layers[-i] for i in range(2)``, and
    # ``[-0]`` is the first layer), which the paper's tables call "last2avg".
    "first-last-avg": (1, -1),
}
POOLING_NAMES: tuple[str, ...] = ("cls", *NAMED_LAYER_POOLINGS)


@dataclass(frozen=True)
class Pooling:
    """A pooling strategy. Build one with :func:`parse_pooling`.

    ``layers`` are the averaged ``hidden_states`` indices; ``cls`` takes the last layer's
    first token (the common sentence-transformers meaning; the official BERT-flow code's
    "cls" used BERT's tanh pooler output instead).
    """

    name: str
    layers: tuple[int, ...]
    use_cls_token: bool = False

    @property
    def needs_all_hidden_states(self) -> bool:
        return self.layers != (-1,)

    def deepest_layer(self, n_hidden_states: int) -> int:
        """The deepest ``hidden_states`` index this pooling reads, for a model with
        ``n_hidden_states`` entries (layers + 1)."""
        return max(index % n_hidden_states for index in self.layers)

    def validate_depth(self, n_hidden_states: int) -> None:
        """Check every layer index against a model with ``n_hidden_states`` entries (layers + 1)."""
        for index in self.layers:
            if not -n_hidden_states <= index < n_hidden_states:
                raise InputError(
                    f"pooling {self.name!r} uses hidden_states[{index}], but the model has only "
                    f"{n_hidden_states} hidden states (valid indices {-n_hidden_states}..{n_hidden_states - 1})"
                )

    def __call__(self, hidden_states: Sequence[torch.Tensor], attention_mask: torch.Tensor) -> torch.Tensor:
        """Pool a batch: ``hidden_states`` as returned by HF (tuple of (B, T, d)), mask (B, T)."""
        if self.use_cls_token:
            return hidden_states[-1][:, 0].float()
        mask = attention_mask.float().unsqueeze(-1)
        summed = hidden_states[self.layers[0]].float()
        for index in self.layers[1:]:
            summed = summed + hidden_states[index].float()
        token_sum = (summed * mask).sum(dim=1)
        token_count = mask.sum(dim=1).clamp_min(1.0)
        return token_sum / (token_count * len(self.layers))

    def __str__(self) -> str:
        return self.name


def parse_pooling(spec: str | Sequence[int] | Pooling) -> Pooling:
    """Accept a name (``cls``, ``last-avg``, ``last2avg``, ``first-last-avg``), a list of layer
    indices such as ``[1, -1]``, or the same list written ``"1,-1"``."""
    if isinstance(spec, Pooling):
        return spec
    if isinstance(spec, str):
        text = spec.strip().lower()
        if text == "cls":
            return Pooling("cls", (-1,), use_cls_token=True)
        if text in NAMED_LAYER_POOLINGS:
            return Pooling(text, NAMED_LAYER_POOLINGS[text])
        try:
            layers = tuple(int(part) for part in text.replace("layers:", "").split(","))
        except ValueError:
            raise InputError(
                f"unknown pooling {spec!r}; use one of {', '.join(POOLING_NAMES)} "
                "or a comma-separated list of hidden_states indices such as '1,-1'"
            ) from None
        return _layer_list_pooling(layers)
    if isinstance(spec, Sequence) and not isinstance(spec, (bytes, bytearray)):
        if not spec or not all(isinstance(i, int) and not isinstance(i, bool) for i in spec):
            raise InputTypeError(f"a pooling layer list must be a non-empty list of int, got {spec!r}")
        return _layer_list_pooling(tuple(spec))
    raise InputTypeError(f"pooling must be a name or a list of layer indices, got {type(spec).__name__}")


def _layer_list_pooling(layers: tuple[int, ...]) -> Pooling:
    if not layers:
        raise InputError("a pooling layer list must not be empty")
    if len(set(layers)) != len(layers):
        raise InputError(f"pooling layer list {list(layers)} repeats an index")
    for name, named_layers in NAMED_LAYER_POOLINGS.items():
        if layers == named_layers:
            return Pooling(name, named_layers)
    return Pooling("layers:" + ",".join(str(i) for i in layers), layers)
