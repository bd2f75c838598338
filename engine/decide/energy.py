"""Energy a fleet draws per million output tokens, and what that energy costs, as an upper bound.

Bound: every card of the plan drawing its board power limit (``gpus.csv`` ``board_power_w``, the vendor's TDP/TBP
with its source) for the whole time the fleet is held, while it generates tokens at the simulated steady-state rate:
    kWh per 1M output tokens = cards x board power (W) / output tokens per second x 1e6 / 3.6e6 (J per kWh).
A card under load draws less than its limit and an idle one much less, so the figure is "at most"; the host, the
network and the cooling are not in it. A slice (MIG) is charged its card's limit times its share of the card's
compute (``sm_fraction``). The measured operator tables carry per-kernel energy for too few kernels to price an
iteration (aiconfigurator-core 0.12.0 records power in 3 of its 736 tables: B200 attention and MoE under vLLM
0.22.0), so no figure here comes from them.

Cost: that energy at ``pricing_conventions.csv``'s ``electricity_usd_per_kwh`` (its source there), in the plan's
currency. A rental's price already includes its electricity; the figure is for owned cards and for comparison.
"""

from __future__ import annotations

from ..hardware.tables import gpu_row
from ..scenario.config import Scenario, fleet_servers
from .cost import ELECTRICITY_USD_PER_KWH, convert, fleet_cards

J_PER_KWH = 3.6e6


def board_power_w(gpu: str) -> float:
    """The board power limit of one card of ``gpu`` in W (a slice: its share of its card's, ``tables.gpu_row``;
    every card has one, ``tests/test_tables.py``)."""
    return float(gpu_row(gpu)["board_power_w"])


def kwh_per_million_tokens(power_w: float, tokens_per_s: float) -> float | None:
    """At most this many kWh per million tokens: cards drawing ``power_w`` together while producing
    ``tokens_per_s`` (None when nothing is produced)."""
    if not tokens_per_s > 0:
        return None
    return power_w / tokens_per_s * 1e6 / J_PER_KWH


def fleet_parts(scenario: Scenario) -> list[tuple[str, int]]:
    """(GPU, cards) of each group or pool of ``scenario``'s fleet."""
    return [(server.gpu, fleet_cards(server.gpu, server.tensor_parallel, replicas))
            for server, replicas in fleet_servers(scenario)]


def energy_entry(parts: list[tuple[str, int]], output_tokens_per_s: list[float], currency: str,
                 cny_per_usd: float) -> dict:
    """The energy of a fleet of ``parts`` ((GPU, cards) each): one card's board power (None when the fleet mixes
    GPUs), all the cards' together, the most kWh per million output tokens (the mean over the seeds' steady-state
    rates) and its cost at the conventional electricity price in ``currency``."""
    powers = {gpu: board_power_w(gpu) for gpu, _ in parts}
    fleet_w = sum(cards * powers[gpu] for gpu, cards in parts)
    figures = [kwh for kwh in (kwh_per_million_tokens(fleet_w, rate) for rate in output_tokens_per_s)
               if kwh is not None]
    kwh = sum(figures) / len(figures) if figures else None
    price = convert(ELECTRICITY_USD_PER_KWH, "USD", currency, cny_per_usd)
    return {"card_power_w": next(iter(powers.values())) if len(powers) == 1 else None, "fleet_power_w": fleet_w,
            "kwh_per_1m_output_tokens_max": kwh, "price_per_kwh": price,
            "cost_per_1m_output_tokens_max": None if kwh is None else kwh * price}
