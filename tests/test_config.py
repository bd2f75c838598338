"""Scenario loading: the issue's example as written, field-named errors, overrides, presets, docs."""

import dataclasses

import pytest

import engine
from conftest import SCENARIOS
from engine.scenario.config import RequestClass, keys_reference, scenario_to_dict


def test_example_loads_with_the_documented_keys():
    scenario = engine.load_scenario(SCENARIOS / "example.toml")
    assert scenario.name == "example" and scenario.seed == 7
    interactive, offline = scenario.workload.classes
    assert (interactive.name, interactive.share, interactive.priority, interactive.tier_weight) == \
        ("interactive", 0.7, 0, 3.0)
    assert (interactive.sla_ttft_ms, interactive.sla_e2e_ms, interactive.timeout_ms) == (500, 5000, 30000)
    assert interactive.prompt_tokens.max == 4096 and interactive.output_tokens.dist == "geometric"
    assert offline.output_tokens.value == 256 and offline.timeout_ms is None
    assert scenario.server.max_batched_tokens == 8192 and scenario.policy.name == "fifo"


@pytest.mark.parametrize("preset", sorted(p.name for p in SCENARIOS.glob("*.toml")))
def test_every_preset_loads_and_runs(preset):
    scenario = engine.load_scenario(SCENARIOS / preset, overrides=["workload.num_requests=300"])
    summary = engine.simulate(scenario).summary
    assert summary["overall"]["arrived"] == summary["run"]["requests"] > 0


BASE = {"workload": {"num_requests": 10, "arrival": {"process": "poisson", "rate_per_s": 1.0},
                     "classes": [{"name": "a", "share": 1.0, "prompt_tokens": {"dist": "constant", "value": 8},
                                  "output_tokens": {"dist": "constant", "value": 8}}]}}


@pytest.mark.parametrize("override, message", [
    ("server.max_batch_size=0", r"^server\.max_batch_size = 0 must be >= 1"),
    ("server.step_model=magic", r"^server\.step_model = 'magic' is not allowed; choose one of 'fixed', 'roofline'"),
    ("server.max_batch_size=2.5", r"^server\.max_batch_size must be an integer"),
    ("server.bogus=1", r"^server\.bogus is not a known key; allowed here: step_model"),
    ("workload.classes.a.prompt_tokens={dist=\"uniform\", low=5}", r"classes\[0\]\.prompt_tokens\.high is required"),
    ("workload.classes.a.output_tokens={dist=\"uniform\", low=9, high=3}", r"low = 9 is above high = 3"),
    ("workload.arrival={process=\"gamma\", rate_per_s=1}", r"^workload\.arrival\.cv is required"),
    ("workload.arrival.rate_per_s=true", r"^workload\.arrival\.rate_per_s must be a number"),
    ("server.max_batched_tokens=4", r"max_batched_tokens = 4 is below max_batch_size = 256"),
    ("server.kv_allocation=static", r"^server\.max_seq_len must be > 0 with kv_allocation = 'static'"),
    ("policy.name=lottery", r"^policy\.name = 'lottery' is not allowed"),
    ("workload.classes.nope.share=1", r"no entry 'nope'"),
])
def test_errors_name_the_field_and_the_fix(override, message):
    with pytest.raises(engine.ScenarioError, match=message):
        engine.load_scenario(BASE, overrides=[override])


def test_class_shares_are_relative_in_files_and_on_the_command_line():
    """One rule for every entry point (file, --set, the pages): shares are rescaled to sum to 1."""
    two = {"name": "b", "share": 0.4, "prompt_tokens": {"dist": "constant", "value": 8},
           "output_tokens": {"dist": "constant", "value": 8}}
    data = {**BASE, "workload": {**BASE["workload"], "classes": [{**BASE["workload"]["classes"][0], "share": 0.7},
                                                                  two]}}
    shares = [c.share for c in engine.load_scenario(data).workload.classes]
    assert shares == pytest.approx([0.7 / 1.1, 0.4 / 1.1], rel=1e-12)
    assert "rescaled to sum to 1" in dataclasses.fields(RequestClass)[1].metadata["help"]
    exact = engine.load_scenario(SCENARIOS / "example.toml", overrides=["workload.classes.0.share=0.5"])
    assert [c.share for c in exact.workload.classes] == pytest.approx([0.5 / 0.8, 0.3 / 0.8], rel=1e-12)


def test_missing_required_keys_are_named():
    with pytest.raises(engine.ScenarioError, match=r"^workload is required"):
        engine.load_scenario({})
    with pytest.raises(engine.ScenarioError, match=r"give num_requests or duration_s"):
        engine.load_scenario({"workload": {**BASE["workload"], "num_requests": None}})
    with pytest.raises(engine.ScenarioError, match=r"classes\[0\]\.prompt_tokens is required unless"):
        engine.load_scenario({"workload": {**BASE["workload"], "classes": [{"name": "a", "share": 1.0}]}})


def test_bad_toml_and_missing_files_are_scenario_errors(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("name = \n")
    with pytest.raises(engine.ScenarioError, match="is not valid TOML"):
        engine.load_scenario(bad)
    with pytest.raises(engine.ScenarioError, match="does not exist"):
        engine.load_scenario(tmp_path / "missing.toml")


def test_overrides_parse_values_and_address_classes():
    scenario = engine.load_scenario(SCENARIOS / "example.toml", overrides=[
        "policy.name=priority", "policy.preemptive=true", "workload.classes.offline.priority=1",
        "workload.classes.0.timeout_ms=1500.5", "workload.arrival.rate_per_s=4", 'name="with spaces"'])
    assert scenario.policy.name == "priority" and scenario.policy.preemptive is True
    assert scenario.workload.classes[1].priority == 1
    assert scenario.workload.classes[0].timeout_ms == 1500.5
    assert scenario.workload.arrival.rate_per_s == 4.0 and scenario.name == "with spaces"
    with pytest.raises(engine.ScenarioError, match="must look like key=value"):
        engine.load_scenario(SCENARIOS / "example.toml", overrides=["policy.name"])


def test_scenario_round_trips_through_plain_data():
    scenario = engine.load_scenario(SCENARIOS / "example.toml")
    again = engine.load_scenario(scenario_to_dict(scenario))
    assert dataclasses.replace(again, origin=scenario.origin) == scenario


def test_every_key_is_documented_with_help_text():
    rows = keys_reference()
    keys = {r["key"] for r in rows}
    assert {"seed", "workload.num_requests", "workload.classes[].sla_ttft_ms", "workload.classes[].prompt_tokens.cv",
            "server.max_batched_tokens", "server.kv_capacity_tokens", "policy.preemptive",
            "limits.max_waiting_requests"} <= keys
    assert all(r["help"] for r in rows)


def test_names_and_codes_come_from_one_registry():
    """Every choice a key offers is the registry's, and the policy table's codes are the registry's codes."""
    from engine.scenario import registry
    from engine.scenario.config import Arrival, Fleet, Policy, Server, TokenDist, Trace
    from engine.sim.policies import POLICIES

    def choices(cls, name):
        return next(f.metadata["choices"] for f in dataclasses.fields(cls) if f.name == name)

    assert choices(Policy, "name") == tuple(registry.POLICY_CODES)
    assert choices(Policy, "preempt_mode") == tuple(registry.PREEMPT_MODE_CODES)
    assert choices(Fleet, "router") == tuple(registry.ROUTER_CODES)
    assert choices(Server, "step_model") == tuple(registry.STEP_MODEL_CODES)
    assert choices(Server, "tensor_parallel") == registry.TP_DEGREES
    assert choices(Trace, "format") == registry.TRACE_FORMATS
    assert choices(Arrival, "process") == registry.ARRIVAL_PROCESSES
    assert choices(TokenDist, "dist") == registry.LENGTH_DISTRIBUTIONS
    assert {name: spec.code for name, spec in POLICIES.items()} == registry.POLICY_CODES
