"""The ``flow-plugin`` command line: one module per verb (``evaluate``, ``bench``, ``paper``,
``leaderboard``, ``sweep``, ``export``), wired together in :mod:`flow_plugin.cli.main`, whose ``main`` is the
script's entry point."""
