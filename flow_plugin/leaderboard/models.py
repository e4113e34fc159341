"""The leaderboard as typed pydantic models: the one description of its file format, and the board
in memory from load to write.

:func:`~flow_plugin.leaderboard.ingest.merge.load_leaderboard` validates a file into a :class:`Leaderboard`;
every stage of the pipeline (ingest, compare, render, write) works on that model;
:meth:`Leaderboard.file_text` is what is written, checked against the models once more first
(assignments in memory are not validated). The JSON schema (``flow-plugin leaderboard --schema``,
and the docs' schema block) is generated from these models. The fields a model names in its
``_ABSENT_WHEN_NONE`` are left out of the file when None, not written as null. Scores are in points: a correlation × 100
(Spearman 0.820441 -> 82.0441), kept with 4 decimals, every digit MTEB stores (6 decimals on its
0-1 scale); :func:`to_points` and :func:`round_points` convert and round.

>>> schema = leaderboard_schema()
>>> schema["title"], sorted(schema["$defs"])[:3]
('Leaderboard', ['Comparison', 'IntervalMethod', 'Row'])
"""

from __future__ import annotations

import json
import math
from typing import Annotated, Any, ClassVar, Literal, TypeGuard

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, Strict, ValidationError, model_serializer

from flow_plugin._validation_errors import describe_validation_error
from flow_plugin.data.tasks import OFFLINE_TASKS
from flow_plugin.errors import LeaderboardError
from flow_plugin.protocols import DEFAULT_PROTOCOL, PROTOCOLS

FORMAT = "flow-plugin-leaderboard"
FORMAT_VERSION = 1
#: Two scores of the same model and task are "the same" when they differ by at most this
#: many points: 1e-4 points = 1e-6 on MTEB's 0-1 scale, one unit of the last decimal it stores.
DEFAULT_TOLERANCE = 1e-4
DECIMALS = 4  # points with 4 decimals = MTEB's 6 decimals on the 0-1 scale
#: the column of a row's (or a comparison's) average, next to its tasks
AVERAGE = "average"


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


def is_number(value: Any) -> TypeGuard[float]:
    """True for a finite int or float (not a bool).

    Examples
    --------
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

#: no unknown key, no conversion (a score is a number, not a numeric string or a bool), finite numbers (a NaN
#: set in memory stays NaN in a dump, so the check before writing refuses it instead of writing null)
_STRICT = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, ser_json_inf_nan="constants")


class _Part(BaseModel):
    """A part of the file; the fields named in ``_ABSENT_WHEN_NONE`` are left out when None."""

    model_config = _STRICT
    _ABSENT_WHEN_NONE: ClassVar[tuple[str, ...]] = ()

    @model_serializer(mode="wrap")
    def _leave_out_absent(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        for key in self._ABSENT_WHEN_NONE:
            if key in data and data[key] is None:
                del data[key]
        return data


class TaskScore(_Part):
    """One task's result in a row."""

    score: float = Field(description="the task's main score in points")
    metric: str | None = Field(description='e.g. "cosine_spearman"')
    protocol: str = Field(description=f'the protocol of "score": "all" ({PROTOCOLS["all"]}); MTEB\'s own tasks are '
                          f'"{DEFAULT_PROTOCOL}" as well')
    wmean: float | None = Field(None, description=f'the same metric under the "wmean" protocol ({PROTOCOLS["wmean"]}), '
                                "in points; null where the result does not carry it")
    split: str = Field(description='evaluated split ("test")')
    hf_subsets: list[str] = Field(description='MTEB subsets averaged into "score" (usually ["default"])')
    dataset_revision: str = Field(description='data identity: "sha256:<hex>" of the SentEval files read (offline '
                                  "tasks) or the HF dataset commit (MTEB tasks)")
    mteb_version: str | None = None
    date: str | None = Field(None, description="ISO 8601 UTC time the result was computed")
    evaluation_time_s: float | None = None
    versions: dict[str, Any] | None = Field(None, description="library versions MTEB logged for the run (torch, "
                                            "transformers, ...), from run_settings.jsonl")
    hardware: dict[str, Any] | None = Field(None, description="where it ran: cpu, cpu_cores, cpu_affinity, torch, "
                                            "torch_threads, device, gpu, cuda, precision, platform, python; "
                                            "recorded by flow-plugin (flow-plugin-runs.jsonl), null when not recorded")
    fits: list[dict[str, Any]] | None = Field(None, description="what each calibrator serving the task was fitted "
                                              "on, from flow-plugin-fits/<Task>.fits.json next to the result "
                                              "(hf_subset, calibrator, fit_corpus, source, n_sentences, ...); null "
                                              "when none were written")


class Comparison(_Part):
    """A delta against one reference, with its 95% interval per task and on the average."""

    _ABSENT_WHEN_NONE = ("tasks", "calibrator")

    against: str = Field(description="the id of the row (or seed group) compared with")
    delta: dict[str, float] = Field(description='"<Task>" | "average": mean over seeds of this minus that')
    # the pair (low, high), from the JSON list [low, high]: the one conversion the strict models allow
    ci95: dict[str, Annotated[tuple[float, float], Strict(False)]] = Field(
        description='"<Task>" | "average": the 95% interval of the delta')
    significant: dict[str, bool] = Field(description='"<Task>" | "average": the interval excludes 0')
    tasks: list[str] | None = Field(None, description="only when the average is over fewer tasks than the board's")
    calibrator: str | None = Field(None, description='("linear" only) which baseline that is')


#: a reported protocol (:data:`flow_plugin.protocols.PROTOCOLS`: "all" or "wmean")
ProtocolName = Literal[tuple(PROTOCOLS)]  # type: ignore[valid-type]
#: what a delta is against: "raw" (the raw backbone) or "linear" (the best linear baseline of the same
#: backbone, loader kwargs and fit corpus)
ReferenceName = Literal["raw", "linear"]
#: protocol -> reference -> the comparison
Intervals = dict[ProtocolName, dict[ReferenceName, Comparison]]


class Row(_Part):
    """One registry model (or outside model) with its loader kwargs: its scores and deltas."""

    _ABSENT_WHEN_NONE = ("intervals",)

    id: str = Field(description='"<model>@<revision>", plus " [<experiment>]" for a model run with extra loader '
                    "kwargs; unique within the file")
    model: str = Field(description='MTEB model name, e.g. "flow_plugin/minilm-l6-flow"')
    revision: str = Field(description="model revision (the registry's pinned commit)")
    experiment: str | None = Field(description="MTEB experiment name (loader kwargs), null for defaults; a "
                                   "sentence-file fit corpus appears by its file name, not its path")
    experiment_kwargs: dict[str, Any] = Field(description="those kwargs ({} for defaults; a sentence file by its name)")
    backbone: str = Field(description='registry backbone ("minilm-l6"), or the model name for models outside '
                          "flow-plugin")
    backbone_model: str = Field(description="weights: hub id of the backbone (or MTEB's adapted_from)")
    calibrator: str = Field(description='raw | sn | natsv | sn-natsv | whiten | flow | a flow variant ("raw" for '
                            "models outside flow-plugin unless their kwargs say otherwise)")
    calibrator_params: dict[str, Any] = Field(description="hyper-parameters beyond the calibrator's defaults")
    pooling: str | None = Field(description='e.g. "last-avg", "first-last-avg" (null when unknown)')
    max_seq_length: int | None
    fit_corpus: str | None = Field(description='what the calibrator was fitted on: "target", "per-call", or "file '
                                   '<name>" (the file\'s name, never its path), then ", unique sentences" with '
                                   "fit_duplicates=\"unique\"; null for raw and models outside flow-plugin")
    metadata_source: Literal["registry", "model_meta"] = Field(
        description='"registry" (flow-plugin registry when the leaderboard was built) or "model_meta" (the result '
        "folder's model_meta.json)")
    scores: dict[str, TaskScore] = Field(description="one entry per task the row has")
    n_tasks: int = Field(description="tasks with a score in this row")
    average: float | None = Field(description='mean "score" over the row\'s tasks (of "tasks")')
    average_wmean: float | None = Field(description='mean "wmean" when every task of the row has one')
    complete: bool = Field(description='true when the row has every task in "tasks"')
    baseline: str | None = Field(description="id of the raw row of the same backbone, weights commit, pooling, "
                                 "length and loader kwargs (null for raw rows, or when there is none)")
    delta: dict[str, float] | None = Field(description='score - baseline score per task both rows have; "average" '
                                           "is the mean of those per-task deltas")
    intervals: Intervals | None = Field(None, description="only on a row outside any seed group whose per-pair "
                                        "cosines were kept")


class SeedSpread(_Part):
    """A value over the seeds of a group."""

    mean: float
    std: float = Field(description="sample standard deviation")
    n: int
    values: list[float]


class SeedGroup(_Part):
    """The rows that differ only in the seed of a seeded calibrator (the flow and its variants)."""

    _ABSENT_WHEN_NONE = ("average", "average_wmean", "baseline", "delta", "intervals")

    id: str = Field(description='"<first row id> (seeds <first>-<last>)"')
    model: str
    calibrator: str
    seeds: list[int] = Field(description='the seeds, lowest first (at most "max_seeds")')
    rows: list[str] = Field(description="the ids of the rows, in seed order")
    scores: dict[str, SeedSpread] = Field(description="per task, over the seeds")
    wmean: dict[str, SeedSpread] = Field(description='the same for the "wmean" protocol')
    average: SeedSpread | None = Field(None, description="over the tasks every seed has")
    average_wmean: SeedSpread | None = None
    baseline: str | None = Field(None, description="the raw row the deltas are against")
    delta: dict[str, SeedSpread] | None = Field(None, description='"<Task>" | "average"')
    intervals: Intervals | None = None


class IntervalMethod(_Part):
    """How the intervals were computed."""

    method: str = Field(description="the paired, stratified, two-stage percentile bootstrap")
    confidence: float
    n_resamples: int
    seed: int


class Leaderboard(_Part):
    """A flow-plugin leaderboard file (JSON)."""

    _ABSENT_WHEN_NONE = ("max_seeds", "seed_groups", "interval_method")

    format: Literal[FORMAT]  # type: ignore[valid-type]
    format_version: Literal[FORMAT_VERSION]  # type: ignore[valid-type]
    name: str = Field(description="leaderboard name (default: the file's stem)")
    updated: str = Field(description="ISO 8601 UTC time of the last update that changed the content")
    generated_by: str = Field(description='"flow-plugin <version>"')
    scale: Literal["points"] = Field(description="every score and delta: correlation x 100")
    tolerance: float = Field(description="largest difference (points; default 0.0001, i.e. 1e-6 on MTEB's 0-1 "
                             "scale) two results of the same model and task may have and still count as identical")
    tasks: list[str] = Field(description="column order: the offline SentEval tasks first, then any other task "
                             "alphabetically")
    rows: list[Row] = Field(description="sorted by backbone then calibrator")
    max_seeds: int | None = Field(None, description="only with --seeds N: at most N seeds per group")
    seed_groups: list[SeedGroup] | None = Field(None, description="only when a seeded calibrator ran with several "
                                                "seeds (flow-plugin bench --seeds N)")
    interval_method: IntervalMethod | None = Field(None, description="only when some row has intervals")

    def file_text(self, where: str = "leaderboard") -> str:
        """The file's text (JSON, indented by 2, non-ASCII as it is, a newline at the end), after checking
        the board against the models (:func:`check_board`; ``where`` names it in the error)."""
        data = self.model_dump(mode="json")
        check_board(data, where)
        return json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


# ============================================================================ the task-types board
TASK_TYPES_FORMAT = "flow-plugin-task-types-board"
TASK_TYPES_FORMAT_VERSION = 1


class BoardTask(_Part):
    """One labelled task of a task-types board."""

    _ABSENT_WHEN_NONE = ("evaluator_seeds", "evaluator_sd")

    name: str = Field(description='MTEB task name, e.g. "FlowPluginMRClassification"')
    type: str = Field(description='MTEB task type: "Classification", "PairClassification", "Clustering", ...')
    main_score: str = Field(description='MTEB\'s main score of the task, e.g. "accuracy", "max_ap", "v_measure"')
    n_items: int = Field(description="test items the bootstrap resamples (items, pairs, texts or queries)")
    dataset_revision: str
    evaluator_seeds: list[int] | None = Field(default=None, description="the seeds of MTEB's evaluator every row "
                                              "was scored with, a score being the mean over them (null: MTEB's own, "
                                              "42, alone: the evaluator draws nothing at random)")
    evaluator_sd: float | None = Field(default=None, description="raw's standard deviation over the evaluator seeds, "
                                       "in points (null for one seed)")


class TypeDelta(_Part):
    """A Δ against raw with its paired bootstrap 95% interval."""

    delta: float = Field(description="mean over seeds of this row's score minus raw's, in points")
    ci95: Annotated[tuple[float, float], Strict(False)] = Field(description="the 95% interval of the delta")
    significant: bool = Field(description="the interval excludes 0")


class TypeRow(_Part):
    """One calibrator of a task-types board: a plain run, or the runs of several seeds as one row."""

    id: str = Field(description='the model, plus " (seeds <first>-<last>)" for several seeds')
    model: str = Field(description='MTEB model name, e.g. "flow_plugin/minilm-l6-flow"')
    calibrator: str = Field(description="raw | sn | natsv | sn-natsv | whiten | flow | a flow variant")
    seeds: list[int] | None = Field(description="the seeds of a seeded calibrator (null for one without a seed)")
    scores: dict[str, SeedSpread] = Field(description='"<Task>" | "<Type>" (the mean of its tasks) | "average" (the '
                                          "mean of the type averages): over the seeds")
    delta: dict[str, TypeDelta] | None = Field(description='the same columns against raw (null for raw)')


class TaskTypesBoard(_Part):
    """A flow-plugin task-types board (JSON): every calibrator of one backbone on the labelled tasks of every
    MTEB task type, with each Δ against raw and its paired bootstrap interval."""

    _ABSENT_WHEN_NONE = ("run",)

    format: Literal[TASK_TYPES_FORMAT]  # type: ignore[valid-type]
    format_version: Literal[TASK_TYPES_FORMAT_VERSION]  # type: ignore[valid-type]
    name: str
    backbone: str
    updated: str = Field(description="ISO 8601 UTC time the board was built")
    generated_by: str
    scale: Literal["points"] = Field(description="every score and delta: the main score x 100")
    tasks: list[BoardTask] = Field(description="the columns, grouped by type")
    types: dict[str, list[str]] = Field(description="task type -> its tasks, in column order")
    rows: list[TypeRow] = Field(description="raw first, then the calibrators in the catalog's order")
    interval_method: IntervalMethod
    run: dict[str, Any] | None = Field(None, description="where and how the results were computed: precision, "
                                       "CPU, threads, versions, wall and CPU seconds of the study")

    def file_text(self, where: str = "task-types board") -> str:
        """The file's text, after checking it against the models once more."""
        data = self.model_dump(mode="json")
        try:
            TaskTypesBoard.model_validate(data)
        except ValidationError as error:
            raise LeaderboardError(f"{where} does not fit the task-types board format: "
                                   f"{validation_problems(error)}") from None
        return json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def leaderboard_schema() -> dict[str, Any]:
    """The JSON schema of a leaderboard file, generated from :class:`Leaderboard`."""
    return Leaderboard.model_json_schema()


def schema_text() -> str:
    """:func:`leaderboard_schema` as ``flow-plugin leaderboard --schema`` prints it (and README shows it)."""
    return json.dumps(leaderboard_schema(), indent=2, ensure_ascii=False)


def validation_problems(error: ValidationError) -> str:
    """A validation error of these models in one line: its first five problems, each naming the key."""
    return "; ".join(describe_validation_error(error, lambda location: [])[:5])


def check_board(data: Any, where: str = "leaderboard") -> Leaderboard:
    """``data`` (a board as JSON reads it) as a :class:`Leaderboard`; data that does not fit the format
    is a one-line :class:`~flow_plugin.errors.LeaderboardError` naming ``where`` and the problems."""
    try:
        return Leaderboard.model_validate(data)
    except ValidationError as error:
        raise LeaderboardError(f"{where} does not fit the leaderboard format: {validation_problems(error)}") from None


__all__ = ["TASK_TYPES_FORMAT", "TASK_TYPES_FORMAT_VERSION", "BoardTask", "TaskTypesBoard", "TypeDelta", "TypeRow",
           "AVERAGE", "DECIMALS", "DEFAULT_TOLERANCE", "FORMAT", "FORMAT_VERSION", "Comparison", "IntervalMethod", "Intervals", "Leaderboard", "ProtocolName",
           "ReferenceName", "Row", "SeedGroup", "SeedSpread", "TaskScore", "check_board", "leaderboard_schema", "schema_text",
           "is_number", "round_points", "task_sort_key", "to_points", "validation_problems"]
