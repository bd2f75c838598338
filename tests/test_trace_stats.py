"""Stream statistics (engine.sim.trace_stats) against the same figures counted here with the standard library,
on excerpts of public traces; bench/trace_figures.py checks them against the published figures of the full
traces."""

import math
import statistics

import numpy as np
import pytest

from conftest import AZURE_CODE, AZURE_CONV, MOONCAKE_CONVERSATION
from engine.sim.trace_stats import per_minute_rate, trace_statistics
from engine.sim.traces import read_trace


def linear_percentile(values, p):
    """numpy's default (linear) percentile, counted by hand: rank p/100 x (n - 1) between the two neighbours."""
    ordered = sorted(values)
    rank = p / 100 * (len(ordered) - 1)
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@pytest.mark.parametrize("path, fmt", [(AZURE_CONV, "azure"), (AZURE_CODE, "azure"),
                                       (MOONCAKE_CONVERSATION, "mooncake")])
def test_statistics_are_the_ones_counted_by_hand(path, fmt):
    trace = read_trace(path, fmt)
    stats = trace_statistics(trace.arrival_s, trace.prompt_tokens, trace.output_tokens)
    arrivals = [float(a) for a in trace.arrival_s]
    span_s = arrivals[-1] - arrivals[0]
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:])]
    minutes = [0] * (int(span_s // 60) + 1)
    for a in arrivals:
        minutes[int((a - arrivals[0]) // 60)] += 1
    whole = minutes[:-1]  # the trailing partial minute is left out
    assert stats["requests"] == len(arrivals) and stats["span_s"] == pytest.approx(span_s)
    assert stats["rate_per_s"] == pytest.approx((len(arrivals) - 1) / span_s)
    assert stats["iat_cv"] == pytest.approx(statistics.pstdev(gaps) / statistics.fmean(gaps))
    assert stats["minute_cv"] == pytest.approx(statistics.pstdev(whole) / statistics.fmean(whole))
    outputs = [int(v) for v in trace.output_tokens]
    assert stats["output_p99"] == pytest.approx(linear_percentile(outputs, 99))
    assert stats["prompt_mean"] == pytest.approx(statistics.fmean(int(v) for v in trace.prompt_tokens))
    assert stats["output_max"] == max(outputs)


def test_per_minute_rate_counts_whole_minutes():
    arrivals = np.array([0.0, 10.0, 59.9, 60.0, 130.0])
    frame = per_minute_rate(arrivals)
    assert list(frame["requests_per_s"] * 60) == [3, 1]


@pytest.mark.parametrize("path, fmt, bucket_s", [(AZURE_CONV, "azure", None), (AZURE_CODE, "azure", None),
                                                 (MOONCAKE_CONVERSATION, "mooncake", 3.0)])
def test_bucketed_timestamps_are_flagged_with_their_step(path, fmt, bucket_s):
    """Mooncake stamps its requests in 3-s buckets (most gaps are 0, the distinct times 3 s apart, +-1 ms);
    Azure's 100-ns times are not bucketed."""
    trace = read_trace(path, fmt)
    assert trace_statistics(trace.arrival_s, trace.prompt_tokens, trace.output_tokens)["bucket_s"] == (
        None if bucket_s is None else pytest.approx(bucket_s, abs=0.001))
