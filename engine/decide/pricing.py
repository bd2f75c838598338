"""The rent of a scenario's fleet through the offers a visitor chose, with what each unit of work costs at the
simulated load: one call per page, whose helper only lays the answer out.

A single-GPU fleet rents through the chosen offer (until one is chosen, the cheapest firm price that hosts it, else
the cheapest that does: ``cost.cheapest_offer``); a mixed fleet rents each group through its own cheapest offer
(``cost.group_rentals``), the parts added up.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..scenario.config import Scenario, fleet_servers
from ..scenario.summary import ClassMetrics
from .cost import (DeploymentCost, combined_cost, deployment_cost, fleet_cards, group_rentals, idle_cards,
                   offer_hosting_problem, unit_costs)


@dataclass(frozen=True)
class Rental:
    """One group's rent: ``cards`` cards of ``gpu`` through ``cost.offer``, and the cards the offer's whole units
    rent beyond them."""

    gpu: str
    cards: int
    cost: DeploymentCost
    idle_cards: int


@dataclass(frozen=True)
class FleetRent:
    """A fleet's rent: the whole (``cost``; a mixed fleet's parts added) and its parts, one per group; why the
    chosen offer cannot host the fleet's tensor-parallel group (None when it can)."""

    cost: DeploymentCost
    rentals: tuple[Rental, ...]
    hosting_problem: str | None = None

    def unit_costs(self, overall: ClassMetrics) -> tuple[dict, dict]:
        """Unit costs (``cost.unit_costs``) at the low and the high end of the rent, at the load ``overall``."""
        low, high = self.cost.per_hour
        return unit_costs(low, overall), unit_costs(high, overall)


def price_problem(scenario: Scenario) -> str | None:
    """Why this scenario's fleet has no price (no real GPU to rent), or None."""
    if scenario.server.step_model != "roofline":
        return "Choose the roofline step model (a real GPU) to price this fleet."
    return None


def fleet_size(scenario: Scenario) -> tuple[str, int, int]:
    """A single-GPU fleet's (GPU, cards it occupies, tensor-parallel degree)."""
    server = scenario.server
    return server.gpu, fleet_cards(server.gpu, server.tensor_parallel, scenario.fleet.replicas), \
        server.tensor_parallel


def offer_rent(gpu: str, cards: int, tensor_parallel: int, offer: str, billing: str, currency: str,
               cny_per_usd: float) -> FleetRent:
    """``cards`` cards of ``gpu`` in groups of ``tensor_parallel`` rented through ``offer``."""
    cost = deployment_cost(offer, cards, billing, currency, cny_per_usd)
    return FleetRent(cost, (Rental(gpu, cards, cost, idle_cards(offer, cards)),),
                     offer_hosting_problem(offer, tensor_parallel))


def group_rent(scenario: Scenario, billing: str, currency: str, cny_per_usd: float) -> FleetRent | str:
    """A mixed fleet rented group by group through each one's cheapest offer, or the sentence saying which GPU
    no offer rents (the fleet then has no price)."""
    groups = [(s.gpu, s.tensor_parallel, n) for s, n in fleet_servers(scenario)]
    rentals = group_rentals(groups, billing, currency, cny_per_usd)
    missing = [gpu for gpu, _, cost in rentals if cost is None]
    if missing:
        return f"No rental offer for {missing[0]} in data/hardware/offers.csv: this mixed fleet cannot be priced."
    parts = tuple(Rental(gpu, cards, cost, idle_cards(cost.offer, cards)) for gpu, cards, cost in rentals)
    return FleetRent(combined_cost([r.cost for r in parts]), parts)
