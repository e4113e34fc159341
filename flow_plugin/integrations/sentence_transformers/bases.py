"""What an export is built on: its base model, as :func:`.export.export_model` needs it.

- :class:`RegistryBase`, a registry model (``flow_plugin/<backbone>-<calibrator>``): flow-plugin's backbone
  written as standard modules, truncated to the layers its pooling reads, with the registry's pooling
  (:mod:`.modules`); flow-plugin's encoder embeds the fit corpus and, in float32, is the reference the folder is
  checked against.
- :class:`FolderBase`, a local sentence-transformers folder (``flow_plugin//path/to/model-<calibrator>``,
  ``flow_plugin/./model-<calibrator>``): the folder's own modules, prompts and similarity function, as saved; its
  own ``encode`` (with its default prompt, if it has one) embeds the fit corpus and is the reference.

Each gives the unfitted calibrator, the encoder of the fit and the reference, the modules before the calibrator,
the settings the written folder keeps, and the record's ``backbone`` part.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from flow_plugin._machine import resolve_device
from flow_plugin.calibration import Calibrator
from flow_plugin.catalog.builders import build_calibrator, build_encoder, calibrator_on_device, resolve
from flow_plugin.catalog.fitting import SentenceEncoder
from flow_plugin.catalog.registry import (ForeignBase, RegistryModel, is_folder, is_foreign_base, local_model_folder,
                                          spelled_model)
from flow_plugin.encoding.options import EncoderOptions
from flow_plugin.errors import InputError

#: the encoder options a folder's model takes (it runs in the dtype and with the sequence length it was saved with)
FOLDER_OPTIONS = ("device", "batch_size", "show_progress_bar")


class RegistryBase:
    """A registry model: its backbone, pooling and registry hyper-parameters."""

    def __init__(self, registry_model: RegistryModel) -> None:
        self.registry_model = registry_model
        self.name, self.calibrator = registry_model.name, registry_model.calibrator
        self.revision: str | None = registry_model.revision
        self.label = registry_model.backbone.name
        self.embedding_dim = registry_model.backbone.embedding_dim
        #: ``SentenceTransformer`` keywords the written folder keeps (none: the registry has no prompts)
        self.settings: dict[str, Any] = {}

    def template(self, device: str | None = None, **params: Any) -> Calibrator:
        return build_calibrator(self.registry_model, device=device, **params)

    def encoder(self, options: EncoderOptions) -> tuple[SentenceEncoder, str]:
        """(the encoder of the fit, the device it runs on)."""
        encoder = build_encoder(self.registry_model, options)
        return encoder, str(encoder.backbone.device)

    def reference(self, options: EncoderOptions) -> tuple[SentenceEncoder, str]:
        """The encoder the written folder is checked against: flow-plugin's, in float32."""
        return self.encoder(options.replace(precision="float32", show_progress_bar=False))

    def fit_precision(self, options: EncoderOptions) -> str:
        return options.precision

    def base_modules(self) -> Any:
        from flow_plugin.integrations.sentence_transformers.modules import registry_modules

        return registry_modules(self.registry_model.backbone)

    def record(self, facts: dict[str, Any]) -> dict[str, Any]:
        spec = self.registry_model.backbone
        return {"name": spec.name, "hub_id": spec.hub_id, "revision": spec.revision, "description": spec.description,
                "pooling": spec.pooling, **facts, "embedding_dim": spec.embedding_dim, "license": spec.license,
                "reference": spec.reference}


@dataclass
class _FolderEncoder:
    """A sentence-transformers model's own ``encode``, as float32 rows."""

    model: Any
    #: sentences per batch (None: sentence-transformers' default)
    batch_size: int | None
    show_progress_bar: bool | None

    def encode(self, sentences: list[str]) -> np.ndarray:
        batch = {"batch_size": self.batch_size} if self.batch_size is not None else {}
        embeddings = self.model.encode(sentences, convert_to_numpy=True, show_progress_bar=self.show_progress_bar,
                                       **batch)
        return np.asarray(embeddings, dtype=np.float32)


class FolderBase:
    """A local sentence-transformers folder, loaded by sentence-transformers as it was saved."""

    def __init__(self, folder: Path, calibrator: str, device: str | None = None) -> None:
        # sentence-transformers (the optional export extra) loads when an export runs
        from sentence_transformers import SentenceTransformer

        #: the spelling relative to the folder's parent: the record and card name no path of this machine
        self.name = ForeignBase(f"./{folder.name}").model_name(calibrator)
        self.folder, self.calibrator, self.revision = folder, calibrator, None
        self.label = folder.name
        device = str(resolve_device(device))  # a device this machine lacks: one line, before loading
        try:
            self.model = SentenceTransformer(str(folder), device=device, local_files_only=True)
        except (OSError, ValueError, KeyError, RuntimeError) as error:
            reason = re.split(r"(?<=[.;:])\s", str(error).strip())[0] or type(error).__name__  # its first sentence
            raise InputError(f"{self.name}: sentence-transformers cannot load {folder} ({reason}); give a folder that "
                             "SentenceTransformer(folder) loads") from None
        self.embedding_dim = int(self.model.get_embedding_dimension())
        self.settings = {"prompts": dict(self.model.prompts), "default_prompt_name": self.model.default_prompt_name,
                         "similarity_fn_name": self.model.similarity_fn_name}

    def template(self, device: str | None = None, **params: Any) -> Calibrator:
        return calibrator_on_device(self.calibrator, device, **params)

    def encoder(self, options: EncoderOptions) -> tuple[SentenceEncoder, str]:
        return _FolderEncoder(self.model, options.batch_size, options.show_progress_bar), str(self.model.device)

    def reference(self, options: EncoderOptions) -> tuple[SentenceEncoder, str]:
        """The encoder the written folder is checked against: the folder's own model."""
        return _FolderEncoder(self.model, options.batch_size, False), str(self.model.device)

    def fit_precision(self, options: EncoderOptions) -> str:
        # torch loaded with the model; cpu_kernels names its dtypes as flow-plugin's precisions
        from flow_plugin.encoding.cpu_kernels import precision_of

        dtype = next((parameter.dtype for parameter in self.model.parameters()), None)
        return precision_of(dtype) or str(dtype).removeprefix("torch.") if dtype is not None else "float32"

    def base_modules(self) -> Any:
        from flow_plugin.integrations.sentence_transformers.modules import BaseModules

        modules = list(self.model)
        lines = [f"{type(module).__name__}: {self.folder.name}'s own, as saved" for module in modules]
        return BaseModules(modules, lines, {"max_seq_length": self.model.max_seq_length})

    def record(self, facts: dict[str, Any]) -> dict[str, Any]:
        return {"name": self.folder.name, "folder": self.folder.name, "hub_id": None, "revision": None,
                "description": "a local sentence-transformers folder", "pooling": None, **facts,
                "embedding_dim": self.embedding_dim, "license": None, "reference": None,
                "prompts": self.settings["prompts"], "default_prompt_name": self.settings["default_prompt_name"]}


#: the base of an export, either kind
ExportBase = RegistryBase | FolderBase


def export_base(model: str | RegistryModel, encoder_options: dict[str, Any]) -> ExportBase:
    """The base a model spelling names: a registry model, or a local sentence-transformers folder (its model loaded
    on ``encoder_options``' device). A model MTEB loads by name is a one-line error saying how to export it."""
    if isinstance(model, RegistryModel):
        return RegistryBase(model)
    base, calibrator = spelled_model(model)
    if not is_foreign_base(base):
        return RegistryBase(resolve(model))  # (an unknown name: the registry's error, with close names)
    if not is_folder(base):
        raise InputError(f"{model}: export takes a registry model or a local sentence-transformers folder, not a "
                         f"model MTEB loads by name; save it first (SentenceTransformer({base!r}).save('my-model')) "
                         f"and export {ForeignBase('./my-model').model_name(calibrator)}")
    others = sorted(set(encoder_options) - set(FOLDER_OPTIONS))
    if others:
        raise InputError(f"{model}: {', '.join(others)} {'applies' if len(others) == 1 else 'apply'} to registry "
                         "backbones only; a folder's model runs in "
                         f"the dtype and with the sequence length it was saved with (options: {', '.join(FOLDER_OPTIONS)})")
    return FolderBase(local_model_folder(base), calibrator, encoder_options.get("device"))
