"""An evaluation's output folder: MTEB's result files and what flow-plugin keeps with them, owned by
:class:`~flow_plugin.results.store.ResultStore` (its docstring shows the layout)."""

from flow_plugin.results.store import ResultStore

__all__ = ["ResultStore"]
