"""Bounded trace readers: every line of a trace is bounded in bytes (and, in a CSV file, in fields) as its
bytes stream in, before pandas parses it; only regular files are read, never waiting on a FIFO; prefix block
ids cost 8 bytes each. Each hostile file ends in one ``TraceError`` line, in bounded time and memory."""

from __future__ import annotations

import io
import json
import os
import threading
import time
import tracemalloc
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import engine
from engine.scenario.caps import DEFAULT_CAPS
from engine.scenario.errors import TraceError
from engine.sim.traces import _bounds, _CheckedCsv, guess_trace_format, read_trace, read_trace_bytes
from test_safety import EXAMPLE, HANG_S, cli, one_line_error

HEADER = b"arrival_s,prompt_tokens,output_tokens\n"


def peak_bytes(action) -> tuple[object, int, float]:
    """(what ``action()`` returned or raised, its peak traced memory in bytes, its seconds)."""
    tracemalloc.start()
    started = time.perf_counter()
    try:
        outcome = action()
    except TraceError as exc:
        outcome = exc
    finally:
        seconds = time.perf_counter() - started
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return outcome, peak, seconds


def trace_error(action) -> str:
    with pytest.raises(TraceError) as caught:
        action()
    message = str(caught.value)
    assert "\n" not in message and message.isprintable()
    return message


# --------------------------------------------------------------------------- CSV lines


@pytest.mark.parametrize("fields, words", [
    (1_000_000, "big.csv: line 2: longer than 1,048,576 bytes (trace_line_bytes); not a trace row"),
    (300_000, "big.csv: line 2: 300,000 fields but the header has 3; remove the extra values"),
])
def test_a_data_row_of_many_fields_is_refused_as_it_streams_in(fields, words):
    """The probe: one data row of a million fields ran 10 minutes at 4.9 GiB, then replayed as one request (pandas
    took the extra fields as index columns). Refused in milliseconds and a few MiB."""
    content = HEADER + b"1," * (fields - 1) + b"1\n"
    outcome, peak, seconds = peak_bytes(lambda: read_trace_bytes(content, "csv", "big.csv"))
    assert isinstance(outcome, TraceError) and words in str(outcome)
    assert seconds < HANG_S and peak < 16 * len(content)


def test_the_command_line_refuses_a_row_of_a_million_fields_in_one_line(tmp_path):
    path = tmp_path / "big.csv"
    path.write_bytes(HEADER + b"1," * 999_999 + b"1\n")
    one_line_error(*cli("run", EXAMPLE, "--trace", str(path)), "line 2: longer than 1,048,576 bytes")


@pytest.mark.parametrize("fmt, first, record", [
    ("csv", HEADER, b"0,5,3,%s\n"),
    ("mooncake", b"", b'{"timestamp": 0, "input_length": 5, "output_length": 3, "x": "%s"}\n')])
def test_a_line_of_the_limit_is_read_and_one_byte_more_is_refused(fmt, first, record):
    """The limit is on a line's bytes, its line break not counted, wherever reads end in it."""
    fill = DEFAULT_CAPS.trace_line_bytes - len(record) + 3  # record's %s and \n are 3 bytes
    header = HEADER.replace(b"\n", b",class\n") if first else b""
    assert len(read_trace_bytes(header + record % (b"a" * fill), fmt, "t").arrival_s) == 1
    words = f"t: line {2 if first else 1}: longer than 1,048,576 bytes (trace_line_bytes)"
    assert words in trace_error(lambda: read_trace_bytes(header + record % (b"a" * (fill + 1)), fmt, "t"))


@pytest.mark.parametrize("fmt, first", [("csv", HEADER), ("mooncake", b"")])
def test_a_line_is_refused_once_it_passes_the_limit_not_at_its_end(fmt, first):
    """A 32 MiB line, refused after its first MiB: never held whole, never copied over and over."""
    content = first + b"1" * (32 * 1024 * 1024)
    outcome, peak, seconds = peak_bytes(lambda: read_trace_bytes(content, fmt, "long"))
    line_no = 2 if first else 1
    assert f"long: line {line_no}: longer than 1,048,576 bytes (trace_line_bytes)" in str(outcome)
    assert peak < 8 * 1024 * 1024 and seconds < HANG_S


@pytest.mark.parametrize("content, words", [
    (HEADER + b"0,5,3\n0,5,3,4,5\n", "line 3: 5 fields but the header has 3"),
    (HEADER + b"9,0,5,3\n", "line 2: 4 fields but the header has 3"),  # pandas made 9 an index, silently
    (HEADER + b"0,5,3,\n", "line 2: 4 fields but the header has 3"),  # a trailing comma
    (b"\n \t\n" + HEADER.replace(b"\n", b"\r\n") + b"0,5,3\r\n\r\n1,5,3,x\r\n", "line 3: 4 fields"),  # blank lines
    (HEADER.replace(b"\n", b"\r") + b"0,5,3\r1,5,3,x\r", "line 3: 4 fields but the header has 3"),
    (b'"arrival_s","prompt_tokens",output_tokens\n0,5,3,"a,b",c\n', "line 2: 5 fields but the header has 3"),
    (b"a," * 20 + b"a\n0,5,3\n", "line 1: 21 columns; a trace has at most 16"),
])
def test_a_row_with_more_fields_than_the_header_is_named(content, words):
    assert words in trace_error(lambda: read_trace_bytes(content, "csv", "t.csv"))


def test_quoted_values_keep_their_commas_and_quotes():
    content = (b'arrival_s,prompt_tokens,output_tokens,class\n0,5,3,"chat, long"\r\n1,6,3, "say ""hi"", go"\n'
               b'2,7,3,batch\n')
    trace = read_trace_bytes(content, "csv", "t.csv")
    assert list(trace.class_names) == ["chat, long", 'say "hi", go', "batch"]


@pytest.mark.parametrize("content, words", [
    (b'arrival_s,prompt_tokens,output_tokens,class\n0,5,3,"chat\nlong"\n1,5,3,x\n',
     "line 2: a quoted value is not closed on its line; close the quote"),
    (HEADER + b'0,5,3\n\t"1",5,3\n', "line 3: a tab before the quoted value that starts the line; remove the tab"),
    # pandas alone drops the comma after two carriage returns, and names the wrong field
    (HEADER.replace(b"\n", b"\r") + b"0,5,3\r\r,5,3\r", "line 3: arrival_s = '' must be a number >= 0"),
])
def test_a_line_pandas_could_split_otherwise_is_refused(content, words):
    assert words in trace_error(lambda: read_trace_bytes(content, "csv", "t.csv"))


class ShortReads(io.RawIOBase):
    """``content`` handed out at most ``most`` bytes at a time (pandas' reads end anywhere in a line)."""

    def __init__(self, content: bytes, most: int):
        super().__init__()
        self._content, self._most = io.BytesIO(content), most

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        with memoryview(buffer) as view:
            return self._content.readinto(view[: self._most])


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([b"a,b,c\n", b"a,b,c\r", b'"a","b,x",c\r\n', b" \n\ta,b,c\n"]),
       st.binary(max_size=40).map(lambda raw: bytes(b'a,," \t\r\n'[byte % 8] for byte in raw)),
       st.integers(1, 9))
def test_a_file_checked_here_is_split_by_pandas_as_checked(header, body, most):
    """Whatever the lines hold (commas, quotes, blanks, CR and LF) and wherever pandas' reads end: a file the
    check lets through reaches pandas with no row wider than its header (no warning, no index column), no value
    holding a line break, and as many rows as lines were counted."""
    checked = _CheckedCsv(ShortReads(header + body, most), _bounds("t.csv", None, DEFAULT_CAPS))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # pandas' "Length of header or names does not match" becomes an error
        try:
            frame = pd.read_csv(checked, dtype=str, keep_default_na=False, skipinitialspace=True,
                                encoding="utf-8", index_col=False)
        except TraceError:
            return
    assert len(frame) == checked._lines - 1
    assert not any("\n" in value or "\r" in value for value in frame.to_numpy().ravel())


def test_a_million_rows_are_checked_in_a_small_part_of_pandas_time():
    rows = np.column_stack([np.arange(1_000_000) * 0.01, np.full(1_000_000, 700), np.full(1_000_000, 300)])
    text = io.StringIO()
    np.savetxt(text, rows, fmt=["%.2f", "%d", "%d"], delimiter=",", header=HEADER.decode().strip(), comments="")
    content = text.getvalue().encode()
    started = time.process_time()
    checked = _CheckedCsv(io.BytesIO(content), _bounds("t.csv", None, DEFAULT_CAPS))
    while checked.read(256 * 1024):
        pass
    check_s = time.process_time() - started
    started = time.process_time()
    pd.read_csv(io.BytesIO(content), dtype=str, keep_default_na=False, skipinitialspace=True, index_col=False)
    pandas_s = time.process_time() - started
    assert checked._lines == 1_000_001 and check_s < 0.25 * pandas_s, (check_s, pandas_s)


@pytest.mark.parametrize("fmt, first, most_s", [
    ("csv", HEADER + b"0,5,3\n", 2.5), ("mooncake", b'{"timestamp": 0, "input_length": 5, "output_length": 3}\n', 1.0)])
@pytest.mark.parametrize("blank", [b"\n", b" \r\n"])
def test_a_flood_of_blank_lines_is_skipped_in_bulk(fmt, first, most_s, blank):
    """32 MiB of blank lines: the JSONL reader took up to 3.7 s of CPU, one line at a time; now 0.3 s (the CSV
    check: 0.9 s at most, for 11 million lines of one space)."""
    content = first + blank * (32 * 1024 * 1024 // len(blank))
    started = time.process_time()
    trace = read_trace_bytes(content, fmt, "blank")
    assert len(trace.arrival_s) == 1 and time.process_time() - started < most_s


# --------------------------------------------------------------------------- regular files only


def finishes(action) -> object:
    """What ``action()`` returned or raised, asserting that it did not wait (a thread: a read blocked on a FIFO
    cannot be interrupted)."""
    outcome: list = []

    def run() -> None:
        try:
            outcome.append(action())
        except Exception as exc:  # the test looks at what it was
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(HANG_S)
    assert not thread.is_alive(), "waited on the file"
    return outcome[0]


def release_fifo(path: Path) -> None:
    """Open ``path`` for writing and close it: a reader waiting on the FIFO sees its end."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:
        pass  # nobody is reading


def test_a_fifo_is_refused_without_waiting(tmp_path):
    """The probe: a FIFO given as a trace waited forever (the format was guessed from its first line)."""
    fifo = tmp_path / "t.csv"
    os.mkfifo(fifo)
    try:
        assert finishes(lambda: guess_trace_format(fifo)) == "csv"
        error = finishes(lambda: read_trace(fifo, "csv", name="upload.csv"))
        assert str(error) == "trace file 'upload.csv' is a FIFO (named pipe), not a regular file; give a file"
        assert isinstance(error, TraceError)
        one_line_error(*cli("run", EXAMPLE, "--trace", str(fifo)), "is a FIFO (named pipe), not a regular file")
    finally:
        release_fifo(fifo)


@pytest.mark.parametrize("kind, words", [
    ("/dev/zero", "is a character device, not a regular file"),
    ("folder", "is a folder"),
    ("loop", "cannot be opened (Too many levels of symbolic links)"),
    ("/proc/self/mem", "cannot be read (Input/output error)"),
    ("a\0b.csv", "cannot be opened (its path holds a NUL character)"),
])
def test_what_is_no_readable_regular_file_is_named_in_one_line(tmp_path, kind, words):
    path = {"folder": tmp_path, "loop": tmp_path / "loop"}.get(kind, kind)
    if kind == "loop":
        os.symlink(path, path)
    if kind.startswith("/") and not os.path.exists(kind):
        pytest.skip(f"{kind} does not exist here")
    for fmt in ("csv", "mooncake"):
        error = finishes(lambda: read_trace(path, fmt, name="given"))
        assert isinstance(error, TraceError) and str(error).startswith("trace file 'given' ") and words in str(error)
    assert finishes(lambda: guess_trace_format(path)) == "csv"


def test_a_changed_file_is_read_anew(tmp_path):
    path = tmp_path / "t.csv"
    path.write_bytes(HEADER + b"0,5,3\n")
    assert len(read_trace(path, "csv").arrival_s) == 1
    path.write_bytes(HEADER + b"0,5,3\n1,5,3\n")
    assert len(read_trace(path, "csv").arrival_s) == 2


# --------------------------------------------------------------------------- Mooncake JSONL


def ids_file(path: Path, size_bytes: int, shuffled: bool) -> list[list[int]]:
    """A JSONL trace of about ``size_bytes`` bytes, nearly all of it 7-digit block ids; each request's ids."""
    rng = np.random.default_rng(5)
    records, written = [], 0
    while written < size_bytes:
        ids = rng.integers(1_000_000, 9_999_999, 19_000).tolist()
        line = json.dumps({"timestamp": len(records), "input_length": 19_000 * 512, "output_length": 9,
                           "hash_ids": ids}) + "\n"
        records.append((line, ids))
        written += len(line)
    if shuffled:
        records = [records[i] for i in rng.permutation(len(records))]
    path.write_text("".join(line for line, _ in records))
    return [ids for _, ids in sorted(records, key=lambda r: json.loads(r[0])["timestamp"])]


@pytest.mark.parametrize("shuffled, most", [(False, 1.75), (True, 3.5)])
def test_prefix_block_ids_take_8_bytes_each(tmp_path, shuffled, most):
    """The probe: each id stayed a Python int in a list (36 bytes) until the end: 5 times the file's bytes at the
    peak. Now 8 bytes from its line on: about the file's bytes (7-digit ids), plus one copy when the file is not in
    arrival order."""
    path = tmp_path / "ids.jsonl"
    ids = ids_file(path, 8 * 1024 * 1024, shuffled)
    trace, peak, seconds = peak_bytes(lambda: read_trace(path, "mooncake"))
    assert peak < most * path.stat().st_size and seconds < HANG_S, (peak / path.stat().st_size, seconds)
    for i in (0, len(ids) // 2, len(ids) - 1):
        assert list(trace.block_ids[trace.block_offsets[i]:trace.block_offsets[i + 1]]) == ids[i]


def test_prefix_block_ids_follow_their_request_into_arrival_order():
    lines = [{"timestamp": 30, "input_length": 1024, "output_length": 1, "hash_ids": [7, 8]},
             {"timestamp": 10, "input_length": 512, "output_length": 1, "hash_ids": []},
             {"timestamp": 20, "input_length": 1536, "output_length": 1, "hash_ids": [1, 2, 3]}]
    trace = read_trace_bytes("".join(json.dumps(line) + "\n" for line in lines).encode(), "mooncake", "t.jsonl")
    assert list(trace.prompt_tokens) == [512, 1536, 1024]
    assert list(trace.block_offsets) == [0, 0, 3, 5] and list(trace.block_ids) == [1, 2, 3, 7, 8]
    lines[1].pop("hash_ids")
    assert "request 2 has no hash_ids while others have" in trace_error(lambda: read_trace_bytes(
        "".join(json.dumps(line) + "\n" for line in lines).encode(), "mooncake", "t.jsonl"))


def test_a_jsonl_number_too_long_to_convert_is_named():
    line = b'{"timestamp": 0, "input_length": ' + b"1" * 5000 + b', "output_length": 1}\n'
    assert "t.jsonl: line 1: a number of more than" in trace_error(lambda: read_trace_bytes(line, "mooncake",
                                                                                             "t.jsonl"))


def test_a_long_jsonl_line_after_the_cut_is_never_read(tmp_path):
    path = tmp_path / "t.jsonl"
    record = b'{"timestamp": 0, "input_length": 5, "output_length": 3}\n'
    path.write_bytes(record * 10 + b'{"x": "' + b"y" * (2 * 1024 * 1024) + b'"}\n')
    assert len(read_trace(path, "mooncake", max_rows=5).arrival_s) == 5
    assert "line 11: longer than 1,048,576 bytes" in trace_error(lambda: read_trace(path, "mooncake"))


# --------------------------------------------------------------------------- Azure


def test_azure_stamps_585_years_apart_are_not_one_second_apart():
    """Their difference in ns passes 2**63: as int64 it wrapped to -1 s and the trace replayed as 1 s long."""
    content = (b"TIMESTAMP,ContextTokens,GeneratedTokens\n1677-09-21 00:12:43.645224193,10,2\n"
               b"2262-04-11 23:47:16.354775807,10,2\n")
    assert "the arrivals span 1.845e+10 s, beyond the limit" in trace_error(
        lambda: read_trace_bytes(content, "azure", "a.csv"))


# --------------------------------------------------------------------------- a run cut at its first rows


def test_a_run_of_the_first_rows_of_a_trace_beyond_the_row_limit_reads_only_those_rows(tmp_path):
    """``--set workload.num_requests=1000`` on a file of more rows than the limit requests_per_run: the run read its
    1,000 rows, then its summary read the whole file again (to say "of the trace's N") and refused it as beyond the
    limit, "set workload.num_requests", which was set. A cut run reads its rows and one more, whatever follows."""
    rows = DEFAULT_CAPS.requests_per_run + 1
    path = tmp_path / "long.csv"
    path.write_bytes(HEADER + b"0,10,5\n" * rows)
    code, out, err, seconds = cli("run", EXAMPLE, "--trace", str(path), "--set", "workload.num_requests=1000",
                                  "--json", "-")
    assert code == 0, err
    run = json.loads(out)["run"]
    assert (run["requests"], run["trace_requests"]) == (1000, None), "null: the file holds more, not counted"
    code, out, err, seconds = cli("run", EXAMPLE, "--trace", str(path), "--set", "workload.num_requests=1000")
    assert code == 0 and "1,000 of the trace's more than 1,000 requests" in out, err


@pytest.mark.parametrize("after_cut", [b"abc,10,5\n", b"0,10,0\n", b"0,10\n"], ids=["time", "tokens", "fields"])
def test_rows_past_the_cut_are_never_read_so_never_an_error(tmp_path, after_cut):
    """A bad row 100 lines past the cut: the run never uses it, and nothing reads it (the summary read the whole
    file and refused it); the row right after the cut, read to know the file holds more, is never an error."""
    path = tmp_path / "t.csv"
    path.write_bytes(HEADER + b"0.5,10,5\n" * 110 + after_cut + b"1,10,5\n" * 5)
    for cut in (10, 110):
        code, out, err, seconds = cli("run", EXAMPLE, "--trace", str(path), "--set", f"workload.num_requests={cut}",
                                      "--json", "-")
        assert code == 0, err
        assert json.loads(out)["run"]["trace_requests"] is None
    assert "line 112" in cli("run", EXAMPLE, "--trace", str(path))[2], "read whole, the bad row is named"


def test_a_cut_run_of_a_trace_that_holds_no_more_rows_counts_them(tmp_path):
    path = tmp_path / "t.csv"
    path.write_bytes(HEADER + b"0.5,10,5\n" * 30)
    for cut, whole in ((30, 30), (50, 30), (29, None)):
        code, out, err, seconds = cli("run", EXAMPLE, "--trace", str(path), "--set", f"workload.num_requests={cut}",
                                      "--json", "-")
        assert code == 0 and json.loads(out)["run"]["trace_requests"] == whole, (cut, err)


def test_counting_the_rows_of_a_trace_reads_them_and_no_more(tmp_path):
    from engine.sim.traces import trace_rows

    path = tmp_path / "t.jsonl"
    record = b'{"timestamp": 0, "input_length": 5, "output_length": 3}\n'
    path.write_bytes(record * 10 + b"not json\n")
    assert [trace_rows(path, "mooncake", most) for most in (1, 10)] == [1, 10]
    assert "line 11: not valid JSON" in trace_error(lambda: trace_rows(path, "mooncake", 11))
    capped = DEFAULT_CAPS.__class__(requests_per_run=5)
    assert trace_rows(path, "mooncake", 8, capped) == 8, "a count is a cut: the limit per run refuses no file"


def test_the_planner_sizes_the_first_rows_of_a_trace_longer_than_a_run_may_read(tmp_path):
    """A plan replaying a file of more rows than requests_per_run: the planner counted the whole file to size it
    whole (up to WHOLE_TRACE_MAX_REQUESTS) and refused it, "set workload.num_requests", however it was set. It counts
    one row past what it sizes, and says the trace holds more."""
    from engine.decide.plan_text import traffic_text
    from engine.decide.planner import at_peak
    from engine.scenario.config import read_toml
    from engine.sim.workload import WHOLE_TRACE_MAX_REQUESTS

    path = tmp_path / "long.csv"
    path.write_bytes(HEADER + b"0,10,5\n" * (DEFAULT_CAPS.requests_per_run + 1))
    data = read_toml(Path(EXAMPLE))
    data["workload"]["trace"] = {"path": str(path)}
    data["workload"]["num_requests"] = 1000
    _, traffic = at_peak(data, engine.load_scenario(data))
    assert traffic == {"trace_requests": None, "sized_requests": WHOLE_TRACE_MAX_REQUESTS}
    assert f"the first {WHOLE_TRACE_MAX_REQUESTS:,} of the trace's more than" in traffic_text(traffic)
