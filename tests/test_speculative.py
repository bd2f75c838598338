"""Speculative decoding: the expected tokens per iteration, hand-computed schedules on the fixed step model, the
step time of a verification on the roofline, the draft model's cost and memory, and where it stops paying."""

import math

import pytest

import engine
from conftest import synthetic, trace_scenario
from engine.hardware.roofline import kv_capacity_tokens, roofline_profile, roofline_step_params
from engine.hardware.steptime import step_time_s_nb
from engine.scenario.config import Server, Speculative, expected_tokens_per_decode
from engine.scenario.errors import ScenarioError

EXACT = 1e-12
ONE_CHAT = [{"name": "a", "share": 1.0, "prompt_tokens": {"dist": "constant", "value": 10},
             "output_tokens": {"dist": "constant", "value": 10}}]


def spec(draft_tokens, acceptance, draft_cost=0.0):
    return {"speculative": {"draft_tokens": draft_tokens, "acceptance": acceptance, "draft_cost": draft_cost}}


@pytest.mark.parametrize("k, a, expected", [(4, 0.0, 1.0), (4, 1.0, 5.0), (3, 0.5, 1.875), (1, 0.8, 1.8),
                                            (2, 0.6, 1.96)])
def test_expected_tokens_per_iteration_is_the_geometric_sum(k, a, expected):
    """(1 - a^(k+1)) / (1 - a) = 1 + a + ... + a^k."""
    assert expected_tokens_per_decode(k, a) == pytest.approx(expected, abs=1e-12)
    assert expected_tokens_per_decode(k, a) == pytest.approx(sum(a ** i for i in range(k + 1)), abs=1e-12)


def test_all_accepted_drafts_emit_k_plus_one_tokens_per_iteration(tmp_path):
    """Prompt 10, output 11, 10 ms steps, k = 2, a = 1, draft cost 0.5: prefill 0-0.01 (first token), then
    decode iterations of 10 ms x (1 + 2 x 0.5) = 20 ms emitting 3, 3, 3 and the last 1 token: done at 0.09."""
    result = engine.simulate(trace_scenario(tmp_path, [(0.0, 10, 11)], spec(2, 1.0, 0.5)))
    row = result.requests.loc[0]
    assert row["first_token_s"] == pytest.approx(0.01, abs=EXACT)
    assert row["finish_s"] == pytest.approx(0.09, abs=EXACT)
    assert list(result.timeseries["decode_tokens"]) == [0, 3, 3, 3, 1]  # tokens verified: k + 1, then the one left
    assert result.timeseries["step_s"].tolist() == pytest.approx([0.01, 0.02, 0.02, 0.02, 0.02], abs=EXACT)


def test_iterations_emit_the_expectation_without_its_variance(tmp_path):
    """k = 3, a = 0.5: E = 1.875 = 15 / 8, so the j-th decode iteration emits floor((j + 1) E) - floor(j E): 1
    then seven 2s, 15 tokens every 8 iterations; 10,000 tokens after the first take the n decode iterations with
    floor(n E) >= 10,000 (the last one capped at the tokens left), each 10 ms x (1 + 3 x 0.1)."""
    output = 10_001
    server = {**spec(3, 0.5, 0.1), "max_batch_size": 1, "max_batched_tokens": 64}
    result = engine.simulate(trace_scenario(tmp_path, [(0.0, 8, output)], server))
    per = expected_tokens_per_decode(3, 0.5)
    n = next(n for n in range(1, output) if math.floor(n * per) >= output - 1)
    row = result.requests.loc[0]
    assert row["generated_tokens"] == output
    assert row["finish_s"] - row["first_token_s"] == pytest.approx(n * 0.013, rel=1e-9)
    assert (output - 1) / n == pytest.approx(per, rel=1e-3)
    for after_first, decodes in ((15, 8), (16, 9), (1, 1)):
        short = engine.simulate(trace_scenario(tmp_path, [(0.0, 8, 1 + after_first)], {**spec(3, 0.5, 0.1),
                                                                                       "max_batch_size": 1}))
        assert short.summary["system"]["iterations"] == 1 + decodes


def test_no_acceptance_and_a_free_draft_is_plain_decoding_on_the_fixed_model(tmp_path):
    """a = 0: one token per iteration, as without speculation; with a free draft and a fixed step, the same times."""
    rows = [(0.0, 20, 7), (0.004, 5, 30), (0.011, 40, 3), (0.02, 3, 12)]
    plain = engine.simulate(trace_scenario(tmp_path, rows, {"max_batch_size": 4}))
    specd = engine.simulate(trace_scenario(tmp_path, rows, {"max_batch_size": 4, **spec(3, 0.0, 0.0)}))
    for column in ("first_token_s", "finish_s", "generated_tokens"):
        assert specd.requests[column].tolist() == plain.requests[column].tolist()


def test_a_verification_costs_k_plus_one_tokens_and_k_draft_steps_on_the_roofline(tmp_path):
    """One request alone: every decode iteration lasts the served model's step over k + 1 tokens on its cached
    context, plus k draft steps of draft_cost x a plain decode step on the same context."""
    k, cost = 4, 0.2
    scenario = trace_scenario(tmp_path, [(0.0, 100, 40)], {"step_model": "roofline", "kernel_tables": "off",
                                                           **spec(k, 1.0, cost)})
    result = engine.simulate(scenario)
    step = roofline_step_params(roofline_profile(scenario.server))
    series = result.timeseries
    kv = 100  # the prompt is cached; each iteration adds the k + 1 tokens it emitted
    for _, row in series.iloc[1:-1].iterrows():
        verify = step_time_s_nb(step, k + 1, (k + 1) * kv + (k + 1) * (k + 2) / 2.0, kv)
        draft = step_time_s_nb(step, 1, kv + 1, kv)
        assert row["step_s"] == pytest.approx(verify + k * cost * draft, rel=1e-12)
        kv += k + 1


def test_the_budget_must_hold_a_full_batch_of_verifications():
    with pytest.raises(ScenarioError, match=r"server.max_batched_tokens = 1000 is below max_batch_size x "
                                            r"\(speculative.draft_tokens \+ 1\) = 1280"):
        engine.load_scenario({"workload": {"num_requests": 1, "arrival": {"process": "poisson", "rate_per_s": 1.0},
                                           "classes": ONE_CHAT},
                              "server": {"max_batched_tokens": 1000, **spec(4, 0.7)}})


@pytest.mark.parametrize("given, message", [
    ({"draft_tokens": 2, "acceptance": 0.5}, "give draft_model .* or draft_cost"),
    ({"draft_tokens": 2, "acceptance": 0.5, "draft_cost": 0.1, "draft_model": "Llama-3.2-1B"},
     "give draft_model .* or draft_cost"),
    ({"draft_tokens": 0, "acceptance": 0.5, "draft_cost": 0.1}, "draft_tokens = 0 must be >= 1"),
    ({"draft_tokens": 2, "acceptance": 1.5, "draft_cost": 0.1}, "acceptance = 1.5 must be <= 1"),
])
def test_speculative_settings_are_checked(given, message):
    with pytest.raises(ScenarioError, match=r"server.speculative"):
        engine.load_scenario({"workload": {"num_requests": 1, "arrival": {"process": "poisson", "rate_per_s": 1.0},
                                           "classes": ONE_CHAT},
                              "server": {"speculative": given}})
    with pytest.raises(ScenarioError, match=message):
        engine.load_scenario({"workload": {"num_requests": 1, "arrival": {"process": "poisson", "rate_per_s": 1.0},
                                           "classes": ONE_CHAT},
                              "server": {"speculative": given}})


def test_a_draft_model_costs_its_weight_ratio_and_takes_memory():
    """Llama-3.2-1B (1.24B parameters, tied embedding: published size) drafting for Llama-3-8B: a draft step costs
    its weights over the served model's, and its weights leave less room for the KV cache."""
    draft = roofline_profile(Server(step_model="roofline", model="Llama-3.2-1B"))
    assert draft.parameters / 1e9 == pytest.approx(1.24, abs=0.005)
    plain = Server(step_model="roofline", model="Llama-3-8B")
    served = Server(step_model="roofline", model="Llama-3-8B",
                    speculative=Speculative(draft_tokens=4, acceptance=0.7, draft_model="Llama-3.2-1B"))
    profile = roofline_profile(served)
    assert profile.draft_cost == pytest.approx(draft.weight_bytes / profile.weight_bytes, rel=1e-12)
    assert 0.15 < profile.draft_cost < 0.18
    lost_tokens = kv_capacity_tokens(plain, roofline_profile(plain)) - kv_capacity_tokens(served, profile)
    assert lost_tokens == pytest.approx(draft.resident_weight_bytes / profile.kv_bytes_per_token, abs=1)


def test_a_draft_model_must_share_the_vocabulary():
    with pytest.raises(ScenarioError, match="server.speculative.draft_model = 'Llama-3.2-1B' has a 128256-token"):
        engine.simulate(engine.load_scenario({
            "workload": {"num_requests": 1, "arrival": {"process": "poisson", "rate_per_s": 1.0},
                         "classes": ONE_CHAT},
            "server": {"step_model": "roofline", "model": "Qwen2.5-7B",
                       "speculative": {"draft_tokens": 2, "acceptance": 0.7, "draft_model": "Llama-3.2-1B"}}}))


def tpot_ms(rate_per_s, speculative):
    """Mean time per output token of 300/300-token chat on one A100 with Llama-3-8B."""
    classes = [{"name": "chat", "share": 1.0, "prompt_tokens": {"dist": "constant", "value": 300},
                "output_tokens": {"dist": "constant", "value": 300}}]
    server = {"step_model": "roofline", "gpu": "A100-80G", "model": "Llama-3-8B"}
    if speculative:
        server["speculative"] = {"draft_tokens": 4, "acceptance": 0.7, "draft_model": "Llama-3.2-1B"}
    return engine.simulate(synthetic(classes, rate_per_s, 400, server=server)).summary["overall"]["tpot_ms"]["mean"]


def test_speculation_helps_at_low_load_and_hurts_at_high_load():
    """A nearly idle GPU reads its weights for a batch of a few tokens: verifying five costs little more, and 2.8
    tokens come out of each iteration. A busy one is compute bound, and the verified tokens that are rejected
    (and the draft) take time from everyone."""
    assert tpot_ms(4.0, True) < 0.7 * tpot_ms(4.0, False)
    assert tpot_ms(24.0, True) > 1.1 * tpot_ms(24.0, False)  # busy: measured A100 kernels serve 16 req/s with room


def test_the_offered_load_counts_the_iterations_speculation_saves():
    classes = [{"name": "chat", "share": 1.0, "prompt_tokens": {"dist": "constant", "value": 10},
                "output_tokens": {"dist": "constant", "value": 101}}]
    plain = engine.simulate(synthetic(classes, 5.0, 50, server={"max_batch_size": 1}))
    specd = engine.simulate(synthetic(classes, 5.0, 50, server={"max_batch_size": 1, **spec(1, 1.0, 0.5)}))
    # 1 prefill + 100 decodes of 10 ms, against 1 prefill + 50 decodes of 15 ms
    ratio = specd.summary["system"]["offered_load"] / plain.summary["system"]["offered_load"]
    assert ratio == pytest.approx((10 + 50 * 15) / (10 + 100 * 10), rel=1e-12)
