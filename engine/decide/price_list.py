"""A user's own price list: a CSV file with the columns of ``data/hardware/offers.csv``, which a plan rents through
instead of the built-in offers (CLI ``plan --price-list FILE``, the Planner page's upload).

Columns (``COLUMNS``; ``notes`` may be left out): ``offer`` (a unique name), ``vendor``, ``gpu`` (a GPU of the tables),
``gpus_per_unit`` (cards one rented unit holds), ``max_cards_per_machine`` (the largest tensor-parallel group it
hosts), ``price_low`` and ``price_high`` (the same number for one price), ``currency`` (CNY or USD), ``period``
(hour or month), ``terms`` (``cost.TERMS``), ``annual_discount`` (0 to 0.5), ``estimate`` (true or false), ``source``
and ``as_of`` (the date the price was quoted, YYYY-MM-DD). Every bad cell is one line naming its row and column;
the file is read within ``MAX_BYTES`` and ``MAX_ROWS``.
"""

from __future__ import annotations

import csv
import hashlib
import io
import math
from datetime import date

import pandas as pd

from ..hardware.tables import gpu_names
from ..scenario.csv_out import csv_text
from ..scenario.errors import ScenarioError, excerpt, printable
from .cost import CURRENCIES, OFFER_COLUMNS as COLUMNS, TERMS

OPTIONAL = ("notes",)
MAX_BYTES = 1024 * 1024
MAX_ROWS = 5000
NAME_CHARS = 64
TEXT_CHARS = 500


def read_price_list(content: bytes, name: str = "price list") -> tuple[tuple, ...]:
    """The offers of a price list file's ``content``, one tuple per row in ``COLUMNS`` order (hashable: it travels in
    the planner's question); ``ScenarioError`` naming the row and column of the first bad cell."""
    if len(content) > MAX_BYTES:
        raise ScenarioError(f"{name} is {len(content) / 1024:,.0f} KiB; a price list may be at most "
                            f"{MAX_BYTES // 1024:,} KiB")
    try:
        text = content.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ScenarioError(f"{name} is not UTF-8 text: save it as CSV (UTF-8)") from None
    reader = csv.DictReader(io.StringIO(text, newline=None))  # a line ends at CR, LF or both, as in a spreadsheet
    try:
        return _offers(reader, name)
    except csv.Error as exc:  # a cell longer than the csv module's field limit (128 KiB), say
        raise _csv_error(exc, reader.line_num + 1, name) from None


def _offers(reader: csv.DictReader, name: str) -> tuple[tuple, ...]:
    """The offers of the CSV ``reader`` reads (``read_price_list``)."""
    missing = [c for c in COLUMNS if c not in OPTIONAL and c not in (reader.fieldnames or [])]
    if missing:
        raise ScenarioError(f"{name} lacks the column(s) {', '.join(missing)}; its header must name "
                            f"{', '.join(c for c in COLUMNS if c not in OPTIONAL)} (notes optional)")
    rows, seen = [], set()
    for number, row in enumerate(reader, start=2):
        if len(rows) == MAX_ROWS:
            raise ScenarioError(f"{name} has more than {MAX_ROWS:,} offers")
        offer = _row(row, number, name)
        if offer[0] in seen:
            raise ScenarioError(f"{name} row {number}: offer {excerpt(offer[0])} is named twice; names must be unique")
        seen.add(offer[0])
        rows.append(offer)
    if not rows:
        raise ScenarioError(f"{name} holds no offer")
    return tuple(rows)


def _csv_error(exc: csv.Error, line: int, name: str) -> ScenarioError:
    """``exc``, raised by the csv module reading line ``line`` of price list ``name``, as one line."""
    if "field limit" in str(exc):
        return ScenarioError(f"{name} line {line:,}: a cell of more than {csv.field_size_limit():,} characters; a "
                             f"price list's cells hold at most {TEXT_CHARS} (one offer per row)")
    return ScenarioError(f"{name} line {line:,}: not a readable CSV line ({excerpt(str(exc), 60)}); save it as CSV "
                         f"(UTF-8)")


def price_list_label(file_name: str, content: bytes, rows: tuple) -> str:
    """How a plan names the price list it was priced with (file, offers, digest of the bytes): on the page, in its
    link and in the report, which cannot carry the file itself."""
    return f"{printable(file_name, 60)}, {len(rows):,} offers, sha256 {hashlib.sha256(content).hexdigest()[:12]}"


def price_list_csv(rows: tuple) -> str:
    """A price list's offers as a CSV file of ``COLUMNS`` that ``read_price_list`` reads back (the report attaches
    it), its text cells made safe for a spreadsheet."""
    frame = pd.DataFrame(list(rows), columns=list(COLUMNS))
    frame["estimate"] = frame["estimate"].map({True: "true", False: "false"})
    return csv_text(frame)


def _row(row: dict, number: int, name: str) -> tuple:
    """One row, checked, in ``COLUMNS`` order."""
    def bad(column: str, why: str) -> ScenarioError:
        return ScenarioError(f"{name} row {number}: {column} {excerpt(row.get(column))} {why}")

    def text(column: str, most: int, required: bool = True) -> str:
        value = (row.get(column) or "").strip()
        if (required and not value) or len(value) > most or not value.isprintable():
            raise bad(column, f"must be printable text of 1 to {most} characters")
        return value

    def number_in(column: str, low: float, high: float) -> float:
        try:
            value = float(row.get(column) or "")
        except ValueError:
            raise bad(column, "is not a number") from None
        if not (math.isfinite(value) and low <= value <= high):
            raise bad(column, f"must be from {low:g} to {high:g}")
        return value

    def one_of(column: str, choices) -> str:
        value = (row.get(column) or "").strip()
        if value not in choices:
            raise bad(column, f"is not one of {', '.join(choices)}")
        return value

    gpu = one_of("gpu", gpu_names())
    low, high = number_in("price_low", 1e-6, 1e9), number_in("price_high", 1e-6, 1e9)
    if high < low:
        raise bad("price_high", f"is below price_low ({low:g})")
    estimate = (row.get("estimate") or "").strip().lower()
    if estimate not in ("true", "false"):
        raise bad("estimate", "must be true or false")
    as_of = (row.get("as_of") or "").strip()
    try:
        date.fromisoformat(as_of)
    except ValueError:
        raise bad("as_of", "is not a date (YYYY-MM-DD)") from None
    per_unit = number_in("gpus_per_unit", 1, 1024)
    most = number_in("max_cards_per_machine", 1, 1024)
    if not (per_unit.is_integer() and most.is_integer()):
        raise bad("gpus_per_unit" if not per_unit.is_integer() else "max_cards_per_machine", "must be a whole number")
    return (text("offer", NAME_CHARS), text("vendor", TEXT_CHARS), gpu, int(per_unit), int(most), low, high,
            one_of("currency", CURRENCIES), one_of("period", ("hour", "month")), one_of("terms", TERMS),
            number_in("annual_discount", 0.0, 0.5), estimate == "true", text("notes", TEXT_CHARS, required=False),
            text("source", TEXT_CHARS), as_of)
