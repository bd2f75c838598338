"""Traffic in business terms: users x requests per user per day x peak factor, as the peak arrival rate that a
fleet must serve (the planner sizes for the peak, not the daily mean)."""

from __future__ import annotations

import math

from ..scenario.errors import ScenarioError

SECONDS_PER_DAY = 86_400.0


def peak_rate_per_s(users: float, requests_per_user_per_day: float, peak_factor: float) -> float:
    """The peak arrival rate: the day's mean rate (users x requests per user per day / 86,400 s) times the peak
    factor (peak hour's rate over the day's mean; 1 = flat traffic)."""
    for name, value, low in (("users", users, 1.0), ("requests per user per day", requests_per_user_per_day, 0.0),
                             ("peak factor", peak_factor, 1.0)):
        if not math.isfinite(value) or value < low or (low == 0.0 and value == 0.0):
            bound = "above 0" if low == 0.0 else f"of at least {low:g}"
            raise ScenarioError(f"{name} = {value:g} must be a number {bound}")
    return users * requests_per_user_per_day / SECONDS_PER_DAY * peak_factor


def describe(users: float, requests_per_user_per_day: float, peak_factor: float) -> str:
    """"20,000 users x 30 requests a day x peak factor 3 = 20.8 req/s at the peak"."""
    rate = peak_rate_per_s(users, requests_per_user_per_day, peak_factor)
    return (f"{users:,.0f} users x {requests_per_user_per_day:,g} requests a day x peak factor {peak_factor:g} = "
            f"{rate:,.3g} req/s at the peak")


def describe_mean(users: float, requests_per_user_per_day: float) -> str:
    """"20,000 users x 30 requests a day = 6.94 req/s on average" (a day's shape gives the peak)."""
    rate = peak_rate_per_s(users, requests_per_user_per_day, 1.0)
    return f"{users:,.0f} users x {requests_per_user_per_day:,g} requests a day = {rate:,.3g} req/s on average"
