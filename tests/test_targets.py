"""Targets of the sizing search and the planner (engine.decide.targets): parsed from CLASS.METRIC=VALUE, at most for
latencies, at least for attainment and throughput, never met by an unstable run."""

import math

import pytest

import engine
from engine.decide.targets import TARGET_METRICS, Target, all_met, parse_target


def summary(value_ms: float | None = 800.0, attainment: float | None = 0.95, unstable: bool = False) -> dict:
    block = {"ttft_ms": {"p99": value_ms}, "sla_attainment": attainment, "output_tokens_per_s": 950.0}
    return {"classes": {"chat": block, "batch.v2": block}, "overall": block, "system": {"unstable": unstable}}


def test_a_target_is_parsed_from_class_metric_value():
    assert parse_target("chat.ttft_p99_ms=1000") == Target("chat", "ttft_p99_ms", 1000.0)
    assert parse_target(" batch.v2.output_tokens_per_s = 900 ") == Target("batch.v2", "output_tokens_per_s", 900.0)
    assert parse_target("overall.sla_attainment=0.99") == Target("overall", "sla_attainment", 0.99)


@pytest.mark.parametrize("text, message", [
    ("chat.ttft_p99_ms", "is not CLASS.METRIC=VALUE: write CLASS.METRIC=VALUE, e.g. interactive.ttft_p99_ms=1000"),
    ("ttft_p99_ms=1000", "is not CLASS.METRIC=VALUE"),
    (".ttft_p99_ms=1000", "is not CLASS.METRIC=VALUE"),
    ("chat.ttft_p99_ms=fast", "'fast' is not a number"),
    ("chat.ttft_p99=1000", "target metric 'ttft_p99' is not one of ttft_p50_ms"),
    ("chat.completed=10", "target metric 'completed' is not one of"),  # a count grows with the run
    ("chat.ttft_p99_ms=-1", "must be a finite number >= 0"),
    ("chat.ttft_p99_ms=nan", "must be a finite number >= 0"),
])
def test_a_bad_target_is_one_line_naming_the_fix(text, message):
    with pytest.raises(engine.ScenarioError, match=message.replace("(", r"\(").replace(".", r"\.")):
        parse_target(text)


def test_latencies_are_bounded_from_above_and_attainment_and_throughput_from_below():
    assert Target("chat", "ttft_p99_ms", 1000.0).met(summary(800.0)) == (True, 800.0)
    assert Target("chat", "ttft_p99_ms", 1000.0).met(summary(1200.0)) == (False, 1200.0)
    assert Target("chat", "ttft_p99_ms", 800.0).met(summary(800.0))[0], "the limit itself meets the target"
    assert Target("chat", "sla_attainment", 0.9).met(summary(attainment=0.95))[0]
    assert not Target("chat", "sla_attainment", 0.99).met(summary(attainment=0.95))[0]
    assert Target("chat", "output_tokens_per_s", 900.0).met(summary())[0]
    assert not Target("chat", "output_tokens_per_s", 1000.0).met(summary())[0]
    assert {k for k in TARGET_METRICS if not Target("chat", k, 1.0).at_most} == {
        "sla_attainment", "output_tokens_per_s", "prompt_tokens_per_s", "sla_met_per_s", "output_tokens_per_s_run",
        "prompt_tokens_per_s_run", "sla_met_per_s_run", "service_share", "service_tokens"}


def test_an_unstable_run_or_a_missing_value_never_meets_a_target():
    assert Target("chat", "ttft_p99_ms", 1000.0).met(summary(800.0, unstable=True)) == (False, 800.0)
    assert Target("chat", "ttft_p99_ms", 1000.0).met(summary(None)) == (False, None)
    assert Target("chat", "sla_attainment", 0.0).met(summary(attainment=None)) == (False, None)


def test_slack_is_the_share_of_the_limit_to_spare():
    latency = Target("chat", "ttft_p99_ms", 1000.0)
    assert latency.slack(800.0) == pytest.approx(0.2) and latency.slack(1100.0) == pytest.approx(-0.1)
    throughput = Target("batch.v2", "output_tokens_per_s", 900.0)
    assert throughput.slack(990.0) == pytest.approx(0.1) and throughput.slack(450.0) == pytest.approx(-0.5)
    assert latency.slack(None) == -math.inf


def test_every_target_of_a_list_must_hold_and_classes_are_checked():
    targets = (Target("chat", "ttft_p99_ms", 1000.0), Target("batch.v2", "output_tokens_per_s", 900.0))
    assert all_met(targets, summary(800.0))
    assert not all_met((*targets, Target("overall", "sla_attainment", 0.99)), summary(800.0))
    with pytest.raises(engine.ScenarioError, match="target class 'batch' is not a class; classes are chat, batch.v2"):
        Target("batch", "ttft_p99_ms", 1.0).met(summary())


def test_a_target_reads_as_words_with_its_unit():
    assert Target("chat", "ttft_p99_ms", 1000.0).describe() == "chat TTFT p99 <= 1.00 s"
    assert Target("batch", "output_tokens_per_s", 900.0).describe() == "batch Output >= 900 tokens/s"
    assert Target("overall", "sla_attainment", 0.99).describe() == "overall SLA met >= 99.0%"


def test_a_question_s_latency_limits_become_each_class_s_per_request_limits():
    """A class is judged by the targets that bound its time to first token or end-to-end latency (its own and the
    overall ones, the tightest of several), and by no limit where none does: the scenario's own limits go."""
    from engine.decide.targets import limits_of_targets
    classes = [{"name": "chat", "share": 0.7, "sla_ttft_ms": 1000.0, "sla_e2e_ms": 15000.0},
               {"name": "batch", "share": 0.3, "sla_e2e_ms": 60000.0}]
    targets = [Target("chat", "ttft_p99_ms", 3000.0), Target("overall", "ttft_p50_ms", 2000.0),
               Target("overall", "tpot_mean_ms", 50.0), Target("batch", "output_tokens_per_s", 900.0)]
    chat, batch = limits_of_targets(classes, targets)
    assert chat == {"name": "chat", "share": 0.7, "sla_ttft_ms": 2000.0}
    assert batch == {"name": "batch", "share": 0.3, "sla_ttft_ms": 2000.0}
    assert limits_of_targets(classes, [Target("chat", "e2e_p99_ms", 9000.0)]) == [
        {"name": "chat", "share": 0.7, "sla_e2e_ms": 9000.0}, {"name": "batch", "share": 0.3}]
    assert classes[0]["sla_ttft_ms"] == 1000.0, "the scenario's own tables are left as they were"
