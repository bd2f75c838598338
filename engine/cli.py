"""Command-line interface: ``python -m engine run SCENARIO.toml [...]`` and ``python -m engine keys``.

Invalid input ends with exit code 2 and one line naming the problem, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .config import keys_markdown, load_scenario
from .errors import ScenarioError
from .simulate import Result, simulate
from .traces import TRACE_FORMATS, guess_trace_format

EXIT_INVALID = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, no usage block
        self.exit(EXIT_INVALID, f"error: {message} (see {self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m engine", description="Scheduler Lab simulator")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    run = sub.add_parser("run", help="simulate one scenario and print its metrics")
    run.add_argument("scenario", help="scenario TOML file (see data/scenarios/)")
    run.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                     help="override a scenario key, e.g. --set policy.name=priority (repeatable)")
    run.add_argument("--trace", metavar="FILE", help="replay this trace instead of synthetic arrivals "
                     "(the scenario's num_requests/duration_s still cut it)")
    run.add_argument("--trace-format", choices=TRACE_FORMATS,
                     help="trace format (default: guessed from the file: .jsonl = mooncake, TIMESTAMP header = azure)")
    run.add_argument("--seed", type=int, help="override the scenario's seed")
    run.add_argument("--json", metavar="PATH", help="write the metrics as JSON to PATH ('-' = stdout, no table)")
    run.add_argument("--requests-csv", metavar="PATH", help="write one row per request to PATH")
    sub.add_parser("keys", help="print every scenario key with unit, default and meaning (Markdown)")
    return parser


def _overrides(args: argparse.Namespace) -> list[str]:
    """The --set items, plus --seed and --trace written as the same key=value overrides."""
    overrides = list(args.overrides)
    if args.seed is not None:
        overrides.append(f"seed={args.seed}")
    if args.trace:
        path = Path(args.trace).resolve()
        fmt = args.trace_format or guess_trace_format(path)
        overrides.append(f'workload.trace={{path = {json.dumps(str(path))}, format = "{fmt}"}}')
    return overrides


def _fmt(value, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def format_table(result: Result) -> str:
    """A readable per-class table plus the system line."""
    summary = result.summary
    header = (f"{'class':<14}{'arrived':>9}{'done':>9}{'timeout':>9}{'left':>7}{'TTFT p50':>10}{'TTFT p99':>10}"
              f"{'E2E p50':>10}{'E2E p99':>10}{'TPOT':>8}{'SLA':>7}{'tok/s':>9}")
    lines = [f"scenario {summary['run']['scenario']!r}, seed {summary['run']['seed']}, "
             f"{summary['run']['requests']:,} requests (latencies in ms)", header, "-" * len(header)]
    rows = list(summary["classes"].items()) + [("overall", summary["overall"])]
    for name, m in rows:
        sla = "-" if m["sla_attainment"] is None else f"{100 * m['sla_attainment']:.1f}%"
        lines.append(f"{name:<14}{m['arrived']:>9,}{m['completed']:>9,}{m['timed_out']:>9,}{m['unfinished']:>7,}"
                     f"{_fmt(m['ttft_ms']['p50']):>10}{_fmt(m['ttft_ms']['p99']):>10}"
                     f"{_fmt(m['e2e_ms']['p50']):>10}{_fmt(m['e2e_ms']['p99']):>10}"
                     f"{_fmt(m['tpot_ms']['mean'], 1):>8}{sla:>7}{_fmt(m['output_tokens_per_s'], 1):>9}")
    s = summary["system"]
    kv = "unlimited" if s["kv_peak_frac"] is None else \
        f"mean {100 * s['kv_mean_frac']:.1f}% peak {100 * s['kv_peak_frac']:.1f}%"
    lines.append(f"system: {s['sim_time_s']:,.1f} s simulated, {s['iterations']:,} iterations, mean batch "
                 f"{s['mean_batch_size']:.2f}, GPU busy {100 * s['gpu_busy_frac']:.1f}%, KV {kv}, "
                 f"{s['preemptions']:,} preemptions, offered load {s['offered_load']:.2f} (estimate)")
    if s["unstable"]:
        why = {"drained": "offered load >= 1: the queue grows for as long as requests keep arriving",
               "queue_bound": "stopped early: the waiting queue passed limits.max_waiting_requests",
               "horizon": "stopped early: limits.max_drain_s after the last arrival passed"}[s["stop_reason"]]
        lines.append(f"UNSTABLE: {why}; latencies describe a growing backlog")
    lines.append(f"wall time {summary['run']['wall_s']:.2f} s")
    return "\n".join(lines)


def _run(args: argparse.Namespace) -> int:
    scenario = load_scenario(args.scenario, overrides=_overrides(args))
    result = simulate(scenario)
    if args.json:
        text = json.dumps(result.summary, indent=2)
        if args.json == "-":
            print(text)
        else:
            Path(args.json).write_text(text + "\n")
    if args.requests_csv:
        result.requests.to_csv(args.requests_csv, index=False)
    if args.json != "-":
        print(format_table(result))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "keys":
            print(keys_markdown(), end="")
            return 0
        return _run(args)
    except ScenarioError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    except OSError as exc:
        print(f"error: {exc.strerror or exc}: {exc.filename}", file=sys.stderr)
        return EXIT_INVALID
