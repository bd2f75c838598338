"""Which source each measurement comes from, and which side of the validation split each source is on.

A source is a lab or a vendor's page series: every version of one page (TensorRT-LLM's performance overview 0.19 ...
1.2, AMD's vLLM docker page 0.7.3 ... 0.10) is one source, so no version of it can inform a fit that another
version then "validates". The split is written down in ``data/hardware/validation_sources.csv`` (a substring of
the measurement's ``document``, its source, its side and why), decided before any fit that reads it.
"""

from __future__ import annotations

import functools

import pandas as pd

from ..hardware.tables import load_table

HELD_OUT = "held-out"


@functools.lru_cache(maxsize=None)
def source_of(document: str) -> str:
    """The source of a measurement's ``document`` (the first pattern of the split table it contains)."""
    table = load_table("validation_sources")
    for pattern, row in table.iterrows():
        if pattern in document:
            return str(row["source"])
    raise ValueError(f"no source in data/hardware/validation_sources.csv matches {document!r}: add a row")


def held_out_sources() -> frozenset[str]:
    """The sources on the held-out side."""
    table = load_table("validation_sources")
    return frozenset(table.loc[table["side"] == HELD_OUT, "source"])


def by_source(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` (rows with a ``document``) with its ``source`` and whether that source is held out."""
    sources = table["document"].map(source_of)
    return table.assign(source=sources, held_out_source=sources.isin(held_out_sources()))
