"""Stream statistics against the figures published with the team's traces (../shared/traces/README.md)."""

import numpy as np
import pytest

from engine.sim.trace_stats import per_minute_rate, trace_statistics
from engine.sim.traces import read_trace


@pytest.mark.parametrize("path, fmt, rate, iat_cv, minute_cv, out_p99", [
    ("azure_llm_2023/AzureLLMInferenceTrace_conv.csv", "azure", 5.53, 1.09, 0.25, 601),
    ("azure_llm_2023/AzureLLMInferenceTrace_code.csv", "azure", 2.57, 13.15, 1.03, 251),
    ("mooncake_fast25/conversation_trace.jsonl", "mooncake", 3.40, 3.03, 0.12, 1119),
])
def test_statistics_match_the_published_ones(traces_dir, path, fmt, rate, iat_cv, minute_cv, out_p99):
    trace = read_trace(traces_dir / path, fmt)
    stats = trace_statistics(trace.arrival_s, trace.prompt_tokens, trace.output_tokens)
    assert stats["rate_per_s"] == pytest.approx(rate, abs=0.01)
    assert stats["iat_cv"] == pytest.approx(iat_cv, abs=0.01)
    # Our minute windows drop the trailing partial minute; the published figure may not.
    assert stats["minute_cv"] == pytest.approx(minute_cv, abs=0.05)
    assert stats["output_p99"] == pytest.approx(out_p99, rel=0.005)


def test_per_minute_rate_counts_whole_minutes():
    arrivals = np.array([0.0, 10.0, 59.9, 60.0, 130.0])
    frame = per_minute_rate(arrivals)
    assert list(frame["requests_per_s"] * 60) == [3, 1]
