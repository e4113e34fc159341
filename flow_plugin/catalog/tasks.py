"""Names of the offline MTEB tasks (SentEval-format files), importable without MTEB or numpy:
the leaderboard and the command lines list them. :mod:`flow_plugin.integrations.mteb.tasks`
builds one task class per entry, in this order.

Examples
--------
>>> OFFLINE_TASKS[-2:]
('SentEvalSTSBenchmark', 'SentEvalSICKR')
>>> task_label("SentEvalSTSBenchmark"), task_label("SentEvalSTS12"), task_label("STS22")
('STS-B', 'STS12', 'STS22')
"""

from __future__ import annotations

from flow_plugin.data.tasks import SENTEVAL_TASKS, TASK_LABELS

#: SentEval task -> offline MTEB task name, in the order tables list them. The names differ from
#: MTEB's own tasks on purpose (MTEB's SICK-R holds all 9,927 pairs, SentEval's test set 4,927).
OFFLINE_TASKS_BY_SENTEVAL_NAME: dict[str, str] = {
    task: "SentEvalSICKR" if task == "SICKRelatedness" else f"SentEval{task}" for task in SENTEVAL_TASKS
}
OFFLINE_TASKS: tuple[str, ...] = tuple(OFFLINE_TASKS_BY_SENTEVAL_NAME.values())


def task_label(task: str) -> str:
    """A task's column header: an offline task by its SentEval set's short name (:data:`~flow_plugin.data.tasks.TASK_LABELS`),
    any other by its name (without a ``SentEval`` prefix)."""
    for senteval_task, offline in OFFLINE_TASKS_BY_SENTEVAL_NAME.items():
        if offline == task:
            return TASK_LABELS[senteval_task]
    return task.removeprefix("SentEval")


def offline_tasks_help() -> str:
    """The offline task names for a command line's help text."""
    return f"{', '.join(OFFLINE_TASKS)} (default: all {len(OFFLINE_TASKS)})"
