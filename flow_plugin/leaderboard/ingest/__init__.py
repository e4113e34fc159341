"""The ingest stage: MTEB result folders -> the board's typed rows, each score with its provenance.

- :mod:`.results`: result files -> :class:`~flow_plugin.leaderboard.models.TaskScore` (mteb's own classes,
  plus the run records, library versions and fit records flow-plugin writes next to them);
- :mod:`.rows`: what a row says about its model run: id, description, published names (no machine paths),
  display names;
- :mod:`.merge`: a board created or loaded (an older file brought up to date), and the scores of result
  folders merged into its rows (conflicts, tolerance, run records), with the per-pair cosines found.
"""
