"""Disaggregation: the KV transfer of a request whose prompt a prefill replica has computed, over that
replica's link (first come, first served), and the hand-over to a decode replica when it ends.

A transfer is an event of the fleet (the list ``handoff``), taken after arrivals and before decisions at the
same time.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..layout import (F_HANDED_OFF, I_BLOCKS, I_CLASS, I_KV_TOKENS, I_PREFILL_REPLICA, I_REPLICA, I_STATE,
                      K_ACTIVE, TRANSFERRING)
from .kv import free_blocks_nb
from .prefix import release_prefix_nb
from .route import send_nb
from .state import (BUSY, CK_LINK_FREE_S, CK_MODE, CK_NEXT_S, CK_WAIT_START_S, HO_COUNT, SV_KV_LINK_S_PER_TOKEN,
                    S_KV_BLOCK_SECONDS, WAITING_FOR_GATE)


@njit(cache=True, inline="always")
def start_transfer_nb(srv, classes, ints, fl, clock, handoff, r, t):
    """``r``'s prompt is computed on a prefill replica at ``t``: its KV goes over the replica's link (after the
    transfers before it: the link is first come, first served), its blocks held here until it has arrived. It
    leaves this replica's batch and class state and joins the fleet's list of transfers (``handoff``)."""
    start_s = max(t, clock[CK_LINK_FREE_S])
    end_s = start_s + ints[r, I_KV_TOKENS] * srv[SV_KV_LINK_S_PER_TOKEN]
    clock[CK_LINK_FREE_S] = end_s
    fl[r, F_HANDED_OFF] = end_s
    ints[r, I_STATE] = TRANSFERRING
    ints[r, I_PREFILL_REPLICA] = ints[r, I_REPLICA]
    classes[ints[r, I_CLASS], K_ACTIVE] -= 1
    count = handoff[HO_COUNT]
    if count + 1 >= handoff.shape[0]:
        raise RuntimeError("internal error: the list of KV transfers is full")
    handoff[1 + count] = r
    handoff[HO_COUNT] = count + 1


@njit(cache=True, _nrt=False)
def next_handoff_nb(fl, handoff):
    """(position in ``handoff``, time) of the transfer that ends first (ties: the one started first); (-1, inf)
    when none is under way."""
    first, first_s = -1, np.inf
    for i in range(handoff[HO_COUNT]):
        end_s = fl[handoff[1 + i], F_HANDED_OFF]
        if end_s < first_s:
            first, first_s = i, end_s
    return first, first_s


@njit(cache=True, _nrt=False)
def hand_over_nb(srv, router, route, classes, ints, fl, ids, pc, stats, waiting, running, cnt, clock, handoff, i,
                 t):
    """Transfer ``i`` of the list ends at ``t``: the prefill replica frees its blocks (and wakes, should it wait for
    memory), the router sends the request to a decode replica, where it waits for a slot and memory to decode."""
    r = handoff[1 + i]
    count = handoff[HO_COUNT]
    for j in range(i, count - 1):
        handoff[1 + j] = handoff[2 + j]
    handoff[HO_COUNT] = count - 1
    p = ints[r, I_PREFILL_REPLICA]
    freed = ints[r, I_BLOCKS]
    if clock[p, CK_MODE] == BUSY:  # its iteration counted these blocks to its end: only until now
        stats[p, S_KV_BLOCK_SECONDS] -= freed * max(clock[p, CK_NEXT_S] - t, 0.0)
    else:  # a wait or an idle spell counts the blocks left at its end: these until now
        stats[p, S_KV_BLOCK_SECONDS] += freed * (t - clock[p, CK_WAIT_START_S])
        if clock[p, CK_MODE] == WAITING_FOR_GATE:
            clock[p, CK_NEXT_S] = min(clock[p, CK_NEXT_S], t)
    free_blocks_nb(ints, cnt[p], r)
    release_prefix_nb(ints, ids, pc[p], r)
    send_nb(srv, router, route, classes, ints, ids, pc, stats, waiting, running, cnt, clock, r, t, True)
