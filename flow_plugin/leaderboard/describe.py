"""What a leaderboard row says about its model: backbone, calibrator, pooling, fit corpus.

The registry describes ``flow_plugin/...`` models; for any other model (or a
``flow_plugin/...`` name this registry does not know) the name, the loader kwargs and the
result folder's ``model_meta.json`` are all there is.
"""

from __future__ import annotations

from typing import Any

from flow_plugin.leaderboard.public import corpus_label
from flow_plugin.catalog.registry import MODEL_PREFIX
from flow_plugin.leaderboard.schema import CALIBRATOR_ORDER, is_number


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
    from flow_plugin.catalog.registry import parse_model_name
    from flow_plugin.errors import RegistryError

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
    for method in sorted(CALIBRATOR_ORDER, key=len, reverse=True):
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
