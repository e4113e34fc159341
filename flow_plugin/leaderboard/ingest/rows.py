"""What a leaderboard row says about its model run: its id, its description (backbone, calibrator,
pooling, fit corpus), what a published board may say about it, and its display names.

**Ids.** :func:`row_id` names a model run: ``<model>@<revision>``, its MTEB experiment, and (for a
second sentence file of one name) the file's sha256.

**Description.** :func:`describe_model`: the registry describes ``flow_plugin/...`` models; for any
other model (or a ``flow_plugin/...`` name this registry does not know) the name, the loader kwargs
and the result folder's ``model_meta.json`` are all there is.

**Published names.** A fit corpus given as a sentence file is published by its file name (and its
sha256 where a fit record carries one as ``corpus_sha256``), never by the path it had on the machine
that ran it: the row's ``experiment_kwargs``, ``fit_corpus``, MTEB experiment name (and so its ``id``)
and its fit summaries all say ``sts-sick-train.txt``, not ``/tmp/sts-sick-train.txt``.
:func:`publish_row` applies this to a row, whether just read or loaded from an older leaderboard, and
is idempotent.

**Display names.** :func:`display_columns` are what the Markdown, the chart and the HTML page show
instead of MTEB model names with revision hashes.

>>> corpus_name("/tmp/sts-sick-train.txt"), corpus_name("C:\\\\data\\\\nli.txt"), corpus_name("target")
('sts-sick-train.txt', 'nli.txt', 'target')
"""

from __future__ import annotations

import re
from typing import Any, TypeGuard

from flow_plugin.calibration.names import CALIBRATOR_NAMES
from flow_plugin.catalog.registry import MODEL_PREFIX, parse_model_name
from flow_plugin.data.fit_corpus import DEFAULT_DUPLICATES, POLICIES
from flow_plugin.errors import RegistryError
from flow_plugin.leaderboard.models import Row, is_number

#: characters MTEB replaces by "_" in an experiment name (its folder name) built from the kwargs
_MTEB_INVALID = '<>:"|?*\\/\0'
#: experiment kwargs shown in their own columns (or as the seed count), not among the options
_OWN_COLUMNS = ("fit_corpus", "fit_duplicates", "calibrator", "pooling")


def row_id(model: str, revision: str, experiment: str | None, corpus_sha256: str | None = None) -> str:
    """The leaderboard row of one model run; ``corpus_sha256`` tells apart runs fitted on sentence files of
    one name but different content (the merge gives it only to a second such file, see
    :func:`flow_plugin.leaderboard.ingest.merge.board_row_id`).

    >>> row_id("flow_plugin/minilm-l6", "8b3219a", None)
    'flow_plugin/minilm-l6@8b3219a'
    >>> row_id("flow_plugin/minilm-l6-whiten", "8b3219a", "fit_corpus_inputs")
    'flow_plugin/minilm-l6-whiten@8b3219a [fit_corpus_inputs]'
    >>> row_id("flow_plugin/minilm-l6-sn", "8b3219a", "fit_corpus_nli.txt", "0123456789abcdef" * 4)
    'flow_plugin/minilm-l6-sn@8b3219a [fit_corpus_nli.txt] (corpus sha256 0123456789ab)'
    """
    return (f"{model}@{revision}" + (f" [{experiment}]" if experiment else "")
            + (f" (corpus sha256 {corpus_sha256[:12]})" if corpus_sha256 else ""))


def is_file_corpus(value: Any) -> TypeGuard[str]:
    """True for a fit corpus that names a sentence file (not a policy).

    >>> is_file_corpus("target"), is_file_corpus("/tmp/nli.txt"), is_file_corpus(None)
    (False, True, False)
    """
    return isinstance(value, str) and value not in POLICIES


def corpus_name(value: str) -> str:
    """A policy as it is; a sentence file by its file name (any folder, POSIX or Windows, dropped)."""
    if not is_file_corpus(value):
        return value
    return re.split(r"[\\/]", value.rstrip("\\/"))[-1] or value


def corpus_label(value: str, sha256: str | None = None) -> str:
    """The leaderboard's ``fit_corpus`` text of a corpus: a policy, or ``file <name>`` (and its
    sha256's first 12 digits when known).

    >>> corpus_label("target"), corpus_label("/tmp/nli.txt"), corpus_label("/tmp/nli.txt", "ab" * 32)
    ('target', 'file nli.txt', 'file nli.txt (sha256 abababababab)')
    """
    if not is_file_corpus(value):
        return value
    return f"file {corpus_name(value)}" + (f" (sha256 {sha256[:12]})" if sha256 else "")


def _mteb_mangled(value: str) -> str:
    for char in _MTEB_INVALID:
        value = value.replace(char, "_")
    return value


def public_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Experiment kwargs with a sentence-file ``fit_corpus`` reduced to its file name.

    >>> public_kwargs({"fit_corpus": "/tmp/nli.txt", "calibrator_params": {"seed": 3}})
    {'fit_corpus': 'nli.txt', 'calibrator_params': {'seed': 3}}
    """
    corpus = kwargs.get("fit_corpus")
    return {**kwargs, "fit_corpus": corpus_name(corpus)} if is_file_corpus(corpus) else dict(kwargs)


def public_experiment(experiment: str | None, kwargs: dict[str, Any]) -> str | None:
    """MTEB's experiment name with the sentence file's path replaced by its file name, as MTEB
    would have named the experiment of :func:`public_kwargs` (a hashed ``exp_...`` name holds no path).

    >>> public_experiment("fit_corpus__tmp_sts-sick-train.txt", {"fit_corpus": "/tmp/sts-sick-train.txt"})
    'fit_corpus_sts-sick-train.txt'
    >>> public_experiment("fit_corpus_per-call", {"fit_corpus": "per-call"})
    'fit_corpus_per-call'
    """
    corpus = kwargs.get("fit_corpus")
    if experiment is None or not is_file_corpus(corpus):
        return experiment
    return experiment.replace(_mteb_mangled(corpus), _mteb_mangled(corpus_name(corpus)))


def public_text(text: Any, kwargs: dict[str, Any]) -> Any:
    """A text (e.g. a fit record's ``source``) with the sentence file's path replaced by its name.

    >>> public_text("file /tmp/nli.txt, all 20 sentences", {"fit_corpus": "/tmp/nli.txt"})
    'file nli.txt, all 20 sentences'
    """
    corpus = kwargs.get("fit_corpus")
    if not isinstance(text, str) or not is_file_corpus(corpus) or corpus == corpus_name(corpus):
        return text
    return text.replace(corpus, corpus_name(corpus))


def public_fits(fits: list[dict[str, Any]] | None, kwargs: dict[str, Any]) -> list[dict[str, Any]] | None:
    """Fit summaries with the sentence file's path replaced by its name (in every text field)."""
    if fits is None:
        return None
    return [{key: public_text(value, kwargs) for key, value in fit.items()} for fit in fits]


def corpus_sha256(row: Row) -> str | None:
    """The sentence file's sha256 when every fit record of the row that has one agrees."""
    found = {fit.get("corpus_sha256") for entry in row.scores.values() for fit in entry.fits or []}
    found.discard(None)
    return found.pop() if len(found) == 1 else None


def publish_row(row: Row) -> Row:
    """Make a row publishable (in place; idempotent): the sentence file by its name in the kwargs,
    the experiment name, the id (keeping a corpus hash that tells it apart), ``fit_corpus`` and the fit
    summaries."""
    kwargs = row.experiment_kwargs
    corpus = kwargs.get("fit_corpus")
    if not is_file_corpus(corpus):
        return row
    for entry in row.scores.values():
        entry.fits = public_fits(entry.fits, kwargs)
    before = row_id(row.model, row.revision, row.experiment)
    tag = row.id[len(before):] if row.id.startswith(before) else ""  # a corpus hash that tells it apart
    row.experiment = public_experiment(row.experiment, kwargs)
    if row.fit_corpus is not None:
        label = corpus_label(corpus, corpus_sha256(row))
        text = row.fit_corpus
        for old in (f"file {corpus}", corpus, f"file {corpus_name(corpus)}"):
            if text.startswith(old) and not text.startswith(label):
                text = label + text[len(old):]
                break
        row.fit_corpus = text
    row.experiment_kwargs = public_kwargs(kwargs)
    row.id = row_id(row.model, row.revision, row.experiment) + tag
    return row


def settled_kwargs(model: str, kwargs: dict[str, Any], precisions: set[Any]) -> dict[str, Any] | None:
    """A registry model's experiment kwargs with the precision its run resolved to, when they do not say it (a run
    with ``precision`` ``auto`` before runs filed the resolved one) and its run records name exactly one; else None.
    The identity of a result is the values that produced it: ``auto`` that ran float32 is the float32 run.

    >>> settled_kwargs("flow_plugin/minilm-l6-flow", {}, {"float32"})
    {'precision': 'float32'}
    >>> settled_kwargs("flow_plugin/minilm-l6", {"precision": "bf16"}, {"bf16"}) is None
    True
    """
    known = {precision for precision in precisions if isinstance(precision, str)}
    if "precision" in kwargs or len(known) != 1 or not model.startswith(MODEL_PREFIX):
        return None
    try:
        parse_model_name(model)
    except RegistryError:  # a base MTEB loads: its loader, not a precision option, says how it runs
        return None
    return {**kwargs, "precision": known.pop()}


# ------------------------------------------------------------------------- description
def describe_model(
    model: str,
    experiment_kwargs: dict[str, Any] | None = None,
    *,
    adapted_from: str | None = None,
    max_tokens: Any = None,
) -> dict[str, Any]:
    """Backbone, calibrator, pooling and fit corpus of a model name (registry first).

    ``adapted_from`` and ``max_tokens`` come from the result's ``model_meta.json``.

    >>> row = describe_model("flow_plugin/minilm-l6-whiten")
    >>> row["backbone"], row["calibrator"], row["fit_corpus"], row["metadata_source"]
    ('minilm-l6', 'whiten', 'target', 'registry')
    >>> describe_model("acme/encoder", {}, max_tokens=512.0)["max_seq_length"]
    512
    """
    kwargs = dict(experiment_kwargs or {})
    params = kwargs.get("calibrator_params")
    overrides: dict[str, Any] = params if isinstance(params, dict) else {}
    if model.startswith(MODEL_PREFIX):
        return _describe_flow_plugin_model(model, kwargs, overrides, adapted_from, max_tokens)
    calibrator = str(kwargs.get("calibrator", "raw"))
    return {
        "backbone": model,
        "backbone_model": adapted_from or model,
        "calibrator": calibrator,
        "calibrator_params": dict(overrides),
        "pooling": kwargs.get("pooling"),
        "max_seq_length": int(max_tokens) if is_number(max_tokens) else None,
        "fit_corpus": None if calibrator == "raw" else (corpus_label(str(kwargs["fit_corpus"])) if "fit_corpus" in kwargs
                                                        else None),
        "metadata_source": "model_meta",
    }


def _describe_flow_plugin_model(model: str, kwargs: dict[str, Any], overrides: dict[str, Any],
                                adapted_from: str | None, max_tokens: Any) -> dict[str, Any]:
    try:
        registry_model = parse_model_name(model)
    except RegistryError:
        registry_model = None
    if registry_model is not None:
        spec = registry_model.backbone
        raw = registry_model.calibrator == "raw"
        return {
            "backbone": spec.name,
            "backbone_model": spec.hub_id,
            "calibrator": registry_model.calibrator,
            "calibrator_params": {} if raw else {**registry_model.calibrator_params, **overrides},
            "pooling": kwargs.get("pooling", spec.pooling),
            "max_seq_length": spec.max_seq_length,
            "fit_corpus": None if raw else _fit_corpus(kwargs),
            "metadata_source": "registry",
        }
    # a flow_plugin model this registry does not know: read the suffix
    short = model[len(MODEL_PREFIX):]
    calibrator = "raw"
    for method in sorted(CALIBRATOR_NAMES, key=len, reverse=True):
        if method != "raw" and short.endswith("-" + method):
            calibrator, short = method, short[: -len(method) - 1]
            break
    return {
        "backbone": short,
        "backbone_model": adapted_from or short,
        "calibrator": calibrator,
        "calibrator_params": dict(overrides),
        "pooling": kwargs.get("pooling"),
        "max_seq_length": max_tokens if isinstance(max_tokens, int) else None,
        "fit_corpus": None if calibrator == "raw" else _fit_corpus(kwargs),
        "metadata_source": "model_meta",
    }


def _fit_corpus(kwargs: dict[str, Any]) -> str:
    """What a flow-plugin model was fitted on: the policy or ``file <name>`` (never the file's path),
    and "unique sentences" when duplicates were dropped.

    >>> _fit_corpus({}), _fit_corpus({"fit_corpus": "per-call", "fit_duplicates": "unique"})
    ('target', 'per-call, unique sentences')
    >>> _fit_corpus({"fit_corpus": "/tmp/nli.txt"})
    'file nli.txt'
    """
    corpus = corpus_label(str(kwargs.get("fit_corpus", "target")))
    return corpus + (", unique sentences" if kwargs.get("fit_duplicates") == "unique" else "")


# ------------------------------------------------------------------------- display names
def _format_value(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def display_columns(row: Row, seeds: list[int] | None = None) -> dict[str, str]:
    """The columns that name a row in every rendering: backbone, calibrator, pooling, fit corpus,
    duplicate policy and options (hyper-parameters, other loader kwargs, the seed or seed count).
    ``seeds``: the seeds of the row's seed group, when it stands for one.

    >>> row = Row(id="flow_plugin/m-flow@r [fit_corpus_nli.txt]", model="flow_plugin/m-flow", revision="r",
    ...           experiment="fit_corpus_nli.txt", backbone="m", backbone_model="acme/m", calibrator="flow",
    ...           experiment_kwargs={"fit_corpus": "nli.txt", "fit_duplicates": "unique",
    ...                              "calibrator_params": {"seed": 3, "epochs": 2}},
    ...           calibrator_params={"seed": 3, "epochs": 2}, pooling="last-avg", max_seq_length=128,
    ...           fit_corpus="file nli.txt", metadata_source="registry", scores={}, n_tasks=0, average=None,
    ...           average_wmean=None, complete=False, baseline=None, delta=None)
    >>> display_columns(row)
    {'backbone': 'm', 'calibrator': 'flow', 'pooling': 'last-avg', 'fit_corpus': 'nli.txt', 'duplicates': 'unique', 'options': 'epochs=2, seed 3'}
    """
    kwargs = row.experiment_kwargs
    raw = row.calibrator == "raw"
    fitted = not raw and row.fit_corpus is not None
    corpus = str(row.fit_corpus).split(", unique sentences")[0] if fitted else "—"
    if corpus.startswith("file "):
        corpus = corpus[len("file "):]
    duplicates = str(kwargs.get("fit_duplicates") or (DEFAULT_DUPLICATES if row.model.startswith(MODEL_PREFIX) else "—"))
    params = dict(row.calibrator_params)
    seed = params.pop("seed", None)
    options = [f"{key}={_format_value(value)}" for key, value in sorted(params.items())]
    options += [f"{key}={_format_value(value)}" for key, value in sorted(kwargs.items())
                if key not in _OWN_COLUMNS and key != "calibrator_params"]
    if seeds:
        options.append(f"{len(seeds)} seeds" if len(seeds) > 1 else f"seed {seeds[0]}")
    elif seed is not None:
        options.append(f"seed {seed}")
    return {
        "backbone": row.backbone or row.model,
        "calibrator": row.calibrator,
        "pooling": row.pooling or "—",
        "fit_corpus": corpus,
        "duplicates": duplicates if fitted else "—",
        "options": ", ".join(options) or "—",
    }


def display_name(columns: dict[str, str], backbone: bool = True) -> str:
    """One line for a legend: backbone (unless ``backbone`` is false) and calibrator, then what
    differs from the defaults.

    >>> columns = {"backbone": "m", "calibrator": "flow", "pooling": "last-avg", "fit_corpus": "nli.txt",
    ...            "duplicates": "keep", "options": "5 seeds"}
    >>> display_name(columns), display_name(columns, backbone=False)
    ('m flow (nli.txt, 5 seeds)', 'flow (nli.txt, 5 seeds)')
    """
    details = [columns["fit_corpus"]] if columns["fit_corpus"] not in ("—", "target") else []
    details += ["unique sentences"] if columns["duplicates"] == "unique" else []
    details += [columns["options"]] if columns["options"] != "—" else []
    name = f"{columns['backbone']} {columns['calibrator']}" if backbone else columns["calibrator"]
    return f"{name} ({', '.join(details)})" if details else name
