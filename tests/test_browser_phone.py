"""The Lab, the Planner and the Workshop on a phone (390 px wide) in a real browser: no chart's legend covers its plot,
no two axis titles meet, every target row of the Planner keeps its labels, a chapter's charts stand one under the
other, and the sidebar drawer closes once a page is chosen in it. Screenshots of both pages are saved in
tests/artifacts/ (phone_lab.png, phone_planner.png, and each chart of the Lab: phone_lab_chart_N.png)."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from test_browser import (ARTIFACTS, CDF_JS, TIMEOUT_MS, browser, browser_page, server,  # noqa: F401 - fixtures
                          wait_idle)

PHONE = {"width": 390, "height": 844}

# Per chart: the boxes of its plot area(s), its legend and its axis titles, in page pixels.
BOXES_JS = """Array.from(document.querySelectorAll('.js-plotly-plot')).map(p => {
  const box = e => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
  return {plots: Array.from(p.querySelectorAll('.draglayer .nsewdrag')).map(box),
          legend: Array.from(p.querySelectorAll('.legend .bg')).map(box),
          titles: Array.from(p.querySelectorAll('.g-xtitle text, [class^="g-x"][class$="title"] text'))
                       .filter(t => t.textContent.trim()).map(box)}; })"""


def overlap(a: list[float], b: list[float]) -> bool:
    """Whether two boxes (left, top, right, bottom) share more than a pixel each way."""
    return min(a[2], b[2]) - max(a[0], b[0]) > 1 and min(a[3], b[3]) - max(a[1], b[1]) > 1


@pytest.fixture
def phone(browser, request):  # noqa: F811 - the browser fixture
    yield from browser_page(browser, request, PHONE)


def test_lab_charts_keep_legends_and_axis_titles_clear_on_a_phone(server, phone):  # noqa: F811
    phone.goto(server + "/")
    phone.wait_for_selector("text=Per-class results")
    phone.wait_for_function(CDF_JS + " !== null", timeout=TIMEOUT_MS)
    wait_idle(phone)
    phone.get_by_text("Curves against load").scroll_into_view_if_needed()
    phone.wait_for_function("document.querySelectorAll('.js-plotly-plot .legend').length >= 2", timeout=TIMEOUT_MS)
    wait_idle(phone)
    phone.screenshot(path=str(ARTIFACTS / "phone_lab.png"), full_page=True)
    for i in range(phone.locator(".js-plotly-plot").count()):
        chart = phone.locator(".js-plotly-plot").nth(i)
        if chart.is_visible():  # the timeline waits in its tab
            chart.screenshot(path=str(ARTIFACTS / f"phone_lab_chart_{i}.png"))
    charts = phone.evaluate(BOXES_JS)
    assert len([c for c in charts if c["legend"]]) >= 2, "the comparison and the curves have legends"
    for chart in charts:
        for legend in chart["legend"]:
            assert not any(overlap(legend, plot) for plot in chart["plots"]), chart
        titles = chart["titles"]
        assert not any(overlap(a, b) for i, a in enumerate(titles) for b in titles[i + 1:]), chart


def test_planner_target_rows_keep_their_labels_on_a_phone(server, phone):  # noqa: F811
    phone.goto(server + "/planner")
    phone.wait_for_selector("text=Target 3: limit")
    wait_idle(phone)
    phone.screenshot(path=str(ARTIFACTS / "phone_planner.png"), full_page=True)
    for row in (1, 2, 3):
        for what in ("class", "metric", "limit"):
            label = phone.locator('[data-testid="stWidgetLabel"]', has_text=f"Target {row}: {what}")
            assert label.count() == 1 and label.first.is_visible(), (row, what)


def test_a_chapters_charts_stand_one_under_the_other_on_a_phone(server, phone):  # noqa: F811
    """Chapter 9 draws three metrics: on a 390 px screen each is a chart of the screen's width, one under the
    other (side by side they were a third of it each)."""
    phone.goto(f"{server}/workshop?chapter=09-min-batch-and-wait&presenter=1")
    phone.get_by_role("button", name="Show the answer").click()
    plots = phone.locator(".js-plotly-plot")
    plots.nth(2).wait_for(timeout=TIMEOUT_MS)
    wait_idle(phone)
    phone.screenshot(path=str(ARTIFACTS / "phone_workshop.png"), full_page=True)
    boxes = [plots.nth(i).bounding_box() for i in range(plots.count())]
    assert len(boxes) == 3
    for box in boxes:
        assert box["width"] >= 0.8 * PHONE["width"] - 40, boxes
    assert boxes[0]["y"] + boxes[0]["height"] <= boxes[1]["y"] + 1 and \
        boxes[1]["y"] + boxes[1]["height"] <= boxes[2]["y"] + 1, "one under the other"


def test_the_drawer_closes_once_a_page_is_chosen_and_stays_open_while_the_scenario_is_edited(server, phone):  # noqa
    phone.goto(server + "/workload")
    phone.wait_for_selector("text=Classes and distributions")
    wait_idle(phone)
    drawer = phone.locator('[data-testid="stSidebar"]')
    phone.get_by_test_id("stExpandSidebarButton").first.click()
    expect(drawer).to_have_attribute("data-collapsed", "false")
    preset = phone.get_by_role("combobox", name="Load a preset")
    preset.click()
    preset.press_sequentially("priority")
    preset.press("Enter")
    wait_idle(phone)
    expect(drawer).to_have_attribute("data-collapsed", "false")  # a rerun of the same page leaves it open
    phone.get_by_role("link", name="Planner").click()
    phone.wait_for_selector("text=Your workload")
    expect(drawer).to_have_attribute("data-collapsed", "true", timeout=TIMEOUT_MS)
