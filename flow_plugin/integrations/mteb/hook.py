"""Puts flow-plugin's models and offline tasks into MTEB's registries when MTEB loads.

MTEB has no plugin entry point: ``MODEL_REGISTRY`` is built from MTEB's own modules and
``_TASKS_REGISTRY`` from ``mteb.tasks``. The installed file ``flow_plugin_mteb.pth``
(site-packages) calls :func:`install` at interpreter start-up. ``install`` only appends a
tiny import finder to ``sys.meta_path``: nothing else is imported and nothing is read, so
a Python process that never imports MTEB pays nothing measurable. Once MTEB's task registry
module has executed, and for the models once MTEB's package is whole (and in both cases once no module
of flow-plugin is half loaded), the finder's callbacks add (:mod:`.registration`):

- a ``ModelMeta`` for every registry model name (``mteb.get_model_meta`` /
  ``mteb.get_model`` / ``mteb run -m flow_plugin/...``), and a calibrator on any other model by its
  spelling (``flow_plugin/<MTEB model or folder>-<calibrator>``, :mod:`.base_models`);
- the offline SentEval-format STS tasks, the offline GLUE QNLI retrieval task and the labelled
  tasks of every type (built-in and ``$FLOW_PLUGIN_TASKS``) to ``_TASKS_REGISTRY`` (found by name
  with ``mteb run -t``), and to the full task list when their data is configured
  (``FLOW_PLUGIN_SHARED_DATA``, :mod:`flow_plugin.data.roots`); a user's
  task file that is broken, or a task named like one of MTEB's, is left out with a warning;
- a check of every result file of a ``flow_plugin/`` model before MTEB reads it: one cut short by a
  killed run is set aside and recomputed; and of every result on one of our offline tasks: one computed from other
  data than the task reads now is set aside and recomputed (:func:`.compat.check_results_before_loading`);
- after MTEB saves a result, flow-plugin's records beside it: the fit records of a calibrated model and the
  per-item data of our tasks (:func:`.compat.after_each_save`).

Before registering, the installed mteb and transformers are checked against the ranges
flow-plugin declares (:mod:`.versions`): outside them, the hook registers nothing and says so in
one line on stderr; MTEB itself imports and runs as without the plugin. A misspelt ``flow_plugin/``
name gets one line with close names instead of a Hub lookup (:func:`.compat.refuse_unknown_names`).
Every MTEB internal touched lives in :mod:`.compat`.

Turn the hook off with ``FLOW_PLUGIN_DISABLE_MTEB_HOOK=1``; :func:`register` does the
same work by hand (e.g. after ``import mteb`` in a process started with the hook off).

This module imports only the standard library.
"""

from __future__ import annotations

# Only modules every interpreter has already loaded at start-up (``python -X importtime -c
# pass``): this module is imported at every start of every Python process of the environment.
# So flow-plugin's own modules (and, through them, MTEB) are imported inside the functions below, when
# MTEB's registry modules load: the one module whose inner imports need no reason each.
import os
import sys

DISABLE_ENV = "FLOW_PLUGIN_DISABLE_MTEB_HOOK"
MODELS_MODULE = "mteb.models.model_implementations"
TASKS_MODULE = "mteb.get_tasks"

MTEB_PACKAGE = "mteb"
#: registrations that wait for MTEB's package to be whole, not only for their registry module. MTEB's model
#: registry finishes loading while its result cache (which the registration imports) is still half loaded, so the
#: models' registration waits; the tasks' runs as soon as their registry is whole (the result cache is by then), so
#: that every task object MTEB builds afterwards, its own mock tasks included, is tracked.
AFTER_MTEB = (MODELS_MODULE,)
#: the modules whose import the finder watches besides MTEB's: flow-plugin's own
OUR_PACKAGE = "flow_plugin."

_registered: set[str] = set()
_said: set[str] = set()
#: registrations that MTEB's import reached while one of flow-plugin's modules (which they may need) was itself
#: importing; the last of our modules to finish runs them (:func:`run_deferred`)
_deferred: dict[str, object] = {}


def disabled() -> bool:
    """True when ``FLOW_PLUGIN_DISABLE_MTEB_HOOK`` is set to 1/true/yes/on."""
    return os.environ.get(DISABLE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def _registration() -> object:
    """:mod:`.registration`: it checks the installed mteb and transformers against the supported range before it
    imports MTEB's classes (outside it, :class:`~flow_plugin.errors.UnsupportedVersionError`)."""
    # our modules, and MTEB through them, load when MTEB's registries are whole: never at start-up
    import flow_plugin.integrations.mteb.registration as registration

    return registration


def register_models(module: object = None, requirements: list[str] | None = None) -> list[str]:
    """Add every registry model's ``ModelMeta`` to MTEB's model registry, and answer unknown ``flow_plugin/``
    names with close names; return the names (:func:`.registration.register_models`; ``requirements`` overrides
    the supported versions)."""
    names = _registration().register_models(module, requirements)  # type: ignore[attr-defined]
    _registered.add(MODELS_MODULE)
    return names


def register_tasks(module: object = None, requirements: list[str] | None = None) -> list[str]:
    """Add the offline STS, retrieval and labelled tasks to MTEB's task registry; return their names
    (:func:`.registration.register_tasks`; ``requirements`` overrides the supported versions)."""
    names = _registration().register_tasks(module, requirements)  # type: ignore[attr-defined]
    _registered.add(TASKS_MODULE)
    return names


def register(requirements: list[str] | None = None) -> None:
    """Register models and tasks now (imports MTEB). Outside the supported mteb or transformers
    range: :class:`~flow_plugin.errors.UnsupportedVersionError`, and nothing is registered."""
    register_models(requirements=requirements)
    register_tasks(requirements=requirements)


_CALLBACKS = {MODELS_MODULE: register_models, TASKS_MODULE: register_tasks}


def _say_once(message: str) -> None:
    if message not in _said:
        _said.add(message)
        print(message, file=sys.stderr)


def _run_callback(name: str, module: object, requirements: list[str] | None = None) -> bool:
    """Run the registration of ``name``: True when it registered. Never raises (MTEB's import and
    every unrelated MTEB run go on): outside the supported versions it says so in one line, once
    per process, and registers nothing; any other failure is one line too."""
    if name in _registered:
        return False
    try:
        _CALLBACKS[name](module, requirements)
        return True
    except Exception as error:  # noqa: BLE001 -- never break MTEB's import; say what failed
        if type(error).__name__ == "UnsupportedVersionError":  # (by name: this module imports only the stdlib)
            _registered.add(name)  # nothing to retry in this process
            _say_once(f"flow-plugin: {error}")
        else:
            _say_once(f"flow-plugin: could not register with {name}: {type(error).__name__}: {error}")
        return False


def _waiting(name: str, finished: str | None = None) -> bool:
    """True while registration ``name`` must wait: one of flow-plugin's modules (or, for :data:`AFTER_MTEB`,
    MTEB's package) other than ``finished`` is executing (imported, not yet whole). The registrations import our
    modules, and one half loaded lacks the names defined below its imports."""
    for loading, module in list(sys.modules.items()):
        watched = loading.startswith(OUR_PACKAGE) or (loading == MTEB_PACKAGE and name in AFTER_MTEB)
        if watched and loading != finished and getattr(getattr(module, "__spec__", None), "_initializing", False):
            return True
    return False


def run_deferred(finished: str | None = None) -> None:
    """Run the registrations deferred while MTEB or our modules loaded, unless one other than ``finished`` (the
    module that just became whole) is still executing."""
    for name in [name for name in _CALLBACKS if name in _deferred and not _waiting(name, finished)]:
        _run_callback(name, _deferred.pop(name))


class _LoaderWithCallback:
    """Wraps the loader of one of MTEB's registry modules (our registration runs after it executes, or after MTEB
    is whole), of MTEB's package, or of one of our modules (registrations that waited for it run after it).
    (Duck-typed like ``importlib.abc.Loader``: importing importlib.abc would cost every start-up.)"""

    def __init__(self, loader: object, name: str) -> None:
        self._loader = loader
        self._name = name

    def create_module(self, spec: object) -> object:
        return self._loader.create_module(spec)  # type: ignore[attr-defined]

    def exec_module(self, module: object) -> None:
        self._loader.exec_module(module)  # type: ignore[attr-defined]
        if self._name not in _CALLBACKS:  # MTEB or one of our modules is whole: what waited for it may register
            if _deferred:
                run_deferred(self._name)
        elif _waiting(self._name):  # one of ours is importing MTEB (or, for the models, MTEB is): wait for it
            _deferred[self._name] = module
        else:
            _run_callback(self._name, module)

    def __getattr__(self, attribute: str) -> object:  # get_source, get_code, ... for tools
        return getattr(self._loader, attribute)


class _MtebRegistryFinder:
    """A ``sys.meta_path`` finder that wraps the loader of MTEB's package and two registry modules (registration
    once both are loaded and MTEB is whole) and of flow-plugin's modules (what waited for one runs after it), and
    ignores every other import."""

    def find_spec(self, fullname: str, path: object, target: object = None) -> object:
        if fullname not in _CALLBACKS and fullname != MTEB_PACKAGE and not fullname.startswith(OUR_PACKAGE):
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
