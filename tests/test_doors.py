"""Doors a visitor could open on a real server started by ``python -m ui.start``, each tried as a hostile visitor
would: Streamlit's ``clear_cache`` and ``install_skills`` messages, more sessions than a process holds, and uploads
beyond a visitor's share. Small apps of their own (``app.py`` in a temporary folder, the project's ``ui`` on the
path) keep each server quick to start and keep anything a failing check writes out of the checkout."""

from __future__ import annotations

import http.client
import json
import socket
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from websockets.exceptions import InvalidStatus

from conftest import REPO, app_server
from engine.scenario.caps import DEFAULT_CAPS, MIB
from streamlit_client import Session

VALUE_APP = """
import time
import streamlit as st

@st.cache_resource
def made_at() -> float:
    return time.time()

st.write(f"made {made_at()!r}")
"""
UPLOAD_APP = """
import streamlit as st

st.file_uploader("a file")
"""


@contextmanager
def small_server(tmp_path: Path, script: str, monkeypatch, *options: str):
    """``python -m ui.start`` serving ``script`` from a folder of its own (with ``options`` after the port)."""
    (tmp_path / "app.py").write_text(script)
    monkeypatch.setenv("PYTHONPATH", str(REPO))

    def command(port: int) -> list[str]:
        return [sys.executable, "-m", "ui.start", f"--server.port={port}", "--server.address=127.0.0.1", *options]

    with app_server(tmp_path / "server.log", repo=tmp_path, command=command) as (url, process):
        yield url, process


@pytest.fixture(scope="module")
def value_server(tmp_path_factory):
    """One small server of ``VALUE_APP`` with the default options, for the tests that need nothing else: (url, the
    folder holding its log)."""
    folder = tmp_path_factory.mktemp("value_app")
    with pytest.MonkeyPatch.context() as monkeypatch, small_server(folder, VALUE_APP, monkeypatch) as (url, _):
        yield url, folder


def messages(session: Session, wanted: str, timeout_s: float = 60.0) -> list[ForwardMsg]:
    """Forward messages until one of type ``wanted`` (included)."""
    got, deadline = [], time.monotonic() + timeout_s
    while True:
        message = ForwardMsg()
        message.ParseFromString(session.ws.recv(timeout=max(0.1, deadline - time.monotonic())))
        got.append(message)
        if message.WhichOneof("type") == wanted:
            return got


def run_page(session: Session) -> list[ForwardMsg]:
    session.run(wait=False)
    return messages(session, "script_finished")


def written(found: list[ForwardMsg]) -> list[str]:
    return [m.delta.new_element.markdown.body for m in found
            if m.WhichOneof("type") == "delta" and m.delta.new_element.WhichOneof("type") == "markdown"]


def session_id(found: list[ForwardMsg]) -> str:
    return next(m.new_session.initialize.session_id for m in found if m.WhichOneof("type") == "new_session")


def send(session: Session, **fields) -> None:
    message = BackMsg()
    for name, value in fields.items():
        getattr(message, name).CopyFrom(value) if not isinstance(value, bool) else setattr(message, name, value)
    session.ws.send(message.SerializeToString())


def test_a_visitors_clear_cache_is_refused_and_the_shared_caches_stay(value_server):
    url, folder = value_server
    session = Session(url)
    try:
        before = written(run_page(session))
        send(session, clear_cache=True)
        time.sleep(1.0)
        after = written(run_page(session))
    finally:
        session.close()
    assert before and after == before, "the cached value was made again: the cache was cleared"
    assert "clear the server's caches: refused" in (folder / "server.log").read_text()


def test_a_visitor_cannot_make_the_server_write_skills_even_when_started_with_a_display(tmp_path, monkeypatch):
    home = tmp_path / "home"
    (home / ".claude").mkdir(parents=True)  # an agent harness on the machine: Streamlit would install for it
    monkeypatch.setenv("HOME", str(home))
    app_dir = tmp_path / "app"
    app_dir.mkdir()
    with small_server(app_dir, VALUE_APP, monkeypatch, "--server.headless=false") as (url, _):
        session = Session(url)
        try:
            found = run_page(session)
            request = BackMsg()
            request.backend_operation_request.request_id = "1"
            request.backend_operation_request.session_id = session_id(found)
            request.backend_operation_request.install_skills.SetInParent()
            session.ws.send(request.SerializeToString())
            answer = messages(session, "backend_operation_response")[-1].backend_operation_response
        finally:
            session.close()
    assert answer.error_reason == "refused:headless", answer
    assert not (app_dir / ".agents").exists() and not (app_dir / ".claude").exists()


def test_a_process_holds_at_most_its_sessions_and_lets_the_next_one_in_when_one_leaves(value_server):
    url, _ = value_server
    held = [Session(url, open_timeout_s=60) for _ in range(DEFAULT_CAPS.sessions_per_process)]
    try:
        with pytest.raises(InvalidStatus) as refused:
            Session(url, open_timeout_s=60)
        assert refused.value.response.status_code == 503
        assert refused.value.response.headers["Retry-After"] == "5"
        held.pop().close()
        time.sleep(0.5)
        held.append(Session(url, open_timeout_s=60))
        assert written(run_page(held[-1])), "the session let in gets its page"
    finally:
        for session in held:
            session.close()
    time.sleep(1.0)  # every place given back for the tests after this one


def put_upload(url: str, session: str, file_id: str, size_bytes: int, send_body: bool = True) -> tuple[int, str]:
    """PUT an upload of ``size_bytes`` declared; without ``send_body`` only its headers are sent, and the answer must
    come without the body. (status, text of the answer)."""
    host, port = url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    boundary = "scheduler-lab-test"
    head = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"t.bin\"\r\n"
            "Content-Type: application/octet-stream\r\n\r\n").encode()
    tail = f"\r\n--{boundary}--\r\n".encode()
    connection.putrequest("PUT", f"/_stcore/upload_file/{session}/{file_id}")
    connection.putheader("Content-Type", f"multipart/form-data; boundary={boundary}")
    connection.putheader("Content-Length", str(len(head) + size_bytes + len(tail)))
    connection.endheaders()
    if send_body:
        connection.send(head)
        chunk = b"\0" * MIB
        for start in range(0, size_bytes, MIB):
            connection.send(chunk[:min(MIB, size_bytes - start)])
        connection.send(tail)
    response = connection.getresponse()
    answer = response.status, response.read().decode(errors="replace")
    connection.close()
    return answer


def test_an_upload_beyond_a_visitors_share_is_refused_before_its_body_is_sent(tmp_path, monkeypatch):
    with small_server(tmp_path, UPLOAD_APP, monkeypatch, "--server.enableXsrfProtection=false") as (url, _):
        session = Session(url)
        try:
            sid = session_id(run_page(session))
            share = DEFAULT_CAPS.uploads_per_session_mib * MIB
            first = share * 2 // 3
            assert put_upload(url, sid, "one", first)[0] == 204
            started = time.monotonic()
            status, text = put_upload(url, sid, "two", share - first + MIB, send_body=False)
            assert status == 413 and "uploads_per_session_mib" in text
            assert time.monotonic() - started < 5.0, "answered from the headers alone"
            assert put_upload(url, sid, "one", share - first)[0] == 204, "a file sent again replaces itself"
        finally:
            session.close()


def test_the_server_settings_keep_a_visitors_doors_shut():
    """What the settings file says (the server forces headless whatever it says: the test above)."""
    import tomllib
    settings = tomllib.loads((REPO / ".streamlit" / "config.toml").read_text())
    assert settings["server"]["headless"] is True and settings["server"]["fileWatcherType"] == "none"
    assert settings["runner"]["postScriptGC"] is False
    assert json.dumps(settings["client"]["toolbarMode"]) == '"viewer"'


def test_the_shared_results_and_the_large_runs_turns_outlive_a_cleared_streamlit_cache():
    """What a clear_cache would have emptied, were it honoured: the app keeps its shared state out of Streamlit's
    caches, so a result computed before is still found, and a large run's turn is given back to the semaphore it was
    taken from (a new one made after a clear raised "Semaphore released too many times")."""
    import streamlit as st

    from ui import runner, state

    data = state.default_data()
    data["workload"]["num_requests"] = 200
    runner.simulate(runner.canonical(data))
    held = runner._LARGE_RUNS.acquire(blocking=False)
    st.cache_resource.clear()
    st.cache_data.clear()
    assert runner.kept_run(data) is not None
    if held:
        runner._LARGE_RUNS.release()  # the semaphore taken from: no ValueError


def test_a_long_link_arriving_in_pieces_opens_the_page(value_server):
    """A link of 60,000 characters sent in pieces of one network packet, as a network delivers it: the server's HTTP
    parser answered a request line over 16 KiB with a bare 400, before the app could say anything."""
    url, _ = value_server
    link = "/?s=" + "A" * 60_000
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as connection:
        request = f"GET {link} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode()
        for start in range(0, len(request), 1460):
            connection.sendall(request[start:start + 1460])
            time.sleep(0.001)
        status_line = connection.recv(64).split(b"\r\n")[0]
    assert status_line == b"HTTP/1.1 200 OK", status_line
