"""The prefix cache of one replica: the units of a prompt's shared prefix (a whole number of KV blocks each),
which requests hold them, which are cached, and the list of cached units nobody holds, least recently released
first, from which memory pressure evicts.

Kept apart from the KV blocks of ``kv``: a cached unit's blocks are counted once in the replica's used blocks,
however many requests hold it.
"""

from __future__ import annotations

from numba import njit

from ..layout import (I_BLOCKS, I_CACHED_UNITS, I_HOST_TOKENS, I_KV_TOKENS, I_PENDING, I_PREFIX_BLOCKS, I_PREFIX_START,
                      I_PROMPT, I_RECOMPUTE_LEFT)
from .state import C_USED_BLOCKS, PC_CACHED, PC_NEXT, PC_PREV, PC_REF, SV_BLOCK_SIZE_TOKENS, SV_PREFIX_UNIT_TOKENS


@njit(cache=True, inline="always")
def _unlink_nb(pc, u):
    """Take unit ``u`` out of the list of cached units nobody holds."""
    before, after = pc[PC_PREV, u], pc[PC_NEXT, u]
    pc[PC_NEXT, before] = after
    pc[PC_PREV, after] = before


@njit(cache=True, inline="always")
def _link_last_nb(pc, u):
    """Put unit ``u`` at the end of that list (released last, evicted last)."""
    end = pc.shape[1] - 1
    last = pc[PC_PREV, end]
    pc[PC_NEXT, last] = u
    pc[PC_PREV, u] = last
    pc[PC_NEXT, u] = end
    pc[PC_PREV, end] = u


@njit(cache=True, inline="always")
def _prefix_units_usable_nb(srv, ints, r):
    """How many of ``r``'s prefix units a lookup may use: whole units of its prompt, all but its last token (the
    first output needs one computed token)."""
    return min(ints[r, I_PREFIX_BLOCKS], (ints[r, I_PROMPT] - 1) // srv[SV_PREFIX_UNIT_TOKENS])


@njit(cache=True)
def prefix_hit_units_nb(srv, ints, ids, pc, r):
    """Leading units of ``r``'s prompt this replica's cache holds (a unit counts only after all before it)."""
    if srv[SV_PREFIX_UNIT_TOKENS] == 0:
        return 0
    start = ints[r, I_PREFIX_START]
    usable = _prefix_units_usable_nb(srv, ints, r)
    hit = 0
    while hit < usable and pc[PC_CACHED, ids[start + hit]] == 1:
        hit += 1
    return hit


@njit(cache=True, inline="always")
def fresh_nb(srv, ints, r):
    """True when ``r`` holds no KV at all (never prefilled, or dropped): its prompt may be looked up."""
    return srv[SV_PREFIX_UNIT_TOKENS] > 0 and ints[r, I_KV_TOKENS] == 0 and ints[r, I_HOST_TOKENS] == 0 \
        and ints[r, I_CACHED_UNITS] == 0 and ints[r, I_BLOCKS] == 0


@njit(cache=True)
def take_prefix_nb(srv, ints, ids, pc, r, units):
    """``r`` starts from ``units`` cached units: it holds them, and their tokens are computed already."""
    start = ints[r, I_PREFIX_START]
    for j in range(units):
        u = ids[start + j]
        if pc[PC_REF, u] == 0:
            _unlink_nb(pc, u)
        pc[PC_REF, u] += 1
    tokens = units * srv[SV_PREFIX_UNIT_TOKENS]
    ints[r, I_CACHED_UNITS] = units
    ints[r, I_KV_TOKENS] = tokens
    ints[r, I_PENDING] -= tokens
    ints[r, I_RECOMPUTE_LEFT] = max(ints[r, I_RECOMPUTE_LEFT] - tokens, 0)


@njit(cache=True)
def release_prefix_nb(ints, ids, pc, r):
    """``r`` lets go of its cached units; those nobody else holds stay cached, evictable, its last unit first
    (the tail of a prefix goes before its head)."""
    start = ints[r, I_PREFIX_START]
    for j in range(ints[r, I_CACHED_UNITS] - 1, -1, -1):
        u = ids[start + j]
        pc[PC_REF, u] -= 1
        if pc[PC_REF, u] == 0:
            _link_last_nb(pc, u)
    ints[r, I_CACHED_UNITS] = 0


@njit(cache=True)
def undo_take_nb(srv, ints, ids, pc, r, units, recompute_left):
    """Undo ``take_prefix_nb`` of a request that was not admitted after all."""
    if units == 0:
        return
    tokens = units * srv[SV_PREFIX_UNIT_TOKENS]
    release_prefix_nb(ints, ids, pc, r)
    ints[r, I_KV_TOKENS] = 0
    ints[r, I_PENDING] += tokens
    ints[r, I_RECOMPUTE_LEFT] = recompute_left


@njit(cache=True)
def insert_prefix_nb(srv, ints, ids, pc, cnt, r):
    """``r``'s prompt is computed: its whole prefix units join the cache, their blocks counted there once; a unit
    another request cached meanwhile is shared, and ``r``'s own copy of it freed."""
    start = ints[r, I_PREFIX_START]
    unit_blocks = srv[SV_PREFIX_UNIT_TOKENS] // srv[SV_BLOCK_SIZE_TOKENS]
    whole = min(ints[r, I_PREFIX_BLOCKS], ints[r, I_PROMPT] // srv[SV_PREFIX_UNIT_TOKENS])
    for j in range(ints[r, I_CACHED_UNITS], whole):
        u = ids[start + j]
        ints[r, I_BLOCKS] -= unit_blocks
        if pc[PC_CACHED, u] == 1:
            cnt[C_USED_BLOCKS] -= unit_blocks
            if pc[PC_REF, u] == 0:
                _unlink_nb(pc, u)
        else:
            pc[PC_CACHED, u] = 1
        pc[PC_REF, u] += 1
        ints[r, I_CACHED_UNITS] = j + 1


@njit(cache=True)
def evict_cached_nb(srv, pc, cnt):
    """Free the least recently released cached unit nobody holds; False when there is none."""
    end = pc.shape[1] - 1
    u = pc[PC_NEXT, end]
    if u == end:
        return False
    _unlink_nb(pc, u)
    pc[PC_CACHED, u] = 0
    cnt[C_USED_BLOCKS] -= srv[SV_PREFIX_UNIT_TOKENS] // srv[SV_BLOCK_SIZE_TOKENS]
    return True
