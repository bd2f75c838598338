"""The Planner page (AppTest): asks the question with its controls, plans when asked, shows the recommendation,
the alternatives and what was not possible, and keeps the question in the link."""

from streamlit.testing.v1 import AppTest

from conftest import REPO, SCENARIOS
from engine.scenario.config import read_toml
from ui import state, view
from ui.state import encode

ARTICLE = read_toml(SCENARIOS / "article_mixed_8xa100.toml")
QUICK = {"plan_gpus": ["A100-80G", "H100-80G"], "plan_seeds": 2, "plan_requests": 500, "cost_currency": "USD"}


def planner(choices: dict | None = None) -> AppTest:
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=300)
    at.query_params[state.QUERY_KEY] = encode(ARTICLE)
    at.query_params[view.QUERY_KEY] = encode({**QUICK, **(choices or {})})
    at.run()
    at.switch_page("pages/planner.py").run()
    return at


def shown(elements) -> list[str]:
    """The elements' texts as read on the page (without the escapes that keep names plain text)."""
    return [e.value.replace("\\", "").replace("\u2060", "") for e in elements]


def test_the_page_asks_the_first_class_sla_and_plans_on_request():
    at = planner()
    assert not at.exception and not at.error
    assert at.selectbox(key="plan_class_0").value == "interactive"
    assert at.selectbox(key="plan_metric_0").value == "ttft_p99_ms"
    assert at.number_input(key="plan_limit_0").value == 1000
    assert at.selectbox(key="plan_metric_1").value == "none" and not at.success, "nothing runs before Plan"
    next(b for b in at.button if b.label == "Plan").click().run()
    assert not at.exception and not at.error
    recommended = shown(at.success)[0]
    assert recommended.startswith("Recommended: ") and "USD per month" in recommended
    assert "interactive TTFT p99" in recommended and ("step times roofline, family calibrated" in recommended
                                                      or "step times measured kernels" in recommended)
    assert at.dataframe and at.get("plotly_chart")
    assert any("runs in" in c for c in shown(at.caption))
    at.number_input(key="plan_limit_0").set_value(500.0).run()
    assert not at.success and any("press Plan" in i for i in shown(at.info)), "an old answer is not shown as new"


def test_a_throughput_target_reads_at_least_and_a_bad_question_is_one_line():
    at = planner({"plan_metric_1": "output_tokens_per_s", "plan_class_1": "offline", "plan_limit_1": 100.0})
    assert not at.exception and not at.error
    assert at.selectbox(key="plan_metric_1").value == "output_tokens_per_s"
    at.multiselect(key="plan_gpus").set_value([]).run()
    assert not at.exception and shown(at.error) == ["choose at least one GPU to consider."]


def test_business_terms_set_the_scenarios_rate_and_a_budget_too_small_says_so():
    at = planner({"plan_users": 20000.0, "plan_requests_per_user": 30.0, "plan_peak_factor": 3.0,
                  "plan_budget": 100.0})
    assert any("20,000 users x 30 requests a day x peak factor 3 = 20.8 req/s at the peak" in c
               for c in shown(at.caption))
    next(b for b in at.button if b.label == "Use 20.8 req/s as the arrival rate").click().run()
    assert not at.exception and not at.error
    assert at.session_state["scenario"]["workload"]["arrival"]["rate_per_s"] == 20.83
    next(b for b in at.button if b.label == "Plan").click().run()
    assert any(w.startswith("No fleet that meets every target fits the budget of 100 USD per month")
               for w in shown(at.warning))


def test_the_whole_day_is_asked_on_the_planner_a_shape_its_mean_and_peak_and_back_to_one_rate():
    at = planner()
    mode = next(s for s in at.selectbox if s.label == "Traffic over the day")
    assert mode.value == "One rate (the busiest hour's)"
    mode.set_value("A day's shape").run()
    assert not at.exception and not at.error
    arrival = at.session_state["scenario"]["workload"]["arrival"]
    assert arrival["shape"] == "servegen-language-small-day"
    rate = arrival["rate_per_s"]
    assert any(c.endswith("req/s at the lowest; the answer prices the day three ways.") for c in shown(at.caption))
    assert any(e.label == "Traffic in business terms (now " + f"{rate:,.3g}" + " req/s on average)"
               for e in at.expander)
    mode = next(s for s in at.selectbox if s.label == "Traffic over the day")
    mode.set_value("One rate (the busiest hour's)").run()
    arrival = at.session_state["scenario"]["workload"]["arrival"]
    assert "shape" not in arrival and arrival["rate_per_s"] > rate, "one rate: the shape's peak, not its mean"


def test_the_lab_opened_on_a_plan_judges_the_planners_targets_and_shows_tpot_p99():
    """What "Open this fleet in the Lab" leaves for the Lab (its click is followed end to end in
    tests/test_browser.py): the targets judged on the Lab's run, apart from the classes' own SLA."""
    at = planner()
    at.session_state[state.PLAN_TARGETS] = {
        "targets": [{"cls": "interactive", "key": "ttft_p99_ms", "limit": 1000.0},
                    {"cls": "interactive", "key": "tpot_p99_ms", "limit": 0.001}],
        "scenario": at.session_state["scenario"], "seeds": 2, "requests": 500}
    at.switch_page("pages/lab.py").run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    said = "\n".join(shown(at.markdown))
    assert "The Planner's targets on this run" in said and "changed since" not in said
    assert "interactive TTFT p99 <= 1.00 s: " in said and ", met" in said
    assert "interactive TPOT p99 <= " in said
    assert "**missed**" in said, "a TPOT p99 under a microsecond is missed"
    assert any("The cards' SLA met is each class's own SLA" in c for c in shown(at.caption))
    assert [m for m in at.metric if m.label == "TPOT p99"]


def test_a_link_whose_plan_used_your_price_list_says_it_is_missing_and_can_drop_it():
    """A link cannot carry the uploaded file: it names it, and the page says it must be uploaded again before
    planning with it, instead of pricing silently with the built-in offers."""
    at = planner({"plan_price_list_named": "acme-prices.csv, 2 offers, sha256 0123456789ab"})
    assert not at.exception
    [warning] = shown(at.warning)
    assert "priced with your own price list (acme-prices.csv, 2 offers, sha256 0123456789ab)" in warning
    assert "upload it again" in warning
    next(b for b in at.button if b.label == "Plan with the built-in offers instead").click().run()
    assert not at.exception and not at.warning
    linked = at.query_params[view.QUERY_KEY]
    assert not state.decode(linked if isinstance(linked, str) else linked[0]).get("plan_price_list_named"), \
        "the link names no price list any more"


def test_a_link_with_an_exchange_rate_out_of_range_prices_at_the_default_on_every_page():
    """``cost_fx`` 1e308 (and a currency that is none) in a link opened straight on the Planner or on Hardware &
    Cost: the default rate and currency, no error, where the Planner refused to plan."""
    for page in ("pages/planner.py", "pages/hardware.py"):
        at = AppTest.from_file(str(REPO / "app.py"), default_timeout=300)
        at.query_params[state.QUERY_KEY] = encode(ARTICLE)
        at.query_params[view.QUERY_KEY] = encode({**QUICK, "cost_fx": 1e308, "cost_currency": "XYZ"})
        at.switch_page(page).run()
        assert not at.exception and not at.error, (page, shown(at.error))
    next(b for b in at.switch_page("pages/planner.py").run().button if b.label == "Plan").click().run()
    assert not at.error and shown(at.success)[0].startswith("Recommended: ")


def test_the_formats_accepted_start_at_the_models_release_for_a_16_bit_scenario():
    """A scenario of DeepSeek-R1 left at 16-bit weights: the page asks for FP8, the format DeepSeek releases, until
    the customer names others; the article's INT4 scenario keeps INT4."""
    import copy
    data = copy.deepcopy(ARTICLE)
    data["server"].update({"model": "DeepSeek-R1", "quant": "fp16", "step_model": "roofline"})
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=300)
    at.query_params[state.QUERY_KEY] = encode(data)
    at.query_params[view.QUERY_KEY] = encode(QUICK)
    at.run()
    at.switch_page("pages/planner.py").run()
    assert not at.exception and at.multiselect(key="plan_quants").value == ["fp8"]
    assert planner().multiselect(key="plan_quants").value == [ARTICLE["server"]["quant"]]
