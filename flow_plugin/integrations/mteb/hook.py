"""Puts flow-plugin's models and offline tasks into MTEB's registries when MTEB loads.

MTEB has no plugin entry point: ``MODEL_REGISTRY`` is built from MTEB's own modules and
``_TASKS_REGISTRY`` from ``mteb.tasks``. The installed file ``flow_plugin_mteb.pth``
(site-packages) calls :func:`install` at interpreter start-up. ``install`` only appends a
tiny import finder to ``sys.meta_path``: nothing else is imported and nothing is read, so
a Python process that never imports MTEB pays nothing measurable. When MTEB's registry
modules finish executing, the finder's callbacks add:

- a ``ModelMeta`` for every registry model name (``mteb.get_model_meta`` /
  ``mteb.get_model`` / ``mteb run -m flow_plugin/...``);
- the offline SentEval-format STS tasks, the offline GLUE QNLI retrieval task and the labelled
  tasks of every type (built-in and ``$FLOW_PLUGIN_TASKS``) to ``_TASKS_REGISTRY`` (found by name
  with ``mteb run -t``), and to the full task list when their data is configured
  (``FLOW_PLUGIN_SENTEVAL_DATA``, ``FLOW_PLUGIN_GLUE_DATA``, ``FLOW_PLUGIN_SHARED_DATA``).

Turn the hook off with ``FLOW_PLUGIN_DISABLE_MTEB_HOOK=1``; :func:`register` does the
same work by hand (e.g. after ``import mteb`` in a process started with the hook off).

This module imports only the standard library.
"""

from __future__ import annotations

# Only modules every interpreter has already loaded at start-up (``python -X importtime -c
# pass``): this module is imported at every start of every Python process of the environment.
import os
import sys

DISABLE_ENV = "FLOW_PLUGIN_DISABLE_MTEB_HOOK"
MODELS_MODULE = "mteb.models.model_implementations"
TASKS_MODULE = "mteb.get_tasks"

_registered: set[str] = set()


def disabled() -> bool:
    """True when ``FLOW_PLUGIN_DISABLE_MTEB_HOOK`` is set to 1/true/yes/on."""
    return os.environ.get(DISABLE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def register_models(module: object = None) -> list[str]:
    """Add every registry model's ``ModelMeta`` to MTEB's ``MODEL_REGISTRY``; return the names."""
    module = module or sys.modules.get(MODELS_MODULE) or __import__(MODELS_MODULE, fromlist=["MODEL_REGISTRY"])
    from flow_plugin.integrations.mteb.meta import all_model_metas

    registry = module.MODEL_REGISTRY
    names = []
    for meta in all_model_metas():
        registry[meta.name] = meta
        names.append(meta.name)
    _registered.add(MODELS_MODULE)
    return names


def register_tasks(module: object = None) -> list[str]:
    """Add the offline STS, retrieval and labelled tasks (:mod:`.labelled_tasks`) to MTEB's task registry;
    return their names."""
    module = module or sys.modules.get(TASKS_MODULE) or __import__(TASKS_MODULE, fromlist=["_TASKS_REGISTRY"])
    from flow_plugin.integrations.mteb.labelled_tasks import labelled_task_classes, listed_labelled_task_classes
    from flow_plugin.integrations.mteb.retrieval_tasks import RETRIEVAL_TASK_CLASSES, configured_glue_data
    from flow_plugin.integrations.mteb.tasks import DATA_ENV, TASK_CLASSES

    def add(classes: tuple[type, ...], listed: tuple[type, ...]) -> None:
        for cls in classes:
            module._TASKS_REGISTRY[cls.metadata.name] = cls
        known = set(module.TASK_LIST)
        module.TASK_LIST = tuple(module.TASK_LIST) + tuple(cls for cls in listed if cls not in known)

    classes = (*TASK_CLASSES, *RETRIEVAL_TASK_CLASSES)
    add(classes, (TASK_CLASSES if os.environ.get(DATA_ENV) else ()) + (
        RETRIEVAL_TASK_CLASSES if configured_glue_data() is not None else ()))
    labelled = labelled_task_classes()  # after the tasks above: a user's malformed task file is reported, they stay
    add(labelled, listed_labelled_task_classes())
    classes = classes + labelled
    _registered.add(TASKS_MODULE)
    return [cls.metadata.name for cls in classes]


def register() -> None:
    """Register models and tasks now (imports MTEB)."""
    register_models()
    register_tasks()


_CALLBACKS = {MODELS_MODULE: register_models, TASKS_MODULE: register_tasks}


def _run_callback(name: str, module: object) -> None:
    if name in _registered:
        return
    try:
        _CALLBACKS[name](module)
    except Exception as error:  # noqa: BLE001 -- never break MTEB's import; say what failed
        import logging

        logging.getLogger(__name__).warning("flow-plugin could not register with %s: %s: %s",
                                            name, type(error).__name__, error)
        print(f"flow-plugin: could not register with {name}: {type(error).__name__}: {error}", file=sys.stderr)


class _LoaderWithCallback:
    """Wraps the loader of one of MTEB's registry modules: runs our callback after it executes.
    (Duck-typed like ``importlib.abc.Loader``: importing importlib.abc would cost every start-up.)"""

    def __init__(self, loader: object, name: str) -> None:
        self._loader = loader
        self._name = name

    def create_module(self, spec: object) -> object:
        return self._loader.create_module(spec)  # type: ignore[attr-defined]

    def exec_module(self, module: object) -> None:
        self._loader.exec_module(module)  # type: ignore[attr-defined]
        _run_callback(self._name, module)

    def __getattr__(self, attribute: str) -> object:  # get_source, get_code, ... for tools
        return getattr(self._loader, attribute)


class _MtebRegistryFinder:
    """A ``sys.meta_path`` finder that wraps the loader of MTEB's two registry modules and
    ignores every other import."""

    def find_spec(self, fullname: str, path: object, target: object = None) -> object:
        if fullname not in _CALLBACKS:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _LoaderWithCallback(spec.loader, fullname)
                return spec
        return None


def install() -> None:
    """Called from ``flow_plugin_mteb.pth`` at start-up: arm the lazy registration (unless disabled)."""
    if disabled():
        return
    if any(isinstance(finder, _MtebRegistryFinder) for finder in sys.meta_path):
        return
    sys.meta_path.insert(0, _MtebRegistryFinder())
    for name in _CALLBACKS:  # MTEB already imported (hook installed late): register at once
        if name in sys.modules:
            _run_callback(name, sys.modules[name])
