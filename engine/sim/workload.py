"""Turn a scenario's workload into arrays of requests, before the compiled loop runs.

Every random draw of a run happens here, from one ``numpy.random.Generator``
seeded with ``scenario.seed``, in a fixed order (gaps, classes, then lengths
class by class), so the same scenario and seed give the same requests.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..scenario.caps import Caps
from ..scenario.config import Scenario, Workload
from ..scenario.errors import ScenarioError, TraceError, excerpt
from ..scenario.origin import Origin
from .distributions import sample_gaps_s, sample_tokens
from .traces import read_trace, trace_rows

_GAP_CHUNK = 4096


@dataclass(frozen=True)
class RequestArrays:
    """The requests of one run, sorted by arrival time (struct of arrays)."""

    arrival_s: np.ndarray      # float64, seconds from the start of the run
    prompt_tokens: np.ndarray  # int64, >= 1
    output_tokens: np.ndarray  # int64, >= 1
    class_id: np.ndarray       # int64, index into scenario.workload.classes
    unrelated_output_tokens: np.ndarray  # int64, an independent length from the same class (predictor noise)
    # Prefix blocks: request i's prompt starts with blocks prefix_ids[prefix_offsets[i]:prefix_offsets[i + 1]] of
    # prefix_block_tokens tokens each; equal ids, equal content (what a prefix cache can reuse). None: no ids.
    prefix_offsets: np.ndarray | None = None
    prefix_ids: np.ndarray | None = None
    prefix_block_tokens: int = 0

    def __len__(self) -> int:
        return len(self.arrival_s)


def _synthetic_arrivals_s(workload: Workload, rng: np.random.Generator, caps: Caps) -> np.ndarray:
    """Arrival times of synthetic requests: gaps drawn at the constant rate, or at rate 1 and carried through the
    rate curve's time change (``RateCurve.inverse``), from ``curve_start_s`` of the curve on."""
    arrival = workload.arrival
    curve = arrival.curve()
    if curve is None:
        mean_gap_s, to_time_s = None, None
    else:
        u_start = float(curve.cumulative(arrival.curve_start_s))
        mean_gap_s = 1.0

        def to_time_s(u: np.ndarray) -> np.ndarray:
            return curve.inverse(u + u_start) - arrival.curve_start_s

    if workload.num_requests is not None:
        arrivals = np.cumsum(sample_gaps_s(arrival, workload.num_requests, rng, mean_gap_s))
    else:
        end = workload.duration_s if curve is None else float(curve.cumulative(arrival.curve_start_s +
                                                                               workload.duration_s)) - u_start
        chunks, last, drawn = [], 0.0, 0
        while last <= end:
            if drawn > caps.requests_per_run:
                raise ScenarioError(
                    f"workload.duration_s = {workload.duration_s:g} s at {arrival.rate_per_s:g} req/s brings "
                    f"more than {caps.requests_per_run:,} requests, the limit requests_per_run; shorten duration_s "
                    f"or set num_requests{caps.raise_hint('requests_per_run')}")
            chunk = last + np.cumsum(sample_gaps_s(arrival, _GAP_CHUNK, rng, mean_gap_s))
            chunks.append(chunk)
            last, drawn = chunk[-1], drawn + len(chunk)
        arrivals = np.concatenate(chunks)
    if to_time_s is not None:
        arrivals = to_time_s(arrivals)
    if workload.duration_s is not None:
        arrivals = arrivals[arrivals <= workload.duration_s]
    return arrivals


def _check_span(arrival_s: np.ndarray, caps: Caps, where: str) -> None:
    """The last arrival must come within the limit of simulated time."""
    if len(arrival_s) and not arrival_s[-1] <= caps.simulated_s:
        raise ScenarioError(f"{where}: the last request arrives at {arrival_s[-1]:,.4g} s, beyond the limit of "
                            f"{caps.simulated_s:,.0f} s of simulated time (simulated_s); raise the rate or "
                            f"simulate fewer requests{caps.raise_hint('simulated_s')}")


def _assign_classes(n: int, workload: Workload, rng: np.random.Generator) -> np.ndarray:
    shares = np.array([c.share for c in workload.classes])
    return rng.choice(len(shares), size=n, p=shares / shares.sum()).astype(np.int64)


def _synthetic(workload: Workload, rng: np.random.Generator, caps: Caps) -> tuple:
    arrival_s = _synthetic_arrivals_s(workload, rng, caps)
    _check_span(arrival_s, caps, "workload.arrival")
    class_id = _assign_classes(len(arrival_s), workload, rng)
    prompt = np.empty(len(arrival_s), dtype=np.int64)
    output = np.empty(len(arrival_s), dtype=np.int64)
    for k, cls in enumerate(workload.classes):
        members = class_id == k
        prompt[members] = sample_tokens(cls.prompt_tokens, int(members.sum()), rng, caps.tokens_per_request)
        output[members] = sample_tokens(cls.output_tokens, int(members.sum()), rng, caps.tokens_per_request)
    return arrival_s, prompt, output, class_id, None


def shared_prefix_blocks(workload: Workload, prompt: np.ndarray, class_id: np.ndarray, block_tokens: int) -> tuple:
    """Prefix blocks of synthetic requests (``RequestArrays``): each request's first min(prompt, its class's
    ``shared_prefix_tokens``) tokens, in whole blocks of ``block_tokens``, carry its class's ids (class k's j-th block
    is k x 2^32 + j); None when no class shares a prefix."""
    shared = np.array([c.shared_prefix_tokens for c in workload.classes], dtype=np.int64)
    if not shared.any():
        return None
    counts = np.minimum(prompt, shared[class_id]) // block_tokens
    offsets = np.concatenate(([0], np.cumsum(counts)))
    within = np.arange(offsets[-1]) - np.repeat(offsets[:-1], counts)
    return offsets, (np.repeat(class_id, counts) << 32) + within, block_tokens


FRESH_ID_BASE = 1 << 62  # a conversation's own blocks take ids from here (a class's shared ones are k x 2^32 + j)


def conversation_slots(workload: Workload, k: int) -> int:
    """Conversations of class ``k`` in flight at once: its turn gap x its arrival rate, at least one."""
    cls = workload.classes[k]
    return max(1, round(cls.turn_gap_s * cls.share * workload.arrival.rate_per_s))


def conversations(workload: Workload, prompt: np.ndarray, output: np.ndarray, class_id: np.ndarray,
                  block_tokens: int, max_tokens: int, with_blocks: bool = True) -> tuple[np.ndarray, tuple | None]:
    """Prompts and prefix blocks (``RequestArrays``) when some class holds conversations (``conversation_turns``
    > 1). Class k's arrivals are dealt in turn to its ``conversation_slots`` conversations in flight; a slot's
    conversation has ``conversation_turns`` turns, then a new one starts there. A follow-up's prompt is the previous
    turn's prompt and output plus its own drawn tokens (at most ``max_tokens``); its blocks are the previous prompt's
    whole blocks (same ids: the same content), then blocks of its own (fresh ids: the previous output, its new
    tokens). A first turn starts with its class's shared blocks (``shared_prefix_tokens``), then its own. Classes
    without conversations keep their shared blocks only. Without ``with_blocks`` only the prompts are made (no
    prefix cache reads the blocks), and the blocks are None."""
    prompt = prompt.copy()
    blocks: list[np.ndarray] = [np.zeros(0, np.int64)] * len(prompt)
    fresh = FRESH_ID_BASE
    for k, cls in enumerate(workload.classes):
        members = np.flatnonzero(class_id == k)
        shared = cls.shared_prefix_tokens
        if cls.conversation_turns == 1:
            for r in members if with_blocks else ():
                blocks[r] = (np.int64(k) << 32) + np.arange(min(prompt[r], shared) // block_tokens, dtype=np.int64)
            continue
        slots = conversation_slots(workload, k)
        last: dict[int, int] = {}  # slot -> the request of its previous turn
        for i, r in enumerate(members):
            slot, turn = i % slots, (i // slots) % cls.conversation_turns
            before = last.get(slot) if turn else None
            if before is not None:
                prompt[r] = min(prompt[before] + output[before] + prompt[r], max_tokens)
            if with_blocks:
                kept = (np.int64(k) << 32) + np.arange(min(prompt[r], shared) // block_tokens, dtype=np.int64) \
                    if before is None else blocks[before][: prompt[r] // block_tokens]
                own = prompt[r] // block_tokens - len(kept)
                blocks[r] = np.concatenate((kept, np.arange(fresh, fresh + own, dtype=np.int64)))
                fresh += own
            last[slot] = r
    if not with_blocks:
        return prompt, None
    counts = np.array([len(b) for b in blocks], dtype=np.int64)
    ids = np.concatenate(blocks) if len(blocks) else np.zeros(0, np.int64)
    return prompt, (np.concatenate(([0], np.cumsum(counts))), ids, block_tokens)


WHOLE_TRACE_MAX_REQUESTS = 50_000  # a trace is compared and sized whole up to this (19,366 requests: ~1 s a run)


def trace_requests(scenario: Scenario) -> int:
    """Requests in the scenario's whole trace file (read once and cached; at most ``caps.requests_per_run``):
    what a replay without ``num_requests`` simulates."""
    trace, origin = scenario.workload.trace, scenario.origin
    return len(read_trace(origin.trace_file(trace.path), trace.format, None, origin.caps, name=trace.path).arrival_s)


def trace_requests_up_to(scenario: Scenario, most: int) -> int:
    """Requests in the scenario's trace file, counted up to ``most``: its first ``most`` rows are read, never the rest
    (a file longer than ``caps.requests_per_run`` is no error here, as in a run cut at ``most``)."""
    trace, origin = scenario.workload.trace, scenario.origin
    return trace_rows(origin.trace_file(trace.path), trace.format, most, origin.caps, name=trace.path)


def unclassed_requests(scenario: Scenario) -> int:
    """Requests of the replayed part of the scenario's trace that name no class (all of them when the file has no
    class column): each is given a class at random in the classes' shares (``_replayed``), its lengths the trace's.
    0 without a trace."""
    workload, origin = scenario.workload, scenario.origin
    if workload.trace is None:
        return 0
    rows = read_trace(origin.trace_file(workload.trace.path), workload.trace.format, workload.num_requests,
                      origin.caps, name=workload.trace.path)
    if rows.class_names is None:
        return len(rows.arrival_s)
    return int(sum(name is None for name in rows.class_names))


def _replayed(workload: Workload, origin: Origin, rng: np.random.Generator) -> tuple:
    """The trace's first ``num_requests`` rows (file order), scaled, jittered, sorted, cut at ``duration_s``."""
    trace = workload.trace
    path = origin.trace_file(trace.path)
    rows = read_trace(path, trace.format, workload.num_requests, origin.caps, name=trace.path)
    arrival_s = rows.arrival_s / trace.rate_scale
    if trace.jitter_ms > 0:
        arrival_s = arrival_s + rng.uniform(0.0, trace.jitter_ms / 1000.0, size=len(arrival_s))
    order = np.argsort(arrival_s, kind="stable")
    arrival_s = arrival_s[order] - arrival_s[order].min()
    keep = np.ones(len(arrival_s), dtype=bool)
    if workload.duration_s is not None:
        keep &= arrival_s <= workload.duration_s
    _check_span(arrival_s[keep], origin.caps, "workload.trace")
    order = order[keep]
    class_id = _assign_classes(len(order), workload, rng)
    if rows.class_names is not None:
        names = {c.name: k for k, c in enumerate(workload.classes)}
        for pos, name in enumerate(rows.class_names[order]):
            if name is None:
                continue
            if name not in names:
                raise TraceError(f"{trace.path}: class {excerpt(name)} (request {pos + 1} in arrival order) is not a "
                                 f"class of the scenario; known classes: {', '.join(names)}")
            class_id[pos] = names[name]
    prefix = None
    if rows.block_ids is not None:
        starts, ends = rows.block_offsets[order], rows.block_offsets[order + 1]
        offsets = np.concatenate(([0], np.cumsum(ends - starts)))
        within = np.arange(offsets[-1]) - np.repeat(offsets[:-1], ends - starts)  # position inside each request
        prefix = (offsets, rows.block_ids[np.repeat(starts, ends - starts) + within], rows.block_tokens)
    return arrival_s[keep], rows.prompt_tokens[order], rows.output_tokens[order], class_id, prefix


def _unrelated_outputs(output: np.ndarray, class_id: np.ndarray, n_classes: int,
                       rng: np.random.Generator) -> np.ndarray:
    """For each request, the output length of another request of its class drawn at random.

    Drawn last and always, so the arrivals and lengths do not depend on the policy or its predictor.
    """
    unrelated = np.empty_like(output)
    for k in range(n_classes):
        members = np.flatnonzero(class_id == k)
        if len(members):
            unrelated[members] = output[members][rng.integers(0, len(members), size=len(members))]
    return unrelated


def build_requests(scenario: Scenario) -> RequestArrays:
    """Draw (or replay) the requests of ``scenario`` with its seed."""
    rng = np.random.default_rng(scenario.seed)
    workload = scenario.workload
    if workload.trace is not None:
        arrival_s, prompt, output, class_id, prefix = _replayed(workload, scenario.origin, rng)
    else:
        arrival_s, prompt, output, class_id, prefix = _synthetic(workload, rng, scenario.origin.caps)
    block_tokens = scenario.server.block_size_tokens
    caching = scenario.server.prefix_caching  # prefix blocks matter to a prefix cache only: without, none are kept
    if any(c.conversation_turns > 1 for c in workload.classes):  # synthetic only (config refuses it with a trace)
        prompt, prefix = conversations(workload, prompt, output, class_id, block_tokens,
                                       scenario.origin.caps.tokens_per_request, caching)
    elif not caching:
        prefix = None
    elif prefix is None:  # a trace's own block ids come first
        prefix = shared_prefix_blocks(workload, prompt, class_id, block_tokens)
    unrelated = _unrelated_outputs(output, class_id, len(workload.classes), rng)
    return RequestArrays(arrival_s, prompt, output, class_id, unrelated, *(prefix or ()))
