"""The one metric table and the one label table: every number a user reads has one label, one unit and one
format, and every form label is words with one unit."""

import dataclasses
import re

import pytest

from engine.scenario import config
from engine.scenario.config import FIELD_LABELS, field_label
from engine.scenario.metric_table import METRICS, metric, money_range, money_text, round_money, significant

DOUBLED = re.compile(r"\b([\w/%]+) \(\1\)|\(([^()]+)\)[^()]*\(\2\)")


@pytest.mark.parametrize("key, value, text", [
    ("ttft_p99_ms", 35.54, "35.5 ms"), ("ttft_p99_ms", 890.4, "890 ms"), ("ttft_p99_ms", 1544.0, "1.54 s"),
    ("e2e_p99_ms", 49_245.0, "49.2 s"), ("e2e_p99_ms", 123_456.0, "123 s"), ("e2e_p99_ms", 2_500_000.0, "2,500 s"),
    ("sla_attainment", 0.7304, "73.0%"), ("timed_out", 1234, "1,234"), ("output_tokens_per_s", 1147.4, "1,147"),
    ("output_tokens_per_s", 0.04123, "0.0412"), ("ttft_p99_ms", None, "—"), ("sla_attainment", float("nan"), "—"),
])
def test_each_metric_is_written_one_way(key, value, text):
    assert metric(key).text(value) == text


@pytest.mark.parametrize("key, change, text", [("ttft_p99_ms", -120.0, "-120 ms"), ("sla_attainment", 0.015, "+1.5 pt"),
                                               ("e2e_p99_ms", 2500.0, "+2.50 s")])
def test_changes_are_signed(key, change, text):
    assert metric(key).text(change, signed=True) == text


def test_money_keeps_its_integer_part_and_never_rounds_to_zero():
    assert money_text(57_635.4) == "57,635" and money_text(6.6812) == "6.68" and money_text(0.000412) == "0.000412"
    assert money_range((6.6812, 12.49), "CNY") == "6.68–12.5 CNY" and money_range((3.0, 3.0)) == "3.00"
    assert money_range((None, None)) == "—"
    assert round_money(57_635.4) == 57_635 and round_money(0.0004123) == 0.000412
    assert significant(1234.5) == "1,234" and significant(0.0) == "0"


def test_tables_hold_rounded_numbers_that_still_sort():
    assert metric("ttft_p99_ms").table_value(4006.1334) == 4006.0
    assert metric("tpot_mean_ms").table_value(12.3456) == 12.3
    assert metric("sla_attainment").table_value(0.73049) == 73.0
    assert metric("cost_per_million_output_tokens").table_value(0.0001234) == 0.000123
    assert metric("ttft_p99_ms").table_value(None) is None


def test_titles_carry_one_unit_and_rates_put_it_in_the_card_label():
    for m in METRICS.values():
        assert not DOUBLED.search(m.title("CNY")), m.title("CNY")
        assert m.unit not in m.label.split() or not m.unit, m.label
    assert metric("ttft_p99_ms").title() == "TTFT p99 (ms)" and metric("sla_attainment").title() == "SLA met (%)"
    assert metric("output_tokens_per_s").card_label() == "Output (tokens/s)"
    assert metric("ttft_p99_ms").card_label() == "TTFT p99"
    assert metric("cost_per_thousand_sla_met_requests").title("USD") == "Cost per 1,000 SLA-met requests (USD)"


def test_every_form_label_is_words_with_one_unit():
    classes = (config.TokenDist, config.Arrival, config.Trace, config.RequestClass, config.Workload, config.Server,
               config.Policy, config.Limits, config.Fleet)
    for cls in classes:
        for f in dataclasses.fields(cls):
            if f.metadata.get("internal") or cls in (config.Workload,) and f.name in ("classes", "arrival", "trace") \
                    or f.name in ("name", "path", "prompt_tokens", "output_tokens"):
                continue
            assert f"{cls.__name__}.{f.name}" in FIELD_LABELS, f"{cls.__name__}.{f.name} has no label"
            label = field_label(cls, f.name) + (f" ({f.metadata['unit']})" if f.metadata.get("unit") else "")
            assert "_" not in label and not DOUBLED.search(label), label


@pytest.mark.parametrize("key, value, old, change", [
    ("ttft_p99_ms", 250.0, 100.0, "+150 ms"), ("ttft_p99_ms", 100.2, 100.4, None),  # both read "100 ms"
    ("ttft_p99_ms", 1544.0, 1551.0, "-7.00 ms"), ("sla_attainment", 0.7304, 0.7302, None),
    ("sla_attainment", 0.75, 0.73, "+2.0 pt"), ("output_tokens_per_s", 1147.2, 1147.0, None),
    ("sla_attainment", 0.73051, 0.73049, None),  # "73.1%" against "73.0%", yet the change reads "+0.0 pt"
    ("ttft_p99_ms", None, 100.0, None), ("ttft_p99_ms", 100.0, float("nan"), None),
])
def test_a_card_shows_a_change_only_when_its_own_number_changed(key, value, old, change):
    assert metric(key).change_text(value, old) == change
