"""The Streamlit app, driven headless with AppTest."""

from streamlit.testing.v1 import AppTest

from conftest import REPO


def app() -> AppTest:
    return AppTest.from_file(str(REPO / "app.py"), default_timeout=120)


def test_lab_runs_the_default_preset():
    at = app().run()
    assert not at.exception
    assert at.title[0].value == "Scheduler Lab"
    table = at.dataframe[0].value
    assert list(table.index) == ["interactive", "offline", "overall"]
    assert table.loc["overall", "completed"] == 20000


def test_switching_policy_changes_the_interactive_latency():
    at = app().run()
    fifo_p99 = at.dataframe[0].value.loc["interactive", "TTFT p99 (ms)"]
    at.sidebar.selectbox[1].set_value("priority").run()
    assert not at.exception
    priority_p99 = at.dataframe[0].value.loc["interactive", "TTFT p99 (ms)"]
    assert priority_p99 < fifo_p99


def test_every_preset_renders():
    at = app().run()
    for preset in at.sidebar.selectbox[0].options:
        at.sidebar.selectbox[0].set_value(preset)
        at.sidebar.number_input[0].set_value(1000).run()
        assert not at.exception, preset
        assert at.dataframe[0].value.loc["overall", "arrived"] == 1000
