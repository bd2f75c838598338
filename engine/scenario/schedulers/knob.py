"""One knob of an engine's scheduler (a row of ``data/hardware/scheduler_knobs.csv``): the scenario key that holds
it, whether only that engine reads it, the engine's own flag, its default in the release its module read, and where
in that release's source the default and the rule come from."""

from __future__ import annotations

import csv
import functools
from dataclasses import dataclass

from ..table_names import DATA_DIR

KNOBS_FILE = DATA_DIR / "scheduler_knobs.csv"


@dataclass(frozen=True)
class Knob:
    engine: str
    key: str        # the server key (``server.<key>``) the simulator reads
    own: bool       # only this engine reads it: set on another engine it is an error
    flag: str       # the engine's flag or configuration path that sets it on a deployed server
    default: str    # the engine's default in the release read, as its source gives it
    source: str     # file:line in that release


@functools.lru_cache(maxsize=1)
def all_knobs() -> tuple[Knob, ...]:
    with KNOBS_FILE.open(newline="") as f:
        return tuple(Knob(row["engine"], row["key"], row["own"] == "yes", row["flag"], row["default"], row["source"])
                     for row in csv.DictReader(f))


def knobs_of(engine: str) -> tuple[Knob, ...]:
    """``engine``'s knobs, in the file's order."""
    return tuple(k for k in all_knobs() if k.engine == engine)
