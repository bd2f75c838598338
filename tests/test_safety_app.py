"""Hostile links, uploads and names in the app: one clear line, the default or last valid scenario under
it, no file read outside the app's trace store, names shown as text, bounded memory."""

from __future__ import annotations

import base64
import json
import os
import re
import threading
import time
import tomllib
import tracemalloc
import zlib
from pathlib import Path

import pytest
import tomli_w
from streamlit.testing.v1 import AppTest

import engine
from conftest import REPO, SCENARIOS, config_fields, shown
from engine.scenario.caps import DEFAULT_CAPS, MIB, Caps
from engine.scenario import link
from engine.scenario.config import field_bounds, read_toml
from engine.scenario.origin import stored_trace_name
from engine.sim.sweep import sweep_rates
from test_safety import opened_files
from ui import runner, state, text, trace_store
from ui.result_cache import ResultCache

CONV = "arrival_s,prompt_tokens,output_tokens\n0,12,3\n0.2,40,5\n0.5,8,2\n"


def example(**changes) -> dict:
    data = read_toml(SCENARIOS / "example.toml")
    data["workload"]["num_requests"] = 500
    for key, value in changes.items():
        data = engine.apply_overrides(data, {key: value})
    return data


def lab_link(link: str) -> AppTest:
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=180)
    at.query_params[state.QUERY_KEY] = link
    return at.run()


def assert_default_under_the_error(at: AppTest, *words: str) -> None:
    assert not at.exception
    errors = shown(at.error)
    assert any(all(w in e for w in words) for e in errors), errors
    assert any(state.default_data()["name"] in c for c in shown(at.sidebar.caption))
    assert [m for m in at.metric if m.label == "TTFT p99"], "the default scenario's results are shown"


# --------------------------------------------------------------------------- links


@pytest.mark.parametrize("path", ["/etc/hostname", "/proc/self/environ"])
def test_a_link_naming_a_server_file_is_refused_without_reading_it(path):
    link = state.encode(example(**{"workload.trace": {"path": path, "format": "csv"}}))
    with opened_files() as opened:
        at = lab_link(link)
    assert_default_under_the_error(at, "is not a trace this app holds")
    assert path not in opened and not [p for p in opened if p.endswith(("hostname", "environ"))]


def test_an_uploaded_scenario_naming_a_server_file_is_refused_without_reading_it():
    data = example(**{"workload.trace": {"path": "/proc/self/environ", "format": "csv"}})
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=180).run()
    with opened_files() as opened:
        at.file_uploader(key="upload_1").set_value(("evil.toml", tomli_w.dumps(data).encode(),
                                                    "application/toml")).run()
    assert not at.exception
    assert any("is not a trace this app holds" in e for e in shown(at.error))
    assert not [p for p in opened if p.endswith("environ")]


def test_a_decompression_bomb_link_stops_at_the_limit_in_bounded_memory():
    bomb = base64.urlsafe_b64encode(zlib.compress(b"{" + b" " * (45 * MIB), 9)).decode().rstrip("=")
    assert len(bomb) < DEFAULT_CAPS.link_chars
    tracemalloc.start()
    with pytest.raises(engine.ScenarioError, match="decompresses to more than the limit of 1,048,576 bytes"):
        state.decode(bomb)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 4 * DEFAULT_CAPS.link_bytes
    assert_default_under_the_error(lab_link(bomb), "decompresses to more than the limit")


@pytest.mark.parametrize("link, words", [
    ("A" * 70_000, "has 70,000 characters, more than the limit of 65,536 characters"),
    (state.encode({"workload": {"classes": [{"name": f"c{i}", "share": 0.002} for i in range(500)]}}),
     "more than the limit of 32 classes"),
    (state.encode(example(**{"limits.max_waiting_requests": 1_000_000, "limits.max_drain_s": 1e9,
                             "workload.num_requests": 1_000_000})), "limits.max_waiting_requests"),
    (state.encode(example(**{"workload.num_requests": 10 ** 8})), "above the limit of 1,000,000 requests"),
    (base64.urlsafe_b64encode(zlib.compress(b"[" * 100_000 + b"]" * 100_000)).decode(), "is damaged"),
])
def test_hostile_links_are_one_line_over_the_default_scenario(link, words):
    assert_default_under_the_error(lab_link(link), words)


@pytest.mark.parametrize("changes", [
    {"workload.num_requests": 50},
    {"workload.num_requests": 1},
    {"policy.name": "priority", "policy.preempt_overhead_ms": 0.0, "policy.preemptive": True},
    {"policy.name": "wfq", "policy.weights": {"interactive": 0.001, "offline": 1e5}},
    {"workload.arrival.rate_per_s": 0.001},
])
def test_every_value_the_engine_accepts_opens_in_the_lab(changes):
    """Widgets hold whatever a valid link carries: no StreamlitValueBelowMinError or AboveMaxError."""
    at = lab_link(state.encode(example(**changes)))
    assert not at.exception and not at.error
    assert [m for m in at.metric if m.label == "TTFT p99"]
    if "workload.num_requests" in changes:
        assert at.number_input(key="requests_1").value == changes["workload.num_requests"]


def test_a_rate_set_on_the_workload_page_beyond_the_lab_slider_still_opens():
    at = lab_link(state.encode(example()))
    at.switch_page("pages/workload.py").run()
    at.number_input(key="w_rate_1").set_value(500.0).run()
    at.switch_page("pages/lab.py").run()
    assert not at.exception
    assert at.slider(key="rate_1").value == 500.0


# --------------------------------------------------------------------------- names are text


HOSTILE_NAME = "![x](http://evil.example/p.png)<b>[y](http://evil.example)</b>:red[z]$x$"


def test_class_and_scenario_names_are_shown_as_text():
    data = example(name=HOSTILE_NAME[:80])
    data["workload"]["classes"][0]["name"] = HOSTILE_NAME[:80]
    at = lab_link(state.encode(data))
    assert not at.exception and not at.error
    rendered = [m.value for m in at.markdown] + [c.value for c in at.caption] + [m.label for m in at.metric]
    raw_markup = re.compile(r"(?<!\\)(!\[|\]\(|<b>|:red\[|\$x)")
    named = [r for r in rendered if "evil" in r]
    assert named and not [r for r in named if raw_markup.search(r)], named
    assert any(HOSTILE_NAME[:80] in c for c in shown(at.sidebar.caption))
    labels = [t for chart in at.get("plotly_chart") for t in strings(json.loads(chart.proto.spec)) if "evil" in t]
    assert labels and not [t for t in labels if "<" in t], labels


def strings(node) -> list[str]:
    """Every string inside a JSON value."""
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [s for v in node.values() for s in strings(v)]
    if isinstance(node, list):
        return [s for v in node for s in strings(v)]
    return []


def test_plain_text_round_trips_through_markdown_escapes():
    for name in (HOSTILE_NAME, "a_b*c`d~e|f#g", "50% off: :smile: & <script>", "tab\tnew\nline"):
        escaped = text.plain(name)
        assert re.sub(r"\\(.)", r"\1", escaped).replace("\u2060", "") == " ".join(name.split())
        assert not re.search(r"(?<!\\)[!\[\]()<>$:*_`]", escaped.replace("\\\\", ""))
    assert text.chart_text("<a href='x'>y</a>") == "&lt;a href='x'&gt;y&lt;/a&gt;"


# --------------------------------------------------------------------------- uploads


def workload_page() -> AppTest:
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=180).run()
    return at.switch_page("pages/workload.py").run()


def test_a_trace_upload_is_stored_only_once_used_and_then_under_its_hash():
    content = CONV.encode()
    name = stored_trace_name(content, ".csv")
    (trace_store.STORE_DIR / name).unlink(missing_ok=True)
    at = workload_page()
    at.file_uploader(key="trace_upload").set_value(("mine.csv", content, "text/csv")).run()
    assert not at.exception and not at.error
    assert not (trace_store.STORE_DIR / name).exists(), "nothing is written before the trace is used"
    at.button(key="use_trace").click().run()
    assert (trace_store.STORE_DIR / name).read_bytes() == content
    link = at.query_params[state.QUERY_KEY]
    linked = state.decode(link if isinstance(link, str) else link[0])
    assert linked["workload"]["trace"]["path"] == name, "the link names the stored trace, not a server path"
    assert not at.exception and not at.error and at.title[0].value == "Scheduler Lab"
    assert [m for m in at.metric if m.label == "TTFT p99"]


@pytest.mark.parametrize("content, words", [
    (bytes(range(256)) * 100, "line 3: 2 fields but the header has 1"),
    (b"arrival_s,prompt_tokens,output_tokens\n0,1e19,3\n", "must be an integer from 1 to 10,000,000"),
    (b"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:00:00+00:00,3,2\nnot a time,1,1\n",
     "line 3: TIMESTAMP = 'not a time' is not a date-time"),
])
def test_a_bad_trace_upload_is_one_line_and_writes_nothing(content, words):
    before = set(trace_store.STORE_DIR.glob("*")) if trace_store.STORE_DIR.exists() else set()
    at = workload_page()
    at.file_uploader(key="trace_upload").set_value(("bad.csv", content, "text/csv")).run()
    assert not at.exception
    assert any(words in e for e in shown(at.error)), shown(at.error)
    after = set(trace_store.STORE_DIR.glob("*")) if trace_store.STORE_DIR.exists() else set()
    assert after == before


@pytest.mark.parametrize("content, words", [
    (b"# x\n" * (DEFAULT_CAPS.scenario_bytes // 4 + 1), "has 1,048,580 bytes, more than the limit of 1,048,576"),
    (bytes(range(256)) * 40, "is not a text file"),
    (("a = " + "[" * 100_000 + "]" * 100_000).encode(), "is nested too deeply to be a scenario"),
])
def test_a_hostile_scenario_upload_is_one_line_over_the_current_scenario(content, words):
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=180).run()
    at.file_uploader(key="upload_1").set_value(("evil.toml", content, "application/toml")).run()
    assert not at.exception
    assert any(words in e for e in shown(at.error)), shown(at.error)
    assert any(state.default_data()["name"] in c for c in shown(at.sidebar.caption))


def test_a_trace_upload_beyond_the_upload_limit_is_one_line():
    content = b"arrival_s,prompt_tokens,output_tokens\n" + b"0,1,1\n" * (DEFAULT_CAPS.upload_mib * MIB // 6 + 1)
    at = workload_page()
    at.file_uploader(key="trace_upload").set_value(("huge.csv", content, "text/csv")).run()
    assert not at.exception
    assert any("more than the limit of 64 MiB for an uploaded trace" in e for e in shown(at.error))


def test_the_store_keeps_its_quota_and_age_and_clears_partial_writes(tmp_path, monkeypatch):
    monkeypatch.setattr(trace_store, "STORE_DIR", tmp_path)
    caps = Caps(upload_store_mib=1, upload_store_s=100.0)
    old = tmp_path / ("a" * 32 + ".csv")
    old.write_bytes(b"x" * 10)
    partial = tmp_path / ".partial-abc"
    partial.write_bytes(b"half")
    os.utime(old, (1, 1))
    os.utime(partial, (1, 1))
    names = [trace_store.store(bytes([i]) * (400 * 1024), ".csv", caps) for i in range(4)]
    kept = sorted(p.name for p in tmp_path.iterdir())
    assert not old.exists() and not partial.exists(), "old traces and partial writes are removed"
    assert names[-1] in kept and names[0] not in kept, "the least recently used go first"
    assert sum((tmp_path / k).stat().st_size for k in kept) <= 1 * MIB
    assert all(re.fullmatch(r"[0-9a-f]{32}\.csv", k) for k in kept)


# --------------------------------------------------------------------------- result cache


def test_the_result_cache_is_bounded_in_bytes_and_age():
    now = [0.0]
    cache = ResultCache(max_bytes=100, max_age_s=10.0, size_of=len, clock=lambda: now[0])
    cache.put("a", "x" * 40)
    cache.put("b", "y" * 40)
    assert cache.get("a") == "x" * 40  # a is now the most recently used
    cache.put("c", "z" * 40)
    assert cache.get("b") is None and cache.get("a") and cache.get("c") and cache.held_bytes == 80
    cache.put("huge", "w" * 101)
    assert cache.get("huge") is None and cache.held_bytes == 80
    now[0] = 10.5
    assert cache.get("a") is None and len(cache) == 0 and cache.held_bytes == 0
    computed = []
    assert cache.get_or_compute("d", lambda: computed.append(1) or "d") == "d"
    assert cache.get_or_compute("d", lambda: computed.append(1) or "d") == "d" and computed == [1]


# --------------------------------------------------------------------------- server settings


def test_server_settings_match_the_limits_and_hide_error_details():
    config = tomllib.loads((REPO / ".streamlit" / "config.toml").read_text())
    assert config["server"]["maxUploadSize"] == DEFAULT_CAPS.upload_mib
    assert config["server"]["address"] == "localhost"
    assert config["client"]["showErrorDetails"] == "none"
    assert config["server"].get("enableXsrfProtection", True) is True
    assert config["browser"]["gatherUsageStats"] is False  # no usage statistics leave the machine


def test_the_code_never_unpickles_or_evaluates_input():
    sources = [p for folder in ("engine", "ui", "pages") for p in (REPO / folder).glob("*.py")] + [REPO / "app.py"]
    pattern = re.compile(r"\bpickle\b|\beval\(|\bexec\(|yaml\.load\(|allow_pickle=True")
    offenders = [f"{p.name}: {line.strip()}" for p in sources for line in p.read_text().splitlines()
                 if pattern.search(line)]
    assert not offenders


def test_the_manual_explains_how_to_serve_others():
    page = (REPO / "docs" / "serving.md").read_text()
    assert "--server.address" in page and "reverse proxy" in page


def test_uploaded_traces_live_in_the_users_cache_folder_unless_told_otherwise():
    assert trace_store.store_dir({}) == Path.home() / ".cache" / "scheduler-lab" / "traces"
    assert trace_store.store_dir({"XDG_CACHE_HOME": "/c"}) == Path("/c/scheduler-lab/traces")
    assert trace_store.store_dir({"XDG_CACHE_HOME": "/c", "SCHEDULER_LAB_TRACE_STORE": "/s"}) == Path("/s")


def test_a_link_that_validates_but_cannot_run_shows_the_default_scenario_under_its_error():
    at = lab_link(state.encode(example(**{"server.kv_capacity_tokens": 64})))
    assert not at.exception
    assert any("KV cache holds" in e and "Showing the default scenario" in e for e in shown(at.error))
    assert any(state.default_data()["name"] in c for c in shown(at.main.caption)), "the default's results are shown"
    assert [m for m in at.metric if m.label == "TTFT p99"]
    assert any("example" in c for c in shown(at.sidebar.caption)), "the link's scenario stays in the controls"


def test_a_section_stops_when_its_simulation_time_is_used_up(monkeypatch):
    """A section's runs share one time budget (running on all cores at once): the runs not finished when it is
    used up are left out, and said so. Two runs are quick and four outlast the budget, on any number of cores."""
    real = runner.summary

    def slow(scenario_json: str) -> dict:
        quick = json.loads(scenario_json)["policy"]["name"] in ("fifo", "priority")
        time.sleep(0.05 if quick else 2.0)
        return real(scenario_json)

    monkeypatch.setattr(runner, "summary", slow)
    monkeypatch.setattr(runner.SectionBudget.__init__, "__defaults__", (0.8,))
    frame, note = runner.policy_comparison(example(), ["fifo", "priority", "sjf", "srpt", "edf", "wfq"])
    assert list(frame["policy"].unique()) == ["fifo", "priority"]
    assert note == ("Only 2 of 6 runs are shown: this section's time limit of 0.8 s (section_s) ran out; "
                    "simulate fewer requests or a lighter load to see every run.")


def test_a_section_whose_time_runs_out_before_any_run_ends_still_shows_its_first(monkeypatch):
    """Runs slower than the whole section budget: the first is waited for (a section never comes back empty)."""
    real = runner.summary

    def slow(scenario_json: str) -> dict:
        time.sleep(0.3)
        return real(scenario_json)

    monkeypatch.setattr(runner, "summary", slow)
    monkeypatch.setattr(runner.SectionBudget.__init__, "__defaults__", (0.05,))
    frame, note = runner.policy_comparison(example(), ["fifo", "priority", "sjf", "srpt", "edf", "wfq"])
    assert list(frame["policy"].unique()) == ["fifo"]
    assert note is not None and note.startswith("Only 1 of 6 runs are shown")


def test_every_integer_a_widget_shows_has_a_bound_a_browser_can_hold():
    """Browsers hold integers exactly up to 2^53 - 1; every integer key but the seed (no widget) stops below."""
    widget_ints = [(key, meta) for key, (tp, meta) in config_fields().items()
                   if tp is int and key != "seed" and "choices" not in meta]
    unbounded = [key for key, meta in widget_ints if not (field_bounds(meta)[1] or 2 ** 53) < 2 ** 53]
    assert not unbounded


def test_old_results_are_dropped_even_while_nobody_asks():
    now = [0.0]
    cache = ResultCache(max_bytes=100, max_age_s=0.5, size_of=len, clock=lambda: now[0])
    cache.put("a", "x" * 40)
    now[0] = 1.0
    time.sleep(1.5)  # the sweeper wakes every max(age / 4, 1 s)
    assert cache._bytes == 0 and not cache._entries


def test_large_runs_take_turns_and_small_ones_do_not_wait(monkeypatch):
    running, most = [0], [0]
    lock = threading.Lock()

    def counted(scenario, progress=None):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.3)
        with lock:
            running[0] -= 1
        raise engine.ScenarioError("stop here")

    monkeypatch.setattr(runner.engine, "simulate", counted)
    for requests, expected in ((200_000, 1), (1000, 2)):  # estimated at about 150 MiB and 18 MiB
        most[0] = 0
        scenario_json = runner.canonical(example(**{"workload.num_requests": requests}))
        threads = [threading.Thread(target=lambda: pytest.raises(engine.ScenarioError, runner._simulate, scenario_json))
                   for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert most[0] == expected


def test_an_unexpected_error_in_a_page_is_one_line_without_its_details(monkeypatch):
    from ui import charts

    def broken(*args, **kwargs):
        raise ValueError("boom at /srv/secret/path")

    monkeypatch.setattr(charts, "latency_cdf", broken)
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=180).run()
    assert not at.exception
    assert shown(at.error) == ["This page stopped on an unexpected error (ValueError); the scenario is unchanged. "
                               "Please report it with the page link."]


def test_addresses_in_names_never_form_a_link():
    for name in ("http://evil.example/x", "see www.evil.example", "me@evil.example", "mailto:me@evil.example"):
        unescaped = re.sub(r"\\(.)", r"\1", text.plain(name))
        assert not re.search(r"https?://|www\.|\w@\w|mailto:\w", unescaped)


def test_a_link_planted_in_the_store_is_not_followed(tmp_path):
    """Even a file that looks stored is replayed only if it is a regular file of the store, not a link."""
    name = "0123456789abcdef0123456789abcdef.csv"
    (tmp_path / name).symlink_to("/etc/hostname")
    data = example(**{"workload.trace": {"path": name, "format": "csv"}})
    origin = engine.scenario.origin.Origin(trace_dir=str(tmp_path), trace_names_only=True)
    with opened_files() as opened:
        with pytest.raises(engine.ScenarioError, match="is no longer on this server"):
            engine.load_scenario(data, origin=origin)
    assert not [p for p in opened if "hostname" in p]


def test_a_store_folder_others_can_write_to_is_refused(tmp_path, monkeypatch):
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    monkeypatch.setattr(trace_store, "STORE_DIR", shared)
    with pytest.raises(trace_store.StoreError, match="not private to the user running it"):
        trace_store.store(CONV.encode(), ".csv")
    assert not list(shared.iterdir())


def test_a_new_session_drops_old_uploads_and_replaying_keeps_a_trace_fresh(tmp_path, monkeypatch):
    monkeypatch.setattr(trace_store, "STORE_DIR", tmp_path)
    old, used = tmp_path / ("a" * 32 + ".csv"), tmp_path / ("b" * 32 + ".csv")
    for path in (old, used):
        path.write_text(CONV)
        os.utime(path, (1, 1))
    trace_store.touch(used.name)
    AppTest.from_file(str(REPO / "app.py"), default_timeout=180).run()
    assert not old.exists() and used.exists()


@pytest.mark.parametrize("rate, load", [(2.5, 0.75), (1e9, 1e-300), (1e-4, 1e6), (5.0, 0.0), (5.0, float("inf"))])
def test_load_curve_rates_stay_within_the_rates_a_scenario_accepts(rate, load):
    rates = sweep_rates(rate, load)
    assert rates and all(1e-4 <= r <= 1e9 for r in rates)


def test_load_curves_reach_a_current_rate_past_capacity():
    rates = sweep_rates(6.76, 1.3)
    assert 6.76 in rates and max(rates) == 6.76 and len(rates) == 8
    assert len(sweep_rates(5.0, 0.91)) == 7  # inside the range: the seven fixed fractions only


# --------------------------------------------------------------------------- a link Streamlit does not read


def too_long_query() -> str:
    return "s=" + "A" * (link.QUERY_MAX_CHARS - 1)  # one character more than Streamlit reads


def too_many_parameters() -> str:
    return f"s={state.encode(example())}" + "&x=1" * link.QUERY_MAX_PARAMETERS


def test_the_limits_on_a_query_are_streamlits():
    from streamlit.runtime.state import query_params

    assert (link.QUERY_MAX_CHARS, link.QUERY_MAX_PARAMETERS) == (query_params.CLIENT_STATE_QUERY_STRING_MAX_LENGTH,
                                                                 query_params.CLIENT_STATE_QUERY_STRING_MAX_FIELDS)
    assert query_params.sanitize_query_string(too_long_query()) == ""
    assert query_params.sanitize_query_string(too_many_parameters()) == ""
    for within in ("s=" + "A" * (link.QUERY_MAX_CHARS - 2), "s=A" + "&x=1" * (link.QUERY_MAX_PARAMETERS - 1)):
        assert query_params.sanitize_query_string(within) == within


TOO_LONG = (f"the link had {link.QUERY_MAX_CHARS + 1:,} characters after its '?', more than the 524,288 the server "
            f"reads, so it was not read; the default scenario is shown")
TOO_MANY = ("the link had 1,001 parameters, more than the 1,000 the server reads, so it was not read; the default "
            "scenario is shown")


@pytest.mark.parametrize("note, said", [(f"characters-{link.QUERY_MAX_CHARS + 1}", TOO_LONG),
                                        ("parameters-1001", TOO_MANY)])
def test_the_note_of_a_link_streamlit_did_not_read_is_one_line_over_the_default_scenario(note, said):
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=180)
    at.query_params[link.UNREAD_KEY] = note
    at.run()
    assert_default_under_the_error(at, said)
    assert shown(at.error) == [said]
    assert link.UNREAD_KEY not in at.query_params, "the note leaves the address with the error"


@pytest.mark.parametrize("note", ["parameters-1000", f"characters-{link.QUERY_MAX_CHARS}", "parameters-1e9",
                                  "lines-5000", "parameters-" + "9" * 16])
def test_a_forged_note_says_nothing(note):
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=180)
    at.query_params[link.UNREAD_KEY] = note
    at.run()
    assert not at.exception and not at.error, shown(at.error)


def watchers(at: AppTest) -> list:
    return [h for h in at.get("html") if link.UNREAD_KEY in h.proto.body]


def test_only_a_session_opened_without_a_query_watches_for_a_link_streamlit_did_not_read():
    """Its first run found no query parameter: the page's script looks at the address it was loaded with."""
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=180).run()
    assert not at.exception and len(watchers(at)) == 1
    assert not watchers(lab_link(state.encode(example()))), "a link Streamlit read: nothing to watch for"
    assert not watchers(at.run()), "once per session"


CHROMIUM = Path("/usr/bin/chromium")


@pytest.mark.skipif(not CHROMIUM.exists(), reason="Chromium is missing: run `bash .ci/setup` (apt-get install "
                                                  "chromium)")
def test_a_browser_opening_a_link_streamlit_does_not_read_shows_one_line_over_the_default(tmp_path):
    """In Chromium: Streamlit dropped the link whole, with a line in its log only, and the visitor saw the default
    scenario without a word. A link of more characters than Streamlit reads never passes the HTTP server (uvicorn
    answers 400 to a request line over 16 KiB that arrives in pieces): its page is fetched here without the query, as
    a front server holding the page would serve it, while the browser keeps the address it was asked to open."""
    from playwright.sync_api import sync_playwright

    from conftest import app_server

    with app_server(tmp_path / "streamlit.log") as (url, _), sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                     args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        try:
            for query, said in ((too_many_parameters(), TOO_MANY), (too_long_query(), TOO_LONG)):
                page = browser.new_page()
                if len(query) > 10_000:
                    page.route(lambda address: "?s=AAAA" in address,
                               lambda route: route.continue_(url=route.request.url.partition("?")[0]))
                page.goto(f"{url}/hardware?{query}", timeout=240_000)
                error = page.locator('[data-testid="stAlertContentError"]').first
                error.wait_for(timeout=240_000)
                assert error.inner_text() == said
                assert page.url.startswith(f"{url}/hardware?"), "the page the link opened"
                page.close()
        finally:
            browser.close()
