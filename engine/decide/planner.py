"""The planner: the cheapest rental, fleet and policy that meet every target on a workload.

Search space: every GPU with an offer (or those asked for) x every tensor-parallel degree at which the model
fits and some offer's machines host the group x the policies asked for (default: the scenario's) x the weight
formats, routers and decodings (plain, or the scenario's speculative decoding) asked for x replicas.
Per GPU, format, decoding and degree the policy that needs the fewest replicas is kept (ties: the one with the most
to spare on its tightest target), and the others that do as well are named beside it.
For each configuration the replicas start at the analytic bound (the fewest whose estimated offered load is
under 1: fewer are unstable by definition) and grow by doubling, then bisection, to the fewest that meet every
target on every one of ``seeds`` runs (same requests per run, seeds ``seed``, ``seed + 1``, ...): a p99 near
its limit must hold on each draw, not on a lucky one, so that the same question always gets the same answer
and fresh seeds confirm it; and each target's 95% confidence interval over the seeds must lie inside its limit
too (a mean inside with an interval across the limit is not met: ``interval_met``). Each configuration is then
priced through every offer that can host it.

Steady state: every run lasts until the fleet's population in flight has settled, ``STEADY_FLIGHTS`` mean times in
the system at least (``Search.steady_run``, ``sim.steady``: Little's law for the length, MSER-5 for the warm-up);
targets are judged on the requests after the warm-up, and a run whose queue still grows meets none. Plan time: the
configurations are sized cheapest first, and one that can no longer rent for less than a plan already found is not
sized further (``size_cheapest_first``); runs are made once per fleet and shared by every offer that prices it.

The recommendation is the cheapest plan whose step times are calibrated; cheaper plans on GPUs timed by an estimate
only are listed before it, flagged, never recommended silently. Each plan reports every target's mean over the seeds
with a 95% confidence interval; the recommendation and the first ``HEADROOM_PLANS`` alternatives on at most
``HEADROOM_FLEETS`` distinct fleets also their headroom: the highest arrival rate at which the same fleet still meets
every target (bisection, synthetic arrivals only). Diagnosis: what limits the recommended fleet, in words. Sensitivity:
what the recommended GPU, degree and policy need with 20% more traffic, and with prompts twice as long (their runs
count in the answer's evaluations). Mixed fleet: the cheapest plan's GPU partly replaced by another's, proposed beside
the answer when it meets every target for less (``mixes``). A rate that moves is sized at its busiest point
(``at_peak``: a curve's peak rate; a trace replayed whole), and the recommendation then bought three ways over the
whole traffic, fixed, autoscaled or reserved + bursts (``over_time``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

from ..calibrate.confidence import METRIC_ERROR_WORDS, TRUST_LIMIT_PCT, confidence
from ..hardware.calibration_store import with_gpu
from ..hardware.roofline import has_experts, smallest_fitting_tensor_parallel
from ..hardware.tables import (data_version, default_formats, gpu_names, is_slice, link_domain_cards, load_table,
                               tensor_parallel_degrees)
from ..scenario.caps import DEFAULT_CAPS
from ..scenario.config import OVERALL, Scenario, Server, apply_overrides, load_scenario, raw_rate_per_s
from ..scenario.errors import ScenarioError, excerpt
from ..scenario.labels import counted
from ..scenario.metric_table import metric, money_range
from ..scenario.origin import Origin
from ..scenario.registry import POLICY_CODES, ROUTER_CODES
from ..scenario.summary import Summary
from ..sim import stopping
from ..sim.parallel import HEARTBEAT_S, run_all, simulate_summary, workers
from ..sim.simulate import LINK_STAGE, estimated_offered_load, estimated_stage_loads
from ..sim.steady import STEADY_FLIGHTS, requests_needed
from ..sim.workload import WHOLE_TRACE_MAX_REQUESTS, trace_requests_up_to
from .cost import (BILLING_MODES, CNY_PER_USD_DEFAULT, DEFAULT_CURRENCY, PRICE_RULES, billing_for, deployment_cost,
                   firm_offer, fleet_cards, idle_cards, offer_hosting_problem, offers_table, offers_under, priced_by,
                   unit_costs)
from .diagnosis import diagnose
from .energy import energy_entry
from .mixes import cheaper_mix, cheapest_rental
from .over_time import buy_over_time
from .plan_text import NOT_SIZED
from .targets import Target, all_met
from .tuner import CANDIDATE_RANGE, TUNABLE, Objective, TuneQuestion, tune

DEFAULT_SEEDS = 3
DEFAULT_REQUESTS = 3000  # per run at least (``Search.steady_run`` lengthens it); each decision rests on ``seeds``
MAX_STEADY_REQUESTS = 60_000  # the longest a run is lengthened to reach steady state (``Search.steady_run``)
HEADROOM_STEPS = 6  # bisection steps on the arrival rate: the headroom to within 1/64 of the searched span
TUNE_RANGE = CANDIDATE_RANGE  # candidates per tuned policy
HEADROOM_PLANS = 12  # alternatives after the recommendation whose headroom may be searched (``add_headroom``) ...
HEADROOM_FLEETS = 2  # ... on at most this many distinct fleets, the recommendation's first (each costs a bisection)
DECODINGS = ("plain", "speculative")  # one token per decode iteration, or the scenario's server.speculative
T_95 = {2: 12.706, 3: 4.303, 4: 3.182, 5: 2.776, 6: 2.571, 7: 2.447, 8: 2.365, 9: 2.306, 10: 2.262}  # t(0.975, n-1)


@dataclass(frozen=True)
class Question:
    """What the planner is asked: targets, where to look, how to price and how sure to be."""

    targets: tuple[Target, ...]
    gpus: tuple[str, ...] = ()  # empty: every GPU with an offer
    offers: tuple[str, ...] = ()  # empty: every offer
    policies: tuple[str, ...] = ()  # empty: the scenario's policy
    quants: tuple[str, ...] = ()  # weight formats the customer accepts; empty: ``tables.default_formats``
    routers: tuple[str, ...] = ()  # routers to try; empty: the scenario's
    billing: str = BILLING_MODES[0]
    currency: str = DEFAULT_CURRENCY
    cny_per_usd: float = CNY_PER_USD_DEFAULT
    seeds: int = DEFAULT_SEEDS
    requests: int = DEFAULT_REQUESTS
    max_replicas: int = DEFAULT_CAPS.replicas
    budget: float | None = None  # most per month (low end, in ``currency``) a recommendation may cost; None: any
    tune: int = 0  # candidates per tunable policy tried before sizing (0: the scenario's parameters)
    decodings: tuple[str, ...] = ()  # DECODINGS to try; empty: the scenario's
    prices: str = ""  # PRICE_RULES entry; empty: firm prices when a target is a latency, every offer otherwise
    price_list: tuple = ()  # the user's own offers (``price_list.read_price_list``) in place of offers.csv; empty: it
    price_list_named: str = ""  # how the price list is named (``price_list.price_list_label``); empty: no price list

    @property
    def price_rule(self) -> str:
        """Which offers the plan rents through: the one asked for, else firm prices for a service held to a latency
        target (a spot or estimated price would not hold for it) and every offer for one held to throughput."""
        if self.prices:
            return self.prices
        return PRICE_RULES[0] if any(metric(t.key).unit == "ms" for t in self.targets) else PRICE_RULES[1]

    def __post_init__(self) -> None:
        with priced_by(self.price_list):
            self._check()

    def _check(self) -> None:
        if not self.targets:
            raise ScenarioError("the planner needs at least one target: --target CLASS.METRIC=VALUE")
        if not 2 <= self.seeds <= max(T_95):
            raise ScenarioError(f"seeds = {self.seeds} must be from 2 to {max(T_95)} (a confidence interval needs 2)")
        if not 1 <= self.max_replicas <= DEFAULT_CAPS.replicas:
            raise ScenarioError(f"max replicas = {self.max_replicas} must be from 1 to {DEFAULT_CAPS.replicas}")
        DEFAULT_CAPS.check("requests_per_run", "requests per run", self.requests)
        if self.requests < 100:
            raise ScenarioError(f"requests per run = {self.requests} must be at least 100 for a p99 to mean anything")
        for name in self.policies:
            if name not in POLICY_CODES:
                raise ScenarioError(f"policy {excerpt(name)} is not one of {', '.join(POLICY_CODES)}")
        offers = offers_table()
        for offer in self.offers:
            if offer not in offers.index:
                raise ScenarioError(f"offer {excerpt(offer)} is not in data/hardware/offers.csv")
        for decoding in self.decodings:
            if decoding not in DECODINGS:
                raise ScenarioError(f"decoding {excerpt(decoding)} is not one of {', '.join(DECODINGS)}")
        for router in self.routers:
            if router not in ROUTER_CODES:
                raise ScenarioError(f"router {excerpt(router)} is not one of {', '.join(ROUTER_CODES)}")
        for quant in self.quants:
            if quant not in load_table("quant").index:
                known = ", ".join(load_table("quant").index)
                raise ScenarioError(f"weight format {excerpt(quant)} is not one of {known}")
        if self.tune and not TUNE_RANGE[0] <= self.tune <= TUNE_RANGE[1]:
            raise ScenarioError(f"tune = {self.tune} candidates per policy must be 0 (off) or from {TUNE_RANGE[0]} "
                                f"to {TUNE_RANGE[1]:,}")
        if self.prices and self.prices not in PRICE_RULES:
            raise ScenarioError(f"prices {excerpt(self.prices)} is not one of {', '.join(PRICE_RULES)}")
        if self.budget is not None and not (math.isfinite(self.budget) and self.budget > 0):
            raise ScenarioError(f"budget = {self.budget} must be a positive amount per month")
        for gpu in self.gpus:
            if gpu not in gpu_names():
                raise ScenarioError(f"GPU {excerpt(gpu)} is not one of {', '.join(gpu_names())}")
        deployment_cost(offers.index[0], 1, self.billing, self.currency, self.cny_per_usd)  # checks the pricing


@dataclass(frozen=True)
class Config:
    """One fleet configuration before its size is known (``quant``, ``router``, ``decoding`` empty: the
    scenario's)."""

    gpu: str
    tensor_parallel: int
    policy: str
    quant: str = ""
    router: str = ""
    decoding: str = ""
    expert_parallel: bool = False  # a MoE model's experts split whole, attention data-parallel (DP + EP)

    def label(self, with_router: bool) -> str:
        """The policy, and the router when routers are compared: "wfq", "wfq + least-tokens"."""
        return f"{self.policy} + {self.router}" if with_router and self.router else self.policy


def answer_key(data: dict, question: Question) -> str:
    """The hash the answer to ``question`` on scenario ``data`` is known by (the app keeps answers under it and a
    link names it): the scenario, the question and the version of the hardware tables."""
    text = "\0".join((json.dumps(data, sort_keys=True), repr(question), data_version()))
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def config_of(plan: dict) -> Config:
    """The configuration of a priced plan."""
    return Config(plan["gpu"], plan["tensor_parallel"], plan["policy"]["name"], plan["quant"], plan["router"],
                  plan["decoding"], plan.get("expert_parallel", False))


def decoding_of(data: dict) -> str:
    """The ``DECODINGS`` entry scenario ``data`` uses."""
    return DECODINGS[1] if data.get("server", {}).get("speculative") else DECODINGS[0]


def with_decoding(data: dict, decoding: str) -> dict:
    """``data`` decoding plainly, or with its own ``server.speculative`` (which the planner never invents: the
    acceptance rate is a property of the traffic and the draft model)."""
    if decoding == decoding_of(data):
        return data
    if decoding == DECODINGS[1]:
        raise ScenarioError("decoding 'speculative' needs server.speculative in the scenario (its draft model and "
                            "the acceptance rate measured on your traffic); set it, or plan plain decoding only")
    plain = apply_overrides(data, {})
    del plain["server"]["speculative"]
    return plain


@dataclass
class Evidence:
    """The runs of one configuration at one size (and arrival-rate factor), one summary per seed."""

    summaries: list[Summary]
    met: bool

    def target_values(self, target: Target) -> list[float | None]:
        return [target.value(s) for s in self.summaries]


@dataclass
class Search:
    """Runs already made for one question (each (config, replicas, rate factor) once), and how many;
    ``policies``: a tuned ``[policy]`` table per policy name, used in place of the scenario's."""

    data: dict
    question: Question
    origin: Origin
    policies: dict = field(default_factory=dict)
    runs: dict = field(default_factory=dict)
    stages: dict = field(default_factory=dict)  # a disaggregated configuration's stage loads (``stage_loads_of_one``)
    step_times: dict = field(default_factory=dict)  # a configuration's ``step_time_entry`` (one per config)
    times: dict = field(default_factory=dict)  # a configuration's mean time in the system (``length_key``)
    count: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def scenario(self, config: Config, replicas: int, seed_offset: int = 0, rate_factor: float = 1.0) -> dict:
        base = {**self.data, "policy": self.policies[config.policy]} if config.policy in self.policies else self.data
        base = with_decoding(base, config.decoding) if config.decoding else base
        data = apply_overrides(with_gpu(base, config.gpu), {
            "server.tensor_parallel": config.tensor_parallel, "fleet.replicas": replicas,
            "server.expert_parallel": config.expert_parallel, "server.attention_data_parallel": config.expert_parallel,
            "policy.name": config.policy, "workload.num_requests": self.question.requests,
            "seed": int(self.data.get("seed", 0)) + seed_offset,
            **({"server.quant": config.quant} if config.quant else {}),
            **({"fleet.router": config.router} if config.router else {})})
        if disaggregated(data):  # both pools on the configuration's cards, the servers split between them
            prefill, decode = self.pool_sizes(config, replicas)
            data = apply_overrides(data, {**pool_keys(config, "prefill", prefill),
                                          **pool_keys(config, "decode", decode)})
        if rate_factor != 1.0:
            rate = raw_rate_per_s(data["workload"]["arrival"])
            data = apply_overrides(data, {"workload.arrival.rate_per_s": rate * rate_factor})
        return data

    def plan_config(self, plan: dict) -> Config:
        """The configuration of a priced plan (``config_of``), for the modules that cannot import this one."""
        return config_of(plan)

    def plan_scenario(self, plan: dict, seed_offset: int = 0) -> dict:
        """The scenario of a priced plan (its configuration and replicas), seed offset ``seed_offset``."""
        return self.scenario(config_of(plan), plan["replicas"], seed_offset)

    def target_entries(self, evidence: Evidence, errors: dict | None = None) -> list[dict]:
        """Each of the question's targets over ``evidence`` (``target_entries``)."""
        return target_entries(self.question, evidence, errors)

    def disaggregated(self) -> bool:
        """True when the searched scenario splits its fleet into a prefill and a decode pool."""
        return disaggregated(self.data)

    def evidence(self, config: Config, replicas: int, rate_factor: float = 1.0) -> Evidence:
        """Every seed's run of the configuration at this size (stops at the first seed that misses a target:
        the configuration then fails, whatever the others say)."""
        return self.runs_of((config, replicas, rate_factor),
                            lambda k: self.scenario(config, replicas, k, rate_factor),
                            step_time_entry(self, config, replicas)["step_errors_pct"])

    def runs_of(self, key: tuple, scenario_of: Callable[[int], dict], errors: dict | None = None,
                like: Config | None = None) -> Evidence:
        """The runs of the fleet ``key`` names, seed offset k's scenario ``scenario_of(k)``, made once, each as long
        as its steady state needs (``steady_run``), starting from the length Little's law gives at the mean time in
        the system its configuration's last settled run measured (``Search.times``), the question's requests at
        least. ``errors``: the step times' held-out errors per metric (``step_time_entry``), by which each target's
        interval widens (``interval_met``); ``like``: the configuration a fleet not keyed by one is timed like (a
        mixed fleet's base)."""
        if key in self.runs:
            return self.runs[key]
        config = length_key(key[0]) if isinstance(key[0], Config) else length_key(like) if like else None
        summaries, met = [], True
        requests = self.question.requests
        for k in range(self.question.seeds):
            data = scenario_of(k)
            rate = _constant_rate(data)
            if config in self.times and rate:
                requests = max(requests, math.ceil(1.1 * STEADY_FLIGHTS * rate * self.times[config]))
            summary, requests = self.steady_run(data, requests)
            steady = summary.get("steady")
            if config is not None and steady and not summary["system"]["unstable"] and rate:
                with self._lock:  # Little: W = L / lambda, for the next run of the configuration to start from
                    self.times[config] = steady["mean_in_flight"] / rate
            summaries.append(summary)
            if not all_met(self.question.targets, summary):
                met = False
                break
        if met:  # every seed met every target: so must each target's interval over the seeds
            met = all(interval_met(t, [t.value(s) for s in summaries], errors) for t in self.question.targets)
        evidence = Evidence(summaries, met)
        self.runs[key] = evidence
        return evidence

    def steady_run(self, data: dict, requests: int) -> tuple[Summary, int]:
        """Scenario ``data``'s run at steady state, and its length in requests: from ``requests``, lengthened while
        it meets every target but has not settled or not lasted ``STEADY_FLIGHTS`` mean times in the system (to
        ``steady.requests_needed``, doubled at least where it has not settled), up to ``MAX_STEADY_REQUESTS``. Its
        targets are judged after the warm-up (``steady_judged``); a fleet whose population in flight still grows
        in two runs of at least ``STEADY_FLIGHTS`` / 2 mean times in the system each (the second twice as long),
        or in the longest run, is unstable and meets none, however low its first requests' latencies. A run that
        misses a target is not lengthened: a queue still filling would only miss it by more."""
        growing = 0
        while True:
            workload = data.get("workload") or {}
            if workload.get("num_requests") != requests and not workload.get("trace"):
                data = apply_overrides(data, {"workload.num_requests": requests})
            summary = simulate_summary(data, self.origin)
            with self._lock:
                self.count += 1
            steady = summary.get("steady")
            if steady is None:  # a replayed trace, or all at once: no steady state to reach
                return summary, requests
            judged = steady_judged(summary, settled=True)
            settled, long_enough = steady["settled"], steady["flights"] >= STEADY_FLIGHTS
            growing += not settled and steady["flights"] >= STEADY_FLIGHTS / 2
            longest = max(self.question.requests, MAX_STEADY_REQUESTS)
            if (settled and long_enough) or growing >= 2 or requests >= longest or \
                    not all_met(self.question.targets, judged):
                return steady_judged(summary, settled), requests
            needed = requests_needed(steady, requests)  # long enough by Little's law, if it settled as it was
            requests = min(longest, needed if settled else max(2 * requests, needed))

    def replica_bound(self, config: Config) -> int:
        """The fewest replicas whose estimated offered load is under 1 (a disaggregated fleet: the fewest prefill
        servers whose pool and links are under 1, plus the fewest decode servers whose pool is)."""
        if disaggregated(self.data):
            prefill, links, decode = self.stage_loads_of_one(config)
            return math.floor(max(prefill, links)) + 1 + math.floor(decode) + 1
        load = estimated_offered_load(load_scenario(self.scenario(config, 1), origin=self.origin))
        return max(1, math.floor(load) + 1)

    def stage_loads_of_one(self, config: Config) -> tuple[float, float, float]:
        """(prefill, link, decode) loads of one prefill and one decode server of ``config`` (estimated once)."""
        if config not in self.stages:
            loads = estimated_stage_loads(load_scenario(self.scenario(config, 1), origin=self.origin))
            self.stages[config] = (loads["prefill"], loads[LINK_STAGE], loads["decode"])
        return self.stages[config]

    def pool_sizes(self, config: Config, replicas: int) -> tuple[int, int]:
        """(prefill, decode) servers of a disaggregated fleet of ``replicas``: the prefill pool's share loads both
        pools alike (in proportion to each pool's work, the links' included), at least as many in each as keep it
        under a load of 1 where the fleet is large enough, one at least in each; (1, 1) below two servers, the
        smallest such fleet."""
        if replicas < 2:
            return 1, 1
        prefill, links, decode = self.stage_loads_of_one(config)
        front = max(prefill, links)
        share = round(replicas * front / (front + decode)) if front + decode > 0 else replicas // 2
        low, high = math.floor(front) + 1, replicas - math.floor(decode) - 1
        if low <= high:
            share = min(max(share, low), high)
        share = min(max(share, 1), replicas - 1)
        return share, replicas - share

    def fewest(self, config: Config, ceiling: float = math.inf) -> tuple[int, Evidence] | str:
        """The fewest replicas meeting every target on every seed, with their runs; or why there are none. With a
        ``ceiling`` (per month, low end): the search stops, dominated, once every size still possible would cost
        more (more replicas never rent for less; at the same price a plan may still rank first, by its idle cards)."""
        low = self.replica_bound(config)
        if low > self.question.max_replicas:
            return f"needs more than {self.question.max_replicas} replicas (estimated offered load of one: {low - 1}+)"
        failed, size = low - 1, low
        while True:
            floor = floor_cost(self.question, config, failed + 1)
            if floor > ceiling:
                return dominated_note(self.question, failed + 1, floor, ceiling)
            evidence = self.evidence(config, size)
            if evidence.met:
                break
            if size >= self.question.max_replicas:
                return f"misses a target with {self.question.max_replicas} replicas"
            failed, size = size, min(2 * size, self.question.max_replicas)
        best = (size, evidence)
        while best[0] - failed > 1:
            middle = (failed + best[0]) // 2
            evidence = self.evidence(config, middle)
            if evidence.met:
                best = (middle, evidence)
            else:
                failed = middle
        return best

    def headroom_factor(self, config: Config, replicas: int) -> float | None:
        """The highest arrival-rate factor (1 = the workload's rate) at which the fleet still meets every target,
        by bisection up to where its estimated offered load reaches 1; None for a replayed trace."""
        if self.data["workload"].get("trace"):
            return None
        load = estimated_offered_load(load_scenario(self.scenario(config, replicas), origin=self.origin))
        low, high = 1.0, 1.0 / load if load > 0 else 4.0
        for _ in range(HEADROOM_STEPS):
            middle = round((low + high) / 2, 6)  # rounded: the same factors on every run of the same question
            if self.evidence(config, replicas, middle).met:
                low = middle
            else:
                high = middle
        return low


PRUNE_WAVE = 3  # a configuration's price to beat is of those this many places or more before it, cheapest first


def floor_cost(question: Question, config: Config, replicas: int) -> float:
    """The least a fleet of ``replicas`` of ``config`` rents for per month (low end) through any offer asked for;
    inf when none hosts it."""
    rental = cheapest_rental(question, config.gpu, config.tensor_parallel, replicas)
    return math.inf if rental is None else rental.per_month[0]


DOMINATED = "more than a plan already found that meets every target"  # how ``dominated_note`` says it


def dominated_note(question: Question, replicas: int, floor: float, ceiling: float) -> str:
    """Why a configuration was not sized further: ``replicas`` or more of it rent for at least ``floor`` per month,
    more than a plan already found that meets every target (``ceiling``)."""
    return (f"{NOT_SIZED}{counted(replicas, 'server')} or more rent for at least "
            f"{money_range((floor, floor), question.currency)} per month, {DOMINATED} "
            f"({money_range((ceiling, ceiling), question.currency)})")


def size_cheapest_first(search: Search, configs: list[Config], size: Callable[[Config, float], object],
                        progress: Callable[[int, int], None] | None) -> list:
    """``size(config, ceiling)`` of every configuration, in the order of ``configs``, sized cheapest first (by the
    rent of its fewest possible servers, ``Search.replica_bound``), each once the configurations ``PRUNE_WAVE``
    places or more before it in that order are sized (the same ceilings on any machine, whatever finishes first):
    a configuration whose step times are trusted is skipped (or its search stopped) once it can only rent for more
    than the cheapest trusted plan among those; one timed by an estimate, once it can only rent for more than the
    cheapest plan of any kind among those (it could then be neither recommended nor cheaper on paper). Its place
    then holds ``dominated_note``; None where the job stopped first."""
    question = search.question
    floors = []
    for config in configs:
        try:
            floors.append(floor_cost(question, config, min(search.replica_bound(config), question.max_replicas)))
        except ScenarioError:
            floors.append(0.0)  # sized first: its own search says what is wrong
    order = sorted(range(len(configs)), key=lambda i: (floors[i], i))
    trusted = [step_time_entry(search, configs[i], 1)["calibrated"] for i in order]
    done = [threading.Event() for _ in order]
    costs: list[float] = [math.inf] * len(order)  # the rent of each one's plan (inf: none)

    def sized(place: int):
        for before in range(place - PRUNE_WAVE + 1):
            while not done[before].wait(HEARTBEAT_S):
                stopping.check()
        known = range(place - PRUNE_WAVE + 1)
        ceiling = min((costs[k] for k in known if trusted[k] or not trusted[place]), default=math.inf)
        config = configs[order[place]]
        try:
            if floors[order[place]] > ceiling:
                return dominated_note(question, search.replica_bound(config), floors[order[place]], ceiling)
            result = size(config, ceiling)
            if isinstance(result, tuple):
                costs[place] = floor_cost(question, config, result[0])
            return result
        finally:
            done[place].set()

    results = run_all(sized, list(range(len(order))), progress)
    found: list = [None] * len(configs)
    for place, result in enumerate(results):
        found[order[place]] = result
    return found


def with_a_partner(search: Search, configs: list[Config], found: list, size: Callable[[Config, float], object]) -> list:
    """``found`` (``size_cheapest_first``'s) with one more configuration sized where every plan found is of one GPU
    but a configuration of another was left dominated: the cheapest of those (by the rent of its fewest possible
    servers) that meets the targets, so that a mixed fleet has a partner to try (``mixes.cheaper_mix``)."""
    gpus = {config.gpu for config, result in zip(configs, found) if isinstance(result, tuple)}
    if len(gpus) != 1:
        return found
    left = sorted((floor_cost(search.question, c, min(search.replica_bound(c), search.question.max_replicas)), i)
                  for i, (c, result) in enumerate(zip(configs, found))
                  if c.gpu not in gpus and isinstance(result, str) and DOMINATED in result)
    found = list(found)
    for _, i in left:
        found[i] = size(configs[i], math.inf)
        if isinstance(found[i], tuple):
            break
    return found


def length_key(config: Config) -> tuple:
    """What a run's length depends on (``Search.times``): the servers, not the policy or router that schedule on
    them, nor how a plan's configuration was spelled back from its entry (``config_of``)."""
    return config.gpu, config.tensor_parallel, config.expert_parallel, config.quant, config.decoding


def _constant_rate(data: dict) -> float | None:
    """The arrival rate of scenario ``data`` (req/s) when it is constant and synthetic; None otherwise."""
    arrival = (data.get("workload") or {}).get("arrival") or {}
    if (data.get("workload") or {}).get("trace") or arrival.get("shape") or arrival.get("rate_curve"):
        return None
    rate = arrival.get("rate_per_s")
    return float(rate) if isinstance(rate, (int, float)) and rate > 0 else None


def steady_judged(summary: Summary, settled: bool) -> Summary:
    """``summary`` as the planner judges it: its classes' and overall metrics those of the requests arriving after
    the warm-up (``steady``), and unstable where its population never ``settled`` (a queue that grows meets no
    target, however its first requests fared)."""
    steady = summary["steady"]
    judged = {**summary, "classes": steady["classes"], "overall": steady["overall"]}
    if not settled:
        judged["system"] = {**summary["system"], "unstable": True}
    return judged


def fleet_scenario(data: dict, question: Question, plan: dict, origin: Origin = Origin()) -> dict:
    """Scenario ``data`` run on a priced plan's fleet (GPU, weights, shape, replicas and pools, policy with its tuned
    parameters, router, decoding), with the scenario's own request count and seed: what the Lab opens for it."""
    search = Search(data, question, origin, {plan["policy"]["name"]: plan["policy"]})
    fleet = search.plan_scenario(plan)
    fleet["seed"] = data.get("seed", fleet.get("seed"))
    if "num_requests" in data.get("workload", {}):
        fleet["workload"]["num_requests"] = data["workload"]["num_requests"]
    else:
        fleet["workload"].pop("num_requests", None)
    return fleet


def disaggregated(data: dict) -> bool:
    """True when scenario ``data`` splits its fleet into a prefill and a decode pool."""
    return data.get("fleet", {}).get("mode") == "disaggregated"


def pool_keys(config: Config, pool: str, replicas: int) -> dict:
    """The overrides that put a disaggregated fleet's ``pool`` on ``config``'s cards, ``replicas`` of them."""
    keys = {f"fleet.{pool}.replicas": replicas, f"fleet.{pool}.gpu": config.gpu,
            f"fleet.{pool}.tensor_parallel": config.tensor_parallel}
    return {**keys, **({f"fleet.{pool}.quant": config.quant} if config.quant else {})}


def configurations(data: dict, question: Question, origin: Origin) -> tuple[list[Config], list[dict]]:
    """Every configuration worth sizing, and a note for each GPU left out and why."""
    asked = offers_table()
    if question.offers:
        asked = asked.loc[list(question.offers)]
    asked = asked[[g in gpu_names() and (not question.gpus or g in question.gpus) for g in asked["gpu"]]]
    offers = offers_under(question.price_rule, question.offers, question.billing)
    gpus = [g for g in dict.fromkeys(offers["gpu"]) if g in gpu_names() and (not question.gpus or g in question.gpus)]
    committed = offers_under(question.price_rule, question.offers)  # the same, a term accepted
    skipped = [{"gpu": gpu, "note": COMMITTED_NOTE if gpu in set(committed["gpu"]) else UNFIRM_NOTE}
               for gpu in dict.fromkeys(asked["gpu"]) if gpu not in gpus]
    if not gpus:
        raise ScenarioError("no GPU has an offer among those asked for" + (
            ": widen --gpus or --offers" if asked.empty else
            " billed pay as you go (those left rent on a reserved term): plan with annual prepay billing (--billing "
            "annual) to include them" if any(item["note"] == COMMITTED_NOTE for item in skipped) else
            " at a firm price (one number, read from the provider, on-demand or reserved): plan with prices 'any' "
            "(--prices any) to include estimated and spot prices"))
    policies = question.policies or (data.get("policy", {}).get("name", "fifo"),)
    scenario = load_scenario(data, origin=origin)
    quants = question.quants or default_formats(scenario.server.model, scenario.server.quant)
    routers = question.routers or (scenario.fleet.router,)
    decodings = question.decodings or (decoding_of(data),)
    for decoding in decodings:
        with_decoding(data, decoding)  # speculative decoding asked for without its settings: say so before any run
    configs = []
    for gpu in gpus:
        for quant in quants:
            named = gpu if len(quants) == 1 else f"{gpu} ({quant} weights)"
            try:
                server = load_scenario(apply_overrides(with_gpu(data, gpu), {"server.quant": quant}),
                                       origin=origin).server
                smallest = smallest_fitting_tensor_parallel(server)
            except ScenarioError as exc:
                skipped.append({"gpu": named, "note": str(exc)})
                continue
            if smallest is None:
                skipped.append({"gpu": named, "note": "the model does not fit on one slice (slices cannot be "
                                "combined)" if is_slice(gpu) else
                                f"the model does not fit even at a tensor-parallel degree of {link_domain_cards(gpu)}"})
                continue
            gpu_offers = offers[offers["gpu"] == gpu].index
            degrees = [tp for tp in tensor_parallel_degrees(gpu) if tp >= smallest
                       and any(offer_hosting_problem(o, tp) is None for o in gpu_offers)]
            if not degrees:
                skipped.append({"gpu": named, "note": offer_hosting_problem(gpu_offers[0], smallest)})
                continue
            splits = (False, True) if has_experts(server) else (False,)  # TP, and DP + EP for experts
            configs += [Config(gpu, tp, policy, quant, router, decoding, split) for tp in degrees
                        for split in splits if tp > 1 or not split for policy in policies
                        for router in routers for decoding in decodings]
    return configs, skipped


COMMITTED_NOTE = ("only reserved-term offers, which bind the renter to a term: plan with annual prepay billing to "
                  "include them")
UNFIRM_NOTE = ("no firm price (its offers are estimates, ranges or spot capacity): plan with prices 'any' to "
               "include it")


EXPERT_PARALLEL_STATUS = "; DP + EP's all-to-all and imbalance estimated, not fitted on a measured run"
EXPERT_PARALLEL_SHORT = "; DP + EP estimated"  # the same, in a table cell


def step_time_entry(search: Search, config: Config, replicas: int) -> dict:
    """What priced a configuration's step times and how far they can be trusted (``confidence``): ``calibrated``
    (it may be recommended), ``step_times`` (a few words, for tables) and ``step_times_detail`` (the whole line),
    ``priced_by`` and ``step_error_pct`` (the closest validated configuration's held-out error; None: none). A saved
    calibration of the user's own runs is trusted as such. A check within ``TRUST_LIMIT_PCT`` overall but further
    off on a metric a target of the question rests on (``step_error_pct``) makes it an estimate for this question;
    ``step_errors_pct``: a trusted check's errors per metric, by which its targets' intervals widen. Made once per
    configuration (of any size, through any offer, its servers are the same)."""
    if config in search.step_times:
        return search.step_times[config]
    server = load_scenario(search.scenario(config, replicas), origin=search.origin).server
    trust = confidence(server)
    own = bool(server.calibration) and not is_slice(config.gpu)
    unchecked = config.expert_parallel and trust.error_pct is None
    words = trust.headline + (EXPERT_PARALLEL_STATUS if unchecked else "")
    short = trust.short + (EXPERT_PARALLEL_SHORT if unchecked else "")
    errors = dict(trust.errors_pct)
    far = [found for t in search.question.targets
           if (found := step_error_of(t.key, errors)) is not None and found[1] > TRUST_LIMIT_PCT]
    trusted = trust.trusted and not far
    if trust.trusted and far:  # checked closely overall, but not on what this question asks
        name, error = far[0]
        what = f"{METRIC_ERROR_WORDS[name]} {error:.0f}% off as held out"
        words += (f"; an estimate for this question: its {what}, more than {TRUST_LIMIT_PCT:.0f}%, so never "
                  f"recommended ahead of a plan checked closer")
        short = f"{short}; estimate ({what})"
    if own:
        words = short = f"fitted on your own runs ({server.calibration})"
    entry = {"calibrated": own or trusted, "step_times": short, "step_times_detail": words,
             "priced_by": trust.priced_by, "step_error_pct": trust.error_pct,
             "step_errors_pct": {} if own or not trusted else errors}
    search.step_times[config] = entry
    return entry


def confidence_95(values: list[float | None]) -> tuple[float | None, float | None, float | None]:
    """(mean, low, high) of a 95% confidence interval on the mean over seeds (Student's t); Nones without values.
    Every target metric is a latency, a share or a rate, never below 0: where the interval reaches 0 or below (seeds
    too few or too far apart to bound it from below) ``low`` is None rather than a "0 ms" no seed supports."""
    shown = [v for v in values if v is not None]
    if len(shown) < 2:
        return (shown[0], None, None) if shown else (None, None, None)
    mean = statistics.fmean(shown)
    half = T_95[len(shown)] * statistics.stdev(shown) / math.sqrt(len(shown))
    return mean, (mean - half if mean - half > 0 else None), mean + half


# Which step-time error widens a target's interval (``confidence.METRIC_ERRORS``), by the target metric's prefix: a
# tail of the time to first token by its own p99 check where there is one; what decode paces (time per token, whole
# answers, throughput) by the time per output token's; queueing by the time to first token's. None: no widening.
TARGET_ERRORS = (("ttft_p99", ("ttft_p99", "ttft")), ("ttft_p90", ("ttft_p99", "ttft")), ("ttft", ("ttft",)),
                 ("queue", ("ttft",)), ("tpot", ("tpot",)), ("e2e", ("tpot", "ttft")),
                 ("output_tokens_per_s", ("tpot",)), ("prompt_tokens_per_s", ("ttft",)),
                 ("sla_met_per_s", ("tpot",)))


def step_error_of(key: str, errors: dict | None) -> tuple[str, float] | None:
    """(metric, held-out step-time error %) that widens target metric ``key``'s interval (``TARGET_ERRORS``): the
    first of its metrics ``errors`` has; for end-to-end latency the larger of both; None where none applies."""
    for prefix, metrics in TARGET_ERRORS:
        if key.startswith(prefix):
            found = [(m, errors[m]) for m in metrics if errors and errors.get(m) is not None]
            if not found:
                return None
            return max(found, key=lambda pair: pair[1]) if prefix == "e2e" else found[0]
    return None


def step_error_pct(key: str, errors: dict | None) -> float | None:
    """``step_error_of``'s error alone (%)."""
    found = step_error_of(key, errors)
    return None if found is None else found[1]


def pessimistic(target: Target, values: list[float | None], errors: dict | None) -> float | None:
    """The pessimistic end of ``target``'s 95% interval over the seeds, widened by the step times' held-out error
    (``step_error_pct``): its high end times (1 + error) for a latency, its low end over (1 + error) otherwise (an
    iteration that much longer does that much less); the value itself with one seed; None where the interval
    reaches zero from below (nothing bounds it)."""
    mean, low, high = confidence_95(values)
    if mean is None:
        return None
    error = (step_error_pct(target.key, errors) or 0.0) / 100.0
    end = mean if high is None else high if target.at_most else low
    if end is None:
        return None
    return end * (1.0 + error) if target.at_most else end / (1.0 + error)


def interval_met(target: Target, values: list[float | None], errors: dict | None = None) -> bool:
    """Whether the pessimistic end of ``target``'s 95% interval over the seeds, widened by the step times' error
    (``pessimistic``), lies inside its limit: a mean inside the limit with an interval (or its error) across it is
    not met. With one value (no interval) the value, widened, decides."""
    end = pessimistic(target, values, errors)
    return end is not None and meets_limit(end, target)


def meets_limit(value: float, target: Target) -> bool:
    return value <= target.limit if target.at_most else value >= target.limit


def best_policies(sized: dict[Config, tuple[int, Evidence]], targets: tuple[Target, ...]) -> list:
    """Per GPU, weight format, decoding and tensor-parallel degree, the policy (and router) that needs the fewest
    replicas,
    ties going to the one with the most to spare on its tightest target (then to the order asked): [(config,
    (replicas, evidence), the other policies (+ routers, when compared) that meet the targets with as many
    replicas)]."""
    def spare(evidence: Evidence) -> float:
        return min(t.slack(confidence_95(evidence.target_values(t))[0]) for t in targets)

    groups: dict[tuple[str, str, str, int, bool], list[Config]] = {}
    for config in sized:
        groups.setdefault((config.gpu, config.quant, config.decoding, config.tensor_parallel,
                           config.expert_parallel), []).append(config)
    chosen = []
    for members in groups.values():
        best = min(members, key=lambda c: (sized[c][0], -spare(sized[c][1])))
        with_router = len({c.router for c in members}) > 1
        same = [c.label(with_router) for c in members if c is not best and sized[c][0] == sized[best][0]]
        chosen.append((best, sized[best], same))
    return chosen


TRAFFIC_GROWTH = 1.2  # "+20% traffic"
PROMPT_GROWTH = 2  # "prompts twice as long"
_TOKEN_KEYS = ("value", "low", "high", "mean", "max")  # a token distribution's parameters in tokens


def scaled_prompts(data: dict, factor: int) -> dict:
    """``data`` with every synthetic class's prompt lengths (each parameter in tokens) ``factor`` times longer."""
    scaled = apply_overrides(data, {})
    for cls in scaled["workload"]["classes"]:
        dist = cls["prompt_tokens"]
        cls["prompt_tokens"] = {k: (v * factor if k in _TOKEN_KEYS and v is not None else v) for k, v in dist.items()}
    return scaled


def sensitivity(search: Search, best: dict) -> list[dict]:
    """What the recommended GPU, degree and policy need when the workload grows: the fewest replicas and their
    cost through the same offer with ``TRAFFIC_GROWTH`` x the arrival rate, and with prompts ``PROMPT_GROWTH`` x
    as long (synthetic workloads only: a replayed trace keeps its own)."""
    if search.data["workload"].get("trace"):
        return []
    data = search.data
    rate = raw_rate_per_s(data["workload"]["arrival"])
    changes = [(f"+{TRAFFIC_GROWTH - 1:.0%} traffic", apply_overrides(data, {"workload.arrival.rate_per_s":
                                                                              rate * TRAFFIC_GROWTH})),
               (f"prompts {PROMPT_GROWTH}x as long", scaled_prompts(data, PROMPT_GROWTH))]
    config = config_of(best)
    q = search.question

    def size(variant: dict):
        grown = Search(variant, q, search.origin, search.policies, times=dict(search.times))
        try:
            return grown.fewest(config), grown
        except stopping.Stopped:
            raise  # its place stays empty: not sized
        except ScenarioError as exc:
            return str(exc), grown

    answers = []
    for (label, _), sized in zip(changes, run_all(size, [variant for _, variant in changes])):
        if sized is None:
            answers.append({"change": label, "note": f"{NOT_SIZED}{stopping.cut_reason()}"})
            continue
        found, grown = sized
        search.count += grown.count
        if isinstance(found, str):
            answers.append({"change": label, "note": found})
            continue
        replicas = found[0]
        cards = fleet_cards(config.gpu, config.tensor_parallel, replicas)
        cost = deployment_cost(best["offer"], cards, best["monthly_cost"]["billing"], q.currency, q.cny_per_usd)
        answers.append({"change": label, "replicas": replicas, "cards": cards,
                        "monthly_cost": {"low": cost.per_month[0], "high": cost.per_month[1], "currency": q.currency}})
    return answers


def diagnosis(search: Search, best: dict) -> list[str]:
    """What limits the recommended fleet at the workload's load, in words (``engine.decide.diagnosis``; its first seed's
    run)."""
    config = config_of(best)
    evidence = search.evidence(config, best["replicas"])  # already run: the search kept it
    scenario = load_scenario(search.scenario(config, best["replicas"]), origin=search.origin)
    return [finding.text for finding in diagnose(scenario, evidence.summaries[0])]


def add_headroom(search: Search, plans: list[dict]) -> None:
    """Fill in ``headroom_rate_per_s`` of these plans on the first ``HEADROOM_FLEETS`` distinct fleets (one
    bisection per fleet, on all cores); the others keep None."""
    fleets = list(dict.fromkeys((config_of(p), p["replicas"]) for p in plans))[:HEADROOM_FLEETS]
    factors = dict(zip(fleets, run_all(lambda fleet: search.headroom_factor(*fleet), fleets)))
    arrival = search.data["workload"].get("arrival")
    rate = raw_rate_per_s(arrival) if arrival else None
    for p in plans:
        factor = factors.get((config_of(p), p["replicas"]))
        p["headroom_rate_per_s"] = factor * rate if factor is not None and rate else None


def target_entries(question: Question, evidence: Evidence, errors: dict | None = None) -> list[dict]:
    """Each target with its mean over the seeds, the 95% confidence interval, and that interval's pessimistic end
    widened by the step times' held-out error (``pessimistic``; ``step_error_pct`` the error it widened by, None:
    none applied), which decides whether the target is met."""
    targets = []
    for target in question.targets:
        values = evidence.target_values(target)
        mean, low, high = confidence_95(values)
        targets.append({"target": target.describe(), "class": target.cls, "metric": target.key, "limit": target.limit,
                        "value": mean, "ci95": [low, high], "pessimistic": pessimistic(target, values, errors),
                        "step_error_pct": step_error_pct(target.key, errors)})
    return targets


def pool_split_entry(search: Search, config: Config, replicas: int) -> dict:
    """A disaggregated plan's servers in each pool ({} for a colocated one)."""
    if not disaggregated(search.data):
        return {}
    prefill, decode = search.pool_sizes(config, replicas)
    return {"prefill_replicas": prefill, "decode_replicas": decode}


def plan_entry(search: Search, config: Config, replicas: int, evidence: Evidence, offer: str, router: str) -> dict:
    """One priced plan: the JSON contract's P (``router``: the scenario's, unless the configuration sets one)."""
    q, data = search.question, search.data
    cards = fleet_cards(config.gpu, config.tensor_parallel, replicas)
    billing = billing_for(offer, q.billing)  # annual prepay only where the offer quotes it
    cost = deployment_cost(offer, cards, billing, q.currency, q.cny_per_usd)
    per_million = [[unit_costs(cost.per_hour[end], s["overall"])["per_million_output_tokens"]
                    for s in evidence.summaries] for end in (0, 1)]
    first = evidence.summaries[0]
    return {
        "offer": offer, "gpu": config.gpu, "quant": config.quant or data.get("server", {}).get("quant", Server().quant),
        "tensor_parallel": config.tensor_parallel, "expert_parallel": config.expert_parallel, "replicas": replicas,
        **pool_split_entry(search, config, replicas),
        "cards": cards, "idle_cards": idle_cards(offer, cards),
        "router": config.router or router, "decoding": config.decoding or decoding_of(data),
        "policy": search.policies.get(config.policy, {"name": config.policy}),
        **step_time_entry(search, config, replicas),
        "monthly_cost": {"low": cost.per_month[0], "high": cost.per_month[1], "currency": q.currency,
                         "billing": billing, "billing_asked": q.billing, "estimate": bool(cost.estimate)},
        "price": price_entry(offer),
        "cost_per_1m_output_tokens": {"low": _mean(per_million[0]), "high": _mean(per_million[1])},
        "energy": energy_entry([(config.gpu, cards)], [s["overall"]["output_tokens_per_s"] for s in evidence.summaries],
                               q.currency, q.cny_per_usd),
        "headroom_rate_per_s": None,  # ``add_headroom`` fills it in for the plans shown first
        "targets": target_entries(q, evidence, step_time_entry(search, config, replicas)["step_errors_pct"]),
        "metrics": {**first["classes"], OVERALL: first["overall"]},
        "steady": steady_entry(first),
        "gpu_busy_frac": first["system"]["gpu_busy_frac"],
    }


def steady_entry(summary: Summary) -> dict:
    """How a plan's first run reached steady state: its length in requests, the arrival time its warm-up ended
    (requests after it are judged), the mean in flight after it (L of Little's law), how many mean times in the
    system the run lasted, and whether its population settled; the length alone for a run without one (a trace)."""
    steady = summary.get("steady")
    if not steady:
        return {"requests": summary["run"]["requests"]}
    return {"requests": summary["run"]["requests"], "warmup_s": steady["warmup_s"],
            "mean_in_flight": steady["mean_in_flight"], "flights": steady["flights"], "settled": steady["settled"]}


def price_entry(offer: str) -> dict:
    """How far the offer's price can be trusted: its terms, whether it is firm, and when it was quoted."""
    row = offers_table().loc[offer]
    return {"terms": str(row["terms"]), "firm": firm_offer(offer), "as_of": str(row["as_of"]),
            "annual_discount": float(row["annual_discount"])}


def _mean(values: list[float | None]) -> float | None:
    shown = [v for v in values if v is not None]
    return statistics.fmean(shown) if shown else None


def rank(plans: list[dict]) -> list[dict]:
    """Cheapest first (low end of the monthly cost, then its high end); at the same cost the plan that leaves fewer
    of its rented cards idle (an offer rents whole units: a plan on one card of an 8-card node pays for 8), then
    fewer cards; ties keep their order."""
    return sorted(plans, key=lambda p: (p["monthly_cost"]["low"], p["monthly_cost"]["high"], p.get("idle_cards", 0),
                                        p["cards"]))


def recommend(ranked: list[dict], budget: float | None = None) -> tuple[Optional[dict], list[dict]]:
    """The recommendation (the cheapest calibrated plan, else the cheapest) and the alternatives in rank order:
    a cheaper plan timed by an estimate only stays among the alternatives, flagged by its ``calibrated``. With a
    ``budget`` (per month, low end) nothing dearer is recommended: None then, and every plan stays an
    alternative."""
    affordable = [p for p in ranked if budget is None or p["monthly_cost"]["low"] <= budget]
    if not affordable:
        return None, list(ranked)
    best = next((p for p in affordable if p["calibrated"]), affordable[0])
    return best, [p for p in ranked if p is not best]


def tuned_policies(data: dict, question: Question, origin: Origin, policies: list[str],
                   heartbeat: Callable[[], None] | None = None) -> tuple[dict, int]:
    """With ``question.tune``: each tunable policy's parameters tuned on the scenario's own fleet (the first
    target the objective, the others constraints), ``question.tune`` candidates each. A tuning is used only when
    its best point meets every target there and the objective moved (not flat); otherwise the scenario's
    parameters stay, and the answer says why. Returns ({policy: what was found}, runs made). ``heartbeat`` is
    called now and then while the tunings run (the app's progress bar)."""
    if not question.tune:
        return {}, 0
    first, *others = question.targets
    found, runs = {}, 0
    for name in (p for p in policies if p in TUNABLE):
        answer = tune(data, TuneQuestion(Objective(first.cls, first.key, first.at_most), tuple(others), (name,),
                                         candidates=question.tune, seeds=1, requests=question.requests), origin,
                      None if heartbeat is None else lambda done, total: heartbeat())
        runs += answer["runs"]
        best = answer["best"]
        used = best["feasible"] and not answer["flat"] and best["policy"]["name"] == name
        why = ("" if used else "the objective did not move at the scenario's load" if answer["flat"] else
               "no tuned point met every target on the scenario's own fleet" if not best["feasible"] else
               "the scenario's own parameters were best")
        found[name] = {"policy": best["policy"], "settings": best["settings"], "used": used, "why": why,
                       "candidates": answer["evaluations"]}
    return found, runs


def plan(data: dict, question: Question, origin: Origin = Origin(),
         progress: Callable[[int, int, str], None] | None = None) -> dict:
    """Answer ``question`` on scenario ``data``: ``{"recommendation", "alternatives", "not_possible", "data_version",
    "run"}`` (``data_version``: the hardware tables it priced and timed with, ``tables.data_version``;
    ``progress(done, total, stage)``: runs done of a stage's, the stage one of ``STAGES``), within
    the limit ``plan_s`` of wall-clock time: when it runs out, the configurations not yet sized are listed as not
    possible for that reason, the searches after the sizing are left out, and ``run.cut`` says so."""
    started = time.perf_counter()
    with stopping.job("the plan", origin.caps.plan_s, "plan_s", background=True), priced_by(question.price_list):
        answer, runs, cut = _plan(data, question, origin, progress)
    return {**answer, "data_version": data_version(),
            "run": {"wall_s": time.perf_counter() - started, "evaluations": runs, "workers": workers(), "cut": cut}}


SCALING_KEYS = ("autoscale", "spot_interruptions_per_hour", "spot_notice_s")  # fleet keys of a fleet that moves


def without_scaling(data: dict) -> tuple[dict, dict]:
    """Scenario ``data`` with a fixed fleet (no autoscaler, its pools' neither, no spot replicas), and the fleet
    keys taken out (the pools' autoscalers are dropped: the planner sizes the pools itself)."""
    data = apply_overrides(data, {})
    fleet = data.get("fleet", {})
    for pool in ("prefill", "decode"):
        (fleet.get(pool) or {}).pop("autoscale", None)
    return data, {key: fleet.pop(key) for key in SCALING_KEYS if key in fleet}


def at_peak(data: dict, scenario: Scenario) -> tuple[dict, dict | None]:
    """Scenario ``data`` as the planner sizes it: a fixed fleet (no autoscaler), and for a rate that moves (a curve
    or a shape) a constant rate at its busiest point, which a fixed fleet must hold (a run's first requests would
    be the curve's start); with what that rate is (None for a constant one). A replayed trace is sized whole, up to
    ``WHOLE_TRACE_MAX_REQUESTS`` of it (its first requests alone would miss its bursts): its traffic says how many
    (``trace_requests`` None: the file holds more, not read)."""
    data, _ = without_scaling(data)
    arrival = scenario.workload.arrival
    if scenario.workload.trace is not None:  # counted up to one past what is sized: the rest is never read
        counted = trace_requests_up_to(scenario, WHOLE_TRACE_MAX_REQUESTS + 1)
        return data, {"trace_requests": counted if counted <= WHOLE_TRACE_MAX_REQUESTS else None,
                      "sized_requests": min(counted, WHOLE_TRACE_MAX_REQUESTS)}
    curve = arrival.curve()
    if curve is None:
        return data, None
    peak = float(curve.rates_per_s.max())
    constant = {"process": arrival.process, "rate_per_s": peak, **({"cv": arrival.cv} if arrival.process == "gamma"
                                                                      else {})}
    return apply_overrides(data, {"workload.arrival": constant}), {"peak_rate_per_s": peak,
                                                                    "mean_rate_per_s": arrival.rate_per_s}


STAGES = ("Sizing every configuration", "Pricing the whole traffic three ways")  # what ``plan``'s progress reports


def staged(progress: Callable[[int, int, str], None] | None, stage: str) -> Callable[[int, int], None] | None:
    """``progress`` of one stage, as the pools call it (runs done, of how many)."""
    return None if progress is None else lambda done, total: progress(done, total, stage)


def _plan(data: dict, question: Question, origin: Origin, progress) -> tuple[dict, int, str | None]:
    """``plan``'s answer without its ``run`` block, the runs it made, and why it was cut short (None: it was
    not)."""
    scenario = load_scenario(data, origin=origin)  # a bad scenario fails here, once, with its own message
    if scenario.fleet.groups:  # the planner sizes fleets of one GPU at a time, and proposes a mix itself
        data = apply_overrides(data, {})
        del data["fleet"]["groups"]
    moving, scaling = without_scaling(data)
    data, traffic = at_peak(data, scenario)
    if traffic and "sized_requests" in traffic:  # each run of the sizing replays the whole trace, not ``requests``
        question = dataclasses.replace(question, requests=max(traffic["sized_requests"], 100))
    for target in question.targets:  # and a target naming no class, before any run
        target.check_class(c.name for c in scenario.workload.classes)
    configs, not_possible = configurations(data, question, origin)
    tuned, tuning_runs, cut = {}, 0, None
    try:
        tuned, tuning_runs = tuned_policies(data, question, origin, sorted({c.policy for c in configs}),
                                            None if progress is None else lambda: progress(0, len(configs),
                                                                                           STAGES[0]))
    except stopping.Stopped as exc:
        cut = stopping.cut_short(exc)
    search = Search(data, question, origin, {name: t["policy"] for name, t in tuned.items() if t["used"]})
    search.count += tuning_runs

    def size(config: Config, ceiling: float):
        try:
            return search.fewest(config, ceiling)
        except stopping.Stopped:
            raise  # its place stays empty: not sized
        except ScenarioError as exc:
            return str(exc)

    sized, failed = {}, {}
    several_quants, several_routers = len({c.quant for c in configs}) > 1, len({c.router for c in configs}) > 1
    several_decodings = len({c.decoding for c in configs}) > 1
    found_all = (size_cheapest_first(search, configs, size, staged(progress, STAGES[0])) if cut is None
                 else [None] * len(configs))
    cut = cut or stopping.cut_reason()
    if cut is None:
        found_all = with_a_partner(search, configs, found_all, size)
    for config, found in zip(configs, found_all):
        if found is None:
            found = f"{NOT_SIZED}{cut}"
        if isinstance(found, str):  # one line per GPU, format, degree and reason, naming every policy it holds for
            named = f"{config.gpu} ({config.quant} weights)" if several_quants else config.gpu
            named += f", {config.decoding} decoding" if several_decodings else ""
            failed.setdefault((named, config.tensor_parallel, config.expert_parallel, found), []).append(
                config.label(several_routers))
        else:
            sized[config] = found
    not_possible += [{"gpu": gpu, "tensor_parallel": tp, "expert_parallel": split, "policies": policies, "note": note}
                     for (gpu, tp, split, note), policies in failed.items()]
    plans = []
    offers = offers_under(question.price_rule, question.offers, question.billing)
    for config, (replicas, evidence), same in best_policies(sized, question.targets):
        for offer in offers[offers["gpu"] == config.gpu].index:
            if offer_hosting_problem(offer, config.tensor_parallel):
                continue
            plans.append({**plan_entry(search, config, replicas, evidence, offer, scenario.fleet.router),
                          "same_fleet_policies": same})
    ranked = rank(plans)
    recommendation, alternatives = recommend(ranked, question.budget)
    mix, mix_note = None, f"No mixed fleet was searched: {cut}." if cut else ""
    if cut is None:
        try:
            # against the recommendation (what the customer would otherwise rent), not a cheaper estimate
            base_first = [recommendation] * (recommendation is not None) + [p for p in ranked
                                                                           if p is not recommendation]
            mix, mix_note = cheaper_mix(search, base_first)
        except stopping.Stopped as exc:
            mix_note = f"No mixed fleet was searched: {stopping.cut_short(exc)}."
    add_headroom(search, [p for p in (recommendation, *alternatives[:HEADROOM_PLANS]) if p is not None])
    grown = sensitivity(search, recommendation) if recommendation and stopping.cut_reason() is None else []
    over_time = None
    if recommendation and stopping.cut_reason() is None:
        try:
            over_time = buy_over_time(fleet_scenario(moving, question, recommendation, origin), scaling,
                                      recommendation, question, origin, staged(progress, STAGES[1]))
        except stopping.Stopped as exc:
            over_time = {"note": stopping.cut_short(exc)}
        except ScenarioError as exc:  # e.g. no offer bills this GPU by use: the plan stands, priced fixed
            over_time = {"note": str(exc)}
        if over_time and over_time.get("strategies"):  # the headline says what the day said of the same fleet
            fixed = over_time["strategies"][0]
            recommendation["over_the_traffic"] = {"meets": fixed["meets_targets"], "targets": fixed["targets"]}
    budget = {"per_month": question.budget, "currency": question.currency} if question.budget else None
    return ({"recommendation": recommendation, "alternatives": alternatives, "not_possible": not_possible,
             "budget": budget, "tuned": tuned, "mix": mix, "mix_note": mix_note,
             "diagnosis": diagnosis(search, recommendation) if recommendation else [],
             "sensitivity": grown, "traffic": traffic, "over_time": over_time},
            search.count, cut or stopping.cut_reason())
