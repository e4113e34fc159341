"""Every use flow-plugin makes of MTEB internals: what MTEB offers no public form for, in one place.

Everything else of the adapter goes through MTEB's public API (``ModelMeta``, ``mteb.evaluate``,
``mteb.get_task(s)``, ``ResultCache``, ``TaskResult``, ``AbsEncoder``, and the task classes'
``load_data``). What this module touches, and why (docs/mteb.md points here):

- :func:`add_models`, :func:`registered_model`: MTEB's ``MODEL_REGISTRY`` dict
  (``mteb.models.model_implementations``), which ``mteb.get_model_meta``, ``mteb.get_model`` and
  ``mteb run -m`` read. MTEB builds it from its own modules and has no way to register a model.
- :func:`add_tasks`, :func:`registered_task`: ``_TASKS_REGISTRY`` and ``TASK_LIST`` of ``mteb.get_tasks``,
  which ``mteb.get_task(s)`` and ``mteb run -t`` read; again no registration function (and a user's task
  named like one of MTEB's must not replace it).
- :func:`refuse_unknown_names`: wraps the classmethod ``ModelMeta.from_hub``, where
  ``mteb.get_model`` (and so ``mteb run -m``) turns for a name that is not in ``MODEL_REGISTRY``, so
  that a misspelt ``flow_plugin/...`` name gets one line with close names instead of a Hub lookup.
- :func:`hint_unknown_tasks`: wraps ``get_task`` of ``mteb.get_tasks`` (which ``mteb.get_tasks`` and ``mteb run -t``
  call), so that an unknown task name says where a user's own tasks come from (``$FLOW_PLUGIN_TASKS``), in one line.
- :func:`check_results_before_loading`: wraps ``ResultCache.load_task_result`` (public; MTEB calls it for every
  task before evaluating it, ``mteb run`` included) so that a result file of a flow-plugin model cut short by a
  killed run is set aside and recomputed, as ``flow-plugin eval`` does, instead of ending in a JSONDecodeError; and
  a result of one of our offline tasks computed from other data (another ``dataset_revision``) is set aside too:
  MTEB's ``only-missing`` reuses a complete result whatever data it came from, and offers no option to check it.
  The five wrappers of MTEB functions here (these three, :func:`after_each_save` and :func:`track_tasks_as_built`)
  were checked on mteb 2.18.11 (the lowest supported) and 2.26.24; each has a test that fails without it
  (tests/test_mteb_compat.py, tests/test_nothing_stale.py).
- :func:`after_each_save`: wraps ``ResultCache.save_to_cache`` (public; MTEB writes every task result through it,
  ``mteb run`` included) so that flow-plugin's records (fit records, per-item data) are written beside each result:
  MTEB tells neither a model nor a task where a result goes, nor that a task ended.
- :func:`track_tasks_as_built`: wraps ``AbsTask.__init__`` so that each task object registers itself by name: the
  task being evaluated comes from what ``encode()`` is given (its metadata's name) and this registry
  (:func:`live_task`), never from the call stack; MTEB hands a model no task object.
- :func:`locked_result_cache`: a ``ResultCache`` whose ``save_to_cache`` (public) holds a lock, because it writes the
  task result and ``model_meta.json`` in place: a second process evaluating into the same folder (a study's
  workers) would otherwise read a half-written file.
- :class:`PairScoredSTS`: overrides ``AbsTaskSTS._evaluate_subset`` and ``_calculate_scores`` (MTEB's
  extension points for subclasses, underscored) to add the "wmean" protocol and keep the per-pair
  cosines of the offline STS tasks.
- :func:`fresh_evaluator_state`, :func:`reseeded`: a task's ``seed``, ``rng_state`` and ``np_rng``, the seed and
  the random generators ``AbsTask.__init__`` makes and MTEB's evaluators draw from (clustering's bootstrap draws),
  which advance with every evaluation of the same task object; a copy of a loaded task with another seed.
- :func:`text_loader`: ``mteb._create_dataloaders.create_dataloader``, the DataLoader MTEB feeds a model with.
- :func:`scored_queries`: ``mteb.abstasks.retrieval._filter_queries_without_positives``, MTEB's rule for the
  queries its retrieval evaluation encodes (those with a relevant document), for the ``eval-splits`` fit.
- :class:`FastLabelClassification`: overrides ``AbsTaskClassification._undersample_data`` and ``_calculate_scores``
  (underscored) to read the label column as a list once instead of item by item.
- :class:`PredictionCapture`, :class:`QueryScoreCapture`, :class:`RecordedClusterDraws`: the labelled tasks' per-item
  data, kept while MTEB scores a split: ``_evaluate_subset`` and ``_save_task_predictions`` (underscored, MTEB's
  extension points for subclasses) with a placeholder prediction folder, ``task_specific_scores`` (public) for
  retrieval's per-query values, and a recording copy of the task's ``rng_state`` for clustering's draws.

Importing this module checks the installed mteb and transformers first
(:func:`flow_plugin.integrations.mteb.versions.require_supported`): outside the supported range it
raises one sentence, before any of the internals above is touched.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import importlib
import inspect
import random
import sys
import weakref
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from flow_plugin.integrations.mteb.versions import require_supported

require_supported()

import numpy as np  # noqa: E402 -- after the version check
from datasets import Dataset  # noqa: E402
from datasets.exceptions import DatasetNotFoundError  # noqa: E402
from mteb._create_dataloaders import create_dataloader  # noqa: E402
from mteb.abstasks import (AbsTask, AbsTaskClassification, AbsTaskClustering,  # noqa: E402
                           AbsTaskClusteringLegacy)
from mteb.abstasks.retrieval import AbsTaskRetrieval, _filter_queries_without_positives  # noqa: E402
from mteb.abstasks.sts import AbsTaskSTS  # noqa: E402
from mteb.cache import ResultCache  # noqa: E402
from mteb.models.model_meta import ModelMeta  # noqa: E402
from mteb.types import PromptType  # noqa: E402

from flow_plugin.errors import UnknownTaskError  # noqa: E402

MODELS_MODULE = "mteb.models.model_implementations"
#: what a task's ``load_data`` raises when the Hugging Face Hub cannot give its data: a ``ConnectionError`` (offline,
#: datasets 3 and later) or datasets' ``DatasetNotFoundError`` (offline on datasets 2.x, or a dataset the Hub lacks)
HUB_DATA_ERRORS: tuple[type[Exception], ...] = (ConnectionError, DatasetNotFoundError)
TASKS_MODULE = "mteb.get_tasks"


# ----------------------------------------------------------------------------- registries
def _module(name: str, module: Any = None) -> Any:
    return module or sys.modules.get(name) or importlib.import_module(name)


def add_models(metas: dict[str, ModelMeta], module: Any = None) -> list[str]:
    """Put ``metas`` (registry key -> ``ModelMeta``) into MTEB's ``MODEL_REGISTRY``, replacing an older entry;
    returns the keys. A calibrated name's entry keeps its base's ``name`` (its results' folder)."""
    registry = _module(MODELS_MODULE, module).MODEL_REGISTRY
    registry.update(metas)
    return list(metas)


def registered_model(name: str) -> ModelMeta | None:
    """MTEB's ``ModelMeta`` of ``name`` (e.g. ``sentence-transformers/all-MiniLM-L6-v2``), or ``None``.
    Reads the registry MTEB has built and never imports it: this runs while MTEB builds it, when
    ``mteb.get_model_meta`` cannot be imported yet."""
    registry = getattr(sys.modules.get(MODELS_MODULE), "MODEL_REGISTRY", None) or {}
    entry = registry.get(name)
    return entry if isinstance(entry, ModelMeta) else None


def add_tasks(classes: Iterable[type[AbsTask]], listed: Iterable[type[AbsTask]] = (), module: Any = None) -> list[str]:
    """Make ``classes`` known to ``mteb.get_task(s)`` by name, and add ``listed`` to the full task list
    (``mteb.get_tasks()`` without names); returns the names."""
    module = _module(TASKS_MODULE, module)
    names = []
    for cls in classes:
        module._TASKS_REGISTRY[cls.metadata.name] = cls
        names.append(cls.metadata.name)
    listed = tuple(listed)
    if listed:
        known = set(module.TASK_LIST)
        module.TASK_LIST = tuple(module.TASK_LIST) + tuple(cls for cls in listed if cls not in known)
    return names


def registered_task(name: str, module: Any = None) -> type[AbsTask] | None:
    """The task class ``mteb.get_task(name)`` finds in ``_TASKS_REGISTRY`` now, or ``None``."""
    return _module(TASKS_MODULE, module)._TASKS_REGISTRY.get(name)


# ----------------------------------------------------------------------------- unknown names
def refuse_unknown_names(prefix: str, resolve: Callable[[str], ModelMeta]) -> None:
    """Names under ``prefix`` that are not in ``MODEL_REGISTRY`` go to ``resolve(name)`` (which returns
    their ``ModelMeta`` or raises, e.g. :class:`~flow_plugin.errors.UnknownModelError` with close names)
    instead of the Hugging Face Hub, where ``mteb.get_model`` and ``mteb run -m`` would look them up.
    Every other name goes on to the Hub as before. Idempotent."""
    current = inspect.getattr_static(ModelMeta, "from_hub")
    original = current.__func__
    if getattr(original, "_flow_plugin_prefix", None) == prefix:
        return

    @functools.wraps(original)
    def from_hub(cls: type[ModelMeta], model: str, *args: Any, **kwargs: Any) -> ModelMeta:
        if isinstance(model, str) and model.startswith(prefix):
            return resolve(model)  # an unknown name is one error with close names, never a Hub lookup
        return original(cls, model, *args, **kwargs)

    from_hub._flow_plugin_prefix = prefix  # type: ignore[attr-defined]
    ModelMeta.from_hub = classmethod(from_hub)  # type: ignore[method-assign,assignment]


def hint_unknown_tasks(hint: Callable[[], str], module: Any = None) -> None:
    """MTEB's error for a task name it does not know (``mteb run -t``, ``mteb.get_tasks``) gains ``hint()`` (where a
    user's own tasks come from) and becomes :class:`~flow_plugin.errors.UnknownTaskError`, still a ``KeyError``.
    Idempotent."""
    tasks_module = _module(TASKS_MODULE, module)
    original = tasks_module.get_task
    if getattr(original, "_flow_plugin_hint", False):
        return

    @functools.wraps(original)
    def get_task(task_name: str, *args: Any, **kwargs: Any) -> Any:
        try:
            return original(task_name, *args, **kwargs)
        except KeyError as error:
            said = str(error.args[0] if error.args else task_name).removeprefix("KeyError: ")
            raise UnknownTaskError(f"{said}{hint()}") from None

    get_task._flow_plugin_hint = True  # type: ignore[attr-defined]
    tasks_module.get_task = get_task  # mteb.get_tasks() looks it up here; mteb.get_task is bound after this module


# ----------------------------------------------------------------------------- damaged and stale results
#: the task objects alive in this process, by name, oldest first: ``ResultCache.load_task_result`` and ``encode()``
#: are given a task's name only, and the data an instance reads (its own data folder) says which
#: ``dataset_revision`` a result must carry. Weak: a task dropped by its owner leaves the newer or older ones.
_LIVE_TASKS: dict[str, list[weakref.ref[Any]]] = {}


def track_task(task: Any) -> None:
    """Record ``task`` as the newest object of its name (each task when it is built; our loop before it runs one)."""
    alive = [ref for ref in _LIVE_TASKS.get(task.metadata.name, []) if ref() is not None and ref() is not task]
    _LIVE_TASKS[task.metadata.name] = [*alive, weakref.ref(task)]


def check_results_before_loading(prefix: str, check: Callable[[Path], Any],
                                 check_task: Callable[[Path, Any], Any] | None = None) -> None:
    """Before ``ResultCache.load_task_result`` reads a result (the check MTEB makes before it evaluates a task,
    ``mteb run`` included): ``check(path)`` sees the file of a model under ``prefix`` (a file cut short by a killed
    run is set aside there, so MTEB recomputes the task instead of failing to parse it), and ``check_task(path,
    task)`` the file of any model on one of our offline tasks built in this process (a result of other data is set
    aside there: MTEB's ``only-missing`` reuses a complete result whatever its ``dataset_revision``). What
    ``flow-plugin eval`` does before it runs. Every other result loads as before. Idempotent."""
    current = inspect.getattr_static(ResultCache, "load_task_result")
    if getattr(current, "_flow_plugin_prefix", None) == prefix:
        return
    load = inspect.signature(current)
    where = set(inspect.signature(ResultCache.get_task_result_path).parameters) - {"self", "remote"}
    folder_prefix = ModelMeta.model_construct(name=prefix + "x").model_name_as_path()[:-1]

    @functools.wraps(current)
    def load_task_result(self: ResultCache, *args: Any, **kwargs: Any) -> Any:
        arguments = load.bind(self, *args, **kwargs).arguments
        model = arguments.get("model_name")
        name = model.name if isinstance(model, ModelMeta) else str(model)
        path = Path(self.get_task_result_path(**{key: arguments[key] for key in where if key in arguments}))
        if name and (name.startswith(prefix) or name.startswith(folder_prefix)):
            check(path)
        task = live_task(str(arguments.get("task_name")))
        if check_task is not None and task is not None:
            check_task(path, task)
        return current(self, *args, **kwargs)

    load_task_result._flow_plugin_prefix = prefix  # type: ignore[attr-defined]
    ResultCache.load_task_result = load_task_result  # type: ignore[method-assign]


# ----------------------------------------------------------------------------- after each save
def after_each_save(write: Callable[[Path, Any, ModelMeta], Any]) -> None:
    """After ``ResultCache.save_to_cache`` wrote a task result (MTEB writes every result through it, ``mteb run``
    included), ``write(path, task_result, model_meta)`` writes flow-plugin's records beside it: MTEB tells neither a
    model nor a task where a result goes (checked on mteb 2.18.11 and 2.26.24). Idempotent."""
    current = inspect.getattr_static(ResultCache, "save_to_cache")
    if getattr(current, "_flow_plugin_after_save", False):
        return

    @functools.wraps(current)
    def save_to_cache(self: ResultCache, task_result: Any, model_name: Any, *args: Any, **kwargs: Any) -> Any:
        saved = current(self, task_result, model_name, *args, **kwargs)
        if isinstance(model_name, ModelMeta):
            write(Path(self.get_task_result_path(task_result.task_name, model_name)), task_result, model_name)
        return saved

    save_to_cache._flow_plugin_after_save = True  # type: ignore[attr-defined]
    ResultCache.save_to_cache = save_to_cache  # type: ignore[method-assign]


def live_task(name: str) -> Any:
    """The newest task object of ``name`` still alive in this process (built, or handed to our loop last), or None."""
    for ref in reversed(_LIVE_TASKS.get(name, [])):
        task = ref()
        if task is not None:
            return task
    return None


def track_tasks_as_built() -> None:
    """Every task object registers itself by name when it is built (wraps ``AbsTask.__init__``): ``encode()`` is
    given a task's metadata only, and a fit reads the text of the task object being evaluated (a user's own task
    class, MTEB's, ours with its own data folder). Idempotent."""
    current = AbsTask.__dict__["__init__"]
    if getattr(current, "_flow_plugin_tracks", False):
        return

    @functools.wraps(current)
    def __init__(self: AbsTask, *args: Any, **kwargs: Any) -> None:
        current(self, *args, **kwargs)
        track_task(self)

    __init__._flow_plugin_tracks = True  # type: ignore[attr-defined]
    AbsTask.__init__ = __init__  # type: ignore[method-assign]


@functools.cache
def _locked_cache_class() -> type:
    class LockedResultCache(ResultCache):
        """MTEB's result cache; each save holds the lock the instance was made with."""

        def __init__(self, cache_path: Path, lock: Callable[[], contextlib.AbstractContextManager[Any]]) -> None:
            super().__init__(cache_path)
            self.lock = lock

        def save_to_cache(self, *args: Any, **kwargs: Any) -> Any:
            with self.lock():
                return super().save_to_cache(*args, **kwargs)

    return LockedResultCache


def locked_result_cache(folder: Path, lock: Callable[[], contextlib.AbstractContextManager[Any]]) -> ResultCache:
    """MTEB's ``ResultCache`` of ``folder`` whose every ``save_to_cache`` (the task result, then ``model_meta.json``,
    each written in place) runs inside ``lock()``; readers of those files that take the same lock never see one
    half-written."""
    return _locked_cache_class()(folder, lock)


# ----------------------------------------------------------------------------- feeding a base model
def text_loader(texts: list[str], task_metadata: Any, batch_size: int = 32) -> Any:
    """A DataLoader of ``texts`` in MTEB's batches (``{"text": [...]}``), made by MTEB's own
    ``create_dataloader``, so a base model reads the fit text as it reads MTEB's."""
    return create_dataloader(Dataset.from_dict({"text": texts}), task_metadata=task_metadata, input_column="text",
                             batch_size=batch_size)


def scored_queries(relevant_docs: Any, queries: Any) -> Any:
    """The queries of a retrieval split that MTEB's evaluation encodes: it drops those without a relevant
    document first."""
    return _filter_queries_without_positives(relevant_docs, queries)[1]


def prompt_type(side: str | None) -> Any:
    """MTEB's ``PromptType`` of a side (``"query"``, ``"document"``), or None."""
    return None if side is None else PromptType(side)


# ----------------------------------------------------------------------------- evaluator randomness
def fresh_evaluator_state(task: AbsTask) -> None:
    """Give ``task`` the random generators a task newly built with its ``seed`` has, as ``AbsTask.__init__``
    makes them (``random.Random(seed)`` and ``numpy.random.default_rng(seed)``).

    MTEB's evaluators draw from them (clustering's bootstrap draws), so the same task object evaluated a second
    time, for another model in the same process, would draw differently from a fresh ``mteb run``; with a fresh
    state every evaluation of a (task, seed) draws the same items whichever route runs it."""
    task.rng_state, task.np_rng = random.Random(task.seed), np.random.default_rng(task.seed)


def evaluator_is_random(task: AbsTask) -> bool:
    """Whether MTEB's evaluator of ``task`` draws at random from the task's seed: classification (the training
    items of each experiment, the logistic regression's start) and clustering (the bootstrap draws, k-means'
    start). Pair classification, STS, retrieval and reranking score every item the same way every time."""
    return isinstance(task, (AbsTaskClassification, AbsTaskClustering, AbsTaskClusteringLegacy))


def reseeded(task: AbsTask, seed: int) -> AbsTask:
    """A copy of ``task`` (sharing its loaded data) whose evaluator draws from ``seed``, as a task built with
    ``seed=`` would (MTEB's ``AbsTask(seed=...)``: its ``seed`` attribute and the generators made from it)."""
    twin = copy.copy(task)
    twin.seed = seed
    fresh_evaluator_state(twin)
    return twin


# ----------------------------------------------------------------------------- STS scoring
class PairScoredSTS(AbsTaskSTS):
    """An ``AbsTaskSTS`` whose metrics a subclass extends with :meth:`pair_scores`, which sees every
    pair's gold score and cosine and which split and subset they are of."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._scoring: tuple[str | None, str | None] = (None, None)

    def pair_scores(self, gold: list[float], cosine: Any, *, hf_split: str | None,
                    hf_subset: str | None) -> dict[str, Any]:
        """Metrics added to MTEB's for one (split, subset): override (default: none)."""
        return {}

    def _evaluate_subset(self, model: Any, data_split: Any, **kwargs: Any) -> Any:
        self._scoring = (kwargs.get("hf_split"), kwargs.get("hf_subset"))
        try:
            return super()._evaluate_subset(model, data_split, **kwargs)
        finally:
            self._scoring = (None, None)

    def _calculate_scores(self, scores: Any, normalized_scores: list[float]) -> Any:
        metrics = dict(super()._calculate_scores(scores, normalized_scores))
        hf_split, hf_subset = self._scoring
        metrics.update(self.pair_scores(normalized_scores, scores["cosine_scores"], hf_split=hf_split,
                                        hf_subset=hf_subset))
        return metrics


# ----------------------------------------------------------------------------- per-item capture
#: the prediction folder handed to MTEB's evaluator when the caller gave none: MTEB then passes its per-item
#: predictions to ``_save_task_predictions``, which keeps them and writes nothing
CAPTURE_ONLY = Path("<flow-plugin: capture per-item predictions>")


class PredictionCapture:
    """Keeps what MTEB's evaluator computed per item while it scores a split (``captured``), then hands it to
    ``self.keep_items(data_split, hf_split, hf_subset, scores)``: overrides ``_evaluate_subset`` (a placeholder
    prediction folder when the caller gave none, so MTEB computes its per-item predictions) and
    ``_save_task_predictions`` (keeps them; writes them only to a real folder). For classification, pair
    classification and clustering; put it before MTEB's task class in the bases."""

    captured: Any = None

    def _save_task_predictions(self, predictions: Any, model: Any, prediction_folder: Path, hf_split: str,
                               hf_subset: str) -> None:
        self.captured = predictions
        if prediction_folder != CAPTURE_ONLY:
            super()._save_task_predictions(predictions, model, prediction_folder, hf_split=hf_split,  # type: ignore[misc]
                                           hf_subset=hf_subset)

    def _evaluate_subset(self, model: Any, data_split: Any, *, hf_split: str, hf_subset: str,
                         prediction_folder: Path | None = None, **kwargs: Any) -> Any:
        self.captured = None
        scores = super()._evaluate_subset(model, data_split, hf_split=hf_split, hf_subset=hf_subset,  # type: ignore[misc]
                                          prediction_folder=prediction_folder or CAPTURE_ONLY, **kwargs)
        if self.captured is not None:
            self.keep_items(data_split, hf_split, hf_subset, scores)  # type: ignore[attr-defined]
        return scores


class QueryScoreCapture:
    """The per-query values of a retrieval or reranking task (``AbsTaskRetrieval``): pytrec_eval's, which MTEB hands
    to ``task_specific_scores``, kept as ``captured`` and handed to ``self.keep_items`` as :class:`PredictionCapture`
    does. MTEB drops the queries without a relevant document from the split it is given, in place; it gets a copy,
    so the task's own data stays whole and the "target" fit (which reads it) never depends on relevance."""

    captured: Any = None

    def task_specific_scores(self, scores: dict[str, dict[str, float]], qrels: Any, results: Any, hf_split: str,
                             hf_subset: str) -> dict[str, float]:
        self.captured = scores
        return super().task_specific_scores(scores, qrels, results, hf_split=hf_split,  # type: ignore[misc]
                                            hf_subset=hf_subset)

    def _evaluate_subset(self, model: Any, data_split: Any, *, hf_split: str, hf_subset: str, **kwargs: Any) -> Any:
        self.captured = None
        scores = AbsTaskRetrieval._evaluate_subset(self, model, dict(data_split), hf_split=hf_split,  # type: ignore[arg-type]
                                                   hf_subset=hf_subset, **kwargs)
        if self.captured is not None:
            self.keep_items(data_split, hf_split, hf_subset, scores)  # type: ignore[attr-defined]
        return scores


class _RecordingRandom(random.Random):
    """A ``random.Random`` that keeps what ``choices`` returned (the items a clustering experiment draws);
    it draws exactly what the generator it copies would."""

    def __init__(self, state: Any) -> None:
        super().__init__()
        self.setstate(state)
        self.drawn: list[list[int]] = []

    def choices(self, population: Any, weights: Any = None, *, cum_weights: Any = None, k: int = 1) -> list[Any]:
        chosen = super().choices(population, weights, cum_weights=cum_weights, k=k)
        self.drawn.append(list(chosen))
        return chosen


class RecordedClusterDraws:
    """A clustering task (``AbsTaskClustering``) whose every evaluation draws from the task's seed, as a fresh task
    would, so a score is a function of the embeddings and the seed, never of which models this task object evaluated
    before; the items each bootstrap draw took are kept in ``rng_state.drawn`` (MTEB's clustering draws them from the
    task's ``rng_state`` with ``choices``). Put it before :class:`PredictionCapture` in the bases."""

    def _evaluate_subset(self, model: Any, data_split: Any, *, hf_split: str, hf_subset: str,
                         prediction_folder: Path | None = None, **kwargs: Any) -> Any:
        saved = self.rng_state  # type: ignore[has-type]
        self.rng_state = _RecordingRandom(random.Random(self.seed).getstate())  # type: ignore[attr-defined]
        try:
            return super()._evaluate_subset(model, data_split, hf_split=hf_split, hf_subset=hf_subset,  # type: ignore[misc]
                                            prediction_folder=prediction_folder, **kwargs)
        finally:
            self.rng_state = saved


# ----------------------------------------------------------------------------- classification's label columns
class _ListColumns:
    """A ``datasets.Dataset`` whose columns read as Python lists in one go (``dataset[column][:]``): MTEB reads a
    ``datasets`` column item by item, each item a row lookup (on TREC's 5,452 training items, 0.7 s per experiment)."""

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset

    def __getitem__(self, key: Any) -> Any:
        return self.dataset[key][:] if isinstance(key, str) else self.dataset[key]

    def __len__(self) -> int:
        return len(self.dataset)

    def select(self, *args: Any, **kwargs: Any) -> Any:
        return self.dataset.select(*args, **kwargs)


class FastLabelClassification:
    """Overrides ``AbsTaskClassification._undersample_data`` and ``_calculate_scores`` (MTEB's methods, underscored)
    so that they read the label column as a list once: the same draws and the same scores, without MTEB's
    item-by-item reads of a ``datasets`` column (a classification evaluation of TREC took about 10 s longer). Put it
    before ``AbsTaskClassification`` in a task class's bases."""

    def _undersample_data(self, dataset: Any, experiment_num: int, idxs: Any = None) -> Any:
        return super()._undersample_data(_ListColumns(dataset), experiment_num, idxs)  # type: ignore[misc]

    def _calculate_scores(self, y_test: Any, y_pred: Any) -> Any:
        return super()._calculate_scores(np.asarray(y_test[:]), y_pred)  # type: ignore[misc]
