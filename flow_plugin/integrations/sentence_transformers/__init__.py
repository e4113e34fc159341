"""Export a calibrated registry model or local sentence-transformers folder as a sentence-transformers folder
(:mod:`.export`, :mod:`.modules`, :mod:`.flow_module`, :mod:`.card`). The names below load on first use, so
loading an exported flow does not import the exporter, and the leaderboard (which builds :class:`BenchmarkScores`)
does not import sentence-transformers.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "export_model": "flow_plugin.integrations.sentence_transformers.export",
    "ExportResult": "flow_plugin.integrations.sentence_transformers.export",
    "BenchmarkScores": "flow_plugin.integrations.sentence_transformers.card",
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
