"""The fit-and-record step every entry point shares: sentences -> embeddings -> a fitted clone
of a calibrator template, with a :class:`FitRecord` of what it saw and did.

The sentences are put in a canonical order (sorted by their text) before they are encoded and
fitted, so a seeded fit does not depend on the order they arrive in: SentEval hands a task's
sentences sorted by length, MTEB and our readers in file order, and all three routes fit the
same calibrator.

Duplicates (``duplicates=``): ``"keep"`` (default) fits on every occurrence, as the official
code, which trains on sentence pairs, does: a sentence that appears in several pairs weighs
more; ``"unique"`` fits on each distinct sentence once. The record says which.

Examples
--------
>>> import numpy as np
>>> from flow_plugin.calibration import make_calibrator
>>> class Letters:  # any encoder with encode(list[str]) -> (n, d) float32
...     def encode(self, sentences):
...         return np.array([[len(s), s.count("a"), s.count("e")] for s in sentences], dtype=np.float32)
>>> calibrator, record = fit_calibrator(Letters(), make_calibrator("sn"), ["a cat", "the dog", "a cat sat", "eel"],
...                                     model="demo", source="four sentences")
>>> record.n_sentences, record.n_unique_sentences, record.calibrator
(4, 4, 'sn')
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import numpy as np

from flow_plugin.calibration import Calibrator
from flow_plugin.data.fit_corpus import DEFAULT_DUPLICATES, DUPLICATE_POLICIES
from flow_plugin.data.sampling import CorpusSample
from flow_plugin.errors import CalibrationError, InputError

logger = logging.getLogger(__name__)

class SentenceEncoder(Protocol):
    def encode(self, sentences: list[str]) -> np.ndarray: ...


@dataclass
class FitRecord:
    """What one calibrator fit saw and did (``as_dict`` gives the JSON form)."""

    model: str
    calibrator: str
    #: the hyper-parameters as set (``Calibrator.result_params``)
    params: dict[str, Any]
    #: where the sentences came from
    source: str
    n_sentences: int  # the sentences given
    n_unique_sentences: int
    duplicates: str  # "keep": fitted on every occurrence; "unique": on each distinct sentence once
    encode_seconds: float
    fit_seconds: float
    fit_log_likelihood: float | None = None
    fit_bits_per_dim: float | None = None
    #: distinct embeddings the fit saw (the small-sample rule's n)
    n_distinct_embeddings: int | None = None
    #: the values the fit ran with where the data decided them (``Calibrator.effective_params``)
    effective_params: dict[str, Any] = field(default_factory=dict)
    #: why the effective values differ from the hyper-parameters on a small corpus (``Calibrator.adapted_``), or None
    adapted: str | None = None
    #: the seeds of an ensemble's flows (``FlowCalibrator.member_seeds_``), or None
    member_seeds: list[int] | None = None
    #: Spearman correlation of the calibrated cosines with themselves after bf16-size rounding of the
    #: inputs (:func:`flow_plugin.calibration.stability.cosine_stability`); None: too few distinct sentences
    cosine_stability: float | None = None
    #: the corpus a sample was drawn from (:meth:`flow_plugin.data.sampling.CorpusSample.as_dict`), or None
    sampling: dict[str, Any] | None = None
    #: where the fit belongs (task, subset, fit-corpus policy, ...), set by the caller
    context: dict[str, Any] = field(default_factory=dict)
    #: the calls this fit served, in order (split, subset, side ...), added by the caller with :meth:`served_call`
    served: list[dict[str, Any]] = field(default_factory=list)

    def served_call(self, **where: Any) -> None:
        """Note one use of the fitted calibrator (e.g. ``split="test", prompt_type="query", n_inputs=2``)."""
        self.served.append(where)

    def as_dict(self) -> dict[str, Any]:
        """The record as flat JSON-ready data: the context's keys (task, ...) sit beside the others."""
        data = asdict(self)
        for key in ("fit_log_likelihood", "fit_bits_per_dim"):  # only density models (the flow) have them
            if data[key] is None:
                del data[key]
        data["calls"] = len(self.served)
        return {**data.pop("context"), **data}

    def summary(self) -> str:
        """One line for logs and command lines."""
        where = "/".join(str(self.context[key]) for key in ("task", "hf_subset", "corpus") if self.context.get(key))
        likelihood = "" if self.fit_log_likelihood is None else f", log-likelihood {self.fit_log_likelihood:.2f}"
        sampled = ""
        if self.sampling and self.sampling.get("sampled"):
            sampled = (f" (sampled from {self.sampling['corpus_sentences']}, cap {self.sampling['max_fit_sentences']}, "
                       f"seed {self.sampling['seed']})")
        adapted = f"; {self.adapted}" if self.adapted else ""
        if self.effective_params.get("reason_"):  # auto's choice and the figures behind it
            adapted += f"; {self.effective_params['reason_']}"
        return (f"{self.model}: fitted {self.calibrator}{' for ' + where if where else ''} on {self.n_sentences} "
                f"sentences ({self.n_unique_sentences} unique){sampled} from {self.source} in "
                f"{self.fit_seconds:.2f}s{likelihood}{adapted}")


def canonical_permutation(sentences: list[str]) -> list[int]:
    """The positions of ``sentences`` in canonical order: sorted by the text with runs of whitespace read as one
    space (SentEval re-joins tokens with single spaces; our readers keep a file's stray spaces), then by the text
    itself; equal texts keep their order. A fit's rows follow it, so a calibrator whose training depends on the
    order of its rows (the flow's batches) sees the same rows in the same order whatever order the text came in.

    Examples
    --------
    >>> canonical_permutation(["b", "a ", "b", " a"])
    [3, 1, 0, 2]
    """
    return sorted(range(len(sentences)), key=lambda index: (" ".join(sentences[index].split()), sentences[index]))


def canonical_order(sentences: list[str]) -> list[str]:
    """The sentences in canonical order (:func:`canonical_permutation`), duplicates kept.

    Examples
    --------
    >>> canonical_order(["b", "a ", "b", " a"])
    [' a', 'a ', 'b', 'b']
    """
    return [sentences[index] for index in canonical_permutation(sentences)]


def fit_calibrator(
    encoder: SentenceEncoder,
    template: Calibrator,
    sentences: list[str],
    *,
    model: str,
    source: str,
    duplicates: str = DEFAULT_DUPLICATES,
    context: dict[str, Any] | None = None,
    sampling: dict[str, Any] | None = None,
) -> tuple[Calibrator, FitRecord]:
    """Encode ``sentences`` in canonical order and fit a clone of ``template`` on them (every
    occurrence, or each distinct sentence once: ``duplicates``). The fit itself applies the
    small-sample rule and the cosine-stability check (``Calibrator.fit``); a refusal is re-raised
    naming ``model`` and ``source``."""
    if duplicates not in DUPLICATE_POLICIES:
        raise InputError(f"duplicates must be one of {', '.join(DUPLICATE_POLICIES)}, got {duplicates!r}")
    if not sentences:
        raise InputError(f"no sentences to fit {model} on ({source})")
    ordered = canonical_order(list(dict.fromkeys(sentences)) if duplicates == "unique" else sentences)
    start = time.perf_counter()
    embeddings = encoder.encode(ordered)
    return fit_embeddings(template, embeddings, model=model, source=source, n_sentences=len(sentences),
                          n_unique_sentences=len(set(sentences)), duplicates=duplicates,
                          encode_seconds=time.perf_counter() - start, context=context, sampling=sampling)


def fit_embeddings(
    template: Calibrator,
    embeddings: np.ndarray,
    *,
    model: str,
    source: str,
    n_sentences: int,
    n_unique_sentences: int,
    duplicates: str,
    encode_seconds: float,
    context: dict[str, Any] | None = None,
    sampling: dict[str, Any] | None = None,
) -> tuple[Calibrator, FitRecord]:
    """Fit a clone of ``template`` on ``embeddings`` (the sentences' embeddings, in canonical order) and record
    it; a refusal is re-raised naming ``model`` and ``source``."""
    start = time.perf_counter()
    calibrator = template.clone()
    try:
        calibrator.fit(embeddings)
    except CalibrationError as error:
        raise CalibrationError(f"{model}: {source} ({n_sentences} sentences): {error}") from None
    record = FitRecord(
        model=model,
        calibrator=calibrator.method,
        params=calibrator.result_params(),
        source=source,
        n_sentences=n_sentences,
        n_unique_sentences=n_unique_sentences,
        duplicates=duplicates,
        encode_seconds=round(encode_seconds, 3),
        fit_seconds=round(time.perf_counter() - start, 3),
        n_distinct_embeddings=calibrator.n_distinct_fit_,
        effective_params=calibrator.effective_params(),
        adapted=calibrator.adapted_,
        cosine_stability=None if calibrator.cosine_stability_ is None else round(calibrator.cosine_stability_, 6),
        sampling=sampling,
        context=dict(context or {}),
    )
    if getattr(calibrator, "ensemble", 1) > 1:
        record.member_seeds = list(calibrator.member_seeds_)
    if hasattr(calibrator, "fit_log_likelihood_"):
        record.fit_log_likelihood = float(calibrator.fit_log_likelihood_)
        record.fit_bits_per_dim = float(calibrator.fit_bits_per_dim_)
    return calibrator, record


def fit_on_sample(
    encoder: SentenceEncoder,
    template: Calibrator,
    sample: CorpusSample,
    *,
    model: str,
    source: str,
    what: str,
    remedy: str,
    duplicates: str = DEFAULT_DUPLICATES,
    context: dict[str, Any] | None = None,
) -> tuple[Calibrator, FitRecord]:
    """:func:`fit_calibrator` on a corpus sample (:func:`flow_plugin.data.sampling.sample_corpus`): the
    one fit sequence of the MTEB model and the export. The record's source names the sample and keeps
    its sampling; a corpus the calibrator cannot be fitted on is an error of the same class, one line:
    ``<model>: cannot fit <what> (<the sample>): <why>; <remedy>``."""
    try:
        return fit_calibrator(encoder, template, sample.sentences, model=model, source=f"{source}, {sample.describe()}",
                              duplicates=duplicates, context=context, sampling=sample.as_dict())
    except InputError as error:
        raise type(error)(f"{model}: cannot fit {what} ({sample.describe()}): {error}; {remedy}") from None
