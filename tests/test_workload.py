"""Token-length and arrival distributions: their means, caps and seeding."""

import numpy as np
import pytest

import engine
from engine.scenario.config import Arrival, TokenDist
from engine.sim.distributions import sample_gaps_s, sample_tokens

N = 200_000


def rng():
    return np.random.default_rng(123)


@pytest.mark.parametrize("dist, mean", [
    (TokenDist("constant", value=7), 7.0),
    (TokenDist("uniform", low=10, high=20), 15.0),
    (TokenDist("geometric", mean=64.0), 64.0),
    (TokenDist("lognormal", mean=512.0, cv=1.0), 512.0),
])
def test_token_means(dist, mean):
    values = sample_tokens(dist, N, rng())
    assert values.min() >= 1
    # 5 standard errors of the sample mean (cv <= 1 here).
    assert values.mean() == pytest.approx(mean, abs=5 * max(values.std(), 1e-9) / np.sqrt(N) + 0.5)


def test_uniform_is_inclusive_and_max_clips():
    values = sample_tokens(TokenDist("uniform", low=3, high=5), N, rng())
    assert set(np.unique(values)) == {3, 4, 5}
    capped = sample_tokens(TokenDist("lognormal", mean=500.0, cv=2.0, max=600), N, rng())
    assert capped.max() == 600


def test_lognormal_cv():
    values = sample_tokens(TokenDist("lognormal", mean=1000.0, cv=0.5), N, rng()).astype(float)
    assert values.std() / values.mean() == pytest.approx(0.5, rel=0.03)


@pytest.mark.parametrize("arrival, cv", [(Arrival("poisson", 4.0), 1.0), (Arrival("gamma", 4.0, cv=3.0), 3.0),
                                         (Arrival("gamma", 4.0, cv=0.5), 0.5)])
def test_gap_rate_and_burstiness(arrival, cv):
    gaps = sample_gaps_s(arrival, N, rng())
    assert gaps.mean() == pytest.approx(0.25, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.05)


def test_duration_bounds_the_arrivals():
    data = {"workload": {"duration_s": 100.0, "arrival": {"process": "poisson", "rate_per_s": 50.0},
                         "classes": [{"name": "a", "share": 0.25, "prompt_tokens": {"dist": "constant", "value": 1},
                                      "output_tokens": {"dist": "constant", "value": 1}},
                                     {"name": "b", "share": 0.75, "prompt_tokens": {"dist": "constant", "value": 1},
                                      "output_tokens": {"dist": "constant", "value": 1}}]}}
    frame = engine.simulate(engine.load_scenario(data)).requests
    assert frame["arrival_s"].max() <= 100.0
    assert len(frame) == pytest.approx(5000, rel=0.1)
    assert (frame["class"] == "b").mean() == pytest.approx(0.75, abs=0.03)
