"""Long work stops when it should (``engine.sim.stopping``): a job's time limit, its caller leaving or interrupted, the
process stopping. Runs under way stop within a slice of the compiled loop on every core; the planner and the tuner
give what they found before their time ran out, and say so."""

from __future__ import annotations

import contextlib
import dataclasses
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import engine
from conftest import REPO, SCENARIOS
from engine.decide.plan_text import plan_text
from engine.decide.planner import Question, plan
from engine.decide.targets import Target
from engine.decide.tune_text import tune_text
from engine.decide.tuner import Objective, TuneQuestion, tune
from engine.scenario.caps import DEFAULT_CAPS
from engine.scenario.config import apply_overrides, read_toml
from engine.scenario.origin import Origin
from engine.sim import parallel, stopping

PROMPT_S = 2.0  # a stop is noticed within a slice (0.05 s); this allows for a busy machine


def slow_data(requests: int = 200_000) -> dict:
    """An overloaded server deciding over a long waiting queue: tens of seconds of compiled loop."""
    return {"workload": {"num_requests": requests, "arrival": {"process": "poisson", "rate_per_s": 400.0},
                         "classes": [{"name": "a", "share": 1.0, "prompt_tokens": {"dist": "constant", "value": 8},
                                      "output_tokens": {"dist": "constant", "value": 4}}]},
            "server": {"step_model": "fixed", "step_time_ms": 10.0, "max_batch_size": 1},
            "limits": {"max_waiting_requests": 100_000, "max_drain_s": 86_400.0}}


@pytest.fixture(scope="module", autouse=True)
def compiled():
    engine.simulate(engine.load_scenario(slow_data(100)))


def pool_is_free() -> float:
    """Seconds a trivial task waits for a thread of the pool (long if stopped runs still hold them)."""
    started = time.monotonic()
    assert parallel.run_all(lambda x: x, list(range(parallel.cores()))) == list(range(parallel.cores()))
    return time.monotonic() - started


def test_a_run_stops_within_a_slice_when_its_jobs_time_runs_out():
    started = time.monotonic()
    with pytest.raises(stopping.Stopped, match=r"the check's time limit of 0.5 s \(plan_s\) ran out") as caught:
        with stopping.job("the check", 0.5, "plan_s"):
            engine.simulate(engine.load_scenario(slow_data()))
    assert time.monotonic() - started < 0.5 + PROMPT_S and caught.value.timed_out


def test_a_cancelled_job_stops_its_runs_on_every_core():
    outcome = {}

    def caller():
        with stopping.job("the search") as job:
            outcome["job"] = job
            outcome["results"] = parallel.run_all(lambda d: engine.simulate(engine.load_scenario(d)),
                                                  [slow_data()] * 4)

    thread = threading.Thread(target=caller)
    thread.start()
    time.sleep(1.0)
    cancelled = time.monotonic()
    outcome["job"].cancel("the page that asked for it was closed")
    thread.join(timeout=30)
    assert time.monotonic() - cancelled < PROMPT_S and outcome["results"] == [None] * 4
    assert pool_is_free() < PROMPT_S


def test_runs_stop_when_their_callers_session_is_gone():
    leaves_at = time.monotonic() + 0.5
    started = time.monotonic()
    with stopping.job("the plan", alive=lambda: time.monotonic() < leaves_at):
        results = parallel.run_all(lambda d: engine.simulate(engine.load_scenario(d)), [slow_data()] * 2)
        with pytest.raises(stopping.Stopped, match="the page that asked for it was closed") as caught:
            stopping.check()
    assert results == [None, None] and not caught.value.timed_out
    assert time.monotonic() - started < 0.5 + PROMPT_S and pool_is_free() < PROMPT_S


class Interrupted(BaseException):
    """What Streamlit raises in a page's thread when its visitor changes something (a ``BaseException``)."""


def test_an_interrupted_caller_stops_the_runs_it_started():
    started = time.monotonic()

    def progress(done: int, total: int) -> None:
        if time.monotonic() - started > 0.5:
            raise Interrupted

    with pytest.raises(Interrupted):
        parallel.run_all(lambda d: engine.simulate(engine.load_scenario(d)), [slow_data()] * 4, progress)
    assert time.monotonic() - started < 0.5 + PROMPT_S
    assert pool_is_free() < PROMPT_S, "the runs under way stopped too"


def test_summaries_of_a_stopped_job_raise_instead_of_leaving_holes():
    with stopping.job("the tuning", 0.3, "tune_s"):
        with pytest.raises(stopping.Stopped, match="the tuning's time limit"):
            parallel.summaries([slow_data()] * 3)


def test_a_nested_job_ends_with_its_parent():
    with stopping.job("the plan", 0.2, "plan_s"):
        with stopping.job("the tuning", 100.0, "tune_s") as inner:
            time.sleep(0.3)
            assert inner.left_s() < 0 and inner.timed_out()
            with pytest.raises(stopping.Stopped, match="the plan's time limit of 0.2 s"):
                inner.check()


ARTICLE = read_toml(SCENARIOS / "article_mixed_8xa100.toml")


def test_the_plan_stops_at_its_time_limit_and_says_what_was_cut():
    """Ten policies on two GPUs would take minutes; with one second the configurations sized by then are the
    answer, the others are listed as not sized, and the text says it was cut."""
    caps = dataclasses.replace(DEFAULT_CAPS, plan_s=1.0)
    question = Question((Target("interactive", "ttft_p99_ms", 1000.0),), gpus=("A100-80G", "H100-80G"),
                        policies=("fifo", "priority", "sjf", "srpt", "edf", "wfq", "dynamic"), seeds=3,
                        requests=3000)
    started = time.monotonic()
    answer = plan(ARTICLE, question, Origin(caps=caps))
    assert time.monotonic() - started < 1.0 + 15.0
    cut = "the plan's time limit of 1 s (plan_s) ran out"
    assert answer["run"]["cut"] == cut
    assert any(n["note"] == f"not sized: {cut}" for n in answer["not_possible"])
    assert answer["mix"] is None and answer["mix_note"] == f"No mixed fleet was searched: {cut}."
    text = plan_text(answer, "Plan")
    assert f"CUT: Cut short: {cut}; the answer covers only the configurations sized" in text.replace("\n  ", " ")


def test_a_plan_within_its_time_is_not_cut():
    question = Question((Target("interactive", "ttft_p99_ms", 1000.0),), gpus=("H100-80G",), seeds=2,
                        requests=300)
    answer = plan(apply_overrides(ARTICLE, {"workload.arrival.rate_per_s": 5.0}), question)
    assert answer["run"]["cut"] is None and answer["recommendation"] is not None
    assert "CUT" not in plan_text(answer, "Plan")


def test_the_tuning_stops_at_its_time_limit_with_the_best_so_far():
    caps = dataclasses.replace(DEFAULT_CAPS, tune_s=1.0)
    question = TuneQuestion(Objective("interactive", "ttft_p99_ms"), candidates=5000, seeds=2, requests=3000)
    started = time.monotonic()
    answer = tune(ARTICLE, question, Origin(caps=caps))
    assert time.monotonic() - started < 1.0 + 15.0
    assert answer["cut"] == "the tuning's time limit of 1 s (tune_s) ran out"
    assert 1 <= answer["evaluations"] < 5000 and answer["best"] is not None
    assert "Cut short: the tuning's time limit of 1 s (tune_s) ran out, after" in tune_text(answer, "article")


def test_a_stopping_process_stops_every_run_and_every_new_one():
    """In its own process (the mark cannot be undone): runs under way and runs asked for after both stop."""
    script = textwrap.dedent(f"""
        import sys, threading, time
        sys.path.insert(0, {str(REPO / 'tests')!r})
        import engine
        from engine.sim import stopping
        from test_stopping import slow_data
        engine.simulate(engine.load_scenario(slow_data(100)))
        errors = []
        def run():
            try:
                engine.simulate(engine.load_scenario(slow_data()))
            except stopping.Stopped as exc:
                errors.append(str(exc))
        thread = threading.Thread(target=run)
        thread.start()
        time.sleep(1.0)
        stopped = time.monotonic()
        stopping.stop_everything()
        thread.join()
        print(round(time.monotonic() - stopped, 3), errors)
        try:
            engine.simulate(engine.load_scenario(slow_data(100)))
        except stopping.Stopped as exc:
            print("after:", exc)
    """)
    out = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    first, after = out.stdout.strip().splitlines()
    seconds, errors = first.split(" ", 1)
    assert float(seconds) < PROMPT_S and errors == "['the server is stopping']"
    assert after == "after: the server is stopping"


def test_a_background_jobs_runs_go_to_their_own_pool_and_give_way_first(monkeypatch):
    """A plan's or a tuning's runs queue in the background pool, and each of their checks first gives way (the app
    waits there while pages are busy); other jobs do neither."""
    waits = []
    monkeypatch.setattr(stopping, "_give_way", lambda: waits.append(threading.current_thread().name))
    with stopping.job("the plan", background=True):
        names = parallel.run_all(lambda _: threading.current_thread().name, [1, 2])
        stopping.check()
    assert all(n.startswith("background") for n in names) and len(waits) == 3  # each run, and the check
    waits.clear()
    with stopping.job("this section"):
        names = parallel.run_all(lambda _: threading.current_thread().name, [1, 2])
        stopping.check()
    assert not any(n.startswith("background") for n in names) and waits == []


def test_pages_give_way_only_while_they_are_busy(monkeypatch):
    from ui import turns

    monkeypatch.setattr(turns, "GIVE_WAY_S", 0.3)
    started = time.monotonic()
    turns.give_way()
    assert time.monotonic() - started < 0.1, "no page is busy: no wait"
    monkeypatch.setattr(turns.PAGES, "busy", lambda: True)
    started = time.monotonic()
    turns.give_way()
    assert 0.3 <= time.monotonic() - started < 1.0, "busy pages: a wait of at most GIVE_WAY_S"


def test_a_page_outside_a_running_server_neither_watches_it_nor_asks_for_its_session():
    """Under AppTest, Streamlit's runtime is a stand-in: no watcher thread (it would wait on a state that never
    comes) and no session test (its answers mean nothing)."""
    from streamlit.testing.v1 import AppTest

    from ui import jobs

    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=180).run()
    assert not at.exception
    assert "stop-watcher" not in [t.name for t in threading.enumerate()]
    assert jobs.session_alive() is None


def test_growths_the_plans_time_did_not_reach_are_noted_and_the_text_says_what_was_cut():
    """The plan's time may run out after every configuration was sized: the growth searches then say they were
    not sized, and the text does not claim configurations were left out."""
    from engine.decide.plan_text import cut_text
    from engine.decide.planner import Search, sensitivity

    data = apply_overrides(ARTICLE, {"workload.arrival.rate_per_s": 5.0})
    question = Question((Target("interactive", "ttft_p99_ms", 1000.0),), gpus=("H100-80G",), seeds=2, requests=300)
    answer = plan(data, question)
    with stopping.job("the plan", 0.0, "plan_s"):
        time.sleep(0.01)
        grown = sensitivity(Search(data, question, Origin()), answer["recommendation"])
    assert [g["note"] for g in grown] == ["not sized: the plan's time limit of 0 s (plan_s) ran out"] * 2
    cut = {**answer, "run": {**answer["run"], "cut": "the plan's time limit of 0 s (plan_s) ran out"}}
    assert "every configuration was sized, but the searches after it" in cut_text(cut)


# --------------------------------------------------------------------------- the app's sections


def test_a_sections_search_stops_with_its_interrupted_caller():
    """A search of its own inside a section (fleet shapes, the cheapest rental) runs through ``budget.summary`` in
    the section's job: interrupting the page stops its runs too."""
    from ui import runner

    started = time.monotonic()

    def progress(done: int, total: int) -> None:
        if time.monotonic() - started > 0.5:
            raise Interrupted

    with pytest.raises(Interrupted), runner.SectionBudget(100.0) as budget:
        parallel.run_all(budget.summary, [dict(slow_data(), seed=s) for s in (101, 102)], progress)
    assert pool_is_free() < PROMPT_S


def test_a_cheapest_rental_search_whose_time_ran_out_says_so_for_each_gpu():
    from engine.decide.cost import BILLING_MODES
    from engine.decide.sizing import cheapest_fleets
    from ui import runner

    data = apply_overrides(ARTICLE, {"workload.num_requests": 300})
    with runner.SectionBudget(0.0) as budget:
        frame = cheapest_fleets(data, Target("interactive", "ttft_p99_ms", 1000.0), BILLING_MODES[0], "USD", 7.2,
                                4, run=budget.summary)
    assert len(frame) > 0 and set(frame["note"]) == {"not searched: this section's time limit of 0 s (section_s) "
                                                     "ran out"}


def test_a_sections_first_run_goes_on_past_the_sections_time_and_is_not_run_twice():
    """The first run of a section is always shown: it runs outside the section's time, so when the time runs out
    it is not stopped and started again (the section takes about one run's time, not two)."""
    from ui import runner

    datas = [dict(slow_data(15_000), seed=s) for s in (202, 203, 204)]
    alone_started = time.monotonic()
    engine.simulate(engine.load_scenario(datas[0]))  # not through the app's cache: the section runs it again
    alone_s = time.monotonic() - alone_started
    started = time.monotonic()
    results, note = runner.SectionBudget(0.6 * alone_s).summaries(datas)
    assert results[0] is not None and results[1:] == [None, None] and note.startswith("Only 1 of 3 runs are shown")
    assert time.monotonic() - started < 1.3 * alone_s + 0.5, (alone_s, time.monotonic() - started)  # not 1.6x


def test_runs_a_page_started_ahead_stop_when_the_page_run_ends():
    """``runner.run_ahead`` returns at once; the runs it started belong to the page run (``jobs.page_run``): when
    the run ends before they are done (the visitor changed something), they stop within a slice, are not kept, and
    free the pool; a run that is not stopped is kept for the section that asks for it."""
    from ui import jobs, runner

    stale = [dict(slow_data(), seed=s) for s in (301, 302)]
    started = time.monotonic()
    with jobs.page_run() as page:
        runner.run_ahead(stale)
        assert time.monotonic() - started < 0.5, "started, not waited for"
        time.sleep(0.5)
        assert all(runner._SUMMARIES.known(runner._cache_key(runner.canonical(d))) for d in stale), "under way"
    ended = time.monotonic()
    assert page.reason() == "the page changed before it was done"
    while any(runner._SUMMARIES.known(runner._cache_key(runner.canonical(d))) for d in stale):
        assert time.monotonic() - ended < PROMPT_S, "the runs started ahead go on after the page run ended"
        time.sleep(0.01)
    assert pool_is_free() < PROMPT_S
    quick = dict(slow_data(300), seed=303)
    with jobs.page_run():
        runner.run_ahead([quick])
        assert runner.summary(runner.canonical(quick))["run"]["requests"] == 300
    assert runner._SUMMARIES.get(runner._cache_key(runner.canonical(quick))) is not None


def test_a_run_started_ahead_does_not_hold_a_pool_thread_waiting_for_the_same_run_under_way():
    """Sessions making the same change at once start the same runs ahead: a pool thread given one that another
    thread is computing returns at once instead of waiting for it (a core held idle)."""
    from ui import jobs, runner

    scenario_json = runner.canonical(dict(slow_data(), seed=311))

    def compute(page):
        with contextlib.suppress(stopping.Stopped):
            stopping.in_job(page, runner.summary, scenario_json)

    with jobs.page_run() as page:
        computing = threading.Thread(target=compute, args=(page,))
        computing.start()
        while not runner._SUMMARIES.known(runner._cache_key(scenario_json)):
            time.sleep(0.01)
        for _ in range(parallel.cores()):
            parallel.pool().submit(runner._start_ahead, scenario_json)
        assert pool_is_free() < PROMPT_S, "pool threads wait for a run another thread computes"
    computing.join(timeout=PROMPT_S)
    assert not computing.is_alive()
