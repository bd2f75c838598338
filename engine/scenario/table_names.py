"""The names of the rows of the hardware tables (``data/hardware/*.csv``), so that a scenario key naming a GPU, a
model or a format is checked when the scenario is loaded, whatever its step model: a wrong name is one line that
lists the right ones, never a silent substitute.

A key says which table it names with ``config.opt(table=...)``. This module reads only the first column of each
file (the csv module, once per table) and imports nothing of the engine but its errors: ``hardware`` imports
``config``, which imports this.
"""

from __future__ import annotations

import csv
import functools
from pathlib import Path

from .errors import ScenarioError, excerpt

DATA_ROOT = Path(__file__).resolve().parents[2] / "data"  # the shipped data: hardware tables, scenarios, workshop
DATA_DIR = DATA_ROOT / "hardware"
LISTED_NAMES = 20  # names an error line lists before "..." (the file it names holds them all): one line
# table -> (what one row is, for an error line; the files whose rows it is, in order)
TABLES = {
    "gpus": ("a GPU", ("gpus.csv", "gpu_slices.csv")),
    "models": ("a model", ("models.csv",)),
    "quant": ("a weight format", ("quant.csv",)),
    "kv_quant": ("a KV-cache format", ("kv_quant.csv",)),
    "engines": ("a serving engine", ("engines.csv",)),
    "traffic_shapes": ("a traffic shape", ("traffic_shapes.csv",)),
}


def _first_column(path: Path) -> tuple[str, ...]:
    """The first cell of every row of CSV file ``path`` after its header."""
    with path.open(newline="", encoding="utf-8") as fh:
        rows = csv.reader(fh)
        next(rows)
        return tuple(row[0] for row in rows if row)


@functools.lru_cache(maxsize=None)
def names(table: str) -> tuple[str, ...]:
    """The names of ``table``'s rows, file after file, in the files' order, each once (a shape has many rows)."""
    return tuple(dict.fromkeys(name for file in TABLES[table][1] for name in _first_column(DATA_DIR / file)))


def where(table: str) -> str:
    """The files of ``table`` for a reader: 'data/hardware/gpus.csv or gpu_slices.csv'."""
    return "data/hardware/" + " or ".join(TABLES[table][1])


def check_name(table: str, name: str, path: str) -> None:
    """``ScenarioError`` naming the key ``path`` and listing the names (the first ``LISTED_NAMES``, then '...')
    unless ``name`` names a row of ``table``."""
    known = names(table)
    if name in known:
        return
    listed = ", ".join(known[:LISTED_NAMES]) + (", ..." if len(known) > LISTED_NAMES else "")
    raise ScenarioError(f"{path} = {excerpt(name)} is not {TABLES[table][0]} of {where(table)}; choose one of "
                        f"{listed}")
