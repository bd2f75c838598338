"""The top loop: the fleet's events in time order (arrivals, ends of KV transfers, replica decisions), the
queue bound, and the wall-clock deadline of one call.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..layout import F_ARRIVAL
from ..monotonic import monotonic_ns_nb
from .decision import decide_nb
from .handoff import hand_over_nb, next_handoff_nb
from .route import send_nb
from .state import (AT_PAUSE_TIME, CK_NEXT_S, C_ROLE, C_RUNNING, C_WAITING, DRAINED, HO_COUNT, O_END_S,
                    O_NEXT_ARRIVAL, O_PAUSE_AT_S, O_STOP_REASON, PAUSED, PREFILL_ROLE, QUEUE_BOUND,
                    SV_MAX_WAITING_REQUESTS)

# Events between two readings of the clock (one reading costs about as much as a cheap event).
CLOCK_EVERY_EVENTS = 16


@njit(cache=True, inline="always")
def _next_decision_nb(clock):
    """(replica, time) of the earliest decision (ties: the lowest replica); (-1, inf) when every replica is idle."""
    k = -1
    t_decide = np.inf
    for j in range(clock.shape[0]):
        if clock[j, CK_NEXT_S] < t_decide:
            t_decide = clock[j, CK_NEXT_S]
            k = j
    return k, t_decide


@njit(cache=True, inline="always")
def _over_queue_bound_nb(srv, cnt):
    """True when more requests wait in the fleet than the queue bound allows."""
    queued = 0
    for j in range(cnt.shape[0]):
        queued += cnt[j, C_WAITING]
    return queued > srv[SV_MAX_WAITING_REQUESTS]


@njit(cache=True, inline="always")
def _skip_bounds_nb(srv, cnt, clock, handoff, k, t_next_arrival, t_hand):
    """What replica ``k``'s decision needs to know of the fleet: the requests waiting elsewhere (for the queue
    bound), until when its event skipping may run, and whether the queue bound cannot be reached before then.

    Skipping stops at the next arrival or the next end of a KV transfer. A decode replica's queue grows only by
    transfers: those under way, and those a prefill replica may start at its next decision (each ends after it),
    so skipping stops at the earliest of these too. The requests in the fleet bound those that can wait before the
    next arrival."""
    queued_elsewhere = 0
    held = handoff[HO_COUNT]
    t_stop = min(t_next_arrival, t_hand)
    for j in range(cnt.shape[0]):
        held += cnt[j, C_WAITING] + cnt[j, C_RUNNING]
        if j != k:
            queued_elsewhere += cnt[j, C_WAITING]
            if cnt[j, C_ROLE] == PREFILL_ROLE:
                t_stop = min(t_stop, clock[j, CK_NEXT_S])
    return queued_elsewhere, t_stop, held <= srv[SV_MAX_WAITING_REQUESTS]


# Compiled without reference counting (``_nrt=False``): the loop allocates nothing (its scratch arrays
# come from ``work_arrays``), and every array it touches outlives the call, so the counting Numba would
# otherwise do around each inlined helper is pure overhead (about a third of the run time). The largest
# helpers (admission, scheduling, skipping, recording) are compiled the same way but not inlined: as fast,
# and the loop compiles in about two thirds of the time. ``nogil``:
# while one run is in the loop, other threads (other sessions of the app) keep the interpreter.
@njit(cache=True, _nrt=False, nogil=True)
def run_nb(srv, steps, policy, router, route, classes, ints, fl, ids, pc, series, stats, outcome, waiting, running,
           batch, cnt, clock, acc, cross, handoff, deadline_ns):
    """Simulate the fleet from where ``outcome`` says the last call stopped until the run ends or the
    monotonic clock (``time.monotonic_ns``) passes ``deadline_ns``; fills ``ints``/``fl``, and per replica
    (first axis of ``classes``, ``series``, ``stats`` and the scratch arrays) its time series (decimated)
    and statistics. The clock is read every ``CLOCK_EVERY_EVENTS`` events (arrivals and replica
    decisions, ends of KV transfers), so a call overruns its deadline by at most that many events, and always makes
    progress.

    ``outcome[O_STOP_REASON]`` is ``PAUSED`` when the deadline came first (call again to go on),
    ``AT_PAUSE_TIME`` when every event left comes after ``outcome[O_PAUSE_AT_S]`` (the autoscaler acts at that
    time, then calls again; no stretch of event skipping crosses it), else why the run ended. Start from
    ``work_arrays`` and ``start_outputs``. ``ids``: the run's prefix unit ids (dense);
    ``pc``: each replica's prefix cache (``PC_*``); ``steps``: each replica's step-time row (``steptime.ST_*``);
    ``route``: each replica's router row (``RT_*``, ``route_rows``); ``handoff``: the KV transfers under way
    (``HO_COUNT`` of them, from position 1), from prefill to decode replicas. Events at the same time: arrivals,
    then transfers ending, then decisions.
    """
    n = ints.shape[0]
    t_pause = outcome[O_PAUSE_AT_S]
    next_arrival = np.int64(outcome[O_NEXT_ARRIVAL])
    t = outcome[O_END_S]
    stop = PAUSED
    events = 0
    while True:
        if events % CLOCK_EVERY_EVENTS == 0 and events > 0 and monotonic_ns_nb() >= deadline_ns:
            break  # every call makes progress: the first reading comes after CLOCK_EVERY_EVENTS events
        events += 1
        k, t_decide = _next_decision_nb(clock)
        h, t_hand = next_handoff_nb(fl, handoff)
        t_arrival = fl[next_arrival, F_ARRIVAL] if next_arrival < n else np.inf
        t_next = min(t_arrival, t_decide, t_hand)
        if t_pause < t_next < np.inf:  # (nothing left: the run has drained, whatever the pause)
            stop = AT_PAUSE_TIME  # the clock stays at the last event: a run that drains next ends there
            break
        if next_arrival < n and t_arrival <= min(t_decide, t_hand):
            send_nb(srv, router, route, classes, ints, ids, pc, stats, waiting, running, cnt, clock, next_arrival,
                    t_arrival, False)
            next_arrival += 1
            if _over_queue_bound_nb(srv, cnt):
                t = max(t, t_arrival)
                stop = QUEUE_BOUND
                break
            continue
        if h >= 0 and t_hand <= t_decide:
            t = max(t, t_hand)
            hand_over_nb(srv, router, route, classes, ints, fl, ids, pc, stats, waiting, running, cnt, clock,
                         handoff, h, t_hand)
            if _over_queue_bound_nb(srv, cnt):
                stop = QUEUE_BOUND
                break
            continue
        if k < 0:
            stop = DRAINED
            break
        t = t_decide
        queued_elsewhere, t_stop, may_skip = _skip_bounds_nb(srv, cnt, clock, handoff, k, min(t_arrival, t_pause),
                                                             t_hand)
        reason = decide_nb(srv, steps[k], policy, classes[k], ints, fl, ids, pc[k], series[k], stats[k], waiting[k],
                           running[k], batch[k], cnt[k], clock[k], acc[k], cross[k], handoff, t, queued_elsewhere,
                           t_stop, may_skip)
        if reason != DRAINED:
            stop = reason
            break
    outcome[O_END_S] = t
    outcome[O_STOP_REASON] = stop
    outcome[O_NEXT_ARRIVAL] = next_arrival
