"""A base model outside the registry as SentEval's adapter encodes with it (:class:`BaseModelEncoder`): a local
sentence-transformers folder, a model MTEB loads by name or any MTEB encoder, told the SentEval task it embeds as
the MTEB task of the same data (:func:`task_metadata`), so it picks its prompt as it would in MTEB.

:class:`~flow_plugin.integrations.senteval.SentEvalAdapter` imports this module when it is built (it imports MTEB).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import numpy as np
from mteb.abstasks.task_metadata import TaskMetadata

from flow_plugin.data.tasks import OFFLINE_TASKS_BY_SENTEVAL_NAME
from flow_plugin.integrations.mteb.base_encoders import as_base_encoder, base_name
from flow_plugin.integrations.mteb.base_models import load_base


#: SentEval's tasks by the MTEB task type they are, for a base model that chooses its prompt by type (the rest:
#: classification)
TASK_TYPES = {"STS": ("STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness"),
              "PairClassification": ("MRPC", "SICKEntailment", "SNLI")}


@functools.lru_cache(maxsize=None)
def task_metadata(task: str | None) -> Any:
    """The MTEB ``TaskMetadata`` a base model is told it embeds for SentEval's ``task``: named as the offline MTEB
    task of the same data (``SentEvalSTS12``, ``SentEvalSICKR``), else ``SentEval<task>``, of the MTEB type it is
    (:data:`TASK_TYPES`), so a model that picks its prompt by task name or type picks it as it would in MTEB."""
    name = task or ""
    task_type = next((kind for kind, tasks in TASK_TYPES.items() if task in tasks), "Classification")
    return TaskMetadata(name=OFFLINE_TASKS_BY_SENTEVAL_NAME.get(name, f"SentEval{name}"),
                        description=f"SentEval's {name or 'task'}, as SentEval's engine reads it",
                        reference="https://github.com/facebookresearch/SentEval",
                        dataset={"path": f"senteval/{name}", "revision": "senteval"}, type=task_type, category="t2t",
                        modalities=["text"], eval_splits=["test"], eval_langs=["eng-Latn"],
                        main_score="cosine_spearman" if task_type == "STS" else "accuracy")


class BaseModelEncoder:
    """A base model outside the registry (a local sentence-transformers folder, a model MTEB loads by name, any
    MTEB encoder) as SentEval's adapter encodes with it: through the base's own ``encode``, with the
    :func:`task_metadata` of the task SentEval runs, each distinct sentence of the task once; the base's embedding
    cache (:mod:`~flow_plugin.integrations.mteb.base_encoders`) keeps them for the calls that follow
    (``prepare``'s fit, then ``batcher``'s batches)."""

    def __init__(self, base: Any, batch_size: int | None = None) -> None:
        self.base, self.batch_size = as_base_encoder(base), batch_size
        self.name = base_name(base)
        self.task: str | None = None

    @classmethod
    def load(cls, base: str, encoder_options: Mapping[str, Any]) -> BaseModelEncoder:
        """The base a spelling names (:func:`~flow_plugin.integrations.mteb.base_models.load_base`; the options
        other than ``device``, ``batch_size`` and ``show_progress_bar`` apply to registry backbones only)."""
        options = {key: value for key, value in encoder_options.items() if key not in ("batch_size",
                                                                                      "show_progress_bar")}
        return cls(load_base(base, **options), encoder_options.get("batch_size"))

    @property
    def device(self) -> str:
        return str(getattr(getattr(self.base, "model", None), "device", "cpu"))

    @property
    def embedding_dim(self) -> int:
        width = getattr(getattr(self.base, "mteb_model_meta", None), "embed_dim", None)
        return width if isinstance(width, int) else int(self.encode(["."]).shape[1])

    def for_task(self, task: str | None) -> None:
        """Encode for ``task`` from now on."""
        self.task = task

    def encode(self, sentences: list[str], show_progress_bar: bool | None = None) -> np.ndarray:
        if not sentences:
            return np.empty((0, self.embedding_dim), dtype=np.float32)
        return self.base.embed(sentences, task_metadata(self.task), "default", None, batch_size=self.batch_size)


__all__ = ["TASK_TYPES", "BaseModelEncoder", "task_metadata"]
