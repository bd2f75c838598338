"""What a scenario is and what it may ask: its keys, defaults and checks (``config``), the names it may choose
from (``registry``, ``table_names``), the safety limits (``caps``), where it came from (``origin``), links, the
files it may open, errors, and the metrics a run reports with their labels (``metric_table``, ``summary``).

The bottom layer: imports nothing else of the engine.
"""
