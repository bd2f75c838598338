"""The Lab says when the load is too low for the policies to differ, and offers the rate at which they do."""

import pandas as pd
from streamlit.testing.v1 import AppTest

from conftest import REPO, SCENARIOS
from engine.scenario.config import apply_overrides, load_scenario, read_toml
from engine.sim.simulate import estimated_offered_load
from engine.sim.sweep import TEACHING_LOAD, policies_differ, rate_for_load
from ui import state


def lab(data: dict) -> AppTest:
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=300)
    at.query_params[state.QUERY_KEY] = state.encode(data)
    at.run()
    return at


def shown(elements) -> list[str]:
    return [e.value.replace("\\", "").replace("\u2060", "") for e in elements]


def test_policies_differ_only_beyond_five_percent():
    rows = [("fifo", "a", 100.0), ("priority", "a", 104.0), ("fifo", "b", 50.0), ("priority", "b", 51.0),
            ("fifo", "overall", 10.0), ("priority", "overall", 90.0)]
    frame = pd.DataFrame(rows, columns=["policy", "class", "ttft_p99_ms"])
    assert not policies_differ(frame), "within 5% for every class; overall is not a class"
    frame.loc[1, "ttft_p99_ms"] = 106.0
    assert policies_differ(frame)
    assert rate_for_load(2.0, 0.5) == 3.8 and rate_for_load(2.0, 0.5, 0.5) == 2.0


def test_a_low_load_is_named_and_raising_it_brings_the_load_where_queues_form():
    calm = apply_overrides(read_toml(SCENARIOS / "example.toml"), {"workload.arrival.rate_per_s": 0.8,
                                                                   "workload.num_requests": 3000})
    at = lab(calm)
    assert not at.exception and not at.error
    assert any(i.startswith("The policies hardly differ here: at an offered load of 0.2") for i in shown(at.info))
    button = next(b for b in at.button if b.label.startswith("Raise the arrival rate to "))
    button.click().run()
    assert not at.exception and not at.error
    raised = at.session_state["scenario"]
    load = estimated_offered_load(load_scenario(raised))
    assert abs(load - TEACHING_LOAD) < 0.02 and f"{raised['workload']['arrival']['rate_per_s']:g} req/s" in button.label
    assert not any(i.startswith("The policies hardly differ") for i in shown(at.info)), "at 0.95 they differ"


def test_near_saturation_with_a_roomy_batch_the_note_names_the_batch_not_the_load():
    """The article preset at offered load 0.95: its batch of 256 sequences never fills, so raising the load does
    not help; the note points at the batch limit instead, and offers no raise."""
    article = read_toml(SCENARIOS / "article_mixed_8xa100.toml")
    rate = rate_for_load(article["workload"]["arrival"]["rate_per_s"],
                         estimated_offered_load(load_scenario(article)))
    at = lab(apply_overrides(article, {"workload.arrival.rate_per_s": rate, "workload.num_requests": 5000}))
    assert not at.exception and not at.error
    said = next(i for i in shown(at.info) if i.startswith("The policies hardly differ"))
    assert "even at an offered load of 0.9" in said and "of at most 256" in said
    assert not any(b.label.startswith("Raise the arrival rate") for b in at.button)
