"""The batch plan: which sentences go through the backbone together.

Plan ``"length-exact"`` (the only one): a batch holds sentences of one token length, so no
sentence is ever padded. Padding is what made an embedding depend on its batch mates: in
bf16, a sentence batched with a longer one came out up to 3.5e-3 different from the same
sentence alone (the attention and matrix products run over the padded width and round
differently). Without padding, every row sees the same arithmetic whatever else is in the
batch: measured bit-identical in bf16 across batch sizes 1 to 64, and within float32
rounding (about 1e-6 of the embedding's scale) in float32, where the CPU's matrix kernels
block the rows differently for different batch sizes.

The price is a few more, smaller batches: one partial batch per distinct length (at most
``max_seq_length`` of them), which on the STS sets is about 60 extra forward passes.

>>> [batch.tolist() for batch in length_exact_batches(np.array([3, 5, 3, 3, 5]), batch_size=2)]
[[1, 4], [0, 2], [3]]
"""

from __future__ import annotations

import numpy as np

#: the plan's name, part of every embedding cache key and result provenance
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
