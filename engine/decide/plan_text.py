"""The planner's answer in words, for the Planner page, the report and a terminal: the recommendation in one
paragraph, the alternatives as a table with one unit per column (no NaN: "—" where there is no value), and what could
not be sized. Policies, routers, weight formats and decodings read as their labels (``engine.scenario.labels``)."""

from __future__ import annotations

import shutil
import sys

import textwrap

import pandas as pd

from ..sim.steady import STEADY_FLIGHTS
from ..scenario.labels import cards_text, count_text, format_label, key_words, parallel_label, words
from ..scenario.metric_table import metric, money_range, money_text, significant
from ..sim.policies import POLICY_LABELS
from .bill import STRATEGY_SHORT
from .cost import BILLING_MODES

ALTERNATIVES_SHOWN = 12
TEXT_WIDTH = 120  # columns of the terminal text's paragraphs
ENERGY_COLUMN = "kWh per 1M output tokens (at most)"  # the terminal's table leaves it out: the recommendation says it


def target_text(entry: dict) -> str:
    """One target's mean over the seeds and its 95% confidence interval: "812 ms (790 ms–840 ms)", "812 ms (up to
    840 ms)" where the interval reaches zero (``planner.confidence_95``), or "13.1 ms (95% interval narrower than the
    last digit)" where both its ends print as the mean does; then, where the step times' held-out error widened
    it, its pessimistic end: "812 ms (790 ms–840 ms; at worst 966 ms with the step times 15% off, as held out)"."""
    m = metric(entry["metric"])
    low, high = entry["ci95"]
    parts = []
    if high is not None:
        narrow = m.text(low) == m.text(high) == m.text(entry["value"]) if low is not None else False
        parts.append(f"up to {m.text(high)}" if low is None else "95% interval narrower than the last digit" if narrow
                     else f"{m.text(low)}–{m.text(high)}")
    error, worst = entry.get("step_error_pct"), entry.get("pessimistic")
    if error and worst is not None:
        bound = "at worst" if m.lower_is_better else "at least"
        parts.append(f"{bound} {m.text(worst)} with the step times {error:.0f}% off, as held out")
    return m.text(entry["value"]) + (f" ({'; '.join(parts)})" if parts else "")


def shape(plan: dict) -> str:
    """ "2 x TP4", "1 x DP8 + EP8", or for a disaggregated fleet "3 x TP4 (1 prefill + 2 decode)"."""
    pools = f" ({plan['prefill_replicas']} prefill + {plan['decode_replicas']} decode)" \
        if "prefill_replicas" in plan else ""
    split = plan.get("expert_parallel", False)
    return f"{plan['replicas']} x {parallel_label(plan['tensor_parallel'], split, split)}{pools}"


# An offer's terms as one phrase (offers.csv ``terms``); the billing mode is said with it (``billing_words``).
TERMS_WORDS = {"on-demand": "on demand", "reserved": "reserved term", "spot": "spot (interruptible)",
               "spot to on-demand": "spot to on-demand (interruptible)", "unstated": "terms not stated"}


TERMS_SHORT = {"on-demand": "on demand", "reserved": "reserved", "spot": "spot",
               "spot to on-demand": "spot/on demand", "unstated": "unstated"}  # a table cell's terms


def billing_words(plan: dict, short: bool = False) -> str:
    """How the plan is bought, in one phrase that cannot contradict itself (``mode_words``); where annual prepay was
    asked of an offer without an annual discount it says so ("reserved term, no annual discount offered").
    ``short``: a table cell's few words ("reserved (no annual)", "on demand, annual -20%")."""
    cost, price = plan["monthly_cost"], plan.get("price")
    if price is None:
        return words("billing", cost["billing"]).lower()
    if short:
        terms = TERMS_SHORT.get(price["terms"], price["terms"])
        if cost["billing"] == BILLING_MODES[1]:
            return f"{terms}, annual {-price.get('annual_discount', 0.0):.0%}"
        return terms + (" (no annual)" if cost.get("billing_asked") == BILLING_MODES[1] else "")
    phrase = mode_words(price["terms"], cost["billing"], price.get("annual_discount", 0.0))
    if cost["billing"] != BILLING_MODES[1] and cost.get("billing_asked") == BILLING_MODES[1]:
        return f"{TERMS_WORDS.get(price['terms'], price['terms'])}, no annual discount offered"
    return phrase


def mode_words(terms: str, billing: str, annual_discount: float) -> str:
    """An offer's terms under one billing mode: "on demand, pay as you go", "reserved term", "spot
    (interruptible)", "annual prepay, 20% off the reserved term price"."""
    named = TERMS_WORDS.get(terms, terms)
    if billing == BILLING_MODES[1]:
        return f"annual prepay, {annual_discount:.0%} off the {named} price"
    return f"{named}, pay as you go" if terms == "on-demand" else named


def price_words(plan: dict) -> str:
    """How firm the plan's price is and when it was quoted: "firm, quoted 2026-04-13", "estimate"."""
    price = plan.get("price")
    if price is None:  # a plan without its offer's terms
        return "estimate" if plan["monthly_cost"].get("estimate") else "firm"
    return f"{'firm' if price['firm'] else 'estimate'}, quoted {price['as_of']}"


def summary_line(plan: dict) -> str:
    """The recommendation in words."""
    cost, unit = plan["monthly_cost"], plan["cost_per_1m_output_tokens"]
    targets = "; ".join(f"{t['class']} {metric(t['metric']).label} {target_text(t)}" for t in plan["targets"])
    headroom = (f"; meets the targets up to {plan['headroom_rate_per_s']:,.2f} req/s"
                if plan["headroom_rate_per_s"] is not None else "")
    same = f" (as good: {', '.join(map(policy_label, plan['same_fleet_policies']))})" \
        if plan["same_fleet_policies"] else ""
    decoding = ", speculative decoding" if plan["decoding"] == "speculative" else ""
    targets += over_the_traffic_text(plan)
    return (f"{shape(plan)} {plan['gpu']} through {plan['offer']} ({cards_text(plan['cards'])}"
            f"{rented_text(plan)}, "
            f"{format_label(plan['quant'])} weights{decoding}), policy "
            f"{policy_label(plan['policy']['name'])}{same}, router {words('router', plan['router'])}: "
            f"{money_range((cost['low'], cost['high']), cost['currency'])}"
            f" per month ({billing_words(plan)}; price {price_words(plan)}), "
            f"{money_range((unit['low'], unit['high']), cost['currency'])} per 1M "
            f"output tokens; {targets}{headroom}; step times {plan['step_times']}")


def over_the_traffic_text(plan: dict) -> str:
    """What the same fixed fleet gave over the whole moving traffic (the day run of ``over_time``), so that the
    headline and the day agree: "; over the whole traffic, fixed: chat TTFT p99 405 ms", or where it missed a
    target there, "; but over the whole traffic, fixed, it misses: chat TTFT p99 13.9 s (missed)"; "" for traffic
    that does not move."""
    day = plan.get("over_the_traffic")
    if not day:
        return ""
    values = "; ".join(f"{t['class']} {metric(t['metric']).label} "
                       f"{'—' if t['value'] is None else metric_value_text(t)}" for t in day["targets"])
    return (f"; over the whole traffic, fixed: {values}" if day["meets"] else
            f"; but over the whole traffic, fixed, it misses: {values}")


def energy_text(plan: dict) -> str | None:
    """A plan's ``energy_words``; None for a plan without the figure."""
    return energy_words(plan.get("energy") or {}, plan["cards"], plan["monthly_cost"]["currency"])


def energy_words(energy: dict, cards: int, currency: str) -> str | None:
    """ "Energy: at most 1.56 kWh per 1M output tokens (8 cards at their 700 W board power limit the whole time),
    0.227 USD at 0.146 USD/kWh, which a rental's price includes" (``decide.energy.energy_entry``; a fleet of mixed
    GPUs: "at their 6,400 W of board power limits"); None without a figure (no output token was made)."""
    kwh = energy.get("kwh_per_1m_output_tokens_max")
    if kwh is None:
        return None
    price = energy["price_per_kwh"]
    drawn = (f"{energy['card_power_w']:,.0f} W board power limit" if energy.get("card_power_w") is not None
             else f"{energy['fleet_power_w']:,.0f} W of board power limits")
    their = "its" if cards == 1 else "their"
    return (f"Energy: at most {significant(kwh, 3)} kWh per 1M output tokens ({cards_text(cards)} at {their} {drawn} "
            f"the whole time), {money_text(energy['cost_per_1m_output_tokens_max'])} {currency} at {money_text(price)} "
            f"{currency}/kWh, which a rental's price includes")


def rented_text(plan: dict) -> str:
    """ " of the 8 rented" when the offer rents whole units of more cards than the plan uses, else nothing."""
    idle = plan.get("idle_cards", 0)
    return f" of the {plan['cards'] + idle} rented" if idle else ""


def cards_rented_text(plan: dict) -> str:
    """The cards a plan uses, and those it rents when more ("1 of the 8 rented")."""
    return f"{plan['cards']:,}{rented_text(plan)}"


def policy_label(name: str) -> str:
    """A policy's words ("First come, first served"); a name the policy table lacks as given."""
    return POLICY_LABELS.get(name, name)


def policy_text(plan: dict) -> str:
    """The plan's policy in words and how many others do as well with the same fleet."""
    same = len(plan["same_fleet_policies"])
    return policy_label(plan["policy"]["name"]) + (f" (+{same} as good)" if same else "")


def step_times_text(plan: dict, detail: bool = False) -> str:
    """What priced a plan's step times and how far they can be trusted (``detail``: the whole line, else a table
    cell's few words), marked "(estimate)" when they may not win a ranking and do not say so already."""
    words = plan.get("step_times_detail", plan["step_times"]) if detail else plan["step_times"]
    return words + ("" if plan["calibrated"] or "estimate" in words else " (estimate)")


def alternatives_frame(plans: list[dict]) -> pd.DataFrame:
    """One row per plan, each column one figure with its unit."""
    rows = []
    for plan in plans:
        cost, unit = plan["monthly_cost"], plan["cost_per_1m_output_tokens"]
        rows.append({
            # what to rent and what it costs and achieves first; how it is run and how sure after
            "offer": plan["offer"], "GPU": plan["gpu"], "shape": shape(plan), "weights": format_label(plan["quant"]),
            "decoding": words("decoding", plan["decoding"]), "cards": cards_rented_text(plan),
            f"per month ({cost['currency']})": money_range((cost["low"], cost["high"])),
            "bought": billing_words(plan, short=True),
            "price": price_words(plan),
            **{t["target"]: target_text(t) for t in plan["targets"]},
            f"per 1M output tokens ({cost['currency']})": money_text(unit["low"]) if unit["low"] is not None else "—",
            ENERGY_COLUMN: _kwh_text(plan),
            "policy": policy_text(plan),
            "headroom (req/s)": f"{plan['headroom_rate_per_s']:,.2f}" if plan["headroom_rate_per_s"] else "—",
            "step times": step_times_text(plan),
        })
    return pd.DataFrame(rows)


def _kwh_text(plan: dict) -> str:
    kwh = (plan.get("energy") or {}).get("kwh_per_1m_output_tokens_max")
    return "—" if kwh is None else significant(kwh, 3)


def sensitivity_text(answer: dict) -> str | None:
    """"If the workload grows: +20% traffic needs 4 x TP1 (4 cards), 4,438 USD per month; ..." (None without any)."""
    best, parts = answer["recommendation"], []
    for item in answer.get("sensitivity", []):
        if "note" in item:
            parts.append(f"{item['change']}: {item['note']}")
            continue
        cost = item["monthly_cost"]
        split = best.get("expert_parallel", False)
        shape_text = parallel_label(best["tensor_parallel"], split, split)
        parts.append(f"{item['change']} needs {item['replicas']} x {shape_text} "
                     f"({cards_text(item['cards'])}), "
                     f"{money_range((cost['low'], cost['high']), cost['currency'])} per month")
    return f"If the workload grows, the same GPU and policy: {'; '.join(parts)}" if parts else None


def mix_text(answer: dict) -> str | None:
    """The mixed fleet proposed beside the answer, in words ("Cheaper as a mixed fleet: 4 x TP1 H100-80G through
    vast-h100-spot + 1 x TP1 A100-80G through runpod-a100-sxm, ..."), or what was tried; None when nothing was."""
    mix = answer.get("mix")
    if mix is None:
        return answer.get("mix_note") or None
    cost, was = mix["monthly_cost"], mix["instead_of"]
    groups = " + ".join(f"{g['replicas']} x TP{g['tensor_parallel']} {g['gpu']} ({format_label(g['quant'])} weights) "
                        f"through "
                        f"{g['offer']}" for g in mix["groups"])
    targets = "; ".join(f"{t['class']} {metric(t['metric']).label} {target_text(t)}" for t in mix["targets"])
    estimate = "" if mix["calibrated"] else "; step times of a group rest on an estimate"
    return (f"Cheaper as a mixed fleet: {groups} ({cards_text(mix['cards'])}, router {words('router', mix['router'])} "
            f"weighing each "
            f"server by its speed), {money_range((cost['low'], cost['high']), cost['currency'])} per month, "
            f"{money_text(mix['saving_per_month'])} {cost['currency']} less than {was['replicas']} x "
            f"TP{was['tensor_parallel']} "
            f"{was['gpu']} through {was['offer']}; {targets}{estimate}")


def tuned_text(answer: dict) -> str | None:
    """What tuning each policy first found: "Tuned on the scenario's own fleet before sizing: Dynamic cost with
    preemption (alpha (waiting) 9.38, ...); Weighted fair queuing kept its parameters (the objective did not move
    at the scenario's load)"; None without tuning."""
    parts = [f"{policy_label(name)} ({', '.join(t['settings'])})" if t["used"] else
             f"{policy_label(name)} kept its parameters ({t['why']})" for name, t in answer.get("tuned", {}).items()]
    return f"Tuned on the scenario's own fleet before sizing: {'; '.join(parts)}" if parts else None


def no_plan_text(answer: dict) -> str:
    """Why there is no recommendation: no fleet meets the targets, or none within the budget (then the cheapest
    that does, and what it costs)."""
    budget, plans = answer.get("budget"), answer["alternatives"]
    if budget and plans:
        cheapest = plans[0]["monthly_cost"]
        return (f"No fleet that meets every target fits the budget of {budget['per_month']:,.0f} "
                f"{budget['currency']} per month; the cheapest costs "
                f"{money_range((cheapest['low'], cheapest['high']), cheapest['currency'])}: {summary_line(plans[0])}")
    return "No fleet meets every target within the search"


def caveat(answer: dict, how_to_measure: str) -> str | None:
    """What the reader must know about the recommendation's step times: it rests on an estimate (measure it,
    ``how_to_measure`` says how), or a cheaper plan exists on paper whose step times were never checked."""
    best = answer["recommendation"]
    if best is None:
        return None
    if not best["calibrated"]:
        return ("No plan whose step times were checked on held-out runs of a configuration like it meets the "
                f"targets: this one rests on an estimate. Measure that set-up ({how_to_measure}) before renting.")
    cheaper = [p for p in answer["alternatives"] if not p["calibrated"]
               and p["monthly_cost"]["low"] < best["monthly_cost"]["low"]]
    return (f"Cheaper on paper, but its step times were never checked on a configuration like it: "
            f"{summary_line(cheaper[0])}") if cheaper else None


def run_length_words(requests: int, seeds: int, best: dict | None) -> str:
    """How long each run of a plan is: "3 runs of at least 3,000 requests each, each lengthened until the fleet's
    queue settles and the run lasts 10 mean times in the system (Little's law; the recommendation's: 21,366)"; a
    replayed trace's runs replay it whole (``best`` None: no recommendation to quote)."""
    steady = (best or {}).get("steady") or {}
    quoted = (f"; the recommendation's: {steady['requests']:,}" if "flights" in steady
              and steady["requests"] != requests else "")
    return (f"{seeds} runs of at least {requests:,} requests each, each lengthened until the fleet's queue settles and "
            f"the run lasts {STEADY_FLIGHTS} mean times in the system (Little's law{quoted}); targets judged on the "
            f"requests after its warm-up (MSER-5)")


def pace_words(done: int, total: int, elapsed_s: float, limit_s: float | None = None) -> str:
    """What is left of a stage at the pace so far: ", about 40 s left at this pace", with ", past the plan's limit of
    300 s" where that pace would not finish within ``limit_s`` of the start; "" before the first step is done or
    after the last (an estimate from nothing, or of nothing)."""
    if done <= 0 or done >= total:
        return ""
    left_s = elapsed_s * (total - done) / done
    late = f", past the plan's limit of {limit_s:,.0f} s" if limit_s and elapsed_s + left_s > limit_s else ""
    return f", about {left_s:,.0f} s left at this pace{late}"


PIPE_WIDTH = 250  # characters per line of a table printed into a pipe or a file (``table_text``)


def table_text(frame: pd.DataFrame, max_colwidth: int = 40, float_format=None, width: int | None = None) -> str:
    """``frame`` as the command line prints it: no index, cells cut at ``max_colwidth`` characters, and, printed to a
    terminal, its columns wrapped in blocks as wide as the window (or ``width``), so no line runs past it; into a
    pipe or a file, in blocks of ``PIPE_WIDTH``."""
    width = width or (shutil.get_terminal_size().columns if sys.stdout.isatty() else PIPE_WIDTH)
    with pd.option_context("display.max_columns", None, "display.max_colwidth", max_colwidth,
                           *(("display.float_format", float_format) if float_format else ())):
        return frame.to_string(index=False, line_width=width)


NOT_SIZED = "not sized: "  # how a configuration or a growth the plan's time did not reach is noted


def cut_text(answer: dict) -> str | None:
    """Why the plan stopped short, and what that means for its answer; None when it searched everything."""
    cut = answer["run"].get("cut")
    if not cut:
        return None
    if any(item["note"] == f"{NOT_SIZED}{cut}" for item in answer["not_possible"]):
        covered = ("the answer covers only the configurations sized before then (the others are listed as not "
                   "sized)")
    else:
        covered = ("every configuration was sized, but the searches after it (headroom, growth, a mixed fleet) "
                   "stopped where marked")
    return (f"Cut short: {cut}; {covered}. Ask again with fewer GPUs, policies, seeds or requests per run to "
            f"search it all")


def not_possible_frame(items: list[dict]) -> pd.DataFrame:
    """What could not be sized, one row each: GPU, tensor-parallel degree (a whole number), the policies tried in
    words, and why (in the form's words)."""
    return pd.DataFrame([{"GPU": n["gpu"], "tensor parallel": count_text(n.get("tensor_parallel")),
                          "policies": ", ".join(map(policy_label, n.get("policies", []))), "why": key_words(n["note"])}
                         for n in items])


def _wrap(paragraph: str, indent: str = "  ") -> str:
    """A paragraph folded to ``TEXT_WIDTH`` columns for a terminal, its later lines indented."""
    return textwrap.fill(paragraph, TEXT_WIDTH, subsequent_indent=indent, break_on_hyphens=False)


def traffic_text(traffic: dict, over_time: dict | None = None) -> str:
    """What the plan sized for when the scenario's rate moves (a curve, or a replayed trace), and, where the answer
    priced it (``over_time`` with its strategies), that the same fleet is bought three ways below."""
    also = (f" Over the whole {'trace' if 'trace_requests' in traffic else 'curve'} the same fleet is also priced "
            f"autoscaled and as a reserved baseline with bursts (below).") if (over_time or {}).get("strategies") \
        else ""
    if "trace_requests" in traffic:
        whole, sized = traffic["trace_requests"], traffic["sized_requests"]
        return ((f"Sized on the whole trace, {whole:,} requests a run" if sized == whole else
                 f"Sized on the first {sized:,} of the trace's more than {sized:,} requests a run" if whole is None
                 else f"Sized on the first {sized:,} of the trace's {whole:,} requests a run") +
                f" (its first requests alone would miss its bursts).{also}")
    return (f"Sized for the traffic's busiest point, {traffic['peak_rate_per_s']:,.2f} req/s (its mean is "
            f"{traffic['mean_rate_per_s']:,.2f} req/s): a fixed fleet must hold the peak.{also}")


def span_words(span_s: float) -> str:
    """"24.0 h" or "45 min": a run's span."""
    return f"{span_s / 3600:,.1f} h" if span_s >= 3 * 3600 else f"{span_s / 60:,.0f} min"


def over_time_heading(over: dict) -> str:
    """What the three ways to buy the fleet were priced over, and what the month assumes."""
    searched = over["searched"]
    bases = ", ".join(str(b) for b in searched["baselines"])
    tried = (f"autoscalers tried: baselines of {bases} replica{'' if searched['baselines'] == [1] else 's'} x "
             f"utilisation targets {', '.join(f'{t:g}' for t in searched['targets'])}"
             + (", and the scenario's own" if searched["own"] else "") if searched["baselines"] else
             "one replica holds the peak: there is nothing to scale")
    multiple = over.get("fleet_multiple", 1)
    share = (f" Simulated as 1/{multiple} of the fleet at 1/{multiple} of the traffic ({over['requests']:,} requests "
             f"a run): each server sees the same load, a smaller fleet pools its traffic less, so the latencies are "
             f"if anything pessimistic, and the autoscaler moves {multiple} replicas at a time."
             if multiple > 1 else "")
    return (f"Over the whole traffic ({span_words(over['span_s'])}, {over['requests'] * multiple:,} requests, each "
            f"such span of the month taken as this one), three ways to buy the recommended fleet; {tried}; "
            f"{over['runs']} runs in {over['wall_s']:.1f} s. A way that misses a target is marked: its price does "
            f"not buy the service asked for. SLA met: the share of requests within the targets' own latency limits, "
            f"each request judged alone.{share}")


def over_time_frame(over: dict, currency: str) -> pd.DataFrame:
    """One row per way to buy the fleet over the whole traffic, cheapest first among those meeting every target."""
    rows = []
    for row in sorted(over["strategies"], key=lambda r: (not r["meets_targets"], r["monthly_cost"]["low"])):
        cost, scale = row["monthly_cost"], row["autoscale"]
        attained = row["sla_attainment"]
        rows.append({
            "strategy": row["strategy"] + ("" if row["meets_targets"] else " (misses a target)"),
            f"per month ({currency})": money_range((cost["low"], cost["high"])) + ("*" if cost["estimate"] else ""),
            "SLA met": "—" if attained is None else f"{100 * attained:.1f}%",
            **{t["target"]: ("—" if t["value"] is None else metric_value_text(t)) for t in row["targets"]},
            "replica-hours": f"{row['replica_hours']:,.1f}", "fleet": row["fleet"],
            "autoscaler": "—" if scale is None else f"utilisation target {scale['target']:g}",
            "offers": row["offers"]})
    return pd.DataFrame(rows)


def metric_value_text(entry: dict) -> str:
    """A target's value on one run, with "missed" when it is past the limit."""
    text = metric(entry["metric"]).text(entry["value"])
    return text if entry["met"] else f"{text} (missed)"


def hours_frame(over: dict, currency: str) -> pd.DataFrame:
    """Each way's replicas, cost per hour and SLA attainment in each hour (or longer window) of the traffic."""
    periods, names = over["periods"], [r["strategy"] for r in over["strategies"]]
    unit = "hour" if periods["length_s"] == 3600.0 else "from (h)"
    rows = []
    for entry in periods["rows"]:
        row = {unit: f"{entry['start_s'] / 3600:,.0f}" if unit == "from (h)" else f"{entry['start_s'] / 3600:02.0f}:00"}
        for k, name in enumerate(STRATEGY_SHORT[n] for n in names):
            attained = entry["sla_attainment"][k]
            row[f"{name}: replicas"] = f"{entry['replicas'][k]:,.1f}"
            row[f"{name}: {currency} an hour"] = money_text(entry["cost_per_hour"][k])
            row[f"{name}: SLA met"] = "—" if attained is None else f"{100 * attained:.1f}%"
        rows.append(row)
    return pd.DataFrame(rows)


def over_time_lines(answer: dict) -> list[str]:
    """The three ways to buy the fleet over the whole traffic, for a terminal (none for a constant rate)."""
    over = answer.get("over_time")
    if not over:
        return []
    if "note" in over:
        return [_wrap(f"Not priced over time: {over['note']}.")]
    currency = answer["recommendation"]["monthly_cost"]["currency"]
    table = table_text(over_time_frame(over, currency), 70)
    return ["", _wrap(over_time_heading(over)), table,
            "  (hour by hour: the JSON's over_time.periods, the Planner page and the report)"]


def plan_text(answer: dict, title: str, runs: str = "") -> str:
    """The whole answer, for printing: ``title`` on one line, then ``runs`` (how long each run was), wrapped."""
    lines = [title] + ([_wrap(runs)] if runs else [])
    if answer.get("traffic"):
        lines.append(_wrap(traffic_text(answer["traffic"], answer.get("over_time"))))
    cut = cut_text(answer)
    if cut:
        lines.append(_wrap("CUT: " + cut))
    best = answer["recommendation"]
    if best is None:
        lines.append(_wrap(no_plan_text(answer) + ("" if answer["alternatives"] else "; see why below.")))
    else:
        lines.append(_wrap("Recommendation: " + summary_line(best)))
        energy = energy_text(best)
        if energy:
            lines.append(_wrap(energy))
        warning = caveat(answer, "python -m engine calibrate")
        if warning:
            lines.append(_wrap(warning))
        lines += [_wrap(f"  - {sentence}", "    ") for sentence in answer["diagnosis"]]
        tuned = tuned_text(answer)
        if tuned:
            lines.append(_wrap(tuned))
        grows = sensitivity_text(answer)
        if grows:
            lines.append(_wrap(grows))
    mixed = mix_text(answer)
    if mixed:
        lines.append(_wrap(mixed))
    lines += over_time_lines(answer)
    if answer["alternatives"]:
        shown = answer["alternatives"][:ALTERNATIVES_SHOWN]
        lines.append(f"\nAlternatives, cheapest first ({len(shown)} of {len(answer['alternatives'])}):")
        lines.append(table_text(alternatives_frame(shown).drop(columns=[ENERGY_COLUMN])))
    if answer["not_possible"]:
        lines.append("\nNot possible:")
        for item in answer["not_possible"]:
            split = item.get("expert_parallel", False)
            where = item["gpu"] + (f" {parallel_label(item['tensor_parallel'], split, split)} "
                                   f"({', '.join(item['policies'])})" if "policies" in item else "")
            lines.append(_wrap(f"  {where}: {item['note']}", "    "))
    run = answer["run"]
    lines.append(f"\n{run['evaluations']:,} runs in {run['wall_s']:.1f} s on {run['workers']} cores")
    return "\n".join(lines)
