"""The report (engine.decide.report): one self-contained HTML file and a PDF printed from it, holding the planner's
own numbers; the PDF renders to PNG pages whose text carries the recommendation, its cost, every target's
value and the diagnosis; the link reopens the same plan."""

import base64
import os
import re
import sys
import threading
import time
import tomllib
from concurrent.futures import ThreadPoolExecutor
from datetime import date
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pypdfium2 as pdfium
import pytest

from conftest import REPO
from engine.decide.plan_text import caveat, energy_text, summary_line, target_text
from engine.decide import pdf_printer
from engine.decide.pdf_printer import PRINTERS, VisitorPrints
from engine.decide.planner import Question, plan
from engine.hardware.tables import load_table
from engine.decide.report import (CHROMIUM_ENV, cost_frame, offers_frame, planner_view, report_html, risks,
                                  write_pdf)
from ui.scenario_sidebar import plan_question
from ui.view import plain_view
from engine.decide.targets import Target
from engine.scenario.config import read_toml
from engine.scenario.errors import ScenarioError
from engine.scenario.link import PUBLIC_URL_ENV, decode, public_address
from engine.scenario.metric_table import money_range
from ui.view import VIEW_KEYS

ARTICLE = read_toml(REPO / "data" / "scenarios" / "article_mixed_8xa100.toml")
QUESTION = Question((Target("interactive", "ttft_p99_ms", 1000.0), Target("offline", "longest_wait_ms", 60000.0)),
                    gpus=("A100-80G", "H100-80G"), seeds=2, requests=600)


@pytest.fixture(scope="module")
def answer() -> dict:
    return plan(ARTICLE, QUESTION)


@pytest.fixture(scope="module")
def page(answer) -> str:
    return report_html(ARTICLE, QUESTION, answer, "http://lab.example:8501", "2026-12-01 08:00 UTC")


def squeezed(text: str) -> str:
    """Text without white space and the soft hyphens a PDF puts where it broke a word."""
    return re.sub(r"[\s\ufffe\u00ad]", "", text)


def test_the_html_is_self_contained_and_holds_the_planners_numbers(page, answer):
    best = answer["recommendation"]
    assert "Plotly.newPlot" in page and page.count('class="chart"') == 2
    for fetch in ("<script src", "<link", "<img", "@import", "<iframe"):
        assert fetch not in page, f"opens offline: nothing to fetch ({fetch})"
    escaped = summary_line(best).replace("&", "&amp;").replace("'", "&#x27;").replace("<", "&lt;").replace(">", "&gt;")
    assert escaped in page
    assert energy_text(best).replace("'", "&#x27;") in page and "Energy: at most" in page
    for target in best["targets"]:
        assert target_text(target) in page
    assert answer["diagnosis"][0].split(":")[0] in page
    assert "Step times of every fleet shape" in page and ("measured kernels" in page or "Roofline estimate" in page) \
        and "as of" in page, "every fleet shape's step times, every offer's date"


def test_the_link_reopens_the_same_plan(page):
    link = next(u for u in re.findall(r'href="([^"]+)"', page) if u.startswith("http://lab.example"))
    url = urlparse(link.replace("&amp;", "&"))
    query = parse_qs(url.query)
    assert url.path == "/planner" and decode(query["s"][0]) == ARTICLE
    view = decode(query["v"][0])
    second = (view["plan_class_1"], view["plan_metric_1"], view["plan_limit_1"])
    assert second == ("offline", "longest_wait_ms", 60000.0)
    assert view["plan_gpus"] == ["A100-80G", "H100-80G"] and view["plan_seeds"] == 2
    assert set(view) <= set(VIEW_KEYS), "the link names only controls the Planner page has"


def test_the_pdf_renders_to_pages_with_the_apps_numbers(page, answer, tmp_path):
    path = tmp_path / "plan.pdf"
    write_pdf(page, path)
    pdf = pdfium.PdfDocument(str(path))
    text = ""
    for i in range(len(pdf)):
        image = pdf[i].render(scale=1.0).to_pil().convert("L")
        assert image.getextrema()[0] < 128, f"page {i + 1} is blank"
        text += pdf[i].get_textpage().get_text_range() + "\n"
    text = squeezed(text)
    best = answer["recommendation"]
    cost = best["monthly_cost"]
    for needle in (best["gpu"], best["offer"], f"{best['replicas']} x TP{best['tensor_parallel']}",
                   money_range((cost["low"], cost["high"]), cost["currency"]), *map(target_text, best["targets"]),
                   answer["diagnosis"][0][:60]):
        assert squeezed(needle) in text, needle


def test_without_a_browser_the_pdf_is_one_clear_line(page, tmp_path, monkeypatch):
    monkeypatch.setenv(CHROMIUM_ENV, str(tmp_path / "no-such-browser"))
    with pytest.raises(ScenarioError, match="printed by Chromium, which was not found: install it"):
        write_pdf(page, tmp_path / "x.pdf")
    assert not (tmp_path / "x.pdf").exists()


# A browser that prints as Chromium is asked to (the --print-to-pdf=PATH switch, the page last): it records when it
# ran, after BODY, and writes a PDF holding the page's first line.
FAKE_BROWSER = """#!{python}
import os, subprocess, sys, time
started = time.time()
{body}
out = next(a.split("=", 1)[1] for a in sys.argv if a.startswith("--print-to-pdf="))
with open(out, "wb") as pdf:
    pdf.write(b"%PDF-1.4 " + open(sys.argv[-1].removeprefix("file://"), "rb").readline())
with open({log!r}, "a") as log:
    log.write(f"{{started}} {{time.time()}}\\n")
"""


def fake_browser(tmp_path, monkeypatch, body: str = "time.sleep(0.4)"):
    """Installs the fake browser as the printer's Chromium; the file where each print writes its start and end."""
    log, browser = tmp_path / "prints.log", tmp_path / "fake-chromium"
    browser.write_text(FAKE_BROWSER.format(python=sys.executable, body=body, log=str(log)))
    browser.chmod(0o755)
    monkeypatch.setenv(CHROMIUM_ENV, str(browser))
    return log


def spans(log) -> list[tuple[float, float]]:
    return [tuple(map(float, line.split())) for line in log.read_text().splitlines()] if log.exists() else []


def most_at_once(log) -> int:
    return max(sum(start <= t < end for start, end in spans(log)) for t, _ in spans(log))


def alive(pid: int) -> bool:
    """Whether the process runs (a zombie, dead but not yet reaped by its parent, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def test_at_most_two_pdfs_print_at_once(tmp_path, monkeypatch):
    """Eight prints asked at once (eight visitors, or one visitor and the command line) run two at a time."""
    log = fake_browser(tmp_path, monkeypatch)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: write_pdf(f"<p>{i}</p>", tmp_path / f"{i}.pdf"), range(8)))
    assert len(spans(log)) == 8 and most_at_once(log) == PRINTERS == 2
    assert (tmp_path / "5.pdf").read_bytes() == b"%PDF-1.4 <p>5</p>"


def test_one_visitor_prints_one_pdf_at_a_time(tmp_path, monkeypatch):
    """A double click prints once (the second request waits for the first and gets its file); three reports asked
    at once by one visitor print one after another, though two printers are free."""
    log = fake_browser(tmp_path, monkeypatch)
    prints = VisitorPrints()
    with ThreadPoolExecutor(3) as pool:
        same = list(pool.map(prints.pdf, ["<p>plan</p>"] * 3))
    assert same == [b"%PDF-1.4 <p>plan</p>"] * 3 and len(spans(log)) == 1
    with ThreadPoolExecutor(3) as pool:
        others = list(pool.map(prints.pdf, ["<p>a</p>", "<p>b</p>", "<p>c</p>"]))
    assert others == [b"%PDF-1.4 <p>a</p>", b"%PDF-1.4 <p>b</p>", b"%PDF-1.4 <p>c</p>"]
    assert len(spans(log)) == 4 and most_at_once(log) == 1


def test_a_print_past_its_time_is_killed_with_every_process_it_started(tmp_path, monkeypatch):
    pids = tmp_path / "pids"
    fake_browser(tmp_path, monkeypatch, body=f"child = subprocess.Popen([sys.executable, '-c', 'import time; "
                                             f"time.sleep(60)'])\nopen({str(pids)!r}, 'w').write(f'{{os.getpid()}} "
                                             f"{{child.pid}}')\ntime.sleep(60)")
    monkeypatch.setattr(pdf_printer, "PRINT_TIMEOUT_S", 2)
    started = time.monotonic()
    with pytest.raises(ScenarioError, match=r"^printing the PDF took more than 2 s; print the HTML report from a"):
        write_pdf("<p>plan</p>", tmp_path / "x.pdf")
    assert time.monotonic() - started < 4 and not (tmp_path / "x.pdf").exists()
    browser, child = map(int, pids.read_text().split())
    deadline = time.monotonic() + 5
    while (alive(browser) or alive(child)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(browser) and not alive(child), "the browser or its child outlived the time limit"


def test_a_print_waits_for_a_free_printer_within_its_time_and_says_so(tmp_path, monkeypatch):
    fake_browser(tmp_path, monkeypatch, body="time.sleep(3)")
    monkeypatch.setattr(pdf_printer, "PRINT_TIMEOUT_S", 2)
    busy = threading.BoundedSemaphore(1)
    monkeypatch.setattr(pdf_printer, "_printers", busy)
    busy.acquire()  # the only printer prints for someone else
    with pytest.raises(ScenarioError, match=r"^every PDF printer of this server stayed busy for 2 s; try again"):
        write_pdf("<p>plan</p>", tmp_path / "x.pdf")
    threading.Timer(1.2, busy.release).start()  # free after 1.2 s: 0.8 s left to print, not enough
    started = time.monotonic()
    with pytest.raises(ScenarioError, match=r"took more than 2 s \(1 s of it waiting for the prints before it\)"):
        write_pdf("<p>plan</p>", tmp_path / "x.pdf")
    assert time.monotonic() - started < 3, "waiting and printing together keep to the time limit"


def test_a_namespace_that_cannot_be_made_leaves_the_print_to_the_switches_alone(tmp_path, monkeypatch):
    log = fake_browser(tmp_path, monkeypatch)
    refused = (sys.executable, "-c", "import sys; sys.exit('unshare: unshare failed: Operation not permitted')")
    monkeypatch.setattr(pdf_printer, "network_namespace", lambda: refused)
    write_pdf("<p>plan</p>", tmp_path / "x.pdf")
    assert (tmp_path / "x.pdf").read_bytes() == b"%PDF-1.4 <p>plan</p>" and len(spans(log)) == 1


def test_the_caveat_names_an_estimate_and_a_cheaper_plan_on_paper():
    def entry(cost, calibrated):
        return {"monthly_cost": {"low": cost, "high": cost, "currency": "USD", "billing": "pay as you go"},
                "calibrated": calibrated}
    assert caveat({"recommendation": None, "alternatives": []}, "x") is None
    estimate = {"recommendation": entry(100, False), "alternatives": []}
    assert caveat(estimate, "python -m engine calibrate").endswith("(python -m engine calibrate) before renting.")
    calibrated = {"recommendation": entry(100, True), "alternatives": [entry(200, False)]}
    assert caveat(calibrated, "x") is None, "a dearer estimate is no caveat"


def test_the_report_names_policies_routers_arrivals_and_formats_in_words(page):
    """No policy code, router name, lowercase arrival process or weight format, and no key in the report's text."""
    body = re.sub(r"<script.*?</script>|<style.*?</style>|<[^>]+>", " ", page, flags=re.S)
    code = re.search(r"(?<![\w-])(fifo|wfq|edf|sjf|srpt|lpm|vllm-\w+|round-robin|least-tokens|poisson|gamma|fp16|fp8|"
                     r"tensor_parallel|max_batch_size)(?![\w-])", body)
    assert code is None, body[max(0, code.start() - 80):code.end() + 80]
    assert "Router: Fewest tokens" in body and "Poisson arrivals" in body and "INT4 weights" in body


def test_the_cost_table_lists_only_the_billing_terms_the_offer_is_sold_under():
    on_demand = cost_frame({"offer": "runpod-h100-sxm-secure", "cards": 4}, "USD", 7.0)
    assert set(on_demand["bought"]) == {"on demand, pay as you go"}, \
        "no annual term quoted: no annual row repeating the price"
    prepaid = cost_frame({"offer": "ref-a100-40g-single", "cards": 1}, "USD", 7.0)
    assert set(prepaid["bought"]) == {"reserved term", "annual prepay, 20% off the reserved term price"}
    assert prepaid.iloc[0]["per month"] != prepaid.iloc[1]["per month"], "the annual row carries its discount"


def test_the_cost_table_is_in_the_customers_currency_and_the_offers_own():
    """A USD customer renting a USD offer reads USD alone (no CNY rows); a CNY offer adds the invoice's CNY."""
    usd = cost_frame({"offer": "runpod-h100-sxm-secure", "cards": 4}, "USD", 7.0)
    assert set(usd["currency"]) == {"USD"}
    cny_offer = next(o for o, row in load_table("offers").iterrows() if row["currency"] == "CNY")
    both = cost_frame({"offer": cny_offer, "cards": 8}, "USD", 7.0)
    assert list(dict.fromkeys(both["currency"])) == ["USD", "CNY"]


def test_the_risks_name_spot_capacity_an_unfirm_or_old_price_and_unmeasured_step_times():
    def answer(offer, calibrated=True):
        return {"recommendation": {"offer": offer, "gpu": "H100-80G", "calibrated": calibrated}}
    today = date(2026, 12, 1)
    assert risks(answer("hyperstack-h100-sxm-on-demand"), today) == []
    spot = risks(answer("vast-h100-spot"), today)
    assert "take the cards back" in spot[0] and "not firm (spot terms, an estimate)" in spot[1]
    old = risks(answer("aws-p5-capacity-block"), today)
    assert old == [f"The price of aws-p5-capacity-block was quoted on 2024-12-31, "
                   f"{(today - date(2024, 12, 31)).days} days before this report: check it is still current."]
    assert "rest on an estimate" in risks(answer("hyperstack-h100-sxm-on-demand", calibrated=False), today)[0]
    assert risks({"recommendation": None}, today) == []


def test_the_offers_table_flags_prices_older_than_six_months():
    frame = offers_frame({"recommendation": {"offer": "aws-p5-capacity-block"},
                          "alternatives": [{"offer": "hyperstack-h100-sxm-on-demand"}]}, date(2026, 12, 1))
    assert frame.set_index("offer")["as of"].to_dict() == {"aws-p5-capacity-block": "2024-12-31 (old: 700 days)",
                                                           "hyperstack-h100-sxm-on-demand": "2026-07-31"}
    assert list(frame["firm"]) == ["yes", "yes"] and list(frame["terms"]) == ["reserved", "on-demand"]


def test_a_report_links_back_only_to_a_public_address(monkeypatch):
    monkeypatch.delenv(PUBLIC_URL_ENV, raising=False)
    for local in ("http://localhost:8501", "http://127.0.0.1:8765/", "http://0.0.0.0:8501", None, ""):
        assert public_address(local) is None, local
    assert public_address("https://lab.example.com/") == "https://lab.example.com"
    monkeypatch.setenv(PUBLIC_URL_ENV, "https://plans.example.org/")
    assert public_address("http://localhost:8501") == "https://plans.example.org", "the operator's setting wins"


def test_no_report_names_a_local_address_an_internal_path_or_a_mirror(answer, monkeypatch):
    monkeypatch.delenv(PUBLIC_URL_ENV, raising=False)
    page = report_html(ARTICLE, QUESTION, answer, public_address("http://localhost:8501"), "2026-12-01 08:00 UTC")
    for needle in ("localhost", "127.0.0.1", "shared/", "article-zh", "find_string", "code index", ".uat.",
                   "spec numbers are wrong", "/work/", "href=\"http://"):
        assert needle not in page, needle
    attached = re.search(r'download="scenario.toml" href="data:text/plain;base64,([^"]+)"', page)
    assert tomllib.loads(base64.b64decode(attached.group(1)).decode()) == ARTICLE, "the scenario travels with it"
    plan_file = re.search(r'download="plan.toml" href="data:text/plain;base64,([^"]+)"', page)
    reopened = tomllib.loads(base64.b64decode(plan_file.group(1)).decode())
    assert reopened["scenario"] == ARTICLE, "the plan file reopens the same scenario ..."
    assert plan_question(reopened) == plain_view(planner_view(QUESTION, ARTICLE)) and \
        reopened["planner"]["plan_limit_0"] == QUESTION.targets[0].limit, "... and the same question"
    assert plan_question(ARTICLE) is None, "a scenario file is not a plan file"
    best = answer["recommendation"]
    assert f"<h1>{ARTICLE['server']['model']} at 50 req/s, interactive TTFT p99 &lt;= 1.00 s (+1 more): rent " \
           f"{best['replicas']} x TP{best['tensor_parallel']} {best['gpu']} for " in page, "titled by the question"


def test_a_report_on_a_scenario_whose_own_fleet_cannot_hold_the_model_says_so(answer):
    too_small = {**ARTICLE, "server": {**ARTICLE["server"], "model": "Llama-3.1-405B", "tensor_parallel": 1}}
    page = report_html(too_small, QUESTION, answer, None, "2026-12-01 08:00 UTC")
    assert "cannot hold the model; the plan sized only fleets that do" in page


CHART_BOXES_JS = """() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(plot => {
  const svg = plot.querySelector('.main-svg').getBoundingClientRect();
  const boxes = sel => Array.from(plot.querySelectorAll(sel)).map(e => e.getBoundingClientRect())
    .filter(r => r.width > 0).map(r => [r.left, r.top, r.right, r.bottom]);
  return {svg: [svg.left, svg.top, svg.right, svg.bottom], ticks: boxes('.xtick text, .ytick text'),
          titles: boxes('.g-xtitle text, .g-ytitle text, .g-x2title text, .g-y2title text')};
})"""


def test_every_chart_label_of_the_report_is_inside_its_chart_and_clear_of_the_axis_titles(page, tmp_path):
    """As Chromium draws the report (the PDF prints this drawing): no tick label cut by the chart's edge, no axis
    title over a tick label."""
    from playwright.sync_api import sync_playwright
    path = tmp_path / "report.html"
    path.write_text(page)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
        tab = browser.new_page(viewport={"width": 1100, "height": 900})
        tab.goto(path.as_uri())
        tab.wait_for_function("document.querySelectorAll('.js-plotly-plot .xtick text').length > 0")
        tab.wait_for_timeout(1500)  # Plotly draws again once its automatic margins are known
        charts = tab.evaluate(CHART_BOXES_JS)
        browser.close()
    assert len(charts) == 2

    def inside(box, frame):
        return box[0] >= frame[0] - 1 and box[1] >= frame[1] - 1 and box[2] <= frame[2] + 1 and box[3] <= frame[3] + 1

    def overlap(a, b):
        return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]

    for chart in charts:
        cut = [t for t in chart["ticks"] if not inside(t, chart["svg"])]
        assert chart["ticks"] and not cut, f"tick labels cut by the chart {chart['svg']}: {cut}"
        assert all(inside(t, chart["svg"]) for t in chart["titles"]), "an axis title is cut"
        assert not any(overlap(t, k) for t in chart["titles"] for k in chart["ticks"]), "a title covers a tick label"


def test_the_report_names_the_tables_version_its_numbers_rest_on(page, answer):
    assert len(answer["data_version"]) == 12 and f"tables version {answer['data_version']}" in page
