"""The pre-sales question in a real browser (Debian's Chromium, Playwright) against `streamlit run app.py`: how long
the Planner takes to answer it, how long a colleague's copy of the link takes to show that answer while the server
keeps it, and how long the same link takes on a freshly started server (the answer recomputed).

The question: Llama-3-70B chat at 40 req/s, 1,500-token prompts and 300-token answers, TTFT p99 <= 2 s and TPOT p99
<= 60 ms, cheapest monthly rental in USD (every GPU with a firm price, the planner's defaults: 3 seeds of 3,000
requests). Each figure is the median of ``--repeats`` measurements in this one run; the machine is shared and noisy.

Usage: python bench/bench_presales.py [--repeats 3] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from playwright.sync_api import sync_playwright  # noqa: E402

from conftest import app_server  # noqa: E402
from engine.scenario.config import read_toml  # noqa: E402
from ui import state, view  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
TIMEOUT_MS = 300_000


def question_link(url: str) -> str:
    """The Planner on the question's scenario and targets."""
    data = read_toml(REPO / "data" / "scenarios" / "engine_vllm_v1.toml")
    data["name"] = "Llama-3-70B chat at 40 req/s"
    data["workload"].update(num_requests=3000, arrival={"process": "poisson", "rate_per_s": 40.0}, classes=[
        {"name": "chat", "share": 1.0, "sla_ttft_ms": 2000, "prompt_tokens": {"dist": "constant", "value": 1500},
         "output_tokens": {"dist": "constant", "value": 300}}])
    data["server"].update(model="Llama-3-70B", gpu="H100-80G", tensor_parallel=4)
    asked = {"plan_class_0": "chat", "plan_metric_0": "ttft_p99_ms", "plan_limit_0": 2000.0,
             "plan_class_1": "chat", "plan_metric_1": "tpot_p99_ms", "plan_limit_1": 60.0, "cost_currency": "USD"}
    return f"{url}/planner?{state.QUERY_KEY}={state.encode(data)}&{view.QUERY_KEY}={state.encode(asked)}"


def seconds_until_answer(page, act) -> float:
    started = time.perf_counter()
    act()
    page.wait_for_selector("text=Recommended:", timeout=TIMEOUT_MS)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json")
    args = parser.parse_args()
    plan_s, reopen_s, recompute_s, shared = [], [], [], ""
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        for _ in range(args.repeats):
            with app_server(Path("/tmp/bench_presales.log")) as (url, _process):
                page = browser.new_page(viewport={"width": 1400, "height": 1600})
                page.goto(question_link(url))
                page.wait_for_selector("text=Your workload", timeout=TIMEOUT_MS)
                plan_s.append(seconds_until_answer(page, lambda: page.get_by_role("button", name="Plan").click()))
                page.wait_for_function("!document.querySelector('[data-testid=\"stStatusWidget\"]')")
                shared = page.url.replace(url, "")
                colleague = browser.new_page(viewport={"width": 1400, "height": 1600})
                reopen_s.append(seconds_until_answer(colleague, lambda: colleague.goto(url + shared)))
                page.close()
                colleague.close()
            with app_server(Path("/tmp/bench_presales.log")) as (url, _process):  # a fresh server keeps nothing
                page = browser.new_page(viewport={"width": 1400, "height": 1600})
                recompute_s.append(seconds_until_answer(page, lambda: page.goto(url + shared)))
                page.close()
        browser.close()
    result = {name: round(statistics.median(values), 2) for name, values in
              (("plan_s", plan_s), ("reopen_kept_s", reopen_s), ("reopen_recomputed_s", recompute_s))}
    print(f"plan {result['plan_s']} s; a shared link while kept {result['reopen_kept_s']} s; on a fresh server "
          f"(recomputed) {result['reopen_recomputed_s']} s (medians of {args.repeats})")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
