"""Per-request records and summary metrics of one run.

Definitions (all times from the request's arrival):
- queue delay = first time scheduled; TTFT = first output token; end-to-end = last output token; TTFT and
  end-to-end as the client sees them: with the fixed time per request it sees beyond the iterations
  (``kernel_tables.client_fixed_ms``: HTTP, tokenizing, the first chunk), which the engine's own clocks (its
  waits, time-outs and the policies' ages) do not count;
- TPOT = (end-to-end - TTFT) / (output tokens - 1), for requests with more than one output token;
- latency statistics (mean, p50, p90, p99; linear-interpolated percentiles) use completed requests;
- SLA attainment = completed requests that met every SLA target their class sets, divided by
  completed + timed-out requests (unfinished ones are not judged); only classes that set a target are
  judged: a class without one has no attainment (None, "no target"), whatever it waited;
- SLA-met requests (for the cost per SLA-met request) are completed ones within every target of their class,
  so a completed request of a class without a target counts as met;
- rates (output tokens, prompt tokens of requests that received a first token, SLA-met requests, per second)
  are measured over the steady-state window (``simulate.steady_window_s``: after the warm-up, before the
  drain): output tokens emitted inside it, prompts whose first token came inside it, SLA-met requests that
  finished inside it, over its length. A run drains, so over the whole run every token is produced in the
  end and a policy that holds a class back loses nothing; inside the window it does. The whole-run rates
  (over the simulated time) are kept beside them, with keys ending in ``_run``;
- arrived = completed + timed_out + unfinished (requests still waiting or running at the end).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..hardware.kernel_tables import client_fixed_ms
from ..scenario.config import OVERALL, Scenario
from ..scenario.metric_table import CLASS_METRICS
from ..scenario.summary import ClassMetrics, Summary
from .layout import (COMPLETED, F_ARRIVAL, F_FINISH, F_FIRST_SCHEDULED, F_FIRST_TOKEN, F_HANDED_OFF, I_CLASS,
                     I_GENERATED, I_OUTPUT, I_PREEMPTIONS, I_PREFILL_REPLICA, I_PROMPT, I_REPLICA, I_STATE,
                     K_DECODE_SERVED, K_PREFILL_SERVED, NOT_ARRIVED, RUNNING, TIMED_OUT, TRANSFERRING, WAITING)

STATE_NAMES = {NOT_ARRIVED: "not_arrived", WAITING: "waiting", RUNNING: "running",
               COMPLETED: "completed", TIMED_OUT: "timed_out", TRANSFERRING: "transferring"}
LATENCY_COLUMNS = ("ttft_ms", "tpot_ms", "e2e_ms", "queue_ms")
RATE_KEYS = ("output_tokens_per_s", "prompt_tokens_per_s", "sla_met_per_s")  # each also as ``KEY_run``


def latencies_ms(ints: np.ndarray, floats: np.ndarray, fixed_ms: float = 0.0
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per request: completed or not, time to first token (with the client's ``fixed_ms``) and time per output
    token after it (ms; NaN where there is none), from the final state arrays."""
    output = ints[:, I_OUTPUT]
    completed = ints[:, I_STATE] == COMPLETED
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot_ms = np.where(output > 1, (floats[:, F_FINISH] - floats[:, F_FIRST_TOKEN]) / (output - 1) * 1e3, np.nan)
    ttft_ms = (floats[:, F_FIRST_TOKEN] - floats[:, F_ARRIVAL]) * 1e3 + fixed_ms
    return completed, ttft_ms, np.where(completed, tpot_ms, np.nan)


def request_records(scenario: Scenario, ints: np.ndarray, floats: np.ndarray) -> pd.DataFrame:
    """One row per request: inputs, outcome, timestamps and latencies (ms), from the final state arrays."""
    names = [c.name for c in scenario.workload.classes]
    arrival_s, first_token_s, finish_s = floats[:, F_ARRIVAL], floats[:, F_FIRST_TOKEN], floats[:, F_FINISH]
    first_scheduled_s = floats[:, F_FIRST_SCHEDULED]
    output = ints[:, I_OUTPUT]
    fixed_ms = client_fixed_ms(scenario.server)
    completed, ttft_ms, tpot_ms = latencies_ms(ints, floats, fixed_ms)
    frame = pd.DataFrame({
        "request_id": np.arange(len(ints)),
        "class": pd.Categorical.from_codes(ints[:, I_CLASS], names),
        "arrival_s": arrival_s,
        "prompt_tokens": ints[:, I_PROMPT],
        "output_tokens": output,
        "state": pd.Categorical.from_codes(ints[:, I_STATE], list(STATE_NAMES.values())),
        "generated_tokens": ints[:, I_GENERATED],
        "preemptions": ints[:, I_PREEMPTIONS],
        "replica": ints[:, I_REPLICA],
        "first_scheduled_s": first_scheduled_s,
        "first_token_s": first_token_s,
        "finish_s": finish_s,
        "queue_ms": (first_scheduled_s - arrival_s) * 1e3,
        "ttft_ms": ttft_ms,
        "e2e_ms": np.where(completed, (finish_s - arrival_s) * 1e3 + fixed_ms, np.nan),
        "tpot_ms": tpot_ms,
    })
    if scenario.fleet.mode == "disaggregated":  # where its prompt was computed, and when its KV reached decode
        frame.insert(frame.columns.get_loc("replica"), "prefill_replica", ints[:, I_PREFILL_REPLICA])
        frame["handed_off_s"] = floats[:, F_HANDED_OFF]
        frame["kv_transfer_ms"] = (frame["handed_off_s"] - first_token_s) * 1e3
    ttft_target_ms = np.array([c.sla_ttft_ms or math.inf for c in scenario.workload.classes])[ints[:, I_CLASS]]
    e2e_target_ms = np.array([c.sla_e2e_ms or math.inf for c in scenario.workload.classes])[ints[:, I_CLASS]]
    with np.errstate(invalid="ignore"):
        frame["sla_met"] = completed & (frame["ttft_ms"].to_numpy() <= ttft_target_ms) & \
            (frame["e2e_ms"].to_numpy() <= e2e_target_ms)
    frame["has_sla_target"] = np.isfinite(ttft_target_ms) | np.isfinite(e2e_target_ms)
    return frame


def summary_stats(values: np.ndarray) -> dict:
    """Mean and linear-interpolated p50, p90, p99 of the finite ``values`` (None each when there is none)."""
    values = values[np.isfinite(values)]
    if len(values) == 0:
        return {"mean": None, "p50": None, "p90": None, "p99": None}
    p50, p90, p99 = np.percentile(values, [50, 90, 99])
    return {"mean": float(values.mean()), "p50": float(p50), "p90": float(p90), "p99": float(p99)}


def _longest_wait_ms(c: dict[str, np.ndarray], arrived: np.ndarray, sim_time_s: float) -> float | None:
    """Longest time any arrived request waited before it was first scheduled (or left, or the run ended)."""
    if not arrived.any():
        return None
    end_s = c["first_scheduled_s"][arrived]
    end_s = np.where(np.isnan(end_s), c["finish_s"][arrived], end_s)
    end_s = np.where(np.isnan(end_s), sim_time_s, end_s)
    return float((end_s - c["arrival_s"][arrived]).max() * 1e3)


_STATE_CODES = {name: code for code, name in STATE_NAMES.items()}
_SUMMARY_COLUMNS = ("arrival_s", "first_scheduled_s", "finish_s", "first_token_s", "prompt_tokens",
                    "generated_tokens", "sla_met", "has_sla_target", *LATENCY_COLUMNS)


def _per_s(count: float, seconds: float) -> float:
    return float(count / seconds) if seconds > 0 else 0.0


def group_metrics(c: dict[str, np.ndarray], sim_time_s: float, window: tuple[float, float] | None = None,
                  window_tokens: float = 0.0) -> ClassMetrics:
    """The metric block M of the JSON report for the requests whose record columns ``c`` holds (numpy arrays
    of ``request_records``' columns, ``state`` as its codes: a few array operations instead of pandas').
    ``window``: the steady-state window [start, end) (end infinite when every request arrived at once), in which
    they emitted ``window_tokens`` output tokens; None (a run cut before the warm-up ended) gives the whole-run
    rates."""
    state = c["state"]
    done = state == _STATE_CODES["completed"]
    arrived_rows = state != _STATE_CODES["not_arrived"]
    arrived = int(arrived_rows.sum())
    completed = int(done.sum())
    timed_out = int((state == _STATE_CODES["timed_out"]).sum())
    judged_rows = c["has_sla_target"] & (done | (state == _STATE_CODES["timed_out"]))
    judged = int(judged_rows.sum())
    block: ClassMetrics = {
        "arrived": arrived,
        "completed": completed,
        "timed_out": timed_out,
        "unfinished": arrived - completed - timed_out,
        **{col: summary_stats(c[col][done]) for col in LATENCY_COLUMNS},
        "sla_attainment": float((c["sla_met"] & judged_rows).sum() / judged) if judged else None,
        "output_tokens_per_s_run": _per_s(c["generated_tokens"].sum(), sim_time_s),
        "prompt_tokens_per_s_run": _per_s(c["prompt_tokens"][~np.isnan(c["first_token_s"])].sum(), sim_time_s),
        "sla_met_per_s_run": _per_s(c["sla_met"].sum(), sim_time_s),
        "longest_wait_ms": _longest_wait_ms(c, arrived_rows, sim_time_s),
    }
    if window is None:
        for key in RATE_KEYS:
            block[key] = block[f"{key}_run"]
        return block
    start_s, end_s = window
    with np.errstate(invalid="ignore"):  # NaN times (no first token, not finished) are outside any window
        first_in = (c["first_token_s"] >= start_s) & (c["first_token_s"] < end_s)
        finished_in = (c["finish_s"] >= start_s) & (c["finish_s"] < end_s)
    length_s = min(end_s, sim_time_s) - start_s  # the window as the loop counted it, [start, end), within the run
    block["output_tokens_per_s"] = _per_s(window_tokens, length_s)
    block["prompt_tokens_per_s"] = _per_s(c["prompt_tokens"][first_in].sum(), length_s)
    block["sla_met_per_s"] = _per_s((c["sla_met"] & finished_in).sum(), length_s)
    return block


def summarize(scenario: Scenario, frame: pd.DataFrame, sim_time_s: float, window: tuple[float, float] | None,
              window_tokens: np.ndarray) -> tuple[dict[str, ClassMetrics], ClassMetrics]:
    """Per-class and overall metric blocks (``window_tokens``: per class, output tokens emitted inside the
    steady-state ``window``)."""
    columns = {name: frame[name].to_numpy() for name in _SUMMARY_COLUMNS}
    columns["state"] = frame["state"].cat.codes.to_numpy()
    codes = frame["class"].cat.codes.to_numpy()
    classes = {cls.name: group_metrics({name: values[codes == k] for name, values in columns.items()}, sim_time_s,
                                       window, float(window_tokens[k]))
               for k, cls in enumerate(scenario.workload.classes)}
    return classes, group_metrics(columns, sim_time_s, window, float(window_tokens.sum()))


def add_service_shares(classes: dict[str, ClassMetrics], class_params: np.ndarray, prefill_token_weight: float) -> None:
    """Add each class's GPU service (decode tokens + weight x prefill tokens) and its share of the total."""
    service = class_params[:, K_DECODE_SERVED] + prefill_token_weight * class_params[:, K_PREFILL_SERVED]
    total = service.sum()
    for block, tokens in zip(classes.values(), service):
        block["service_tokens"] = float(tokens)
        block["service_share"] = float(tokens / total) if total > 0 else None


def flat_rows(summary: Summary) -> list[dict]:
    """One record per class (and ``overall``) with every class metric of ``metric_table`` as a key."""
    return [{"class": name, **{m.key: m.value(block) for m in CLASS_METRICS}}
            for name, block in [*summary["classes"].items(), (OVERALL, summary["overall"])]]


def metrics_frame(rows: list[dict]) -> pd.DataFrame:
    """Records of ``flat_rows`` (with any extra keys) as one frame: built once from all rows, since a frame
    per run and a concatenation took most of a cached Lab page's time."""
    return pd.DataFrame(rows).astype({"class": "string"})


def flat_metrics(summary: Summary) -> pd.DataFrame:
    """One row per class (and ``overall``) with every class metric of ``metric_table`` as a column."""
    return metrics_frame(flat_rows(summary))
