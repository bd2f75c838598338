"""Words, not identifiers: every named choice has its words, keys in a text become their labels, and the pages,
the planner's text and the report show no policy code, scenario key, lowercase choice name or whole number as a
float."""

from __future__ import annotations

import re

import pandas as pd
import pytest

from conftest import SCENARIOS
from engine.decide.plan_text import not_possible_frame, summary_line
from engine.calibrate import calibration
from engine.decide.cost import BILLING_MODES
from engine.decide.report import cost_frame
from engine.decide.planner import DECODINGS
from engine.hardware.tables import load_table
from engine.scenario import labels
from engine.scenario.config import Fleet, Policy, Server, read_toml
from engine.scenario.registry import POLICY_CODES
from test_app import lab
from ui import tables
from ui.widgets import field_help

# A key as the scenario file writes it (a name with an underscore, or a dotted path into a table).
KEY = re.compile(r"\b(?:server|policy|fleet|workload|limits)\.[a-z_]+|(?<![\w.])("
                 + "|".join(name for name in labels.FIELDS if "_" in name) + r")(?![\w.])")
# Every choice name of the registry that is not also a plain English word.
CODES = [name for kind, names in labels.REGISTRY.items() for name in names
         if "-" in name or name in ("poisson", "azure", "mooncake", "csv", "roofline", "lognormal")] + \
    [name for name in POLICY_CODES if name not in ("priority", "dynamic")]
CODE = re.compile(r"(?<![\w.-])(" + "|".join(map(re.escape, CODES)) + r")(?![\w-])")


@pytest.mark.parametrize("kind", list(labels.REGISTRY))
def test_every_registry_name_has_words_that_start_with_a_capital(kind):
    assert set(labels.CHOICE_WORDS[kind]) == set(labels.REGISTRY[kind])
    assert all(words[0].isupper() for words in labels.CHOICE_WORDS[kind].values())
    assert set(labels.CHOICE_WORDS["decoding"]) == set(DECODINGS)


def test_every_serving_engine_has_words():
    assert set(labels.CHOICE_WORDS["engine"]) == set(load_table("engines").index)
    assert all(w[0].isupper() or w.startswith("v") for w in labels.CHOICE_WORDS["engine"].values())


def test_every_gpu_family_has_words():
    families = set(load_table("gpus")["family"])
    assert set(labels.CHOICE_WORDS["gpu_family"]) == families
    assert all(w[0].isupper() for w in labels.CHOICE_WORDS["gpu_family"].values())
    assert "of the Hopper family" in calibration.badge("H100-80G")


def test_a_form_shows_words_for_a_choice_a_format_and_a_whole_number():
    assert labels.choice_label(Fleet, "router", "least-tokens") == "Fewest tokens"
    assert labels.choice_label(Server, "quant", "int4") == "INT4"
    assert labels.choice_label(Server, "tensor_parallel", 4.0) == "4"
    assert labels.count_text(4.0) == "4" and labels.count_text(None) == "—" and labels.count_text(2.5) == "2.5"


def test_keys_in_a_text_become_their_labels_and_values_their_words():
    said = labels.key_words("set policy.preempt_mode = 'swap' and raise max_batch_size; see data/hardware/gpus.csv")
    assert said == ("set \u201cPreemption mode\u201d: Swap and raise \u201cBatch limit\u201d; see "
                    "data/hardware/gpus.csv")
    assert labels.key_words("fleet.groups[1].gpu = H100-80G") == "\u201cGPU\u201d: H100-80G"
    assert labels.key_words("server.model = 'gpt-oss-20b (your config)' (fp16)") == \
        "\u201cModel\u201d: gpt-oss-20b (your config) (fp16)", "a quoted name with spaces"
    assert labels.key_words("columns arrival_s,prompt_tokens") == "columns arrival_s,prompt_tokens", "a file's header"
    assert labels.key_label("server.tensor_parallel") == "Tensor parallel"
    assert labels.key_label("server.nothing") == "server.nothing"


def test_help_texts_name_choices_keys_and_policies_in_words():
    assert "Round robin (in turn)" in field_help(Fleet, "router")
    assert "(Strict priority levels, Earliest deadline first, Weighted fair queuing)" in field_help(Policy,
                                                                                                    "preemptive")
    assert "Strict priority levels" not in field_help(Policy, "aging_per_s").split("(")[0], "a plain word stays"
    for cls, name in ((Server, "min_batch_size"), (Server, "host_link_gb_s"), (Fleet, "router")):
        assert not KEY.search(field_help(cls, name)), field_help(cls, name)


PLAN = {"replicas": 2, "tensor_parallel": 4, "gpu": "H100-80G", "offer": "vast-h100", "cards": 8, "quant": "fp8",
        "decoding": "plain", "policy": {"name": "vllm-fcfs"}, "same_fleet_policies": ["sjf"],
        "router": "least-tokens", "monthly_cost": {"low": 1000.0, "high": 1200.0, "currency": "USD",
                                                   "billing": "pay as you go"},
        "cost_per_1m_output_tokens": {"low": 0.3, "high": 0.4}, "targets": [], "headroom_rate_per_s": None,
        "step_times": "calibrated"}


def test_the_planner_text_names_policies_routers_and_formats_in_words():
    line = summary_line(PLAN)
    assert "vLLM first come, first served (as good: Shortest job first)" in line and "router Fewest tokens" in line
    assert "FP8 weights" in line and not CODE.search(line), line
    frame = not_possible_frame([{"gpu": "A100-40G", "tensor_parallel": 4.0, "policies": ["vllm-fcfs"],
                                 "note": "server.tensor_parallel = 8 does not fit"}])
    assert frame.iloc[0].tolist() == ["A100-40G", "4", "vLLM first come, first served",
                                      "\u201cTensor parallel\u201d: 8 does not fit"]


def test_an_unstable_row_reads_unstable_in_every_latency_column_and_keeps_its_numbers():
    frame = pd.DataFrame({"shape": ["1 x TP8", "8 x TP1"], "ttft_p99_ms": [120.0, 1_704_832.0],
                          "sla_attainment": [0.9, 0.1], "unstable": [False, True]})
    styled = tables.unstable_latencies(frame[["shape", "ttft_p99_ms", "sla_attainment"]], frame)
    shown = styled.to_html()
    assert shown.count(tables.UNSTABLE) == 1 and "1704832" not in shown and "120" in shown
    assert styled.data["ttft_p99_ms"].tolist() == [120.0, 1_704_832.0], "the cells still sort by number"
    stable = frame.assign(unstable=False)
    assert tables.unstable_latencies(stable, stable) is stable


def page_texts(at) -> list[str]:
    """Every text a visitor reads on the page: prose, messages, labels, help, options, metric labels."""
    texts = [e.value for kind in ("markdown", "caption", "info", "warning", "success", "error", "subheader")
             for e in getattr(at, kind)]
    for kind in ("selectbox", "multiselect", "radio", "number_input", "slider", "toggle", "text_input"):
        for widget in getattr(at, kind):
            texts += [widget.label, widget.help or ""] + list(getattr(widget, "options", []) or [])
    return [t.replace("\\", "") for t in texts]


def test_the_lab_on_a_gpu_shows_no_code_no_key_and_no_lowercase_choice():
    data = read_toml(SCENARIOS / "chat_and_batch_a100_8b.toml")
    data["workload"]["num_requests"] = 1000
    data["fleet"] = {"replicas": 2, "router": "least-tokens"}
    at = lab(data).run()
    assert not at.exception
    for text in page_texts(at):
        assert not CODE.search(text), text
        assert not KEY.search(text), text
    at.toggle(key="autoscale_1").set_value(True).run()  # the autoscaler's controls read as words too
    assert not at.exception
    for text in page_texts(at):
        assert not CODE.search(text), text
        assert not KEY.search(text), text
    options = [o for box in at.selectbox for o in box.options]
    assert "Queue length" in options
    assert "Fewest tokens" in options and "Mixed" in options and "FP16" in options and "Pay as you go" in options


def test_a_minimum_batch_without_a_wait_says_why_it_does_nothing():
    data = read_toml(SCENARIOS / "example.toml")
    data.setdefault("server", {}).update(min_batch_size=8, wait_timeout_ms=0.0)
    at = lab(data).run()
    notes = [c.value for c in at.caption if "No effect" in c.value]
    assert any("Minimum batch 8" in n and "always has" in n for n in notes), notes
    data["server"]["wait_timeout_ms"] = 50.0
    at = lab(data).run()
    notes = [c.value for c in at.caption if "No effect" in c.value and "Minimum batch" in c.value]
    # at a load of 0.75 the run holds batches back for 1.6 s of 8,070 (TTFT p50 35.5 ms either way): said after it
    assert len(notes) == 1 and "always has" not in notes[0] and "(0.02% of the servers' time)" in notes[0], notes
    data["server"].update(min_batch_size=1)
    at = lab(data).run()
    assert any("any ready request makes a batch" in c.value for c in at.caption)
    assert any("the router sends every request to it" in c.value for c in at.caption), "one replica"


def test_a_count_of_cards_agrees_with_its_number():
    assert (labels.cards_text(1), labels.cards_text(8), labels.cards_text(0.5)) == ("1 card", "8 cards", "0.5 cards")


def test_every_billing_mode_has_words():
    assert set(labels.CHOICE_WORDS["billing"]) == set(BILLING_MODES)
    assert all(w[0].isupper() for w in labels.CHOICE_WORDS["billing"].values())


def test_the_report_cost_table_names_each_billing_in_words():
    frame = cost_frame({"offer": "ref-8x-h100-server", "cards": 8}, "USD", 7.0)
    assert set(frame["bought"]) == {"reserved term", "annual prepay, 15% off the reserved term price"}
