"""The workshop on a projector, in a real browser (Chromium driven by Playwright, as tests/test_browser.py): at
1440 x 900 every chapter's presenter view says which chapter of how many it is, and once the answer is shown its
chart sits whole on the screen, with no scrolling; a numeric knob is drawn on a numeric axis."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from engine.teach import workshop
from test_browser import ARTIFACTS, TIMEOUT_MS, browser, browser_page, server, wait_idle  # noqa: F401 (fixtures)

PROJECTOR = {"width": 1440, "height": 900}
TOP_JS = """(() => { window.scrollTo(0, 0);
  for (const e of document.querySelectorAll('*')) if (e.scrollTop) e.scrollTop = 0; })()"""
CHART_JS = """(() => { const p = document.querySelector('.js-plotly-plot');
  return p && p.layout ? [p.layout.xaxis.type, p.data.length] : null; })()"""


@pytest.fixture
def projector(browser, request):  # noqa: F811 (the fixture imported above)
    yield from browser_page(browser, request, PROJECTOR)


def test_every_chapter_fits_a_projector_with_its_counter(server, projector):  # noqa: F811
    chapters = workshop.load_chapters()
    projector.goto(f"{server}/workshop?chapter={chapters[0].id}&presenter=1")
    for number, chapter in enumerate(chapters, start=1):
        projector.wait_for_selector(f"h1:has-text('{chapter.title}')")
        wait_idle(projector)
        projector.get_by_text(f"Chapter {number} of {len(chapters)}", exact=True).wait_for()
        plot = projector.locator(".js-plotly-plot")
        expect(plot).to_have_count(0, timeout=TIMEOUT_MS)  # the previous chapter's leaves once its rerun is done
        projector.get_by_role("button", name="Show the answer").click()
        expect(plot).to_have_count(len(chapter.chart_metrics), timeout=TIMEOUT_MS)  # a chart per metric
        wait_idle(projector)
        axis, traces = projector.wait_for_function(CHART_JS, timeout=TIMEOUT_MS).json_value()
        projector.evaluate(TOP_JS)
        projector.screenshot(path=str(ARTIFACTS / f"projector_{chapter.id}.png"))
        for each in plot.all():
            expect(each).to_be_visible()
            box = each.bounding_box()
            assert box["y"] >= 0 and box["y"] + box["height"] <= PROJECTOR["height"], (chapter.id, box)
        expected = ("log" if chapter.log_axis else "linear") if chapter.numeric else "category"
        assert axis == expected, (chapter.id, axis)
        assert traces >= 1
        if number < len(chapters):
            projector.get_by_role("button", name="Next chapter").click()
