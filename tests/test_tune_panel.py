"""The Lab's tuning panel (AppTest): asks objective and constraints, tunes when asked, shows the best point
against the scenario as it is with its response surface and [policy] block, and makes it the Lab's scenario."""

from streamlit.testing.v1 import AppTest

from conftest import REPO, SCENARIOS
from engine.scenario.config import apply_overrides, read_toml
from ui import state, view
from ui.state import encode

BUSY = apply_overrides(read_toml(SCENARIOS / "article_mixed_8xa100.toml"),
                       {"server.max_batch_size": 64, "workload.arrival.rate_per_s": 45.0,
                        "workload.num_requests": 1500})
QUICK = {"tune_candidates": 30, "tune_seeds": 1, "tune_c_limit_0": 30000.0}


def lab(choices: dict | None = None) -> AppTest:
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=300)
    at.query_params[state.QUERY_KEY] = encode(BUSY)
    at.query_params[view.QUERY_KEY] = encode({**QUICK, **(choices or {})})
    at.run()
    assert not any(box.key == "tune_class" for box in at.selectbox), "a closed panel runs nothing"
    at.session_state["tune_open"] = True  # the user opens the panel
    at.run()
    return at


def shown(elements) -> list[str]:
    return [e.value.replace("\\", "").replace("\u2060", "") for e in elements]


def test_the_panel_tunes_on_request_and_its_best_point_becomes_the_scenario():
    at = lab()
    assert not at.exception and not at.error
    assert at.selectbox(key="tune_class").value == "interactive" and at.selectbox(key="tune_metric").value == \
        "ttft_p99_ms"
    assert at.selectbox(key="tune_c_class_0").value == "*" and at.selectbox(key="tune_c_metric_0").value == \
        "longest_wait_ms"
    assert not any(s.startswith("Best: ") for s in shown(at.success)), "nothing runs before Tune"
    next(b for b in at.button if b.label == "Tune").click().run()
    assert not at.exception and not at.error
    best = next(s for s in shown(at.success) if s.startswith("Best: "))
    assert "every constraint met" in best
    assert any("same requests for every candidate" in c for c in shown(at.caption))
    assert any(c.language == "toml" and "[policy]" in c.value for c in at.code)
    charts = [c.proto.spec for c in at.get("plotly_chart")]
    assert sum('"chosen"' in spec for spec in charts) == 3, "the objective and each class's longest wait, starred"
    chosen_policy = best.split(",")[0].removeprefix("Best: ")
    next(b for b in at.button if b.label == "Use the best settings in the Lab").click().run()
    assert not at.exception and not at.error
    policy = at.session_state["scenario"]["policy"]
    assert policy["name"] in ("dynamic", "priority", "wfq") and chosen_policy.startswith(
        {"dynamic": "Dynamic", "priority": "Strict", "wfq": "Weighted"}[policy["name"]])


def test_a_changed_question_hides_the_old_answer_and_a_bad_one_is_one_line():
    at = lab({"tune_policies": ["wfq"], "tune_candidates": 10})
    next(b for b in at.button if b.label == "Tune").click().run()
    assert any(s.startswith("Best: ") for s in shown(at.success))
    at.number_input(key="tune_c_limit_0").set_value(20000.0).run()
    assert any("press Tune" in i for i in shown(at.info)), "an old answer is not shown as new"
    at.multiselect(key="tune_policies").set_value([]).run()
    assert not at.exception and "give at least one policy to tune" in shown(at.error)[0]
