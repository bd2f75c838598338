"""Page runs take turns, first come first served, a few at a time.

Each session's script runs in its own thread, and most of a page's time is Python, which runs one thread at
a time (only the compiled loop runs beside it). When many sessions open pages at once, letting every run go
shares the interpreter among all of them, and every page finishes at about the time the last does (20
sessions opening the Lab on 2 cores: all twenty after about 15 s). Taking turns, ``slots`` at a time (one
per core, at least two, so that one run's Python overlaps another's compiled loop), the first pages come
back within a second or two and half of them in half that time; the total is the same. A waiting page says
how many pages are ahead of it, and stays responsive: its user's next change, or its user leaving, stops the wait
within ``POLL_S``. Its notice is repainted only when its place changed, and the notices of all waiting pages together
at most ``NOTICES_PER_S`` times a second: every repaint is a message the server's one event loop must send, and 200
waiting pages repainting twice a second each kept that loop from opening any new visitor's connection. A page that runs
a large scenario steps aside while the compiled loop runs it (``Turns.aside``), so that two such pages never
hold every turn for a minute.

A background job (a plan, a tuning: ``engine.sim.stopping``) runs outside the turns, and gives way to them: at each of
its checks it waits while pages run or wait for their turn (``give_way``, at most ``GIVE_WAY_S`` at a time), so
that a search of hours leaves a room's pages their interpreter, and goes on at full speed when they are done.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from contextlib import contextmanager
from typing import Callable, Iterator

import streamlit as st

from engine.sim import stopping
from engine.sim.parallel import cores

POLL_S = 0.5  # how often a waiting run looks at its place (and lets Streamlit stop it)
NOTICE_EVERY_S = 2.0  # the shortest time between two repaints of one waiting page's notice
NOTICES_PER_S = 20.0  # the most repaints of waiting pages' notices a second, all pages together
STOP_POINT_KEY = "_turns_stop_point"  # a session-state key never set: reading it is where Streamlit may stop a page
GIVE_WAY_S = 0.5  # the longest a background job waits at one check while pages are busy


class Turns:
    """First come, first served admission of at most ``slots`` runs at a time."""

    def __init__(self, slots: int):
        self.slots = slots
        self._cond = threading.Condition()
        self._queue: deque[object] = deque()
        self._running = 0
        self._held = threading.local()  # whether the current thread holds a turn

    def run(self, body: Callable[[], None], waiting: Callable[[int], None]) -> None:
        """Run ``body`` once admitted; until then call ``waiting(pages_ahead)`` at once and every ``POLL_S`` (it may
        raise to give up the place: Streamlit stops a script that way when its user changes something)."""
        self._admit(waiting, first=False)
        self._held.turn = True
        try:
            body()
        finally:
            if self._held.turn:  # not when the page was stopped while waiting to take its turn back
                self._held.turn = False
                self._leave()

    @contextmanager
    def aside(self, waiting: Callable[[int], None]) -> Iterator[None]:
        """Give the current turn to the next page while the block runs (a long run in the compiled loop, or a
        wait for one, needs no interpreter), then take it back first in the queue. Outside a turn: nothing."""
        if not getattr(self._held, "turn", False):
            yield
            return
        self._held.turn = False
        self._leave()
        try:
            yield
        finally:
            self._admit(waiting, first=True)
            self._held.turn = True

    def waiting(self) -> int:
        """Pages waiting for a turn now."""
        with self._cond:
            return len(self._queue)

    def busy(self) -> bool:
        """True while a page runs in its turn or waits for one."""
        with self._cond:
            return self._running > 0 or bool(self._queue)

    def wait_idle(self, timeout_s: float) -> None:
        """Return once no page runs or waits (``busy`` is False), or after ``timeout_s``: woken when the last turn
        is left, not by polling."""
        with self._cond:
            self._cond.wait_for(lambda: not self.busy(), timeout_s)

    def _leave(self) -> None:
        with self._cond:
            self._running -= 1
            self._cond.notify_all()

    def _admit(self, waiting: Callable[[int], None], first: bool) -> None:
        """Wait in the queue (at its end, or ``first``) until admitted; say so at once when it must wait."""
        ticket = object()
        with self._cond:
            (self._queue.appendleft if first else self._queue.append)(ticket)
        admitted, told = False, False
        try:
            while True:
                with self._cond:
                    ahead = self._queue.index(ticket) + self._running
                    if self._queue[0] is ticket and self._running < self.slots:
                        self._queue.popleft()
                        self._running += 1
                        admitted = True
                        break
                    if told:
                        self._cond.wait(POLL_S)
                told = True
                waiting(ahead - self.slots + 1)
        finally:
            if not admitted:
                with self._cond:
                    self._queue.remove(ticket)
                    self._cond.notify_all()


PAGES = Turns(max(2, cores()))


def give_way() -> None:
    """Wait while pages are busy, at most ``GIVE_WAY_S``: a background job's check."""
    PAGES.wait_idle(GIVE_WAY_S)


stopping.set_give_way(give_way)


def in_turn(body: Callable[[], None]) -> None:
    """Run a page (``body``) in its turn; meanwhile the page says how many are ahead."""
    notice = st.empty()

    def admitted() -> None:
        notice.empty()
        body()

    PAGES.run(admitted, waiting_notice(notice))


@contextmanager
def stepping_aside() -> Iterator[None]:
    """``PAGES.aside`` for the current page, which says where it waits while it takes its turn back."""
    place = st.empty()
    with PAGES.aside(waiting_notice(place)):
        yield
    place.empty()


def notice_gap_s(waiting_pages: int) -> float:
    """The shortest time between two repaints of one waiting page's notice while ``waiting_pages`` wait: at least
    ``NOTICE_EVERY_S``, longer when so many wait that their repaints together would pass ``NOTICES_PER_S``."""
    return max(NOTICE_EVERY_S, waiting_pages / NOTICES_PER_S)


def stop_point() -> None:
    """Let Streamlit stop (its user left) or rerun (its user changed something) this page's script here, sending
    nothing: reading session state is one of the places where its script runner does so."""
    st.session_state.get(STOP_POINT_KEY)


def waiting_notice(place, clock: Callable[[], float] = time.monotonic) -> Callable[[int], None]:
    """What a waiting page shows in ``place`` (an ``st.empty``) while ``ahead`` pages go first: repainted when its
    place changed and ``notice_gap_s`` has passed since the last repaint; in between, only a ``stop_point``."""
    shown = {"ahead": None, "at_s": -math.inf}

    def waiting(ahead: int) -> None:
        now_s = clock()
        if ahead == shown["ahead"] or now_s - shown["at_s"] < notice_gap_s(PAGES.waiting()):
            stop_point()
            return
        shown.update(ahead=ahead, at_s=now_s)
        place.info(f"This server is busy: {ahead} page{'s' if ahead != 1 else ''} ahead of this one, then it runs. "
                   "Your changes are kept.", icon=":material/hourglass_top:")
    return waiting
