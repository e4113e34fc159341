"""Names of the offline MTEB tasks, importable without MTEB (the leaderboard reads them).

``flow_plugin.mteb_tasks`` builds one task class per entry, in this order.
"""

from __future__ import annotations

#: SentEval task -> offline MTEB task name, in the order tables list them
OFFLINE_TASKS_BY_SENTEVAL_NAME: dict[str, str] = {
    "STS12": "SentEvalSTS12",
    "STS13": "SentEvalSTS13",
    "STS14": "SentEvalSTS14",
    "STS15": "SentEvalSTS15",
    "STS16": "SentEvalSTS16",
    "STSBenchmark": "SentEvalSTSBenchmark",
    "SICKRelatedness": "SentEvalSICKR",
}
OFFLINE_TASKS: tuple[str, ...] = tuple(OFFLINE_TASKS_BY_SENTEVAL_NAME.values())
