"""What the start-up hook adds to MTEB's registries, imported when MTEB's registry modules load.

:func:`register_models` adds a ``ModelMeta`` for every registry model name and answers unknown
``flow_plugin/`` names with close names; :func:`register_tasks` adds the offline STS, retrieval and
labelled tasks, and arms the checks before MTEB reads a result and the records written after it saves
one. :mod:`.hook` (standard library only, imported at every start-up) imports this module and calls these
functions once each, when MTEB's model and task registries have loaded and MTEB's package is whole.

Importing this module first checks the installed mteb and transformers against the supported range
(:mod:`.versions`): outside it, :class:`~flow_plugin.errors.UnsupportedVersionError` before any MTEB class
an unsupported release may lack is imported.
"""

from __future__ import annotations

from flow_plugin.integrations.mteb.versions import require_supported

require_supported()

from flow_plugin.catalog.labelled_tasks import unknown_task_hint  # noqa: E402 -- after the version check
from flow_plugin.catalog.registry import MODEL_PREFIX  # noqa: E402
from flow_plugin.integrations.mteb.base_models import load_calibrated, resolve_spelling  # noqa: E402
from flow_plugin.integrations.mteb.calibrated import write_beside_result  # noqa: E402
from flow_plugin.integrations.mteb.compat import (add_models, add_tasks, after_each_save,  # noqa: E402
                                                  check_results_before_loading, hint_unknown_tasks,
                                                  refuse_unknown_names, track_tasks_as_built)
from flow_plugin.integrations.mteb.labelled_tasks import (labelled_task_classes,  # noqa: E402
                                                          listed_labelled_task_classes)
from flow_plugin.integrations.mteb.meta import all_model_metas  # noqa: E402
from flow_plugin.integrations.mteb.retrieval_tasks import RETRIEVAL_TASK_CLASSES, configured_glue_data  # noqa: E402
from flow_plugin.integrations.mteb.sts_tasks import TASK_CLASSES, configured_data_dir  # noqa: E402
from flow_plugin.results.recovery import set_aside_if_stale, set_aside_if_truncated  # noqa: E402


def register_models(module: object = None, requirements: list[str] | None = None) -> list[str]:
    """Add every registry model's ``ModelMeta`` to MTEB's model registry (``module``, else the installed one), and
    answer unknown ``flow_plugin/`` names with close names (a calibrator on an MTEB model or a local folder, a
    registry folder added since: :func:`~flow_plugin.integrations.mteb.base_models.resolve_spelling`); return the
    names. ``requirements`` overrides the supported versions checked first."""
    require_supported(requirements)
    names = add_models(all_model_metas(load_calibrated), module)  # each built by MTEB through the one loader
    refuse_unknown_names(MODEL_PREFIX, resolve_spelling)
    return names


def register_tasks(module: object = None, requirements: list[str] | None = None) -> list[str]:
    """Add the offline STS, retrieval and labelled tasks to MTEB's task registry (``module``, else the installed
    one), the check of our results before MTEB reads one and our records after it saves one; return the names.
    ``requirements`` overrides the supported versions checked first."""
    require_supported(requirements)
    listed = (TASK_CLASSES if configured_data_dir() is not None else ()) + (
        RETRIEVAL_TASK_CLASSES if configured_glue_data() is not None else ())
    names = add_tasks((*TASK_CLASSES, *RETRIEVAL_TASK_CLASSES), listed, module)
    # after the tasks above: a user's malformed task file is reported, and they stay registered
    names += add_tasks(labelled_task_classes(), listed_labelled_task_classes(), module)
    hint_unknown_tasks(unknown_task_hint, module)
    # a damaged result of ours is recomputed
    check_results_before_loading(MODEL_PREFIX, set_aside_if_truncated, set_aside_if_stale)
    after_each_save(write_beside_result)  # fit records and per-item data beside each result
    track_tasks_as_built()  # the task a fit reads: the object being evaluated
    return names
