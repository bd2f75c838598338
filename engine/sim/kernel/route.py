"""Arrivals and the router: which replica a request goes to (weighted round robin, least outstanding tokens,
shortest queue, prefix affinity; on a disaggregated fleet arrivals go to the prefill pool and handed-over
requests to the decode pool) and its arrival there.

Used for new arrivals (``loop``) and for requests whose KV transfer ended (``handoff``): one path, one rule.
"""

from __future__ import annotations

from numba import njit

from ...scenario.registry import ROUTER_CODES
from ..layout import I_CLASS, I_GENERATED, I_PENDING, I_PREDICTED, I_REPLICA, I_STATE, WAITING
from ..policies import policy_on_arrival_nb
from .prefix import prefix_hit_units_nb
from .queues import append_waiting_nb
from .state import (BUSY, CK_MODE, CK_NEXT_S, C_ACCEPTS, C_ROLE, C_RUNNING, C_WAITING, DECODE_ROLE, RT_CREDIT, RT_SPEED,
                    SV_PREFIX_ROUTE_SLACK_TOKENS, S_ROUTED)

# Routers.
ROUND_ROBIN, LEAST_TOKENS, SHORTEST_QUEUE, PREFIX_AFFINITY = ROUTER_CODES.values()


@njit(cache=True, inline="always")
def _outstanding_tokens_nb(ints, items, n):
    """Tokens the requests of ``items[:n]`` still have to process, as a router can know them: pending
    tokens before the next output, then the predicted output not yet generated."""
    total = 0
    for i in range(n):
        r = items[i]
        total += ints[r, I_PENDING] + max(ints[r, I_PREDICTED] - ints[r, I_GENERATED] - 1, 0)
    return total


@njit(cache=True, inline="always")
def _replica_load_nb(router, route, ints, waiting, running, cnt, k):
    """Replica ``k``'s load as the router weighs it: its outstanding tokens (least-tokens, prefix-affinity) or the
    requests it holds (shortest-queue), over its speed (the time it needs to clear them, in the fastest replica's
    terms)."""
    if router == SHORTEST_QUEUE:
        held = cnt[k, C_WAITING] + cnt[k, C_RUNNING]
    else:
        held = _outstanding_tokens_nb(ints, waiting[k], cnt[k, C_WAITING]) + \
            _outstanding_tokens_nb(ints, running[k], cnt[k, C_RUNNING])
    return held / route[k, RT_SPEED]


@njit(cache=True, inline="always")
def _takes_nb(cnt, k, decodes):
    """True when replica ``k`` takes requests now (``C_ACCEPTS``) and takes arrivals (``decodes`` False: colocated
    and prefill replicas) or requests handed over from the prefill pool (``decodes`` True: decode replicas)."""
    return cnt[k, C_ACCEPTS] == 1 and (cnt[k, C_ROLE] == DECODE_ROLE) == decodes


@njit(cache=True, inline="always")
def _weighted_turn_nb(route, cnt, decodes):
    """Round robin in proportion to speed (smooth weighted round robin, as nginx) over the replicas that take the
    request (``_takes_nb``): each gains its speed in credit, the one with the most (ties: lowest index) is chosen
    and pays their total speed. With equal speeds it is the plain turn 0, 1, ..., R - 1, 0, ... (the credits are
    whole numbers: exact)."""
    total = 0.0
    chosen = -1
    for k in range(route.shape[0]):
        if not _takes_nb(cnt, k, decodes):
            continue
        route[k, RT_CREDIT] += route[k, RT_SPEED]
        total += route[k, RT_SPEED]
        if chosen < 0 or route[k, RT_CREDIT] > route[chosen, RT_CREDIT]:
            chosen = k
    route[chosen, RT_CREDIT] -= total
    return chosen


@njit(cache=True)
def route_nb(srv, router, route, ints, ids, pc, waiting, running, cnt, r, decodes):
    """The replica request ``r`` goes to among those that take it (``_takes_nb``: an arrival, or with ``decodes`` a
    request handed over from the prefill pool; ties: lowest index), each replica's load weighed by its speed
    (``_replica_load_nb``). Prefix affinity: the replica whose cache holds the longest prefix of its prompt, among
    those whose weighed load is within one iteration's token budget of the least loaded (ties: the less
    loaded)."""
    replicas = cnt.shape[0]
    if router == ROUND_ROBIN:
        return _weighted_turn_nb(route, cnt, decodes)
    best, best_load = -1, 0.0
    for k in range(replicas):
        if not _takes_nb(cnt, k, decodes):
            continue
        load = _replica_load_nb(router, route, ints, waiting, running, cnt, k)
        if best < 0 or load < best_load:
            best, best_load = k, load
    if router != PREFIX_AFFINITY or decodes:
        return best
    bound = best_load + srv[SV_PREFIX_ROUTE_SLACK_TOKENS]
    chosen, chosen_hit, chosen_load = best, prefix_hit_units_nb(srv, ints, ids, pc[best], r), best_load
    for k in range(replicas):
        if not _takes_nb(cnt, k, decodes):
            continue
        load = _replica_load_nb(router, route, ints, waiting, running, cnt, k)
        if load > bound:
            continue
        hit = prefix_hit_units_nb(srv, ints, ids, pc[k], r)
        if hit > chosen_hit or (hit == chosen_hit and load < chosen_load):
            chosen, chosen_hit, chosen_load = k, hit, load
    return chosen


@njit(cache=True, inline="always")
def send_nb(srv, router, route, classes, ints, ids, pc, stats, waiting, running, cnt, clock, r, t, decodes):
    """The router sends request ``r`` at ``t`` (an arrival, or with ``decodes`` a request handed over from the
    prefill pool) to a replica (``route_nb``), where it joins the waiting queue; that replica wakes at ``t``
    unless it is busy."""
    # (a fleet of one has no autoscaler: its replica always takes requests; no call to the router)
    j = 0 if cnt.shape[0] == 1 else route_nb(srv, router, route, ints, ids, pc, waiting, running, cnt, r, decodes)
    ints[r, I_REPLICA] = j
    stats[j, S_ROUTED] += 1.0
    policy_on_arrival_nb(classes[j], ints[r, I_CLASS])
    ints[r, I_STATE] = WAITING
    append_waiting_nb(waiting[j], cnt[j], r)
    if clock[j, CK_MODE] != BUSY:
        clock[j, CK_NEXT_S] = min(clock[j, CK_NEXT_S], t)
