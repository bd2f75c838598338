"""Every preset states its estimated offered load in its header, equal to the estimate the Lab shows; the preset
picker reads it from there. The engine presets run the token budget their engine starts with on their card."""

import pytest

from conftest import SCENARIOS
from engine.hardware.tables import default_batched_tokens
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


@pytest.mark.parametrize("name", ["engine_vllm_v1.toml", "engine_sglang.toml", "engine_tensorrt_llm.toml"])
def test_an_engine_preset_runs_the_token_budget_its_engine_starts_with(name):
    """The presets that show an engine's defaults use the budget ``engine_budgets.csv`` gives that engine on that card
    (vLLM 2,048 on an A100, SGLang's chunk 8,192 there, TensorRT-LLM 8,192)."""
    server = load_scenario(SCENARIOS / name).server
    assert server.max_batched_tokens == default_batched_tokens(server.engine, server.gpu, server.ranks)
