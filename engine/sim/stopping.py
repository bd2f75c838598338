"""Long work that stops when it should: a job's wall-clock budget, its caller gone, the process stopping.

A planner, a tuner or a page section may run hundreds of simulations on every core. Each runs inside a ``Job``
(``job(...)``): a wall-clock budget with the limit's name, an optional ``alive`` test (the app's: is the visitor's
session still connected?) and a cancel flag. The job is a context variable, so the pooled threads that
``parallel.run_all`` starts for it carry it too. Every simulation checks it between slices of the compiled loop
(``simulate``), and every pooled task before it starts, so a job stops within a slice (tens of milliseconds) of
its end, on every core at once. ``stop_everything`` marks the whole process as stopping (the app's server on
SIGTERM): every job, and every check outside any job, then raises ``Stopped``.

A job may run in the background (the planner, the tuner): its runs go to a pool of their own (``parallel.pool``),
and at each check they first give way (``set_give_way``: the app waits while pages wait for their turn, up to a
bound), so that a search of hours on every core leaves the pages of a room their interpreter.

``Stopped`` is a ``ScenarioError``: code that records a failed run as a reason (the planner's "not possible"
lines) records the cut the same way, and a page shows it as one line.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
import time
from typing import Callable, Iterator, Optional

from ..scenario.errors import ScenarioError

ALIVE_EVERY_S = 0.2  # how often a job asks its ``alive`` test (it may take a lock of the app's server)

_stopping = threading.Event()
_give_way: Callable[[], None] | None = None


class Stopped(ScenarioError):
    """A job's time is used up (``timed_out``: what it found so far may be shown, marked as cut), its caller has
    gone, or the process is stopping."""

    def __init__(self, reason: str, timed_out: bool = False):
        super().__init__(reason)
        self.timed_out = timed_out


def stop_everything() -> None:
    """Mark the process as stopping: every check from now on raises ``Stopped``."""
    _stopping.set()


def set_give_way(wait: Callable[[], None] | None) -> None:
    """What a background job's check does first: ``wait()`` returns when more urgent work has had its turn (the
    app's pages), within a bound of its own; None: nothing."""
    global _give_way
    _give_way = wait


class Job:
    """One stoppable piece of work: ``what`` it is in words ("the plan"), its budget (``seconds``, the safety limit
    ``limit_name``; None: no budget of its own), the enclosing job (``parent``), ``alive``: a test that the work
    is still wanted (None: always), and whether it runs in the background (a parent's does too)."""

    def __init__(self, what: str, seconds: float | None = None, limit_name: str = "",
                 alive: Callable[[], bool] | None = None, parent: Optional["Job"] = None, background: bool = False):
        self.what, self.seconds, self.limit_name, self.alive, self.parent = what, seconds, limit_name, alive, parent
        self.background = background or (parent is not None and parent.background)
        self.started = time.monotonic()
        self._cancelled: str | None = None
        self._alive_checked = self.started
        self._lock = threading.Lock()

    def left_s(self) -> float:
        """Seconds of its budget (and its parents') left; infinity without one."""
        own = float("inf") if self.seconds is None else self.seconds - (time.monotonic() - self.started)
        return min(own, self.parent.left_s()) if self.parent is not None else own

    def cancel(self, why: str) -> None:
        """Stop the job (and its children) at their next check, saying ``why``."""
        with self._lock:
            self._cancelled = self._cancelled or why

    def reason(self) -> str | None:
        """Why the job must stop now (the first reason that holds), or None while it may go on."""
        if _stopping.is_set():
            return "the server is stopping"
        if self._cancelled:
            return self._cancelled
        if self.seconds is not None and time.monotonic() - self.started > self.seconds:
            limit = f" ({self.limit_name})" if self.limit_name else ""
            return f"{self.what}'s time limit of {self.seconds:g} s{limit} ran out"
        if self.alive is not None and time.monotonic() - self._alive_checked >= ALIVE_EVERY_S:
            self._alive_checked = time.monotonic()
            if not self.alive():
                self.cancel("the page that asked for it was closed")
                return self._cancelled
        return self.parent.reason() if self.parent is not None else None

    def timed_out(self) -> bool:
        """True when its own or a parent's budget has run out."""
        return self.left_s() <= 0

    def check(self) -> None:
        """Raise ``Stopped`` when the job must stop."""
        reason = self.reason()
        if reason is not None:
            raise Stopped(reason, timed_out=self.timed_out() and not _stopping.is_set() and not self._gone())

    def _gone(self) -> bool:
        """True when this job or a parent was cancelled."""
        return bool(self._cancelled) or (self.parent is not None and self.parent._gone())


_current: contextvars.ContextVar[Optional[Job]] = contextvars.ContextVar("job", default=None)


def current() -> Optional[Job]:
    """The job this code runs in (None: none)."""
    return _current.get()


def check() -> None:
    """Raise ``Stopped`` when the current job must stop, or the process is stopping (also outside any job); in a
    background job, give way first (``set_give_way``)."""
    job = _current.get()
    if job is not None:
        job.check()
        if job.background and _give_way is not None:
            _give_way()
            job.check()  # it may have ended meanwhile
    elif _stopping.is_set():
        raise Stopped("the server is stopping")


@contextlib.contextmanager
def job(what: str, seconds: float | None = None, limit_name: str = "", alive: Callable[[], bool] | None = None,
        background: bool = False) -> Iterator[Job]:
    """Run the block as a job inside the current one (its budget the smaller of the two)."""
    inner = Job(what, seconds, limit_name, alive, parent=_current.get(), background=background)
    token = _current.set(inner)
    try:
        yield inner
    finally:
        _current.reset(token)


@contextlib.contextmanager
def running(inner: Job) -> Iterator[Job]:
    """Run the block in ``inner``, a job made earlier (a pooled thread's task carries the job of the caller that
    made it)."""
    token = _current.set(inner)
    try:
        yield inner
    finally:
        _current.reset(token)


def in_job(inner: Job, fn: Callable, *args):
    """``fn(*args)`` run in ``inner`` after checking that it may start."""
    with running(inner):
        check()
        return fn(*args)


def cut_short(exc: Stopped) -> str:
    """Why ``exc`` stopped the work, when its time ran out (what it found may be shown, marked cut); ``exc`` raised
    again otherwise (its caller has gone or the process is stopping: nobody waits for an answer)."""
    if not exc.timed_out:
        raise exc
    return str(exc)


def cut_reason() -> str | None:
    """None while the current job may go on; why it was cut short when its time ran out (``cut_short``)."""
    job = _current.get()
    try:
        if job is not None:
            job.check()  # not ``check``: a question, so no giving way
        else:
            check()
    except Stopped as exc:
        return cut_short(exc)
    return None


def in_background() -> bool:
    """True inside a background job."""
    job = _current.get()
    return job is not None and job.background
