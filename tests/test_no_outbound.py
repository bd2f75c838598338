"""The app server opens no connection of its own (ui.start): a WebSocket handshake from another site is refused at
once, without Streamlit looking up this machine's internal or external address (a UDP socket towards 8.8.8.8, an
HTTP request to checkip.amazonaws.com), which stalled every visitor on a machine without outbound access.

The server runs under a Python audit hook (``socket.connect``, ``socket.sendto``, ``socket.getaddrinfo``) that
writes every address outside this machine it is asked for to a file. The same hook on plain ``streamlit run`` sees
the lookups: the monitor itself is checked."""

from __future__ import annotations

import json
import sys
import time

import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from conftest import REPO, app_server
from ui.serve import streamlit_command

FOREIGN_ORIGIN = "http://evil.example"
# Runs in the server's interpreter: the audit hook, then the module given (ui.start, or streamlit's own CLI).
HOOK = """
import ipaddress, json, runpy, sys
log = open(sys.argv[1], "a")
def foreign(host):
    if not isinstance(host, str) or host in ("localhost", ""):
        return False
    try:
        return not ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return True  # a name to resolve: a lookup outside
def hook(event, args):
    if event == "socket.getaddrinfo":
        host = args[0].decode() if isinstance(args[0], bytes) else args[0]
    elif event in ("socket.connect", "socket.sendto") and isinstance(args[1], tuple):
        host = args[1][0]
    else:
        return
    if foreign(host):
        log.write(json.dumps([event, str(host)]) + "\\n"); log.flush()
sys.addaudithook(hook)
module = sys.argv[2]
sys.argv = [module, *sys.argv[3:]]
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""


def hooked(log_path, module: str, leading: tuple[str, ...] = ()):
    """The project's server command for a port, its module replaced by ``module`` under the audit hook."""
    def command(port: int) -> list[str]:
        options = streamlit_command(port)[3:]  # after: python -m ui.start
        return [sys.executable, "-c", HOOK, str(log_path), module, *leading, *options]
    return command


def refused_handshakes(url: str, count: int) -> list[float]:
    """Seconds each of ``count`` WebSocket handshakes with a foreign Origin took to be refused."""
    seconds = []
    for _ in range(count):
        started = time.monotonic()
        with pytest.raises(InvalidStatus) as refused:
            with connect(url.replace("http", "ws", 1) + "/_stcore/stream", subprotocols=["streamlit"],
                         additional_headers={"Origin": FOREIGN_ORIGIN}, open_timeout=30):
                pass
        assert refused.value.response.status_code == 403
        seconds.append(time.monotonic() - started)
    return seconds


def outside(log_path) -> list[list[str]]:
    return [json.loads(line) for line in log_path.read_text().splitlines()] if log_path.exists() else []


def test_a_foreign_origin_is_refused_without_the_server_looking_itself_up(tmp_path):
    log = tmp_path / "outside.jsonl"
    with app_server(tmp_path / "streamlit.log", command=hooked(log, "ui.start")) as (url, _):
        refused_handshakes(url, 3)
        with connect(url.replace("http", "ws", 1) + "/_stcore/stream", subprotocols=["streamlit"],
                     additional_headers={"Origin": url}, open_timeout=30):
            pass  # the app's own page is still let in
    assert outside(log) == [], "the server opened a connection outside this machine"


def test_the_monitor_sees_plain_streamlit_look_itself_up(tmp_path):
    """Without ui.start, the same handshake makes Streamlit route a socket towards 8.8.8.8 and resolve
    checkip.amazonaws.com: the audit hook above catches what it is there to catch."""
    log = tmp_path / "outside.jsonl"
    with app_server(tmp_path / "streamlit.log", command=hooked(log, "streamlit", ("run", str(REPO / "app.py")))) \
            as (url, _):
        refused_handshakes(url, 1)
    hosts = {host for _, host in outside(log)}
    assert "8.8.8.8" in hosts or "checkip.amazonaws.com" in hosts, outside(log)
