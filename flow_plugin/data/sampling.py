"""A bounded fit corpus: every sentence of a small corpus, a seeded sample of a large one.

A corpus is a list of :class:`CorpusPart` (e.g. "test/queries", "test/corpus"), each able to
stream its texts in chunks any number of times. :func:`sample_corpus` reads it twice:

1. it counts the sentences and keeps an 8-byte keyed BLAKE2b hash of each (seeded);
2. if there are at most ``cap`` sentences it keeps them all, repeats included (the official
   BERT-flow code trains on every occurrence); otherwise it keeps the ``cap`` *distinct*
   sentences with the smallest hashes.

The hash ranks distinct sentences in a seeded random order, so step 2 draws a uniform sample
without replacement that does not depend on the order the sentences arrive in, nor on where
a sentence repeats. Memory: the ``cap`` kept sentences plus 8 bytes per corpus sentence; the
corpus itself is never held, only one chunk at a time.

>>> parts = [CorpusPart("test/queries", lambda: iter([["a", "b"], ["c"]])),
...          CorpusPart("test/corpus", lambda: iter([["d", "a"]]))]
>>> small = sample_corpus(parts, cap=10, seed=0)
>>> small.sentences, small.sampled, small.n_corpus_sentences, small.n_corpus_unique
(['a', 'b', 'c', 'd', 'a'], False, 5, 4)
>>> large = sample_corpus(parts, cap=3, seed=0)
>>> len(large.sentences), len(set(large.sentences)), large.sampled
(3, 3, True)
>>> sample_corpus(parts, cap=3, seed=0).sentences == large.sentences   # seeded: the same sample
True
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from flow_plugin.errors import InputError

#: Default cap on the sentences a calibrator is fitted on. 100,000 distinct sentences estimate a
#: d x d covariance (d <= 1024) to well under 1% and cover the paper's fit corpora (at most
#: ~20,000 sentences: SICK all splits) untouched, while a fit's embeddings stay at most 300 MB
#: for 768 dimensions (float32) whatever the size of a retrieval corpus (millions of passages).
DEFAULT_MAX_FIT_SENTENCES = 100_000
#: Default seed of the sample.
DEFAULT_FIT_SEED = 0


@dataclass(frozen=True)
class CorpusPart:
    """One named source of sentences: ``chunks()`` returns a fresh iterator of lists of str."""

    name: str
    chunks: Callable[[], Iterator[Sequence[str]]]


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

    def as_dict(self) -> dict[str, Any]:
        """What a fit record keeps about the corpus (not the sentences)."""
        return {
            "corpus_sentences": self.n_corpus_sentences,
            "corpus_unique_sentences": self.n_corpus_unique,
            "sampled": self.sampled,
            "max_fit_sentences": self.cap,
            "seed": self.seed,
            "parts": dict(self.parts),
        }

    def describe(self) -> str:
        """One phrase: "all 4 sentences" or "3 distinct of 5 sentences (4 distinct), seed 0".

        >>> CorpusSample(["a"], 9, 4, True, 1, 0).describe()
        'a seeded sample of 1 distinct of 9 sentences (4 distinct; cap 1, seed 0)'
        """
        if not self.sampled:
            return f"all {self.n_corpus_sentences} sentences"
        return (f"a seeded sample of {len(self.sentences)} distinct of {self.n_corpus_sentences} sentences "
                f"({self.n_corpus_unique} distinct; cap {self.cap}, seed {self.seed})")


def check_cap(cap: Any, seed: Any) -> tuple[int, int]:
    """``(cap, seed)`` checked: a positive int and an int >= 0.

    >>> check_cap(0, 0)
    Traceback (most recent call last):
    ...
    flow_plugin.errors.InputError: max_fit_sentences must be a positive int, got 0
    """
    if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
        raise InputError(f"max_fit_sentences must be a positive int, got {cap!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise InputError(f"fit_seed must be an int >= 0, got {seed!r}")
    return cap, seed


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
    drawn at random (seeded, order-independent). See the module's docstring."""
    cap, seed = check_cap(cap, seed)
    digest = _hasher(seed)
    blocks: list[np.ndarray] = []
    counts: dict[str, int] = {}
    for part in parts:
        n = 0
        for chunk in _texts(part):
            blocks.append(np.fromiter((digest(text) for text in chunk), dtype=np.uint64, count=len(chunk)))
            n += len(chunk)
        counts[part.name] = counts.get(part.name, 0) + n
    hashes = np.concatenate(blocks) if blocks else np.empty(0, dtype=np.uint64)
    del blocks
    total = int(hashes.size)
    distinct = np.unique(hashes)  # sorted
    del hashes
    if total <= cap:
        sentences = [text for part in parts for chunk in _texts(part) for text in chunk]
        return CorpusSample(sentences, total, int(distinct.size), False, cap, seed, counts)
    threshold = int(distinct[cap - 1]) if distinct.size > cap else int(distinct[-1])
    kept: dict[int, str] = {}
    for part in parts:
        for chunk in _texts(part):
            for text in chunk:
                value = digest(text)
                if value <= threshold and value not in kept:
                    kept[value] = text
    sentences = [kept[value] for value in sorted(kept)]
    return CorpusSample(sentences, total, int(distinct.size), True, cap, seed, counts)
