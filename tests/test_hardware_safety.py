"""Hardware & Cost in hostile or careless hands: a visitor may add a calibration under a new name but never replace
one that other scenarios name, nor fill the disk with them; a scenario on the fixed step model, mixed or
disaggregated, opens the page like any other and is left unchanged by the visit."""

from __future__ import annotations

import dataclasses
import json

import pytest
from streamlit.testing.v1 import AppTest

import engine
from engine.scenario.caps import DEFAULT_CAPS
from conftest import REPO, SCENARIOS, shown
from engine.calibrate.bench_results import read_result
from engine.calibrate.user_calibration import calibrate
from engine.cli import main
from engine.hardware import calibration_store
from engine.hardware.calibration_store import names, save, save_new
from engine.scenario.config import Server, read_toml
from ui import state

VLLM = REPO / "tests" / "fixtures" / "vllm_bench_serve_detailed.json"
H100 = Server(step_model="roofline", gpu="H100-80G", model="Llama-3.1-8B", quant="bf16", kv_quant="bf16")
OPERATORS_ACT = "python -m engine calibrate FILE --gpu NAME --save NAME --replace"
PAGE_SECTIONS = {"Does it fit? Memory of one card", "Iteration time", "Your own measurements", "Rental offers",
                 "Cheapest rental that meets a target"}


@pytest.fixture(autouse=True)
def private_store(tmp_path, monkeypatch):
    monkeypatch.setenv("SCHEDULER_LAB_CALIBRATIONS", str(tmp_path / "calibrations"))


@pytest.fixture(scope="module")
def fit() -> calibration_store.UserCalibration:
    """The H100 fit of the fixture's benchmark run, named "shared"."""
    return calibrate([read_result(VLLM.read_bytes(), VLLM.name)], H100, "shared").calibration


def slower(fit: calibration_store.UserCalibration) -> calibration_store.UserCalibration:
    """``fit`` with half its bandwidth: another calibration of the same name."""
    return dataclasses.replace(fit, efficiency=dataclasses.replace(fit.efficiency,
                                                                   bandwidth=fit.efficiency.bandwidth / 2))


def folder_files() -> list[str]:
    return sorted(p.name for p in calibration_store.calibration_dir().iterdir())


# --------------------------------------------------------------------------- the store


def test_save_never_replaces_a_calibration_created_between_the_check_and_the_write(fit, monkeypatch):
    """Another session saves the same name while this one writes: its file, made just before this one is linked
    under the name, is kept whole."""
    import os

    link, raced = os.link, []

    def racing(source, target, *args, **kwargs):
        if not raced:
            raced.append(True)
            save(fit)  # the other session's save lands first
        return link(source, target, *args, **kwargs)

    monkeypatch.setattr(os, "link", racing)
    with pytest.raises(engine.ScenarioError, match="'shared' exists; choose another name"):
        save(slower(fit))
    assert calibration_store.load("shared") == fit and folder_files() == ["shared.json"]  # no partial file left


def test_a_save_the_folder_refuses_is_one_line(fit, monkeypatch):
    import errno
    import os

    def refused(*args, **kwargs):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", refused)
    with pytest.raises(engine.ScenarioError, match="^calibration 'shared' could not be saved \\(Operation not "
                                                   "permitted\\)$"):
        save_new(fit)
    assert folder_files() == []


def test_save_writes_a_new_calibration_whole_and_leaves_no_partial_file(fit):
    save(fit)
    assert folder_files() == ["shared.json"] and calibration_store.load("shared") == fit


def test_only_the_operator_replaces_a_calibration(fit):
    save(fit)
    with pytest.raises(engine.ScenarioError) as refused:
        save_new(slower(fit))
    assert str(refused.value) == ("a calibration named 'shared' exists; choose another name or replace it, which is "
                                  f"the operator's act: {OPERATORS_ACT}")
    assert calibration_store.load("shared").efficiency == fit.efficiency
    save(slower(fit), replace=True)  # the command line's --replace
    assert calibration_store.load("shared").efficiency == slower(fit).efficiency


def test_the_app_creates_at_most_its_limit_of_calibrations_and_the_command_line_is_not_bounded(fit, monkeypatch,
                                                                                                capsys):
    monkeypatch.setattr(calibration_store, "DEFAULT_CAPS", dataclasses.replace(DEFAULT_CAPS, app_calibrations=2))
    save_new(dataclasses.replace(fit, name="one"))
    save_new(dataclasses.replace(fit, name="two"))
    with pytest.raises(engine.ScenarioError, match="the app keeps at most 2 saved calibrations"):
        save_new(dataclasses.replace(fit, name="three"))
    assert names() == ["one", "two"]
    assert main(["calibrate", str(VLLM), "--gpu", "H100-80G", "--save", "three"]) == 0
    assert names() == ["one", "three", "two"]


# --------------------------------------------------------------------------- the page


def h100_scenario() -> dict:
    """A small roofline scenario on one H100-80G (the shipped calibration)."""
    data = read_toml(SCENARIOS / "example.toml")
    data["server"] = {"step_model": "roofline", "gpu": "H100-80G", "model": "Llama-3.1-8B", "quant": "bf16",
                      "kv_quant": "bf16", "max_batch_size": 8}
    data["workload"]["num_requests"] = 300
    return data


def hardware_page(data: dict) -> AppTest:
    """Hardware & Cost opened on ``data`` through a shared link (the page first, as a link to it opens)."""
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=300)
    at.query_params[state.QUERY_KEY] = state.encode(data)
    return at.switch_page("pages/hardware.py").run()


def linked(at: AppTest) -> dict:
    """The scenario the page's link carries now."""
    value = at.query_params[state.QUERY_KEY]
    return state.decode(value if isinstance(value, str) else value[0])


def saving(name: str) -> AppTest:
    """Hardware & Cost on the H100 scenario: the fixture's run uploaded and fitted, saved as ``name``, even when
    asked to replace a saved one."""
    at = hardware_page(h100_scenario())
    at.file_uploader(key="bench_upload").set_value([(VLLM.name, VLLM.read_bytes(), "application/json")]).run()
    assert not [c for c in at.checkbox if c.key == "hw_calibration_replace"], "the app offers no replace control"
    at.session_state["hw_calibration_replace"] = True  # as a stale or forged widget state would ask
    at.text_input(key="hw_calibration_name").set_value(name).run()
    return at.button(key="hw_calibration_save").click().run()


def test_a_visitor_cannot_replace_a_saved_calibration(fit):
    path = save(fit)
    before = path.read_bytes()
    at = saving("shared")
    assert not at.exception
    assert shown(at.error) == ["a calibration named 'shared' exists; choose another name or replace it, which is the "
                               f"operator's act: {OPERATORS_ACT}"]
    assert path.read_bytes() == before and names() == ["shared"]
    assert "calibration" not in linked(at)["server"]  # the scenario still uses the shipped calibration


def test_a_visitor_cannot_save_past_the_apps_limit(fit, monkeypatch):
    monkeypatch.setattr(calibration_store, "DEFAULT_CAPS", dataclasses.replace(DEFAULT_CAPS, app_calibrations=1))
    save(fit)
    at = saving("mine")
    assert not at.exception and len(at.error) == 1
    assert shown(at.error)[0].startswith("the app keeps at most 1 saved calibrations")
    assert names() == ["shared"]


def fixed_fleet(fleet: dict) -> dict:
    """The command line's example (fixed step model) with ``fleet``, 300 requests."""
    data = read_toml(SCENARIOS / "example.toml")
    data["workload"]["num_requests"] = 300
    return {**data, "fleet": fleet}


FIXED_FLEETS = {
    "mixed": {"groups": [{"replicas": 1, "kv_capacity_tokens": 0}, {"replicas": 1, "step_time_ms": 30.0}]},
    "disaggregated": {"mode": "disaggregated", "prefill": {"replicas": 1, "kv_capacity_tokens": 100_000},
                      "decode": {"replicas": 2, "kv_capacity_tokens": 200_000, "step_time_ms": 25.0}},
}


@pytest.mark.parametrize("kind", FIXED_FLEETS)
def test_the_page_shows_a_fixed_step_fleet_on_the_gpu_and_leaves_it_unchanged(kind):
    data = fixed_fleet(FIXED_FLEETS[kind])
    engine.load_scenario(data)  # a valid scenario
    at = hardware_page(data)
    assert not at.exception and not at.error, shown(at.error)
    assert PAGE_SECTIONS <= {h.value for h in at.subheader}
    assert any("fixed iteration time" in i for i in shown(at.info))
    assert any("This fleet has groups or pools of its own hardware" in i for i in shown(at.info))
    assert linked(at) == data  # the visit changed nothing in the shared scenario


def test_an_edit_moves_a_fixed_step_fleet_onto_the_gpu():
    """Choosing a GPU switches the scenario to the roofline model: its groups keep their replicas and lose the
    iteration times and KV capacities the GPU now gives."""
    at = hardware_page(fixed_fleet(FIXED_FLEETS["mixed"]))
    at.selectbox(key="hw_gpu_1").set_value("H100-80G").run()
    assert not at.exception and not at.error, shown(at.error)
    assert PAGE_SECTIONS <= {h.value for h in at.subheader}
    after = linked(at)
    assert after["server"]["step_model"] == "roofline" and after["server"]["gpu"] == "H100-80G"
    assert after["fleet"]["groups"] == [{"replicas": 1}, {"replicas": 1}]


@pytest.mark.parametrize("kind", FIXED_FLEETS)
def test_a_search_over_gpus_moves_a_fixed_step_fleet_onto_each(kind):
    """The planner and the sizing searches put the scenario on each GPU (``calibration_store.with_gpu``): a
    fixed-step fleet's groups or pools lose the keys of the fixed model there, as on this page."""
    moved = calibration_store.with_gpu(fixed_fleet(FIXED_FLEETS[kind]), "H100-80G")
    scenario = engine.load_scenario(moved)
    assert scenario.server.step_model == "roofline" and scenario.server.gpu == "H100-80G"
    assert all(getattr(g, key) is None for _, g in scenario.fleet.tables() for key in ("step_time_ms",
                                                                                        "kv_capacity_tokens"))


# --------------------------------------------------------------------------- a hostile config.json


LLAMA_CONFIG = REPO / "tests" / "fixtures" / "model_configs" / "Llama-3.1-8B.json"


def config_json(**keys: str) -> bytes:
    """The Llama-3.1-8B config.json with each key set to its JSON text, written as it is."""
    text = json.dumps({**json.loads(LLAMA_CONFIG.read_text()), **{key: "placeholder" for key in keys}})
    for key, value_json in keys.items():
        text = text.replace(f'"{key}": "placeholder"', f'"{key}": {value_json}', 1)
    return text.encode()


@pytest.mark.parametrize("keys, said", [
    ({"hidden_size": "9" * 400}, "config.json hidden_size = a number of more than 15 digits must be a whole number "
                                 "from 0 to 2,147,483,647"),
    ({"_name_or_path": '"\\udc80"'}, "config.json: _name_or_path is not Unicode text (character 1 is a lone "
                                     "surrogate); remove it (give the model's config.json)"),
    ({"model_type": '"\\ud800"', "_name_or_path": '""'}, "config.json: model_type is not Unicode text (character 1 "
                                                         "is a lone surrogate); remove it"),
], ids=["int-too-large-for-a-float", "surrogate-in-name", "surrogate-in-model-type"])
def test_a_hostile_config_json_is_one_line_on_the_page(keys, said):
    """An integer too large for a float overflowed math.isfinite; a lone surrogate in the name the page shows failed
    the page: both were the page's "unexpected error" line."""
    at = hardware_page(h100_scenario())
    at.file_uploader(key="hw_model_config").set_value([("config.json", config_json(**keys),
                                                        "application/json")]).run()
    assert not at.exception
    assert len(at.error) == 1 and shown(at.error)[0].startswith(said), shown(at.error)
    assert not [b for b in at.button if b.key == "hw_model_config_use"]
