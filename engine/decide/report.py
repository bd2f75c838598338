"""The plan as a report to hand over: one self-contained HTML file (the interactive charts and Plotly itself
embedded, so it opens offline) and a PDF printed from that file by Chromium.

Contents: a summary of two or three printed pages (the question as the title; the answer in one sentence and its
caveat; the recommendation's cost in every billing mode and currency, and over the whole traffic three ways where
the rate moves; the risks; each target's value with its 95% interval and the step times' held-out error; what
limits the fleet and what growth would need; the targets chart; the next cheapest plans; the recipe attached),
then an appendix on a page of its own with the evidence in full: the cost-against-target chart, the hour-by-hour
bill, every alternative and what was not possible, the workload and the assumptions behind the numbers (classes,
server limits, the step times of every fleet shape, the offers' sources and dates) and the scenario attached.
Every figure comes from the planner's answer (``planner.plan``), so the report, the page and ``plan --json`` agree.
"""

from __future__ import annotations

import base64
import html
from datetime import date
from pathlib import Path

import pandas as pd
import plotly.io as pio
from plotly.offline import get_plotlyjs

from ..scenario.config import Arrival, Scenario, TokenDist, field_label, load_scenario, to_toml
from ..scenario.errors import ScenarioError
from ..hardware.kernel_tables import engine_version_words
from ..scenario.labels import cards_text, format_label, parallel_label, words
from ..scenario.link import page_link
from ..scenario.metric_table import metric, money_range
from ..scenario.origin import Origin
from ..sim.simulate import estimated_offered_load, load_text
from .cost import (INTERRUPTIBLE_TERMS, STALE_PRICE_DAYS, billing_modes, deployment_cost, firm_offer,
                   offers_table, price_age_days, priced_by)
from .plan_charts import over_time_chart, pareto_chart, targets_chart
from .pdf_printer import CHROMIUM_ENV, chromium, write_pdf  # noqa: F401 - the report's printer
from .price_list import price_list_csv
from .recipe import engine_versions, recipe_files
from .plan_text import (alternatives_frame, caveat, cut_text, energy_text, hours_frame, mix_text, mode_words,
                        no_plan_text, not_possible_frame, over_time_frame, over_time_heading, policy_label,
                        run_length_words, sensitivity_text, shape, step_times_text, summary_line, target_text,
                        traffic_text, tuned_text)
from .planner import Question, answer_key

PLANNER_PAGE = "planner"
PRICE_LIST_FILE = "price_list.csv"  # the attached price list a plan was priced with
SUMMARY_ALTERNATIVES = 5  # alternatives in the summary's table; every one in the appendix
STYLE = """
body { font-family: 'Source Sans Pro', 'Helvetica Neue', Arial, sans-serif; max-width: 1100px; margin: 24px auto;
       padding: 0 16px; color: #1f2430; line-height: 1.45; }
h1 { font-size: 1.7rem; margin-bottom: 0.2rem; } h2 { font-size: 1.25rem; margin-top: 1.8rem;
     border-bottom: 1px solid #ddd; padding-bottom: 0.2rem; }
.answer { background: #e8f5e9; border-left: 5px solid #2e7d32; padding: 10px 14px; }
.none { background: #fff3e0; border-left: 5px solid #ef6c00; padding: 10px 14px; }
.caveat { background: #fff8e1; border-left: 5px solid #f9a825; padding: 10px 14px; margin-top: 8px; }
.meta { color: #5f6673; font-size: 0.9em; }
table { border-collapse: collapse; margin: 8px 0; font-size: 0.88rem; }
th, td { border: 1px solid #d9dce1; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #f3f4f6; }
.chart, .keep { page-break-inside: avoid; break-inside: avoid; }
.appendix { break-before: page; page-break-before: always; }
@page { size: A4 landscape; margin: 12mm; }
@media print { body { max-width: none; margin: 0; font-size: 11px; } table { font-size: 9px; }
  a { color: #1f2430; } .modebar-container { display: none !important; }
  tr, .answer, .caveat { break-inside: avoid; } h2 { break-after: avoid; } }
"""


def _table(frame: pd.DataFrame) -> str:
    return frame.to_html(index=False, escape=True, na_rep="—", border=0)


def _chart(fig, caption: str = "") -> str:
    """A chart with the sentence that reads it (``caption``, HTML) above it, in one box a page does not split."""
    fig.update_layout(width=1000)  # one width on screen and on the printed page
    return f'<div class="chart">{caption}{pio.to_html(fig, full_html=False, include_plotlyjs=False)}</div>'


PLAN_FILE = "plan.toml"  # the report's attachment that reopens its plan: the scenario and the question


def plan_toml(data: dict, question: Question) -> str:
    """The scenario ``data`` and the ``question`` asked of it (the Planner page's controls, ``planner_view``) as one
    TOML file: ``[scenario]`` and ``[planner]`` (what the sidebar's upload reopens on the Planner page)."""
    return to_toml({"scenario": data, "planner": planner_view(question, data)})


def planner_view(question: Question, data: dict) -> dict:
    """The Planner page's controls for ``question`` on scenario ``data`` (``ui.view`` keys), and the answer's key, so
    the report's link reopens the question with its answer."""
    view = {"plan_gpus": list(question.gpus), "plan_offers": list(question.offers),
            "plan_policies": list(question.policies),
            "plan_quants": list(question.quants), "plan_routers": list(question.routers),
            "plan_decodings": list(question.decodings),
            "plan_budget": question.budget, "plan_tune": question.tune, "plan_seeds": question.seeds,
            "plan_requests": question.requests, "plan_prices": question.prices, "cost_billing": question.billing,
            "cost_currency": question.currency, "plan_answer": answer_key(data, question),
            "cost_fx": question.cny_per_usd, "plan_price_list_named": question.price_list_named}
    for i, target in enumerate(question.targets):
        view.update({f"plan_class_{i}": target.cls, f"plan_metric_{i}": target.key, f"plan_limit_{i}": target.limit})
    return {k: v for k, v in view.items() if v not in ([], (), None)}


def cost_frame(plan: dict, currency: str, cny_per_usd: float) -> pd.DataFrame:
    """The recommended fleet's rent through its offer in every billing mode it is sold under, in the customer's
    ``currency`` and, where the offer is quoted in another, in that one too (what its invoice will say)."""
    rows = []
    row = offers_table().loc[plan["offer"]]
    for billing in billing_modes(plan["offer"]):
        for currency in dict.fromkeys((currency, str(row["currency"]))):
            cost = deployment_cost(plan["offer"], plan["cards"], billing, currency, cny_per_usd)
            rows.append({"bought": mode_words(str(row["terms"]), billing, float(row["annual_discount"])),
                         "currency": currency,
                         "per hour": money_range(cost.per_hour), "per month": money_range(cost.per_month)})
    return pd.DataFrame(rows)


def targets_frame(plan: dict) -> pd.DataFrame:
    return pd.DataFrame([{"target": t["target"], "mean over the seeds (95% interval)": target_text(t),
                          "met (every seed and the interval)": "yes"} for t in plan["targets"]])


def workload_frame(scenario: Scenario) -> pd.DataFrame:
    """The classes: share, priority, targets, time-out and length distributions, in words."""
    total = sum(c.share for c in scenario.workload.classes) or 1.0
    rows = []
    for c in scenario.workload.classes:
        lengths = {name: ", ".join(f"{field_label(TokenDist, k).lower()} {v:g}" for k, v in vars(dist).items()
                                   if v is not None and k != "dist")
                   if dist is not None else "from the trace"
                   for name, dist in (("prompt", c.prompt_tokens), ("output", c.output_tokens))}
        rows.append({"class": c.name, "share": f"{c.share / total:.0%}", "priority": c.priority,
                     "TTFT target": metric("ttft_p99_ms").text(c.sla_ttft_ms),
                     "end-to-end target": metric("e2e_p99_ms").text(c.sla_e2e_ms),
                     "time-out": metric("ttft_p99_ms").text(c.timeout_ms),
                     "prompt tokens": f"{words('dist', c.prompt_tokens.dist)} ({lengths['prompt']})"
                     if c.prompt_tokens else lengths["prompt"],
                     "output tokens": f"{words('dist', c.output_tokens.dist)} ({lengths['output']})"
                     if c.output_tokens else lengths["output"]})
    return pd.DataFrame(rows)


def assumptions(scenario: Scenario, question: Question, best: dict | None = None) -> list[str]:
    """The facts the numbers rest on, one sentence each (``best``: the recommendation, whose run length is quoted)."""
    w, s = scenario.workload, scenario.server
    arrival = (f"the trace {Path(w.trace.path).name}" if w.arrival is None else
               f"{words('arrival', w.arrival.process)} arrivals at {rate_text(w.arrival)}")
    runs = (f"{question.seeds} runs of the whole trace" if w.arrival is None else
            run_length_words(question.requests, question.seeds, best))
    lines = [f"Workload: {arrival}; every decision rests on {runs} (seeds {scenario.seed} to "
             f"{scenario.seed + question.seeds - 1}); a fleet meets a target only if it does on every run."]
    if s.step_model == "roofline":
        lines.append(f"Model {s.model} with {format_label(s.quant)} weights and a {format_label(s.kv_quant)} KV "
                     f"cache; at most {s.max_batch_size} sequences and {s.max_batched_tokens:,} tokens per iteration, "
                     f"batching: {words('batching', s.batching)}, admission: {words('admission', s.admission)}, "
                     f"{s.gpu_memory_utilization:.0%} of GPU memory for the server; serving engine "
                     f"{engine_version_words(s.engine, s.engine_version or 'at its newest measured version')}.")
        split = parallel_label(s.tensor_parallel, s.expert_parallel, s.attention_data_parallel)
        given = f"The scenario as given ({scenario.fleet.replicas} x {split} {s.gpu})"
        try:
            lines.append(f"{given} runs at an offered load of {load_text(estimated_offered_load(scenario))} (an "
                         f"estimate).")
        except ScenarioError:  # the model does not fit the fleet as given; the plan sized fleets where it does
            lines.append(f"{given} cannot hold the model; the plan sized only fleets that do.")
    tried = ", ".join(map(policy_label, question.policies or (scenario.policy.name,)))
    lines.append(f"Router: {words('router', scenario.fleet.router)}; policy parameters as in the scenario "
                 f"({policy_label(scenario.policy.name)} in it; the plan tried {tried}).")
    lines.append("Prices: the offers below, as quoted on their dates; 'monthly' and 'hourly' price the offer as "
                 f"quoted, 'annual' with its prepay discount; {question.cny_per_usd:g} CNY per USD.")
    return lines


def calibration_frame(answer: dict) -> pd.DataFrame:
    """Where the step times of every fleet shape in the answer come from (measured operator tables or the
    roofline) and the held-out error of the closest validated configuration."""
    plans = [p for p in (answer["recommendation"], *answer["alternatives"]) if p is not None]
    rows = {}
    for plan in plans:
        name = f"{shape(plan)} {plan['gpu']} {format_label(plan['quant'])}"
        rows.setdefault(name, {"fleet shape": name, "step times": step_times_text(plan, detail=True)})
    return pd.DataFrame(list(rows.values()))


def offers_frame(answer: dict, today: date) -> pd.DataFrame:
    """The offers priced in the answer, with their terms, whether the price is firm, its source and date (flagged
    when older than ``STALE_PRICE_DAYS`` on ``today``)."""
    plans = [p for p in (answer["recommendation"], *answer["alternatives"]) if p is not None]
    table = offers_table()
    rows = []
    for offer in dict.fromkeys(p["offer"] for p in plans):
        row = table.loc[offer]
        price = money_range((row["price_low"], row["price_high"]), row["currency"])
        age = price_age_days(offer, today)
        rows.append({"offer": offer, "vendor": row["vendor"], "GPU": row["gpu"],
                     "price": f"{price} per {row['period']} per {row['gpus_per_unit']} card(s)",
                     "terms": row["terms"], "firm": "yes" if firm_offer(offer) else "no (estimate)",
                     "source": row["source"],
                     "as of": row["as_of"] + (f" (old: {age} days)" if age > STALE_PRICE_DAYS else "")})
    return pd.DataFrame(rows)


def risks(answer: dict, today: date) -> list[str]:
    """What could make the recommendation cost more or serve worse than it reads, one sentence each: capacity the
    provider can take back, a price that is an estimate or old, step times not measured."""
    best = answer["recommendation"]
    if best is None:
        return []
    row, lines = offers_table().loc[best["offer"]], []
    if row["terms"] in INTERRUPTIBLE_TERMS:
        lines.append(f"{best['offer']} rents {row['terms']} capacity: the provider can take the cards back at any "
                     "time, and a service held to latency targets then misses them until it is replaced. Price it "
                     "on-demand or reserved before you commit.")
    if not firm_offer(best["offer"]):
        lines.append(f"The price of {best['offer']} is not firm ({row['terms']} terms"
                     + (", a range" if row["price_low"] != row["price_high"] else "")
                     + (", an estimate" if row["estimate"] else "") + "): ask the provider for a quote.")
    age = price_age_days(best["offer"], today)
    if age > STALE_PRICE_DAYS:
        lines.append(f"The price of {best['offer']} was quoted on {row['as_of']}, {age} days before this report: "
                     "check it is still current.")
    if not best["calibrated"]:
        lines.append(f"The step times of {best['gpu']} in this shape rest on an estimate: measure them before "
                     "renting.")
    return lines


def rate_text(arrival: Arrival) -> str:
    """An arrival rate in words, three significant figures: "10.8 req/s", or for a rate that moves "10.8 req/s on
    average over the day shape servegen-language-small-day (21.6 at the peak, 5.1 at the lowest)"."""
    curve = arrival.curve()
    if curve is None:
        return f"{arrival.rate_per_s:,.3g} req/s"
    over = f"the day shape {arrival.shape}" if arrival.shape else "the scenario's rate curve"
    return (f"{arrival.rate_per_s:,.3g} req/s on average over {over} ({curve.rates_per_s.max():,.3g} at the peak, "
            f"{curve.rates_per_s.min():,.3g} at the lowest)")


def served_text(scenario: Scenario, answer: dict) -> str:
    """What a plan serves, from the scenario as asked (never its preset's name, which a change leaves behind):
    "DeepSeek-R1 at 4 req/s on average (10 at the peak)"."""
    moving = answer.get("traffic")
    traffic = (f"the trace {Path(scenario.workload.trace.path).name}" if scenario.workload.trace is not None else
               f"{moving['mean_rate_per_s']:,.3g} req/s on average ({moving['peak_rate_per_s']:,.3g} at the peak)"
               if moving else rate_text(scenario.workload.arrival))
    return f"{scenario.server.model} at {traffic}"


def title(scenario: Scenario, question: Question, answer: dict) -> str:
    """The report's title, from the question and its answer: "Llama-3-70B at 40 req/s, interactive TTFT p99 <= 2.00
    s: rent 10 x TP4 H100-80G for 44,384 USD a month"."""
    asked = f"{served_text(scenario, answer)}, {question.targets[0].describe()}"
    asked += f" (+{len(question.targets) - 1} more)" if len(question.targets) > 1 else ""
    best = answer["recommendation"]
    if best is None:
        return f"{asked}: no plan meets the targets"
    cost = best["monthly_cost"]
    money = money_range((cost["low"], cost["high"]), cost["currency"])
    return f"{asked}: rent {shape(best)} {best['gpu']} for {money} a month"


def report_html(data: dict, question: Question, answer: dict, app_url: str | None, created: str,
                origin: Origin = Origin()) -> str:
    """The whole report as one HTML document (Plotly inlined: it needs no network to open); ``app_url``: the app's
    public address (``link.public_address``), None to carry the scenario instead of a link back. Offers are read
    from the question's price list when it has one."""
    with priced_by(question.price_list):
        return _report_html(data, question, answer, app_url, created, origin)


def _report_html(data: dict, question: Question, answer: dict, app_url: str | None, created: str,
                 origin: Origin) -> str:
    scenario = load_scenario(data, origin=origin)
    e = html.escape
    best = answer["recommendation"]
    today = date.fromisoformat(created[:10])
    heading = title(scenario, question, answer)
    link = page_link(app_url, PLANNER_PAGE, data, planner_view(question, data)) if app_url else ""
    reopen = (f'<a href="{e(link)}">Reopen this plan in Scheduler Lab</a>.' if app_url else
              f"The plan is attached at the end ({PLAN_FILE}), to reopen it.")
    if question.price_list:  # a link cannot carry a file: the report does, and says to upload it again
        reopen += (f" Priced with your own price list ({e(question.price_list_named or PRICE_LIST_FILE)}), attached "
                   "at the end: upload it again on the Planner page to plan with it.")
    parts = [f"<h1>{e(heading)}</h1>",
             f'<p class="meta">Scheduler Lab, {e(created)}; hardware and price '
             f'tables version {e(str(answer.get("data_version", "unknown")))}. Targets: '
             f"{e('; '.join(t.describe() for t in question.targets))}. {reopen}</p>"]
    cut = cut_text(answer)
    if cut:
        parts.append(f'<p class="caveat">{e(cut)}.</p>')
    if best is None:
        parts.append(f'<p class="none">{e(no_plan_text(answer))}.</p>')
    else:
        parts.append(f'<p class="answer"><b>Recommended:</b> {e(summary_line(best))}</p>')
        warning = caveat(answer, "python -m engine calibrate, or the Hardware & Cost page")
        if warning:
            parts.append(f'<p class="caveat">{e(warning)}</p>')
        unit = best["cost_per_1m_output_tokens"]
        per_million = money_range((unit["low"], unit["high"]), best["monthly_cost"]["currency"])
        hazards = risks(answer, today)
        energy = energy_text(best)
        parts += ["<h2>What it costs</h2>", _table(cost_frame(best, question.currency, question.cny_per_usd)),
                  f'<p class="meta">{cards_text(best["cards"])} through {e(best["offer"])}; per 1M output tokens '
                  f"at the simulated load: {e(per_million)}.</p>",
                  *([f'<p class="meta">{e(energy)}.</p>'] if energy else []),
                  *over_time_parts(answer),
                  *(["<h2>Risks</h2>", "<ul>" + "".join(f"<li>{e(s)}</li>" for s in hazards) + "</ul>"]
                    if hazards else []),
                  "<h2>Targets, and how sure each figure is</h2>", _table(targets_frame(best)),
                  f'<p class="meta">Step times: {e(step_times_text(best, detail=True))}. The interval is over the '
                  f"seeds' runs; the step times' error above is the held-out error of the closest validated "
                  "configuration.</p>",
                  "<h2>What limits this fleet</h2>",
                  "<ul>" + "".join(f"<li>{e(s)}</li>" for s in answer["diagnosis"]) + "</ul>"]
        for sentence in (sensitivity_text(answer), tuned_text(answer), mix_text(answer)):
            if sentence:
                parts.append(f"<p>{e(sentence)}</p>")
    alternatives = answer["alternatives"]
    if alternatives:
        parts += [f"<h2>The next cheapest ({min(len(alternatives), SUMMARY_ALTERNATIVES)} of "
                  f"{len(alternatives)}; all in the appendix)</h2>",
                  _table(alternatives_frame(alternatives[:SUMMARY_ALTERNATIVES]))]
    if best is not None:
        files = recipe_files(best, scenario)
        parts += ["<h2>Deploy it</h2>",
                  f"<p>Attached: one server's launch command under "
                  f"{e(', '.join(engine_versions(files, best['gpu'])))}, and the fleet as a Kubernetes manifest: "
                  + ", ".join(_attachment(name, text) for name, text in files.items())
                  + ". The README says what the engines cannot take as a flag.</p>"]
    parts += ['<h2 class="appendix">Appendix: the evidence in full</h2>']
    if best is not None:
        parts += [_chart(targets_chart(answer, question.targets),
                         "<p>Each target's mean over the seeds with its 95% interval, for the recommendation (gold) "
                         "and the cheapest alternatives (grey: step times an estimate only); dashed: the limit.</p>"),
                  _chart(pareto_chart(answer, question.targets[0]),
                         "<p>Cost against the first target for every priced plan (the recommendation starred; plans "
                         "whose step times are an estimate marked apart):</p>"),
                  *hours_parts(answer)]
    if alternatives:
        parts += [f"<h2>Alternatives, cheapest first ({len(alternatives)})</h2>",
                  _table(alternatives_frame(alternatives))]
    if answer["not_possible"]:
        parts += ["<h2>Not possible</h2>", _table(not_possible_frame(answer["not_possible"]))]
    parts += ["<h2>Workload and assumptions</h2>", _table(workload_frame(scenario)),
              "<ul>" + "".join(f"<li>{e(s)}</li>" for s in assumptions(scenario, question, best)) + "</ul>",
              "<h2>Step times of every fleet shape in this plan</h2>",
              _table(calibration_frame(answer)),
              "<h2>Offers priced</h2>", _table(offers_frame(answer, today))]
    if question.price_list:
        attached = _attachment(PRICE_LIST_FILE, price_list_csv(question.price_list), "Your price list, attached")
        parts.append(f'<p class="meta">{attached}: the offers this plan rented through '
                     f"({e(question.price_list_named or PRICE_LIST_FILE)}), as a CSV to upload on the Planner page or "
                     "to pass to plan --price-list.</p>")
    parts.append(f'<p class="meta">{_attachment(PLAN_FILE, plan_toml(data, question), "The plan, attached")}: '
                 "the scenario and the question asked of it; upload it in Scheduler Lab's sidebar (Upload a "
                 "scenario) to reopen this plan on the Planner page. "
                 f'{_attachment("scenario.toml", to_toml(data), "The scenario alone, attached")}: everything the '
                 "plan simulated, as a file to open in Scheduler Lab or to plan again from the command line.</p>")
    run = answer["run"]
    parts.append(f'<p class="meta">{run["evaluations"]:,} simulations in {run["wall_s"]:.1f} s on {run["workers"]} '
                 "cores. Latencies are simulated with the step times above; see the app's Method page for the "
                 "model.</p>")
    return ("<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
            f"<title>{e(heading)}</title><style>{STYLE}</style>"
            f"<script>{get_plotlyjs()}</script></head><body>{''.join(kept_together(parts))}</body></html>")


def kept_together(parts: list[str]) -> list[str]:
    """``parts`` with each heading and the block after it in one ``keep`` box, which a printed page does not split
    (a heading is never left alone at the foot of a page; Chromium does not honour break-after on a heading)."""
    kept, k = [], 0
    while k < len(parts):
        part = parts[k]
        if part.startswith("<h2") and k + 1 < len(parts):
            appendix = ' class="appendix"' in part
            heading = part.replace(' class="appendix"', "")
            kept.append(f'<div class="keep{" appendix" if appendix else ""}">{heading}{parts[k + 1]}</div>')
            k += 2
        else:
            kept.append(part)
            k += 1
    return kept


def over_time_parts(answer: dict) -> list[str]:
    """The report's section on a moving rate: the recommended fleet bought three ways over the whole traffic (hour
    by hour in the appendix: ``hours_parts``)."""
    over, e = answer.get("over_time"), html.escape
    if not over:
        return []
    parts = ["<h2>Over the whole traffic: fixed, autoscaled, or reserved + bursts</h2>"]
    if answer.get("traffic"):
        parts.append(f"<p>{e(traffic_text(answer['traffic'], answer.get('over_time')))}</p>")
    if "note" in over:
        return parts + [f'<p class="caveat">Not priced over time: {e(over["note"])}.</p>']
    currency = answer["recommendation"]["monthly_cost"]["currency"]
    return parts + [f"<p>{e(over_time_heading(over))}</p>", _table(over_time_frame(over, currency)),
                    '<p class="meta">Hour by hour in the appendix.</p>']


def hours_parts(answer: dict) -> list[str]:
    """The appendix's hour by hour of a moving rate's three ways to buy the fleet, chart and table ([] without
    one)."""
    over = answer.get("over_time")
    if not over or "note" in over:
        return []
    currency = answer["recommendation"]["monthly_cost"]["currency"]
    return ["<h2>Hour by hour</h2>", _chart(over_time_chart(over, currency)),
            "<p>Windows longer than an hour as they are:</p>", _table(hours_frame(over, currency))]


def _attachment(name: str, text: str, label: str = "") -> str:
    """A link that saves ``text`` as the file ``name`` (the report stays one self-contained file)."""
    encoded = base64.b64encode(text.encode()).decode()
    return f'<a download="{html.escape(name)}" href="data:text/plain;base64,{encoded}">{html.escape(label or name)}</a>'

