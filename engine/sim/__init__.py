"""The simulator: requests drawn or read from traces (``workload``, ``traces``), the compiled iteration loop
(``kernel``) with its policies, the run's memory estimate, the metrics of a run (``simulate``, ``metrics``) and
the running of many runs at once (``parallel``, ``sweep``, ``stopping``, ``dask_connect``).

May import ``engine.scenario`` and ``engine.hardware``.
"""
