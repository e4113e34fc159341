"""The models a calibrator can sit on, and how a name spells one.

A *base model* is any MTEB encoder: a model MTEB can load by name (its own loader, prompts and normalisation),
a local sentence-transformers folder (MTEB's ``SentenceTransformerEncoderWrapper``, which reads the folder's
prompts), or a registry backbone (:class:`RegistryEncoder`: a frozen Hugging Face encoder with our pooling and
embedding cache, ``registry/<name>.toml``).

A calibrated model is spelled ``flow_plugin/<base>-<calibrator>`` (``mteb run -m``, ``flow-plugin eval -m``):
``flow_plugin/minilm-l6-flow``, ``flow_plugin/intfloat/e5-small-v2-whiten``,
``flow_plugin//data/models/my-model-flow`` (an absolute folder), ``flow_plugin/./my-model-sn`` (a relative
one). ``flow_plugin/<backbone>`` alone is a registry backbone's raw embeddings.

The spelling's rules live in :func:`flow_plugin.catalog.registry.spelled_model`.

A base MTEB loads sits behind :class:`~flow_plugin.integrations.mteb.base_encoders.CachedBase`, in the embedding
cache folder when there is one (``FLOW_PLUGIN_CACHE_DIR``, ``--cache-dir``); a registry backbone caches per sentence,
in its encoder.
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Iterable
from typing import Any

import mteb
import numpy as np
from mteb.models.model_meta import ModelMeta
from mteb.models.sentence_transformer_wrapper import SentenceTransformerEncoderWrapper

from flow_plugin.calibration import make_calibrator
from flow_plugin.calibration.names import IDENTITY_ARGUMENTS
from flow_plugin.catalog.builders import build_encoder, resolve
from flow_plugin.catalog.registry import (MODEL_PREFIX, BackboneSpec, RegistryModel, default_registry, folder_revision,
                                          is_folder, is_foreign_base, local_model_folder, parse_model_name,
                                          raw_spelling_hint, spelled_model)
from flow_plugin.data.fit_corpus import FIT_ARGUMENTS
from flow_plugin.encoding.backbone import weights_unavailable
from flow_plugin.encoding.options import EncoderOptions
from flow_plugin.errors import FlowPluginError, InputError, RegistryError, UnknownModelError, did_you_mean
from flow_plugin.integrations.mteb.calibrated import CalibratedModel
from flow_plugin.integrations.mteb.base_encoders import BaseEncoder, loaded_base, texts_of
from flow_plugin.integrations.mteb.meta import backbone_meta, calibrated_meta

#: the keywords a calibrated model's loader takes besides the encoder options
MODEL_ARGUMENTS: tuple[str, ...] = ("calibrator", "calibrator_params", "embed_dim", *FIT_ARGUMENTS, *IDENTITY_ARGUMENTS)


class RegistryEncoder(BaseEncoder):
    """A registry backbone as an MTEB encoder: the frozen encoder, its pooling and the embedding cache
    (:func:`flow_plugin.catalog.builders.build_encoder`); ``flow_plugin/<backbone>``'s raw embeddings."""

    def __init__(self, spec: BackboneSpec, **encoder_options: Any) -> None:
        self.spec = spec
        self.options = EncoderOptions(**encoder_options)
        self.encoder = self.model = build_encoder(RegistryModel(spec, "raw"), self.options)
        self.mteb_model_meta = backbone_meta(spec, load_calibrated)

    def settled_kwargs(self) -> dict[str, Any]:
        """What this backbone runs with that names its results apart: the precision it resolved to (``auto``
        measured on this machine), as an experiment parameter, so ``auto`` and the precision it stands for file
        their results together (one leaderboard row)."""
        return {"precision": self.encoder.backbone.precision}

    def encode(self, inputs: Any, *, task_metadata: Any, hf_split: str, hf_subset: str, prompt_type: Any = None,
               **kwargs: Any) -> np.ndarray:
        texts = texts_of(inputs)
        if not texts:
            return np.empty((0, self.spec.embedding_dim), dtype=np.float32)
        return self.encoder.encode(texts, batch_size=kwargs.get("batch_size"))

    def embed(self, texts: list[str], task_metadata: Any, hf_subset: str, side: str | None,
              batch_size: int | None = None) -> np.ndarray:
        return self.encoder.encode(texts, batch_size=batch_size)  # no prompts: one row per text, whatever the task

    def kept(self, texts: list[str], task_metadata: Any, hf_subset: str, side: str | None) -> np.ndarray | None:
        return self.encoder.cache.get(texts)


def refuse_encoder_options(base: str, encoder_options: Iterable[str]) -> None:
    """An :class:`InputError` when encoder options are given for ``base``, a base outside the registry."""
    if encoder_options:
        raise InputError(f"{base}: the encoder options {', '.join(sorted(encoder_options))} apply to registry "
                         "backbones only; the model's own loader decides how it encodes")


def load_base(base: str, revision: str | None = None, device: str | None = None, **encoder_options: Any) -> Any:
    """The base model a spelling names: a registry backbone, a local sentence-transformers folder, or a model
    MTEB loads by name (with its own prompts, behind the embedding cache: ``cache_dir``, else
    ``$FLOW_PLUGIN_CACHE_DIR``, else memory); the other ``encoder_options`` reach a registry backbone only."""
    registry = default_registry()
    if base in registry:
        return RegistryEncoder(registry[base], device=device, **encoder_options)
    cache_dir = encoder_options.pop("cache_dir", None)
    refuse_encoder_options(base, encoder_options)
    if is_folder(base):
        folder = local_model_folder(base)
        current = folder_revision(folder)
        if revision not in (None, current):
            raise InputError(f"{base}: the folder's content is revision {current} now, not {revision}: it changed "
                             "since; evaluate it as it is (no revision), or restore the folder")
        wrapper = SentenceTransformerEncoderWrapper(str(folder), device=device)
        wrapper.mteb_model_meta = wrapper.mteb_model_meta.model_copy(update={"revision": current})
        return loaded_base(wrapper, cache_dir)

    try:
        return loaded_base(_from_mteb(base, lambda: mteb.get_model(base, revision, device=device)), cache_dir)
    except OSError as error:  # its files: neither in the Hugging Face cache nor to be had from the Hub
        if isinstance(error, FlowPluginError):
            raise
        raise weights_unavailable(base, error, None) from error


def load_calibrated(base: str | BackboneSpec, revision: str | None = None, *, device: str | None = None,
                    calibrator: str = "raw", calibrator_params: dict[str, Any] | None = None,
                    embed_dim: int | None = None, **kwargs: Any) -> Any:
    """A calibrated model from its base's spelling (``flow_plugin/`` in front or not) or a registry backbone's spec,
    and the loader's keywords: MTEB's loader of every ``flow_plugin/`` name, which passes the backbone's name and the
    calibrator among the keywords. A registry backbone takes its registry file's hyper-parameters, then
    ``calibrator_params``; any keyword that is neither an encoder option nor a fit setting is an error naming the
    closest accepted one."""
    name = base.name if isinstance(base, BackboneSpec) else base.removeprefix(MODEL_PREFIX)
    spec = base if isinstance(base, BackboneSpec) else default_registry().get(name)
    _refuse_unknown(name, kwargs)
    params, label = dict(calibrator_params or {}), name
    if spec is not None:
        _check_revision(spec, revision)
        params, label = {**RegistryModel(spec, calibrator).calibrator_params, **params}, spec.model_name(calibrator)
    _check_identity(label, calibrator, params, kwargs)
    settings = {key: kwargs.pop(key) for key in list(kwargs) if key in FIT_ARGUMENTS}
    if spec is not None:
        encoder = RegistryEncoder(spec, device=device, **kwargs)
    else:
        encoder = load_base(name, revision, device, **kwargs)
    model = CalibratedModel(encoder, calibrator, calibrator_params=params, **settings)
    width = model.mteb_model_meta.embed_dim
    if embed_dim is not None and isinstance(width, int) and embed_dim != width:
        raise InputError(f"{MODEL_PREFIX}{name}: gives {width}-dimensional embeddings, not {embed_dim}")
    return model


def _check_revision(spec: BackboneSpec, revision: str | None) -> None:
    """A revision MTEB passes must be the backbone's: its weights' and registry configuration's."""
    expected = RegistryModel(spec, "raw").revision
    if revision is not None and revision not in (expected, spec.revision):
        raise FlowPluginError(f"{MODEL_PREFIX}{spec.name} is revision {expected} (weights {spec.revision} and this "
                              f"registry configuration), not {revision}: its registry file or flow-plugin changed")


def registry_model(model: str | RegistryModel, *, calibrator_params: dict[str, Any] | None = None,
                   **kwargs: Any) -> Any:
    """A registry model (``flow_plugin/<backbone>[-<calibrator>]``, or a :class:`RegistryModel`) as a calibrated
    model, in Python (:func:`load_calibrated`): the registry file's hyper-parameters, then ``calibrator_params``;
    ``kwargs`` are encoder options and fit settings."""
    resolved = resolve(model)
    return load_calibrated(resolved.backbone, calibrator=resolved.calibrator, calibrator_params=calibrator_params,
                           **kwargs)


def _check_identity(name: str, calibrator: str, params: dict[str, Any], kwargs: dict[str, Any]) -> None:
    """Take the identity arguments out of ``kwargs``: each must be what this flow-plugin's calibrator names its
    results by (a result of another ``auto`` rule is not this one's)."""
    own = make_calibrator(calibrator, **params).identity_params() if calibrator != "raw" else {}
    for key in IDENTITY_ARGUMENTS:
        given = kwargs.pop(key, own.get(key))
        if given != own.get(key):
            raise InputError(f"{name}: {key}={given} names a result of another {calibrator} {key} than this "
                             f"flow-plugin's ({own.get(key)}); load the model without {key}")


def _refuse_unknown(base: str, kwargs: dict[str, Any]) -> None:
    accepted = [*MODEL_ARGUMENTS, *EncoderOptions.names()]
    unknown = sorted(set(kwargs) - set(accepted))
    if unknown:
        hints = [f"{key!r}{did_you_mean(key, accepted)}" for key in unknown]
        raise InputError(f"{MODEL_PREFIX}{base.removeprefix(MODEL_PREFIX)}: unknown loader argument(s) {', '.join(hints)}; accepted: "
                         f"{', '.join(accepted)}")


def resolve_spelling(name: str) -> Any:
    """The ``ModelMeta`` of a ``flow_plugin/`` spelling MTEB's registry lacks: a calibrator on an MTEB model or a
    local folder (its loader loads the base then calibrates it), or :class:`UnknownModelError` with close names."""
    base, calibrator = spelled_model(name)
    if not is_foreign_base(base):
        try:
            parse_model_name(name)  # a registry model added since MTEB's registry was built, or close names
        except RegistryError as error:
            raise UnknownModelError(str(error)) from None
    meta = calibrated_meta(base_meta(base), calibrator)
    return meta.model_copy(update={"loader": functools.partial(_load_spelled, base), "loader_kwargs": {}})


def base_meta(base: str) -> Any:
    """MTEB's ``ModelMeta`` of a base (a registry backbone, a local folder, a model MTEB's registry or the Hub
    knows), without loading its weights; a base that cannot be loaded is a one-line error (a missing folder, an
    unknown name with close names)."""
    if base in default_registry():
        return backbone_meta(default_registry()[base], load_calibrated)
    if is_folder(base):  # its results are filed under its content's revision
        folder = local_model_folder(base)
        return ModelMeta.create_empty(overwrites={"name": str(folder), "revision": folder_revision(folder)})

    return _from_mteb(base, lambda: mteb.get_model_meta(base, fetch_from_hf=True))


def _from_mteb(base: str, look_up: Any) -> Any:
    """What ``look_up()`` gives for a name MTEB resolves (its registry, else the Hugging Face Hub); a name MTEB's
    registry lacks and the Hub could not give becomes one :class:`UnknownModelError` with close names."""
    try:
        return look_up()
    except Exception as error:
        known = [meta.name for meta in mteb.get_model_metas()]
        if isinstance(error, FlowPluginError) or base in known:
            raise
        close = difflib.get_close_matches(base, [name for name in known if name], n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        reason = str(error).strip().splitlines()[0][:200] if str(error).strip() else ""
        raise UnknownModelError(
            f"{base}: not a registry backbone, a local folder or a model in MTEB's registry, and looking it up on the "
            f"Hugging Face Hub failed ({type(error).__name__}{': ' + reason if reason else ''}){hint}{raw_spelling_hint(base)}; "
            f"check the name, or spell a local folder as ./{base} or an absolute path") from error


def calibrate(model: Any, calibrator: str = "flow", **settings: Any) -> Any:
    """``model`` (an MTEB encoder, or what :func:`load_base` loads: an MTEB model name, a local
    sentence-transformers folder, a registry backbone) calibrated with ``calibrator``: a
    :class:`~flow_plugin.integrations.mteb.calibrated.CalibratedModel`; ``settings``: its keywords."""
    return CalibratedModel(load_base(model) if isinstance(model, str) else model, calibrator, **settings)


def _load_spelled(base: str, name: str, revision: str | None = None, **kwargs: Any) -> Any:
    """MTEB's loader of a spelled name: MTEB passes the base's own name; the spelling says what to load."""
    return load_calibrated(base, revision, **kwargs)


__all__ = ["MODEL_ARGUMENTS", "RegistryEncoder", "base_meta", "calibrate", "load_base", "load_calibrated",
           "refuse_encoder_options", "registry_model", "resolve_spelling"]
