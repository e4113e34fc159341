"""``flow-plugin sweep``: sweeps that outgrow one machine, on Ray.

One module per job:

* :mod:`.spec`: the sweep file (a pydantic model) and :func:`~.spec.load_sweep`, which checks it;
* :mod:`.jobs`: expansion into one job per backbone, each a list of runs (model + loader kwargs);
* :mod:`.plan`: the (run, task) items of a job, where each result lives, which are done;
* :mod:`.publish`: a job's staging folder and the atomic publication of its results;
* :mod:`.progress`: each job attempt's progress file, read back by the driver;
* :mod:`.job`: the job body a Ray worker runs;
* :mod:`.cluster`: starting or joining Ray (reachability check, the workers' environment);
* :mod:`.runner`: submitting the jobs, waiting, retries, progress lines, Ctrl-C;
* :mod:`.command`: the command line.

Importing this package imports nothing else; Ray, MTEB and torch load when a sweep runs.
"""
