"""The leaderboard's file format: identifiers, the schema text, the points scale and the
column order. Standard library only.
"""

from __future__ import annotations

import math
from typing import Any

from flow_plugin.calibration.names import CALIBRATOR_NAMES
from flow_plugin.catalog.tasks import OFFLINE_TASKS

FORMAT = "flow-plugin-leaderboard"
FORMAT_VERSION = 1
#: Two scores of the same model and task are "the same" when they differ by at most this
#: many points: 1e-4 points = 1e-6 on MTEB's 0-1 scale, one unit of the last decimal it stores.
DEFAULT_TOLERANCE = 1e-4
#: Row order within a backbone, and the calibrators a model name's suffix can name.
CALIBRATOR_ORDER = CALIBRATOR_NAMES  # table order: the methods, then the flow variants
DECIMALS = 4  # points with 4 decimals = MTEB's 6 decimals on the 0-1 scale

SCHEMA = """\
Leaderboard JSON (format "flow-plugin-leaderboard", format_version 1)

Scores are in points: a correlation x 100 (Spearman 0.820441 -> 82.0441), kept with 4
decimals, which is every digit MTEB stores (6 decimals on its 0-1 scale).

{
  "format": "flow-plugin-leaderboard",
  "format_version": 1,
  "name": str,                   leaderboard name (default: the file's stem)
  "updated": str,                ISO 8601 UTC time of the last update that changed the content
  "generated_by": str,           "flow-plugin <version>"
  "scale": "points",             every score and delta below: correlation x 100
  "tolerance": float,            largest difference (points; default 0.0001, i.e. 1e-6 on
                                 MTEB's 0-1 scale) two results of the same model and task
                                 may have and still count as identical
  "tasks": [str, ...],           column order: the offline SentEval tasks first
                                 (SentEvalSTS12..16, SentEvalSTSBenchmark, SentEvalSICKR),
                                 then any other task alphabetically
  "rows": [                      one per model variant, sorted by backbone then calibrator
    {
      "id": str,                 "<model>@<revision>", plus " [<experiment>]" for a model
                                 run with extra loader kwargs; unique within the file
      "model": str,              MTEB model name, e.g. "flow_plugin/minilm-l6-flow"
      "revision": str,           model revision (the registry's pinned commit)
      "experiment": str | null,  MTEB experiment name (loader kwargs), null for defaults; a
                                 sentence-file fit corpus appears by its file name, not its path
      "experiment_kwargs": {..}, those kwargs ({} for defaults; a sentence file by its name)
      "backbone": str,           registry backbone ("minilm-l6"), or the model name for
                                 models outside flow-plugin
      "backbone_model": str,     weights: hub id of the backbone (or MTEB's adapted_from)
      "calibrator": str,         raw | sn | natsv | sn-natsv | whiten | flow ("raw" for
                                 models outside flow-plugin unless their kwargs say otherwise)
      "calibrator_params": {..}, hyper-parameters beyond the calibrator's defaults
      "pooling": str | null,     e.g. "last-avg", "first-last-avg" (null when unknown)
      "max_seq_length": int | null,
      "fit_corpus": str | null,  sentences the calibrator was fitted on: "target" (the text
                                 MTEB encodes for the task, all splits, no labels; see
                                 "fits" per task), "per-call", or "file <name>" (the file's
                                 name, never its path; "(sha256 <12 hex>)" after it where the
                                 fit records carry "corpus_sha256"), then ", unique sentences"
                                 with fit_duplicates="unique"; null for raw / models outside
                                 flow-plugin
      "metadata_source": str,    "registry" (flow-plugin registry when the leaderboard was
                                 built) or "model_meta" (the result folder's model_meta.json)
      "scores": {                one entry per task the row has
        "<Task>": {
          "score": float,        the task's main score in points
          "metric": str | null,  e.g. "cosine_spearman"
          "protocol": str,       "all": Spearman over all test pairs pooled (MTEB,
                                 SimCSE); MTEB's own tasks are "all" as well
          "wmean": float | null, the same metric per subset, averaged weighted by pair
                                 count (SentEval / BERT-flow paper protocol), in points;
                                 null where the result does not carry it
          "split": str,          evaluated split ("test")
          "hf_subsets": [str],   MTEB subsets averaged into "score" (usually ["default"])
          "dataset_revision": str, data identity: "sha256:<hex>" of the SentEval files
                                 read (offline tasks) or the HF dataset commit (MTEB tasks)
          "mteb_version": str | null,
          "date": str | null,    ISO 8601 UTC time the result was computed
          "evaluation_time_s": float | null,
          "versions": {..} | null, library versions MTEB logged for the run (torch,
                                 transformers, ...), from run_settings.jsonl
          "hardware": {..} | null  where it ran: cpu, cpu_cores, cpu_affinity, torch,
                                 torch_threads, device, gpu, cuda, precision, platform,
                                 python; recorded by `flow-plugin bench`
                                 (flow-plugin-runs.jsonl), null when not recorded
          "fits": [{..}] | null  what each calibrator serving the task was fitted on, from
                                 flow-plugin-fits/<Task>.fits.json next to the result: hf_subset,
                                 calibrator, fit_corpus, source, n_sentences,
                                 n_unique_sentences, sampled, corpus_sentences,
                                 max_fit_sentences, seed, adapted (small-sample rule),
                                 fit_seconds, fit_log_likelihood (flow), member_seeds
                                 (flow-ens: each member flow's seed), calls; null when
                                 none were written (raw models, models outside flow-plugin)
        }
      },
      "n_tasks": int,            tasks with a score in this row
      "average": float | null,   mean "score" over the row's tasks (of "tasks")
      "average_wmean": float | null, mean "wmean" when every task of the row has one
      "complete": bool,          true when the row has every task in "tasks"
      "baseline": str | null,    id of the raw row of the same backbone, weights commit,
                                 pooling, length and loader kwargs (null for raw rows, or when
                                 there is no such row or it shares no task with this one)
      "delta": {"<Task>": float, ..., "average": float} | null
                                 score - baseline score, per task both rows have;
                                 "average" is the mean of those per-task deltas
      "intervals": {..}          only on a row outside any seed group whose per-pair cosines
                                 were kept: see "intervals" below
    }
  ],
  "seed_groups": [               only when a seeded calibrator (the flow and its variants) ran
                                 with several seeds (`flow-plugin bench --seeds N`): the rows
                                 that differ only in the seed, one entry per group
    {
      "id": str,                 "<first row id> (seeds <first>-<last>)"
      "model": str, "calibrator": str,
      "seeds": [int, ...],       the seeds, lowest first (at most "max_seeds")
      "rows": [str, ...],        the ids of the rows, in seed order
      "scores": {"<Task>": {"mean": float, "std": float, "n": int, "values": [float, ...]}},
                                 over the seeds: mean and sample standard deviation
      "wmean": {"<Task>": {...}}, the same for the "wmean" protocol
      "average": {...}, "average_wmean": {...}, over the tasks every seed has
      "baseline": str,           the raw row the deltas are against
      "delta": {"<Task>"|"average": {"mean", "std", "n", "values"}},
      "intervals": {..}          see below
    }
  ],
  "max_seeds": int,              only with `--seeds N`: at most N seeds per group
  "interval_method": {           only when some row has intervals
    "method": str,               the paired, stratified, two-stage percentile bootstrap
    "confidence": 0.95, "n_resamples": int, "seed": int
  }
}

"intervals" (a row, or a seed group for its seeds), from the per-pair cosines kept next to each
result (flow-plugin-pairs/<Task>.pairs.npz):
  {"all" | "wmean": {            the protocol
     "raw" | "linear": {         against the raw backbone ("baseline"), or against the best
                                 linear baseline (the highest average of sn, natsv, sn-natsv,
                                 whiten of the same backbone, loader kwargs and fit corpus)
       "against": str,           the id of the row (or seed group) compared with
       "calibrator": str,        ("linear" only) which baseline that is
       "delta": {"<Task>"|"average": float},        mean over seeds of this minus that
       "ci95": {"<Task>"|"average": [low, high]},   the 95% interval of the delta
       "significant": {"<Task>"|"average": bool},   the interval excludes 0
       "tasks": [str, ...]       only when the average is over fewer tasks than the board's
     }}}
"""


def to_points(value: float) -> float:
    """An MTEB score (0-1 scale) in points, with every decimal MTEB stores.

    >>> to_points(0.820441)
    82.0441
    """
    return round(float(value) * 100.0, DECIMALS)


def round_points(value: float) -> float:
    """A value already in points, rounded to the stored decimals.

    >>> round_points(1.234567)
    1.2346
    """
    return round(float(value), DECIMALS)


def is_number(value: Any) -> bool:
    """True for a finite int or float (not a bool).

    >>> [is_number(v) for v in (1, 0.5, True, float("nan"), "1")]
    [True, True, False, False, False]
    """
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def task_sort_key(task: str) -> tuple[int, str]:
    """Column order: the offline SentEval tasks in their order, then the others by name.

    >>> sorted(["STS12", "SentEvalSICKR", "SentEvalSTS12"], key=task_sort_key)
    ['SentEvalSTS12', 'SentEvalSICKR', 'STS12']
    """
    return (OFFLINE_TASKS.index(task), "") if task in OFFLINE_TASKS else (len(OFFLINE_TASKS), task)
