"""A replica's request lists (waiting, running, batch: request ids in the first ``n`` entries of a row, their
lengths in the counters) and the order the policy ranks requests in.

Shared by every stage that moves a request from one list to another; each helper keeps the list's order, so the
ranking a policy set stays as it was.
"""

from __future__ import annotations

from numba import njit

from ..layout import F_ARRIVAL, F_KEY, I_STATE
from .state import C_WAITING


@njit(cache=True, inline="always")
def before_nb(fl, a, b):
    """True when request ``a`` ranks before ``b``: lower key, then earlier arrival, then lower index."""
    if fl[a, F_KEY] != fl[b, F_KEY]:
        return fl[a, F_KEY] < fl[b, F_KEY]
    if fl[a, F_ARRIVAL] != fl[b, F_ARRIVAL]:
        return fl[a, F_ARRIVAL] < fl[b, F_ARRIVAL]
    return a < b


@njit(cache=True, inline="always")
def append_waiting_nb(waiting, cnt, r):
    """Append ``r`` to the waiting list, whose length ``waiting_capacity`` bounds."""
    if cnt[C_WAITING] >= waiting.shape[0]:
        raise RuntimeError("internal error: a request list is full")
    waiting[cnt[C_WAITING]] = r
    cnt[C_WAITING] += 1


@njit(cache=True, inline="always")
def remove_nb(items, n, r):
    """Remove ``r`` from ``items[:n]`` keeping order; returns the new length."""
    j = 0
    for i in range(n):
        if items[i] != r:
            items[j] = items[i]
            j += 1
    return j


@njit(cache=True, inline="always")
def keep_state_nb(ints, items, n, state):
    """Keep only the requests of ``items[:n]`` in ``state``, in order; returns the new length."""
    j = 0
    for i in range(n):
        r = items[i]
        if ints[r, I_STATE] == state:
            items[j] = r
            j += 1
    return j
