"""An autoscaler of a colocated fleet or of one pool of a disaggregated fleet, and spot interruptions (a colocated
fleet's): what replicas are up, when, and what they bill.

The fleet's arrays hold ``max_replicas`` replicas (slots) for each autoscaler, from its ``offset`` (a decode pool's
after the prefill pool's); its ``replicas`` take requests at the start. The loop
(``kernel.run_nb``) stops at the next time this module must act (``O_PAUSE_AT_S``): an evaluation every
``interval_s``, a replica done provisioning, a spot notice or its end. Each slot is down, provisioning (billed, not
yet serving), up, draining (billed, serving what it holds, taking nothing new: it goes down once empty), or on
notice (a spot replica about to go: taking nothing new; at the notice's end ``kernel.take_away_nb`` re-queues what
it still holds on the others). Slots below ``min_replicas`` are the baseline: always up, never drained nor
interrupted. A slot bills from when it is asked for to when it goes down; ``intervals`` keeps them.

Target tracking (as Kubernetes' HPA): desired = ceil(replicas taking requests x signal / target), within the
bounds. It adds replicas once desired has stayed above the replicas up or coming for ``scale_up_delay_s``, removes
them once the most it desired over ``scale_down_delay_s`` is below (the least loaded drain first); nothing within
``cooldown_s`` of the last change.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from ..scenario.config import Autoscale, Server
from .layout import F_ARRIVAL, F_FIRST_SCHEDULED, I_CLASS
from .kernel.state import (CK_LINK_FREE_S, CK_MODE, CK_WAIT_START_S, C_ACCEPTS, C_CAPACITY_BLOCKS,
                           C_MAX_BATCH_SIZE, C_RUNNING, C_USED_BLOCKS, C_WAITING, IDLE, S_BATCH_SUM, S_BUSY_S,
                           S_ITERATIONS, S_KV_BLOCK_SECONDS)

# Provisioning time when the scenario does not give it: a fixed part and the weights read at a storage bandwidth.
# Both are estimates (docs/method.md, "Traffic that moves"): vLLM's cold start measured at ~39 s of torch.compile,
# profiling and warm-up (route179.dev, 2026-06-30, one DGX Spark), the rest of the 120 s (machine and container
# start) an estimate; weights read from local NVMe at 5 GB/s in the inference-serving book's example and at
# ~0.15 GB/s in that measurement.
PROVISION_FIXED_S = 120.0
WEIGHT_LOAD_GB_S = 2.0

# A fleet that flaps (no cooldown, decisions every second, hundreds of replicas) could fill memory with events:
# after this many the autoscaler holds the fleet as it is (the report says when) and the run goes on.
MAX_EVENTS = 20_000
REPORTED_EVENTS = 1_000  # the first events the run's summary lists (their counts are all of them)

DOWN, PROVISIONING, UP, DRAINING, NOTICE = range(5)
STATE_NAMES = ("down", "provisioning", "up", "draining", "notice")


def provision_s(scale: Autoscale, server: Server) -> float:
    """Seconds from asking for a replica of ``server`` to its first request: ``scale.provision_s``, else
    ``PROVISION_FIXED_S`` plus the replica's weights at ``WEIGHT_LOAD_GB_S`` (the fixed step model has no weights:
    the fixed part only)."""
    if scale.provision_s is not None:
        return scale.provision_s
    if server.step_model != "roofline":
        return PROVISION_FIXED_S
    from ..hardware.roofline import roofline_profile  # the hardware tables, only for a GPU's fleet
    return PROVISION_FIXED_S + roofline_profile(server).resident_weight_bytes / (WEIGHT_LOAD_GB_S * 1e9)


@dataclass
class Autoscaler:
    """The state of every slot and the decisions over a run (see the module's docstring)."""

    config: Autoscale
    start_replicas: int
    provision_s: float
    interruptions_per_hour: float
    notice_s: float
    rng: np.random.Generator
    offset: int = 0  # the fleet's replica of this autoscaler's first slot (a disaggregated fleet's decode pool: after
    # the prefill pool's slots)
    state: np.ndarray = field(init=False)
    until_s: np.ndarray = field(init=False)       # provisioning's or notice's end; a spot replica's next notice
    billed_from_s: np.ndarray = field(init=False)
    draining_from_s: np.ndarray = field(init=False)
    intervals: list = field(default_factory=list)  # (slot, from_s, to_s) billed
    serving: list = field(default_factory=list)    # (slot, from_s, to_s) taking requests
    up_from_s: np.ndarray = field(init=False)
    events: list = field(default_factory=list)     # (t_s, what, slot)
    desired: deque = field(default_factory=deque)  # (t_s, desired replicas) of the readings within the delay
    first_reading_s: float | None = None
    requeued: int = 0
    next_eval_s: float = 0.0
    last_change_s: float = -math.inf
    up_wanted_since_s: float | None = None
    held_from_s: float | None = None  # when MAX_EVENTS was reached
    stats_before: np.ndarray | None = None  # each slot's busy time, batch sum, iterations, KV block-seconds

    def __post_init__(self) -> None:
        slots = self.config.max_replicas
        self.state = np.full(slots, DOWN)
        self.state[: self.start_replicas] = UP
        self.until_s = np.full(slots, math.inf)
        self.billed_from_s = np.zeros(slots)
        self.draining_from_s = np.zeros(slots)
        self.up_from_s = np.zeros(slots)
        for j in range(self.start_replicas):
            self._spot_notice_at(j, 0.0)
        self.next_eval_s = self.config.interval_s

    def _spot_notice_at(self, j: int, t: float) -> None:
        """A spot replica (above the baseline) up at ``t`` gets its notice after an exponential time."""
        if j >= self.config.min_replicas and self.interruptions_per_hour > 0 and self.held_from_s is None:
            self.until_s[j] = t + self.rng.exponential(3600.0 / self.interruptions_per_hour)

    def next_s(self) -> float:
        """When it must act next."""
        return min(self.next_eval_s, float(self.until_s.min()))

    def _down(self, j: int, t: float) -> None:
        self.intervals.append((int(j), float(self.billed_from_s[j]), t))
        self.state[j] = DOWN
        self.until_s[j] = math.inf
        self._event(t, "down", j)

    def _event(self, t: float, what: str, j: int) -> None:
        self.events.append((t, what, int(j)))
        if len(self.events) >= MAX_EVENTS and self.held_from_s is None:
            self.held_from_s, self.next_eval_s = t, math.inf
            self.until_s[self.state == UP] = math.inf  # no more spot notices either

    def _stop_taking(self, j: int, t: float) -> None:
        self.serving.append((j, float(self.up_from_s[j]), t))

    def act(self, t: float, arrays: dict) -> None:
        """Everything due at ``t``: provisioning ended, notices given or ended, drained replicas down, then an
        evaluation when one is due. ``arrays``: the loop's arrays by name (``counters``, ``clock``, ``stats``) and
        ``take_away(j)``, which re-queues replica ``j``'s requests; this autoscaler reads its own slots of them."""
        arrays = self._own(arrays)
        cnt, clock = arrays["counters"], arrays["clock"]
        for j in np.flatnonzero(self.until_s <= t):
            if self.state[j] == PROVISIONING:
                self.state[j], self.until_s[j], self.up_from_s[j] = UP, math.inf, t
                cnt[j, C_ACCEPTS] = 1
                self._event(t, "up", j)
                self._spot_notice_at(j, t)
            elif self.state[j] == UP:  # a spot replica's notice
                self._stop_taking(j, t)
                self.state[j], self.until_s[j], self.draining_from_s[j] = NOTICE, t + self.notice_s, t
                cnt[j, C_ACCEPTS] = 0
                self._event(t, "notice", j)
            elif self.state[j] == NOTICE:  # interrupted: what it holds goes elsewhere
                self.requeued += arrays["take_away"](j, t)
                self._event(t, "interrupted", j)
                self._down(j, t)
        for j in np.flatnonzero((self.state == DRAINING) | (self.state == NOTICE)):
            # empty, idle, and (a prefill server) its last KV sent: it holds the KV until the transfer ends
            if cnt[j, C_WAITING] + cnt[j, C_RUNNING] == 0 and clock[j, CK_MODE] == IDLE and \
                    clock[j, CK_LINK_FREE_S] <= t:
                self._down(j, max(float(clock[j, CK_WAIT_START_S]), float(clock[j, CK_LINK_FREE_S]),
                                  float(self.draining_from_s[j])))
        if t >= self.next_eval_s and self.held_from_s is None:
            self.next_eval_s = t + self.config.interval_s
            self._evaluate(t, arrays)

    def _own(self, arrays: dict) -> dict:
        """The loop's per-replica arrays as views of this autoscaler's slots (``offset`` on), slot j its j-th."""
        mine = slice(self.offset, self.offset + self.config.max_replicas)
        take_away = arrays["take_away"]
        return {**{key: arrays[key][mine] for key in ("counters", "clock", "stats", "waiting")},
                **{key: arrays[key] for key in ("ints", "floats", "sla_ttft_s")},
                "take_away": lambda j, t: take_away(self.offset + j, t)}

    def signal(self, arrays: dict, t: float) -> float:
        """The signal over the replicas taking requests at ``t`` (``Autoscale.signal``), their mean. Utilisation: the
        share of a replica's capacity in use over the last interval, batch slots or KV cache, whichever is fuller
        (busy share x mean batch / batch limit; KV block-seconds / interval / blocks): a batching server is busy
        whenever it holds one request, so its busy share alone says little. Slack: the share of its class's TTFT
        target the longest-waiting request not yet served has used (classes without one are not read)."""
        cnt, stats = arrays["counters"], arrays["stats"]
        taking = np.flatnonzero(self.state == UP)
        now = stats[:, [S_BUSY_S, S_BATCH_SUM, S_ITERATIONS, S_KV_BLOCK_SECONDS]].copy()
        before = self.stats_before if self.stats_before is not None else np.zeros_like(now)
        self.stats_before = now
        if len(taking) == 0:
            return 0.0
        capacity = cnt[taking, C_CAPACITY_BLOCKS].astype(float)
        if self.config.signal == "utilisation":
            busy_s, batch_sum, iterations, block_s = (now - before)[taking].T
            mean_batch = np.divide(batch_sum, iterations, out=np.zeros_like(batch_sum), where=iterations > 0)
            slots = np.clip(busy_s / self.config.interval_s, 0.0, 1.0) * mean_batch / cnt[taking, C_MAX_BATCH_SIZE]
            memory = block_s / self.config.interval_s / capacity
            return float(np.clip(np.maximum(slots, memory), 0.0, 1.0).mean())
        if self.config.signal == "queue":
            return float(cnt[taking, C_WAITING].mean())
        if self.config.signal == "slack":
            return float(np.mean([self._slack_used(arrays, j, t) for j in taking]))
        return float((cnt[taking, C_USED_BLOCKS] / capacity).mean())

    @staticmethod
    def _slack_used(arrays: dict, j: int, t: float) -> float:
        """Replica ``j``'s longest-waiting request's wait at ``t`` over its class's TTFT target (0: none waits)."""
        waiting = arrays["waiting"][j, :arrays["counters"][j, C_WAITING]]
        fresh = waiting[np.isnan(arrays["floats"][waiting, F_FIRST_SCHEDULED])]  # not preempted ones
        if len(fresh) == 0:
            return 0.0
        used = (t - arrays["floats"][fresh, F_ARRIVAL]) / arrays["sla_ttft_s"][arrays["ints"][fresh, I_CLASS]]
        return float(used.max())

    def _evaluate(self, t: float, arrays: dict) -> None:
        config = self.config
        taking = int((self.state == UP).sum())
        value = self.signal(arrays, t)
        desired = min(max(math.ceil(taking * value / config.target - 1e-9), config.min_replicas),
                      config.max_replicas)
        self.desired.append((t, desired))
        while self.desired[0][0] <= t - config.scale_down_delay_s - 1e-9:
            self.desired.popleft()  # the readings older than the scale-down delay no longer count
        self.first_reading_s = t if self.first_reading_s is None else self.first_reading_s
        coming = int(((self.state == UP) | (self.state == PROVISIONING)).sum())
        if desired > coming:
            self.up_wanted_since_s = t if self.up_wanted_since_s is None else self.up_wanted_since_s
        else:
            self.up_wanted_since_s = None
        if t - self.last_change_s < config.cooldown_s:
            return
        if desired > coming and t - self.up_wanted_since_s >= config.scale_up_delay_s:
            for j in np.flatnonzero(self.state == DOWN)[: desired - coming]:
                self.state[j], self.until_s[j], self.billed_from_s[j] = PROVISIONING, t + self.provision_s, t
                self._event(t, "provisioning", j)
            self.last_change_s, self.up_wanted_since_s = t, None
            return
        if self.first_reading_s > t - config.scale_down_delay_s:
            return  # not yet a whole stabilisation window of readings
        wanted = max(d for _, d in self.desired)
        if wanted < coming:
            cnt = arrays["counters"]
            burst = [j for j in np.flatnonzero(self.state == UP) if j >= config.min_replicas]
            burst.sort(key=lambda j: (cnt[j, C_WAITING] + cnt[j, C_RUNNING], -j))
            for j in burst[: coming - wanted]:
                self._stop_taking(j, t)
                self.state[j], self.draining_from_s[j] = DRAINING, t
                cnt[j, C_ACCEPTS] = 0
                self.until_s[j] = math.inf  # a draining spot replica is not interrupted any more (it leaves)
                self._event(t, "draining", j)
            self.last_change_s = t

    def finish(self, end_s: float) -> None:
        """Close the bills of every slot still up at the run's end."""
        for j in np.flatnonzero(self.state != DOWN):
            self.intervals.append((int(j), float(self.billed_from_s[j]), max(end_s, float(self.billed_from_s[j]))))
        for j in np.flatnonzero(self.state == UP):
            self.serving.append((int(j), float(self.up_from_s[j]), max(end_s, float(self.up_from_s[j]))))

    def replica_hours(self) -> float:
        return sum(to_s - from_s for _, from_s, to_s in self.intervals) / 3600.0

    def serving_s(self) -> float:
        """Replica-seconds taking requests over the run (after ``finish``)."""
        return sum(to_s - from_s for _, from_s, to_s in self.serving)

    def replicas_over(self, edges_s: np.ndarray, serving: bool = False) -> np.ndarray:
        """Mean replicas billed (``serving``: taking requests) in each window between ``edges_s``."""
        totals = np.zeros(len(edges_s) - 1)
        for _, from_s, to_s in self.serving if serving else self.intervals:
            totals += np.clip(np.minimum(edges_s[1:], to_s) - np.maximum(edges_s[:-1], from_s), 0.0, None)
        return totals / np.diff(edges_s)

    def peak_replicas(self) -> int:
        """The most replicas billed at once."""
        changes = sorted([(from_s, 1) for _, from_s, _ in self.intervals]
                         + [(to_s, -1) for _, _, to_s in self.intervals])  # at one time, ends (-1) before starts
        peak = level = 0
        for _, step in changes:
            level += step
            peak = max(peak, level)
        return peak

    def report(self) -> dict:
        """What the run's summary keeps (``system.autoscale``)."""
        counts = {name: sum(1 for _, what, _ in self.events if what == name)
                  for name in ("provisioning", "draining", "notice")}  # a notice: the provider takes it back
        return {"min_replicas": self.config.min_replicas, "max_replicas": self.config.max_replicas,
                "provision_s": self.provision_s, "provision_estimated": self.config.provision_s is None,
                "scale_ups": counts["provisioning"],
                "scale_downs": counts["draining"], "interruptions": counts["notice"],
                "requeued": self.requeued,
                "peak_replicas": self.peak_replicas(), "held_from_s": self.held_from_s,
                "billed_s": [to_s - from_s for _, from_s, to_s in self.intervals],  # each slot's stays up, billed
                "billed_slots": [j for j, _, _ in self.intervals],  # its own slots: 0 its first (baseline first)
                "events": [{"time_s": t, "event": what, "replica": self.offset + j}
                           for t, what, j in self.events[:REPORTED_EVENTS]]}


def describe(system: dict) -> str | None:
    """What the run's autoscalers did (its ``system`` block: the colocated fleet's ``autoscale``, each pool's under
    ``pool_autoscale``), one sentence each, for the command line and the pages; None without any."""
    named = ([("autoscaler", system["autoscale"])] if system.get("autoscale") else []) + \
        [(f"{pool} pool's autoscaler", scale) for pool, scale in (system.get("pool_autoscale") or {}).items()]
    if not named:
        return None
    return ". ".join(_sentence(name, scale, system["sim_time_s"] / 3600.0) for name, scale in named)


def _sentence(name: str, scale: dict, hours: float) -> str:
    """One autoscaler's report (``Autoscaler.report``) over a run of ``hours``, in words."""
    billed_h = sum(scale["billed_s"]) / 3600.0
    mean = billed_h / hours if hours > 0 else 0.0
    provision = f"a new replica serves {scale['provision_s']:,.0f} s after it is asked for" + (
        f" (an estimate: {PROVISION_FIXED_S:.0f} s to start plus the weights at {WEIGHT_LOAD_GB_S:g} GB/s)"
        if scale["provision_estimated"] else "")
    spot = "" if not scale["interruptions"] else \
        f", {scale['interruptions']:,} spot interruptions ({scale['requeued']:,} requests re-queued)"
    held = "" if scale["held_from_s"] is None else \
        f"; held as it was from {scale['held_from_s']:,.0f} s after {MAX_EVENTS:,} events (raise cooldown_s)"
    return (f"{name}: {scale['min_replicas']} to {scale['max_replicas']} replicas, peak {scale['peak_replicas']}, "
            f"{scale['scale_ups']:,} scale-ups, {scale['scale_downs']:,} scale-downs{spot}; "
            f"{billed_h:,.2f} replica-hours billed over {hours:,.2f} h (mean {mean:.2f} replicas); "
            f"{provision}{held}")
