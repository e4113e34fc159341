"""A bounded fit corpus: every sentence of a small corpus, a seeded sample of a large one.

A corpus is a list of :class:`CorpusPart` (e.g. "test/queries", "test/corpus"), each able to
stream its texts in chunks. :func:`sample_corpus` reads it once, keeping an 8-byte keyed BLAKE2b
hash (seeded) of each sentence only while it matters:

- while at most ``cap`` sentences have arrived it keeps them all, repeats included (the official
  BERT-flow code trains on every occurrence); a corpus of at most ``cap`` sentences is fitted
  on all of them;
- beyond that it keeps the ``cap`` *distinct* sentences with the smallest hashes (a bottom-k
  sketch: a max-heap of ``cap`` hashes).

The hash ranks distinct sentences in a seeded random order, so the sample is a uniform draw
without replacement that depends neither on the order the sentences arrive in nor on where a
sentence repeats. Memory is bounded by the sample, not the corpus: the ``cap`` kept
sentences, their hashes, at most ``4 cap`` more hashes and one chunk. So the number of distinct
sentences is counted up to ``4 cap`` of them and estimated beyond from the sketch
(``(cap - 1) / (largest kept hash / 2**64)``, the KMV estimator; ``unique_exact`` says which).

Examples
--------
>>> parts = [CorpusPart("test/queries", lambda: iter([["a", "b"], ["c"]])),
...          CorpusPart("test/corpus", lambda: iter([["d", "a"]]))]
>>> small = sample_corpus(parts, cap=10, seed=0)
>>> small.sentences, small.sampled, small.n_corpus_sentences, small.n_corpus_unique, small.unique_exact
(['a', 'b', 'c', 'd', 'a'], False, 5, 4, True)
>>> large = sample_corpus(parts, cap=3, seed=0)
>>> len(large.sentences), len(set(large.sentences)), large.sampled
(3, 3, True)
>>> sample_corpus(parts, cap=3, seed=0).sentences == large.sentences   # seeded: the same sample
True
"""

from __future__ import annotations

import hashlib
import heapq
import numbers
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from flow_plugin.errors import InputError

#: Default cap on the sentences a calibrator is fitted on. 100,000 distinct sentences estimate a
#: d x d covariance (d <= 1024) to well under 1% and cover the paper's fit corpora (at most
#: ~20,000 sentences: SICK all splits) untouched, while a fit's embeddings stay at most 300 MB
#: for 768 dimensions (float32) whatever the size of a retrieval corpus (millions of passages).
DEFAULT_MAX_FIT_SENTENCES = 100_000
#: Distinct sentences are counted exactly up to this many times the cap (their hashes kept), and
#: estimated beyond (the memory of a count must stay bounded by the sample, not the corpus).
EXACT_DISTINCT_FACTOR = 4
#: Default seed of the sample.
DEFAULT_FIT_SEED = 0


@dataclass(frozen=True)
class CorpusPart:
    """One named source of sentences: ``chunks()`` returns a fresh iterator of lists of str; ``side`` is the
    role its sentences play where a model encodes the two sides of a task differently (``"query"``,
    ``"document"``), else ``None``."""

    name: str
    chunks: Callable[[], Iterator[Sequence[str]]]
    side: str | None = None


@dataclass
class CorpusSample:
    """The sentences to fit on, and what they were taken from."""

    sentences: list[str]
    n_corpus_sentences: int
    n_corpus_unique: int
    sampled: bool
    cap: int
    seed: int
    #: part name -> sentences it holds
    parts: dict[str, int] = field(default_factory=dict)
    #: False when ``n_corpus_unique`` is the sketch's estimate (a sampled corpus), True when counted
    unique_exact: bool = True

    def as_dict(self) -> dict[str, Any]:
        """What a fit record keeps about the corpus (not the sentences)."""
        return {
            "corpus_sentences": self.n_corpus_sentences,
            "corpus_unique_sentences": self.n_corpus_unique,
            "corpus_unique_exact": self.unique_exact,
            "sampled": self.sampled,
            "max_fit_sentences": self.cap,
            "seed": self.seed,
            "parts": dict(self.parts),
        }

    def describe(self) -> str:
        """One phrase: "all 4 sentences" or "3 distinct of 5 sentences (4 distinct), seed 0".

        Examples
        --------
        >>> CorpusSample(["a"], 9, 4, True, 1, 0).describe()
        'a seeded sample of 1 distinct of 9 sentences (4 distinct; cap 1, seed 0)'
        """
        if not self.sampled:
            return f"all {self.n_corpus_sentences} sentences"
        about = "" if self.unique_exact else "about "
        return (f"a seeded sample of {len(self.sentences)} distinct of {self.n_corpus_sentences} sentences "
                f"({about}{self.n_corpus_unique} distinct; cap {self.cap}, seed {self.seed})")


def check_cap(cap: Any, seed: Any) -> tuple[int, int]:
    """``(cap, seed)`` checked: a positive int and an int >= 0.

    Examples
    --------
    >>> check_cap(0, 0)
    Traceback (most recent call last):
    ...
    flow_plugin.errors.InputError: max_fit_sentences must be a positive int, got 0
    """
    if isinstance(cap, bool) or not isinstance(cap, numbers.Integral) or cap < 1:
        raise InputError(f"max_fit_sentences must be a positive int, got {cap!r}")
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise InputError(f"fit_seed must be an int >= 0, got {seed!r}")
    return int(cap), int(seed)


def _hasher(seed: int) -> Callable[[str], int]:
    key = seed.to_bytes(8, "little")

    def digest(text: str) -> int:
        return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8, key=key).digest(), "little")

    return digest


def _texts(part: CorpusPart) -> Iterable[Sequence[str]]:
    for chunk in part.chunks():
        for position, text in enumerate(chunk):
            if not isinstance(text, str):
                raise InputError(f"corpus part {part.name!r} holds {type(text).__name__} {text!r:.60} at "
                                 f"position {position} of a chunk, not str")
        yield chunk


def sample_corpus(parts: Sequence[CorpusPart], *, cap: int = DEFAULT_MAX_FIT_SENTENCES,
                  seed: int = DEFAULT_FIT_SEED) -> CorpusSample:
    """Every sentence of ``parts`` when there are at most ``cap``, else ``cap`` distinct ones
    drawn at random (seeded, order-independent), in one pass. See the module's docstring."""
    cap, seed = check_cap(cap, seed)
    digest = _hasher(seed)
    everything: list[str] | None = []  # every sentence while there are at most cap
    heap: list[int] = []  # negated hashes of the cap smallest distinct hashes (a max-heap)
    kept: dict[int, str] = {}  # hash -> sentence, for the hashes in the heap
    seen: set[int] | None = set()  # every distinct hash, while there are at most EXACT_DISTINCT_FACTOR x cap
    total = 0
    counts: dict[str, int] = {}
    for part in parts:
        n = 0
        for chunk in _texts(part):
            n += len(chunk)
            if everything is not None:
                everything.extend(chunk)
                if len(everything) > cap:
                    everything = None
            for text in chunk:
                value = digest(text)
                if seen is not None:
                    seen.add(value)
                    if len(seen) > EXACT_DISTINCT_FACTOR * cap:
                        seen = None
                if value in kept:
                    continue
                if len(heap) < cap:
                    heapq.heappush(heap, -value)
                    kept[value] = text
                elif value < -heap[0]:
                    del kept[-heapq.heappushpop(heap, -value)]
                    kept[value] = text
        counts[part.name] = counts.get(part.name, 0) + n
        total += n
    if everything is not None:
        return CorpusSample(everything, total, len(kept), False, cap, seed, counts)
    if seen is not None:  # few distinct sentences: counted
        unique, exact = len(seen), True
    else:  # KMV estimate of the distinct count from the cap-th smallest hash
        unique, exact = min(total, max(cap, round((cap - 1) / ((-heap[0] + 1) / 2.0**64)))), False
    sentences = [kept[value] for value in sorted(kept)]
    return CorpusSample(sentences, total, unique, True, cap, seed, counts, unique_exact=exact)
