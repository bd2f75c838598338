"""Names that cannot break a page, and unknown names that are errors, not substitutions.

A lone surrogate ("\\ud800": JSON allows it, a command-line byte that is not UTF-8 becomes one) anywhere in a
scenario or a view is one line naming its key; a key that names a row of a hardware table (GPU, model, weight or
KV format) is checked against ``data/hardware/*.csv`` whatever the step model; a page shows such a link's error
over the default scenario and leaves the visitor's link in the address bar until the visitor changes something.
"""

from __future__ import annotations

import base64
import re
import tracemalloc
import zlib

import pytest
from streamlit.testing.v1 import AppTest

import engine
from conftest import REPO, SCENARIOS, shown
from engine.scenario import table_names
from engine.scenario.caps import DEFAULT_CAPS
from engine.scenario.config import keys_reference, read_toml
from engine.scenario.link import PATH_CHARS
from engine.scenario.registry import TP_DEGREES
from test_safety import cli, one_line_error
from ui import state, view

SURROGATE = "\ud800"


def example(**changes) -> dict:
    """The example scenario (fixed step model, classes interactive and offline) with dotted ``changes``."""
    data = read_toml(SCENARIOS / "example.toml")
    data["workload"]["num_requests"] = 200
    return engine.apply_overrides(data, changes)


def roofline(**changes) -> dict:
    """The example on the roofline step model (an A100-80G serving Llama-3-8B) with dotted ``changes``."""
    return example(**{"server.step_model": "roofline", "server.gpu": "A100-80G", "server.model": "Llama-3-8B",
                      **changes})


def weighted(name: str) -> dict:
    """The example under fair queuing, with a weight for class ``name`` beside the two real classes'."""
    return example(**{"policy.name": "wfq", "policy.weights": {"interactive": 1.0, "offline": 1.0, name: 1.0}})


def error_of(data: dict) -> str:
    with pytest.raises(engine.ScenarioError) as caught:
        engine.load_scenario(data)
    message = str(caught.value)
    assert "\n" not in message and message.isprintable(), message
    return message


# --------------------------------------------------------------------------- texts that are not Unicode


@pytest.mark.parametrize("data, start", [
    (example(name=SURROGATE), r"name = '\ud800' is not Unicode text (character 1 is a lone surrogate); remove it"),
    (example(**{"workload.classes.0.name": "chat" + SURROGATE}),
     r"workload.classes[0].name = 'chat\ud800' is not Unicode text (character 5 is a lone surrogate)"),
    (example(**{"workload.trace": {"path": SURROGATE}}), r"workload.trace.path = '\ud800' is not Unicode text"),
    (weighted(SURROGATE), r"policy.weights.'\ud800' is not Unicode text (character 1 is a lone surrogate); rename"),
])
def test_a_text_that_is_not_unicode_is_one_line_naming_its_key(data, start):
    assert error_of(data).startswith(start)


def test_unicode_beyond_the_basic_plane_is_text():
    data = example(name="chat \U0001f600", **{"workload.classes.0.name": "\u4e2d\u6587"})
    assert engine.load_scenario(data).name == "chat \U0001f600"
    assert state.decode(state.encode(data)) == data


@pytest.mark.parametrize("override, words", [
    ("name=x\udcff", r"name = 'x\udcff' is not Unicode text (character 2 is a lone surrogate)"),
    ("policy.weights.\udcff=1", r"policy.weights.'\udcff' is not Unicode text"),
    ("server.gpu=T1000", "server.gpu = 'T1000' is not a GPU of data/hardware/gpus.csv or gpu_slices.csv"),
])
def test_the_command_line_refuses_bad_names_in_one_line(override, words):
    """A byte that is not UTF-8 on the command line arrives as a lone surrogate (Python's surrogateescape)."""
    one_line_error(*cli("run", str(SCENARIOS / "example.toml"), "--set", override), words)


# --------------------------------------------------------------------------- names of hardware rows


@pytest.mark.parametrize("data, start", [
    (example(**{"server.gpu": "T1000"}), "server.gpu = 'T1000' is not a GPU of data/hardware/gpus.csv or "
                                         "gpu_slices.csv; choose one of T4, RTX-3090,"),
    (roofline(**{"server.gpu": ""}), "server.gpu = '' is not a GPU"),
    (roofline(**{"server.model": "GPT-5"}), "server.model = 'GPT-5' is not a model of data/hardware/models.csv; "
                                            "choose one of Llama-2-7B,"),
    (roofline(**{"server.quant": "fp4"}), "server.quant = 'fp4' is not a weight format of data/hardware/quant.csv"),
    (example(**{"server.kv_quant": "fp4"}), "server.kv_quant = 'fp4' is not a KV-cache format of "
                                            "data/hardware/kv_quant.csv; choose one of fp16, bf16, fp8, int8, int4"),
    (roofline(**{"server.speculative": {"draft_model": "tiny"}}),
     "server.speculative.draft_model = 'tiny' is not a model of data/hardware/models.csv"),
    (roofline(**{"fleet.groups": [{"replicas": 1}, {"replicas": 1, "gpu": "H100"}]}),
     "fleet.groups[1].gpu = 'H100' is not a GPU"),
    (roofline(**{"fleet.groups": [{"replicas": 1, "quant": "awq"}]}), "fleet.groups[0].quant = 'awq' is not a "
                                                                       "weight format"),
    (roofline(**{"fleet.mode": "disaggregated", "fleet.prefill": {"gpu": "B400"}, "fleet.decode": {}}),
     "fleet.prefill.gpu = 'B400' is not a GPU"),
    (roofline(**{"fleet.mode": "disaggregated", "fleet.prefill": {}, "fleet.decode": {"quant": "nf4"}}),
     "fleet.decode.quant = 'nf4' is not a weight format"),
])
def test_a_name_that_is_no_row_of_its_hardware_table_is_an_error_at_load(data, start):
    """Whatever the step model (the fixed one never reads server.gpu): a wrong name is never replaced."""
    assert error_of(data).startswith(start)


def test_a_long_list_of_names_is_cut_and_a_short_one_is_whole():
    for key, table in (("server.gpu", "gpus"), ("server.model", "models")):
        listed = error_of(roofline(**{key: "T1000"})).split("choose one of ")[1]
        assert len(table_names.names(table)) > table_names.LISTED_NAMES
        assert listed == ", ".join(table_names.names(table)[:table_names.LISTED_NAMES]) + ", ...", table
    formats = error_of(roofline(**{"server.quant": "fp2"})).split("choose one of ")[1]
    assert formats == ", ".join(table_names.names("quant")) == "fp16, bf16, fp8, int8, int4, nvfp4, mxfp4, mxfp4-w4a16"


def test_every_row_of_the_hardware_tables_is_a_name():
    assert table_names.names("gpus")[:2] == ("T4", "RTX-3090")
    assert "H100-80G-MIG-1g.10gb" in table_names.names("gpus"), "slices are GPUs too"
    assert table_names.names("quant") == ("fp16", "bf16", "fp8", "int8", "int4", "nvfp4", "mxfp4", "mxfp4-w4a16")
    scenario = engine.load_scenario(roofline(**{"server.gpu": "H100-80G-MIG-1g.10gb", "server.quant": "int4"}))
    assert (scenario.server.gpu, scenario.server.quant) == ("H100-80G-MIG-1g.10gb", "int4")


def test_an_empty_name_is_the_servers_where_the_default_is_empty():
    data = roofline(**{"fleet.groups": [{"replicas": 1, "gpu": "", "quant": ""}, {"replicas": 1, "gpu": "H200"}],
                       "server.speculative": {"draft_model": "", "draft_cost": 0.1}})
    scenario = engine.load_scenario(data)
    assert scenario.fleet.groups[0].server(scenario.server).gpu == "A100-80G"
    assert scenario.server.speculative.draft_model == ""


def test_the_keys_reference_says_which_table_a_key_names():
    limits = {row["key"]: row["limit"] for row in keys_reference()}
    assert limits["server.gpu"].startswith("a name in data/hardware/gpus.csv or gpu_slices.csv; <= ")
    assert limits["server.speculative.draft_model"].startswith("a name in data/hardware/models.csv; ")
    assert limits["fleet.decode.quant"].startswith("a name in data/hardware/quant.csv; ")
    assert limits["server.kv_quant"].startswith("a name in data/hardware/kv_quant.csv; ")
    assert "a name in" not in limits["server.calibration"] and limits["server.calibration"].startswith("<= ")
    assert limits["server.step_time_ms"] == "<= 60,000" and limits["server.step_model"] == ""


# --------------------------------------------------------------------------- links


def raw_link(json_text: bytes) -> str:
    return base64.urlsafe_b64encode(zlib.compress(json_text, 9)).decode().rstrip("=")


@pytest.mark.parametrize("data, words", [
    ({"name": SURROGATE}, "the link's scenario (?s=...): name is not Unicode text (character 1 is a lone "
                          "surrogate); the default is shown"),
    ({"workload": {"classes": [{"name": "a"}, {"name": "b" + SURROGATE}]}},
     "workload.classes[1].name is not Unicode text (character 2"),
    ({"policy": {"weights": {SURROGATE: 1}}}, r"policy.weights.'\ud800' is not Unicode text"),
    ({"x": [[{"k": [SURROGATE]}]]}, "x[0][0].k[0] is not Unicode text"),
])
def test_a_link_holding_a_lone_surrogate_is_one_line_naming_the_key(data, words):
    with pytest.raises(engine.ScenarioError, match=re.escape(words)):
        state.decode(state.encode(data))


def test_a_deep_link_names_the_end_of_the_key_and_is_read_in_bounded_memory():
    deep = b'{"a":' + b"[" * 900 + b'"",' * 300_000 + b'"\\ud800"' + b"]" * 900 + b"}"
    assert len(deep) < DEFAULT_CAPS.link_bytes
    tracemalloc.start()
    with pytest.raises(engine.ScenarioError) as caught:
        state.decode(raw_link(deep))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    key = str(caught.value).split(": ")[1].removesuffix(" is not Unicode text (character 1 is a lone surrogate); "
                                                        "the default is shown")
    assert key.startswith("...[") and key.endswith("[0][0][300000]") and len(key) == PATH_CHARS
    assert peak < 8 * DEFAULT_CAPS.link_bytes, "the walk holds one iterator per level, not one path per text"


# --------------------------------------------------------------------------- pages


def opened(link: str, page: str = "pages/lab.py", view_link: str | None = None) -> AppTest:
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=180)
    at.query_params[state.QUERY_KEY] = link
    if view_link is not None:
        at.query_params[view.QUERY_KEY] = view_link
    return at.switch_page(page).run()


def assert_one_line_and_the_link_kept(at: AppTest, link: str, words: str) -> None:
    assert not at.exception
    assert [e for e in shown(at.error) if words in e] == shown(at.error), shown(at.error)
    assert len(shown(at.error)) == 1
    assert at.selectbox(key="preset_pick").options[0] == "choose a preset..."
    assert at.query_params[state.QUERY_KEY] == link, "the visitor's link stays in the address bar"


HOSTILE_LINKS = {
    "scenario name": (example(name=SURROGATE), "the link's scenario (?s=...): name is not Unicode text"),
    "class name": (example(**{"workload.classes.0.name": SURROGATE}), "workload.classes[0].name is not Unicode"),
    "weights key": (weighted(SURROGATE), r"policy.weights.'\ud800' is not Unicode text"),
    "model": (roofline(**{"server.model": "GPT-5"}), "server.model = 'GPT-5' is not a model of "
                                                     "data/hardware/models.csv"),
    "gpu": (roofline(**{"server.gpu": "T1000"}), "server.gpu = 'T1000' is not a GPU of data/hardware/gpus.csv"),
    "gpu, fixed step model": (example(**{"server.gpu": "T1000"}), "server.gpu = 'T1000' is not a GPU"),
}


@pytest.mark.parametrize("case", HOSTILE_LINKS)
def test_a_hostile_name_in_a_link_is_one_line_over_the_default_and_the_link_stays(case):
    data, words = HOSTILE_LINKS[case]
    link = state.encode(data)
    at = opened(link)
    assert_one_line_and_the_link_kept(at, link, words)
    assert any(state.default_data()["name"] in c for c in shown(at.sidebar.caption))
    assert [m for m in at.metric if m.label == "TTFT p99"], "the default scenario's results are shown"


@pytest.mark.parametrize("page", ["pages/hardware.py", "pages/planner.py", "pages/workload.py"])
def test_an_unknown_gpu_is_an_error_on_every_page_never_a_substitute(page):
    link = state.encode(roofline(**{"server.gpu": "T1000"}))
    at = opened(link, page)
    assert_one_line_and_the_link_kept(at, link, "server.gpu = 'T1000' is not a GPU")


def test_the_kept_link_stays_until_the_visitor_changes_the_scenario():
    link = state.encode(roofline(**{"server.gpu": "T1000"}))
    at = opened(link)
    at.run()
    assert not at.exception and at.query_params[state.QUERY_KEY] == link, "a rerun keeps the visitor's link"
    preset = "example.toml"
    at.selectbox(key="preset_pick").select(preset).run()
    assert not at.exception
    now = at.query_params[state.QUERY_KEY]
    assert now != link and state.decode(now) == state.preset_data(preset)


def test_a_view_link_holding_a_lone_surrogate_is_one_line_and_stays_until_a_control_changes():
    link = state.encode(example())
    view_link = state.encode({"comparison_metric": SURROGATE, "curves_metric": "e2e_p99_ms"})
    at = opened(link, view_link=view_link)
    assert not at.exception
    assert shown(at.error) == ["the link's view (?v=...): comparison_metric is not Unicode text (character 1 is a "
                               "lone surrogate); the default is shown"]
    assert at.query_params[view.QUERY_KEY] == view_link
    at.run()
    assert at.query_params[view.QUERY_KEY] == view_link, "a rerun changes no control"
    at.selectbox(key="curves_metric").select("sla_attainment").run()
    assert not at.exception
    assert state.decode(at.query_params[view.QUERY_KEY])["curves_metric"] == "sla_attainment"


# --------------------------------------------------------------------------- widgets


def keeps_value() -> None:
    """A select box of GPUs given without H200, and a group's tensor-parallel degree left empty."""
    from engine.scenario.config import FleetGroup, Server
    from ui.widgets import field_input

    field_input(Server, "gpu", "H200", key="gpu", options=["T4", "A100-80G"])
    field_input(FleetGroup, "tensor_parallel", None, key="tp")


def test_a_value_outside_a_widgets_options_is_kept_never_replaced_by_the_first():
    at = AppTest.from_function(keeps_value).run()
    assert not at.exception
    gpu = at.selectbox(key="gpu")
    assert (gpu.value, gpu.options) == ("H200", ["T4", "A100-80G", "H200"])
    tp = at.selectbox(key="tp")
    assert (tp.value, tp.options) == (1, [str(d) for d in TP_DEGREES]), "no value: the first option, and no 'None'"
