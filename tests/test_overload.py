"""Loads the server cannot drain stop at a documented bound and are reported as unstable."""

import pytest

import engine
from conftest import synthetic

ONE = [{"name": "a", "share": 1.0, "prompt_tokens": {"dist": "constant", "value": 1},
        "output_tokens": {"dist": "constant", "value": 100}}]


def conserved(summary):
    o = summary["overall"]
    return o["arrived"] == o["completed"] + o["timed_out"] + o["unfinished"]


def test_growing_queue_stops_at_the_waiting_bound():
    """50 req/s of 1 s jobs (rho = 50): the run stops once 2000 wait, long before all arrive."""
    scenario = engine.load_scenario(engine.scenario_to_dict(synthetic(ONE, rate_per_s=50.0, num_requests=200_000,
                                                                      server={"max_batch_size": 1})),
                                    overrides=["limits.max_waiting_requests=2000"])
    summary = engine.simulate(scenario).summary
    system = summary["system"]
    assert system["stop_reason"] == "queue_bound" and system["unstable"]
    assert system["offered_load"] == pytest.approx(50.0, rel=0.02)
    assert 2000 < summary["overall"]["unfinished"] <= 2002 and conserved(summary)
    assert summary["overall"]["arrived"] < 200_000


def test_drain_horizon_stops_a_slow_backlog():
    scenario = engine.load_scenario(engine.scenario_to_dict(synthetic(ONE, rate_per_s=1.2, num_requests=3000,
                                                                      server={"max_batch_size": 1})),
                                    overrides=["limits.max_drain_s=10"])
    summary = engine.simulate(scenario).summary
    assert summary["system"]["stop_reason"] == "horizon" and summary["system"]["unstable"]
    assert summary["overall"]["unfinished"] > 0 and conserved(summary)


def test_time_outs_shed_load_but_the_run_is_still_marked_unstable():
    classes = [{**ONE[0], "timeout_ms": 2000}]
    summary = engine.simulate(synthetic(classes, rate_per_s=3.0, num_requests=3000,
                                        server={"max_batch_size": 1})).summary
    assert summary["system"]["stop_reason"] == "drained" and summary["system"]["unstable"]
    assert summary["overall"]["timed_out"] > 1000 and conserved(summary)


def test_offered_load_is_rho_of_the_one_slot_queue():
    summary = engine.simulate(synthetic(ONE, rate_per_s=7.0, num_requests=20000,
                                        server={"max_batch_size": 1, "step_time_ms": 1.0})).summary
    # rho = lambda x 100 iterations x 1 ms = 0.7, with lambda measured from the drawn arrivals.
    assert summary["system"]["offered_load"] == pytest.approx(0.7, rel=0.03)
    assert not summary["system"]["unstable"]
