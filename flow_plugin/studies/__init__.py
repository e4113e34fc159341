"""Studies: what to run, as library code callable from Python; the command line only parses and
prints. :mod:`.runs` is the one run plan of ``bench`` and ``sweep`` (calibrators × fit corpora ×
seeds); :mod:`.bench` runs a backbone's calibrators over the offline STS tasks and updates its
leaderboard; :mod:`.paper` runs the BERT-flow paper's evaluations of one backbone."""
