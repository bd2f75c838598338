"""A run's steady state (engine.sim.steady): the population in flight by exact integration, MSER-5's warm-up, the
settle test, Little's-law run length; and the planner sizing on it (a fleet whose queue still grows meets
nothing, however short runs fared)."""

from __future__ import annotations

import math
import tomllib

import numpy as np
import pytest

from engine.scenario.config import apply_overrides, load_scenario
from engine.scenario.naming import described_name, renamed
from engine.sim import steady
from engine.sim.simulate import run_summary, simulate

from conftest import REPO

PRESET = REPO / "data" / "scenarios" / "chat_and_batch_a100_8b.toml"


def test_in_flight_is_the_exact_time_average_of_a_hand_drawn_population():
    """Arrivals at 0, 1, 2; leaves at 3, 2, NaN (still there): over [0, 2] the population is 1 on [0, 1) and 2 on
    [1, 2): means 1 and 2; over [2, 4] it is 2 on [2, 3) and 1 on [3, 4): means 2 and 1."""
    arrival, leave = np.array([0.0, 1.0, 2.0]), np.array([3.0, 2.0, np.nan])
    assert np.allclose(steady.in_flight(arrival, leave, np.array([0.0, 1.0, 2.0, 3.0, 4.0])), [1.0, 2.0, 2.0, 1.0])


def test_mser_cuts_a_transient_and_keeps_a_flat_series_whole():
    flat = np.array([5.0, 5.2, 4.9, 5.1, 5.0, 4.8, 5.2, 5.0, 4.9, 5.1])
    assert steady.mser_cut(flat) == 0
    filling = np.concatenate((np.linspace(0.0, 5.0, 4), flat))
    assert steady.mser_cut(filling) == 3, "the filling batches are cut, the flat ones kept"


def _poisson_run(rate_per_s: float, service_s: np.ndarray, seed: int = 1) -> tuple[np.ndarray, ...]:
    """An infinite-server queue (every request served at once for its own time): stationary for any rate."""
    rng = np.random.default_rng(seed)
    arrival = np.cumsum(rng.exponential(1.0 / rate_per_s, len(service_s)))
    return arrival, arrival.copy(), arrival + service_s


def test_a_stationary_population_settles_and_little_gives_its_mean():
    """M/M/infinity at 10 req/s and 2 s each: L = lambda W = 20 in flight, and nothing grows."""
    rng = np.random.default_rng(7)
    arrival, start, leave = _poisson_run(10.0, rng.exponential(2.0, 20_000))
    state = steady.steady_state(arrival, start, leave)
    assert state["settled"]
    assert state["mean_in_flight"] == pytest.approx(20.0, rel=0.05)
    assert state["flights"] == pytest.approx(20_000 / state["mean_in_flight"])
    assert steady.requests_needed(state, 20_000) == 20_000, "a thousand mean times in the system is long enough"


def test_a_queue_that_grows_does_not_settle():
    """One server at twice its rate: every request waits for all before it, and the queue grows without end."""
    arrival = np.arange(2000) * 0.5
    leave = np.arange(1, 2001) * 1.0  # served one a second, in order
    start = leave - 1.0
    state = steady.steady_state(arrival, start, leave)
    assert not state["settled"]
    assert state["growth_frac"] > steady.SETTLE_GROWTH


def test_a_full_population_with_a_growing_queue_does_not_settle():
    """A thousand always in service hide a queue growing from 0 to 300: the queue's own test sees it."""
    n = 20_000
    arrival = np.linspace(0.0, 2000.0, n)
    start = arrival + np.linspace(0.0, 30.0, n)  # waits grow: the queue fills at 0.15 req/s
    leave = start + 100.0  # 1,000 in service
    state = steady.steady_state(arrival, start, leave)
    assert not state["settled"]
    assert state["growth_frac"] < steady.SETTLE_GROWTH, "the population in flight alone grows too little to tell"


def test_requests_needed_lasts_the_flights_little_asks_for():
    state = {"flights": 2.0, "mean_in_flight": 1000.0, "steady_requests": 1000, "settled": True}
    assert steady.requests_needed(state, 2000) == math.ceil(1.1 * steady.STEADY_FLIGHTS * 1000.0)


def test_a_constant_rate_run_carries_its_steady_state_and_a_moving_one_none():
    data = apply_overrides(tomllib.loads(PRESET.read_text()), {"workload.num_requests": 2000})
    summary = run_summary(data)
    state = summary["steady"]
    assert state is not None and state["settled"]
    after = simulate(load_scenario(data)).requests
    judged = after[after["arrival_s"] >= state["warmup_s"]]
    assert state["steady_requests"] == len(judged)
    assert state["overall"]["ttft_ms"]["p99"] == pytest.approx(np.percentile(judged["ttft_ms"].dropna(), 99))
    moving = apply_overrides(data, {"workload.arrival.shape": "servegen-language-small-day",
                                    "workload.duration_s": 600})
    del moving["workload"]["num_requests"]
    assert run_summary(moving)["steady"] is None


def test_a_preset_name_follows_what_it_describes():
    preset = tomllib.loads(PRESET.read_text())
    edited = apply_overrides(preset, {"server.model": "Llama-3.1-70B", "server.gpu": "H100-80G"})
    named = renamed(preset, edited)
    assert named["name"] == described_name(edited) == "chat + batch, Llama-3.1-70B on H100-80G, steady arrivals"
    for unnamed in ({"policy.name": "priority"}, {"workload.arrival.rate_per_s": 9.0},
                    {"workload.classes.0.share": 0.5}):
        assert renamed(preset, apply_overrides(preset, unnamed))["name"] == preset["name"], \
            f"{unnamed}: not what the name describes"
    own = {**preset, "name": "Acme's chat"}
    assert renamed(own, apply_overrides(own, {"server.gpu": "H100-80G"}))["name"] == "Acme's chat", \
        "a name the user gave stays"
    day = renamed(named, apply_overrides(named, {"workload.arrival.shape": "servegen-reasoning-day"}))
    assert day["name"] == "chat + batch, Llama-3.1-70B on H100-80G, the shape servegen-reasoning-day", \
        "a described name follows the next change"
    huge = renamed(preset, apply_overrides(preset, {"server.gpu": "X" * 2000}))["name"]
    assert len(huge) == 80 and huge.endswith("…"), "never longer than a name may be: the GPU's own check names it"


def test_a_days_shape_becomes_the_points_of_the_same_day():
    """Switching the Workload page from a day's shape to points starts from that day (its points at its mean rate,
    repeating daily), not from a made-up curve."""
    from engine.scenario.config import curve_points, raw_curve
    from engine.scenario.rate_curve import RateCurve

    shaped = {"shape": "servegen-reasoning-day", "rate_per_s": 4.0}
    points, period_s = curve_points(shaped)
    assert period_s == 86_400.0 and points[0][0] == 0.0 and points[-1][0] < period_s
    again = RateCurve.from_points(points, period_s)
    assert again.mean_per_s() == pytest.approx(4.0, rel=1e-3)
    assert max(r for _, r in points) == pytest.approx(raw_curve(shaped).rates_per_s.max(), rel=1e-3)
