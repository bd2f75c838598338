"""The simulator against queueing theory on the fixed step model (see engine/teach/theory.py)."""

import numpy as np
import pytest

import engine
from conftest import synthetic
from engine.teach.theory import (cobham_waits_s, pollaczek_khinchine_wait_s, preemptive_priority_times_s,
                                 sjf_mean_wait_s, theory_checks)

# 4 standard errors of the batch-means estimate: a correct simulator fails with probability
# about 6e-5 per check, while a systematic error of a few percent (one extra iteration per
# request, a wrong queue order) moves the estimate by many standard errors.
Z_TOLERANCE = 4.0


def test_formulas_reduce_to_known_cases():
    # Exponential service, mean 0.5 s, lambda 1/s: M/M/1 wait rho / (mu - lambda) = 0.5 s.
    assert pollaczek_khinchine_wait_s(1.0, 0.5, 2 * 0.5 ** 2) == pytest.approx(0.5)
    # One priority class is plain FIFO.
    assert cobham_waits_s([1.0], [0], [(0.5, 0.5)]) == pytest.approx([0.5])
    with pytest.raises(ValueError):
        pollaczek_khinchine_wait_s(3.0, 0.5, 0.5)
    # Preemptive priority: the top class sees an M/G/1 queue of its own; one class is plain M/G/1.
    assert preemptive_priority_times_s([1.0], [0], [(0.5, 0.5)]) == pytest.approx([0.5 + 0.5])
    # SJF with a single job size is FIFO.
    assert sjf_mean_wait_s(1.0, np.array([50]), np.array([1.0]), 0.01) == pytest.approx(
        pollaczek_khinchine_wait_s(1.0, 0.5, 0.25))


@pytest.fixture(scope="module")
def checks():
    return theory_checks()


SETUPS = [("M/G/1 FIFO, constant output", "all"), ("M/G/1 FIFO, geometric output", "all"),
          ("M/G/1 non-preemptive priority", "urgent"), ("M/G/1 non-preemptive priority", "batch"),
          ("M/G/1 preemptive-resume priority", "urgent"), ("M/G/1 preemptive-resume priority", "batch"),
          ("M/G/1 shortest job first", "overall")]


def test_all_setups_were_checked(checks):
    assert [(c.name, c.cls) for c in checks] == SETUPS


@pytest.mark.parametrize("setup", SETUPS, ids=[f"{n} {c}" for n, c in SETUPS])
def test_mean_delay_matches_the_formula(checks, setup):
    """Queue delay (end-to-end for preemptive priority, which preempts only at iteration boundaries:
    the allowance is one iteration) within 4 standard errors of the formula."""
    check = next(c for c in checks if (c.name, c.cls) == setup)
    assert abs(check.simulated_ms - check.theory_ms) <= Z_TOLERANCE * check.std_error_ms + check.allowance_ms, check


def test_unlimited_batch_has_no_queueing():
    """Every request starts at the first iteration boundary after it arrives and is never slowed down."""
    classes = [{"name": "all", "share": 1.0, "prompt_tokens": {"dist": "uniform", "low": 1, "high": 64},
                "output_tokens": {"dist": "geometric", "mean": 20}}]
    scenario = synthetic(classes, rate_per_s=200.0, num_requests=5000,
                         server={"max_batch_size": 8192, "max_batched_tokens": 1_048_576})
    frame = engine.simulate(scenario).requests
    assert (frame["state"] == "completed").all()
    assert frame["queue_ms"].max() < 10.0
    service_ms = frame["e2e_ms"] - frame["queue_ms"]
    np.testing.assert_allclose(service_ms, frame["output_tokens"] * 10.0, atol=1e-6)
    assert frame["queue_ms"].max() > 5.0  # arrivals mid-iteration do wait for the boundary
