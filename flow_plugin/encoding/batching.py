"""The batch plan: which sentences go through the backbone together.

Plan ``"length-exact"`` (the default on every device): a batch holds sentences of one token length,
so no sentence is ever padded. Padding is what made an embedding depend on its batch mates: in
bf16, a sentence batched with a longer one came out up to 3.5e-3 different from the same
sentence alone (the attention and matrix products run over the padded width and round
differently). Without padding, every row sees the same arithmetic whatever else is in the
batch: measured bit-identical in bf16 across batch sizes 1 to 64, and within float32
rounding (about 1e-6 of the embedding's scale) in float32, where the CPU's matrix kernels
block the rows differently for different batch sizes.

The price is a few more, smaller batches: one partial batch per distinct length (at most
``max_seq_length`` of them), which on the STS sets is about 60 extra forward passes.

Plan ``"padded"``: sentences sorted by length, ``batch_size`` at a time, each batch padded to its
longest. Fewer, fuller batches, which may be faster on a GPU, where a small batch leaves most of the
device idle; but an embedding then depends on its batch mates in its last bits (bf16: up to 3.5e-3 of
its scale), so results are reproducible only for the same inputs and batch size. The backbone's
cache key names the plan.

Plan ``"packed"``: the batches of the padded plan, but nothing padded either: a batch's sentences are
laid end to end as one sequence, each attending only to itself (:mod:`flow_plugin.encoding.packed`:
variable-length attention on a GPU). Full batches without padding's work; its embeddings agree with the
exact plan's within the precision's rounding (the attention kernel differs).

Plan ``"auto"`` (the default): ``length-exact`` on a CPU, and on a GPU whichever plan a short probe measured
fastest there (:mod:`flow_plugin.encoding.plan_probe`).

Examples
--------
>>> [batch.tolist() for batch in length_exact_batches(np.array([3, 5, 3, 3, 5]), batch_size=2)]
[[1, 4], [0, 2], [3]]
"""

from __future__ import annotations

import numpy as np

#: the plans; the name is part of every embedding cache key and result provenance
BATCH_PLANS: tuple[str, ...] = ("length-exact", "padded", "packed")
#: what a backbone can be asked for: a plan, or ``auto`` (measured on a GPU, length-exact on a CPU)
REQUESTABLE_BATCH_PLANS: tuple[str, ...] = ("auto", *BATCH_PLANS)
#: the exact plan: ``auto``'s meaning on a CPU, and the plan every other is checked against
BATCH_PLAN = "length-exact"


def length_exact_batches(lengths: np.ndarray, batch_size: int) -> list[np.ndarray]:
    """Indices of each batch: longest sentences first (an out-of-memory error shows at once),
    each batch one length, at most ``batch_size`` sentences, input order within a length."""
    order = np.argsort(-lengths, kind="stable")
    sorted_lengths = lengths[order]
    boundaries = np.flatnonzero(np.diff(sorted_lengths)) + 1
    batches: list[np.ndarray] = []
    for group in np.split(order, boundaries):
        batches.extend(group[start : start + batch_size] for start in range(0, len(group), batch_size))
    return batches


def padded_batches(lengths: np.ndarray, batch_size: int) -> list[np.ndarray]:
    """Indices of each batch of the ``"padded"`` plan: longest sentences first, ``batch_size`` at a time.

    Examples
    --------
    >>> [batch.tolist() for batch in padded_batches(np.array([3, 5, 3, 3, 5]), batch_size=2)]
    [[1, 4], [0, 2], [3]]
    """
    order = np.argsort(-lengths, kind="stable")
    return [order[start : start + batch_size] for start in range(0, len(order), batch_size)]


def plan_batches(plan: str, lengths: np.ndarray, batch_size: int) -> list[np.ndarray]:
    """The batches of ``plan`` (one of :data:`BATCH_PLANS`; ``packed`` takes the padded plan's batches)."""
    return length_exact_batches(lengths, batch_size) if plan == "length-exact" else padded_batches(lengths, batch_size)
