"""Every preset states its estimated offered load in its header, equal to the estimate the Lab shows; the preset
picker reads it from there."""

import pytest

from conftest import SCENARIOS
from engine.scenario.config import load_scenario
from engine.sim.simulate import estimated_offered_load, stated_load
from ui.state import preset_title

PRESETS = sorted(SCENARIOS.glob("*.toml"))


@pytest.mark.parametrize("path", PRESETS, ids=lambda p: p.name)
def test_the_header_states_the_offered_load(path):
    stated = stated_load(path)
    assert stated is not None, f"{path.name}: add '# Offered load X.XX (an estimate: ...) at R req/s.' to its header"
    assert stated == round(estimated_offered_load(load_scenario(path)), 2), f"{path.name}: the header is stale"


def test_the_picker_shows_the_stated_load():
    article = SCENARIOS / "article_mixed_8xa100.toml"
    assert preset_title(article.name).endswith(f"(offered load {stated_load(article):.2f})")
