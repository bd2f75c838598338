"""``python -m ui.serve``: several Streamlit processes behind one address, sticky by browser cookie.

One launcher with two processes serves every test here (started once, about 15 s on two cores): the health check
through the proxy, two browsers (two cookie jars) pinned to different processes, a forged cookie ignored, a whole
Streamlit session and an upload meeting the same process, a killed process restarted, and SIGTERM stopping all.
"""

from __future__ import annotations

import http.client
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from websockets.exceptions import ConnectionClosed

from conftest import REPO, free_port
from engine.scenario.caps import DEFAULT_CAPS, MIB
from streamlit_client import Session, open_page
from ui import serve

COOKIE = "scheduler_lab_backend"
STARTED_WITHIN_S = 90.0
RESTARTED_WITHIN_S = 60.0


def ready_pool(processes: int) -> serve.Pool:
    """A pool whose backends count as live, no process started: the choice of backend alone."""
    pool = serve.Pool(processes)
    for backend in pool.backends:
        backend.ready = True
    return pool


def test_a_new_browser_goes_to_the_least_loaded_process_counting_fresh_cookies():
    pool = ready_pool(3)
    assert pool.pick().index == 0, "ties: the lowest index"
    pool.backends[0].sessions, pool.backends[1].pending_s = 2, [time.monotonic()]
    assert pool.pick().index == 2
    pool.backends[2].pending_s = [time.monotonic() - serve.PENDING_S - 1]  # a cookie whose browser never came
    assert pool.pick().index == 2
    pool.backends[2].ready = False  # restarting: never chosen, and its cookies are not honoured
    assert pool.pick().index == 1 and pool.by_cookie("2") is None


def test_a_session_counts_once_whether_its_cookie_is_fresh_or_its_websocket_open():
    backend = serve.Backend(0)
    backend.cookie_issued()
    assert backend.load(time.monotonic()) == 1
    backend.session_opened()
    assert backend.load(time.monotonic()) == 1
    backend.session_closed()
    assert backend.load(time.monotonic()) == 0


@pytest.mark.parametrize("value", [None, "", "3", "-1", "1.0", "+1", " 1", "0x1", "١", "00000", "1" * 40])
def test_only_a_small_integer_naming_a_live_process_is_a_valid_cookie(value):
    assert ready_pool(3).by_cookie(value) is None


def test_a_valid_cookie_names_its_process():
    pool = ready_pool(3)
    assert [pool.by_cookie(v).index for v in ("0", "1", "2", "0002")] == [0, 1, 2, 2]


class Launcher:
    """The launcher process and its output lines (read from its log file)."""

    def __init__(self, log_path: Path):
        self.log_path, self.port = log_path, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        with open(log_path, "w") as log:
            self.process = subprocess.Popen([sys.executable, "-m", "ui.serve", "--processes", "2",
                                             "--port", str(self.port), "--address", "127.0.0.1"],
                                            cwd=REPO, stdout=log, stderr=subprocess.STDOUT)

    def wait_for(self, pattern: str, within_s: float) -> re.Match:
        """The first output line matching ``pattern``, waiting up to ``within_s``."""
        deadline_s = time.monotonic() + within_s
        while time.monotonic() < deadline_s:
            found = re.search(pattern, self.log_path.read_text(), re.MULTILINE)
            if found:
                return found
            if self.process.poll() is not None:
                break
            time.sleep(0.2)
        pytest.fail(f"no line matching {pattern!r} within {within_s:.0f} s; see {self.log_path}")

    def pid_of(self, index: int) -> int:
        matches = re.findall(rf"^backend {index} \w+: pid (\d+)", self.log_path.read_text(), re.MULTILINE)
        return int(matches[-1])

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=30)


@pytest.fixture(scope="module")
def launcher(tmp_path_factory):
    running = Launcher(tmp_path_factory.mktemp("serve") / "serve.log")
    try:
        running.wait_for(r"^Scheduler Lab on http://127\.0\.0\.1:\d+ \(2 processes\)$", STARTED_WITHIN_S)
        yield running
    finally:
        running.stop()


def get(url: str, cookies: dict[str, str] | None = None) -> tuple[int, bytes, dict[str, str]]:
    """(status, body, the cookies the response sets) of a GET sending ``cookies``."""
    request = urllib.request.Request(url, headers={"Cookie": cookie_header(cookies)} if cookies else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read(), set_cookies(response.headers.get_all("Set-Cookie") or [])
    except urllib.error.HTTPError as error:
        return error.code, error.read(), set_cookies(error.headers.get_all("Set-Cookie") or [])


def cookie_header(cookies: dict[str, str]) -> str:
    return "; ".join(f"{k}={v}" for k, v in cookies.items())


def set_cookies(lines: list[str]) -> dict[str, str]:
    return dict(line.split(";", 1)[0].split("=", 1) for line in lines)


def browser(url: str) -> dict[str, str]:
    """A new browser's cookie jar after its first request."""
    status, body, jar = get(f"{url}/_stcore/health")
    assert (status, body) == (200, b"ok")
    return jar


def test_the_health_check_answers_through_the_proxy_and_pins_the_browser(launcher):
    status, body, jar = get(f"{launcher.url}/_stcore/health")
    assert (status, body) == (200, b"ok")
    assert jar[COOKIE] in ("0", "1")
    status, body, again = get(f"{launcher.url}/_stcore/health", jar)
    assert (status, body) == (200, b"ok") and COOKIE not in again, "a pinned browser is not re-pinned"


def test_two_browsers_arriving_together_get_different_processes_and_keep_them(launcher):
    first, second = browser(launcher.url), browser(launcher.url)
    assert {first[COOKIE], second[COOKIE]} == {"0", "1"}
    for _ in range(3):
        for jar in (first, second):
            status, _, again = get(f"{launcher.url}/", jar)
            assert status == 200 and COOKIE not in again


@pytest.mark.parametrize("forged", ["2", "-1", "abc", "0x1", "1.0", "+1", "00000", "99999999999", ""])
def test_a_cookie_naming_no_process_is_ignored_and_replaced(launcher, forged):
    status, body, jar = get(f"{launcher.url}/_stcore/health", {COOKIE: forged})
    assert (status, body) == (200, b"ok")
    assert jar[COOKIE] in ("0", "1"), f"a fresh valid cookie replaces {forged!r}"


def new_session_id(session: Session) -> str:
    """Ask for a script run and read the forward messages until the server names the session."""
    session.run(wait=False)
    while True:
        message = ForwardMsg()
        message.ParseFromString(session.ws.recv(timeout=60))
        if message.WhichOneof("type") == "new_session":
            return message.new_session.initialize.session_id


def upload(url: str, cookies: dict[str, str], session_id: str, size_bytes: int = 0) -> int:
    """The status of a one-file upload into ``session_id``, as the browser sends it (XSRF cookie and header): a
    small CSV, or ``size_bytes`` of zeros sent a MiB at a time."""
    boundary = uuid.uuid4().hex
    head = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"t.csv\"\r\n"
            f"Content-Type: text/csv\r\n\r\n").encode()
    content = [b"\0" * min(MIB, size_bytes - start) for start in range(0, size_bytes, MIB)] if size_bytes else \
        [b"arrival_s,prompt_tokens,output_tokens\n0,10,10\n"]
    tail = f"\r\n--{boundary}--\r\n".encode()
    host, port = url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        connection.putrequest("PUT", f"/_stcore/upload_file/{session_id}/{uuid.uuid4().hex}")
        for name, value in (("Cookie", cookie_header(cookies)), ("X-Xsrftoken", cookies["_streamlit_xsrf"]),
                            ("Content-Type", f"multipart/form-data; boundary={boundary}"),
                            ("Content-Length", str(len(head) + sum(map(len, content)) + len(tail)))):
            connection.putheader(name, value)
        connection.endheaders()
        try:
            for piece in (head, *content, tail):
                connection.send(piece)
        except OSError:  # answered and closed before the whole body was sent: the answer says why
            pass
        return connection.getresponse().status
    finally:
        connection.close()


def peak_rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmHWM:")) / 1024


def test_a_whole_session_runs_through_the_proxy_and_its_uploads_meet_its_process(launcher):
    jar = browser(launcher.url)
    as_browser = {"Cookie": cookie_header(jar), "Origin": launcher.url}  # Streamlit checks the origin against Host
    elapsed_s, received = open_page(launcher.url, headers=as_browser)
    assert elapsed_s > 0 and len(received) > 10_000, "the Lab page's script run finished with its elements"
    shared = Path(launcher.wait_for(r"^run summaries shared in (.+)$", 1).group(1))
    assert len(list(shared.glob("*.json"))) >= 9, "the policy comparison's runs, for the other process to read"
    other = {**jar, COOKIE: "1" if jar[COOKIE] == "0" else "0"}
    session = Session(launcher.url, headers=as_browser)
    try:
        session_id = new_session_id(session)
        assert upload(launcher.url, jar, session_id) == 204
        assert upload(launcher.url, other, session_id) == 400, "the other process does not know the session"
    finally:
        session.close()


def test_uploads_stream_through_the_proxy_which_holds_none_of_them(launcher):
    """Ten uploads of 60 MiB at once into one session: the first two fit the visitor's share and reach the process,
    the others are refused from their declared length; the launcher holds a few chunks of each at a time (it
    buffered whole bodies before: 30 -> 1,588 MiB)."""
    jar = browser(launcher.url)
    session = Session(launcher.url, headers={"Cookie": cookie_header(jar), "Origin": launcher.url})
    try:
        session_id = new_session_id(session)
        before_mib = peak_rss_mib(launcher.process.pid)
        statuses: list[int] = []
        threads = [threading.Thread(target=lambda: statuses.append(upload(launcher.url, jar, session_id, 60 * MIB)))
                   for _ in range(10)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        grown_mib = peak_rss_mib(launcher.process.pid) - before_mib
    finally:
        session.close()
    fit = DEFAULT_CAPS.uploads_per_session_mib // 60
    assert sorted(statuses) == [204] * fit + [413] * (10 - fit), statuses
    assert grown_mib < 60, f"the launcher grew {grown_mib:.0f} MiB"


def test_a_killed_process_is_restarted_and_its_websockets_closed(launcher):
    old_pid = launcher.pid_of(1)
    session = Session(launcher.url, headers={"Cookie": f"{COOKIE}=1"})
    session.run()
    os.kill(old_pid, signal.SIGKILL)
    with pytest.raises(ConnectionClosed):  # the browser sees its connection end, and reconnects by itself
        while True:
            session.ws.recv(timeout=10)  # what the server sent after the run, until the close
    session.close()
    launcher.wait_for(rf"^backend 1 \(pid {old_pid}\) exited with code -9; restarting$", 10)
    launcher.wait_for(r"^backend 1 restarted: pid \d+ on http://127\.0\.0\.1:\d+$", RESTARTED_WITHIN_S)
    assert launcher.pid_of(1) != old_pid
    status, body, jar = get(f"{launcher.url}/_stcore/health", {COOKIE: "1"})
    assert (status, body) == (200, b"ok") and COOKIE not in jar, "its browsers come back to it"


def test_sigterm_stops_every_process(launcher):
    pids = [launcher.pid_of(0), launcher.pid_of(1)]
    shared = Path(launcher.wait_for(r"^run summaries shared in (.+)$", 1).group(1))
    assert launcher.stop() == 0
    assert not [pid for pid in pids if Path(f"/proc/{pid}").exists()] and not shared.exists()
    assert re.search(r"Traceback", launcher.log_path.read_text()) is None
