"""Readers for recorded request traces.

Three formats, one result (``TraceRows``: arrival times in seconds from the
first request, prompt and output token counts, optional class names):

- ``csv``: our own ``arrival_s,prompt_tokens,output_tokens[,class]``;
- ``azure``: Azure LLM inference 2023 CSV ``TIMESTAMP,ContextTokens,GeneratedTokens``;
- ``mooncake``: Mooncake FAST'25 JSONL with ``timestamp`` (ms), ``input_length``, ``output_length``.

A malformed row raises ``TraceError`` naming the file, the line and the field.
Rows are stably sorted by arrival time; nothing else is changed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import pandas as pd

from .errors import TraceError

TRACE_FORMATS = ("csv", "azure", "mooncake")


@dataclass(frozen=True)
class TraceRows:
    """One trace, sorted by arrival; ``class_names`` is None when the file has no class column."""

    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    class_names: Optional[np.ndarray]


def _numeric_column(frame: pd.DataFrame, column: str, path: Path, first_line: int, integer: bool) -> np.ndarray:
    values = pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype=np.float64)
    bad = ~np.isfinite(values)
    if integer:
        bad |= (values < 1) | (values != np.floor(values))
    else:
        bad |= values < 0
    if bad.any():
        row = int(np.argmax(bad))
        want = "an integer >= 1" if integer else "a number >= 0"
        raise TraceError(f"{path}: line {row + first_line}: {column} = {frame[column].iloc[row]!r} must be {want}")
    return values.astype(np.int64) if integer else values


def _read_csv(path: Path, columns: tuple[str, ...]) -> pd.DataFrame:
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False, skipinitialspace=True)
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        detail = str(exc).strip().splitlines()[0]
        raise TraceError(f"{path}: not a readable CSV file ({detail})") from None
    except pd.errors.EmptyDataError:
        raise TraceError(f"{path}: the file is empty; expected a header {','.join(columns)}") from None
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise TraceError(f"{path}: missing column {missing[0]!r}; the header must contain {','.join(columns)} "
                         f"(found {','.join(map(str, frame.columns))})")
    if frame.empty:
        raise TraceError(f"{path}: the trace has a header but no rows")
    return frame


def _read_own_csv(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, Optional[np.ndarray]]:
    frame = _read_csv(path, ("arrival_s", "prompt_tokens", "output_tokens"))
    arrival_s = _numeric_column(frame, "arrival_s", path, 2, integer=False)
    prompt = _numeric_column(frame, "prompt_tokens", path, 2, integer=True)
    output = _numeric_column(frame, "output_tokens", path, 2, integer=True)
    classes = None
    if "class" in frame.columns:
        classes = frame["class"].str.strip().to_numpy(dtype=object)
        classes[classes == ""] = None
    return arrival_s, prompt, output, classes


def _read_azure(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, None]:
    frame = _read_csv(path, ("TIMESTAMP", "ContextTokens", "GeneratedTokens"))
    stamps = pd.to_datetime(frame["TIMESTAMP"], format="ISO8601", errors="coerce")
    if stamps.isna().any():
        row = int(np.argmax(stamps.isna().to_numpy()))
        raise TraceError(f"{path}: line {row + 2}: TIMESTAMP = {frame['TIMESTAMP'].iloc[row]!r} is not a date-time "
                         f"like '2023-11-16 18:17:03.9799600'")
    ns = stamps.to_numpy(dtype="datetime64[ns]").astype(np.int64)
    arrival_s = (ns - ns.min()) / 1e9
    prompt = _numeric_column(frame, "ContextTokens", path, 2, integer=True)
    output = _numeric_column(frame, "GeneratedTokens", path, 2, integer=True)
    return arrival_s, prompt, output, None


def _read_mooncake(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, None]:
    rows = []
    with path.open("r", encoding="utf-8") as fh:
        for line_no, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                values = (float(record["timestamp"]), record["input_length"], record["output_length"])
            except json.JSONDecodeError as exc:
                raise TraceError(f"{path}: line {line_no}: not valid JSON ({exc.msg})") from None
            except KeyError as exc:
                raise TraceError(f"{path}: line {line_no}: missing field {exc.args[0]!r} "
                                 f"(needs timestamp, input_length, output_length)") from None
            except (TypeError, ValueError):
                raise TraceError(f"{path}: line {line_no}: timestamp must be a number of milliseconds") from None
            for name, value in zip(("input_length", "output_length"), values[1:]):
                if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                    raise TraceError(f"{path}: line {line_no}: {name} = {value!r} must be an integer >= 1")
            if not np.isfinite(values[0]) or values[0] < 0:
                raise TraceError(f"{path}: line {line_no}: timestamp = {values[0]!r} must be >= 0 ms")
            rows.append(values)
    if not rows:
        raise TraceError(f"{path}: the trace has no requests")
    table = np.array(rows, dtype=np.float64)
    return table[:, 0] / 1000.0, table[:, 1].astype(np.int64), table[:, 2].astype(np.int64), None


def guess_trace_format(path: str | Path) -> str:
    """``mooncake`` for ``.jsonl``, ``azure`` for a CSV whose header starts with TIMESTAMP, else ``csv``."""
    path = Path(path)
    if path.suffix.lower() in (".jsonl", ".json"):
        return "mooncake"
    try:
        with path.open("r", encoding="utf-8", errors="replace") as fh:
            header = fh.readline()
    except OSError:
        return "csv"  # read_trace reports the missing file
    return "azure" if header.strip().upper().startswith("TIMESTAMP") else "csv"


_READERS = {"csv": _read_own_csv, "azure": _read_azure, "mooncake": _read_mooncake}


def read_trace(path: str | Path, fmt: str) -> TraceRows:
    """Read a trace file of format ``fmt`` (one of ``TRACE_FORMATS``), sorted by arrival, starting at 0 s."""
    path = Path(path)
    if fmt not in _READERS:
        raise TraceError(f"trace format {fmt!r} is not known; choose one of {', '.join(TRACE_FORMATS)}")
    if not path.is_file():
        raise TraceError(f"trace file {str(path)!r} does not exist")
    arrival_s, prompt, output, classes = _READERS[fmt](path)
    order = np.argsort(arrival_s, kind="stable")
    arrival_s = arrival_s[order] - arrival_s[order[0]]
    return TraceRows(arrival_s, prompt[order], output[order], None if classes is None else classes[order])
