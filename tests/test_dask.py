"""Scale-out on Dask (engine.sim.parallel.dask_cluster): a real ``dask scheduler`` and two ``dask worker`` processes on
localhost run the planner's and the tuner's simulations, and the answers equal the local ones, bit for bit; the
command line plans through them; an unreachable scheduler is one clear line. Then the address that cannot hang
(engine.sim.dask_connect): a malformed address, a port nobody listens on, a listener that never speaks, speaks garbage
or hangs up, each end as one line within a stated bound, printing nothing."""

import contextlib
import gc
import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from conftest import REPO, SCENARIOS, free_port
from engine.decide.planner import Question, plan
from engine.decide.targets import Target
from engine.decide.tuner import Objective, TuneQuestion, tune
from engine.scenario.config import apply_overrides, read_toml
from engine.scenario.errors import ScenarioError
from engine.sim import dask_connect
from engine.sim.dask_connect import (CLOSE_TIMEOUT_S, REPLY_GRACE_S, check_address, check_workers, close_quietly,
                                     open_client)
from engine.sim.parallel import dask_cluster, where, workers

ARTICLE = read_toml(SCENARIOS / "article_mixed_8xa100.toml")
QUESTION = Question((Target("interactive", "ttft_p99_ms", 1000.0),), gpus=("A100-80G", "H100-80G"), seeds=2,
                    requests=500)
TUNING = TuneQuestion(Objective("interactive", "ttft_p99_ms"), candidates=16, seeds=1, requests=800)
BUSY = apply_overrides(ARTICLE, {"server.max_batch_size": 64, "workload.arrival.rate_per_s": 45.0})


def without_timing(answer: dict) -> dict:
    return {k: v for k, v in answer.items() if k not in ("run", "wall_s", "workers")}


@pytest.fixture(scope="module")
def scheduler():
    """``dask scheduler`` and two one-thread ``dask worker`` processes on localhost, the checkout importable."""
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    dask = [sys.executable, "-m", "dask"]
    procs = [subprocess.Popen([*dask, "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"],
                              cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    time.sleep(1.0)
    procs += [subprocess.Popen([*dask, "worker", address, "--nthreads", "1", "--nworkers", "1", "--no-dashboard"],
                               cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
              for _ in range(2)]
    try:
        from distributed import Client
        with Client(address, timeout="60s", set_as_default=False) as client:
            client.wait_for_workers(2, timeout=120)
        yield address
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()


def ran_on_workers(address: str) -> int:
    """How many ``run_summary`` tasks the scheduler's workers have finished so far."""
    from distributed import Client
    with Client(address, timeout="30s", set_as_default=False) as client:
        return client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.task_prefixes["run_summary"]
                                       .state_counts["memory"] if "run_summary" in dask_scheduler.task_prefixes
                                       else 0)


def test_a_plan_through_a_dask_scheduler_equals_the_local_one(scheduler):
    local = plan(ARTICLE, QUESTION)
    before = ran_on_workers(scheduler)
    with dask_cluster(scheduler):
        assert workers() == 2 and "2 worker threads of the Dask scheduler at" in where()
        remote = plan(ARTICLE, QUESTION)
    assert ran_on_workers(scheduler) - before == local["run"]["evaluations"], "every run went to the workers"
    assert remote["run"]["workers"] == 2 and remote["run"]["evaluations"] == local["run"]["evaluations"]
    assert without_timing(remote) == without_timing(local)


def test_a_tuning_through_a_dask_scheduler_equals_the_local_one(scheduler):
    local = tune(BUSY, TUNING)
    with dask_cluster(scheduler):
        remote = tune(BUSY, TUNING)
    assert remote["workers"] == 2 and without_timing(remote) == without_timing(local)


def test_the_command_line_plans_through_the_scheduler(scheduler):
    done = subprocess.run([sys.executable, "-m", "engine", "plan", str(SCENARIOS / "article_mixed_8xa100.toml"),
                           "--target", "interactive.ttft_p99_ms=1000", "--gpus", "H100-80G", "--seeds", "2",
                           "--requests", "500", "--scheduler", scheduler, "--json", "-"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["run"]["workers"] == 2


def test_the_planner_page_plans_on_the_operators_cluster(scheduler, monkeypatch):
    from streamlit.testing.v1 import AppTest

    from ui import cluster, state, view
    monkeypatch.setenv(cluster.DASK_ENV, scheduler)
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=300)
    at.query_params[state.QUERY_KEY] = state.encode(ARTICLE)
    at.query_params[view.QUERY_KEY] = state.encode({"plan_gpus": ["H100-80G"], "plan_seeds": 2, "plan_requests": 500})
    at.run()
    at.switch_page("pages/planner.py").run()
    assert at.toggle(key="plan_on_dask").value, "on by default when the operator set a scheduler"
    before = ran_on_workers(scheduler)
    next(b for b in at.button if b.label == "Plan").click().run()
    assert not at.exception and not at.error
    assert ran_on_workers(scheduler) > before
    assert any(f"on 2 worker threads of the Dask scheduler at {scheduler}" in c.value for c in at.caption)


def test_an_unreachable_scheduler_is_one_clear_line():
    with pytest.raises(ScenarioError, match=r"could not reach the Dask scheduler at 'tcp://127.0.0.1:\d+' with a "
                                            r"worker within"):
        with dask_cluster(f"tcp://127.0.0.1:{free_port()}", connect_timeout_s=2):
            pass
    assert workers() >= 1 and "local cores" in where(), "nothing stays in use after a failure"


# --- A scheduler address that cannot hang (engine.sim.dask_connect) ---

TIMEOUT_S = 2  # connect_timeout_s in these tests (20 s on the command line)
BOUND_S = TIMEOUT_S + REPLY_GRACE_S + CLOSE_TIMEOUT_S  # what open_client promises, whatever the other end does
CHECK_S = 0.5  # a malformed address is refused before anything connects


@contextlib.contextmanager
def listener(answer):
    """A TCP listener on localhost calling ``answer(connection)`` on each connection it accepts (connections kept
    open until the end); yields its address."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.1)
    held, done = [], threading.Event()

    def serve():
        while not done.is_set():
            with contextlib.suppress(socket.timeout):
                connection, _ = server.accept()
                held.append(connection)
                with contextlib.suppress(OSError):
                    answer(connection)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"tcp://127.0.0.1:{server.getsockname()[1]}"
    finally:
        done.set()
        thread.join()
        for connection in held:
            connection.close()
        server.close()


def silent(connection):
    """Accepts, never speaks."""


def garbage(connection):
    """Sends what no Dask handshake starts with (its first 8 bytes claim a frame of about 5e17 bytes)."""
    connection.sendall(bytes(range(256)) * 64)


def hangs_up(connection):
    connection.close()


PEERS = {"silent": silent, "garbage": garbage, "hangs up": hangs_up}


def failure_within(bound_s, call):
    """The one ``ScenarioError`` line ``call()`` raises, and the seconds it took, failing the test when it takes
    more than ``bound_s`` (the call runs in a daemon thread, so a hang fails the test instead of holding it)."""
    outcome = []

    def run():
        try:
            call()
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    start_s = time.monotonic()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(bound_s)
    took_s = time.monotonic() - start_s
    assert outcome, f"still running after {bound_s} s"
    assert isinstance(outcome[0], ScenarioError), repr(outcome[0])
    line = str(outcome[0])
    assert "\n" not in line and line.isprintable() and len(line) < 400, line
    return line, took_s


def connect(address):
    return lambda: open_client(address, 0, TIMEOUT_S)


@pytest.mark.parametrize("peer", PEERS)
def test_a_listener_that_is_no_dask_scheduler_ends_in_one_line_in_bounded_time(peer, capfd):
    """Before: a silent listener held the command more than 300 s; garbage printed the client's destructor
    traceback at exit."""
    with listener(PEERS[peer]) as address:
        line, took_s = failure_within(BOUND_S, connect(address))
    gc.collect()
    assert line.startswith(f"could not reach the Dask scheduler at '{address}' with a worker within 2 s (no "
                           "answer as a Dask scheduler: "), line
    assert "dask scheduler, then dask worker ADDRESS" in line
    assert capfd.readouterr().err == "", "nothing printed, even by a destructor"


def test_a_port_nobody_listens_on_ends_in_one_line(capfd):
    address = f"tcp://127.0.0.1:{free_port()}"
    line, _ = failure_within(BOUND_S, connect(address))
    assert f"'{address}' with a worker within 2 s (connection refused: nothing listens at that port)" in line
    assert capfd.readouterr().err == ""


def test_a_host_that_cannot_be_reached_is_no_answer(monkeypatch):
    def unreachable(*args, **kwargs):
        raise OSError(113, "No route to host")

    monkeypatch.setattr(socket, "create_connection", unreachable)  # the explaining probe's, not distributed's
    line, _ = failure_within(BOUND_S, connect(f"tcp://127.0.0.1:{free_port()}"))
    assert "with a worker within 2 s (no answer as a Dask scheduler: OSError); start one there" in line


def test_an_ipv6_address_is_resolved_without_its_brackets():
    with socket.socket(socket.AF_INET6) as sock:
        sock.bind(("::1", 0))
        address = f"tcp://[::1]:{sock.getsockname()[1]}"
    line, _ = failure_within(BOUND_S, connect(address))
    assert f"'{address}' with a worker within 2 s (connection refused: nothing listens at that port)" in line


def test_a_host_name_that_does_not_resolve_ends_at_once(capfd):
    line, took_s = failure_within(BOUND_S, connect("tcp://no-such-host.invalid:8786"))
    assert line.startswith("--scheduler: the host name 'no-such-host.invalid' does not resolve (")
    assert line.endswith("); check its spelling, or give an IP address")
    assert capfd.readouterr().err == ""


def test_a_resolver_that_does_not_answer_is_cut_at_the_time_out(monkeypatch):
    release = threading.Event()
    monkeypatch.setattr(socket, "getaddrinfo", lambda *args, **kwargs: release.wait(60))
    try:
        line, took_s = failure_within(TIMEOUT_S + 1, lambda: open_client("tcp://slow.example:8786", 0, 0.5))
    finally:
        release.set()
    assert line == ("--scheduler: the host name 'slow.example' did not resolve within 0.5 s; check the name and "
                    "this machine's DNS, or give an IP address")


def test_a_scheduler_without_workers_is_one_line():
    from distributed import LocalCluster
    with LocalCluster(n_workers=0, processes=False, protocol="tcp", dashboard_address="127.0.0.1:0") as empty:
        line, _ = failure_within(BOUND_S, connect(empty.scheduler_address))
    assert "with a worker within 2 s (no worker there); start one there" in line


def test_the_interpreter_exits_quietly_after_a_failed_connection():
    """The client's destructor runs as the interpreter exits: nothing left for it to close, nothing printed."""
    code = ("import sys\nfrom engine.sim.dask_connect import open_client\ntry:\n    open_client(sys.argv[1], 0, 2)\n"
            "except ValueError as exc:\n    print(exc)\n")
    for peer in (silent, garbage):
        with listener(peer) as address:
            done = subprocess.run([sys.executable, "-c", code, address], cwd=REPO, capture_output=True, text=True,
                                  timeout=60)
        assert done.stderr == "" and done.stdout.startswith("could not reach the Dask scheduler at")
        assert done.stdout.count("\n") == 1


MALFORMED = {
    "tcp://": "no port",
    "tcp://host": "no port",
    "tcp://h:99999": "the port '99999' is not a number from 1 to 65535",
    "tcp://h:0": "the port '0' is not a number from 1 to 65535",
    "tcp://h:http": "the port 'http' is not a number from 1 to 65535",
    "tcp://h:1/path": "the port '1/path' is not a number",
    "tcp://h:\u0661\u0662": "is not a number",  # digits, but not ASCII ones
    "127.0.0.1:8786": "no scheme",
    "http://x:1": "the scheme 'http://' is not supported",
    "tls://127.0.0.1:1": "the scheme 'tls://' is not supported",
    "ucx://127.0.0.1:1": "the scheme 'ucx://' is not supported",
    "inproc://10.0.0.5/1/1": "the scheme 'inproc://' is not supported",
    "x" * 10_000: "has 10,000 characters, more than the limit of 200",
    "tcp://my host:8786": "the host 'my host' is not a name, an IPv4 address or an [IPv6] address",
    "tcp://\x1b[31mred:8786": "is not a name",
    "tcp://127.0.0.1:87\x0086": "is not a number",
    "tcp://:8786": "the host '' is not a name",
    "tcp://-dash-.example:8786": "is not a name",
    "tcp://::1:8786": "is not a name",
    "tcp://[zz::1]:8786": "'[zz::1]' is not an IPv6 address",
    "tcp://user@host:8786": "is not a name",
}


@pytest.mark.parametrize("text", MALFORMED, ids=lambda text: repr(text[:30]))
def test_a_malformed_address_is_one_line_before_anything_connects(text, capfd):
    """Before: 0.2 to 2.5 s of connecting, then tracebacks (tls, ucx: internal error) or a 40 s wait at exit."""
    line, took_s = failure_within(CHECK_S, connect(text))
    assert line.startswith("--scheduler") and "tcp://HOST:PORT" in line, line
    assert MALFORMED[text] in line, line
    with pytest.raises(ScenarioError, match="tcp://HOST:PORT"):
        check_address(text)
    assert capfd.readouterr().err == ""


@pytest.mark.parametrize("text, address", [
    ("tcp://10.0.0.5:8786", "tcp://10.0.0.5:8786"),
    (" TCP://Scheduler-1.example.org:08786\n", "tcp://Scheduler-1.example.org:8786"),
    ("tcp://[::1]:8786", "tcp://[::1]:8786"),
    ("tcp://dask_scheduler:65535", "tcp://dask_scheduler:65535"),
])
def test_a_well_formed_address_is_kept_normalised(text, address):
    assert check_address(text) == address


def test_an_address_error_names_where_it_came_from():
    with pytest.raises(ScenarioError, match=r"^SCHEDULER_LAB_DASK_SCHEDULER 'tls://h:1': the scheme"):
        check_address("tls://h:1", "SCHEDULER_LAB_DASK_SCHEDULER")


@pytest.mark.parametrize("count", [0, -1, 257, 100_000, True, 2.5])
def test_a_worker_count_out_of_range_says_the_range(count):
    """Before: ``--workers 100000`` said it could not reach the embedded cluster (ScenarioError)."""
    with pytest.raises(ScenarioError, match=rf"^--workers {count!r} must be a whole number from 1 to 256 \(worker "
                                            r"processes of an embedded Dask cluster\)$"):
        check_workers(count)


def test_a_worker_count_in_range_is_kept():
    assert check_workers(1) == 1 and check_workers(256) == 256


def test_an_embedded_cluster_opens_and_closes_quietly_beside_another_cluster(recwarn):
    """Another cluster's HTTP server holds Dask's usual port 8787 (if nothing else does): no warning about it."""
    other = socket.socket()
    with contextlib.suppress(OSError):  # already taken: just as well
        other.bind(("", 8787))
        other.listen()
    try:
        client, local, what = open_client(None, 1, 60)
        close_quietly(client, local)
    finally:
        other.close()
    assert what == "an embedded Dask cluster" and client.status == "closed" and local.status.name == "closed"
    assert [str(w.message) for w in recwarn if issubclass(w.category, UserWarning)] == []


def test_an_embedded_cluster_not_reached_in_time_is_one_line_and_stopped(monkeypatch):
    closed = []

    def close_and_record(client, local):
        close_quietly(client, local)
        closed.append(local)

    monkeypatch.setattr(dask_connect, "close_quietly", close_and_record)
    line, _ = failure_within(60, lambda: open_client(None, 1, 0))  # no time to connect to its scheduler
    assert line == ("could not reach the embedded Dask cluster with a worker within 0 s (OSError); use fewer "
                    "--workers or leave the option out")
    assert closed[-1].status.name == "closed", "its worker processes stopped"


def test_an_embedded_cluster_that_cannot_start_is_one_line(monkeypatch):
    import distributed

    def refuse(**kwargs):
        raise OSError("too many open files")

    monkeypatch.setattr(distributed, "LocalCluster", refuse)
    with pytest.raises(ScenarioError, match=r"^could not start an embedded Dask cluster of 3 workers \(OSError\); "
                                            "use fewer --workers or leave the option out$"):
        open_client(None, 3, TIMEOUT_S)


class FakeClient:
    """Stands for a ``distributed.Client``: records its closing; ``sync`` and ``close`` do what a test says."""

    def __init__(self, *args, sync=None, close=None, **kwargs):
        self.status, self.closed, self._sync, self._close = "running", False, sync, close

    def _wait_for_workers(self, n_workers, timeout=None):
        """Never called: ``sync`` stands for it."""

    def sync(self, *args, **kwargs):
        raise self._sync

    def close(self, timeout):
        self.closed = timeout
        if self._close is not None:
            raise self._close


def test_an_interruption_while_connecting_closes_the_client_and_goes_through(monkeypatch):
    interrupted = FakeClient(sync=KeyboardInterrupt())
    monkeypatch.setattr(dask_connect, "_bounded_client_class", lambda: lambda *args, **kwargs: interrupted)
    with pytest.raises(KeyboardInterrupt):
        open_client("tcp://127.0.0.1:8786", 0, TIMEOUT_S)
    assert interrupted.closed == CLOSE_TIMEOUT_S


def test_a_client_that_does_not_close_in_time_is_left_nothing_to_close_at_exit():
    stuck = FakeClient(close=TimeoutError("timed out after 5 s."))
    close_quietly(stuck, None)
    assert stuck.closed == CLOSE_TIMEOUT_S and stuck.status == "closed", "its destructor will not try again"
