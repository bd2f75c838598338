"""Fits of the step model against measurements: the shipped benchmark table (``calibration``) and a user's
own benchmark files (``bench_results``, ``user_calibration``). A fit replays runs, so this layer sits above
``sim``.

May import ``engine.scenario``, ``engine.hardware`` and ``engine.sim``.
"""
