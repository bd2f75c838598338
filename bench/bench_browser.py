"""How fast the Lab answers in a real browser (Debian's Chromium, Playwright) against `streamlit run app.py`.

One session: on the default preset, then the article preset, each change (the arrival rate one step up, the
policy, alpha of the dynamic policy) is made ``--repeats`` times; for each it reports the median seconds
until a KPI card changed and until the whole page finished (Streamlit's running indicator gone).

Many sessions (``--sessions N``): N browser sessions open the Lab at once, each on the default preset at
its own arrival rate, then all move their rate one step at once; it reports the p50 and the slowest of
the seconds until each page finished. The server runs as the README's app command does, on this
machine's cores.

Usage: python bench/bench_browser.py [--repeats 3] [--sessions 20] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from playwright.async_api import async_playwright  # noqa: E402

from bench_sessions import command_cpu_s, process_cpu_s, session_rate  # noqa: E402
from conftest import app_server  # noqa: E402
from engine.scenario.config import apply_overrides, read_toml  # noqa: E402
from ui import state  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
ARTICLE = REPO / "data" / "scenarios" / "article_mixed_8xa100.toml"
TIMEOUT_MS = 600_000
KPIS_JS = """Array.from(document.querySelectorAll('[data-testid="stMetricValue"]')).map(e => e.innerText).join('|')"""
MANY_POLL_MS = 250  # how often each of many sessions is checked (a finished page is seen this much late at most)
IDLE_JS = "!document.querySelector('[data-testid=\"stStatusWidget\"]')"


async def settled(page, poll_ms: float | str = "raf") -> None:
    """Until the page shows its cards and its script run has finished (checked every ``poll_ms``: many
    sessions are checked less often, so that the checks do not take the cores the server needs)."""
    await page.wait_for_selector("text=Per-class results", timeout=TIMEOUT_MS)
    await page.wait_for_function(IDLE_JS, timeout=TIMEOUT_MS, polling=poll_ms)


async def timed_change(page, control, key: str, poll_s: float = 0.02, cards_change: bool = False
                       ) -> tuple[float, float]:
    """Press ``key`` on ``control``: seconds until a KPI card changed (NaN if none did: alpha at a low load),
    and until the page finished (Streamlit's running indicator seen, then gone). With ``cards_change`` the page
    counts as finished only once a card changed: a busy server may not even have started the run after 2 s,
    when the running indicator is not seen yet."""
    before = await page.evaluate(KPIS_JS)
    started = time.monotonic()
    await control.press(key, timeout=TIMEOUT_MS)
    kpi_s, seen_running = math.nan, False
    while True:
        kpis, idle = await page.evaluate(f"[{KPIS_JS}, {IDLE_JS}]")
        elapsed = time.monotonic() - started
        if math.isnan(kpi_s) and kpis != before:
            kpi_s = elapsed
        seen_running = seen_running or not idle
        if idle and not math.isnan(kpi_s) or idle and not cards_change and (seen_running or elapsed > 2.0):
            return kpi_s, elapsed
        if elapsed > TIMEOUT_MS / 1000:
            raise TimeoutError("the page did not finish")
        await asyncio.sleep(poll_s)


async def choose_policy(page, label_start: str):
    policy = page.get_by_role("combobox", name="Policy")
    await policy.click()
    await policy.press_sequentially(label_start)
    return policy


async def one_session(browser, url: str, repeats: int) -> dict:
    """Median seconds to the KPI cards and to the whole page after each kind of change."""
    page = await browser.new_page(viewport={"width": 1400, "height": 1600})
    await page.goto(url)
    await settled(page)
    times: dict[str, list[tuple[float, float]]] = {"rate": [], "policy": [], "alpha": []}
    rate = page.get_by_role("slider", name="Arrival rate (req/s)")
    for i in range(repeats):
        await rate.focus()
        times["rate"].append(await timed_change(page, rate, "ArrowRight" if i % 2 == 0 else "ArrowLeft"))
    for i in range(repeats):
        policy = await choose_policy(page, "Shortest job" if i % 2 == 0 else "Strict")
        times["policy"].append(await timed_change(page, policy, "Enter"))
    await (await choose_policy(page, "Dynamic")).press("Enter")
    await page.wait_for_function(IDLE_JS, timeout=TIMEOUT_MS)
    alpha = page.get_by_role("slider", name="alpha (waiting)")
    for i in range(repeats):
        await alpha.focus()
        times["alpha"].append(await timed_change(page, alpha, "ArrowRight" if i % 2 == 0 else "ArrowLeft"))
    await page.close()
    return {change: {"kpi_s": statistics.median([k for k, _ in pairs if not math.isnan(k)] or [math.nan]),
                     "page_s": statistics.median(p for _, p in pairs)} for change, pairs in times.items()}


async def many_sessions(browser, url: str, sessions: int, server_pid: int) -> dict:
    """N sessions open the Lab at once (each at its own rate), then all change their rate at once; and the CPU
    seconds the server and the browser used meanwhile."""
    base = state.default_data()
    rate = base["workload"]["arrival"]["rate_per_s"]
    pages = [await browser.new_page(viewport={"width": 1400, "height": 1600}) for _ in range(sessions)]
    server_cpu_s, browser_cpu_s = process_cpu_s(server_pid), command_cpu_s(Path(CHROMIUM).name)

    async def load(page, k: int) -> float:
        data = apply_overrides(base, {"workload.arrival.rate_per_s": session_rate(rate, k)})
        started = time.monotonic()
        await page.goto(f"{url}/?{state.QUERY_KEY}={state.encode(data)}", timeout=TIMEOUT_MS)
        await settled(page, MANY_POLL_MS)
        return time.monotonic() - started

    async def change(page) -> float:
        slider = page.get_by_role("slider", name="Arrival rate (req/s)")
        await slider.focus(timeout=TIMEOUT_MS)  # twenty pages can keep the browser busy for tens of seconds
        return (await timed_change(page, slider, "ArrowRight", MANY_POLL_MS / 1000, cards_change=True))[1]

    loads = await asyncio.gather(*(load(p, k) for k, p in enumerate(pages)))
    changes = await asyncio.gather(*(change(p) for p in pages))
    server_cpu_s = process_cpu_s(server_pid) - server_cpu_s
    browser_cpu_s = command_cpu_s(Path(CHROMIUM).name) - browser_cpu_s
    for page in pages:
        await page.close()
    return {"sessions": sessions, "load_p50_s": statistics.median(loads), "load_max_s": max(loads),
            "change_p50_s": statistics.median(changes), "change_max_s": max(changes),
            "server_cpu_s": server_cpu_s, "browser_cpu_s": browser_cpu_s}


async def main_async(args) -> dict:
    figures = {}
    with app_server(Path("/tmp/bench_browser_streamlit.log")) as (url, server):
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
            first = await browser.new_page()
            started = time.monotonic()
            await first.goto(url)
            await first.wait_for_selector("text=Per-class results", timeout=TIMEOUT_MS)
            figures["first page"] = {"kpi_s": time.monotonic() - started}
            await settled(first)  # the server's first page (loads the compiled simulator)
            figures["first page"]["page_s"] = time.monotonic() - started
            await first.close()
            if args.sessions:
                figures["sessions"] = await many_sessions(browser, url, args.sessions, server.pid)
            else:
                figures["default preset"] = await one_session(browser, url, args.repeats)
                article = f"{url}/?{state.QUERY_KEY}={state.encode(read_toml(ARTICLE))}"
                figures["article preset"] = await one_session(browser, article, args.repeats)
            await browser.close()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sessions", type=int, default=0, help="measure this many sessions at once instead")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    figures = asyncio.run(main_async(args))
    first = figures["first page"]
    print(f"The server's first page: cards after {first['kpi_s']:.1f} s, complete after {first['page_s']:.1f} s")
    if "sessions" in figures:
        s = figures["sessions"]
        print(f"{s['sessions']} sessions at once: page load p50 {s['load_p50_s']:.1f} s (slowest "
              f"{s['load_max_s']:.1f} s); a rate change p50 {s['change_p50_s']:.1f} s "
              f"(slowest {s['change_max_s']:.1f} s); CPU seconds meanwhile: the server {s['server_cpu_s']:.0f}, the "
              f"browser {s['browser_cpu_s']:.0f}")
    else:
        print("| preset | change | KPI cards (s) | whole page (s) |\n|---|---|---:|---:|")
        for preset, changes in figures.items():
            if preset == "first page":
                continue
            for change, t in changes.items():
                print(f"| {preset} | {change} | {t['kpi_s']:.2f} | {t['page_s']:.2f} |")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
