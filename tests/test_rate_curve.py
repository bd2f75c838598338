"""Rates that change over time: the curve's integral and its inverse by hand, arrivals drawn through it (counts
per stretch, seeding, the constant rate untouched), the keys' checks, the named shapes, and the windows a run is
cut into (exact queue integral, counts, the bursts diagnosis)."""

import copy
import math

import numpy as np
import pytest

import engine
from engine.decide.diagnosis import burst_episodes, clock_text, diagnose, window_words
from engine.scenario.config import Arrival, raw_rate_per_s, scenario_to_dict
from engine.scenario.errors import ScenarioError
from engine.scenario.rate_curve import RateCurve, shape_curve, shape_source
from engine.scenario.table_names import names
from engine.sim.windows import Cut, window_length_s
from engine.sim.workload import build_requests

STEP = [[0, 2.0], [600, 2.0], [600, 6.0], [900, 6.0], [900, 2.0]]  # a flash crowd: 3x from 10:00 to 15:00


def scenario_data(arrival: dict, duration_s: float | None = 1800.0, requests: int | None = None,
                  batch: int = 4) -> dict:
    workload = {"arrival": arrival, "classes": [
        {"name": "chat", "share": 1.0, "sla_ttft_ms": 500.0, "prompt_tokens": {"dist": "constant", "value": 64},
         "output_tokens": {"dist": "constant", "value": 16}}]}
    if duration_s is not None:
        workload["duration_s"] = duration_s
    if requests is not None:
        workload["num_requests"] = requests
    return {"name": "curve", "seed": 5, "workload": workload,
            "server": {"step_model": "fixed", "step_time_ms": 10.0, "max_batch_size": batch,
                       "max_batched_tokens": 4096}}


def test_integral_and_inverse_by_hand():
    curve = RateCurve.from_points([[0, 10], [100, 30], [100, 0], [200, 0], [200, 20]])
    # 0-100 s: a line 10 -> 30, area (10 + 30) / 2 x 100 = 2,000; nothing from 100 to 200; then 20 per second
    assert curve.cumulative([0, 50, 100, 150, 200, 250]).tolist() == [0, 750, 2000, 2000, 2000, 3000]
    assert curve.mean_per_s() == 2000 / 200
    # inverse: 10 s + s^2 / 10 = 750 at s = 50; the stretch at rate 0 is passed over
    assert curve.inverse([750.0, 2000.0, 2500.0]) == pytest.approx([50.0, 200.0, 225.0])
    times = np.linspace(0, 400, 41)
    times = times[(times < 100) | (times >= 200)]  # L is flat from 100 to 200: its inverse passes them over
    assert curve.inverse(curve.cumulative(times)) == pytest.approx(times, abs=1e-9)


def test_a_periodic_curve_repeats_and_closes_on_its_first_rate():
    day = RateCurve.from_points([[0, 1.0], [43_200, 3.0]], 86_400)  # up to 3 at noon, back to 1 at midnight
    assert day.mean_per_s() == 2.0
    assert day.rate_at([0, 21_600, 43_200, 64_800, 86_400, 86_400 + 21_600]).tolist() == [1, 2, 3, 2, 1, 2]
    assert day.cumulative(3 * 86_400 + 43_200) == pytest.approx(3 * 172_800 + 86_400)
    assert day.inverse(3 * 172_800 + 86_400) == pytest.approx(3 * 86_400 + 43_200)
    assert day.window_means([0, 43_200, 86_400]) == pytest.approx([2.0, 2.0])


def test_arrivals_follow_the_curve():
    requests = build_requests(engine.load_scenario(scenario_data({"process": "poisson", "rate_curve": STEP})))
    counts = np.histogram(requests.arrival_s, bins=[0, 600, 900, 1800])[0]
    expected = np.array([1200, 1800, 1800])  # 2 x 600, 6 x 300, 2 x 900
    assert np.all(np.abs(counts - expected) < 5 * np.sqrt(expected))  # Poisson counts: 5 standard deviations
    again = build_requests(engine.load_scenario(scenario_data({"process": "poisson", "rate_curve": STEP})))
    assert np.array_equal(requests.arrival_s, again.arrival_s)  # same seed, same arrivals, bit for bit


def test_gamma_arrivals_keep_their_burstiness_through_a_flat_curve():
    flat = build_requests(engine.load_scenario(scenario_data(
        {"process": "gamma", "cv": 3.0, "rate_curve": [[0, 4.0]]}, duration_s=None, requests=50_000)))
    gaps = np.diff(flat.arrival_s)
    assert gaps.mean() == pytest.approx(0.25, rel=0.05)
    assert gaps.std() / gaps.mean() == pytest.approx(3.0, rel=0.1)


def test_a_constant_rate_draws_as_before():
    """No curve: the gaps are the generator's exponentials at 1 / rate, summed (the arrivals of every earlier
    release, so saved results and links keep their numbers)."""
    requests = build_requests(engine.load_scenario(scenario_data({"process": "poisson", "rate_per_s": 4.0},
                                                                 duration_s=None, requests=1000)))
    gaps = np.random.default_rng(5).exponential(0.25, size=1000)
    assert np.array_equal(requests.arrival_s, np.cumsum(gaps))


def test_the_rate_scales_the_curve_and_a_curve_alone_gives_its_mean():
    alone = engine.load_scenario(scenario_data({"process": "poisson", "rate_curve": STEP}))
    # the mean over the curve's points, 0 to 900 s (the last rate then holds)
    assert alone.workload.arrival.rate_per_s == (2 * 600 + 6 * 300) / 900
    scaled = engine.load_scenario(scenario_data({"process": "poisson", "rate_curve": STEP, "rate_per_s": 8.0}))
    assert scaled.workload.arrival.curve().mean_per_s() == pytest.approx(8.0)
    assert scaled.workload.arrival.curve().rate_at(700) == pytest.approx(6.0 * 8.0 / alone.workload.arrival.rate_per_s)
    assert raw_rate_per_s({"rate_curve": STEP}) == alone.workload.arrival.rate_per_s
    # written out and read back (a link, a saved scenario): the same arrivals, bit for bit
    again = engine.load_scenario(scenario_to_dict(alone))
    assert np.array_equal(build_requests(again).arrival_s, build_requests(alone).arrival_s)


def test_the_run_starts_where_it_is_told_in_the_curve():
    late = engine.load_scenario(scenario_data({"process": "poisson", "rate_curve": STEP, "curve_start_s": 600.0},
                                              duration_s=300.0))
    assert len(build_requests(late)) == pytest.approx(6 * 300, abs=5 * math.sqrt(1800))


@pytest.mark.parametrize("arrival, message", [
    ({"process": "poisson", "rate_curve": [[1, 1]]}, "rate_curve[0] starts at t_s = 1; the first point is at 0 s"),
    ({"process": "poisson", "rate_curve": [[0, 1], [10, 2], [5, 1]]}, "rate_curve[2] is at 5 s, before"),
    ({"process": "poisson", "rate_curve": [[0, 1, 2]]}, "rate_curve[0] must be two numbers"),
    ({"process": "poisson", "rate_curve": [[0, -1], [5, 1]]}, "rate_curve[0] has rate -1 req/s"),
    ({"process": "poisson", "rate_curve": [[0, 1], [5, 0]]}, "ends at rate 0 and does not repeat"),
    ({"process": "poisson", "rate_curve": []}, "rate_curve is empty"),
    ({"process": "poisson", "rate_curve": 5}, "rate_curve must be an array ([...]), got 5"),
    ({"process": "poisson", "rate_curve": [[0, 0], [5, 0]], "curve_period_s": 10}, "mean rate of 0 req/s"),
    ({"process": "poisson", "rate_curve": [[0, 1], [50, 2]], "curve_period_s": 10}, "curve_period_s = 10 s is short"),
    ({"process": "poisson", "rate_per_s": 1, "curve_period_s": 5}, "curve_period_s needs a rate_curve or a shape"),
    ({"process": "poisson", "rate_per_s": 1, "curve_start_s": 5}, "curve_start_s needs a rate_curve or a shape"),
    ({"process": "poisson", "shape": "servegen-language-small-day"}, "rate_per_s is required: the shape's mean"),
    ({"process": "poisson", "shape": "servegen-language-small-day", "rate_per_s": 1, "rate_curve": [[0, 1]]},
     "shape and workload.arrival.rate_curve both"),
    ({"process": "poisson", "shape": "servegen-language-small-day", "rate_per_s": 1, "curve_period_s": 5},
     "curve_period_s is the shape's own"),
    ({"process": "poisson", "shape": "lunch-rush", "rate_per_s": 1}, "is not a traffic shape"),
    ({"process": "poisson"}, "rate_per_s is required: a constant rate, or give rate_curve"),
])
def test_bad_curves_get_one_line(arrival, message):
    with pytest.raises(ScenarioError) as caught:
        engine.load_scenario(scenario_data(arrival))
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_too_many_points_are_refused_before_they_are_read():
    points = [[t, 1.0] for t in range(10_001)]
    with pytest.raises(ScenarioError, match="rate_curve has 10,001 points, more than the limit of 10,000 points"):
        engine.load_scenario(scenario_data({"process": "poisson", "rate_curve": points}))


@pytest.mark.parametrize("shape", names("traffic_shapes"))
def test_every_shape_has_mean_one_a_period_and_a_source(shape):
    curve = shape_curve(shape)
    assert curve.mean_per_s() == pytest.approx(1.0, abs=1e-3)
    assert curve.period_s in (86_400.0, 604_800.0) and curve.rates_per_s.min() > 0
    assert "ServeGen" in shape_source(shape) and "Apache-2.0" in shape_source(shape)


def test_a_day_shape_draws_its_trough_and_its_peak():
    day = engine.load_scenario(scenario_data({"process": "poisson", "shape": "servegen-language-small-day",
                                              "rate_per_s": 2.0}, duration_s=86_400.0))
    arrivals = build_requests(day).arrival_s
    curve = day.workload.arrival.curve()
    hours = np.arange(25) * 3600.0
    counts = np.histogram(arrivals, bins=hours)[0]
    expected = np.diff(curve.cumulative(hours))
    assert np.all(np.abs(counts - expected) < 5 * np.sqrt(expected))
    assert expected.max() / expected.min() > 2  # the shape is not flat: evening over night


@pytest.mark.parametrize("span_s, length_s", [(0.0, 10.0), (900.0, 10.0), (3600.0, 60.0), (86_400.0, 900.0),
                                              (604_800.0, 7200.0), (3e6, 43_200.0)])
def test_window_lengths(span_s, length_s):
    assert window_length_s(span_s) == length_s


def test_windows_hold_every_request_and_the_exact_queue():
    data = scenario_data({"process": "poisson", "rate_curve": STEP}, batch=1)  # 160 ms a request: load 0.32, 0.96
    result = engine.simulate(engine.load_scenario(data))
    rows, frame = result.summary["windows"], result.requests
    assert rows[0]["start_s"] == 0.0 and all(r["end_s"] - r["start_s"] == 30.0 for r in rows)
    assert sum(r["arrived"] for r in rows) == len(frame)
    # the mean waiting count integrated over the windows is the time all requests waited (Little's law, exact)
    waited_s = (frame["first_scheduled_s"] - frame["arrival_s"]).sum()
    assert sum(r["mean_waiting"] * 30.0 for r in rows) == pytest.approx(waited_s, rel=1e-9)
    missed = int((frame["has_sla_target"] & ~frame["sla_met"] & frame["state"].isin(["completed", "timed_out"]))
                 .sum())
    assert sum(r["sla_missed"]["chat"] for r in rows) == missed > 0
    judged = int((frame["has_sla_target"] & frame["state"].isin(["completed", "timed_out"])).sum())
    assert sum(r["sla_judged"]["chat"] for r in rows) == judged > missed
    # the flash crowd offers 3x the load of the calm: per window, about 3x
    calm = np.mean([r["offered_load"] for r in rows if r["end_s"] <= 600])
    crowd = np.mean([r["offered_load"] for r in rows if 600 <= r["start_s"] < 900])
    assert crowd / calm == pytest.approx(3.0, rel=0.15)
    assert result.summary["system"]["replica_hours"] == pytest.approx(result.summary["system"]["sim_time_s"] / 3600)


def test_one_window_offers_the_runs_load():
    """A run whose arrivals fit in one window: that window's estimate is the run's, from the same requests, at its
    rate (n requests from 0 to the last arrival; the run's: n - 1 gaps from the first to the last)."""
    result = engine.simulate(engine.load_scenario(scenario_data({"process": "poisson", "rate_per_s": 2.0},
                                                                duration_s=8.0)))
    (row,) = result.summary["windows"]
    arrival_s = result.requests["arrival_s"]
    n, first_s, last_s = len(arrival_s), arrival_s.min(), arrival_s.max()
    rates = (n / last_s) / ((n - 1) / (last_s - first_s))
    assert row["offered_load"] == pytest.approx(result.summary["system"]["offered_load"] * rates, rel=1e-12)


def test_the_diagnosis_names_the_burst_not_the_average():
    data = scenario_data({"process": "poisson", "rate_curve": [[0, 10.0], [600, 10.0], [600, 30.0], [900, 30.0],
                                                                [900, 10.0]]})
    scenario = engine.load_scenario(data)
    summary = engine.simulate(scenario).summary
    assert summary["system"]["offered_load"] < 1.0 and not summary["system"]["unstable"]
    (burst,) = [f for f in diagnose(scenario, summary) if f.kind == "bursts"]
    assert "from 10:00 to 15:00 into the run" in burst.text and "per 30-second window" in burst.text
    assert "of chat's SLA misses" in burst.text
    # near saturation, not beyond: named as the load it reaches
    data["workload"]["arrival"]["rate_curve"] = [[0, 10.0], [600, 10.0], [600, 22.5], [900, 22.5], [900, 10.0]]
    near = engine.load_scenario(data)
    (burst,) = [f for f in diagnose(near, engine.simulate(near).summary) if f.kind == "bursts"]
    assert "from 10:00 to 15:00 into the run arrivals reach an offered load of 0.9" in burst.text
    flat = copy.deepcopy(data)
    flat["workload"]["arrival"] = {"process": "poisson", "rate_per_s": 10.0}
    calm = engine.load_scenario(flat)
    assert "bursts" not in [f.kind for f in diagnose(calm, engine.simulate(calm).summary)]


def test_burst_episodes_and_their_backlog():
    def row(load, waiting):
        return {"offered_load": load, "mean_waiting": waiting}
    rows = [row(0.5, 0), row(1.2, 5), row(1.1, 9), row(0.6, 8.5), row(0.6, 3), row(0.5, 0), row(1.5, 4), row(0.5, 0)]
    # median waiting 4 (the upper one): the backlog lasts while above 2 x 4 = 8
    assert burst_episodes(rows, 1.0) == [(1, 2, 3), (6, 6, 6)]
    assert burst_episodes(rows, 1.3) == [(6, 6, 6)]
    assert clock_text(3905) == "1:05:05" and clock_text(330) == "5:30"
    assert window_words(30) == "30-second" and window_words(900) == "15-minute" and window_words(3600) == "1-hour"


def test_cut_rates_end_at_the_last_arrival():
    cut = Cut.of(np.array([0.0, 5.0, 12.0, 14.0]))
    assert cut.length_s == 10.0 and cut.count == 2
    assert cut.slot.tolist() == [0, 0, 1, 1] and cut.widths_s.tolist() == [10.0, 4.0]


def test_arrival_keys_are_typed():
    assert Arrival("poisson", 2.0).curve() is None


def test_the_raw_mean_rate_of_a_shape_alone_is_its_own_mean():
    from engine.scenario.config import raw_rate_per_s

    shape = {"process": "poisson", "shape": "servegen-language-small-day"}
    assert raw_rate_per_s(shape) == pytest.approx(1.0, abs=1e-4)
    # 1 to 3 req/s over 10 s, back to 1 over the next 10: a mean of 2
    assert raw_rate_per_s({"process": "poisson", "rate_curve": [[0, 1.0], [10, 3.0]], "curve_period_s": 20}) == \
        pytest.approx(2.0)


def test_the_busiest_stretch_is_found_around_the_peak():
    """10 req/s rising to 40 at 300 s and back: 1,000 requests near the peak take ~25 s, centred on it (the rate is
    symmetric), so the stretch starts ~12.5 s before; a day shape's busiest 5,000 start near its peak hour."""
    rise = RateCurve.from_points([[0, 10.0], [300, 40.0], [600, 10.0]])
    assert rise.busiest_start_s(1000) == pytest.approx(287.5, abs=0.5)
    day = shape_curve("servegen-language-small-day").scaled(10.0)
    peak_s = float(day.times_s[np.argmax(day.rates_per_s)])
    assert abs(day.busiest_start_s(5000) - peak_s) < 3600
    flat = RateCurve.from_points([[0, 5.0]])
    assert flat.busiest_start_s(100) == 0.0  # every start as busy: the first


def test_comparisons_of_a_moving_rate_replay_its_busiest_stretch():
    from ui.runner import SWEEP_MAX_REQUESTS, busiest_start_s, compared

    data = scenario_data({"process": "poisson", "rate_curve": [[0, 10.0], [3000, 40.0], [6000, 10.0]]},
                         duration_s=6000.0)
    start = busiest_start_s(engine.load_scenario(data))
    assert start == pytest.approx(3000 - SWEEP_MAX_REQUESTS / 40 / 2, abs=5.0)
    run = compared(data)
    assert run["workload"]["arrival"]["curve_start_s"] == start
    assert run["workload"]["num_requests"] == SWEEP_MAX_REQUESTS
    short = scenario_data({"process": "poisson", "rate_curve": [[0, 10.0], [300, 40.0], [600, 10.0]]},
                          duration_s=60.0)  # 600 requests at most: the whole run is compared
    assert busiest_start_s(engine.load_scenario(short)) is None
    assert "curve_start_s" not in compared(short)["workload"]["arrival"]
