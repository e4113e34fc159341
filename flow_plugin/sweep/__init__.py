"""Sweeps that outgrow one machine, on Ray (``flow-plugin sweep``, :mod:`flow_plugin.cli.sweep`).

One module per job:

* :mod:`.spec`: the sweep file (a pydantic model) and :func:`~.spec.load_sweep`, which checks it;
* :mod:`.jobs`: one job per backbone, each the runs :func:`flow_plugin.studies.runs.expand_runs` plans;
* :mod:`.plan`: the (run, task) items of a job, where each result lives, which are done;
* :mod:`.publish`: a job's staging folder, the atomic publication of its results, the sweep lock;
* :mod:`.progress`: each job attempt's progress file, read back by the driver;
* :mod:`.job`: the job body a Ray worker runs;
* :mod:`.cluster`: starting or joining Ray (reachability check, the workers' environment);
* :mod:`.runner`: submitting the jobs, waiting, retries, progress lines, Ctrl-C;
* :mod:`.driver`: :func:`~.driver.run_sweep`, a whole sweep as one call: plan, run the jobs left, merge
  the results into the leaderboard.

The command line (:mod:`flow_plugin.cli.sweep`) parses, calls :func:`~.driver.run_sweep` and prints.

Importing this package imports nothing else; Ray, MTEB and torch load when a sweep runs.
"""
