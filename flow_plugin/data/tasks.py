"""The names of the STS evaluation sets, in one place (standard library only, so that tables and
command lines can list them without loading any data code): SentEval's names, the offline MTEB task built on
each (:mod:`flow_plugin.integrations.mteb.sts_tasks` builds one task class per entry, in this order), and their
column labels. The labelled tasks of every other type are :mod:`flow_plugin.catalog.labelled_tasks`.

Examples
--------
>>> SENTEVAL_TASKS
('STS12', 'STS13', 'STS14', 'STS15', 'STS16', 'STSBenchmark', 'SICKRelatedness')
>>> TASK_LABELS["SICKRelatedness"]
'SICK-R'
>>> OFFLINE_TASKS[-2:]
('SentEvalSTSBenchmark', 'SentEvalSICKR')
>>> task_label("SentEvalSTSBenchmark"), task_label("SentEvalSTS12"), task_label("STS22")
('STS-B', 'STS12', 'STS22')
"""

from __future__ import annotations

#: STS12..STS16: task -> subsets, in SentEval's order (``senteval/sts.py``).
SENTEVAL_STS_TASKS: dict[str, tuple[str, ...]] = {
    "STS12": ("MSRpar", "MSRvid", "SMTeuroparl", "surprise.OnWN", "surprise.SMTnews"),
    "STS13": ("FNWN", "headlines", "OnWN"),
    "STS14": ("deft-forum", "deft-news", "headlines", "images", "OnWN", "tweet-news"),
    "STS15": ("answers-forums", "answers-students", "belief", "headlines", "images"),
    "STS16": ("answer-answer", "headlines", "plagiarism", "postediting", "question-question"),
}

#: Every SentEval task flow-plugin reads, in the order of the BERT-flow paper's tables.
SENTEVAL_TASKS: tuple[str, ...] = (*SENTEVAL_STS_TASKS, "STSBenchmark", "SICKRelatedness")

#: Short column names of the paper's tables.
TASK_LABELS: dict[str, str] = {
    **{task: task for task in SENTEVAL_STS_TASKS},
    "STSBenchmark": "STS-B",
    "SICKRelatedness": "SICK-R",
}

#: SentEval task -> offline MTEB task name, in the order tables list them. The names differ from
#: MTEB's own tasks on purpose (MTEB's SICK-R holds all 9,927 pairs, SentEval's test set 4,927).
OFFLINE_TASKS_BY_SENTEVAL_NAME: dict[str, str] = {
    task: "SentEvalSICKR" if task == "SICKRelatedness" else f"SentEval{task}" for task in SENTEVAL_TASKS
}
OFFLINE_TASKS: tuple[str, ...] = tuple(OFFLINE_TASKS_BY_SENTEVAL_NAME.values())


def task_label(task: str) -> str:
    """A task's column header: an offline task by its SentEval set's short name (:data:`TASK_LABELS`),
    any other by its name (without a ``SentEval`` prefix)."""
    for senteval_task, offline in OFFLINE_TASKS_BY_SENTEVAL_NAME.items():
        if offline == task:
            return TASK_LABELS[senteval_task]
    return task.removeprefix("SentEval")


def offline_tasks_help() -> str:
    """The offline task names for a command line's help text."""
    return f"{', '.join(OFFLINE_TASKS)} (default: all {len(OFFLINE_TASKS)})"
