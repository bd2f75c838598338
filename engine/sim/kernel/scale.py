"""Replicas that come and go (an autoscaler, spot interruptions): a replica taken away re-queues every request it
holds on the replicas that take requests, their KV dropped and recomputed there: none is lost.

Which replicas take requests (``C_ACCEPTS``) and when one goes is decided outside the loop (``sim.autoscale``),
between calls of ``run_nb`` that stop at a simulated time (``O_PAUSE_AT_S``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..layout import I_CHUNK, I_CLASS, I_PREEMPTIONS, I_STATE, K_ACTIVE, WAITING
from .kv import drop_kv_nb
from .route import send_nb
from .state import (CK_MODE, CK_NEXT_S, CK_WAIT_START_S, C_ACCEPTS, C_BATCH, C_PREEMPTIONS, C_RUNNING, C_USED_BLOCKS,
                    C_WAITING, IDLE, PC_CACHED, PC_NEXT, PC_PREV, PC_REF, S_PREEMPTIONS)


@njit(cache=True)
def take_away_nb(srv, router, route, classes, ints, ids, pc, stats, waiting, running, cnt, clock, j, t):
    """Replica ``j`` is gone at ``t`` (its statistics settled to ``t`` by the caller): its iteration in flight is
    lost; each request it holds drops its KV (a running one counts one more preemption) and the router sends it,
    as at an arrival, to a replica that takes requests, where it is prefilled again (prompt and tokens generated so
    far). Its prefix cache is emptied; it takes no more requests. Returns the requests re-queued."""
    cnt[j, C_ACCEPTS] = 0
    n_running, n_waiting = cnt[j, C_RUNNING], cnt[j, C_WAITING]
    for i in range(n_running + n_waiting):
        r = running[j, i] if i < n_running else waiting[j, i - n_running]
        if i < n_running:
            ints[r, I_PREEMPTIONS] += 1
            cnt[j, C_PREEMPTIONS] += 1
        drop_kv_nb(ints, ids, pc[j], cnt[j], r)
        ints[r, I_CHUNK] = 0
        ints[r, I_STATE] = WAITING
        classes[j, ints[r, I_CLASS], K_ACTIVE] -= 1
    stats[j, S_PREEMPTIONS] = cnt[j, C_PREEMPTIONS]
    cnt[j, C_RUNNING] = 0
    cnt[j, C_WAITING] = 0
    cnt[j, C_BATCH] = 0
    units = pc.shape[2] - 1
    pc[j, PC_REF, :] = 0
    pc[j, PC_CACHED, :] = 0
    pc[j, PC_PREV, units] = units
    pc[j, PC_NEXT, units] = units
    cnt[j, C_USED_BLOCKS] = 0
    clock[j, CK_MODE] = IDLE
    clock[j, CK_NEXT_S] = np.inf
    clock[j, CK_WAIT_START_S] = t
    for i in range(n_running + n_waiting):  # sent after the replica is emptied: in the order it held them
        r = running[j, i] if i < n_running else waiting[j, i - n_running]
        send_nb(srv, router, route, classes, ints, ids, pc, stats, waiting, running, cnt, clock, r, t, False)
    return n_running + n_waiting
