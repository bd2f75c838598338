"""Prefill/decode disaggregation ([fleet] mode = "disaggregated"): a prefill pool computes prompts and first tokens,
each request's KV crosses its prefill server's link, a decode pool generates the rest. Schedules by hand, the link
queueing first come first served, memory held until the KV has left, agreement with a colocated fleet where the two
must agree, the offered load of the busiest stage, and errors that name the key."""

import tomllib

import pytest

import engine
from conftest import REPO, trace_scenario
from engine.hardware.roofline import roofline_profile
from engine.sim.simulate import estimated_offered_load

KV_BYTES_PER_TOKEN = 131072  # Llama-3-8B in FP16 (the fixed model's default): 32 layers x 8 KV heads x 128 x 2 x 2 B
ARTICLE = REPO / "data" / "scenarios" / "article_mixed_8xa100.toml"


def link_for(seconds_per_token: float) -> float:
    """The kv_link_gb_s at which one prompt token's KV takes ``seconds_per_token``."""
    return KV_BYTES_PER_TOKEN / seconds_per_token / 1e9


def pools(prefill: dict | None = None, decode: dict | None = None, link_s_per_token: float = 1e-12, **fleet) -> dict:
    return {"mode": "disaggregated", "kv_link_gb_s": link_for(link_s_per_token), "prefill": {"replicas": 1,
            **(prefill or {})}, "decode": {"replicas": 1, **(decode or {})}, **fleet}


def test_the_kv_bytes_per_token_are_the_models():
    assert roofline_profile(engine.load_scenario({"workload": {"num_requests": 1, "arrival": {
        "process": "poisson", "rate_per_s": 1.0}, "classes": [{"name": "a", "share": 1.0, "prompt_tokens": {
            "dist": "constant", "value": 1}, "output_tokens": {"dist": "constant", "value": 1}}]}}).server
    ).kv_bytes_per_token == KV_BYTES_PER_TOKEN


def test_a_request_is_prefilled_transferred_and_decoded_by_hand(tmp_path):
    """Step 10 ms on both pools, the link 1.25 ms per prompt token. r0 (4 + 3 tokens) at 0: prefill 0-10 ms, first
    token at 10 ms; its 4 tokens' KV on the link 10-15 ms; decodes on the decode replica 15-25 and 25-35 ms. r1
    (8 + 2) at 2 ms waits for the prefill replica: 10-20 ms, first token at 20 ms; its 8 tokens on the link 20-30 ms;
    the decode replica is mid-iteration then, so r1 decodes 35-45 ms. r2 (5 + 1 tokens) at 1 s is done at its first
    token, on the prefill replica: nothing to transfer."""
    rows = [(0.0, 4, 3), (0.002, 8, 2), (1.0, 5, 1)]
    result = engine.simulate(trace_scenario(tmp_path, rows, {}, fleet=pools(link_s_per_token=0.00125)))
    frame = result.requests
    assert list(frame["prefill_replica"]) == [0, 0, -1]
    assert list(frame["replica"]) == [1, 1, 0]
    assert list(frame["first_token_s"]) == pytest.approx([0.01, 0.02, 1.01])
    assert list(frame["handed_off_s"][:2]) == pytest.approx([0.015, 0.03])
    assert list(frame["finish_s"]) == pytest.approx([0.035, 0.045, 1.01])
    assert list(frame["kv_transfer_ms"][:2]) == pytest.approx([5.0, 10.0])
    replicas = result.summary["system"]["replicas"]
    assert [(r["role"], r["routed"], r["completed"]) for r in replicas] == [("prefill", 3, 1), ("decode", 2, 2)]


def test_the_link_is_first_come_first_served(tmp_path):
    """Two 8-token prompts finish together at 10 ms (one prefill iteration of both): the first one's KV takes the
    link 10-20 ms, the second waits for it, 20-30 ms."""
    rows = [(0.0, 8, 2), (0.0, 8, 2)]
    frame = engine.simulate(trace_scenario(tmp_path, rows, {}, fleet=pools(link_s_per_token=0.00125))).requests
    assert list(frame["handed_off_s"]) == pytest.approx([0.02, 0.03])


def test_a_prefill_server_holds_the_kv_until_it_has_left(tmp_path):
    """The prefill replica holds 16 KV tokens: r0's 12-token prompt fills it until its KV has crossed the 40 ms
    link (10-50 ms), so r1 (arriving at 1 ms) is prefilled only then: first token at 60 ms, where it would come at
    20 ms with a fast link."""
    rows = [(0.0, 12, 2), (0.001, 12, 2)]
    slow = engine.simulate(trace_scenario(tmp_path, rows, {"block_size_tokens": 4}, fleet=pools(
        {"kv_capacity_tokens": 16}, link_s_per_token=0.04 / 12))).requests
    assert list(slow["first_token_s"]) == pytest.approx([0.01, 0.06])
    fast = engine.simulate(trace_scenario(tmp_path, rows, {"block_size_tokens": 4}, fleet=pools(
        {"kv_capacity_tokens": 16}))).requests
    assert list(fast["first_token_s"]) == pytest.approx([0.01, 0.02])


def test_requests_alone_take_as_long_as_on_one_colocated_server_with_a_fast_link(tmp_path):
    """Requests far apart, each alone: on one colocated server a request's prefill and decodes run back to back; on
    a prefill and a decode server of the same GPU with a near-infinite link they run the same iterations, the same
    step times (roofline: each iteration's time depends only on its own batch), so every timestamp agrees."""
    rows = [(float(10 * i), 50 + 300 * i, 20 + 7 * i) for i in range(5)]
    roofline = {"step_model": "roofline", "gpu": "H100-80G", "model": "Llama-3-8B"}
    colocated = engine.simulate(trace_scenario(tmp_path, rows, roofline)).requests
    split = engine.simulate(trace_scenario(tmp_path, rows, roofline, fleet=pools())).requests
    for column in ("first_token_s", "finish_s"):
        assert list(split[column]) == pytest.approx(list(colocated[column]), rel=1e-9, abs=1e-9)


def test_the_pools_have_their_own_batch_limits(tmp_path):
    """Four requests at once; the decode pool runs one sequence at a time, the prefill pool all four: every first
    token at 10 ms, then the decode replica serves them one after another (two decodes each: 20 ms)."""
    rows = [(0.0, 4, 3)] * 4
    frame = engine.simulate(trace_scenario(tmp_path, rows, {"max_batch_size": 4}, fleet=pools(
        decode={"max_batch_size": 1}))).requests
    assert list(frame["first_token_s"]) == pytest.approx([0.01] * 4)
    assert sorted(frame["finish_s"]) == pytest.approx([0.03, 0.05, 0.07, 0.09])


def test_the_offered_load_is_the_busiest_stages():
    """A pool alone carries its phase's work: rho is the larger of the prefill pool's, the decode pool's and the
    links'. Halving the decode pool's replicas doubles its load; a link slow enough makes it the bottleneck."""
    data = tomllib.loads(ARTICLE.read_text())
    tp4 = {"gpu": "A100-80G", "quant": "int4", "tensor_parallel": 4}

    def load(prefill: int, decode: int, link_gb_s: float = 50.0) -> float:
        data["fleet"] = {"mode": "disaggregated", "kv_link_gb_s": link_gb_s, "prefill": {**tp4, "replicas": prefill},
                         "decode": {**tp4, "replicas": decode}}
        return estimated_offered_load(engine.load_scenario(data))

    decode_bound = load(4, 2)
    assert load(4, 1) == pytest.approx(2 * decode_bound, rel=1e-12)
    # Llama-3-70B in FP16 KV: 320 KiB a token; 50 req/s x 100 tokens x 327,680 B over 1 prefill link of 0.1 GB/s
    assert load(1, 8, 0.1) == pytest.approx(50 * 100 * 327680 / 0.1e9, rel=0.05)


@pytest.mark.parametrize("fleet, message", [
    ({"mode": "disaggregated", "prefill": {"replicas": 1}},
     r"fleet\.mode = 'disaggregated' needs both pools"),
    ({"decode": {"replicas": 1}}, r"fleet\.decode is a pool of a disaggregated fleet: set fleet\.mode"),
    ({"mode": "disaggregated", "prefill": {"replicas": 1}, "decode": {"replicas": 1}, "groups": [{"replicas": 1}]},
     r"fleet\.groups cannot be combined with mode = 'disaggregated'"),
    ({"mode": "disaggregated", "prefill": {"replicas": 1, "max_batch_size": 512, "max_batched_tokens": 256},
      "decode": {"replicas": 1}}, r"fleet\.prefill\.max_batched_tokens = 256 is below max_batch_size = 512"),
])
def test_pool_errors_name_the_key(fleet, message):
    data = {"workload": {"num_requests": 5, "arrival": {"process": "poisson", "rate_per_s": 1.0},
                         "classes": [{"name": "a", "share": 1.0, "prompt_tokens": {"dist": "constant", "value": 5},
                                      "output_tokens": {"dist": "constant", "value": 5}}]},
            "fleet": fleet}
    with pytest.raises(engine.ScenarioError, match=message):
        engine.load_scenario(data)


def test_a_prefill_pool_only_needs_room_for_prompts(tmp_path):
    """The prefill replica holds 16 KV tokens: a 12-token prompt with 30 output tokens fits there (the decode pool
    holds the rest); a 20-token prompt does not, and the error names the pool."""
    fleet = pools({"kv_capacity_tokens": 16})
    assert engine.simulate(trace_scenario(tmp_path, [(0.0, 12, 30)], {}, fleet=fleet)).summary["overall"][
        "completed"] == 1
    with pytest.raises(engine.ScenarioError, match=r"needs 32 KV tokens \(prompt 20\) but the KV cache of "
                                                   r"fleet\.prefill holds 16"):
        engine.simulate(trace_scenario(tmp_path, [(0.0, 20, 2)], {"block_size_tokens": 16}, fleet=fleet))


def test_the_command_lines_table_names_each_pool_and_the_transfers(tmp_path):
    from engine.cli import format_table
    rows = [(0.0, 4, 3), (0.002, 8, 2), (1.0, 5, 1)]
    text = format_table(engine.simulate(trace_scenario(tmp_path, rows, {}, fleet=pools(link_s_per_token=0.00125))))
    assert "fleet: 1 x fixed 10 ms iterations for prefill (speed 1.00, 3 routed, busy " in text
    assert "; 1 x fixed 10 ms iterations for decode (speed 1.00, 2 routed, busy " in text
    # 5 and 10 ms: p99 interpolated between them
    assert "KV transfers to the decode pool (link queue included): mean 7.5 ms, p99 9.9 ms over 2 requests" in text


def test_kv_held_for_the_link_counts_while_the_prefill_server_is_idle(tmp_path):
    """A 16-token prompt (one block) and 2 output tokens; the link takes 1 s. The prefill replica holds the block
    from 0 to 10 ms (its prefill) and, idle, for the 1 s transfer; the decode replica holds 2 blocks during its one
    10 ms decode. Both caches hold 4 blocks, the run lasts 1.02 s: mean KV use (1.01 + 0.02) / (1.02 x 8)."""
    result = engine.simulate(trace_scenario(tmp_path, [(0.0, 16, 2)], {"kv_capacity_tokens": 64},
                                            fleet=pools(link_s_per_token=1.0 / 16)))
    system = result.summary["system"]
    assert system["sim_time_s"] == pytest.approx(1.02)
    assert system["kv_mean_frac"] == pytest.approx((1.01 + 0.02) / (1.02 * 8), rel=1e-9)


def test_a_request_waiting_for_memory_on_the_link_times_out_on_time(tmp_path):
    """r0 fills the prefill replica's 16 KV tokens for the 1 s its KV is on the link; r1 waits behind it and gives
    up at 100 ms. At most one request may wait: r2, arriving at 0.5 s, finds r1 gone and the run goes on (a wait
    blind to time-outs would still hold r1 and stop at the queue bound)."""
    rows = [(0.0, 12, 2), (0.001, 12, 2), (0.5, 12, 2)]
    scenario = trace_scenario(tmp_path, rows, {"block_size_tokens": 4},
                              classes=[{"name": "only", "share": 1.0, "timeout_ms": 99.0}],
                              fleet=pools({"kv_capacity_tokens": 16}, link_s_per_token=1.0 / 12))
    data = engine.scenario.config.scenario_to_dict(scenario)
    data["limits"] = {"max_waiting_requests": 1}
    result = engine.simulate(engine.load_scenario(data))
    assert result.summary["system"]["stop_reason"] == "drained"
    assert list(result.requests["state"]) == ["completed", "timed_out", "timed_out"]
    assert result.requests["finish_s"][1] == pytest.approx(0.1)


def test_reserve_full_admission_on_a_prefill_server_reserves_the_prompt_only(tmp_path):
    """The prefill replica's 16 KV tokens hold a 12-token prompt but not its 30 output tokens, which it never
    stores: under reserve-full admission the request is still admitted there, and completes on the decode pool."""
    result = engine.simulate(trace_scenario(tmp_path, [(0.0, 12, 30)], {"admission": "reserve-full"},
                                            fleet=pools({"kv_capacity_tokens": 16})))
    assert result.summary["overall"]["completed"] == 1
