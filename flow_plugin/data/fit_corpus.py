"""Which unlabeled sentences a calibrator is fitted on.

Four policies:

- ``"target"`` (default): the text of every split of the evaluated task, never its labels
  (the paper's "target" setting, section 4: "flow (target)"), fitted once per (task, subset)
  and shared by every call of it (both sides of every pair, queries and documents, train
  and test);
- ``"eval-splits"``: the same, from the task's evaluation splits only (its ``eval_splits``), and
  of a retrieval split only the queries with a relevant document: the text MTEB scores, so a task
  with a train split or unjudged queries costs no encoding beyond MTEB's own; a classification
  task's classifier still trains on embeddings of its train split, mapped by the calibrator
  fitted on the test text;
- a path to a text file, one sentence per line: an external corpus fitted once and used
  for every task, such as NLI sentences (the paper's "flow (NLI)");
- ``"per-call"``: exactly the sentences of each ``encode`` call, a fresh fit per call, so
  the two sides of a pair land in different spaces: only to reproduce that ablation (it
  warns). It was called ``"inputs"``; that name is an error pointing here.

Examples
--------
>>> FitCorpus.parse("per-call").describe()
'per-call'
>>> FitCorpus.parse("inputs")
Traceback (most recent call last):
...
flow_plugin.errors.InputError: fit_corpus='inputs' is now named 'per-call': it fits a new calibrator for every encode() call, so the two sides of a pair land in different spaces; the default 'target' fits once per (task, subset) on all of its text
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flow_plugin._io import read_text_lines
from flow_plugin.data.sampling import DEFAULT_FIT_SEED, DEFAULT_MAX_FIT_SENTENCES, check_cap
from flow_plugin.errors import DataFolderError, InputError, InputTypeError, did_you_mean

TARGET = "target"
EVAL_SPLITS = "eval-splits"
PER_CALL = "per-call"
#: the named policies (a sentence file is the other kind)
POLICIES: tuple[str, ...] = (TARGET, EVAL_SPLITS, PER_CALL)
#: what a fit does with a sentence that occurs more than once: "keep" fits on every occurrence,
#: "unique" on each distinct sentence once (:func:`flow_plugin.catalog.fitting.fit_calibrator`)
DUPLICATE_POLICIES: tuple[str, ...] = ("keep", "unique")
#: the official code's policy: it trains on the pairs, so a sentence in two pairs counts twice
DEFAULT_DUPLICATES = DUPLICATE_POLICIES[0]
#: what an asymmetric task's calibrator is fitted on: one space for queries and documents, or one per side
SIDES: tuple[str, ...] = ("joint", "per-side")
DEFAULT_SIDES = SIDES[0]
#: the old name of "per-call", refused with a pointer to it
_RENAMED = {"inputs": PER_CALL}


@dataclass(frozen=True)
class FitCorpus:
    kind: str  # "target" | "eval-splits" | "per-call" | "file"
    path: Path | None = None

    @classmethod
    def parse(cls, value: str | os.PathLike[str] | FitCorpus) -> FitCorpus:
        if isinstance(value, FitCorpus):
            return value
        if isinstance(value, str) and value in POLICIES:
            return cls(value)
        if isinstance(value, str) and value in _RENAMED:
            raise InputError(
                f"fit_corpus={value!r} is now named {_RENAMED[value]!r}: it fits a new calibrator for every encode() "
                "call, so the two sides of a pair land in different spaces; the default 'target' fits once per "
                "(task, subset) on all of its text"
            )
        path = Path(value).expanduser()
        if not path.is_file():
            raise InputError(
                f"fit_corpus must be one of {', '.join(map(repr, POLICIES))} or a text file of sentences; "
                f"{str(value)!r} is neither a known policy nor an existing file{did_you_mean(str(value), POLICIES)}"
            )
        return cls("file", path)

    def describe(self) -> str:
        return f"file {self.path}" if self.kind == "file" else self.kind


def read_sentence_file(path: str | os.PathLike[str]) -> list[str]:
    """Sentences of a UTF-8 text file, one per line (lines end at ``\\n`` or ``\\r\\n`` only, see
    :func:`flow_plugin._io.read_text_lines`). Blank lines are an error (they would be silently
    meaningless sentences); so is an empty file."""
    path = Path(path)
    lines = read_text_lines(path, "fit corpus file")
    blank = [number for number, line in enumerate(lines, start=1) if not line.strip()]
    if blank:
        shown = ", ".join(str(n) for n in blank[:5]) + (f" and {len(blank) - 5} more" if len(blank) > 5 else "")
        raise DataFolderError(f"fit corpus file {path} has blank line(s) {shown}; remove them")
    if not lines:
        raise DataFolderError(f"fit corpus file {path} is empty")
    return lines


@dataclass(frozen=True)
class FitSettings:
    """What a calibrator is fitted on (the ``fit_*`` arguments of a calibrated model and of an export), checked."""

    fit_corpus: FitCorpus = FitCorpus(TARGET)
    max_fit_sentences: int = DEFAULT_MAX_FIT_SENTENCES
    fit_seed: int = DEFAULT_FIT_SEED
    fit_duplicates: str = DEFAULT_DUPLICATES
    fit_sides: str = DEFAULT_SIDES

    @classmethod
    def make(cls, fit_corpus: str | os.PathLike[str] | FitCorpus = TARGET,
             max_fit_sentences: int = DEFAULT_MAX_FIT_SENTENCES, fit_seed: int = DEFAULT_FIT_SEED,
             fit_duplicates: str = DEFAULT_DUPLICATES, fit_sides: str = DEFAULT_SIDES) -> FitSettings:
        cap, seed = check_cap(max_fit_sentences, fit_seed)
        if fit_duplicates not in DUPLICATE_POLICIES:
            raise InputError(f"fit_duplicates must be one of {', '.join(DUPLICATE_POLICIES)}, got {fit_duplicates!r}")
        if fit_sides not in SIDES:
            raise InputError(f"fit_sides must be one of {', '.join(SIDES)}, got {fit_sides!r}")
        return cls(FitCorpus.parse(fit_corpus), cap, seed, fit_duplicates, fit_sides)

    @classmethod
    def from_keywords(cls, settings: dict[str, Any]) -> FitSettings:
        """:meth:`make` from keywords, refusing an unknown one with the closest accepted name."""
        unknown = sorted(set(settings) - set(FIT_ARGUMENTS))
        if unknown:
            raise InputTypeError(f"unknown fit setting {unknown[0]!r}{did_you_mean(unknown[0], FIT_ARGUMENTS)}; "
                                 f"accepted: {', '.join(FIT_ARGUMENTS)}")
        return cls.make(**settings)


#: the model arguments that say what a calibrator is fitted on (not how the embeddings are made): two
#: results that differ only in these share their raw backbone
FIT_ARGUMENTS: tuple[str, ...] = tuple(FitSettings.__dataclass_fields__)
