"""What a first-time user trips on, driven headless (AppTest): each test failed before its fix."""

import json
import re

import plotly.graph_objects as go
import pytest
from streamlit.testing.v1 import AppTest

from conftest import REPO, SCENARIOS, shown
from engine.scenario.config import apply_overrides, read_toml
from engine.sim.policies import POLICIES
from ui import charts, state, trace_store, view
from ui.state import encode


def app(scenario: dict | None = None, view_choices: dict | None = None) -> AppTest:
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=180)
    if scenario is not None:
        at.query_params[state.QUERY_KEY] = encode(scenario)
    if view_choices is not None:
        at.query_params[view.QUERY_KEY] = encode(view_choices)
    return at


def example(**changes) -> dict:
    return apply_overrides(read_toml(SCENARIOS / "example.toml"), changes)


def card(at: AppTest, label: str, index: int = 0) -> str:
    return [m for m in at.metric if m.label == label][index].value


def link_of(at: AppTest, key: str) -> dict:
    value = at.query_params[key]
    return state.decode(value if isinstance(value, str) else value[0])


def test_the_default_scenario_runs_on_a_real_gpu_and_shows_cost():
    at = app().run()
    assert not at.exception and not at.error
    assert state.default_data()["server"]["step_model"] == "roofline"
    assert any(m.label.startswith("Per month (") for m in at.metric), "the first screen prices the fleet"
    assert any(i.value.startswith("Start here") for i in at.info), "a first visit says what to do first"
    at.selectbox(key="policy_1").set_value("priority").run()
    assert not any(i.value.startswith("Start here") for i in at.info), "the first-visit line leaves after an edit"


def test_the_lab_says_what_limits_the_run():
    at = app(example(**{"workload.num_requests": 3000, "workload.arrival.rate_per_s": 10.0})).run()
    said = next(m.value for m in at.markdown if m.value.startswith("**What limits this run**"))
    lines = said.splitlines()[1:]
    assert lines[0].startswith("- Unstable") and "at least 3 replicas" in lines[0].replace("\\", "")
    assert any(line.startswith("- Batch") for line in lines)


def test_visiting_hardware_and_cost_changes_nothing():
    """A scenario on the fixed step model stays on it when Hardware & Cost is opened and left untouched."""
    at = app(example(**{"workload.num_requests": 3000})).run()
    before = card(at, "TTFT p99")
    at.switch_page("pages/hardware.py").run()
    assert not at.exception and not at.error
    assert any("fixed iteration time" in i for i in shown(at.info))
    assert state_of(at)["server"]["step_model"] == "fixed"
    at.switch_page("pages/lab.py").run()
    assert card(at, "TTFT p99") == before and state_of(at)["server"]["step_model"] == "fixed"
    at.switch_page("pages/hardware.py").run()
    at.selectbox(key="hw_gpu_1").set_value("H100-80G").run()  # an edit does move the scenario onto the GPU
    assert state_of(at)["server"]["step_model"] == "roofline" and state_of(at)["server"]["gpu"] == "H100-80G"


def state_of(at: AppTest) -> dict:
    return link_of(at, state.QUERY_KEY)


@pytest.fixture
def long_trace() -> str:
    """A stored 30,000-row trace (one request every 50 ms, 8 prompt and 4 output tokens)."""
    rows = "\n".join(f"{0.05 * i:.2f},8,4" for i in range(30_000))
    return trace_store.store(f"arrival_s,prompt_tokens,output_tokens\n{rows}\n".encode(), ".csv")


def test_a_trace_replays_whole_or_says_how_much(long_trace):
    data = example(**{"workload.trace": {"path": long_trace, "format": "csv"}})
    data["workload"].pop("num_requests")
    at = app(data).run()
    assert not at.exception and not at.error
    assert at.toggle(key="whole_trace_1").value is True
    assert any("Replays 30,000 of the trace's 30,000 requests" in c for c in shown(at.caption))
    at.toggle(key="whole_trace_1").set_value(False).run()
    at.number_input(key="requests_1").set_value(1000).run()
    assert any("Replays 1,000 of the trace's 30,000 requests" in c for c in shown(at.caption))
    assert state_of(at)["workload"]["num_requests"] == 1000


def test_a_link_whose_trace_is_gone_shows_the_default_scenario_under_the_message(long_trace):
    data = example(**{"workload.trace": {"path": long_trace, "format": "csv"}, "workload.num_requests": 2000})
    (trace_store.STORE_DIR / long_trace).unlink()
    at = app(data).run()
    assert not at.exception
    assert any("no longer on this server" in e for e in shown(at.error))
    assert any(state.default_data()["name"] in c for c in shown(at.sidebar.caption))
    assert [m for m in at.metric if m.label == "TTFT p99"], "results are shown under the message"
    at.switch_page("pages/workload.py").run()
    assert not at.exception and at.get("plotly_chart"), "the other pages show the default scenario too"


@pytest.mark.parametrize("rate", [2.5, 2.537, 0.1, 0.0003, 45.0, 1234.5])
def test_the_rate_slider_holds_a_preset_or_link_value_exactly(rate):
    at = app(example(**{"workload.arrival.rate_per_s": rate, "workload.num_requests": 500})).run()
    slider = at.slider(key="rate_1")
    assert slider.value == rate
    step = slider.proto.step
    assert abs(rate / step - round(rate / step)) < 1e-9 * rate / step and slider.proto.min % step < 1e-12
    assert state_of(at)["workload"]["arrival"]["rate_per_s"] == rate


def trace_names(at: AppTest, index: int) -> set[str]:
    spec = json.loads(at.get("plotly_chart")[index].proto.spec)
    return {t.get("name") for t in spec["data"]}


def test_the_load_curves_always_show_the_current_policy():
    at = app(example(**{"workload.num_requests": 1000})).run()
    at.selectbox(key="policy_1").set_value("dynamic").run()
    assert not at.exception
    curves = next(i for i, c in enumerate(at.get("plotly_chart")) if "arrival rate" in c.proto.spec)
    assert {"Dynamic cost with preemption", "First come, first served", "Strict priority levels"} <= \
        trace_names(at, curves)


def test_the_load_curves_mark_the_current_rate_on_every_panel():
    at = app(example(**{"workload.num_requests": 1000, "workload.arrival.rate_per_s": 2.5})).run()
    curves = next(json.loads(c.proto.spec) for c in at.get("plotly_chart") if "arrival rate" in c.proto.spec)
    panels = {t.get("xaxis", "x") for t in curves["data"]}
    lines = curves["layout"]["shapes"]
    assert len(panels) == 2 and {line["xref"] for line in lines} == panels
    assert {line["yref"] for line in lines} == {p.replace("x", "y") + " domain" for p in panels}
    assert all(line["x0"] == line["x1"] == 2.5 and line["line"]["dash"] == "dash" for line in lines)


def test_a_link_reopens_hardware_and_cost_with_its_view_choices():
    choices = {"cost_currency": "USD", "cost_offer": "runpod-a100-sxm", "cost_billing": "annual prepay",
               "cost_fx": 7.3, "hw_target_metric": "e2e_p99_ms", "hw_target_ms": 20000.0,
               "hw_target_class": "batch", "hw_offer_gpus": ["A100-80G"], "hw_offer_firm": True,
               "hw_context_tokens": 4096}
    at = app(state.default_data(), choices).run()
    at.switch_page("pages/hardware.py").run()
    assert not at.exception and not at.error
    for key, value in choices.items():
        widget = at.selectbox(key=key) if key in ("cost_currency", "cost_offer", "cost_billing", "hw_target_metric",
                                                  "hw_target_class") else None
        if widget is None:
            widget = next(w for kind in ("number_input", "multiselect", "toggle") for w in at.get(kind)
                          if getattr(w, "key", None) == key)
        assert widget.value == value, key
    assert any(m.label == "Fleet per month (USD)" for m in at.metric)
    at.selectbox(key="cost_currency").set_value("CNY").run()
    linked = link_of(at, view.QUERY_KEY)
    assert linked["cost_currency"] == "CNY" and linked["hw_target_ms"] == 20000


def test_a_view_link_with_values_that_do_not_fit_falls_back_to_the_defaults():
    at = app(state.default_data(), {"cost_offer": "no-such-offer", "cost_fx": 1e9, "hw_target_ms": -5.0,
                                    "hw_offer_gpus": ["A100-80G", "nope"], "hw_offer_firm": "yes", "junk": 1}).run()
    at.switch_page("pages/hardware.py").run()
    assert not at.exception and not at.error
    assert at.number_input(key="cost_fx").value == pytest.approx(7.077)
    assert at.number_input(key="hw_target_ms").value == 1000.0 and at.toggle(key="hw_offer_firm").value is False
    assert at.multiselect(key="hw_offer_gpus").value == []


def test_offered_load_and_gpu_busy_are_defined_on_screen():
    at = app().run()
    captions = " ".join(shown(at.caption))
    assert "Offered load: arriving work per second over the most the fleet can serve" in captions
    assert "GPU busy: share of the steady state (after the first 10% of the arrival span, until the last " \
        "arrival, shaded on the timeline) during which an iteration was running" in captions
    helps = {m.label: m.proto.help for m in at.metric}
    assert "estimated" in helps["Offered load (estimate)"] and "nothing about how full" in helps["GPU busy"]
    assert "datasheet peak" in helps["Compute while busy"] and "whole run" in helps["GPU busy, whole run"]


def test_a_class_without_an_sla_target_shows_no_target():
    at = app(example(**{"workload.num_requests": 2000})).run()
    assert card(at, "SLA met", 1) == "no target"  # offline sets no target
    assert card(at, "SLA met", 0).endswith("%") and card(at, "SLA met", 2).endswith("%")


def test_zero_changes_are_not_shown_as_deltas():
    at = app(example(**{"workload.num_requests": 2000})).run()
    at.selectbox(key="policy_1").set_value("vllm-fcfs").run()  # same order as FIFO here: nothing moves
    assert all(m.delta in (None, "") for m in at.metric), [(m.label, m.delta) for m in at.metric if m.delta]


def test_policy_help_reads_as_sentences():
    at = app().run()
    for name in POLICIES:
        at.selectbox(key="policy_1").set_value(name).run()
        caption = next(c for c in shown(at.sidebar.caption) if c.startswith("Orders by"))
        assert " Use it " in caption and caption.endswith(".") and "Use it when mixed" not in caption


def test_histograms_of_constant_lengths_are_one_labelled_bar():
    at = app(example(**{"workload.num_requests": 2000})).run()
    at.switch_page("pages/workload.py").run()
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    offline_output = next(s for s in specs if "offline: output length" in json.dumps(s["layout"].get("title")))
    assert offline_output["data"][0]["type"] == "bar" and offline_output["data"][0]["x"] == ["256"]
    for spec in specs:
        layout = spec["layout"]
        assert layout["xaxis"].get("title", {}).get("text") and layout["yaxis"].get("title", {}).get("text")


def test_every_chart_has_axis_titles_and_one_colour_per_policy():
    at = app(example(**{"workload.num_requests": 1000})).run()
    colours = {}
    for chart in at.get("plotly_chart"):
        spec = json.loads(chart.proto.spec)
        for side in ("xaxis", "yaxis"):  # subplots sharing an axis title it once
            titles = [v.get("title", {}).get("text") for k, v in spec["layout"].items() if k.startswith(side)]
            assert any(titles), f"a chart has no {side} title"
        for trace in spec["data"]:
            colour = (trace.get("marker") or {}).get("color") or (trace.get("line") or {}).get("color")
            if trace.get("name") and isinstance(colour, str):
                colours.setdefault(trace["name"], set()).add(colour)
    assert all(len(c) == 1 for c in colours.values()), colours


def test_every_table_writes_a_missing_value_as_a_dash():
    """Streamlit writes "None" in an empty cell unless told otherwise: every table on every page tells it."""
    sources = [p for folder in ("pages", "ui") for p in (REPO / folder).glob("*.py")]
    calls = [(p.name, m.group(0)) for p in sources for m in re.finditer(r"st\.dataframe\((?:[^()]|\([^()]*\))*\)",
                                                                        p.read_text(), re.S)]
    assert calls and all("placeholder=" in call for _, call in calls), [c for c in calls if "placeholder=" not in c[1]]


def test_a_trace_that_expires_during_a_session_leaves_every_page_showing_something(long_trace):
    data = example(**{"workload.trace": {"path": long_trace, "format": "csv"}, "workload.num_requests": 2000})
    at = app(data).run()
    assert not at.exception and not at.error
    (trace_store.STORE_DIR / long_trace).unlink()
    for page in ("pages/hardware.py", "pages/workload.py", "pages/lab.py"):
        at.switch_page(page).run()
        assert not at.exception, page
        assert any("no longer on this server" in e for e in shown(at.error)), page
        assert at.get("plotly_chart") or at.metric, f"{page} shows nothing under the message"


def test_the_comparison_says_when_its_shorter_runs_differ_from_the_cards():
    at = app(example(**{"workload.arrival.rate_per_s": 3.2, "workload.num_requests": 20000})).run()
    assert any("runs the first 5,000 of the 20,000 requests" in i for i in shown(at.info))
    at = app(example(**{"workload.num_requests": 5000})).run()
    assert not any("runs the first" in i for i in shown(at.info))


def test_log_axes_only_where_values_span_orders_of_magnitude():
    fig = go.Figure()
    charts.log_axis(fig, [168.0, 176.0])
    assert fig.layout.yaxis.type is None, "close values keep a linear axis"
    charts.log_axis(fig, [100.0, 50_000.0])
    assert fig.layout.yaxis.type == "log" and fig.layout.yaxis.dtick == 1
    other = go.Figure()
    charts.log_axis(other, [100.0, 2999.0], "x")  # under 30x apart: linear
    assert other.layout.xaxis.type is None
