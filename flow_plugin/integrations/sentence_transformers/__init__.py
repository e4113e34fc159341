"""Export a calibrated registry model or local sentence-transformers folder as a sentence-transformers folder.

- :mod:`.export`: :func:`export_model`, the one call (``flow-plugin export`` runs it);
- :mod:`.bases`: what it is built on, a registry model or a local folder;
- :mod:`.modules`: backbone, pooling and calibrator as sentence-transformers modules;
- :mod:`.affine`: a linear calibrator as a centring and an affine projection (two ``Dense`` layers);
- :mod:`.flow_module`: :class:`FlowCalibration`, the one custom module (the flow);
- :mod:`.benchmark`: the benchmark scores a model card shows (the leaderboard builds them);
- :mod:`.card`: the folder's model card;
- :mod:`.folder`: the folder appears whole or not at all.

The names below load on first use, so loading an exported flow (which imports
:mod:`.flow_module`) does not import the exporter.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "export_model": "flow_plugin.integrations.sentence_transformers.export",
    "ExportResult": "flow_plugin.integrations.sentence_transformers.export",
    "BenchmarkScores": "flow_plugin.integrations.sentence_transformers.benchmark",
    "FlowCalibration": "flow_plugin.integrations.sentence_transformers.flow_module",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
