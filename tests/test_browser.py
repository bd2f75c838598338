"""The main flow in a real browser: Debian's Chromium driven by Playwright against `streamlit run`.

Load the Lab, change the policy with the keyboard, see a KPI and a chart change, switch pages, and
reopen the shared link. Failed runs leave a screenshot in tests/artifacts/; every run writes the
measured update times to tests/artifacts/browser_timings.json.
"""

from __future__ import annotations

import base64
import html
import json
import re
import time
import tomllib
import zipfile
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout, expect, sync_playwright

import engine
from conftest import REPO, SCENARIOS, app_server
from engine.decide.cost import ELECTRICITY_USD_PER_KWH
from engine.decide.energy import board_power_w
from engine.scenario.config import apply_overrides, read_toml
from engine.scenario.metric_table import metric
from engine.teach import workshop
from ui import state, view

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
ARTIFACTS = REPO / "tests" / "artifacts"
TIMEOUT_MS = 120_000


@pytest.fixture(scope="module")
def server():
    ARTIFACTS.mkdir(exist_ok=True)
    with app_server(ARTIFACTS / "streamlit.log") as (url, _):
        yield url


@pytest.fixture(scope="module")
def browser():
    assert CHROMIUM.exists(), "Chromium is missing: run `bash .ci/setup` (apt-get install chromium)"
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser, request):
    yield from browser_page(browser, request, {"width": 1400, "height": 1600})


def browser_page(browser, request, viewport: dict):
    """A page of ``viewport`` size for one test (a fixture's body): a screenshot in tests/artifacts/ when it
    fails."""
    page = browser.new_page(viewport=viewport)
    page.set_default_timeout(TIMEOUT_MS)
    yield page
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        page.screenshot(path=str(ARTIFACTS / f"{request.node.name}.png"))
    page.close()


def wait_idle(page) -> None:
    """Until the script run finished: Streamlit's running indicator is gone and the Lab shows no cards of a run
    still refining (the indicator can appear a moment after the first cards are drawn)."""
    page.wait_for_function("!document.querySelector('[data-testid=\"stStatusWidget\"]')"
                           " && !document.body.innerText.includes('Refining: the cards')", timeout=TIMEOUT_MS)


def open_lab(page, url: str) -> None:
    page.goto(url)
    page.wait_for_selector("text=Per-class results")
    page.wait_for_function(CDF_JS + " !== null", timeout=TIMEOUT_MS)
    wait_idle(page)


FIRST_TTFT_P99_JS = """(() => {
  for (const m of document.querySelectorAll('[data-testid="stMetric"]')) {
    if (m.querySelector('[data-testid="stMetricLabel"]').innerText.trim() === 'TTFT p99')
      return m.querySelector('[data-testid="stMetricValue"]').innerText.trim();
  }
  return null; })()"""
CDF_JS = """(() => {
  for (const p of document.querySelectorAll('.js-plotly-plot')) {
    const t = p.layout && p.layout.xaxis && p.layout.xaxis.title;
    if (t && String(t.text).startsWith('TTFT')) return JSON.stringify(p.data.map(d => d.x));
  }
  return null; })()"""


ALL_KPIS_JS = ("""Array.from(document.querySelectorAll('[data-testid="stMetricValue"]'))"""
               """.map(e => e.innerText).join('|')""")


def timed_key_press(page, control, key: str) -> dict:
    """Press ``key`` on ``control``; seconds until a KPI card changed and until the run ended."""
    kpis_before = page.evaluate(ALL_KPIS_JS)
    started = time.monotonic()
    control.press(key)
    page.wait_for_function(f"{ALL_KPIS_JS} !== {json.dumps(kpis_before)}", timeout=TIMEOUT_MS)
    kpi_s = time.monotonic() - started
    wait_idle(page)
    return {"to_kpi_s": kpi_s, "to_all_charts_s": time.monotonic() - started}


def test_page_link_on_a_fresh_server_gets_the_app_navigation(server, page):
    """The first request of a new server is a page URL: it must still run through app.py."""
    page.goto(server + "/method")
    page.wait_for_selector("text=Validation against queueing theory")
    nav = page.locator('[data-testid="stSidebarNav"]').inner_text()
    assert "Scheduler Lab" in nav and "Workload" in nav and "app" not in nav.split()


def test_lab_policy_change_shared_link_and_pages(server, page, browser):
    open_lab(page, server + "/")
    kpi_before = page.evaluate(FIRST_TTFT_P99_JS)
    cdf_before = page.evaluate(CDF_JS)
    assert kpi_before and cdf_before

    policy = page.get_by_role("combobox", name="Policy")
    policy.click()
    policy.press_sequentially("Strict")
    timings = {"policy_change": timed_key_press(page, policy, "Enter")}
    # The chart redraws asynchronously after the run: wait (bounded) for the new data.
    page.wait_for_function(f"{FIRST_TTFT_P99_JS} !== {json.dumps(kpi_before)}", timeout=TIMEOUT_MS)
    page.wait_for_function(f"{CDF_JS} !== {json.dumps(cdf_before)}", timeout=TIMEOUT_MS)

    rate = page.get_by_role("slider", name="Arrival rate (req/s)")
    rate.focus()
    timings["rate_change"] = timed_key_press(page, rate, "ArrowRight")
    kpi_after = page.evaluate(FIRST_TTFT_P99_JS)
    (ARTIFACTS / "browser_timings.json").write_text(json.dumps(timings, indent=2))

    shared_link = page.url
    assert "?s=" in shared_link
    page.get_by_role("link", name="Workload").click()
    page.wait_for_selector("text=Classes and distributions")
    assert urlsplit(page.url).path == "/workload"

    other = browser.new_page(viewport={"width": 1400, "height": 1600})
    other.set_default_timeout(TIMEOUT_MS)
    try:
        open_lab(other, shared_link)
        assert other.get_by_role("combobox", name="Policy").input_value() == "Strict priority levels"
        other.wait_for_function(f"{FIRST_TTFT_P99_JS} === {json.dumps(kpi_after)}", timeout=TIMEOUT_MS)
    except Exception:
        other.screenshot(path=str(ARTIFACTS / "shared_link.png"))
        raise
    finally:
        other.close()


def test_the_labs_cost_says_the_most_energy_the_fleet_draws(server, page):
    """A fleet of real cards is priced on the Lab with its energy beside the rent: at most every card's board power
    limit, per 1M output tokens, with what it costs and that a rental's price includes it."""
    open_lab(page, f"{server}/?{state.QUERY_KEY}={state.encode(read_toml(SCENARIOS / 'chat_and_batch_a100_8b.toml'))}")
    page.get_by_role("heading", name="Cost").scroll_into_view_if_needed()
    said = page.inner_text("body").replace("\u2060", "")
    watts, price = f"{board_power_w('A100-80G'):,.0f}", re.escape(f"{ELECTRICITY_USD_PER_KWH:g}")
    assert re.search(rf"Energy: at most [\d.,]+ kWh per 1M output tokens \(1 card at its {watts} W board power limit "
                     rf"the whole time\), [\d.,]+ USD at {price} USD/kWh, which a rental's price includes", said), said
    caption = page.locator('[data-testid="stCaptionContainer"]').filter(has_text=re.compile(r"Energy")).first
    caption.scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "lab_cost_energy.png"))


def test_the_engines_own_scheduler_knobs_read_as_words_beside_the_engine(server, page):
    """ATOM with data-parallel attention: its prefill delayer and the knobs that tune it sit under the engine,
    labelled in words with their unit, with the release they were read from."""
    data = read_toml(SCENARIOS / "chat_and_batch_a100_8b.toml")
    data["workload"]["num_requests"] = 300
    data["server"].update({"step_model": "roofline", "gpu": "H100-80G", "model": "Qwen3-30B-A3B", "tensor_parallel": 2,
                           "expert_parallel": True, "attention_data_parallel": True, "engine": "atom"})
    open_lab(page, f"{server}/?{state.QUERY_KEY}={state.encode(data)}")
    page.get_by_text("Server: batching, memory, step time").click()
    toggle = page.get_by_text("Prefill delayer", exact=True)
    toggle.scroll_into_view_if_needed()
    said = page.inner_text("body").replace("\u2060", "")
    for label in ("Delayer fill target", "Delayer's longest hold (iterations)", "Delayer stall (iterations)",
                  "Delayer KV watermark",
                  "ATOM's own scheduler knobs, with its defaults as release ffdf3bb reads them"):
        assert label in said, label
    page.screenshot(path=str(ARTIFACTS / "lab_scheduler_knobs.png"))


def test_the_lab_says_what_a_client_waits_for_beyond_the_measured_kernels(server, page):
    """A server the operator tables time (vLLM on an H100): the Lab names the engine's measured fixed time per
    request under the step-time badge, and its field, empty, says the engine's measured figure stands."""
    data = read_toml(SCENARIOS / "chat_and_batch_a100_8b.toml")
    data["workload"]["num_requests"] = 300
    data["server"].update({"step_model": "roofline", "gpu": "H100-80G", "model": "Llama-3.1-8B", "engine": "vllm"})
    open_lab(page, f"{server}/?{state.QUERY_KEY}={state.encode(data)}")
    page.get_by_text("Server: batching, memory, step time").click()
    field = page.get_by_role("spinbutton", name="Client's fixed cost per request (ms)")
    field.scroll_into_view_if_needed()
    assert field.get_attribute("placeholder") == "measured"
    said = page.inner_text("body").replace("\u2060", "")
    assert ("Each request's time to first token and end-to-end latency include 11 ms the client sees beyond the "
            "iterations (HTTP, tokenizing, the first chunk), as measured for vLLM V1; \u201cClient's fixed cost per "
            "request\u201d replaces it.") in said
    page.get_by_text("Each request's time to first token and end-to-end").scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "lab_client_cost.png"))


def test_hardware_page_renders_its_charts(server, page):
    """The Hardware & Cost page on the default scenario: memory bar, iteration charts and the shapes table."""
    open_lab(page, server + "/")
    page.get_by_role("link", name="Hardware & Cost").click()
    page.wait_for_selector("text=Does it fit? Memory of one card")
    page.wait_for_selector("text=Same cards, other shapes")
    wait_idle(page)
    assert urlsplit(page.url).path == "/hardware"
    assert page.locator('[data-testid="stException"]').count() == 0
    page.wait_for_function("document.querySelectorAll('.js-plotly-plot').length >= 4", timeout=TIMEOUT_MS)
    assert "KV cache per server" in page.inner_text("body")


def test_planner_plans_and_its_download_holds_the_numbers_on_screen(server, page):
    """Plan the article preset on two GPUs in the browser; the JSON download's recommendation is what the page
    says, cost and target value included."""
    quick = {"plan_gpus": ["A100-80G", "H100-80G"], "plan_seeds": 2, "plan_requests": 600, "cost_currency": "USD"}
    link = (f"{server}/planner?{state.QUERY_KEY}={state.encode(read_toml(SCENARIOS / 'article_mixed_8xa100.toml'))}"
            f"&{view.QUERY_KEY}={state.encode(quick)}")
    page.goto(link)
    page.get_by_role("button", name="Plan").click()
    said = page.wait_for_selector("text=Recommended:", timeout=TIMEOUT_MS).inner_text()
    wait_idle(page)
    assert page.locator('[data-testid="stException"]').count() == 0
    with page.expect_download() as download:
        page.get_by_role("button", name="Download the plan (JSON)").click()
    answer = json.loads(Path(download.value.path()).read_text())
    wait_idle(page)
    best = answer["recommendation"]
    assert f"{best['replicas']} x TP{best['tensor_parallel']} {best['gpu']} through {best['offer']}" in said
    assert f"{best['monthly_cost']['low']:,.0f} USD per month" in said
    assert metric("ttft_p99_ms").text(best["targets"][0]["value"]) in said
    assert answer["diagnosis"] and answer["diagnosis"][0][:40] in page.inner_text("body").replace("\u2060", "")
    assert "Energy: at most" in page.inner_text("body").replace("\u2060", "")
    assert best["energy"]["kwh_per_1m_output_tokens_max"] > 0
    with page.expect_download() as download:
        page.get_by_role("button", name="Download the report (HTML)").click()
    report = Path(download.value.path()).read_text()
    on_screen = said.replace("\u2060", "").removeprefix("Recommended: ").strip()
    assert html.escape(on_screen) in report, "the report says what the page says"
    assert metric("ttft_p99_ms").text(best["targets"][0]["value"]) in report
    assert "127.0.0.1" not in report and 'download="scenario.toml"' in report, \
        "reached at a local address, the report carries its scenario, not a link a customer cannot open"
    with page.expect_download() as download:
        page.get_by_role("button", name="Download the report (PDF)").click()
    assert Path(download.value.path()).read_bytes().startswith(b"%PDF")
    shared = page.url  # the address bar now names the answer (plan_answer)
    colleague = page.context.browser.new_page(viewport={"width": 1400, "height": 1600})
    try:
        colleague.goto(shared)
        again = colleague.wait_for_selector("text=Recommended:", timeout=TIMEOUT_MS).inner_text()
        assert again == said, "the link reopens the question with its answer, kept on the server: no Plan pressed"
    finally:
        colleague.close()


HOSTILE_NAME = "![x](http://evil.example/i.png)[y](http://evil.example)<b>z</b>:red[r]$m$:+1:"


def test_names_with_markup_are_shown_as_text(server, page):
    """A link whose class and scenario names hold Markdown, HTML, colour and math markup: the page shows
    them as written, and the browser asks nothing of the addresses inside them."""
    data = read_toml(SCENARIOS / "example.toml")
    data["name"] = HOSTILE_NAME
    data["workload"]["classes"][0]["name"] = HOSTILE_NAME
    data["workload"]["num_requests"] = 2000
    outside = []
    page.on("request", lambda request: outside.append(request.url) if "evil" in request.url else None)
    open_lab(page, f"{server}/?{state.QUERY_KEY}={state.encode(data)}")
    page.screenshot(path=str(ARTIFACTS / "hostile_names.png"), full_page=True)
    assert not outside
    assert page.locator("img[src*=evil], a[href*=evil], [data-testid=stException]").count() == 0
    body = page.inner_text("body").replace("\u2060", "")  # the word joiners that keep addresses from linking
    assert HOSTILE_NAME in body, "the name is shown exactly as written"
    legends = page.evaluate("Array.from(document.querySelectorAll('.legendtext')).map(e => e.textContent)")
    assert any(HOSTILE_NAME in text for text in legends)


READABILITY_JS = """(() => {
  const cut = [];
  for (const value of document.querySelectorAll('[data-testid="stMetricValue"]')) {
    for (const el of [value, ...value.querySelectorAll('*')]) {
      if (el.scrollWidth > el.clientWidth + 1 || el.innerText.trim().endsWith('\u2026')) {
        cut.push(value.innerText.trim()); break;
      }
    }
  }
  const labels = Array.from(document.querySelectorAll(
    '[data-testid="stWidgetLabel"], [data-testid="stMetricLabel"], .gtitle, .xtitle, .ytitle, .legendtext'))
    .map(e => e.innerText || e.textContent);
  return {cut, labels, body: document.body.innerText}; })()"""
DOUBLED_UNIT = re.compile(r"\b([\w/%]+) \(\1\)|\(([^()]+)\)[^()]*\(\2\)|\b1 cards\b")
RAW_TEXT = re.compile(r"\bNone\b|\bnan\b|\bNaN\b|Traceback|\b[a-z]+_[a-z_]+_(ms|s|frac|tokens)\b")


def assert_reads_like_a_product(page, where: str) -> None:
    """No number cut off in its card, no label with its unit twice, no None, NaN, traceback or raw column name."""
    wait_idle(page)
    seen = page.evaluate(READABILITY_JS)
    assert not seen["cut"], f"{where}: numbers cut off in their cards: {seen['cut']}"
    doubled = [label for label in seen["labels"] if DOUBLED_UNIT.search(label)]
    assert not doubled, f"{where}: labels with a doubled unit: {doubled}"
    raw = sorted({m.group(0) for m in RAW_TEXT.finditer(seen["body"])})
    assert not raw, f"{where}: raw text on the page: {raw}"
    assert page.locator('[data-testid="stException"]').count() == 0, where


def choose(page, name: str, typed: str, tries: int = 3, stays: bool = True) -> None:
    """Pick the option starting with ``typed`` in select box ``name`` (again if a rerun redrew it away;
    ``stays``: the box keeps showing the choice, unlike the preset picker)."""
    box = page.get_by_role("combobox", name=name)
    for _ in range(tries):
        box.click()
        box.press_sequentially(typed)
        box.press("Enter")
        wait_idle(page)
        time.sleep(0.5)
        wait_idle(page)
        if not stays or box.input_value().lower().startswith(typed.lower()):
            return
    raise AssertionError(f"{name} did not take {typed!r}: {box.input_value()!r}")


def type_number(page, name: str, text: str) -> None:
    box = page.get_by_role("spinbutton", name=name)
    box.click()
    box.press("Control+a")
    box.press_sequentially(text)
    box.press("Enter")


def view_in_link(page) -> dict:
    query = parse_qs(urlsplit(page.url).query)
    return state.decode(query["v"][0]) if "v" in query else {}


def until_in_link(page, key: str, value, act, tries: int = 3) -> None:
    """Do ``act`` until the view in the address bar holds ``key = value`` (an edit typed while the page was
    still rerunning can be redrawn away; a user would type it again)."""
    for _ in range(tries):
        act()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            wait_idle(page)
            if view_in_link(page).get(key) == value:
                return
            time.sleep(0.5)
    raise AssertionError(f"{key} = {value!r} never reached the link: {view_in_link(page)}")


def test_a_first_visit_reads_like_a_product(server, page, browser):
    """Open, a preset, a load change, a policy change, Hardware & Cost, Workload and back, and a link that
    reopens the Hardware & Cost choices: at 1,400 and 1,920 px, nothing reads like a notebook."""
    open_lab(page, server + "/")
    assert "Start here" in page.inner_text("body")
    assert_reads_like_a_product(page, "Lab, first visit")
    page.screenshot(path=str(ARTIFACTS / "first_visit_lab.png"), full_page=True)
    page.set_viewport_size({"width": 1920, "height": 1600})
    assert_reads_like_a_product(page, "Lab at 1,920 px")
    page.set_viewport_size({"width": 1400, "height": 1600})

    choose(page, "Load a preset", "article", stays=False)
    page.wait_for_function("document.body.innerText.replaceAll('\\u2060', '').includes('article: mixed chat')")
    assert_reads_like_a_product(page, "Lab, article preset")
    rate = page.get_by_role("slider", name="Arrival rate (req/s)")
    rate.focus()
    rate.press("ArrowRight")
    assert_reads_like_a_product(page, "Lab, after a load change")
    choose(page, "Policy", "Dynamic")
    page.wait_for_function("""Array.from(document.querySelectorAll('.js-plotly-plot')).some(p =>
        p.data.some(d => d.name === 'Dynamic cost with preemption') &&
        String(p.layout.xaxis.title && p.layout.xaxis.title.text).startsWith('arrival rate'))""", timeout=TIMEOUT_MS)
    assert_reads_like_a_product(page, "Lab, dynamic policy")

    page.get_by_role("link", name="Hardware & Cost").click()
    page.wait_for_selector("text=Same cards, other shapes")
    until_in_link(page, "cost_currency", "USD", lambda: choose(page, "Currency", "USD"))
    until_in_link(page, "hw_target_ms", 2500, lambda: type_number(page, "At most (ms)", "2500"))
    assert_reads_like_a_product(page, "Hardware & Cost")
    page.screenshot(path=str(ARTIFACTS / "first_visit_hardware.png"), full_page=True)
    page.set_viewport_size({"width": 1920, "height": 1600})
    assert_reads_like_a_product(page, "Hardware & Cost at 1,920 px")
    link = page.url
    assert view_in_link(page)["hw_target_ms"] == 2500 and view_in_link(page)["cost_currency"] == "USD"

    page.get_by_role("link", name="Workload").click()
    page.wait_for_selector("text=Time between arrivals")
    assert_reads_like_a_product(page, "Workload")

    page.get_by_role("link", name="Scheduler Lab").click()
    page.wait_for_selector("text=Per-class results")
    assert_reads_like_a_product(page, "Lab, back from Hardware & Cost and Workload")
    assert page.get_by_role("combobox", name="Policy").input_value() == "Dynamic cost with preemption"

    other = browser.new_page(viewport={"width": 1400, "height": 1600})
    other.set_default_timeout(TIMEOUT_MS)
    try:
        other.goto(link)
        other.wait_for_selector("text=Same cards, other shapes")
        wait_idle(other)
        # Read once the page has drawn them (the first moments of a new session can show a control's minimum).
        expect(other.get_by_role("combobox", name="Currency")).to_have_value("USD", timeout=60_000)
        expect(other.get_by_role("spinbutton", name="At most (ms)")).to_have_value("2500", timeout=60_000)
        expect(other.locator("body")).to_contain_text("Fleet per month (USD)", timeout=60_000)
        assert_reads_like_a_product(other, "Hardware & Cost reopened from its link")
    except Exception:
        other.screenshot(path=str(ARTIFACTS / "hardware_link.png"), full_page=True)
        raise
    finally:
        other.close()


PLOT_AXES_JS = """(() => {
  const p = document.querySelector('.js-plotly-plot');
  if (!p || !p.layout) return null;
  return [String(p.layout.xaxis.title.text), String(p.layout.yaxis.title.text), p.data.length];
})()"""


@pytest.fixture
def projector(browser, request):
    """A page the size of a projector's screen, 1440 x 900."""
    yield from browser_page(browser, request, {"width": 1440, "height": 900})


def in_view(page, locator) -> bool:
    """Whether ``locator`` lies whole inside the window, without scrolling."""
    box = locator.bounding_box()
    return box is not None and box["y"] >= 0 and box["y"] + box["height"] <= page.viewport_size["height"]


def test_presenter_view_walks_two_chapters(server, projector):
    """A projector at 1440 x 900: large type, no sidebar, the question first, one chart with its axis titles on
    demand, what to see beside it and the next chapter one click away, all without scrolling."""
    page = projector
    chapters = {c.id: c for c in workshop.load_chapters()}
    first, second = chapters["04-strict-priority"], chapters["05-aging-and-max-wait"]
    page.goto(f"{server}/workshop?chapter={first.id}&presenter=1")
    for chapter in (first, second):
        page.wait_for_selector(f"h1:has-text('{chapter.title}')")
        wait_idle(page)
        expect(page.locator('[data-testid="stSidebar"]')).to_be_hidden()
        size = page.evaluate("parseFloat(getComputedStyle(document.querySelector('.stMarkdown p')).fontSize)")
        assert size >= 24, f"presenter text is {size}px"
        # no chart before the answer is asked for (the previous chapter's leaves once the rerun has finished)
        expect(page.locator(".js-plotly-plot")).to_have_count(0, timeout=TIMEOUT_MS)
        page.get_by_role("button", name="Show the answer").click()
        page.wait_for_function(PLOT_AXES_JS + " !== null", timeout=TIMEOUT_MS)
        wait_idle(page)
        x_title, y_title, traces = page.evaluate(PLOT_AXES_JS)
        # the first of two charts (longest wait, then TTFT p99: every figure the answer cites), a line per class
        assert x_title == chapter.knob_label and y_title == "Longest wait (ms)" and traces == 2
        expect(page.locator(".js-plotly-plot")).to_have_count(2)
        see = page.locator(".st-key-presenter_see")
        expect(see).to_contain_text(chapter.see.split(".")[0].replace("**", "")[:40])
        for what, where in (("what to see", see), ("the chart", page.locator(".js-plotly-plot").first),
                            ("Next chapter", page.get_by_role("button", name="Next chapter"))):
            assert in_view(page, where), f"{chapter.id}: {what} is off screen at 1440 x 900"
        page.screenshot(path=str(ARTIFACTS / f"presenter_{chapter.id}.png"), full_page=True)
        if chapter is first:
            page.get_by_role("button", name="Next chapter").click()


def test_the_recommended_fleet_opens_in_the_lab(server, page):
    """"Open this fleet in the Lab" makes the plan's fleet the scenario and shows it in the Lab."""
    quick = {"plan_gpus": ["H100-80G"], "plan_seeds": 2, "plan_requests": 600, "cost_currency": "USD"}
    page.goto(f"{server}/planner?{state.QUERY_KEY}={state.encode(read_toml(SCENARIOS / 'article_mixed_8xa100.toml'))}"
              f"&{view.QUERY_KEY}={state.encode(quick)}")
    page.get_by_role("button", name="Plan").click()
    said = page.wait_for_selector("text=Recommended:", timeout=TIMEOUT_MS).inner_text()
    wait_idle(page)
    page.get_by_role("button", name="Open this fleet in the Lab").click()
    page.wait_for_selector("text=Per-class results", timeout=TIMEOUT_MS)
    wait_idle(page)
    fleet = said.replace("\u2060", "").removeprefix("Recommended: ").split(" through ")[0]  # "3 x TP1 H100-80G"
    replicas, shape_gpu = fleet.split(" x ", 1)
    tp, gpu = shape_gpu.split(" ")
    described = page.inner_text("[data-testid=stSidebar]").replace("\n", " ").replace("\u2060", "")
    assert f"now: {replicas} servers of Llama-3-70B" in described and gpu in described, described[:400]
    offer = said.split(" through ")[1].split(" (")[0]
    # The full run draws the targets panel, then its cards (a run still refining shows only its first requests'
    # cards): wait for both, and for the run to end, before reading the page.
    page.wait_for_selector("text=The Planner's targets on this run", timeout=TIMEOUT_MS)
    tpot_card = page.locator('[data-testid="stMetricLabel"]', has_text="TPOT p99").first
    expect(tpot_card, "a TPOT p99 card").to_be_visible(timeout=TIMEOUT_MS)
    wait_idle(page)
    body = page.inner_text("body")
    assert offer in body, "the Lab prices the fleet through the plan's own offer"
    assert "Planner" in body and "targets on this run" in body, "its targets judged"


def set_length(page, popover: str, tokens: str) -> None:
    """Open the first length popover named ``popover`` and make its distribution a constant ``tokens``."""
    page.get_by_role("button", name=popover).first.click()
    choose(page, "Distribution", "Constant")
    if not page.get_by_role("spinbutton", name="Length (tokens)").is_visible():
        page.get_by_role("button", name=popover).first.click()
    type_number(page, "Length (tokens)", tokens)
    wait_idle(page)
    page.keyboard.press("Escape")
    wait_idle(page)


def test_a_new_user_asks_the_customers_question_and_leaves_with_the_report_and_the_recipe(server, page):
    """The issue's question, typed as a person would on the Planner page of a fresh visit: Llama-3-70B chat at 40
    req/s, 1,500-token prompts, 300-token answers, TTFT p99 <= 2 s and TPOT p99 <= 60 ms, in USD; then the report and
    the recipe downloaded. The seconds it took go to tests/artifacts/new_user_question.json."""
    started = time.monotonic()
    page.goto(f"{server}/planner")
    page.wait_for_selector("text=Your workload")
    wait_idle(page)
    choose(page, "Model", "Llama-3-70B")
    type_number(page, "Arrival rate at the peak (req/s)", "40")
    wait_idle(page)
    page.get_by_role("button", name="Remove", exact=True).nth(1).click()  # the second class: one class of chat
    wait_idle(page)
    expect(page.get_by_role("button", name="Remove", exact=True)).to_have_count(1)
    set_length(page, "Prompt length (tokens)", "1500")
    set_length(page, "Output length (tokens)", "300")
    type_number(page, "Target 1: limit (ms)", "2000")
    wait_idle(page)
    choose(page, "Target 2: metric", "TPOT p99")
    type_number(page, "Target 2: limit (ms)", "60")
    wait_idle(page)
    page.get_by_role("button", name="Plan").click()
    said = page.wait_for_selector("text=Recommended:", timeout=TIMEOUT_MS).inner_text().replace("\u2060", "")
    wait_idle(page)
    assert "chat TTFT p99" in said and "chat TPOT p99" in said and " USD per month" in said
    with page.expect_download() as download:
        page.get_by_role("button", name="Download the report (HTML)").click()
    report = Path(download.value.path()).read_text()
    assert "<h1>Llama-3-70B at 40 req/s, chat TTFT p99 &lt;= 2.00 s (+1 more): rent " in report
    with page.expect_download() as saved:
        page.get_by_role("button", name="Download the plan (JSON)").click()
    best = json.loads(Path(saved.value.path()).read_text())["recommendation"]
    asked = tomllib.loads(report_attachment(report, "plan.toml").decode())
    assert_confidence_is_the_tables(best, asked["scenario"], page)
    for entry in best["targets"]:  # met on the interval's end, widened by the check's error for its metric
        assert entry["pessimistic"] <= entry["limit"]
    with page.expect_download() as download:
        page.get_by_role("button", name="Download the recipe (ZIP)").click()
    with zipfile.ZipFile(download.value.path()) as archive:
        names = set(archive.namelist())
        manifest = archive.read("recipe/kubernetes.yaml").decode()
    assert {"recipe/launch-vllm.sh", "recipe/kubernetes.yaml", "recipe/README.txt"} <= names
    assert "Llama-3-70B" in manifest
    (ARTIFACTS / "new_user_question.json").write_text(json.dumps(
        {"seconds": round(time.monotonic() - started, 1), "recommendation": said}, indent=1))


def test_hardware_and_costs_cheapest_rental_is_the_planners_answer(server, page):
    """One question, one answer: the Hardware page hands its target to the Planner, which plans it at once."""
    page.goto(f"{server}/hardware")
    page.wait_for_selector("text=Cheapest rental that meets a target")
    wait_idle(page)
    type_number(page, "At most (ms)", "2500")
    wait_idle(page)
    page.get_by_role("button", name="Answer it in the Planner").click()
    page.wait_for_selector("text=Recommended:", timeout=TIMEOUT_MS)
    wait_idle(page)
    assert page.get_by_role("spinbutton", name="Target 1: limit (ms)").input_value() == "2500"


def report_attachment(report: str, name: str) -> bytes:
    """The file ``name`` a downloaded report carries (a data: link)."""
    found = re.search(rf'download="{re.escape(name)}" href="data:text/plain;base64,([^"]+)"', report)
    assert found, f"the report attaches {name}"
    return base64.b64decode(found.group(1))


def download(page, button: str) -> Path:
    """The file a download button saves."""
    with page.expect_download() as saved:
        page.get_by_role("button", name=button).click()
    return Path(saved.value.path())


def test_own_model_and_own_price_list_leave_as_a_report_and_recipe_that_name_them(server, page):
    """The third story: a customer's own model (a config.json, named on the Hardware page) planned against their own
    price list on the Planner; the report and the recipe call the model by its name (never "config"), the report
    names the price list and carries it, and the recipe serves the model's folder."""
    page.goto(f"{server}/hardware?{state.QUERY_KEY}={state.encode(read_toml(SCENARIOS / 'article_mixed_8xa100.toml'))}")
    page.wait_for_selector("text=Does it fit? Memory of one card")
    wait_idle(page)
    page.get_by_text("Your own model: a Hugging Face config.json").click()
    page.get_by_test_id("stExpander").get_by_test_id("stFileUploaderDropzoneInput").set_input_files(
        {"name": "config.json", "mimeType": "application/json",
         "buffer": (REPO / "tests" / "fixtures" / "model_configs" / "Llama-3.1-8B.json").read_bytes()})
    name = page.get_by_role("textbox", name="Model name")
    name.fill("Acme-Chat-8B")
    name.press("Enter")
    wait_idle(page)
    expect(page.get_by_text("Acme-Chat-8B", exact=False).first).to_be_visible()
    page.get_by_role("button", name="Use this model").click()
    wait_idle(page)
    page.get_by_role("link", name="Planner").click()
    page.wait_for_selector("text=Your own price list")
    wait_idle(page)
    page.get_by_test_id("stMainBlockContainer").get_by_test_id("stFileUploaderDropzoneInput").set_input_files(
        str(REPO / "tests" / "fixtures" / "price_lists" / "two_offers.csv"))
    page.wait_for_selector("text=Planning against your 2 offers")
    wait_idle(page)
    type_number(page, "Seeds per decision", "2")
    wait_idle(page)
    type_number(page, "Requests per run", "600")
    wait_idle(page)
    page.get_by_role("button", name="Plan").click()
    said = page.wait_for_selector("text=Recommended:", timeout=TIMEOUT_MS).inner_text()
    wait_idle(page)
    assert "through our-h100-reserved" in said
    report = download(page, "Download the report (HTML)").read_text()
    assert "<h1>Acme-Chat-8B at 50 req/s" in report, "the title names the model as the customer named it"
    assert re.search(r"Priced with your own price list \(two_offers\.csv, 2 offers, sha256 [0-9a-f]{12}\)", report)
    assert report_attachment(report, "price_list.csv").decode().startswith("offer,vendor,gpu,")
    with zipfile.ZipFile(download(page, "Download the recipe (ZIP)")) as archive:
        scripts = {n: archive.read(n).decode() for n in archive.namelist()}
    launch, manifest = scripts["recipe/launch-vllm.sh"], scripts["recipe/kubernetes.yaml"]
    assert "/models/Acme-Chat-8B" in launch and "Acme-Chat-8B" in manifest
    for text in (report, *scripts.values()):
        assert "/models/config" not in text and "config (your" not in text, "never called after its file"
    assert "mountPath: /models, subPath: models" in manifest, "the folder MODEL names is mounted"
    page.screenshot(path=str(ARTIFACTS / "own_model_and_price_list.png"), full_page=True)
    page.get_by_role("button", name="Open this fleet in the Lab").click()
    page.wait_for_selector("text=Per-class results", timeout=TIMEOUT_MS)
    wait_idle(page)
    expect(page.locator("body")).to_contain_text("Priced with the plan's own price list (two_offers.csv",
                                                  timeout=TIMEOUT_MS)
    expect(page.locator("body")).to_contain_text("8 x H100-80G rents 1 x our-h100-reserved")
    expect(page.get_by_test_id("stMetric").filter(has_text="Per hour (USD)")).to_contain_text("15.0")
    page.screenshot(path=str(ARTIFACTS / "own_price_list_in_the_lab.png"), full_page=True)


def test_deepseek_r1_by_day_and_night_leaves_with_a_report_and_recipe_for_r1(server, page):
    """The second story: DeepSeek-R1 whose traffic moves over a day (a reasoning day's shape at 4 req/s on average),
    asked on the Planner; the report prices the fleet over the day three ways and its title names R1 and the traffic,
    and the recipe serves R1's own FP8 checkpoint (not V3's) on a pinned engine release."""
    quick = {"plan_gpus": ["H200"], "plan_quants": ["fp8"], "plan_seeds": 2, "plan_requests": 600}
    page.goto(f"{server}/planner?{view.QUERY_KEY}={state.encode(quick)}")
    page.wait_for_selector("text=Your workload")
    wait_idle(page)
    choose(page, "Model", "DeepSeek-R1")
    page.get_by_role("button", name="Remove", exact=True).nth(1).click()  # one class: chat
    wait_idle(page)
    choose(page, "Traffic over the day", "A day's shape")
    choose(page, "Shape", "servegen-reasoning-day")
    type_number(page, "Mean arrival rate (req/s)", "4")
    wait_idle(page)
    expect(page.locator("body")).to_contain_text("req/s at the peak (the fleet is sized for it)")
    type_number(page, "Target 1: limit (ms)", "3000")
    wait_idle(page)
    page.get_by_role("button", name="Plan").click()
    said = page.wait_for_selector("text=Recommended:", timeout=TIMEOUT_MS).inner_text().replace("\u2060", "")
    wait_idle(page)
    assert " H200 through " in said and "FP8 weights" in said
    page.screenshot(path=str(ARTIFACTS / "deepseek_r1_day_and_night.png"), full_page=True)
    report = download(page, "Download the report (HTML)").read_text()
    (ARTIFACTS / "deepseek_r1_day_and_night.html").write_text(report)
    assert re.search(r"<h1>DeepSeek-R1 at 4 req/s on average \([\d.]+ at the peak\), chat TTFT p99 &lt;= 3\.00 s: "
                     r"rent ", report), "the title: R1, the day's mean and peak, the target"
    assert "Over the whole traffic: fixed, autoscaled, or reserved + bursts" in report
    for strategy in ("fixed at the peak", "autoscaled, on demand", "reserved baseline + bursts"):
        assert strategy in report
    answer = json.loads(download(page, "Download the plan (JSON)").read_text())
    best, fixed = answer["recommendation"], answer["over_time"]["strategies"][0]
    day = best["over_the_traffic"]
    assert day["targets"] == fixed["targets"], "the headline quotes the day table's fixed fleet"
    worded = metric("ttft_p99_ms").text(fixed["targets"][0]["value"])
    assert (f"over the whole traffic, fixed: chat TTFT p99 {worded}" if day["meets"] else
            f"but over the whole traffic, fixed, it misses: chat TTFT p99 {worded}") in said, said
    reopened = tomllib.loads(report_attachment(report, "plan.toml").decode())
    assert_confidence_is_the_tables(best, reopened["scenario"], page)
    assert reopened["planner"]["plan_limit_0"] == 3000.0 and reopened["planner"]["plan_quants"] == ["fp8"] \
        and reopened["scenario"]["server"]["model"] == "DeepSeek-R1", "the attachment reopens this question"
    with zipfile.ZipFile(download(page, "Download the recipe (ZIP)")) as archive:
        scripts = {n: archive.read(n).decode() for n in archive.namelist()}
    launch = next(text for name, text in scripts.items() if name.startswith("recipe/launch-"))
    manifest = scripts["recipe/kubernetes.yaml"]
    assert "deepseek-ai/DeepSeek-R1" in launch and "deepseek-ai/DeepSeek-R1" in manifest
    assert "DeepSeek-V3" not in launch + manifest, "R1 served as R1 (V3 is named only as the closest checked model)"
    assert re.search(r"v\d+\.\d+\.\d+", scripts["recipe/README.txt"]), "the engine release pinned"


def assert_confidence_is_the_tables(plan: dict, scenario: dict, page) -> None:
    """A plan's step-time error and words are those of the closest validated configuration in the shipped table
    (``validation_configurations.csv``) for its scenario's model and engine on its GPU, layout and weights; and the
    page says them."""
    from engine.calibrate.confidence import closest_check
    from engine.calibrate.held_out import ROOFLINE, TABLES, kind_of
    from engine.hardware.kernel_tables import coverage
    from engine.hardware.roofline import model_row

    server = engine.load_scenario(apply_overrides(scenario, {
        "server.gpu": plan["gpu"], "server.quant": plan["quant"], "server.tensor_parallel": plan["tensor_parallel"],
        "server.expert_parallel": plan["expert_parallel"],
        "server.attention_data_parallel": plan["expert_parallel"]})).server
    words, error, runs = closest_check(server.model, kind_of(model_row(server)), server.gpu, server.engine,
                                       TABLES if coverage(server).key is not None else ROOFLINE,
                                       server.expert_parallel, server.quant)
    assert plan["step_error_pct"] == error
    if error is not None:
        assert f"{error:.0f}% off on {runs} held out" in plan["step_times"], plan["step_times"]
        expect(page.locator("body")).to_contain_text(f"{error:.0f}% off on {runs} held out")


def test_a_reports_plan_file_reopens_its_question_on_the_planner(server, page):
    """The report's plan.toml, uploaded in the sidebar of any page, opens the Planner page on its scenario and its
    question (the limit, the GPUs and the seeds asked), not on the page's defaults."""
    from engine.decide.planner import Question
    from engine.decide.report import plan_toml
    from engine.decide.targets import parse_target

    data = read_toml(SCENARIOS / "article_mixed_8xa100.toml")
    question = Question((parse_target("interactive.ttft_p99_ms=1500"),), gpus=("H200",), seeds=4, requests=800)
    open_lab(page, server + "/")
    page.get_by_test_id("stSidebar").get_by_test_id("stFileUploaderDropzoneInput").set_input_files(
        {"name": "plan.toml", "mimeType": "application/toml", "buffer": plan_toml(data, question).encode()})
    page.wait_for_url("**/planner**", timeout=TIMEOUT_MS)
    page.wait_for_selector("text=Your workload")
    wait_idle(page)
    expect(page.get_by_role("spinbutton", name="Target 1: limit (ms)")).to_have_value("1500")
    expect(page.get_by_role("spinbutton", name="Seeds per decision")).to_have_value("4")
    expect(page.locator("body")).to_contain_text("H200")


def test_the_curve_grid_keeps_every_edit_across_reruns(server, page):
    """The Workload page's grid of a curve's points: a second edit is kept and reaches the scenario (its peak, read
    under the chart of the rate), where a grid redrawn from its own output forgot it."""
    open_lab(page, server + "/")
    page.get_by_role("link", name="Workload").click()
    page.wait_for_selector("text=Rate over time")
    wait_idle(page)
    page.get_by_text("Points of a curve").click()
    expect(page.locator("body")).to_contain_text("peak 14.1 req/s in this run")  # rates to four figures
    canvas = page.get_by_test_id("stDataFrame").first.locator("[data-testid=data-grid-canvas]")
    for row, typed in ((2, "20"), (3, "21")):
        for _ in range(3):  # a double click while a run redraws the grid opens nothing; a user would click again
            wait_idle(page)
            box = canvas.bounding_box()  # the page reflows after a run: measured each time
            page.mouse.dblclick(box["x"] + box["width"] - 100, box["y"] + 36 + 35 * row + 17)
            cell = page.locator(".gdg-input").first  # the cell's editor, once open
            try:
                cell.wait_for(timeout=5000)
                break
            except PlaywrightTimeout:
                pass
        cell.fill(typed)
        cell.press("Enter")
        expect(page.locator("body")).to_contain_text(f"peak {typed} req/s in this run")
    page.screenshot(path=str(ARTIFACTS / "curve_grid.png"), full_page=True)
    expect(page.locator("body")).not_to_contain_text("The last valid scenario stays in use")
