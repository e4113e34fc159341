"""The protocols that turn a task's per-subset STS scores into one number, and what each means
(standard library only: results, tables, the leaderboard and its page all quote these texts).

STS12-16 have 3-6 subsets each, STS-B and SICK-R one; with a single subset every protocol gives
the same number.

Examples
--------
>>> tuple(PROTOCOLS), tuple(AGGREGATES)
(('all', 'wmean'), ('all', 'wmean', 'mean'))
>>> protocol_text("wmean")
"wmean: mean of per-subset correlations weighted by pair count (SentEval 'wmean', BERT-flow paper)"
"""

from __future__ import annotations

#: The two protocols flow-plugin reports, in the order tables show them, and what each means: MTEB
#: scores a pooled test set ("all"; its STS1x datasets are pooled, as SimCSE reports them), the
#: BERT-flow paper reports SentEval's pair-count-weighted mean ("wmean"). Always say which.
PROTOCOLS: dict[str, str] = {
    "all": "one correlation over the pairs of all subsets pooled (MTEB, SimCSE 'all')",
    "wmean": "mean of per-subset correlations weighted by pair count (SentEval 'wmean', BERT-flow paper)",
}

#: Every aggregate an STS evaluation computes: the reported protocols, then SentEval's unweighted "mean".
AGGREGATES: dict[str, str] = {**PROTOCOLS, "mean": "unweighted mean of per-subset correlations (SentEval 'mean')"}

#: The protocol of a score that names none (MTEB's own tasks score their pooled test set).
DEFAULT_PROTOCOL = "all"


def protocol_text(name: str) -> str:
    """``"<name>: <what it means>"``, as a result file's ``protocols`` entries say it."""
    return f"{name}: {AGGREGATES[name]}"


__all__ = ["AGGREGATES", "DEFAULT_PROTOCOL", "PROTOCOLS", "protocol_text"]
