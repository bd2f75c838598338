"""Autoscaling fleets (``fleet.autoscale``) and spot interruptions: hand-computed schedules of a scale-up, a drain and
an interruption, conservation, the fixed fleet it must equal when its bounds leave it nothing to do, and M/M/c."""

from __future__ import annotations

import copy
import math

import numpy as np
import pandas as pd
import pytest

import engine
from conftest import SCENARIOS, trace_scenario
from engine.scenario.config import apply_overrides, read_toml
from engine.sim import autoscale
from engine.sim.autoscale import PROVISION_FIXED_S, describe, provision_s

ONE_SECOND = {"max_batch_size": 1}  # 10 ms iterations, one request at a time: 100 output tokens take 1 s
SCALER = {"min_replicas": 1, "max_replicas": 2, "signal": "queue", "target": 1.0, "interval_s": 10.5,
          "provision_s": 25.0, "cooldown_s": 0.0, "scale_down_delay_s": 20.0}


def burst_then_calm(tmp_path, scaler: dict, classes: list[dict] | None = None) -> engine.Result:
    """30 requests of 1 s at t = 0, 4 more at 40.2 s, one at 100 s, on one replica that may grow to two."""
    rows = [(0.0, 10, 100)] * 30 + [(40.2, 10, 100)] * 4 + [(100.0, 10, 100)]
    scenario = trace_scenario(tmp_path, rows, ONE_SECOND, classes=classes, fleet={
        "replicas": 1, "router": "shortest-queue", "autoscale": {**SCALER, **scaler}})
    return engine.simulate(scenario)


def test_a_burst_scales_up_after_provisioning_and_the_drained_replica_bills_until_it_is_empty(tmp_path):
    """By hand: at 10.5 s replica 0 has served 10 requests and runs the 11th, so 19 wait: the queue signal asks for
    ceil(1 x 19 / 1) = 19 replicas, capped at 2. The new replica serves 25 s later (35.5 s) and so takes none of
    the burst, all routed at t = 0. At 40.2 s the two replicas take two of the four requests each. At 42 s nothing
    waits and the readings of the last 20 s (31.5 s and 42 s) ask for one: the second drains, and bills until its
    last request ends (42.2 s). The request at 100 s goes to replica 0."""
    result = burst_then_calm(tmp_path, {})
    frame, scale = result.requests, result.summary["system"]["autoscale"]
    events = [(e["time_s"], e["event"], e["replica"]) for e in scale["events"]]
    last_on_1 = frame.loc[frame["replica"] == 1, "finish_s"].max()
    assert last_on_1 == pytest.approx(42.2)
    assert events == [(10.5, "provisioning", 1), (35.5, "up", 1), (42.0, "draining", 1), (last_on_1, "down", 1)]
    assert (frame["replica"][:30] == 0).all()
    np.testing.assert_allclose(frame["queue_ms"][:30], np.arange(30) * 1000.0, atol=1e-6)
    assert frame["replica"][30:34].value_counts().to_dict() == {0: 2, 1: 2}
    assert frame["replica"].iloc[34] == 0
    end_s = result.summary["system"]["sim_time_s"]
    assert end_s == pytest.approx(101.0)
    assert result.summary["system"]["replica_hours"] == pytest.approx((end_s + last_on_1 - 10.5) / 3600)
    assert (scale["scale_ups"], scale["scale_downs"], scale["peak_replicas"]) == (1, 1, 2)
    assert (frame["state"] == "completed").all()


def test_a_scale_up_delay_can_make_the_new_replica_too_late_to_serve_anything(tmp_path):
    """By hand, with a scale-up delay of one interval: the readings at 10.5 s and 21 s both ask for more, so the
    replica is asked for at 21 s and serves from 46 s, after the four requests of 40.2 s went to replica 0 (which
    so ends them at 44.2 s, not 42.2 s). The readings at 42 s (two wait) still want two; at 63 s the last 20 s want
    one: it drains, holding nothing, and goes at once: 42 s billed for no request served."""
    result = burst_then_calm(tmp_path, {"scale_up_delay_s": 10.5})
    frame, scale = result.requests, result.summary["system"]["autoscale"]
    events = [(e["time_s"], e["event"], e["replica"]) for e in scale["events"]]
    assert events == [(21.0, "provisioning", 1), (46.0, "up", 1), (63.0, "draining", 1), (63.0, "down", 1)]
    assert (frame["replica"] == 0).all()
    assert frame["finish_s"].iloc[33] == pytest.approx(44.2)
    assert result.summary["system"]["replica_hours"] == pytest.approx((101.0 + 63.0 - 21.0) / 3600)


def test_the_slack_signal_reads_the_longest_wait_against_its_ttft_target(tmp_path):
    """By hand, signal slack, target 0.5. TTFT target 20 s: at 10.5 s the requests still waiting arrived at 0, so
    the longest wait used 10.5 / 20 = 0.525 of it: ceil(1 x 0.525 / 0.5) = 2 replicas, asked at once (as the queue
    signal). Target 30 s: 0.35 at 10.5 s asks for one; 0.7 at 21 s asks for two (up at 46 s, too late for the four
    requests of 40.2 s); at 42 s two of those have waited 1.8 s (0.06): one wanted; at 52.5 s the readings of the
    last 20 s (42 s, 52.5 s) want one, and the idle replica goes."""
    def events(sla_ttft_ms: float) -> list[tuple]:
        classes = [{"name": "only", "share": 1.0, "sla_ttft_ms": sla_ttft_ms}]
        scale = burst_then_calm(tmp_path, {"signal": "slack", "target": 0.5}, classes).summary["system"]["autoscale"]
        return [(e["time_s"], e["event"], e["replica"]) for e in scale["events"]]

    assert events(20_000.0)[:2] == [(10.5, "provisioning", 1), (35.5, "up", 1)]
    assert events(30_000.0) == [(21.0, "provisioning", 1), (46.0, "up", 1), (52.5, "draining", 1),
                                (52.5, "down", 1)]
    with pytest.raises(engine.ScenarioError, match="signal = 'slack' reads how much of its TTFT target"):
        burst_then_calm(tmp_path, {"signal": "slack", "target": 0.5})


def test_windows_count_the_replicas_billed(tmp_path):
    result = burst_then_calm(tmp_path, {})
    rows = result.summary["windows"]
    billed_s = sum(w["replicas"] * (w["end_s"] - w["start_s"]) for w in rows)
    assert billed_s == pytest.approx(result.summary["system"]["replica_hours"] * 3600)
    assert rows[0]["replicas"] == pytest.approx(1.0)


def test_without_an_autoscaler_nothing_is_counted_for_it(tmp_path):
    result = burst_then_calm(tmp_path, {"max_replicas": 1})
    assert result.summary["system"]["autoscale"]["events"] == []
    assert result.summary["system"]["replica_hours"] == pytest.approx(result.summary["system"]["sim_time_s"] / 3600)


def example(**overrides) -> dict:
    return apply_overrides(read_toml(SCENARIOS / "example.toml"), overrides)


def test_bounds_that_leave_nothing_to_do_give_the_fixed_fleet_bit_for_bit():
    """An autoscaler held at three replicas stops the loop every interval and reads its signal, and changes nothing:
    every request's record is the plain fleet's, to the bit (the loop's event skipping stops at each reading)."""
    plain = example(**{"fleet.replicas": 3, "workload.arrival.rate_per_s": 7.0, "workload.num_requests": 8000})
    held = copy.deepcopy(plain)
    held["fleet"]["autoscale"] = {"min_replicas": 3, "max_replicas": 3, "interval_s": 7.0}
    a = engine.simulate(engine.load_scenario(plain))
    b = engine.simulate(engine.load_scenario(held))
    pd.testing.assert_frame_equal(a.requests, b.requests)
    assert b.summary["system"]["replica_hours"] == a.summary["system"]["replica_hours"]
    assert b.summary["system"]["offered_load"] == pytest.approx(a.summary["system"]["offered_load"])
    assert b.summary["system"]["gpu_busy_frac"] == pytest.approx(a.summary["system"]["gpu_busy_frac"])


def erlang_c_wait_s(servers: int, rate_per_s: float, service_s: float) -> float:
    """Mean wait in M/M/c (one queue for all servers)."""
    a = rate_per_s * service_s
    rho = a / servers
    tail = a ** servers / math.factorial(servers) / (1 - rho)
    p_wait = tail / (sum(a ** k / math.factorial(k) for k in range(servers)) + tail)  # Erlang C
    return p_wait / (servers / service_s - rate_per_s)


def test_a_fleet_held_at_three_waits_between_m_m_3_and_three_m_m_1():
    """Three replicas serving one request at a time, exponential-like service (geometric outputs of mean 50 at
    10 ms), Poisson arrivals at load 0.7, an autoscaler held at three, the router sending each arrival to the
    shortest queue: the mean wait lies between M/M/3's (one shared queue, the least any routing can do) and three
    separate M/M/1 queues' (random routing, the most), which are 2.5x apart here."""
    service_s, servers, load = 0.5, 3, 0.7
    rate_per_s = load * servers / service_s
    data = {"seed": 3, "workload": {"num_requests": 40_000, "arrival": {"process": "poisson", "rate_per_s": rate_per_s},
                                    "classes": [{"name": "only", "share": 1.0,
                                                 "prompt_tokens": {"dist": "constant", "value": 1},
                                                 "output_tokens": {"dist": "geometric", "mean": 50}}]},
            "server": {"step_model": "fixed", "step_time_ms": 10.0, "max_batch_size": 1},
            "fleet": {"replicas": 3, "router": "shortest-queue",
                      "autoscale": {"min_replicas": 3, "max_replicas": 3}}}
    frame = engine.simulate(engine.load_scenario(data)).requests
    served_s = ((frame["e2e_ms"] - frame["queue_ms"]) / 1e3).mean()
    assert served_s == pytest.approx(service_s, rel=0.03)
    wait_s = frame["queue_ms"].mean() / 1e3
    lower_s = erlang_c_wait_s(servers, rate_per_s, service_s)
    upper_s = load / (1 / service_s - rate_per_s / servers)
    assert upper_s / lower_s > 2.5
    assert lower_s < wait_s < upper_s, (lower_s, wait_s, upper_s)


SPOT = {"fleet.replicas": 1, "fleet.router": "least-tokens", "workload.arrival.rate_per_s": 6.0,
        "workload.num_requests": 30_000, "fleet.spot_interruptions_per_hour": 6.0, "fleet.spot_notice_s": 2.0,
        "fleet.autoscale": {"min_replicas": 1, "max_replicas": 4, "signal": "queue", "target": 0.5,
                            "provision_s": 60.0}}


@pytest.fixture(scope="module")
def spot_run() -> engine.Result:
    return engine.simulate(engine.load_scenario(example(**SPOT)))


def test_spot_interruptions_requeue_every_request_and_lose_none(spot_run):
    summary, frame = spot_run.summary, spot_run.requests
    scale = summary["system"]["autoscale"]
    assert scale["interruptions"] >= 3 and scale["requeued"] > 0
    overall = summary["overall"]
    assert overall["arrived"] == len(frame) == overall["completed"] + overall["timed_out"]
    assert overall["unfinished"] == 0
    events = scale["events"]
    for e in (e for e in events if e["event"] == "interrupted"):
        notice = max((n for n in events if n["event"] == "notice" and n["replica"] == e["replica"]
                      and n["time_s"] <= e["time_s"]), key=lambda n: n["time_s"])
        assert e["time_s"] == pytest.approx(notice["time_s"] + 2.0)
        assert e["replica"] >= 1  # the baseline (replica 0) is on demand: never interrupted
    assert frame["preemptions"].sum() == summary["system"]["preemptions"] > 0  # running ones re-queued count


def test_a_fleet_that_flaps_is_held_once_its_events_reach_the_limit(monkeypatch):
    """No cooldown nor delays and a decision every second: events are bounded (``MAX_EVENTS``), then the fleet is
    held as it is, and the report says from when."""
    monkeypatch.setattr(autoscale, "MAX_EVENTS", 40)
    data = example(**{**SPOT, "fleet.spot_interruptions_per_hour": 0.0, "workload.num_requests": 5000,
                      "fleet.autoscale": {"min_replicas": 1, "max_replicas": 4, "signal": "queue", "target": 0.5,
                                          "provision_s": 1.0, "interval_s": 1.0, "cooldown_s": 0.0,
                                          "scale_down_delay_s": 0.0}})
    scale = engine.simulate(engine.load_scenario(data)).summary["system"]["autoscale"]
    assert scale["held_from_s"] is not None
    assert 40 <= len(scale["events"]) <= 40 + 3 * 4
    assert all(e["time_s"] <= scale["held_from_s"] or e["event"] in ("up", "down") for e in scale["events"])


def test_the_same_seed_gives_the_same_interruptions(spot_run):
    again = engine.simulate(engine.load_scenario(example(**SPOT)))
    assert again.summary["system"]["autoscale"] == spot_run.summary["system"]["autoscale"]
    pd.testing.assert_frame_equal(again.requests, spot_run.requests)
    other = engine.simulate(engine.load_scenario(example(**SPOT, seed=8)))
    assert other.summary["system"]["autoscale"]["events"] != spot_run.summary["system"]["autoscale"]["events"]


def test_provisioning_defaults_to_the_fixed_part_plus_the_weights_read():
    fixed = engine.load_scenario(example(**{"fleet.autoscale": {"max_replicas": 2}}))
    assert provision_s(fixed.fleet.autoscale, fixed.server) == PROVISION_FIXED_S
    gpu = engine.load_scenario(example(**{"fleet.autoscale": {"max_replicas": 2}, "server.step_model": "roofline",
                                          "server.gpu": "H100-80G", "server.model": "Llama-3.1-8B"}))
    # 8.03e9 parameters in 16 bits: 16.06 GB at 2 GB/s, about 8 s
    assert provision_s(gpu.fleet.autoscale, gpu.server) == pytest.approx(PROVISION_FIXED_S + 8.0, abs=0.5)


@pytest.mark.parametrize("overrides, message", [
    ({"fleet.autoscale": {"max_replicas": 2, "min_replicas": 3}},
     "fleet.autoscale.min_replicas = 3 is above max_replicas = 2; lower it or raise max_replicas"),
    ({"fleet.replicas": 4, "fleet.autoscale": {"max_replicas": 2}},
     "fleet.replicas = 4 (up at the start) must be within fleet.autoscale.min_replicas = 1 and max_replicas = 2"),
    ({"fleet.spot_interruptions_per_hour": 1.0}, "fleet.spot_interruptions_per_hour needs [fleet.autoscale]"),
    ({"fleet.autoscale": {"max_replicas": 2, "target": 1.5}}, "fleet.autoscale.target = 1.5 is a share for signal"),
    ({"fleet.autoscale": {"max_replicas": 2, "signal": "latency"}}, "fleet.autoscale.signal"),
    ({"fleet.autoscale": {"min_replicas": 1}}, "fleet.autoscale.max_replicas"),
    ({"fleet.autoscale": {"max_replicas": 2, "signal": "kv"}},
     "fleet.autoscale.signal = 'kv' reads the share of the KV cache in use, and this server's cache is unlimited"),
])
def test_bad_autoscalers_are_refused_in_one_line(overrides, message):
    with pytest.raises(engine.ScenarioError) as caught:
        engine.simulate(engine.load_scenario(example(**overrides)))
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_the_command_line_says_what_the_autoscaler_did(tmp_path):
    from engine.cli import format_table

    text = format_table(burst_then_calm(tmp_path, {}))
    assert "autoscaler: 1 to 2 replicas, peak 2, 1 scale-ups, 1 scale-downs; 0.04 replica-hours billed over 0.03 h " \
           "(mean 1.31 replicas); a new replica serves 25 s after it is asked for\n" in text


def pools_burst(tmp_path, prefill_scale: dict | None) -> engine.Result:
    """``burst_then_calm``'s requests on a disaggregated fleet: a prefill pool of one server taking 1 s a prompt
    (one at a time), which may grow to two, and a decode pool of one server (10 ms iterations) after it."""
    rows = [(0.0, 10, 2)] * 30 + [(40.2, 10, 2)] * 4 + [(100.0, 10, 2)]
    prefill = {"replicas": 1, "step_time_ms": 1000.0, "max_batch_size": 1,
               **({"autoscale": {**SCALER, **prefill_scale}} if prefill_scale is not None else {})}
    return engine.simulate(trace_scenario(tmp_path, rows, {}, fleet={
        "mode": "disaggregated", "router": "shortest-queue", "prefill": prefill, "decode": {"replicas": 1}}))


def test_a_pools_autoscaler_scales_its_pool_alone(tmp_path):
    """The prefill pool's autoscaler reads its own server only: the same schedule by hand as a colocated fleet's
    (asked at 10.5 s, serving at 35.5 s, drained at 42 s once the two prompts of 40.2 s it took are done); the
    decode server, after the prefill pool's two slots, is replica 2 and takes every request."""
    result = pools_burst(tmp_path, {})
    frame, system = result.requests, result.summary["system"]
    assert "autoscale" not in system
    scale = system["pool_autoscale"]["prefill"]
    last_on_1 = frame.loc[frame["prefill_replica"] == 1, "handed_off_s"].max()
    events = [(e["time_s"], e["event"], e["replica"]) for e in scale["events"]]
    # it goes once its last prompt's KV has left over its link (a few microseconds after the prompt ends)
    assert events == [(10.5, "provisioning", 1), (35.5, "up", 1), (42.0, "draining", 1), (last_on_1, "down", 1)]
    assert last_on_1 == pytest.approx(42.2, abs=1e-3) and last_on_1 > 42.2
    assert frame["prefill_replica"][30:34].value_counts().to_dict() == {0: 2, 1: 2}
    assert (frame["replica"] == 2).all() and (frame["state"] == "completed").all()
    end_s = system["sim_time_s"]
    assert system["replica_hours"] == pytest.approx((end_s + (last_on_1 - 10.5) + end_s) / 3600)


def test_a_pools_autoscaler_with_nothing_to_do_is_the_fixed_pool_bit_for_bit(tmp_path):
    fixed = pools_burst(tmp_path, None)
    held = pools_burst(tmp_path, {"min_replicas": 1, "max_replicas": 1})
    pd.testing.assert_frame_equal(held.requests, fixed.requests)
    assert held.summary["system"]["replica_hours"] == pytest.approx(fixed.summary["system"]["replica_hours"])


def test_a_pools_load_is_over_the_servers_it_had(tmp_path):
    """A prefill pool of two slots whose autoscaler never asks for the second (its queue target is out of reach)
    offers the load of one prefill server, in the run and in each window, not half of it."""
    fixed, idle = pools_burst(tmp_path, None), pools_burst(tmp_path, {"target": 1000.0})
    assert idle.summary["system"]["pool_autoscale"]["prefill"]["scale_ups"] == 0
    assert idle.summary["system"]["offered_load"] == pytest.approx(fixed.summary["system"]["offered_load"])
    assert [w["offered_load"] for w in idle.summary["windows"]] == pytest.approx(
        [w["offered_load"] for w in fixed.summary["windows"]])


def test_slack_is_refused_where_it_reads_nothing():
    pools = {"fleet.mode": "disaggregated", "fleet.prefill": {"replicas": 1},
             "fleet.decode": {"replicas": 1, "autoscale": {"max_replicas": 2, "signal": "slack", "target": 0.5}}}
    with pytest.raises(engine.ScenarioError, match=r"fleet.decode.autoscale.signal = 'slack' reads how long"):
        engine.load_scenario(example(**pools))


def test_an_autoscaler_on_a_mixed_fleets_group_is_refused():
    data = example(**{"fleet.groups": [{"replicas": 1, "autoscale": {"max_replicas": 2}}, {"replicas": 1}]})
    with pytest.raises(engine.ScenarioError, match=r"fleet.groups\[0\].autoscale: an autoscaler scales a colocated"):
        engine.load_scenario(data)
    pool = example(**{"fleet.mode": "disaggregated", "fleet.prefill": {"replicas": 3, "autoscale": {"max_replicas": 2}},
                      "fleet.decode": {"replicas": 1}})
    with pytest.raises(engine.ScenarioError, match=r"fleet.prefill.replicas = 3 \(up at the start\) must be within"):
        engine.load_scenario(pool)


def test_a_pools_autoscaler_is_described_by_its_pool(tmp_path):
    line = describe(pools_burst(tmp_path, {}).summary["system"])
    assert line.startswith("prefill pool's autoscaler: 1 to 2 replicas, peak 2, 1 scale-ups, 1 scale-downs;")
