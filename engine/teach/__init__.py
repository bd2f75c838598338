"""Teaching material: the workshop's chapters, the article's experiments re-run, and queueing theory set
beside the simulator.

May import every layer below it (``scenario``, ``hardware``, ``sim``, ``calibrate``, ``decide``).
"""
