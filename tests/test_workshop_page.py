"""The Workshop and Article pages (AppTest): every chapter opens from its link, runs its experiment once the
learner has predicted, and checks its exercise right and wrong; the presenter view shows one chart on demand;
the article page shows the article's table beside the simulated one at each load, and every claim's verdict."""

from __future__ import annotations

import json

import pytest
from streamlit.testing.v1 import AppTest

from conftest import REPO
from engine.teach import article, workshop

CHAPTERS = {c.id: c for c in workshop.load_chapters()}


def open_page(path: str, params: dict[str, str]) -> AppTest:
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=300)
    at.run()
    for key, value in params.items():
        at.query_params[key] = value
    at.switch_page(path).run()
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    return at


def shown(elements) -> list[str]:
    return [e.value.replace("\\", "").replace("\u2060", "") for e in elements]


def set_answer(at: AppTest, chapter: workshop.Chapter, values: dict) -> None:
    """Enter ``values`` in the exercise's inputs, whatever widget each field has."""
    for i, field in enumerate(chapter.fields):
        key, value = f"ws_{chapter.id}_field_{i}", values[field.path]
        widget = next(w for kind in ("number_input", "selectbox", "toggle", "text_input")
                      for w in getattr(at, kind) if w.key == key)
        widget.set_value(value)
    at.run()


def check(at: AppTest, chapter: workshop.Chapter) -> list[str]:
    next(b for b in at.button if b.key == f"ws_{chapter.id}_check").click().run()
    assert not at.exception, at.exception
    return shown(at.success) + shown(at.error)


@pytest.mark.parametrize("cid", sorted(CHAPTERS))
def test_a_chapter_opens_from_its_link_and_checks_its_exercise(cid):
    chapter = CHAPTERS[cid]
    at = open_page("pages/workshop.py", {"chapter": cid})
    assert at.selectbox(key="ws_chapter").value == cid
    assert not at.get("plotly_chart"), "the experiment waits for the learner's prediction"
    wrong = next(c for c in chapter.choices if c != chapter.answer)
    at.radio(key=f"ws_{cid}_guess").set_value(wrong).run()
    assert any(w.startswith("Not quite") for w in shown(at.warning))
    at.radio(key=f"ws_{cid}_guess").set_value(chapter.answer).run()
    assert "Right. The experiment below shows it." in shown(at.success)
    assert len(at.get("plotly_chart")) == len(chapter.chart_metrics), "a chart per metric"
    assert "✗ does not hold" not in " ".join(shown(at.markdown)), "what the learner should see holds"
    set_answer(at, chapter, chapter.start_values())
    assert any(m.startswith("Not yet") for m in check(at, chapter)), "the exercise starts wrong"
    set_answer(at, chapter, dict(chapter.solution))
    assert "Solved: every goal is met." in check(at, chapter)


def revealed(cid: str) -> tuple[AppTest, dict]:
    """The chapter's page once the learner has predicted: the page and its chart's figure (Plotly JSON)."""
    at = open_page("pages/workshop.py", {"chapter": cid})
    at.radio(key=f"ws_{cid}_guess").set_value(CHAPTERS[cid].answer).run()
    return at, json.loads(at.get("plotly_chart")[0].proto.spec)


def test_a_chapter_says_where_it_sits_and_lists_unstable_runs_in_the_knob_order():
    at, fig = revealed("01-continuous-batching")
    captions = shown(at.caption)
    assert f"Chapter 1 of {len(CHAPTERS)}" in captions
    assert any(c.endswith("growing backlog): 1, 4, 16.") for c in captions), captions
    assert any(c.startswith("Offered load (an estimate) of each run: 1: ") for c in captions), captions


@pytest.mark.parametrize("cid, axis, direction", [("01-continuous-batching", "log", True),
                                                  ("14-rental-terms", "linear", True),
                                                  ("07-dynamic-cost", "log", "reversed"),
                                                  ("04-strict-priority", "category", None)])
def test_a_numeric_knob_sits_on_a_numeric_axis(cid, axis, direction):
    """1 to 256 sequences on a log axis, 2 to 24 hours on a linear one (a cost in proportion to the hours is a
    straight line), an SLA lowered from 60 s to 1 s read from the right, named settings as categories in their
    order."""
    _, fig = revealed(cid)
    assert fig["layout"]["xaxis"]["type"] == axis and fig["layout"]["xaxis"].get("autorange") == direction
    xs = fig["data"][0]["x"]
    expected = [o.x for o in CHAPTERS[cid].options] if axis != "category" else \
        [o.label for o in CHAPTERS[cid].options]
    assert xs == expected
    if axis != "category":
        assert fig["layout"]["xaxis"]["ticktext"][0] == CHAPTERS[cid].options[0].label + \
            (" (unstable)" if cid.startswith("01") else "")


def test_an_answer_about_two_metrics_draws_two_charts_and_one_legend():
    """One chart per metric, side by side in columns (stacked on a phone); each series in one legend."""
    at, _ = revealed("02-prefill-and-decode")
    figs = [json.loads(chart.proto.spec) for chart in at.get("plotly_chart")]
    assert [f["layout"]["yaxis"]["title"]["text"] for f in figs] == ["TPOT p99 (ms)", "TTFT p99 (ms)"]
    assert [[t["name"] for t in f["data"]] for f in figs] == [["chat", "batch"], ["chat", "batch"]]
    assert [[t.get("showlegend", True) for t in f["data"]] for f in figs] == [[True, True], [False, False]]
    at, _ = revealed("09-min-batch-and-wait")  # the fleet's two charts, then the classes': each series listed once
    figs = [json.loads(chart.proto.spec) for chart in at.get("plotly_chart")]
    assert [[(t["name"], t.get("showlegend", True)) for t in f["data"]] for f in figs] == \
        [[("fleet", True)], [("fleet", False)], [("interactive", True), ("offline", True)]]


def test_exercise_choices_that_are_codes_show_their_words():
    at = open_page("pages/workshop.py", {"chapter": "11-preemption-modes"})
    mode = at.selectbox(key="ws_11-preemption-modes_field_1")
    assert mode.options == ["Keep on the GPU", "Swap to host memory", "Recompute"] and mode.value == "recompute"


def test_next_moves_to_the_next_chapter_and_the_link_follows():
    first, second = sorted(CHAPTERS)[:2]
    at = open_page("pages/workshop.py", {"chapter": first})
    next(b for b in at.button if b.label == "Next").click().run()
    assert at.selectbox(key="ws_chapter").value == second and at.query_params["chapter"] == second


def test_an_unknown_chapter_link_opens_the_first():
    at = open_page("pages/workshop.py", {"chapter": "../etc/passwd"})
    assert at.selectbox(key="ws_chapter").value == sorted(CHAPTERS)[0]


def test_open_in_the_lab_makes_the_chapter_scenario_the_lab_scenario():
    chapter = CHAPTERS["04-strict-priority"]
    at = open_page("pages/workshop.py", {"chapter": chapter.id})
    set_answer(at, chapter, dict(chapter.solution))
    next(b for b in at.button if b.key == f"ws_{chapter.id}_lab").click().run()
    scenario = at.session_state["scenario"]
    assert scenario["policy"]["name"] == "priority" and scenario["workload"]["arrival"]["rate_per_s"] == 38.0


def test_the_presenter_view_shows_the_question_then_one_chart_on_demand():
    chapter = CHAPTERS["07-dynamic-cost"]
    at = open_page("pages/workshop.py", {"chapter": chapter.id, "presenter": "1"})
    assert at.title[0].value == chapter.title and not at.get("plotly_chart") and not at.radio
    assert shown(at.caption)[0] == f"Chapter 7 of {len(CHAPTERS)}"
    next(b for b in at.button if b.label == "Show the answer").click().run()
    assert len(at.get("plotly_chart")) == len(chapter.chart_metrics) == 2
    assert f"{chapter.prompt} **{chapter.answer}**" in [m.value for m in at.markdown], "the prediction, completed"
    next(b for b in at.button if b.label == "Hide the answer").click().run()
    assert not at.get("plotly_chart") and chapter.question in [m.value for m in at.markdown]
    next(b for b in at.button if b.label == "Show the answer").click().run()
    following = CHAPTERS["08-sjf-and-predictors"]
    next(b for b in at.button if b.label == "Next chapter").click().run()
    assert at.title[0].value == following.title and at.query_params["chapter"] == following.id
    next(b for b in at.button if b.label == "Leave presenter view").click().run()
    assert "presenter" not in at.query_params and at.session_state["ws_chapter"] == following.id


def test_the_article_page_shows_both_tables_at_every_load_and_the_verdicts():
    at = open_page("pages/article.py", {})
    subheaders = shown(at.subheader)
    assert subheaders[0].startswith("50 req/s: the article's load") and len(subheaders) == 4
    frames = [d.value for d in at.dataframe]
    assert len(frames) == 4, "the article's figures beside the simulated ones at three loads, then the claims"
    table = frames[0]
    assert list(table.columns) == ["figure", "source", *article.POLICIES]
    article_row = table[(table["figure"] == "interactive TTFT p99 (ms)") & (table["source"] == "the article")]
    assert article_row["FIFO"].item() == "7,000"
    assert table.loc[article_row.index[0] + 1, "source"] == "simulated", "each simulated figure right below"
    preemptions = table[table["figure"] == "preemptions"]
    assert preemptions["source"].item() == "simulated" and preemptions["WFQ 70/30"].item() == "0", \
        "WFQ does not preempt as the article describes it"
    claims = frames[-1]
    assert list(claims.index) == [c.text for c in article.CLAIMS]
    assert (claims.iloc[:, 0] == "no").all(), "at the article's load nothing queues, so no ordering appears"
    assert claims.loc["strict priority cuts interactive TTFT p50 and p99 against FIFO"].iloc[1:].eq("yes").all()
    assert any("Where the simulation disagrees" in m for m in shown(at.markdown))


def test_every_policy_preempting_is_a_choice():
    at = open_page("pages/article.py", {})
    at.toggle(key="article_preempt").set_value(True).run()
    table = at.dataframe[1].value  # the first contended load
    preemptions = table.loc[table["figure"] == "preemptions", "WFQ 70/30"].item()
    assert int(preemptions.replace(",", "")) > 0


def test_a_chart_that_spans_orders_of_magnitude_is_drawn_on_a_log_axis():
    """Chapter 20's TTFT p99 runs from 40 ms to 24 s: its chart is logarithmic; its SLA chart stays linear."""
    at, _ = revealed("20-bursts-and-autoscaling")
    ttft, sla = [json.loads(chart.proto.spec)["layout"]["yaxis"] for chart in at.get("plotly_chart")]
    assert ttft.get("type") == "log" and sla.get("type") != "log" and sla["title"]["text"] == "SLA met (%)"
