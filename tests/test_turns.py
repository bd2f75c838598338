"""Page runs take turns (ui.turns): first come first served, at most ``slots`` at a time, and a run that gives
up its place while waiting (its user changed something) does not hold up the others."""

import threading
import time

import pytest

from ui import turns
from ui.turns import Turns


def start(pages: Turns, name: str, order: list, release: threading.Event, ahead: list | None = None,
          give_up: bool = False, slow_s: float = 0.0) -> threading.Thread:
    """A page run in its own thread: records when its body starts, then holds its turn until ``release``."""
    def body():
        order.append(name)
        release.wait(10)

    def waiting(n: int):
        if ahead is not None:
            ahead.append(n)
        time.sleep(slow_s)  # a page slow to say it waits: the one behind it must still not overtake it
        if give_up:
            raise KeyboardInterrupt  # what Streamlit's stop looks like to this code: not an Exception

    def run():
        try:
            pages.run(body, waiting)
        except KeyboardInterrupt:
            order.append(f"{name} gave up")

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def until(condition, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


@pytest.fixture(autouse=True)
def fast_polls(monkeypatch):
    monkeypatch.setattr(turns, "POLL_S", 0.02)


def test_runs_wait_their_turn_first_come_first_served():
    pages, order = Turns(1), []
    first, second, third = threading.Event(), threading.Event(), threading.Event()
    ahead_b, ahead_c = [], []
    threads = [start(pages, "a", order, first)]
    until(lambda: order == ["a"])
    threads.append(start(pages, "b", order, second, ahead_b, slow_s=0.3))
    until(lambda: ahead_b)
    threads.append(start(pages, "c", order, third, ahead_c))
    until(lambda: ahead_c)
    time.sleep(0.1)
    assert order == ["a"] and ahead_b[-1] == 1 and ahead_c[-1] == 2
    first.set()
    until(lambda: order == ["a", "b"])
    time.sleep(0.1)
    assert order == ["a", "b"], "c waits until b is done"
    second.set()
    third.set()
    for thread in threads:
        thread.join(10)
    assert order == ["a", "b", "c"]


def test_as_many_runs_as_slots_go_at_once():
    pages, order, release = Turns(2), [], threading.Event()
    threads = [start(pages, name, order, release) for name in "ab"]
    until(lambda: sorted(order) == ["a", "b"])
    waiting = []
    threads.append(start(pages, "c", order, release, waiting))
    until(lambda: waiting)
    assert "c" not in order and waiting[-1] == 1
    release.set()
    for thread in threads:
        thread.join(10)
    assert sorted(order) == ["a", "b", "c"]


def test_a_run_that_gives_up_waiting_frees_its_place():
    pages, order = Turns(1), []
    first, second = threading.Event(), threading.Event()
    threads = [start(pages, "a", order, first)]
    until(lambda: order == ["a"])
    threads.append(start(pages, "b", order, second, give_up=True))
    until(lambda: "b gave up" in order)
    waiting = []
    threads.append(start(pages, "c", order, second, waiting))
    until(lambda: waiting)
    assert waiting[-1] == 1, "the place b gave up is not counted"
    first.set()
    second.set()
    for thread in threads:
        thread.join(10)
    assert order == ["a", "b gave up", "c"]


def test_a_run_that_fails_gives_its_turn_back():
    pages = Turns(1)

    def fails():
        raise ValueError("page failed")

    with pytest.raises(ValueError):
        pages.run(fails, lambda n: None)
    done = []
    pages.run(lambda: done.append(True), lambda n: pytest.fail("nothing was running"))
    assert done == [True]


def test_a_page_that_steps_aside_lets_the_next_one_run_and_then_goes_first():
    pages, order = Turns(1), []
    inside, back, later_release = threading.Event(), threading.Event(), threading.Event()

    def long_page():
        order.append("long starts")
        with pages.aside(lambda n: None):
            inside.set()
            back.wait(10)  # the large run, in the compiled loop
        order.append("long resumes")

    long_thread = threading.Thread(target=lambda: pages.run(long_page, lambda n: None))
    long_thread.start()
    until(inside.is_set)
    threads = [start(pages, "b", order, later_release)]
    until(lambda: "b" in order)  # b runs while the long page is aside
    waiting_c = []
    threads.append(start(pages, "c", order, later_release, waiting_c))
    until(lambda: waiting_c)
    back.set()  # the long run ends while b runs and c waits
    time.sleep(0.1)
    assert order == ["long starts", "b"], "the long page waits for b, and c waits too"
    later_release.set()
    for thread in [long_thread, *threads]:
        thread.join(10)
    assert order == ["long starts", "b", "long resumes", "c"], "the long page takes its turn back before c"


def test_stepping_aside_outside_a_turn_changes_nothing():
    pages = Turns(1)
    with pages.aside(lambda n: pytest.fail("not in a turn: nothing to wait for")):
        pass
    done = []
    pages.run(lambda: done.append(True), lambda n: pytest.fail("nothing was running"))
    assert done == [True]


def test_a_page_stopped_while_taking_its_turn_back_holds_no_turn():
    pages, order, release, others = Turns(1), [], threading.Event(), []

    def stopped_page():
        with pages.aside(lambda n: (_ for _ in ()).throw(KeyboardInterrupt)):
            others.append(start(pages, "b", order, release))
            until(lambda: "b" in order)  # b holds the turn: taking it back means waiting, and the user stops that

    with pytest.raises(KeyboardInterrupt):
        pages.run(stopped_page, lambda n: None)
    release.set()
    others[0].join(10)
    assert pages._running == 0, "the stopped page gave back no turn it did not hold"
    done = []
    pages.run(lambda: done.append(True), lambda n: pytest.fail("nothing was running"))
    assert done == [True]


class Place:
    """An ``st.empty`` that records each notice it is given."""

    def __init__(self):
        self.notices = []

    def info(self, text: str, icon: str = "") -> None:
        self.notices.append(text)


def test_a_waiting_page_repaints_its_notice_only_when_its_place_changed_and_not_too_often(monkeypatch):
    stops, now = [], [0.0]
    monkeypatch.setattr(turns, "stop_point", lambda: stops.append(now[0]))
    monkeypatch.setattr(turns.PAGES, "waiting", lambda: 3)  # few pages wait: NOTICE_EVERY_S apart
    place = Place()
    waiting = turns.waiting_notice(place, clock=lambda: now[0])
    for t, ahead in ((0.0, 5), (0.5, 5), (1.0, 4), (2.5, 4), (3.0, 3), (3.5, 2), (5.5, 2)):
        now[0] = t
        waiting(ahead)
    assert [n.split(":")[1].split(" ahead")[0].strip() for n in place.notices] == ["5 pages", "4 pages", "2 pages"]
    assert stops == [0.5, 1.0, 3.0, 3.5], "between repaints each look at the place is a stop point, sending nothing"


def test_many_waiting_pages_repaint_at_most_notices_per_s_together():
    assert turns.notice_gap_s(10) == turns.NOTICE_EVERY_S
    assert turns.notice_gap_s(200) == 200 / turns.NOTICES_PER_S  # 200 pages: each every 10 s, 20 a second in all


def test_the_stop_point_is_where_streamlit_stops_a_waiting_page(monkeypatch):
    """The stop point reads the session state, where Streamlit's script runner raises its stop or rerun (the
    session's yield callback); tests/test_burst.py sees waiting pages leave with their visitors on a real server."""
    from streamlit.runtime.state import SafeSessionState, SessionState, session_state_proxy

    def yield_callback():
        raise KeyboardInterrupt  # as Streamlit's StopException: not an Exception
    state = SafeSessionState(SessionState(), yield_callback=yield_callback)
    monkeypatch.setattr(session_state_proxy, "get_session_state", lambda: state)
    with pytest.raises(KeyboardInterrupt):
        turns.stop_point()
