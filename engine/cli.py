"""Command-line interface: ``python -m engine run|shapes|size|plan|report|tune|hardware SCENARIO.toml [...]`` and
``python -m engine keys``.

Invalid input ends with exit code 2 and one line naming the problem, never a traceback. A plan or a tuning cut
short by its time limit (``plan_s``, ``tune_s``) still answers, with exit code 3 and a warning line on stderr.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from pathlib import Path

from .calibrate.bench_command import read_command
from .calibrate.bench_replay import load_mismatch, replay, replay_server
from .calibrate.bench_results import MAX_FILE_MIB, read_result
from .calibrate.confidence import step_badge
from .calibrate.user_calibration import benchmarked_server, calibrate, model_for
from .decide.cost import (BILLING_MODES, CNY_PER_USD_DEFAULT, CURRENCIES, DEFAULT_CURRENCY, PRICE_RULES, combined_cost,
                          deployment_cost, fleet_cards, group_rentals, offer_hosting_problem, offers_for, unit_costs)
from .decide.diagnosis import bursts
from .decide.plan_text import no_plan_text, pace_words, plan_text, run_length_words, summary_line, table_text
from .decide.planner import DEFAULT_REQUESTS, DEFAULT_SEEDS, Question, plan
from .decide.price_list import MAX_BYTES as PRICE_LIST_MAX_BYTES, price_list_label, read_price_list
from .decide.recipe import recipe_files
from .decide.report import report_html, served_text, write_pdf
from .decide.sizing import cheapest_fleets, fleet_shapes
from .decide.targets import TARGET_METRICS, Target, parse_target
from .decide.traffic import describe as describe_traffic, peak_rate_per_s
from .decide.tune_text import tune_text
from .decide.tuner import (DEFAULT_CANDIDATES, DEFAULT_REQUESTS as TUNE_REQUESTS, DEFAULT_SEEDS as TUNE_SEEDS, TUNABLE,
                           TuneQuestion, parse_constraint, parse_objective, tune, tuned_scenario)
from .hardware.calibration_store import save
from .hardware.hf_config import read_config_file, user_model_overrides
from .hardware.roofline import kv_capacity_tokens, memory_breakdown_gib, model_text, roofline_profile
from .hardware.steptime import decode_step_s_nb, prefill_s
from .hardware.tables import load_table
from .scenario.caps import DEFAULT_CAPS, MIB, caps_with, limits_fields
from .scenario.config import (OVERALL, Scenario, apply_overrides, fleet_servers, keys_markdown, load_scenario,
                              read_toml, scenario_to_dict, to_toml, toml_string)
from .scenario.errors import ScenarioError, printable
from .scenario.csv_out import csv_text
from .scenario.files import os_reason, quoted, read_regular, write_named
from .scenario.json_out import strict_json
from .scenario.link import PUBLIC_URL_ENV, public_address
from .scenario.naming import renamed
from .scenario.metric_table import FRACTION, LATENCY_KEYS, metric, money_range
from .scenario.origin import Origin
from .scenario.registry import TRACE_FORMATS
from .scenario.summary import Summary
from .sim.dask_connect import check_address, check_workers
from .sim.parallel import dask_cluster
from .sim.simulate import Result, load_text, server_step, simulate, stop_explanation, warm_up
from .sim.traces import guess_trace_format, trace_rows
from .decide.bill import fixed_overrides, format_bills, strategy_bills
from .sim.autoscale import describe as describe_scaling
from .sim.workload import trace_requests

CHEAPEST_OFFER = "cheapest"  # --offer for a mixed or disaggregated fleet: each group through its cheapest offer
EXIT_INVALID = 2
EXIT_INTERNAL = 1
EXIT_CUT = 3  # an answer given, but cut short by its time limit (plan_s, tune_s)
EXIT_INTERRUPTED = 130


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, no usage block
        self.exit(EXIT_INVALID, f"error: {message} (see {self.prog} --help)\n")


def command_parser() -> argparse.ArgumentParser:
    """The command line's parser (the manual's command-line reference is generated from it)."""
    parser = _Parser(prog="python -m engine", description="Scheduler Lab simulator")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    run = sub.add_parser("run", help="simulate one scenario and print its metrics")
    _scenario_arguments(run)
    _trace_arguments(run)
    run.add_argument("--seed", type=int, help="override the scenario's seed")
    run.add_argument("--json", metavar="PATH", help="write the metrics as JSON to PATH ('-' = stdout, no table)")
    run.add_argument("--requests-csv", metavar="PATH", help="write one row per request to PATH")
    _offer_arguments(run)
    bill = sub.add_parser("bill", help="an autoscaled scenario's day or week priced three ways: a fixed fleet at its "
                                       "peak, autoscaled on demand, a reserved baseline with bursts (two runs)")
    _scenario_arguments(bill)
    _trace_arguments(bill)
    bill.add_argument("--currency", choices=CURRENCIES, default=DEFAULT_CURRENCY)
    bill.add_argument("--cny-per-usd", type=float, default=CNY_PER_USD_DEFAULT, help="exchange rate (your setting)")
    shapes = sub.add_parser("shapes", help="simulate the fleet's cards as every tensor-parallel x replica shape")
    _scenario_arguments(shapes)
    shapes.add_argument("--cards", type=int, help="cards to arrange (default: the scenario's TP x replicas)")
    _offer_arguments(shapes)
    size = sub.add_parser("size", help="the cheapest rental of every offer that meets a latency target (one run per "
                                       "fleet, smallest TP degree; plan searches wider)")
    _scenario_arguments(size)
    size.add_argument("--target-class", default=OVERALL, help=f"class the target applies to (default {OVERALL})")
    size.add_argument("--metric", default="ttft_p99_ms", choices=LATENCY_KEYS)
    size.add_argument("--max-ms", type=float, required=True, help="the metric must stay at or below this")
    size.add_argument("--max-replicas", type=int, default=16, help="largest fleet tried per GPU")
    _offer_arguments(size)
    plan = sub.add_parser("plan", help="the cheapest rental, fleet and policy that meet every target")
    _plan_arguments(plan)
    plan.add_argument("--json", metavar="PATH", help="write the answer as JSON to PATH ('-' = stdout, no table)")
    report = sub.add_parser("report", help="plan, then write the answer as a report to hand over: one "
                                           "self-contained HTML file and a PDF")
    _plan_arguments(report)
    report.add_argument("--html", required=True, metavar="PATH", help="write the report as HTML to PATH")
    report.add_argument("--pdf", metavar="PATH", help="also print it as a PDF to PATH (needs Chromium)")
    report.add_argument("--json", metavar="PATH", help="also write the answer as JSON to PATH ('-' = stdout, "
                                                       "nothing else printed there)")
    report.add_argument("--app-url", help="the app's public address, for the report's link back to the plan "
                        f"(default ${PUBLIC_URL_ENV}; none, or a local address: the report carries the scenario "
                        "instead of a link)")
    tuning = sub.add_parser("tune", help="the policy parameters that minimise (or maximise) one metric under "
                                         "constraints, on the same requests for every candidate")
    _scenario_arguments(tuning)
    _trace_arguments(tuning)
    goal = tuning.add_mutually_exclusive_group(required=True)
    goal.add_argument("--minimize", metavar="CLASS.METRIC", help="e.g. interactive.ttft_p99_ms")
    goal.add_argument("--maximize", metavar="CLASS.METRIC", help="e.g. offline.output_tokens_per_s")
    tuning.add_argument("--constraint", dest="constraints", action="append", default=[],
                        metavar="CLASS.METRIC>=VALUE", help="e.g. offline.output_tokens_per_s>=900 or "
                        "'*.longest_wait_ms<=60000' (every class); latencies <=, attainment and throughputs >=; "
                        "repeatable")
    tuning.add_argument("--policies", help=f"comma-separated policies to tune (default: {','.join(TUNABLE)})")
    tuning.add_argument("--batching", action="store_true", help="also tune server.min_batch_size and "
                        "server.wait_timeout_ms")
    tuning.add_argument("--candidates", type=int, default=DEFAULT_CANDIDATES, help="points evaluated in all")
    tuning.add_argument("--seeds", type=int, default=TUNE_SEEDS, help="runs per candidate, the same for every "
                        "candidate")
    tuning.add_argument("--requests", type=int, default=TUNE_REQUESTS, help="requests per run")
    _cluster_arguments(tuning)
    tuning.add_argument("--json", metavar="PATH", help="write the answer as JSON to PATH ('-' = stdout, no text)")
    tuning.add_argument("--write", metavar="PATH", help="write the scenario with the best parameters to PATH (TOML), "
                        "e.g. for a nightly re-tune on a fresh trace")
    hardware = sub.add_parser("hardware", help="memory of one card, KV capacity and iteration times (roofline)")
    _scenario_arguments(hardware)
    calibrate = sub.add_parser("calibrate", help="replay your benchmark results, compare them with the simulator "
                                                 "and fit your GPU's step-time factors on them")
    calibrate.add_argument("files", nargs="+", metavar="FILE", help="a vllm bench serve (benchmark_serving.py) "
                           "result JSON, or a GenAI-Perf / AIPerf profile export JSON")
    calibrate.add_argument("--gpu", required=True, help="the GPU the benchmark ran on (data/hardware/gpus.csv)")
    calibrate.add_argument("--model", help="data/hardware/models.csv model (default: the one the file names)")
    calibrate.add_argument("--tensor-parallel", type=int, default=1, help="GPUs the server split the model over")
    calibrate.add_argument("--quant", default="bf16", help="weight format (data/hardware/quant.csv)")
    calibrate.add_argument("--kv-quant", default="bf16", help="KV-cache format (data/hardware/kv_quant.csv)")
    calibrate.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                           help="another server setting of the benchmarked server, e.g. --set "
                                "server.max_batch_size=256 (repeatable)")
    calibrate.add_argument("--save", metavar="NAME", help="keep the fit as calibration NAME (server.calibration)")
    calibrate.add_argument("--replace", action="store_true", help="replace a saved calibration of the same name")
    replay_bench = sub.add_parser(
        "replay-bench", help="replay a benchmark client's command (vllm bench serve, python -m sglang.bench_serving; "
                             "random dataset) on a server and set every figure it reports beside your measured ones",
        usage="python -m engine replay-bench --gpu GPU [options] -- vllm bench serve --model ... [client options]")
    replay_bench.add_argument("--gpu", required=True, help="the GPU the server ran on (data/hardware/gpus.csv)")
    replay_bench.add_argument("--model", help="data/hardware/models.csv model (default: the one --model names)")
    replay_bench.add_argument("--tensor-parallel", type=int, default=1, help="GPUs the server split the model over")
    replay_bench.add_argument("--quant", default="bf16", help="weight format (data/hardware/quant.csv)")
    replay_bench.add_argument("--kv-quant", default="bf16", help="KV-cache format (data/hardware/kv_quant.csv)")
    replay_bench.add_argument("--engine", help="the serving engine (data/hardware/engines.csv; default: the "
                              "client's own project's, vllm or sglang)")
    replay_bench.add_argument("--special-tokens", type=int, default=0, help="special tokens the model's tokenizer "
                              "adds to a prompt (its num_special_tokens_to_add(): 1 for a BOS token), so that "
                              "vllm's draws are its own to the token")
    replay_bench.add_argument("--measured", metavar="FILE", help="the client's result file of that run (vllm "
                              "--save-result JSON, AIPerf or GenAI-Perf export), set beside the simulated figures")
    replay_bench.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                              help="another server setting, e.g. --set server.scheduler_recv_interval=10 "
                                   "(repeatable)")
    replay_bench.add_argument("--json", metavar="PATH", help="write the figures as JSON to PATH ('-' = stdout, "
                              "no text)")
    replay_bench.add_argument("client", nargs=argparse.REMAINDER, help="the client's command, after --")
    sub.add_parser("keys", help="print every scenario key with unit, default and meaning (Markdown)")
    sub.add_parser("warm", help="compile the simulator now (cached on disk, so later runs start at once)")
    return parser


def _scenario_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scenario", help="scenario TOML file (see data/scenarios/)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a scenario key, e.g. --set policy.name=priority (repeatable)")
    parser.add_argument("--model-config", metavar="FILE", help="serve your own model: its Hugging Face config.json "
                        "(named after its _name_or_path; the roofline step model)")
    parser.add_argument("--model-name", metavar="NAME", default="",
                        help="the name of the model --model-config serves, as your customer calls it (default: its "
                             "_name_or_path, else the file's name)")
    parser.add_argument("--limit", dest="limits", action="append", default=[], metavar="NAME=VALUE",
                        help="raise a safety limit for this run, e.g. --limit requests_per_run=5000000 "
                             f"(repeatable; names: {', '.join(limits_fields())})")


def _plan_arguments(parser: argparse.ArgumentParser) -> None:
    _scenario_arguments(parser)
    parser.add_argument("--target", dest="targets", action="append", required=True, metavar="CLASS.METRIC=VALUE",
                        help="a target, e.g. interactive.ttft_p99_ms=1000 (latencies at most; sla_attainment and "
                             f"throughputs at least; metrics: {', '.join(TARGET_METRICS)}; repeatable)")
    parser.add_argument("--gpus", help="comma-separated GPUs to consider (default: every GPU with an offer)")
    parser.add_argument("--offers", help="comma-separated offers to consider (default: every offer)")
    parser.add_argument("--policies", help="comma-separated policies to try (default: the scenario's)")
    parser.add_argument("--billing", choices=tuple(PLAN_BILLING), default="monthly",
                        help="hourly and monthly: the offer's own price (per hour or per month, no commitment); "
                             "annual: the annual prepay discount")
    parser.add_argument("--price-list", metavar="FILE", help="rent through the offers of this CSV file instead of "
                        "data/hardware/offers.csv (its columns: docs, Plan: the cheapest rental)")
    parser.add_argument("--recipe", metavar="DIR", help="write the recommendation's deployment recipe into DIR: a "
                        "launch script per serving engine and a Kubernetes manifest")
    parser.add_argument("--prices", choices=PRICE_RULES, help="firm: rent only through firm prices (one number read "
                        "from the provider, on-demand or reserved); any: also estimates, ranges and spot capacity "
                        "(default: firm when a target is a latency, any otherwise)")
    parser.add_argument("--currency", choices=CURRENCIES, default=DEFAULT_CURRENCY)
    parser.add_argument("--cny-per-usd", type=float, default=CNY_PER_USD_DEFAULT, help="exchange rate (your setting)")
    parser.add_argument("--seeds", type=int, default=DEFAULT_SEEDS, help="runs per decision, each with its own seed")
    parser.add_argument("--requests", type=int, default=DEFAULT_REQUESTS, help="requests per run")
    parser.add_argument("--max-replicas", type=int, default=DEFAULT_CAPS.replicas, help="largest fleet tried")
    parser.add_argument("--quants", help="comma-separated weight formats the customer accepts (default: the "
                        "scenario's, or, for a 16-bit scenario of a model released in fewer bits, the release's: "
                        "DeepSeek-R1 FP8), e.g. int4,fp8,fp16; each is sized at every tensor-parallel degree it "
                        "fits")
    parser.add_argument("--tune", type=int, default=0, metavar="N", help="tune each tunable policy's parameters "
                        "first (N candidates each, on the scenario's own fleet; default 0: the scenario's parameters)")
    parser.add_argument("--routers", help="comma-separated routers to try (default: the scenario's): "
                        "round-robin, least-tokens, shortest-queue")
    parser.add_argument("--decodings", help="comma-separated decodings to try (default: the scenario's): plain, "
                        "speculative (the scenario's server.speculative)")
    parser.add_argument("--budget", type=float, help="most per month (in --currency, low end of the offer) a "
                        "recommendation may cost")
    parser.add_argument("--users", type=float, help="traffic in business terms: users (with --requests-per-user-per-day"
                        " and --peak-factor) set the arrival rate to the peak's")
    parser.add_argument("--requests-per-user-per-day", type=float, help="requests one user sends in a day")
    parser.add_argument("--peak-factor", type=float, default=1.0, help="the peak hour's rate over the day's mean "
                        "(default 1: flat)")
    _cluster_arguments(parser)


def _cluster_arguments(parser: argparse.ArgumentParser) -> None:
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--workers", type=int, metavar="N", help="run the simulations on an embedded Dask cluster of "
                       "N worker processes (default: threads on every local core)")
    where.add_argument("--scheduler", metavar="ADDRESS", help="run the simulations on the workers of a running Dask "
                       "scheduler, e.g. tcp://10.0.0.5:8786 (they must see the same checkout and files)")


def _trace_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--trace", metavar="FILE", help="replay this trace instead of synthetic arrivals "
                        "(the scenario's num_requests/duration_s still cut it)")
    parser.add_argument("--trace-format", choices=TRACE_FORMATS,
                        help="trace format (default: guessed from the file: .jsonl = mooncake, TIMESTAMP header = "
                             "azure)")


def _offer_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--offer", help="price the fleet with this offer of data/hardware/offers.csv (a mixed or "
                                        f"disaggregated fleet: '{CHEAPEST_OFFER}' rents each group through its "
                                        "cheapest offer)")
    parser.add_argument("--billing", choices=BILLING_MODES, default=BILLING_MODES[0])
    parser.add_argument("--currency", choices=CURRENCIES, default=DEFAULT_CURRENCY)
    parser.add_argument("--cny-per-usd", type=float, default=CNY_PER_USD_DEFAULT, help="exchange rate (your setting)")


def _overrides(args: argparse.Namespace) -> list[str]:
    """The --set items, plus --model-config (first, so --set can change it), --seed and --trace written as the same
    key=value overrides."""
    overrides = list(args.overrides)
    if getattr(args, "model_config", None):
        overrides[:0] = user_model_overrides(read_config_file(args.model_config), Path(args.model_config).stem,
                                             Path(args.model_config).name, getattr(args, "model_name", ""))
    elif getattr(args, "model_name", ""):
        raise ScenarioError("--model-name names the model of --model-config: give that file too")
    if getattr(args, "seed", None) is not None:
        overrides.append(f"seed={args.seed}")
    if getattr(args, "trace", None):
        path = Path(os.path.realpath(args.trace))  # never raises (resolve does on a loop of links)
        fmt = args.trace_format or guess_trace_format(path)
        overrides.append(f'workload.trace={{path = {toml_string(str(path))}, format = "{fmt}"}}')
    return overrides


CLI_COLUMNS = (("arrived", 9), ("completed", 10), ("timed_out", 10), ("unfinished", 11), ("ttft_p50_ms", 10),
               ("ttft_p99_ms", 10), ("e2e_p50_ms", 16), ("e2e_p99_ms", 16), ("tpot_mean_ms", 10),
               ("sla_attainment", 8), ("output_tokens_per_s", 16))


def _cell(key: str, value) -> str:
    """A table cell: the metric's table value (``metric_table``), with thousands separators; "-" when missing."""
    m = metric(key)
    shown = m.table_value(value)
    if shown is None:
        return "-"
    if m.kind == FRACTION:
        return f"{shown:.1f}%"
    return f"{int(shown):,}" if float(shown).is_integer() else f"{shown:,}"


def replayed_trace_requests(scenario: Scenario) -> int | None:
    """The requests of the scenario's trace file, counted as far as its run read it: the whole file's when the run
    replays it all (``trace_requests``: the same cached read), else, for a run cut at ``num_requests`` = N, the file's
    count when it holds at most N rows, None when it holds more. A cut run reads N rows, and this one more, never the
    rest: a file of any length (beyond the limit requests_per_run too) is replayed in time bounded by N, and a line
    past the cut, which the run never uses, is never an error."""
    workload, origin = scenario.workload, scenario.origin
    if workload.num_requests is None:
        return trace_requests(scenario)
    try:
        counted = trace_rows(origin.trace_file(workload.trace.path), workload.trace.format,
                             workload.num_requests + 1, origin.caps, name=workload.trace.path)
    except ScenarioError:  # the line after the cut is no valid row: the file holds more than the run read
        return None
    return counted if counted <= workload.num_requests else None


def format_table(result: Result) -> str:
    """A readable per-class table plus the system line."""
    summary = result.summary
    header = f"{'class':<14}" + "".join(f"{metric(k).label:>{w}}" for k, w in CLI_COLUMNS)
    requests = f"{summary['run']['requests']:,}"
    if result.scenario.workload.trace is not None:
        whole = replayed_trace_requests(result.scenario)
        if whole is None:
            requests += f" of the trace's more than {result.scenario.workload.num_requests:,}"
        elif whole > summary["run"]["requests"]:
            requests += f" of the trace's {whole:,}"
    lines = [f"scenario {summary['run']['scenario']!r}, seed {summary['run']['seed']}, "
             f"{requests} requests (latencies in ms)", header, "-" * len(header)]
    rows = list(summary["classes"].items()) + [(OVERALL, summary["overall"])]
    for name, block in rows:
        lines.append(f"{printable(name):<14}" + "".join(f"{_cell(k, metric(k).value(block)):>{w}}"
                                                         for k, w in CLI_COLUMNS))
    s = summary["system"]
    kv = "unlimited" if s["kv_peak_frac"] is None else \
        f"mean {100 * s['kv_mean_frac']:.1f}% peak {100 * s['kv_peak_frac']:.1f}%"
    lines.append(f"system: {s['sim_time_s']:,.1f} s simulated, {s['iterations']:,} iterations, mean batch "
                 f"{s['mean_batch_size']:.2f}, GPU busy {100 * s['gpu_busy_frac']:.1f}%, KV {kv}, "
                 f"{s['preemptions']:,} preemptions, offered load {load_text(s['offered_load'])} (estimate)")
    fleet = result.scenario.fleet
    if fleet.groups or fleet.mode == "disaggregated":  # each kind of replica, and what the router sent it
        kinds: dict[tuple[str, str], list[dict]] = {}
        for replica in s["replicas"]:
            kinds.setdefault((replica["role"], replica["hardware"]), []).append(replica)
        lines.append("fleet: " + "; ".join(
            f"{len(group)} x {hardware}" + ("" if role == "colocated" else f" for {role}") +
            f" (speed {group[0]['speed']:.2f}, {sum(r['routed'] for r in group):,} routed, busy "
            f"{100 * sum(r['busy_frac'] for r in group) / len(group):.1f}%)"
            for (role, hardware), group in kinds.items()))
    if "kv_transfer_ms" in result.requests:
        moved = result.requests["kv_transfer_ms"].dropna()
        if len(moved):
            lines.append(f"KV transfers to the decode pool (link queue included): mean {moved.mean():,.1f} ms, "
                         f"p99 {moved.quantile(0.99):,.1f} ms over {len(moved):,} requests")
    scaling = describe_scaling(s)
    if scaling:
        lines.append(scaling)
    lines += [finding.text for finding in bursts(summary)]
    if s["unstable"]:
        lines.append(stop_explanation(s, result.scenario.origin.caps).replace("Unstable", "UNSTABLE", 1)
                     .replace("Cut", "CUT", 1))
    lines.append(f"wall time {summary['run']['wall_s']:.2f} s")
    return "\n".join(lines)


def _rental(args: argparse.Namespace, server, cards: int, tensor_parallel: int):
    if not args.offer:
        return None
    if server.step_model != "roofline":
        raise ScenarioError("--offer prices a real GPU: set server.step_model = roofline")
    offers = offers_for(server.gpu)
    if args.offer not in offers.index:
        raise ScenarioError(f"--offer {args.offer!r} does not rent {server.gpu}; offers for it: "
                            f"{', '.join(offers.index) or 'none'}")
    problem = offer_hosting_problem(args.offer, tensor_parallel)
    if problem:
        raise ScenarioError(f"--{problem}")
    return deployment_cost(args.offer, cards, args.billing, args.currency, args.cny_per_usd)


def _group_rental(args: argparse.Namespace, scenario) -> tuple:
    """(cost, cards) of the fleet's groups (``config.fleet_servers``): ``--offer cheapest`` rents each group through
    its cheapest offer; a named offer rents every group, which must then all be on its GPU."""
    groups = [(s.gpu, s.tensor_parallel, n) for s, n in fleet_servers(scenario)]
    cards = sum(fleet_cards(*g) for g in groups)
    if scenario.server.step_model != "roofline":
        raise ScenarioError("--offer prices a real GPU: set server.step_model = roofline")
    if args.offer == CHEAPEST_OFFER:
        rentals = group_rentals(groups, args.billing, args.currency, args.cny_per_usd)
        missing = next((gpu for gpu, _, cost in rentals if cost is None), None)
        if missing:
            raise ScenarioError(f"--offer cheapest: no offer in data/hardware/offers.csv rents {missing}")
        return combined_cost([cost for _, _, cost in rentals]), cards
    other = sorted({gpu for gpu, _, _ in groups} - {load_table("offers").loc[args.offer, "gpu"]}
                   if args.offer in load_table("offers").index else set())
    if other:
        raise ScenarioError(f"--offer {args.offer!r} does not rent {other[0]}, which this fleet also uses; give "
                            f"--offer {CHEAPEST_OFFER} to rent each group through its cheapest offer")
    for gpu, tensor_parallel, _ in groups:  # the offer rents this GPU and hosts the group's tensor-parallel degree
        _rental(args, dataclasses.replace(scenario.server, gpu=gpu), 1, tensor_parallel)
    return _rental(args, dataclasses.replace(scenario.server, gpu=groups[0][0]), cards, 1), cards


def _cost_block(args: argparse.Namespace, scenario, summary: Summary) -> dict | None:
    """The fleet's rental cost and unit costs at the simulated load (low and high end of the offer)."""
    if not args.offer:
        return None
    if args.offer == CHEAPEST_OFFER or scenario.fleet.groups or scenario.fleet.mode == "disaggregated":
        cost, cards = _group_rental(args, scenario)
    else:
        cards = fleet_cards(scenario.server.gpu, scenario.server.tensor_parallel, scenario.fleet.replicas)
        cost = _rental(args, scenario.server, cards, scenario.server.tensor_parallel)
    low, high = (unit_costs(p, summary["overall"]) for p in cost.per_hour)
    return {"offer": cost.offer, "units": cost.units, "cards": cards, "billing": args.billing,
            "currency": cost.currency, "estimate": cost.estimate, "per_hour": list(cost.per_hour),
            "per_month": list(cost.per_month), **{k: [low[k], high[k]] for k in low}}


def _load(args: argparse.Namespace) -> Scenario:
    """The scenario file with the --set, --seed and --trace overrides, within the (maybe raised) limits; renamed
    where the overrides change what a preset's name describes (``naming.renamed``)."""
    origin = Origin(caps=caps_with(args.limits))
    overrides = _overrides(args)
    if not overrides:
        return load_scenario(args.scenario, origin=origin)
    data = read_toml(args.scenario, origin.caps)  # relative trace paths stay the file's folder's, as load_scenario's
    origin = dataclasses.replace(origin, trace_dir=str(Path(args.scenario).resolve().parent))
    return load_scenario(renamed(data, apply_overrides(data, overrides)), origin=origin)


def _run(args: argparse.Namespace) -> int:
    scenario = _load(args)
    result = simulate(scenario)
    cost = _cost_block(args, scenario, result.summary)
    if cost is not None:
        result.summary["cost"] = cost
    if scenario.workload.trace is not None:  # the JSON says what part of the trace ran, as the table does
        result.summary["run"]["trace_requests"] = replayed_trace_requests(scenario)
    if args.json:
        text = strict_json(result.summary)
        if args.json == "-":
            print(text)
        else:
            _write(args.json, text + "\n", "--json")
    if args.requests_csv:
        _write(args.requests_csv, csv_text(result.requests), "--requests-csv")
    if args.json != "-":
        print(format_table(result))
        if cost is not None:
            estimate = ", estimate" if cost["estimate"] else ""
            print(f"cost ({cost['offer']}, {cost['units']} unit(s), {args.billing}{estimate}): "
                  f"{money_range(cost['per_month'], cost['currency'])}/month, "
                  f"{money_range(cost['per_million_output_tokens'])} per 1M output tokens, "
                  f"{money_range(cost['per_thousand_sla_met_requests'])} per 1,000 SLA-met requests")
    return 0


def _bill(args: argparse.Namespace) -> int:
    scenario = _load(args)
    if scenario.fleet.autoscale is None or scenario.server.step_model != "roofline":
        raise ScenarioError("bill needs an autoscaled fleet ([fleet.autoscale]) of a real GPU "
                            "(server.step_model = roofline)")
    autoscaled = simulate(scenario)
    peak = autoscaled.summary["system"]["autoscale"]["peak_replicas"]
    fixed = simulate(load_scenario(apply_overrides(scenario_to_dict(scenario), fixed_overrides(peak)),
                                   origin=scenario.origin))
    print(format_table(autoscaled))
    print(format_bills(strategy_bills(scenario, autoscaled.summary, fixed.summary, args.currency, args.cny_per_usd),
                       autoscaled.summary["system"]["sim_time_s"]))
    return 0


def _shapes(args: argparse.Namespace) -> int:
    scenario = _load(args)
    if args.cards is not None and args.cards < 1:
        raise ScenarioError(f"--cards {args.cards} must be at least 1")
    cards = args.cards or scenario.server.tensor_parallel * scenario.fleet.replicas
    rental = _rental(args, scenario.server, cards, 1)
    frame = fleet_shapes(scenario_to_dict(scenario), cards, rental, origin=scenario.origin)
    print(f"{cards} x {scenario.server.gpu}, {scenario.server.model} ({scenario.server.quant}); "
          f"router {scenario.fleet.router}; latencies in ms"
          + (f"; cost at the low end of {rental.offer} in {rental.currency}" if rental else ""))
    print(table_text(frame.drop(columns=["tensor_parallel", "replicas"]), float_format="{:,.2f}".format))
    return 0


def _size(args: argparse.Namespace) -> int:
    scenario = _load(args)
    scenario.origin.caps.check("replicas", "--max-replicas", args.max_replicas)
    if args.max_replicas < 1:
        raise ScenarioError(f"--max-replicas {args.max_replicas} must be at least 1")
    target = Target(args.target_class, args.metric, args.max_ms)
    frame = cheapest_fleets(scenario_to_dict(scenario), target, args.billing, args.currency, args.cny_per_usd,
                            args.max_replicas, origin=scenario.origin)
    print(f"cheapest fleet per offer with {target.describe()} on "
          f"{scenario.name!r} ({scenario.workload.num_requests or 'all'} requests, policy "
          f"{scenario.policy.name}); prices per month in {args.currency}, {args.billing}")
    print(table_text(frame, 60, "{:,.2f}".format))
    return 0


PLAN_BILLING = {"hourly": BILLING_MODES[0], "monthly": BILLING_MODES[0], "annual": BILLING_MODES[1]}


def _names(text: str | None) -> tuple[str, ...]:
    return tuple(n.strip() for n in text.split(",") if n.strip()) if text else ()


def _cluster(args: argparse.Namespace):
    """Where the runs go: an embedded Dask cluster (--workers), a running scheduler (--scheduler) or the local
    cores."""
    workers = 0 if args.workers is None else check_workers(args.workers)
    scheduler = None if args.scheduler is None else check_address(args.scheduler)
    return dask_cluster(scheduler, workers)


def _question(args: argparse.Namespace) -> Question:
    return Question(tuple(parse_target(t) for t in args.targets), _names(args.gpus), _names(args.offers),
                    _names(args.policies), _names(args.quants), _names(args.routers), PLAN_BILLING[args.billing],
                    args.currency, args.cny_per_usd, args.seeds, args.requests, args.max_replicas, args.budget,
                    args.tune, _names(args.decodings), args.prices or "", *_price_list(args.price_list))


def _price_list(path: str | None) -> tuple[tuple, str]:
    """The offers of ``--price-list FILE`` and how the plan names it (none without it)."""
    if not path:
        return (), ""
    content = read_regular(path, "--price-list", PRICE_LIST_MAX_BYTES)
    rows = read_price_list(content, f"--price-list {quoted(path)}")
    return rows, price_list_label(Path(path).name, content, rows)


def _plan_scenario(args: argparse.Namespace) -> Scenario:
    """The scenario, its arrival rate set from business terms when --users is given."""
    scenario = _load(args)
    if args.users is None:
        return scenario
    if args.requests_per_user_per_day is None:
        raise ScenarioError("--users needs --requests-per-user-per-day (and optionally --peak-factor)")
    if scenario.workload.arrival is None:
        raise ScenarioError("--users sets the rate of synthetic arrivals, but this scenario replays a trace")
    rate = peak_rate_per_s(args.users, args.requests_per_user_per_day, args.peak_factor)
    print(f"traffic: {describe_traffic(args.users, args.requests_per_user_per_day, args.peak_factor)}",
          file=sys.stderr)
    return load_scenario(args.scenario, overrides=[*_overrides(args), f"workload.arrival.rate_per_s={rate!r}"],
                         origin=scenario.origin)


def _exit_status(cut: str | None, limit: str) -> int:
    """0, or ``EXIT_CUT`` with one line on stderr when the search stopped short of its question (``cut``: why)."""
    if not cut:
        return 0
    print(f"warning: cut short: {cut}; the answer covers what was searched by then (--limit {limit}=N raises it)",
          file=sys.stderr)
    return EXIT_CUT


PROGRESS_STEPS = 10  # lines a stage's progress writes to a redirected stderr (a file or a pipe): one per tenth


def _sizing_progress(done: int, total: int, stage: str) -> None:
    """A stage's progress on stderr, with the time left at its pace so far (``pace_words``): one line rewritten in
    place on a terminal; on a file or a pipe, which keep every carriage return, a whole line at each tenth of the
    stage and at its end."""
    started = _PROGRESS_SHOWN.setdefault(("started", stage), time.monotonic())
    line = f"{stage}: {done}/{total}{pace_words(done, total, time.monotonic() - started)}"
    if sys.stderr.isatty():
        print(f"\r{line}\x1b[K", end="" if done < total else "\n", file=sys.stderr, flush=True)
        return
    step = (stage, total, done * PROGRESS_STEPS // max(total, 1))  # the same step again (a heartbeat): no line
    if step != _PROGRESS_SHOWN.get("step"):
        _PROGRESS_SHOWN["step"] = step
        print(line, file=sys.stderr, flush=True)


_PROGRESS_SHOWN: dict = {}  # the step of the last line written to a redirected stderr, and when each stage began


def _wrote_json_to_stdout(answer: dict, destination: str | None) -> bool:
    """Write ``answer`` as JSON to ``destination`` (a path, or '-' for stdout); True when it went to stdout (then
    nothing else may be printed there)."""
    if not destination:
        return False
    text = strict_json(answer)
    if destination == "-":
        print(text)
        return True
    _write(destination, text, "--json")
    return False


def _plan(args: argparse.Namespace) -> int:
    scenario = _plan_scenario(args)
    question = _question(args)
    with _cluster(args):
        answer = plan(scenario_to_dict(scenario), question, scenario.origin,
                      None if args.json == "-" else _sizing_progress)
    if answer["run"]["cut"] and args.json != "-" and sys.stderr.isatty():
        print(file=sys.stderr)  # the sizing stopped short: end its progress line here
    if not _wrote_json_to_stdout(answer, args.json):
        sized = _sized_requests(answer, question)
        runs = (f"{sized:,} requests x {question.seeds} seeds per decision" if sized != question.requests else
                run_length_words(question.requests, question.seeds, answer["recommendation"]))
        print(plan_text(answer, f"Plan for {served_text(scenario, answer)} (from {scenario.name!r}); targets: "
                                f"{'; '.join(t.describe() for t in question.targets)}", f"Runs: {runs}."))
    _write_recipe(args.recipe, answer, scenario)
    return _exit_status(answer["run"]["cut"], "plan_s")


def _sized_requests(answer: dict, question: Question) -> int:
    """Requests per sizing run: the question's, or a replayed trace's whole (``planner.at_peak``)."""
    return (answer.get("traffic") or {}).get("sized_requests", question.requests)


def _write_recipe(folder: str | None, answer: dict, scenario: Scenario) -> None:
    """The recommendation's recipe files in ``folder`` (made when missing), named on stderr; nothing without a
    folder; one line when there is no recommendation to deploy."""
    if not folder:
        return
    best = answer["recommendation"]
    if best is None:
        print("no recipe written: no plan meets the targets", file=sys.stderr)
        return
    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ScenarioError(f"--recipe {quoted(folder)} could not be made ({os_reason(exc)})") from None
    files = recipe_files(best, scenario)
    for name, text in files.items():
        _write(str(Path(folder) / name), text, "--recipe", inside=folder)
    print(f"recipe: {', '.join(files)} in {folder}", file=sys.stderr)


def _report(args: argparse.Namespace) -> int:
    scenario = _plan_scenario(args)
    question = _question(args)
    data = scenario_to_dict(scenario)
    with _cluster(args):
        answer = plan(data, question, scenario.origin, _sizing_progress)
    if answer["run"]["cut"] and sys.stderr.isatty():
        print(file=sys.stderr)  # the sizing stopped short: end its progress line here
    started = time.perf_counter()
    text = report_html(data, question, answer, public_address(args.app_url), time.strftime("%Y-%m-%d %H:%M %Z"),
                       scenario.origin)
    _write(args.html, text, "--html")
    if args.pdf:
        write_pdf(text, Path(args.pdf))
    if not _wrote_json_to_stdout(answer, args.json):
        best = answer["recommendation"]
        print(("Recommendation: " + summary_line(best)) if best else no_plan_text(answer) + ".")
        print(f"wrote {args.html}" + (f" and {args.pdf}" if args.pdf else "") +
              f" (plan {answer['run']['wall_s']:.1f} s, report {time.perf_counter() - started:.1f} s)")
    _write_recipe(args.recipe, answer, scenario)
    return _exit_status(answer["run"]["cut"], "plan_s")


def _tune(args: argparse.Namespace) -> int:
    scenario = _load(args)
    constraints = tuple(t for text in args.constraints for t in parse_constraint(text))
    question = TuneQuestion(parse_objective(args.minimize or args.maximize, minimize=bool(args.minimize)),
                            constraints, _names(args.policies) or TUNABLE, args.batching, args.candidates,
                            args.seeds, args.requests)
    progress = None if args.json == "-" else (lambda done, total: _sizing_progress(done, total, "candidates"))
    data = scenario_to_dict(scenario)
    with _cluster(args):
        answer = tune(data, question, scenario.origin, progress)
    if progress is not None and sys.stderr.isatty():
        print(file=sys.stderr)  # the search may stop short of its budget: end the progress line here
    if args.write:
        tuned = tuned_scenario(data, answer["best"])
        load_scenario(tuned, origin=scenario.origin)  # what is written loads
        _write(args.write, to_toml(tuned), "--write")
    if not _wrote_json_to_stdout(answer, args.json):
        print(tune_text(answer, scenario.name))
        if args.write:
            print(f"wrote the tuned scenario to {args.write}")
    return _exit_status(answer["cut"], "tune_s")


def _hardware(args: argparse.Namespace) -> int:
    server = _load(args).server
    if server.step_model != "roofline":
        raise ScenarioError("server.step_model must be roofline to describe hardware")
    parts = memory_breakdown_gib(server)
    print(f"{server.tensor_parallel} x {server.gpu}, {server.model} ({server.quant} weights, {server.kv_quant} KV)")
    profile = roofline_profile(server)
    print(f"model: {model_text(profile)}")
    print("one card (GiB): " + ", ".join(f"{k} {v:.1f}" for k, v in parts.items()))
    capacity = kv_capacity_tokens(server, profile)
    print(f"KV cache: {capacity:,} tokens ({profile.kv_bytes_per_token_per_card:,.0f} B per token on each card)")
    step = server_step(server)
    full = max(1, min(server.max_batch_size, capacity // 2048))  # the largest batch whose KV fits
    print(f"decode iteration at 2,048 tokens of context: batch 1 {decode_step_s_nb(step, 1, 2048) * 1e3:.2f} ms, "
          f"batch {full} {decode_step_s_nb(step, full, 2048) * 1e3:.2f} ms (the most that fit, up to max_batch_size); "
          f"prefill of 2,048 tokens {prefill_s(step, 2048) * 1e3:.1f} ms")
    print(f"step times: {step_badge(server)}")
    return 0


def _calibrate(args: argparse.Namespace) -> int:
    results = [read_result(read_regular(f, "result file", MAX_FILE_MIB * MIB, "result_file_mib"), Path(f).name)
               for f in args.files]
    model = args.model or model_for(results[0].model_id)
    server = benchmarked_server({"gpu": args.gpu, "model": model, "tensor_parallel": args.tensor_parallel,
                                 "quant": args.quant, "kv_quant": args.kv_quant}, args.overrides)
    calibrated = calibrate(results, server, args.save or "unsaved")
    eff, saved = calibrated.calibration.efficiency, calibrated.calibration
    for result in results:
        print(f"{result.name} ({result.tool}): {result.load_text()}")
    print(f"replayed on {saved.setup}")
    table = calibrated.table.rename(columns={"shipped_error_pct": "shipped error %", "fitted_error_pct":
                                             "fitted error %", "held_out_error_pct": "held-out error %"})
    if len(results) == 1:
        table = table.drop(columns=["file", "held-out error %"])
    print(table_text(table, float_format=lambda v: f"{round(v, 1) + 0.0:,.1f}"))  # never "-0.0"
    print(f"fitted in {calibrated.fit_s:.1f} s: compute {eff.compute:.3f}, bandwidth {eff.bandwidth:.3f} of peak, "
          f"overhead {eff.overhead_ms:.2f} ms per iteration, sharpness {eff.sharpness:.2f}")
    print(f"step times: {saved.badge()}")
    if calibrated.warning():
        print(f"warning: {calibrated.warning()}")
    if args.save:
        path = save(saved, replace=args.replace)
        print(f"saved as calibration {args.save!r} ({path}); use it with --set server.calibration={args.save}")
    else:
        print("not saved: add --save NAME to keep it")
    return 0


def _replay_bench(args: argparse.Namespace) -> int:
    words = args.client[1:] if args.client[:1] == ["--"] else args.client
    if not words:
        raise ScenarioError("replay-bench: give the client's command after --, e.g. -- vllm bench serve --model "
                            "meta-llama/Llama-3.1-8B-Instruct --max-concurrency 32")
    if not 0 <= args.special_tokens <= 16:
        raise ScenarioError(f"--special-tokens = {args.special_tokens}: give 0 to 16")
    command = read_command(words, args.special_tokens)
    measured = None
    if args.measured:
        measured = read_result(read_regular(args.measured, "result file", MAX_FILE_MIB * MIB, "result_file_mib"),
                               Path(args.measured).name)
    model = args.model or model_for(command.load.model_id or (measured.model_id if measured else ""))
    server = replay_server({"gpu": args.gpu, "model": model, "tensor_parallel": args.tensor_parallel,
                            "quant": args.quant, "kv_quant": args.kv_quant}, args.engine or command.client.engine,
                           args.overrides)
    table = replay(command, server, measured)
    notes = [f"{command.client.name} ({command.client.release}'s draws and defaults): {command.load.load_text()}",
             f"replayed on {server.tensor_parallel} x {server.gpu}, {server.model} ({server.quant} weights, "
             f"{server.kv_quant} KV), {server.engine}; step times: {step_badge(server)}"]
    if command.warmups:
        notes.append(f"{command.warmups} warm-up request(s) finish before the timed run: not replayed (the server is "
                     f"idle between them and the run)")
    if not command.ignore_eos:
        notes.append("without --ignore-eos the model may stop before an output's length: the replay runs every "
                     "output to its length (a --save-detailed result file has the real ones: engine calibrate)")
    mismatch = load_mismatch(command, measured) if measured else None
    if mismatch:
        notes.append(f"warning: {mismatch}")
    answer = {"client": command.client.name, "notes": notes,
              "figures": table.rename(columns={"error %": "error_pct"}).to_dict(orient="records")}
    if _wrote_json_to_stdout(answer, args.json):
        return 0
    print("\n".join(notes))
    shown = table if measured else table.drop(columns=["measured", "error %"])
    print(table_text(shown, float_format=lambda v: f"{round(v, 1) + 0.0:,.1f}"))
    return 0


def os_error_text(exc: OSError) -> str:
    """An operating-system error in words: what went wrong, and the file when it names one."""
    what = os_reason(exc)
    return f"{what}: {quoted(exc.filename)}" if exc.filename else what


def _write(path: str, text: str, option: str, inside: str | None = None) -> None:
    """Write ``text`` to ``path`` (UTF-8) whole and never through a link (``files.write_named``; ``inside``: the
    folder it must be in); ``ScenarioError`` naming ``option`` and why when it cannot be written."""
    write_named(path, text.encode("utf-8"), option, inside)


def main(argv: list[str] | None = None) -> int:
    """Run one command; every failure is one line on stderr: exit 2 for bad input, 1 for an internal error."""
    args = command_parser().parse_args(argv)
    try:
        if args.command == "keys":
            print(keys_markdown(), end="")
            return 0
        if args.command == "warm":
            started = time.perf_counter()
            print(f"compiled and cached: {warm_up()} presets simulated in {time.perf_counter() - started:.1f} s")
            return 0
        return {"run": _run, "bill": _bill, "shapes": _shapes, "size": _size, "plan": _plan, "report": _report,
                "tune": _tune, "hardware": _hardware, "calibrate": _calibrate,
                "replay-bench": _replay_bench}[args.command](args)
    except ScenarioError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    except OSError as exc:
        print(f"error: {os_error_text(exc)}", file=sys.stderr)
        return EXIT_INVALID
    except MemoryError:
        print("error: out of memory; simulate fewer requests or lower the limits", file=sys.stderr)
        return EXIT_INVALID
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:  # noqa: BLE001 - one line, never a traceback; a bug to report
        print(f"error: internal error ({type(exc).__name__}: {exc}); please report it with the command line",
              file=sys.stderr)
        return EXIT_INTERNAL
