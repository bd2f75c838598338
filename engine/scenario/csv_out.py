"""CSV files the app writes for a spreadsheet (per-request results): a text cell that a spreadsheet would run as a
formula (starting with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return: a class name such as
``=HYPERLINK(...)`` from an uploaded scenario) is written with a leading apostrophe, which spreadsheets show as text
and never evaluate (OWASP's advice on CSV injection). Numbers are written as they are: a negative number is a value,
not a formula."""

from __future__ import annotations

import pandas as pd

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def safe_cell(value: object) -> object:
    """``value``, or a text that starts a formula with an apostrophe in front."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def csv_text(frame: pd.DataFrame) -> str:
    """``frame`` as CSV text (no index), its text cells and column names made safe (``safe_cell``)."""
    safe = frame.copy()
    for column in safe.columns:
        if not pd.api.types.is_numeric_dtype(safe[column]) and not pd.api.types.is_bool_dtype(safe[column]):
            safe[column] = safe[column].astype(object).map(safe_cell)
    safe.columns = [safe_cell(str(c)) for c in safe.columns]
    return safe.to_csv(index=False)
