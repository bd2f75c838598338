"""Readers for recorded request traces.

Three formats, one result (``TraceRows``: arrival times in seconds from the
first request, prompt and output token counts, optional class names):

- ``csv``: our own ``arrival_s,prompt_tokens,output_tokens[,class]``;
- ``azure``: Azure LLM inference 2023 CSV ``TIMESTAMP,ContextTokens,GeneratedTokens``;
- ``mooncake``: Mooncake FAST'25 JSONL with ``timestamp`` (ms), ``input_length``, ``output_length`` and,
  optionally, ``hash_ids``: the ids of the prompt's 512-token blocks, equal ids for equal prefixes (prefix
  caching replays them as they are).

A trace is a regular file (``engine.scenario.files.open_regular``: a FIFO, a device or a folder is refused before
anything is read), read in file order, incrementally, and reading stops at the cut: ``max_rows`` rows (the
scenario's ``num_requests``), or the limit of requests per run, beyond which a trace without a cut is
an error. At most ``caps.trace_bytes`` bytes are read. Every line read is checked as its bytes stream in,
before it is parsed: at most ``caps.trace_line_bytes`` bytes; in a CSV file at most ``MAX_CSV_COLUMNS``
columns in the header and no more fields in a row than in the header (never extra index columns). Token counts
above the limit of tokens per request and arrivals spanning more than the limit of simulated time are
errors. A malformed row raises ``TraceError`` naming the file, the line and the field, with at most a
short, printable excerpt of what the line holds. Rows are then stably sorted by arrival time; nothing
else is changed. Prefix block ids are kept as 8-byte integers from the line that holds them on.

Reading a file again is served from a small cache keyed by the file's path, size and modification
time (the app replays one trace under every policy and load).
"""

from __future__ import annotations

import functools
import io
import json
import os
import re
import sys
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterator, Optional

import numpy as np
import pandas as pd

from ..scenario.caps import DEFAULT_CAPS, Caps
from ..scenario.errors import ScenarioError, TraceError, excerpt
from ..scenario.files import open_regular, os_reason, quoted
from ..scenario.registry import TRACE_FORMATS

MAX_CSV_COLUMNS = 16  # a trace CSV has 3 or 4 columns; a wider header is not a trace (and costs pandas time)
_TRACE_CACHE_ENTRIES = 4
_JSONL_BLOCK_BYTES = 256 * 1024  # read at a time by the JSONL reader, as pandas reads a CSV (lines found in bulk)

MOONCAKE_BLOCK_TOKENS = 512  # tokens per ``hash_ids`` block of a Mooncake trace

_LF, _CR, _QUOTE, _COMMA, _SPACE, _TAB = (ord(c) for c in '\n\r", \t')
# One CSV value as pandas' tokenizer reads it (skipinitialspace=True skips spaces, not tabs): a value whose first
# character after spaces is a double quote runs to the closing quote ("" is a quote inside it), then on to the next
# comma; any other value runs to the next comma, its quotes being plain characters. Possessive: no backtracking.
_CSV_VALUE = rb' *+(?:"(?:[^"]|"")*+"[^,]*+|(?!")[^,]*+)'
_CSV_CLOSED_LINE = re.compile(_CSV_VALUE + rb"(?:," + _CSV_VALUE + rb")*+")
_CSV_QUOTED = re.compile(rb'(?:^|,) *+"((?:[^"]|"")*+)"')
_CSV_TAB_QUOTE = re.compile(rb' *+\t[ \t]*+"')
_OPEN_QUOTE, _TAB_QUOTE = 0, -1  # the "fields" of a line that cannot be split as pandas will (_quoted_fields)


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

    def readinto(self, buffer) -> int:
        count = self._stream.readinto(buffer)
        self.consumed += count or 0
        limit = self._read.caps.trace_bytes
        if self.consumed > limit:
            raise TraceError(f"{self._read.name}: more than {limit:,} bytes read before the requests cut, the "
                             f"limit trace_bytes; cut the file or set workload.num_requests"
                             f"{self._read.caps.raise_hint('trace_bytes')}")
        return count


# --------------------------------------------------------------------------- lines, found in bulk


@dataclass(frozen=True)
class _Lines:
    """The lines a block of bytes completes, empty ones left out (they hold nothing to check, and a flood of line
    breaks then costs next to nothing): ``number[i]`` is line i's place among the block's ``count`` lines (0
    first), ``block[starts[i]:ends[i]]`` its bytes (``ends[i]`` is the break that ends it); ``ink[i]``: it holds
    more than blank bytes. The block's unfinished last line starts at ``rest``."""

    number: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    ink: np.ndarray
    count: int
    rest: int

    @property
    def lengths(self) -> np.ndarray:
        """Bytes of each line, its break not counted."""
        return self.ends - self.starts


def _marks(data: np.ndarray, values: tuple[int, ...]) -> np.ndarray:
    """Which bytes of ``data`` (bytes as uint8) are one of ``values``."""
    found = data == values[0]
    for value in values[1:]:
        found |= data == value
    return found


def _count_in_lines(found: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """How many bytes ``found`` marks in each line ``[starts[i], ends[i])`` (lines not empty), in one pass: a sum
    from each line's start to the next one's (what lies between is line breaks, which ``found`` never marks)."""
    last = ends[-1] if len(ends) else 0
    return np.add.reduceat(found[:last].view(np.uint8), starts, dtype=np.int64)


def _split_lines(data: np.ndarray, breaks: tuple[int, ...], blank: tuple[int, ...]) -> _Lines:
    """The lines of ``data`` (bytes as uint8) ended by one of the ``breaks`` bytes, vectorised (a block of a million
    short lines takes milliseconds); a line of only ``blank`` bytes has no ink."""
    ends = np.flatnonzero(_marks(data, breaks))
    starts = np.concatenate(([0], ends + 1))
    starts, rest, count = starts[:-1], int(starts[-1]), len(ends)
    number = np.flatnonzero(ends > starts)
    starts, ends = starts[number], ends[number]
    ink = ends - starts > _count_in_lines(_marks(data, blank), starts, ends)
    return _Lines(number, starts, ends, ink, count, rest)


def _long_line(read: _Read, line_no: int, what: str) -> TraceError:
    return TraceError(f"{read.name}: line {line_no}: longer than {read.caps.trace_line_bytes:,} bytes "
                      f"(trace_line_bytes); not {what}")


# --------------------------------------------------------------------------- CSV


def _quoted_fields(line: bytes) -> int:
    """Fields of one CSV line holding a double quote, as pandas splits it (a comma inside a quoted value does not
    split); ``_OPEN_QUOTE`` when a quoted value is still open at the end of the line, ``_TAB_QUOTE`` when the line
    starts with blanks holding a tab, then a quote (pandas reads that quote as opening a value or not, depending on
    where one of its reads ends)."""
    if _CSV_TAB_QUOTE.match(line):
        return _TAB_QUOTE
    if _CSV_CLOSED_LINE.fullmatch(line) is None:
        return _OPEN_QUOTE
    inside = sum(value.count(b",") for value in _CSV_QUOTED.findall(line))
    return line.count(b",") - inside + 1


def _csv_fields(data: np.ndarray, block: bytes, lines: _Lines) -> np.ndarray:
    """Fields of each line: one more than its commas, vectorised; only a line holding a quote is read on its own."""
    fields = _count_in_lines(data == _COMMA, lines.starts, lines.ends) + 1
    for i in np.flatnonzero(_count_in_lines(data == _QUOTE, lines.starts, lines.ends)):
        fields[i] = _quoted_fields(block[lines.starts[i]:lines.ends[i]])
    return fields


def _bad_csv_line(read: _Read, line_no: int, length: int, fields: int, header_fields: int) -> TraceError:
    """The error for line ``line_no`` (the header is line 1) of ``length`` bytes and ``fields`` fields."""
    where = f"{read.name}: line {line_no}"
    if length > read.caps.trace_line_bytes:
        return _long_line(read, line_no, "a trace header" if line_no == 1 else "a trace row")
    if fields == _OPEN_QUOTE:
        return TraceError(f"{where}: a quoted value is not closed on its line; close the quote (a trace value fits "
                          f"on one line)")
    if fields == _TAB_QUOTE:
        return TraceError(f"{where}: a tab before the quoted value that starts the line; remove the tab")
    if line_no == 1:
        return TraceError(f"{where}: {fields:,} columns; a trace has at most {MAX_CSV_COLUMNS}")
    return TraceError(f"{where}: {fields:,} fields but the header has {header_fields}; remove the extra values (a "
                      f"value holding a comma goes in double quotes)")


class _CheckedCsv(io.RawIOBase):
    """A CSV stream passed on to pandas once each line it completes is checked: at most ``trace_line_bytes`` bytes,
    a quoted value closed on its line, at most ``MAX_CSV_COLUMNS`` fields in the header and no more in a row than in
    the header; a line not yet ended is at most ``trace_line_bytes`` bytes. Every byte pandas reads is checked
    (also the few lines it reads past the cut), so no line reaches it unchecked however it counts rows. A carriage
    return is handed on as a line feed (pandas ends a line at either; this way its counting of blank lines and of
    lines starting with blanks is the one checked here). Lines are numbered as pandas counts rows (a line of spaces
    and tabs is skipped), so pandas' row i is line i + 2."""

    def __init__(self, stream: io.RawIOBase, read: _Read):
        super().__init__()
        self._stream, self._read = stream, read
        self._unfinished = b""  # the start of a line whose break has not come yet
        self._lines = 0  # lines checked so far, blank ones not counted
        self._header_fields = MAX_CSV_COLUMNS  # until the header is read

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        count = self._stream.readinto(buffer)
        with memoryview(buffer) as view:
            chunk = bytes(view[:count]).replace(b"\r", b"\n")
            view[:count] = chunk
        self._check(chunk)
        return count

    def _check(self, chunk: bytes) -> None:
        """Check the lines ``chunk`` completes (empty at the end of the stream: the last line ends there)."""
        block = self._unfinished + (chunk or b"\n")
        data = np.frombuffer(block, dtype=np.uint8)
        lines = _split_lines(data, (_LF,), (_SPACE, _TAB))
        numbers = self._lines + np.cumsum(lines.ink)  # each line's number (a blank line: the next line's - 1)
        self._check_lines(lines, numbers, _csv_fields(data, block, lines))
        self._lines = int(numbers[-1]) if len(numbers) else self._lines
        self._unfinished = block[lines.rest:]
        if len(self._unfinished) > self._read.caps.trace_line_bytes:
            raise _long_line(self._read, self._lines + 1, "a trace row")

    def _check_lines(self, lines: _Lines, numbers: np.ndarray, fields: np.ndarray) -> None:
        header = np.flatnonzero(lines.ink & (numbers == 1))
        if len(header):
            self._header_fields = int(fields[header[0]])  # checked below against MAX_CSV_COLUMNS
        allowed = np.where(numbers == 1, MAX_CSV_COLUMNS, self._header_fields)
        bad = (lines.lengths > self._read.caps.trace_line_bytes) | (lines.ink & ((fields > allowed) | (fields < 1)))
        if bad.any():
            i = int(np.argmax(bad))
            raise _bad_csv_line(self._read, int(numbers[i] + ~lines.ink[i]), int(lines.lengths[i]), int(fields[i]),
                                self._header_fields)


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


def _read_csv(stream: BinaryIO, columns: tuple[str, ...], read: _Read) -> pd.DataFrame:
    try:  # index_col=False: a value beyond the header's columns never becomes an index (_CheckedCsv refuses it)
        frame = pd.read_csv(_CheckedCsv(stream, read), dtype=str, keep_default_na=False, skipinitialspace=True,
                            nrows=read.rows + 1, encoding="utf-8", index_col=False)
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
    # Stamps 1677 to 2262 lie up to 2**64 ns apart: the int64 difference wraps, its uint64 reading does not.
    arrival_s = (ns - ns.min()).view(np.uint64) / 1e9
    prompt = _numeric_column(frame, "ContextTokens", read, integer=True)
    output = _numeric_column(frame, "GeneratedTokens", read, integer=True)
    return arrival_s, prompt, output, None, None


# --------------------------------------------------------------------------- Mooncake JSONL


def _jsonl_lines(stream: BinaryIO, read: _Read) -> Iterator[tuple[int, bytes]]:
    """(number, bytes) of each line of a JSONL stream holding more than JSON white space, read
    ``_JSONL_BLOCK_BYTES`` at a time (blank lines are skipped in bulk, not one by one); a line longer than
    ``trace_line_bytes`` is an error when the reader comes to it."""
    longest, unfinished, before = read.caps.trace_line_bytes, b"", 0  # before: lines ended before ``unfinished``
    while True:
        chunk = stream.read(_JSONL_BLOCK_BYTES)
        block = unfinished + (chunk or b"\n")  # at the end of the stream the last line ends
        lines = _split_lines(np.frombuffer(block, dtype=np.uint8), (_LF,), (_SPACE, _TAB, _CR))
        long = lines.lengths > longest
        for i in np.flatnonzero(lines.ink | long):
            if long[i]:
                raise _long_line(read, before + int(lines.number[i]) + 1, "a request record")
            yield before + int(lines.number[i]) + 1, block[lines.starts[i]:lines.ends[i]]
        before += lines.count
        unfinished = block[lines.rest:]
        if len(unfinished) > longest:
            raise _long_line(read, before + 1, "a request record")
        if not chunk:
            return


def _json_value(line: bytes, where: str) -> object:
    """The JSON value one line holds."""
    try:
        return json.loads(line)
    except UnicodeDecodeError:
        raise TraceError(f"{where}: not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise TraceError(f"{where}: not valid JSON ({exc.msg})") from None
    except RecursionError:
        raise TraceError(f"{where}: nested too deeply to be a request record") from None
    except ValueError:  # an integer longer than Python converts from text
        raise TraceError(f"{where}: a number of more than {sys.get_int_max_str_digits():,} digits; not a token "
                         f"count or a time") from None


def _mooncake_record(line: bytes, line_no: int, read: _Read) -> tuple[tuple[float, int, int], list | None]:
    """(timestamp, input and output lengths) of one line, and its prefix block ids (None when it has none)."""
    where = f"{read.name}: line {line_no}"
    record = _json_value(line, where)
    try:
        values = (float(record["timestamp"]), record["input_length"], record["output_length"])
        blocks = record.get("hash_ids")
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


class _MooncakeColumns:
    """The requests read so far, 8 bytes per number and per block id (a line's ids leave Python's lists as soon as
    the line is read: 36 bytes per id there)."""

    def __init__(self):
        self.timestamp_ms, self.prompt_tokens, self.output_tokens = array("d"), array("q"), array("q")
        self.id_counts, self.ids = array("q"), array("q")  # id_counts: -1 for a request without hash_ids

    def __len__(self) -> int:
        return len(self.timestamp_ms)

    def add(self, values: tuple[float, int, int], blocks: list | None) -> None:
        self.timestamp_ms.append(values[0])
        self.prompt_tokens.append(values[1])
        self.output_tokens.append(values[2])
        self.id_counts.append(-1 if blocks is None else len(blocks))
        self.ids.extend(blocks or ())

    def blocks(self, read: _Read) -> tuple[np.ndarray, np.ndarray] | None:
        """(offsets, ids) of the requests' block ids in file order; None when no request has any."""
        counts = np.frombuffer(self.id_counts, dtype=np.int64)
        missing = counts < 0
        if missing.all():
            return None
        if missing.any():
            raise TraceError(f"{read.name}: request {int(np.argmax(missing)) + 1} has no hash_ids while others have; "
                             f"give every request its block ids, or none")
        return np.concatenate(([0], np.cumsum(counts))), np.frombuffer(self.ids, dtype=np.int64)


def _read_mooncake(stream: BinaryIO, read: _Read) -> tuple:
    columns = _MooncakeColumns()
    for line_no, line in _jsonl_lines(stream, read):
        if len(columns) == read.rows:
            read.row_limit(len(columns) + 1)
            break
        columns.add(*_mooncake_record(line, line_no, read))
    if not len(columns):
        raise TraceError(f"{read.name}: the trace has no requests")
    return (np.frombuffer(columns.timestamp_ms, dtype=np.float64) / 1000.0,
            np.frombuffer(columns.prompt_tokens, dtype=np.int64), np.frombuffer(columns.output_tokens, dtype=np.int64),
            None, columns.blocks(read))


# --------------------------------------------------------------------------- formats, files and the cache


def guess_trace_format(path: str | Path) -> str:
    """``mooncake`` for ``.jsonl``, ``azure`` for a CSV whose header starts with TIMESTAMP, else ``csv`` (also when
    the file cannot be read, or is no regular file: ``read_trace`` says what is wrong)."""
    path = Path(path)
    if path.suffix.lower() in (".jsonl", ".json"):
        return "mooncake"
    try:
        with open_regular(path, "trace file") as fh:
            header = fh.read(4096)
    except (OSError, ScenarioError):
        return "csv"
    return guess_format_from_header(header)


def guess_format_from_header(header: bytes) -> str:
    """``azure`` when the first line starts with TIMESTAMP, else ``csv``."""
    return "azure" if header.strip().upper().startswith(b"TIMESTAMP") else "csv"


_READERS = {"csv": _read_own_csv, "azure": _read_azure, "mooncake": _read_mooncake}


def _blocks_in_order(offsets: np.ndarray, ids: np.ndarray, order: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Offsets and ids with request ``order[k]``'s ids as request k's; the arrays themselves when ``order`` keeps
    every request in place (a trace recorded in arrival order: no copy of its ids)."""
    if np.array_equal(order, np.arange(len(order))):
        return offsets, ids
    counts = np.diff(offsets)[order]
    moved = np.concatenate(([0], np.cumsum(counts)))
    gather = np.repeat(offsets[order] - moved[:-1], counts)
    gather += np.arange(moved[-1])
    return moved, ids[gather]


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
    offsets, ids = (None, None) if blocks is None else _blocks_in_order(*blocks, order)
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
    path = str(path)
    return _read_path(path, fmt, _bounds(path if name is None else name, max_rows, caps))


def trace_rows(path: str | Path, fmt: str, most: int, caps: Caps = DEFAULT_CAPS, name: Optional[str] = None) -> int:
    """How many rows the trace file holds, counted up to ``most``: its first ``most`` rows read as a run cut there
    reads them (never the rest of the file, and the limit of requests per run does not refuse a longer file: only
    what is read is bounded). A line among them that is not a valid row is a ``TraceError``, as in a run."""
    path = str(path)
    return len(_read_path(path, fmt, _Read(path if name is None else name, most, True, caps)).arrival_s)


def _read_path(path: str, fmt: str, read: _Read) -> TraceRows:
    """``path`` read within ``read``, through the cache when the file can be looked at."""
    try:
        info = os.stat(path)
    except (OSError, ValueError):  # ValueError: a NUL character in the path
        return _read_file(path, fmt, read)  # not cached: opening it says what is wrong
    return _read_file_cached(os.path.realpath(path), info.st_size, info.st_mtime_ns, fmt, read)


@functools.lru_cache(maxsize=_TRACE_CACHE_ENTRIES)
def _read_file_cached(path: str, size: int, mtime_ns: int, fmt: str, read: _Read) -> TraceRows:
    """One read of ``path`` (its size and modification time are in the key, so a changed file is read anew)."""
    return _read_file(path, fmt, read)


def _read_file(path: str, fmt: str, read: _Read) -> TraceRows:
    with _open_trace(path, read.name) as fh:
        try:
            return _parse(fh, fmt, read)
        except OSError as exc:  # a regular file may still fail to read (/proc/self/mem)
            raise TraceError(f"trace file {quoted(read.name)} cannot be read ({os_reason(exc)})") from None


def _open_trace(path: str, name: str) -> BinaryIO:
    """``path`` opened by ``open_regular`` (a regular file, never waiting on a FIFO); its errors as ``TraceError``
    calling the file ``name``."""
    try:
        return open_regular(path, "trace file", shown_as=name)
    except ScenarioError as exc:
        raise TraceError(str(exc)) from None


def read_trace_bytes(content: bytes, fmt: str, name: str, caps: Caps = DEFAULT_CAPS) -> TraceRows:
    """Read a whole uploaded trace held in memory (``name`` is how errors call it)."""
    return _parse(io.BytesIO(content), fmt, _bounds(name, None, caps))
