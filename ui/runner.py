"""Cached engine calls for the pages. Every cache key is the whole scenario as canonical JSON, in one spelling
(``normal_json``: a preset as written and the same preset as the sidebar writes it back share their results).

Full runs are kept in one cache shared by all sessions and bounded in bytes and age
(``result_cache.ResultCache``, limits ``result_cache_mib`` and ``result_cache_s``); summaries of the
comparison and sweep runs are small and kept in a second one, which pooled threads can fill: a page's
variants run on all cores at once (``engine.sim.parallel``), and a run another session is computing is
waited for, not repeated. Runs estimated to take more than ``caps.large_run_mib`` of memory (``engine.sim.memory``)
take turns (``caps.large_runs_at_once`` at a time), so that many sessions asking for the largest allowed scenario
at once cannot exhaust the server's memory; while one runs, its page gives its turn to the next
(``turns.Turns.aside``).
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import functools
import json
import math
import threading
from dataclasses import dataclass

import pandas as pd
import streamlit as st

import engine
from engine.hardware import calibration_store
from engine.scenario.caps import DEFAULT_CAPS, MIB
from engine.scenario.config import Server, apply_overrides, scenario_to_dict
from engine.scenario.summary import Summary
from engine.sim import parallel, stopping
from engine.sim.policies import unread_params
from engine.sim.memory import check_run_memory
from engine.sim.simulate import warm_up as engine_warm_up
from engine.sim.simulate import run_summary
from engine.sim.workload import WHOLE_TRACE_MAX_REQUESTS
from engine.sim.sweep import (Variant, alpha_gamma_variants, policy_variants, rate_variants, tagged_frame,
                              trace_rate_variants)
from ui import jobs, shared_summaries, trace_store, turns
from ui.result_cache import ResultCache
from ui.state import validate
from ui.trace_store import APP_ORIGIN

SWEEP_MAX_REQUESTS = 5000
# The Lab's cards first come from this many requests while a longer run not yet cached computes (``preview``).
PREVIEW_REQUESTS = 2000
SUMMARY_CACHE_MIB = 64  # a summary takes a few KiB: tens of thousands of variant runs


def canonical(data: dict) -> str:
    return json.dumps(data, sort_keys=True)


_NO_GATE = Server()  # the defaults: a minimum batch of 1, no wait


@functools.lru_cache(maxsize=1024)
def normal_json(scenario_json: str) -> str:
    """The scenario in one spelling: every default written out and every number in its field's type (the typed
    scenario as plain data, ``scenario_to_dict``), without the ``[policy]`` keys its policy does not read
    (``policies.unread_params``). The sidebar writes a preset back with its defaults filled in (``1000`` as
    ``1000.0``, an absent engine as ``"vllm"``), and a comparison's FIFO run carries the dynamic policy's alpha:
    without this, the first change on a page missed every cached run of the preset, and a move of alpha ran every
    policy's curves again. A minimum batch and its wait that cannot hold an iteration back (``holds_batches``) are
    written as the defaults, so moving the wait under a minimum of 1 finds the runs cached. A scenario that does not
    validate keeps its own text (its run says why)."""
    try:
        scenario = validate(json.loads(scenario_json))
    except engine.ScenarioError:
        return scenario_json
    data = scenario_to_dict(scenario)
    for key in unread_params(data["policy"]["name"]):
        data["policy"].pop(key, None)
    if not scenario.server.holds_batches:  # the two change nothing: a wait moved under a minimum of 1 is cached
        data["server"].update(min_batch_size=_NO_GATE.min_batch_size, wait_timeout_ms=_NO_GATE.wait_timeout_ms)
    return canonical(data)


def _cache_key(scenario_json: str) -> tuple[str, str]:
    """What a result is cached under: the scenario in one spelling (``normal_json``) and, when it names a saved
    calibration, the version of that file (replacing a calibration keeps its name; the results must not stay those
    of the old one)."""
    name = json.loads(scenario_json).get("server", {}).get("calibration")
    return normal_json(scenario_json), calibration_store.version(name) if name else ""


@dataclass(frozen=True)
class Run:
    """What the Lab shows of one simulation."""

    summary: Summary
    requests: pd.DataFrame
    timeseries: pd.DataFrame

    def held_bytes(self) -> int:
        """Memory the run's frames hold."""
        return int(self.requests.memory_usage(deep=True).sum() + self.timeseries.memory_usage(deep=True).sum())


@st.cache_resource(show_spinner="Loading the compiled simulator (compiling it, the first time after set-up)...")
def warm_up() -> bool:
    """Load (or compile) the simulator once per server process (``.ci/setup`` compiles it ahead)."""
    engine_warm_up()
    return True


# Shared by every session of this server process, as module state: never in Streamlit's cache_resource, which a
# visitor's clear_cache message empties (three large runs then ran at once, and each release hit a new semaphore).
_RESULTS: ResultCache[Run] = ResultCache(DEFAULT_CAPS.result_cache_mib * MIB, DEFAULT_CAPS.result_cache_s,
                                         Run.held_bytes)
_LARGE_RUNS = threading.BoundedSemaphore(DEFAULT_CAPS.large_runs_at_once)  # large runs take turns


def simulate(scenario_json: str) -> Run:
    """The full run of a scenario (shared, read-only): from the cache, else simulated with a progress bar."""
    return _RESULTS.get_or_compute(_cache_key(scenario_json), lambda: _simulate(scenario_json))


def kept_run(data: dict) -> Run | None:
    """The full run of ``data`` when the cache holds it (nothing is simulated)."""
    return _RESULTS.get(_cache_key(canonical(data)))


def preview(data: dict) -> Summary | None:
    """The summary of ``data``'s first ``PREVIEW_REQUESTS`` requests, to show while its full run computes; None when
    there is nothing to preview: the full run is cached, or it is not much longer than the preview, or the
    scenario cannot run (its full run says why)."""
    if (data["workload"].get("num_requests") or math.inf) <= 2 * PREVIEW_REQUESTS or \
            kept_run(data) is not None:
        return None
    try:
        return summary(canonical(capped(data, PREVIEW_REQUESTS)))
    except Exception:  # noqa: BLE001 - the full run that follows shows the error, in one line
        return None


def _simulate(scenario_json: str) -> Run:
    data = json.loads(scenario_json)
    scenario = validate(data)
    if scenario.workload.trace is not None:
        trace_store.touch(scenario.workload.trace.path)
    large = check_run_memory(scenario).total_bytes > DEFAULT_CAPS.large_run_mib * MIB  # refused before any wait
    with turns.stepping_aside() if large else contextlib.nullcontext():
        bar = st.progress(0.0, text="Simulating...")
        # Waiting in short steps lets Streamlit stop this script when its user changes something meanwhile.
        while large and not _LARGE_RUNS.acquire(timeout=0.5):
            bar.progress(0.0, text="Waiting for another large run on this server to finish...")
        try:
            with jobs.page_job("this run"):  # stops with its visitor's session (a wait for it recomputes it)
                result = engine.simulate(scenario, progress=lambda share: bar.progress(
                    min(share, 1.0), text=f"Simulating... {min(share, 1.0):.0%} of the requests have arrived"))
        finally:
            if large:
                _LARGE_RUNS.release()
            bar.empty()
    return Run(result.summary, result.requests, result.timeseries)


def _summary_bytes(summary: Summary) -> int:
    return len(json.dumps(summary, default=float))


_SUMMARIES: ResultCache[Summary] = ResultCache(SUMMARY_CACHE_MIB * MIB, DEFAULT_CAPS.result_cache_s, _summary_bytes)


_SHARED = shared_summaries.from_environment()  # the other processes' summaries, behind ``python -m ui.serve``


def summary(scenario_json: str) -> Summary:
    """The summary of a scenario's run (a copy the caller may change): cached for every session; safe to call
    from pooled threads."""
    return copy.deepcopy(_kept_summary(scenario_json))


def _kept_summary(scenario_json: str) -> Summary:
    """The cached summary itself (shared: not to be changed), computed when missing."""
    key = _cache_key(scenario_json)
    return _SUMMARIES.get_or_compute(key, lambda: _shared_or_run(key, scenario_json))


def run_ahead(datas: list[dict]) -> None:
    """Start now, on the pool, the runs of ``datas`` that are neither cached nor under way, in their order, and
    return at once: a page's later sections (the policy comparison, the load curves) then find them done or under
    way, having used the cores while the page's own run computed and its first sections were drawn. They form a
    job of the current page run (``jobs.page_run``) with one section's time (``caps.section_s``): when the visitor
    changes something before they are done, the run ends and they stop at their next check; a section that waits
    for one that stopped runs it itself."""
    job = stopping.Job("the runs started ahead", DEFAULT_CAPS.section_s, "section_s", parent=stopping.current())
    for data in datas:
        scenario_json = canonical(data)
        if not _SUMMARIES.known(_cache_key(scenario_json)):
            parallel.pool().submit(contextvars.copy_context().run, stopping.in_job, job, _start_ahead,
                                   scenario_json)


def _start_ahead(scenario_json: str) -> None:
    """One run started ahead, on a pool thread, unless another thread has started or kept it meanwhile: it does not
    wait for that one, which would hold a core idle (many sessions making the same change at once each start the
    same runs ahead; the sections that need them wait for them)."""
    if not _SUMMARIES.known(_cache_key(scenario_json)):
        _kept_summary(scenario_json)


def _shared_or_run(key, scenario_json: str) -> Summary:
    """The summary another process of this app wrote (``shared_summaries``), else the run's, written for them."""
    kept = _SHARED.get(key) if _SHARED is not None else None
    if kept is not None:
        return kept
    result = run_summary(json.loads(scenario_json), APP_ORIGIN)
    if _SHARED is not None:
        _SHARED.put(key, result)
    return result


def capped(data: dict, max_requests: int = SWEEP_MAX_REQUESTS) -> dict:
    """``data`` with at most ``max_requests`` requests (comparisons and sweeps run many variants)."""
    return apply_overrides(data, {"workload.num_requests": min(int(data["workload"].get("num_requests") or
                                                                   max_requests), max_requests)})


class SectionBudget:
    """Wall-clock seconds one section of a page may spend on runs not yet cached (``caps.section_s``), counted from
    when the section starts, so that a link asking for very slow runs cannot keep the cores busy for every variant
    of every section: a job (``engine.sim.stopping``) whose runs stop, on every core, when its time runs out or its
    visitor leaves. ``summaries`` runs a list of variants in it; a search of its own (fleet shapes, the cheapest
    rental) runs inside ``with SectionBudget() as budget:``, its runs through ``budget.summary``, so that the
    search's own runs are the section's job's children."""

    ADVICE = "simulate fewer requests or a lighter load to see every run"

    def __init__(self, seconds: float = DEFAULT_CAPS.section_s):
        self.job = stopping.Job("this section", seconds, "section_s", alive=jobs.session_alive(),
                                parent=stopping.current())
        self._running = None

    def __enter__(self) -> "SectionBudget":
        self._running = stopping.running(self.job)
        self._running.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._running.__exit__(*exc)

    def summary(self, data: dict) -> Summary:
        """The run's summary (cached, or simulated while the section's time is left); ``stopping.Stopped`` after,
        saying what to change when the time ran out. Call it inside ``with`` (from the section's own pooled runs
        too)."""
        try:
            stopping.check()
            return summary(canonical(data))
        except stopping.Stopped as exc:
            raise stopping.Stopped(f"{stopping.cut_short(exc)}; {self.ADVICE}", timed_out=True) from None

    def summaries(self, datas: list[dict], progress=None) -> tuple[list[Summary | None], str | None]:
        """Every run's summary, run on all cores at once, within the section's time; the runs not finished by then
        hold None, except the first, which runs outside the section's time (it only stops with the visitor or the
        server), so that a section shows at least one run; the note says how many are shown."""
        keys = [canonical(d) for d in datas]
        if not keys:
            return [], None
        first_job = stopping.Job("this section's first run", alive=self.job.alive, parent=self.job.parent)
        with stopping.running(first_job):  # submitted first: it starts first
            first = parallel.pool().submit(contextvars.copy_context().run, stopping.in_job, first_job,
                                           lambda: summary(keys[0]))
        # ``summary`` looked up at each call, so that a test can slow it down.
        with stopping.running(self.job):
            rest = parallel.run_all(lambda key: summary(key), keys[1:], progress and (
                lambda done, total: progress(done + first.done(), len(keys))))
        results = [first.result(), *rest]
        shown = sum(r is not None for r in results)
        note = None if shown == len(keys) else \
            f"Only {shown} of {len(keys)} runs are shown: {self.job.reason()}; {self.ADVICE}."
        return results, note


def variant_datas(base: dict, variants: list[Variant]) -> list[dict]:
    """The scenario of each (overrides, tags) variant of ``base``."""
    return [apply_overrides(base, overrides) for overrides, _ in variants]


def _variants(base: dict, variants: list[Variant], text: str) -> tuple[pd.DataFrame, str | None]:
    """Flat metrics of each (overrides, tags) variant of ``base``: cached per run, run on all cores with a
    progress bar, within one ``SectionBudget``. Returns the frame and, when the budget cut the list short, why."""
    bar = st.progress(0.0, text=text)
    summaries, note = SectionBudget().summaries(
        variant_datas(base, variants), lambda done, total: bar.progress(done / total, text=f"{text} {done}/{total}"))
    bar.empty()
    return tagged_frame([(s, tags) for s, (_, tags) in zip(summaries, variants) if s is not None]), note


def compared(data: dict) -> dict:
    """What the policy comparison and the curves run: a replayed trace up to ``WHOLE_TRACE_MAX_REQUESTS`` (a cut would
    keep its calm start and lose its bursts), synthetic arrivals up to ``SWEEP_MAX_REQUESTS``: for a rate that moves,
    the busiest stretch of that many (``busiest_start_s``), not the curve's start."""
    if data["workload"].get("trace"):
        return capped(data, WHOLE_TRACE_MAX_REQUESTS)
    arrival = data["workload"].get("arrival") or {}
    if not (arrival.get("rate_curve") or arrival.get("shape")):
        return capped(data)  # a constant rate: every stretch alike, and no parse on the page's hot path
    start_s = busiest_start_s(validate(data))
    return capped(data if start_s is None else apply_overrides(data, {"workload.arrival.curve_start_s": start_s}))


def busiest_start_s(scenario: engine.Scenario) -> float | None:
    """Where in the scenario's moving rate the busiest ``SWEEP_MAX_REQUESTS`` requests begin (None: the rate does
    not move, or the run is no longer than that)."""
    workload = scenario.workload
    curve = workload.arrival.curve() if workload.arrival is not None else None
    if curve is None:
        return None
    start_s = workload.arrival.curve_start_s
    expected = (float(curve.cumulative(start_s + workload.duration_s) - curve.cumulative(start_s))
                if workload.duration_s is not None else math.inf)
    if min(workload.num_requests or math.inf, expected) <= SWEEP_MAX_REQUESTS:
        return None
    return round(curve.busiest_start_s(SWEEP_MAX_REQUESTS), 1)


def comparison_runs(data: dict, policies: list[str]) -> tuple[dict, list[Variant]]:
    """What ``policy_comparison`` runs: its base scenario and variants."""
    return compared(data), policy_variants(policies)


def policy_comparison(data: dict, policies: list[str]) -> tuple[pd.DataFrame, str | None]:
    """Every policy on the same arrivals (``compared``); and a note when the section's time ran out first."""
    return _variants(*comparison_runs(data, policies), "Running every policy...")


def sweep_runs(data: dict, rates: list[float], policies: list[str],
               trace_rate_per_s: float | None = None) -> tuple[dict, list[Variant]]:
    """What ``load_sweep`` runs: its base scenario and variants."""
    if trace_rate_per_s is None:
        return (apply_overrides(compared(data), {"workload.arrival.rate_per_s": 1.0}),
                rate_variants(rates, policies))
    return (compared(apply_overrides(data, {"workload.trace.rate_scale": 1.0})),
            trace_rate_variants(rates, policies, trace_rate_per_s))


def load_sweep(data: dict, rates: list[float], policies: list[str],
               trace_rate_per_s: float | None = None) -> tuple[pd.DataFrame, str | None]:
    """Flat metrics per (rate, policy), with a progress bar; and a note when the section's time ran out first.
    Synthetic arrivals: at most ``SWEEP_MAX_REQUESTS`` requests a point; a replayed trace (``trace_rate_per_s``: its
    arrival rate at speed-up 1) runs ``compared`` at the speed-up that gives each rate.

    A complete frame is kept in the session under a key without the current rate, so moving the rate
    only moves the marker; each point is also cached on its own (``summary``), so an incomplete sweep
    goes on where it stopped at the next rerun.
    """
    base, variants = sweep_runs(data, rates, policies, trace_rate_per_s)
    key = ("sweep", _cache_key(canonical(base)), tuple(rates), tuple(policies))
    if st.session_state.get("sweep_key") == key:
        return st.session_state["sweep_frame"], None
    frame, note = _variants(base, variants, "Sweeping the arrival rate...")
    if note is None:
        st.session_state["sweep_key"], st.session_state["sweep_frame"] = key, frame
    return frame, note


def alpha_gamma_map(data: dict, alphas: list[float], gammas: list[float]) -> tuple[pd.DataFrame, str | None]:
    """The dynamic policy over a grid of (alpha, gamma) at the current load, on ``SWEEP_MAX_REQUESTS`` requests (the
    busiest of a moving rate, a trace's first)."""
    base = capped(data) if data["workload"].get("trace") else compared(data)  # 16 runs: a trace's first requests
    return _variants(base, alpha_gamma_variants(alphas, gammas), "Mapping alpha and gamma...")
