"""The names of the evaluation sets, in one place (standard library only, so that tables and
command lines can list them without loading any data code).

Examples
--------
>>> SENTEVAL_TASKS
('STS12', 'STS13', 'STS14', 'STS15', 'STS16', 'STSBenchmark', 'SICKRelatedness')
>>> TASK_LABELS["SICKRelatedness"]
'SICK-R'
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
