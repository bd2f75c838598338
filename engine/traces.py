"""Readers for recorded request traces.

Three formats, one result (``TraceRows``: arrival times in seconds from the
first request, prompt and output token counts, optional class names):

- ``csv``: our own ``arrival_s,prompt_tokens,output_tokens[,class]``;
- ``azure``: Azure LLM inference 2023 CSV ``TIMESTAMP,ContextTokens,GeneratedTokens``;
- ``mooncake``: Mooncake FAST'25 JSONL with ``timestamp`` (ms), ``input_length``, ``output_length`` and,
  optionally, ``hash_ids``: the ids of the prompt's 512-token blocks, equal ids for equal prefixes (prefix
  caching replays them as they are).

A trace is read in file order, incrementally, and reading stops at the cut: ``max_rows`` rows (the
scenario's ``num_requests``), or the limit of requests per run, beyond which a trace without a cut is
an error. At most ``caps.trace_bytes`` bytes are read; a header of more than ``MAX_CSV_COLUMNS``
columns, token counts above the limit of tokens per request and arrivals spanning more than the limit
of simulated time are errors. A malformed row raises ``TraceError`` naming the file, the line and the
field, with at most a short, printable excerpt of what the line holds. Rows are then stably sorted by
arrival time; nothing else is changed.

Reading a file again is served from a small cache keyed by the file's path, size and modification
time (the app replays one trace under every policy and load).
"""

from __future__ import annotations

import functools
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Optional

import numpy as np
import pandas as pd

from .caps import DEFAULT_CAPS, Caps
from .errors import TraceError, excerpt
from .registry import TRACE_FORMATS

MAX_CSV_COLUMNS = 16  # a trace CSV has 3 or 4 columns; a wider header is not a trace (and costs pandas time)
_TRACE_CACHE_ENTRIES = 4


MOONCAKE_BLOCK_TOKENS = 512  # tokens per ``hash_ids`` block of a Mooncake trace


@dataclass(frozen=True)
class TraceRows:
    """One trace, sorted by arrival; ``class_names`` is None when the file has no class column, ``block_ids`` None
    when it has no prefix block ids, else request i's ids are ``block_ids[block_offsets[i]:block_offsets[i + 1]]``
    (``block_tokens`` tokens each). The arrays are read-only (a read may be shared through the cache)."""

    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    class_names: Optional[np.ndarray]
    block_offsets: Optional[np.ndarray] = None
    block_ids: Optional[np.ndarray] = None
    block_tokens: int = 0


@dataclass(frozen=True)
class _Read:
    """How one read is bounded: the display name, at most ``rows`` rows kept, and the caps."""

    name: str
    rows: int
    cut: bool  # True when ``rows`` is the scenario's cut, False when it is the limit per run
    caps: Caps

    def row_limit(self, read_rows: int) -> None:
        """Raise when the file has more rows than the limit and no cut was asked for."""
        if not self.cut and read_rows > self.rows:
            raise TraceError(f"{self.name}: more than {self.rows:,} requests, the limit requests_per_run; set "
                             f"workload.num_requests to replay the first rows"
                             f"{self.caps.raise_hint('requests_per_run')}")


class _CappedReader(io.RawIOBase):
    """A binary stream that raises ``TraceError`` once more than ``caps.trace_bytes`` bytes have been read."""

    def __init__(self, stream: BinaryIO, read: _Read):
        super().__init__()
        self._stream, self._read, self.consumed = stream, read, 0

    def readable(self) -> bool:
        return True

    def rewind(self) -> None:
        """Back to the start of the stream (bytes read so far still count against the limit)."""
        self._stream.seek(0)

    def readinto(self, buffer) -> int:
        count = self._stream.readinto(buffer)
        self.consumed += count or 0
        limit = self._read.caps.trace_bytes
        if self.consumed > limit:
            raise TraceError(f"{self._read.name}: more than {limit:,} bytes read before the requests cut, the "
                             f"limit trace_bytes; cut the file or set workload.num_requests"
                             f"{self._read.caps.raise_hint('trace_bytes')}")
        return count


def _numeric_column(frame: pd.DataFrame, column: str, read: _Read, integer: bool) -> np.ndarray:
    values = pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype=np.float64)
    bad = ~np.isfinite(values)
    if integer:
        bad |= (values < 1) | (values != np.floor(values)) | (values > read.caps.tokens_per_request)
    else:
        bad |= values < 0
    if bad.any():
        row = int(np.argmax(bad))
        want = f"an integer from 1 to {read.caps.tokens_per_request:,} (the limit tokens_per_request)" if integer \
            else "a number >= 0"
        raise TraceError(f"{read.name}: line {row + 2}: {column} = {excerpt(frame[column].iloc[row])} must be {want}")
    return values.astype(np.int64) if integer else values


def _long_line(read: _Read, line_no: int, what: str) -> TraceError:
    return TraceError(f"{read.name}: line {line_no}: longer than {read.caps.trace_line_bytes:,} bytes "
                      f"(trace_line_bytes); not {what}")


def _check_header(stream: _CappedReader, read: _Read) -> None:
    """Refuse a header line longer than a trace line may be or with more than ``MAX_CSV_COLUMNS`` columns,
    before pandas reads it; then rewind."""
    buffered = io.BufferedReader(stream)
    header = buffered.readline(read.caps.trace_line_bytes + 1)
    buffered.detach()  # keep ``stream`` open for pandas
    if len(header) > read.caps.trace_line_bytes:
        raise _long_line(read, 1, "a trace header")
    if header.count(b",") >= MAX_CSV_COLUMNS:
        raise TraceError(f"{read.name}: line 1: {header.count(b',') + 1:,} columns; a trace has at most "
                         f"{MAX_CSV_COLUMNS}")
    stream.rewind()


def _read_csv(stream: _CappedReader, columns: tuple[str, ...], read: _Read) -> pd.DataFrame:
    _check_header(stream, read)
    try:
        frame = pd.read_csv(stream, dtype=str, keep_default_na=False, skipinitialspace=True, nrows=read.rows + 1,
                            encoding="utf-8")
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        detail = str(exc).strip().splitlines()[0]
        raise TraceError(f"{read.name}: not a readable CSV file ({excerpt(detail, 120)})") from None
    except pd.errors.EmptyDataError:
        raise TraceError(f"{read.name}: the file is empty; expected a header {','.join(columns)}") from None
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        found = ",".join(map(str, frame.columns))
        raise TraceError(f"{read.name}: missing column {missing[0]!r}; the header must contain {','.join(columns)} "
                         f"(found {excerpt(found, 60)})")
    if frame.empty:
        raise TraceError(f"{read.name}: the trace has a header but no rows")
    read.row_limit(len(frame))
    return frame.iloc[: read.rows]


def _read_own_csv(stream: BinaryIO, read: _Read) -> tuple:
    frame = _read_csv(stream, ("arrival_s", "prompt_tokens", "output_tokens"), read)
    arrival_s = _numeric_column(frame, "arrival_s", read, integer=False)
    prompt = _numeric_column(frame, "prompt_tokens", read, integer=True)
    output = _numeric_column(frame, "output_tokens", read, integer=True)
    classes = None
    if "class" in frame.columns:
        classes = frame["class"].str.strip().to_numpy(dtype=object)
        classes[classes == ""] = None
    return arrival_s, prompt, output, classes, None


def _read_azure(stream: BinaryIO, read: _Read) -> tuple:
    frame = _read_csv(stream, ("TIMESTAMP", "ContextTokens", "GeneratedTokens"), read)
    # utc=True: stamps with different UTC offsets become one time line (naive stamps are taken as UTC).
    stamps = pd.to_datetime(frame["TIMESTAMP"], format="ISO8601", errors="coerce", utc=True)
    if stamps.isna().any():
        row = int(np.argmax(stamps.isna().to_numpy()))
        raise TraceError(f"{read.name}: line {row + 2}: TIMESTAMP = {excerpt(frame['TIMESTAMP'].iloc[row])} is not "
                         f"a date-time like '2023-11-16 18:17:03.9799600'")
    ns = stamps.dt.tz_localize(None).to_numpy(dtype="datetime64[ns]").astype(np.int64)
    arrival_s = (ns - ns.min()) / 1e9
    prompt = _numeric_column(frame, "ContextTokens", read, integer=True)
    output = _numeric_column(frame, "GeneratedTokens", read, integer=True)
    return arrival_s, prompt, output, None, None


def _mooncake_record(line: bytes, line_no: int, read: _Read) -> tuple[tuple[float, int, int], list | None]:
    """(timestamp, input and output lengths) of one line, and its prefix block ids (None when it has none)."""
    where = f"{read.name}: line {line_no}"
    try:
        record = json.loads(line)
        values = (float(record["timestamp"]), record["input_length"], record["output_length"])
        blocks = record.get("hash_ids")
    except UnicodeDecodeError:
        raise TraceError(f"{where}: not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise TraceError(f"{where}: not valid JSON ({exc.msg})") from None
    except RecursionError:
        raise TraceError(f"{where}: nested too deeply to be a request record") from None
    except KeyError as exc:
        raise TraceError(f"{where}: missing field {excerpt(exc.args[0])} "
                         f"(needs timestamp, input_length, output_length)") from None
    except (TypeError, ValueError, OverflowError):
        raise TraceError(f"{where}: timestamp must be a number of milliseconds (or the line is not a record)") \
            from None
    for name, value in zip(("input_length", "output_length"), values[1:]):
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= read.caps.tokens_per_request:
            raise TraceError(f"{where}: {name} = {excerpt(value)} must be an integer from 1 to "
                             f"{read.caps.tokens_per_request:,} (the limit tokens_per_request)")
    if not np.isfinite(values[0]) or values[0] < 0:
        raise TraceError(f"{where}: timestamp = {excerpt(values[0])} must be >= 0 ms")
    if blocks is not None:
        most = -(-values[1] // MOONCAKE_BLOCK_TOKENS)
        if not isinstance(blocks, list) or len(blocks) > most or not all(
                isinstance(b, int) and not isinstance(b, bool) and 0 <= b < 2 ** 62 for b in blocks):
            raise TraceError(f"{where}: hash_ids must be a list of at most {most} block ids (integers from 0; one "
                             f"per {MOONCAKE_BLOCK_TOKENS} prompt tokens), got {excerpt(blocks)}")
    return values, blocks


def _read_mooncake(stream: BinaryIO, read: _Read) -> tuple:
    rows = []
    buffered = io.BufferedReader(stream)
    line_no, longest = 0, read.caps.trace_line_bytes
    while True:
        line = buffered.readline(longest + 1)
        if not line:
            break
        line_no += 1
        if len(line) > longest:
            raise _long_line(read, line_no, "a request record")
        if not line.strip():
            continue
        if len(rows) == read.rows:
            read.row_limit(len(rows) + 1)
            break
        rows.append(_mooncake_record(line, line_no, read))
    if not rows:
        raise TraceError(f"{read.name}: the trace has no requests")
    table = np.array([values for values, _ in rows], dtype=np.float64)
    blocks = [b for _, b in rows]
    if all(b is None for b in blocks):
        blocks = None
    elif any(b is None for b in blocks):
        line = next(i for i, b in enumerate(blocks) if b is None)
        raise TraceError(f"{read.name}: request {line + 1} has no hash_ids while others have; give every request "
                         f"its block ids, or none")
    return table[:, 0] / 1000.0, table[:, 1].astype(np.int64), table[:, 2].astype(np.int64), None, blocks


def guess_trace_format(path: str | Path) -> str:
    """``mooncake`` for ``.jsonl``, ``azure`` for a CSV whose header starts with TIMESTAMP, else ``csv``."""
    path = Path(path)
    if path.suffix.lower() in (".jsonl", ".json"):
        return "mooncake"
    try:
        with path.open("rb") as fh:
            header = fh.readline(4096)
    except OSError:
        return "csv"  # read_trace reports the missing file
    return guess_format_from_header(header)


def guess_format_from_header(header: bytes) -> str:
    """``azure`` when the first line starts with TIMESTAMP, else ``csv``."""
    return "azure" if header.strip().upper().startswith(b"TIMESTAMP") else "csv"


_READERS = {"csv": _read_own_csv, "azure": _read_azure, "mooncake": _read_mooncake}


def _parse(stream: BinaryIO, fmt: str, read: _Read) -> TraceRows:
    if fmt not in _READERS:
        raise TraceError(f"trace format {excerpt(fmt)} is not known; choose one of {', '.join(TRACE_FORMATS)}")
    capped = _CappedReader(stream, read)
    arrival_s, prompt, output, classes, blocks = _READERS[fmt](capped, read)
    span_s = float(arrival_s.max() - arrival_s.min())
    if not span_s <= read.caps.simulated_s:
        raise TraceError(f"{read.name}: the arrivals span {span_s:,.4g} s, beyond the limit of "
                         f"{read.caps.simulated_s:,.0f} s of simulated time (simulated_s)"
                         f"{read.caps.raise_hint('simulated_s')}")
    order = np.argsort(arrival_s, kind="stable")
    columns = [arrival_s[order] - arrival_s[order[0]], prompt[order], output[order],
               None if classes is None else classes[order]]
    offsets = ids = None
    if blocks is not None:
        counts = np.array([len(blocks[i]) for i in order], dtype=np.int64)
        offsets = np.concatenate(([0], np.cumsum(counts)))
        ids = np.fromiter((b for i in order for b in blocks[i]), dtype=np.int64, count=int(offsets[-1]))
    for column in (*columns, offsets, ids):
        if column is not None:
            column.setflags(write=False)
    return TraceRows(*columns, offsets, ids, MOONCAKE_BLOCK_TOKENS if blocks is not None else 0)


def _bounds(name: str, max_rows: Optional[int], caps: Caps) -> _Read:
    cut = max_rows is not None and max_rows <= caps.requests_per_run
    return _Read(name, max_rows if cut else caps.requests_per_run, cut, caps)


def read_trace(path: str | Path, fmt: str, max_rows: Optional[int] = None, caps: Caps = DEFAULT_CAPS,
               name: Optional[str] = None) -> TraceRows:
    """Read the first ``max_rows`` rows (all, up to the limit per run, when None) of a trace file of
    format ``fmt`` (one of ``TRACE_FORMATS``), sorted by arrival, starting at 0 s. Errors call the file
    ``name`` (default: its path)."""
    path = Path(path)
    name = str(path) if name is None else name
    try:
        stat = path.stat()
    except OSError:
        stat = None
    if stat is None or not path.is_file():
        raise TraceError(f"trace file {name!r} does not exist")
    return _read_file_cached(str(path.resolve()), stat.st_size, stat.st_mtime_ns, fmt, _bounds(name, max_rows, caps))


@functools.lru_cache(maxsize=_TRACE_CACHE_ENTRIES)
def _read_file_cached(path: str, size: int, mtime_ns: int, fmt: str, read: _Read) -> TraceRows:
    """One read of ``path`` (its size and modification time are in the key, so a changed file is read anew)."""
    try:
        with open(path, "rb", buffering=0) as fh:
            return _parse(fh, fmt, read)
    except IsADirectoryError:
        raise TraceError(f"trace file {read.name!r} is a folder") from None
    except PermissionError:
        raise TraceError(f"trace file {read.name!r} cannot be read (permission denied)") from None


def read_trace_bytes(content: bytes, fmt: str, name: str, caps: Caps = DEFAULT_CAPS) -> TraceRows:
    """Read a whole uploaded trace held in memory (``name`` is how errors call it)."""
    return _parse(io.BytesIO(content), fmt, _bounds(name, None, caps))

