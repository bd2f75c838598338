"""Every page driven headless with AppTest: widgets change the outputs the right way, no exception."""

import json

import pytest
from streamlit.testing.v1 import AppTest

import engine
from conftest import AZURE_CONV, REPO, SCENARIOS, shown
from test_traces import azure_rows
from engine.scenario.config import Policy, apply_overrides, field_label, read_toml
from engine.sim.policies import POLICIES
from ui import state
from ui.scenario_sidebar import scenario_from_upload


def lab(scenario: dict | None = None) -> AppTest:
    """The app; opened through a link to ``scenario`` when given."""
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=180)
    if scenario is not None:
        at.query_params[state.QUERY_KEY] = state.encode(scenario)
    return at


def fixed_lab() -> AppTest:
    """The Lab on the command line's example (fixed 20 ms iterations, batch of 8), through a link."""
    return lab(read_toml(SCENARIOS / "example.toml")).run()


def metric(at: AppTest, card: int, label: str) -> str:
    """The value of KPI ``label`` in the ``card``-th class card (0 = first class)."""
    cards = [m for m in at.metric if m.label == label]
    return cards[card].value


def test_lab_shows_every_section_for_the_default_preset():
    at = lab().run()
    assert not at.exception and not at.error
    assert at.title[0].value == "Scheduler Lab"
    assert {h.value for h in at.subheader} == {"Scenario", "Per-class results", "Cost",
                                               "Policy comparison (same arrivals)", "Curves against load"}
    assert len([m for m in at.metric if m.label == "TTFT p99"]) == 3  # interactive, offline, overall
    assert len(at.get("plotly_chart")) == 5  # comparison, curves, CDF, timeline, load and SLA per window
    assert any(c.startswith("Dynamic cost gave exactly strict priority's figures on these arrivals: a batch request")
               for c in shown(at.caption)), "the comparison says why its dynamic row is strict priority's"


def test_a_dynamic_weight_alone_above_zero_says_its_size_changes_nothing():
    data = apply_overrides(read_toml(SCENARIOS / "chat_and_batch_a100_8b.toml"),
                           {"policy.name": "dynamic", "policy.alpha": 0.0, "policy.beta": 0.0, "policy.gamma": 2.0,
                            "workload.num_requests": 2000})
    at = lab(data).run()
    assert not at.exception and not at.error
    assert any("is the only weight above 0, so its size changes nothing" in c for c in shown(at.caption))
    at.slider(key="policy_alpha_1").set_value(1.0).run()
    assert not any("is the only weight above 0" in c for c in shown(at.caption))


def test_fair_queuing_weights_far_from_the_shares_achieved_say_why_beside_the_cards():
    data = apply_overrides(read_toml(SCENARIOS / "chat_and_batch_a100_8b.toml"),
                           {"policy.name": "wfq", "policy.weights": {"chat": 9.0, "batch": 1.0},
                            "workload.num_requests": 2000})
    at = lab(data).run()
    assert not at.exception and not at.error
    assert any(c.startswith("GPU service shares achieved") and "against 90% / 10% from the weights" in c
               for c in shown(at.caption))


def test_priority_policy_cuts_interactive_latency_and_shows_the_change():
    at = lab().run()
    fifo = metric(at, 0, "TTFT p99")
    at.selectbox(key="policy_1").set_value("priority").run()
    assert not at.exception
    priority = metric(at, 0, "TTFT p99")
    assert priority != fifo
    as_seconds = lambda text: float(text.split()[0].replace(",", "")) * (1 if text.endswith(" s") else 1e-3)
    assert as_seconds(priority) < as_seconds(fifo)
    delta = [m for m in at.metric if m.label == "TTFT p99"][0].delta
    assert delta is not None and delta.startswith("-")


def test_invalid_setting_names_the_field_and_keeps_the_last_results():
    at = fixed_lab()
    before = metric(at, 0, "End-to-end p99")
    at.number_input(key="server_max_batched_tokens_1").set_value(2).run()
    assert not at.exception
    assert any("\u201cToken budget per iteration\u201d: 2 is below \u201cBatch limit\u201d: 8" in e
               for e in shown(at.error)), "the field is named in the form's words"
    assert metric(at, 0, "End-to-end p99") == before


def test_impossible_memory_shows_the_fix_and_the_previous_run():
    at = fixed_lab()
    before = metric(at, 0, "End-to-end p99")
    at.number_input(key="server_kv_capacity_tokens_1").set_value(512).run()
    assert not at.exception
    assert any("KV cache holds" in e and "enlarge the cache" in e for e in shown(at.error))
    assert metric(at, 0, "End-to-end p99") == before


def test_shared_link_reopens_the_same_scenario():
    data = read_toml(SCENARIOS / "example.toml")
    data["policy"]["name"] = "priority"
    data["workload"]["arrival"]["rate_per_s"] = 3.0
    data["workload"]["num_requests"] = 4000
    at = lab()
    at.query_params[state.QUERY_KEY] = state.encode(data)
    at.run()
    assert not at.exception
    assert at.selectbox(key="policy_1").value == "priority"
    assert at.slider(key="rate_1").value == 3.0
    expected = engine.simulate(engine.load_scenario(data)).summary["classes"]["interactive"]["completed"]
    card = next(m for m in shown(at.markdown) if m.startswith("**interactive**"))
    assert f"{expected:,} of" in card
    link = at.query_params[state.QUERY_KEY]
    linked = state.decode(link if isinstance(link, str) else link[0])
    assert engine.load_scenario(linked) == engine.load_scenario(data)


def test_damaged_link_falls_back_to_the_default_with_an_error():
    at = lab()
    at.query_params[state.QUERY_KEY] = "not-a-scenario"
    at.run()
    assert not at.exception
    assert any("damaged" in e for e in shown(at.error))
    assert any(state.default_data()["name"] in c for c in shown(at.sidebar.caption))


def test_preset_picker_replaces_the_scenario():
    at = lab().run()
    at.selectbox(key="preset_pick").set_value("priority_teaching.toml").run()
    assert not at.exception
    assert any("M/G/1 teaching: FIFO vs priority" in c for c in shown(at.sidebar.caption))
    assert at.selectbox(key="policy_2").value == "priority"


def test_uploaded_toml_must_be_valid():
    assert scenario_from_upload("ok.toml", (SCENARIOS / "example.toml").read_bytes())["name"] == "example"
    with pytest.raises(engine.ScenarioError, match="bad.toml is not valid TOML"):
        scenario_from_upload("bad.toml", b"name = = 3")


def test_workload_page_draws_the_distributions_and_reacts():
    at = lab().run()
    at.switch_page("pages/workload.py").run()
    assert not at.exception and not at.error
    charts = at.get("plotly_chart")
    assert len(charts) == 5  # prompt and output per class, inter-arrival gaps
    rate = [m for m in at.metric if m.label == "Rate (req/s)"][0].value
    at.number_input(key="w_rate_1").set_value(10.0).run()
    assert not at.exception
    assert [m for m in at.metric if m.label == "Rate (req/s)"][0].value != rate
    assert float([m for m in at.metric if m.label == "Rate (req/s)"][0].value) == pytest.approx(10.0, rel=0.05)


def test_method_page_shows_the_theory_checks():
    at = lab().run()
    at.switch_page("pages/method.py").run()
    assert not at.exception
    checks = next(d.value for d in at.dataframe if "set-up" in d.value.columns)
    assert len(checks) == 7
    gap = (checks["simulated (ms)"] - checks["theory (ms)"]).abs()
    assert (gap <= 4 * checks["std. error (ms)"] + checks["allowance (ms)"]).all()


def workload_page() -> AppTest:
    at = lab().run()
    return at.switch_page("pages/workload.py").run()


def test_trace_upload_shows_statistics_and_moves_into_the_lab():
    at = workload_page()
    content = AZURE_CONV.read_bytes()
    at.file_uploader(key="trace_upload").set_value(("conv.csv", content, "text/csv")).run()
    assert not at.exception and not at.error
    rows = azure_rows(AZURE_CONV)  # read with the csv module: (n - 1) gaps over the first to the last arrival
    rate_per_s = (len(rows) - 1) / (rows[-1][0] - rows[0][0])
    assert [m for m in at.metric if m.label == "Rate (req/s)"][-1].value == f"{rate_per_s:.2f}"
    at.button(key="use_trace").click().run()
    assert not at.exception and not at.error
    assert at.title[0].value == "Scheduler Lab", "the button opens the Lab"
    assert any(f"now replays conv.csv ({len(rows):,} requests)" in s for s in shown(at.success))
    assert [m for m in at.metric if m.label == "TTFT p99"]
    assert any(f"The trace names no class for {len(rows):,} of them: each is given one at random in the classes' "
               f"shares (chat 70%, batch 30%)" in c for c in shown(at.caption)), "how the class-less trace is split"
    # the comparison and the curves replay the whole trace; the curves at its speed-ups
    captions = [c.value for c in at.caption]
    assert any(f"on the whole trace ({len(rows):,} requests)" in c for c in captions)
    assert any("the trace replayed faster or slower (its speed-up)" in c for c in captions)
    assert len(at.get("plotly_chart")) == 5


def test_malformed_trace_upload_names_the_line():
    at = workload_page()
    at.file_uploader(key="trace_upload").set_value(
        ("bad.csv", b"arrival_s,prompt_tokens,output_tokens\n0,5,3\n1,five,3\n", "text/csv")).run()
    assert not at.exception
    assert any("bad.csv: line 3: prompt_tokens = 'five' must be an integer from 1 to 10,000,000" in e
               for e in shown(at.error))


def test_scenario_upload_replaces_or_explains():
    at = lab().run()
    at.file_uploader(key="upload_1").set_value(("mine.toml", (SCENARIOS / "priority_teaching.toml").read_bytes(),
                                                "application/toml")).run()
    assert not at.exception
    assert any("M/G/1 teaching: FIFO vs priority" in c for c in shown(at.sidebar.caption))
    at.file_uploader(key="upload_2").set_value(("broken.toml", b"[server]\nmax_batch_size = 0\n",
                                                "application/toml")).run()
    assert not at.exception
    assert any("workload is required" in e for e in shown(at.error))
    assert any("M/G/1 teaching: FIFO vs priority" in c for c in shown(at.sidebar.caption))


def roofline_lab(num_requests: int = 2000) -> AppTest:
    """The Lab opened on the A100 / Llama-3-8B preset through a shared link."""
    data = read_toml(SCENARIOS / "chat_and_batch_a100_8b.toml")
    data["workload"]["num_requests"] = num_requests
    at = lab()
    at.query_params[state.QUERY_KEY] = state.encode(data)
    return at.run()


def test_cost_section_prices_a_roofline_server():
    at = roofline_lab()
    assert not at.exception and not at.error
    offer_currency = at.selectbox(key="cost_currency").value  # the default offer's own currency
    assert [m for m in at.metric if m.label == f"Per month ({offer_currency})"][0].value[0].isdigit()
    other = "CNY" if offer_currency == "USD" else "USD"
    at.selectbox(key="cost_currency").set_value(other).run()
    assert [m for m in at.metric if m.label == f"Per month ({other})"][0].value[0].isdigit()
    assert [m for m in at.metric if m.label == f"Cost per 1M output tokens ({other})"][0].value[0].isdigit()


def test_cost_section_explains_the_fixed_model():
    at = fixed_lab()
    assert any("roofline step model" in c.value for c in at.caption)


def hardware_page() -> AppTest:
    return roofline_lab().switch_page("pages/hardware.py").run()


def test_hardware_page_sizes_and_prices_the_fleet():
    at = hardware_page()
    assert not at.exception and not at.error
    assert {"Does it fit? Memory of one card", "Iteration time", "Rental offers", "Cost of this fleet",
            "Same cards, other shapes"} <= {h.value for h in at.subheader}
    assert len(at.get("plotly_chart")) == 4  # memory bar, decode steps, prefill, cost against load
    assert any("measured kernels" in c.value or "Roofline estimate" in c.value for c in at.caption)
    one = [m for m in at.metric if m.label.startswith("Fleet per month (")][0].value
    at.number_input(key="hw_replicas_1").set_value(2).run()
    assert not at.exception and not at.error
    two = [m for m in at.metric if m.label.startswith("Fleet per month (")][0].value
    as_number = lambda text: float(text.split()[0].split("–")[0].replace(",", ""))
    assert as_number(two) == pytest.approx(2 * as_number(one), rel=1e-3)
    # The edit is the shared scenario's: the Lab now simulates two replicas.
    at.switch_page("pages/lab.py").run()
    assert not at.exception and at.selectbox(key="timeline_replica") is not None


def test_hardware_page_names_the_tensor_parallel_degree_that_fits():
    at = hardware_page()
    at.selectbox(key="hw_model_1").set_value("Llama-3-70B").run()
    assert not at.exception
    assert any("does not fit on 1 x A100-80G" in e and "\u201cTensor parallel\u201d: 2" in e for e in shown(at.error))
    sources = at.table[0].value
    sources = sources.data if hasattr(sources, "data") else sources  # the page styles the table
    assert sources.loc["card total", "GiB"] == pytest.approx(81920 / 1024)  # nvidia-smi, however far it overflows
    assert sources.loc["over by", "GiB"] > 0
    # The bar: the parts stacked reach past the card, whose total is a line, by exactly "over by".
    bar = json.loads(at.get("plotly_chart")[0].proto.spec)
    stacked = sum(trace["x"][0] for trace in bar["data"])
    assert stacked == pytest.approx(80.0 + sources.loc["over by", "GiB"], abs=0.02)
    assert [shape["x0"] for shape in bar["layout"]["shapes"]] == [pytest.approx(80.0)]
    at.selectbox(key="hw_tensor_parallel_1").set_value(4).run()
    assert not at.exception and not at.error
    assert [m for m in at.metric if m.label == "KV cache per server"]


def test_policy_comparison_prices_each_policy():
    at = roofline_lab()
    assert not at.exception and not at.error
    at.selectbox(key="comparison_metric").set_value("cost_per_million_output_tokens").run()
    assert not at.exception and not at.error
    assert "costs at the low end of" in " ".join(c.value for c in at.caption)


def test_hardware_page_asks_the_cheapest_rental_as_a_target_for_the_planner():
    at = hardware_page()
    assert "Cheapest rental that meets a target" in {h.value for h in at.subheader}
    assert any(b.label == "Answer it in the Planner" for b in at.button), "the answer comes from the Planner"
    assert not at.exception and not at.error


def test_hardware_page_names_a_request_the_kv_cache_cannot_hold_and_still_searches_rentals():
    """Llama-3-70B FP8 on one H100 leaves about 4,000 KV tokens: the preset's longest requests do not fit."""
    at = hardware_page()
    at.selectbox(key="hw_gpu_1").set_value("H100-80G").run()
    at.selectbox(key="hw_model_1").set_value("Llama-3-70B").run()
    at.selectbox(key="hw_quant_1").set_value("fp8").run()
    assert not at.exception
    assert any("needs" in e.value and "KV tokens" in e.value and "cheapest rental below" in e.value
               for e in at.error)
    assert "Cheapest rental that meets a target" in {h.value for h in at.subheader}


def test_the_sidebar_describes_the_scenario_after_an_edit_on_the_page():
    at = hardware_page()
    at.selectbox(key="hw_gpu_1").set_value("H100-80G").run()
    assert any("now" in c.value and "H100" in c.value for c in at.sidebar.caption)


def test_a_full_kv_cache_says_what_its_preemptions_cost():
    """vLLM 0.6's defaults fill the cache: the preemption note gives the run's own count and wasted share of GPU
    time, and the cache note advises acting only from 1% on; at 1 req/s the cache never fills and there is no
    note."""
    data = read_toml(SCENARIOS / "engine_vllm_v0.toml")
    for rate, acts in ((2.5, False), (3.0, True)):  # a few preemptions, then hundreds
        data["workload"]["arrival"]["rate_per_s"] = rate
        system = engine.simulate(engine.load_scenario(data)).summary["system"]
        share = system["preemption_waste_frac"]
        assert share == system["preemption_waste_s"] / system["sim_time_s"]  # one replica
        assert system["kv_peak_frac"] >= 0.99 and system["preemptions"] > 1 and (share >= 0.01) == acts
        at = lab(data).run()
        assert not at.exception
        note = [c.value for c in at.caption if c.value.startswith("The KV cache filled up at times")]
        assert len(note) == 1 and ("Lower the load" in note[0]) == acts
        assert any(c.value.startswith(f"{system['preemptions']:,} preemptions wasted") and
                   f"({share:.1%} of the GPU time of the run)" in c.value for c in at.caption)
    data["workload"]["arrival"]["rate_per_s"] = 1.0
    at = lab(data).run()
    assert not any(c.value.startswith("The KV cache filled up") for c in at.caption)


def test_speculative_decoding_cuts_time_per_token_at_low_load_and_a_foreign_draft_is_refused():
    chat = {"name": "chat", "workload": {"num_requests": 300, "arrival": {"process": "poisson", "rate_per_s": 3.0},
            "classes": [{"name": "chat", "share": 1.0, "prompt_tokens": {"dist": "constant", "value": 300},
                         "output_tokens": {"dist": "constant", "value": 300}}]},
            "server": {"step_model": "roofline", "gpu": "A100-80G", "model": "Llama-3-8B"}}
    at = lab(chat).run()
    as_ms = lambda text: float(text.split()[0])
    plain = as_ms(metric(at, 0, "TPOT mean"))
    at.toggle(key="speculative_1").set_value(True).run()
    assert not at.exception and not at.error
    assert any("verifies 5 tokens per request and emits 2.77" in c.value for c in at.caption)
    at.selectbox(key="spec_model_1").set_value("Llama-3.2-1B").run()
    assert not at.exception and not at.error
    drafted = as_ms(metric(at, 0, "TPOT mean"))
    assert drafted < 0.7 * plain
    at.selectbox(key="spec_model_1").set_value("Qwen2.5-7B").run()
    assert any("must share the served model's tokenizer" in e for e in shown(at.error))
    assert as_ms(metric(at, 0, "TPOT mean")) == drafted  # the last scenario that ran stays on screen


def test_the_scenario_line_names_speculative_decoding():
    typed = engine.load_scenario({"workload": {"num_requests": 1, "arrival": {"process": "poisson", "rate_per_s": 1.0},
                                  "classes": [{"name": "a", "share": 1.0, "prompt_tokens": {"dist": "constant",
                                                                                            "value": 8},
                                               "output_tokens": {"dist": "constant", "value": 8}}]},
                                  "server": {"step_model": "roofline", "speculative": {
                                      "draft_tokens": 3, "acceptance": 0.6, "draft_model": "Llama-3.2-1B"}}})
    assert state.describe(typed) == ("Llama-3-8B (FP16) on A100-80G, speculative decoding (3 tokens drafted by "
                                     "Llama-3.2-1B); policy: First come, first served")


def test_prefix_caching_with_a_shared_system_prompt_shows_its_hit_rate_and_cuts_ttft():
    data = read_toml(SCENARIOS / "chat_and_batch_a100_8b.toml")
    data["workload"]["num_requests"] = 2000
    at = lab(data).run()
    assert not [m for m in at.metric if m.label == "Prefix cache hits"]
    as_ms = lambda text: float(text.split()[0].replace(",", "")) * (1000 if text.endswith(" s") else 1)
    before = as_ms(metric(at, 0, "TTFT p99"))
    at.toggle(key="server_prefix_caching_1").set_value(True).run()
    at.number_input(key="class_0_shared_prefix_tokens_1").set_value(800).run()
    assert not at.exception and not at.error
    hits = next(m for m in at.metric if m.label == "Prefix cache hits")
    assert 0.25 < float(hits.value.rstrip("%")) / 100 < 0.4
    assert as_ms(metric(at, 0, "TTFT p99")) < 0.95 * before


def test_a_mixed_fleet_in_the_lab_adds_a_faster_group_routes_by_speed_and_prices_each_group():
    """The article's 2 x TP4 A100 fleet turned mixed: the first group is the fleet as it was, the second one
    TP4 H100 replica; the H100, much the faster on this workload, takes most requests, the latency falls, and
    the rent is both groups' cheapest offers together."""
    data = read_toml(SCENARIOS / "article_mixed_8xa100.toml")
    data["workload"]["num_requests"] = 3000
    at = lab(data).run()
    before = float(metric(at, 0, "TTFT p99").split()[0])
    at.toggle(key="fleet_mixed_1").set_value(True).run()
    assert not at.exception and not at.error
    assert at.number_input(key="group_0_replicas_1").value == 2
    assert at.selectbox(key="group_1_gpu_1").value == "H100-80G"
    assert any(c.value.startswith("8 cards of A100-80G rent") and ". 4 cards of H100-80G rent" in c.value
               for c in at.caption)
    assert float(metric(at, 0, "TTFT p99").split()[0]) < before
    table = next(d.value for d in at.dataframe if "hardware" in d.value.columns)
    assert list(table["hardware"]) == ["TP4 A100-80G INT4"] * 2 + ["TP4 H100-80G INT4"]
    assert table["routed"].iloc[2] > table["routed"].iloc[:2].sum()
    at.toggle(key="fleet_mixed_1").set_value(False).run()
    assert float(metric(at, 0, "TTFT p99").split()[0]) == before


def test_the_scenario_line_names_a_mixed_fleets_groups():
    data = read_toml(SCENARIOS / "article_mixed_8xa100.toml")
    data["fleet"] = {"groups": [{"replicas": 2, "gpu": "A100-80G", "tensor_parallel": 4},
                                {"replicas": 1, "gpu": "H100-80G", "quant": "fp8", "tensor_parallel": 4}]}
    assert state.describe(engine.load_scenario(data)).startswith(
        "a mixed fleet of 2 x TP4 A100-80G INT4, 1 x TP4 H100-80G FP8 serving Llama-3-70B; policy:")


def test_a_disaggregated_fleet_in_the_lab_trades_first_token_time_for_time_per_token():
    """The article's two A100 servers split into a prefill and a decode server: decodes no longer wait for prompts,
    so interactive time per token falls; one server computes every prompt, so the first token comes later."""
    data = read_toml(SCENARIOS / "article_mixed_8xa100.toml")
    data["workload"]["num_requests"] = 3000
    at = lab(data).run()
    as_ms = lambda text: float(text.split()[0]) * (1000 if text.split()[1] == "s" else 1)  # noqa: E731
    tpot, ttft = as_ms(metric(at, 0, "TPOT mean")), as_ms(metric(at, 0, "TTFT p99"))
    at.selectbox(key="fleet_mode_1").set_value("disaggregated").run()
    assert not at.exception and not at.error
    assert at.number_input(key="pool_prefill_replicas_1").value == 1
    assert at.number_input(key="pool_decode_replicas_1").value == 1
    assert as_ms(metric(at, 0, "TPOT mean")) < 0.8 * tpot
    assert as_ms(metric(at, 0, "TTFT p99")) > ttft
    table = next(d.value for d in at.dataframe if "role" in d.value.columns)
    assert list(table["role"]) == ["prefill", "decode"]
    at.selectbox(key="fleet_mode_1").set_value("colocated").run()
    assert at.number_input(key="fleet_replicas_1").value == 2
    assert as_ms(metric(at, 0, "TPOT mean")) == tpot


def test_the_hardware_page_does_not_price_a_mixed_fleet_as_one_gpu():
    data = read_toml(SCENARIOS / "article_mixed_8xa100.toml")
    data["workload"]["num_requests"] = 300
    data["fleet"] = {"groups": [{"replicas": 2, "gpu": "A100-80G", "tensor_parallel": 4},
                                {"replicas": 1, "gpu": "H100-80G", "quant": "fp8", "tensor_parallel": 4}]}
    at = lab(data).run().switch_page("pages/hardware.py").run()
    assert not at.exception and not at.error
    assert any("This fleet has groups or pools of its own hardware" in i.value for i in at.info)
    assert not [m for m in at.metric if m.label.startswith("Fleet per month")]


def test_the_lab_keeps_a_groups_unlimited_kv_cache():
    """A fixed-step group's ``kv_capacity_tokens = 0`` (unlimited) is a value, not a missing key: opening the Lab
    keeps it, not the server's capacity in its place."""
    data = read_toml(SCENARIOS / "example.toml")
    data["server"]["kv_capacity_tokens"] = 64_000
    data["fleet"] = {"groups": [{"replicas": 1, "kv_capacity_tokens": 0}, {"replicas": 1, "step_time_ms": 5.0}]}
    at = lab(data).run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert at.session_state["scenario"]["fleet"]["groups"][0]["kv_capacity_tokens"] == 0


def test_a_pasted_config_json_becomes_a_model_of_the_scenario():
    """Paste a config.json on the Hardware page: its size is shown, "Use this model" serves it, the model picker
    and the Lab then name it; a broken one is one line and changes nothing."""
    at = hardware_page()
    at.text_area(key="hw_model_config_text").set_value('{"num_hidden_layers": 2').run()
    assert not at.exception and shown(at.error) == ["config.json is not JSON (line 1: Expecting ',' delimiter); "
                                                    "give the model's config.json"]
    assert at.selectbox(key="hw_model_1").value == "Llama-3-8B"
    pasted = (REPO / "tests" / "fixtures" / "model_configs" / "gpt-oss-20b.json").read_text()
    at.text_area(key="hw_model_config_text").set_value(pasted).run()
    assert any("20.9 billion parameters" in m.value for m in at.markdown)
    at.button(key="hw_model_config_use").click().run()
    assert not at.exception and not at.error
    picker = next(s for s in at.selectbox if s.key.startswith("hw_model_"))
    assert picker.value == "gpt-oss-20b (your config)" and "gpt-oss-20b" in picker.options  # the shipped row too
    linked = at.query_params[state.QUERY_KEY]
    assert state.decode(linked if isinstance(linked, str) else linked[0])["server"]["model_config"]["experts"] == 32
    picker.set_value("Llama-3-8B").run()  # back to a shipped model: no error
    assert not at.exception and not at.error


def test_a_dense_config_json_while_expert_parallel_is_on_is_served_with_it_turned_off_and_named_by_the_user():
    """Expert parallelism on (a mixture-of-experts preset), then a dense model's config.json: the page says one
    line and stays up (it stopped on a ScenarioError before); the name typed is the model's name."""
    data = read_toml(SCENARIOS / "chat_and_batch_a100_8b.toml")
    data["workload"]["num_requests"] = 300
    data["server"].update({"step_model": "roofline", "gpu": "H100-80G", "model": "Qwen3-30B-A3B",
                           "tensor_parallel": 2, "expert_parallel": True})
    at = lab(data).run().switch_page("pages/hardware.py").run()
    bare = json.loads((REPO / "tests" / "fixtures" / "model_configs" / "Llama-3.1-8B.json").read_text())
    bare.pop("_name_or_path", None)
    at.text_area(key="hw_model_config_text").set_value(json.dumps(bare)).run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert "This model has no experts: using it turns expert parallelism off." in shown(at.caption)
    [name] = [t for t in at.text_input if t.label == "Model name"]
    assert name.value == "llama model"
    name.set_value("acme-8b").run()
    at.button(key="hw_model_config_use").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    server = at.session_state["scenario"]["server"]
    assert (server["model"], server["expert_parallel"]) == ("acme-8b", False)


def test_a_day_shape_is_drawn_over_the_run_and_the_lab_sets_its_duration():
    at = workload_page()
    [mode] = [r for r in at.radio if r.label == "Rate over time"]
    mode.set_value("Shape of a day or week").run()
    assert not at.exception and not at.error
    captions = shown(at.caption)
    assert any("ServeGen" in c and "Apache-2.0" in c for c in captions)
    # the preset's 4.7 req/s as the shape's mean; its requests cover a part of the day
    assert any(c.startswith("Mean 4.7 req/s over the curve") and "Set Duration in the Lab" in c for c in captions)
    assert at.get("plotly_chart")[-2].proto.spec  # the rate over the run, above the gaps' histogram
    at.switch_page("pages/lab.py").run()
    assert not at.exception and not at.error
    assert [s for s in at.slider if s.label == "Mean arrival rate (req/s)"]
    assert [n for n in at.number_input if n.label == "Duration (s)"]


def test_an_autoscaler_in_the_lab_shows_its_replicas_and_the_bill_three_ways():
    """The A100 / Llama-3-8B preset with traffic that triples for a while: the autoscaler's toggle adds its
    controls; the run says what it did, the timeline's windows gain a row of replicas, and the cost section prices
    the run three ways (the fixed fleet at its peak simulated for its own SLA) with the cost per hour."""
    data = read_toml(SCENARIOS / "chat_and_batch_a100_8b.toml")
    data["workload"]["num_requests"] = 6000
    data["workload"]["arrival"]["rate_curve"] = [[0, 1.0], [300, 1.0], [301, 3.0], [900, 3.0], [901, 1.0]]
    data["fleet"] = {"replicas": 1}
    at = lab(data).run()
    charts = len(at.get("plotly_chart"))
    at.toggle(key="autoscale_1").set_value(True).run()
    assert not at.exception and not at.error
    assert at.number_input(key="autoscale_max_replicas_1").value == 4
    assert any(c.startswith("Autoscaler: 1 to 4 replicas, peak ") for c in shown(at.caption))
    bill = next(d.value for d in at.dataframe if "strategy" in d.value.columns)
    assert sorted(bill["strategy"]) == sorted(["fixed at the peak", "autoscaled, on demand",
                                               "reserved baseline + bursts"])
    assert not [m for m in at.metric if m.label.startswith("Per month")]  # no one hourly price for a moving fleet
    assert len(at.get("plotly_chart")) == charts + 1  # the cost per hour
    windows = next(c for c in at.get("plotly_chart") if "replicas billed" in c.proto.spec)
    assert windows is not None


def test_a_pools_autoscaler_in_the_lab():
    """The disaggregated article preset along a rise: the prefill pool's toggle adds its autoscaler's controls; the
    run says what it did, the windows gain their replicas row, and the cost says what its price leaves out."""
    data = read_toml(SCENARIOS / "article_disaggregated_8xa100.toml")
    data["workload"]["num_requests"] = 6000
    data["workload"]["arrival"]["rate_curve"] = [[0, 20.0], [60, 60.0], [120, 20.0]]
    at = lab(data).run()
    at.toggle(key="pool_prefill_autoscale_1").set_value(True).run()
    assert not at.exception and not at.error
    assert at.number_input(key="pool_prefill_autoscale_max_replicas_1").value == 4
    assert any(c.startswith("Prefill pool's autoscaler: 1 to 4 replicas, peak ") for c in shown(at.caption))
    assert any("With an autoscaled pool the fleet's servers come and go" in c for c in shown(at.caption))
    assert next(c for c in at.get("plotly_chart") if "replicas billed" in c.proto.spec) is not None
    # a link that carries a pool's autoscaler keeps it
    data["fleet"]["prefill"]["autoscale"] = {"max_replicas": 3, "signal": "queue", "target": 4.0}
    linked = lab(data).run()
    assert not linked.exception and not linked.error
    assert linked.toggle(key="pool_prefill_autoscale_1").value
    assert any(c.startswith("Prefill pool's autoscaler: 1 to 3 replicas") for c in shown(linked.caption))


def test_a_moving_rate_is_compared_on_its_busiest_stretch():
    """The example along a rising and falling curve (20,000 requests): the comparison, the curves and the note on a
    short run name the busiest 5,000 and where in the curve they begin; the curves' axis is the curve's mean."""
    data = apply_overrides(read_toml(SCENARIOS / "example.toml"), {
        "workload.arrival.rate_curve": [[0, 5.0], [1800, 30.0], [3600, 5.0]]})
    at = lab(data).run()
    assert not at.exception and not at.error
    captions = [c.value for c in at.caption]
    assert any("on the busiest 5,000 requests (from 00:" in c for c in captions)
    assert any("the busiest 5,000 requests (from 00:" in c and "each" in c for c in captions)


def test_the_first_requests_cards_show_while_a_new_run_computes_then_give_way():
    """A run not yet cached, of 20,000 requests: ``runner.preview`` gives its first 2,000 requests' summary (not for
    a run of at most 4,000, nor once the full run is cached); the page shows those as refining cards while the
    full run computes, and when it is done only the full run's cards remain, without the refining caption."""
    from ui import runner
    data = apply_overrides(read_toml(SCENARIOS / "example.toml"), {"seed": 424242})
    assert runner.preview(apply_overrides(data, {"workload.num_requests": 2 * runner.PREVIEW_REQUESTS})) is None
    quick = runner.preview(data)
    assert quick["run"]["requests"] == runner.PREVIEW_REQUESTS
    at = lab(data).run()
    assert not at.exception and not at.error
    assert len([m for m in at.metric if m.label == "TTFT p99"]) == 3
    assert not [c for c in at.caption if c.value.startswith("Refining")]
    assert runner.preview(data) is None  # its full run is cached now


def test_the_system_footnote_speaks_of_the_fixed_step_model_only_on_a_fixed_run():
    def footnote(at: AppTest) -> str:
        return next(c for c in shown(at.caption) if c.startswith("Offered load: arriving work per second"))
    assert "fixed step model" not in footnote(lab().run()), "a roofline run: compute and bandwidth are known"
    assert "not known under the fixed step model" in footnote(fixed_lab())


def test_a_gpu_busy_far_above_the_offered_load_is_explained():
    data = apply_overrides(read_toml(SCENARIOS / "chat_and_batch_a100_8b.toml"),
                           {"workload.arrival.rate_per_s": 2.0, "workload.num_requests": 2000})
    at = lab(data).run()
    assert not at.exception and not at.error
    note = next(c for c in shown(at.caption) if c.startswith("GPU busy "))
    assert "at an offered load of 0.3" in note and "an iteration runs whenever any request is decoding" in note
    assert not any(c.startswith("GPU busy ") for c in shown(lab().run().caption)), "busy near the load: nothing"


def test_a_change_runs_again_only_what_it_changes(monkeypatch):
    """Results are cached under the scenario in one spelling (``runner.normal_json``): the first change after a
    link opens a scenario, which the sidebar writes back with its defaults filled in, runs no curve again (their
    rates are fractions of the capacity, which the rate does not move); and a move of alpha runs only the dynamic
    policy again (the other policies' runs do not read it)."""
    from ui import runner
    at = lab(apply_overrides(state.default_data(), {"seed": 515151})).run()
    assert not at.exception and not at.error
    ran = []
    run_summary = runner.run_summary
    monkeypatch.setattr(runner, "run_summary", lambda data, origin: ran.append(data) or run_summary(data, origin))
    rate = next(s for s in at.slider if s.label.startswith("Arrival rate"))
    new_rate = round(rate.value + rate.step, 6)
    rate.set_value(new_rate).run()
    assert not at.exception and ran
    assert {r["workload"]["arrival"]["rate_per_s"] for r in ran} == {new_rate}, "the curves ran again"
    at.selectbox(key="policy_1").set_value("dynamic").run()
    ran.clear()
    alpha = next(s for s in at.slider if s.label == field_label(Policy, "alpha"))
    alpha.set_value(round(alpha.value + alpha.step, 6)).run()
    assert not at.exception and ran
    assert {r["policy"]["name"] for r in ran} == {"dynamic"}
    ran.clear()
    # under a minimum batch of 1 the wait changes nothing: its runs are cached under the defaults
    at.number_input(key="server_wait_timeout_ms_1").set_value(50.0).run()
    assert not at.exception and not ran


def test_the_lab_starts_its_comparison_and_curves_ahead_and_uses_every_run_it_started(monkeypatch):
    """Before its own run, the Lab starts the policy comparison's and the load curves' runs on the pool
    (``runner.run_ahead``): after a change, the runs its sections ask for are exactly those started ahead (every
    policy, and each curve's rates: their rates from the estimated offered load are the run's)."""
    from ui import runner
    at = lab(apply_overrides(state.default_data(), {"seed": 525252})).run()
    ahead, asked = [], []
    run_ahead, summary = runner.run_ahead, runner.summary
    monkeypatch.setattr(runner, "run_ahead", lambda datas: ahead.extend(
        runner.normal_json(runner.canonical(d)) for d in datas) or run_ahead(datas))
    monkeypatch.setattr(runner, "summary", lambda key: asked.append(runner.normal_json(key)) or summary(key))
    at.selectbox(key="policy_1").set_value("priority").run()
    assert not at.exception and not at.error
    assert len(ahead) == len(POLICIES) + 7 * 2, "every policy; fifo's and priority's curves at 7 rates"
    previews = {key for key in asked if json.loads(key)["workload"]["num_requests"] == runner.PREVIEW_REQUESTS}
    assert len(previews) == 1 and set(asked) - previews == set(ahead)


def test_a_minimum_batch_that_full_batches_cover_says_so_beside_it():
    at = lab(apply_overrides(state.default_data(), {"server.min_batch_size": 4, "server.wait_timeout_ms": 50.0})).run()
    assert not at.exception and not at.error
    notes = [c for c in shown(at.sidebar.caption) if "No effect:" in c and "held iterations back" in c]
    assert len(notes) == 1 and "(under 0.01% of the servers' time)" in notes[0] and "almost nothing" in notes[0]
    quiet = lab(apply_overrides(state.default_data(), {"server.min_batch_size": 4, "server.wait_timeout_ms": 50.0,
                                                       "workload.arrival.rate_per_s": 0.3})).run()
    assert not any("held iterations back" in c for c in shown(quiet.sidebar.caption))


def test_the_engines_own_scheduler_knobs_sit_beside_the_engine_and_leave_with_it():
    """SGLang through a link with a receive interval of 8: its knob is shown with the release it was read from and
    reaches the run; switching to vLLM drops it (on vLLM it would refuse the scenario) and the page stays up."""
    data = read_toml(SCENARIOS / "engine_sglang.toml")
    data["workload"]["num_requests"] = 200
    data["server"]["scheduler_recv_interval"] = 8
    at = lab(data).run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    [interval] = [n for n in at.number_input if n.label == "Receive interval (iterations)"]
    assert interval.value == 8
    assert any("SGLang's own scheduler knobs, with its defaults as release 0.5.14 reads them" in c
               for c in shown(at.caption))
    [engine_box] = [s for s in at.selectbox if s.label == "Serving engine"]
    engine_box.set_value("vllm").run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert not [n for n in at.number_input if n.label == "Receive interval (iterations)"]
    assert "scheduler_recv_interval" not in at.session_state["scenario"]["server"]


def test_atom_shows_its_prefill_delayer_with_data_parallel_attention_and_its_tuning_while_it_is_on():
    data = read_toml(SCENARIOS / "chat_and_batch_a100_8b.toml")
    data["workload"]["num_requests"] = 200
    data["server"].update({"step_model": "roofline", "gpu": "H100-80G", "model": "Qwen3-30B-A3B", "tensor_parallel": 2,
                           "expert_parallel": True, "attention_data_parallel": True, "engine": "atom"})
    at = lab(data).run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    [delayer] = [t for t in at.toggle if t.label == "Prefill delayer"]
    assert delayer.value and [n for n in at.number_input if n.label == "Delayer's longest hold (iterations)"]
    assert any("ATOM's own scheduler knobs" in c for c in shown(at.caption))
    delayer.set_value(False).run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert not [n for n in at.number_input if n.label.startswith("Delayer")]
    assert at.session_state["scenario"]["server"]["prefill_delayer"] is False
