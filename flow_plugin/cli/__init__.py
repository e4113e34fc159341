"""The ``flow-plugin`` command line: one module per verb (``evaluate``, ``bench``, ``paper``,
``leaderboard``, ``sweep``, ``export``), wired together in :mod:`flow_plugin.cli.main`."""

from __future__ import annotations


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``flow-plugin`` script."""
    # the module flow_plugin.cli.main shares this function's name
    from flow_plugin.cli.main import main as run_main

    return run_main(argv)
