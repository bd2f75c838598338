"""The app server opens no connection of its own (ui.start): a WebSocket handshake from another site is refused at
once, without Streamlit looking up this machine's internal or external address (a UDP socket towards 8.8.8.8, an
HTTP request to checkip.amazonaws.com), which stalled every visitor on a machine without outbound access.

The server runs under a Python audit hook (``socket.connect``, ``socket.sendto``, ``socket.getaddrinfo``) that
writes every address outside this machine it is asked for to a file. The same hook on plain ``streamlit run`` sees
the lookups: the monitor itself is checked.

The PDF printer (engine.decide.pdf_printer) reaches nothing outside either: ``report --pdf`` runs under strace,
which follows every process it starts (Chromium's included) and logs each connect, sendto, sendmsg and sendmmsg;
none goes to an address that is not loopback and none is a DNS query (without a network namespace, the printer's
switches alone leave Chromium's IPv6 probe, a UDP connect that sends nothing). With the switches it had before,
headless Chromium looked up accounts.google.com, update.googleapis.com and clients2.google.com and connected UDP
sockets to 2001:4860:4860::8888 as it started. The strace reading is checked on a program that does each of those."""

from __future__ import annotations

import ipaddress
import json
import re
import shutil
import subprocess
import sys
import time

import pypdfium2 as pdfium
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from conftest import REPO, SCENARIOS, app_server
from engine.decide.pdf_printer import network_namespace
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


# Every process the command starts, followed; only the calls that reach out; strings as hex (payloads decoded here).
STRACE = ["strace", "-f", "-qq", "--seccomp-bpf", "-xx", "-s", "512", "-e", "trace=connect,sendto,sendmsg,sendmmsg"]
CALL = re.compile(r"^\d+\s+(connect|sendto|sendmsg|sendmmsg)\(")
INET = re.compile(r'sa_family=AF_INET6?, sin6?_port=htons\((\d+)\)[^}]*?(?:inet_addr\(|inet_pton\(AF_INET6, )"([^"]*)"')
UNIX = re.compile(r'sa_family=AF_UNIX, sun_path=@?"([^"]*)"')
QUOTED = re.compile(r'"((?:\\x[0-9a-f]{2})+)"')
# Chromium's IPv6 probe (a UDP socket connected to learn its route; it sends nothing): the one trace the switches
# alone leave, from the account list every profile asks for once it sees a network (engine.decide.pdf_printer).
IPV6_PROBE = "connect 2001:4860:4860::8888 port 443"
# A program that does what headless Chromium did: a DNS query sent (to this machine's port 53, so nothing leaves)
# with sendto and with sendmsg, and a UDP socket connected to an address outside (documentation range, no packet).
MONITOR_CHECK = """
import socket
query = bytes.fromhex("12340100000100000000000007") + b"monitor" + bytes.fromhex("07696e76616c69640000010001")
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
udp.sendto(query, ("127.0.0.1", 53))
udp.sendmsg([query], [], 0, ("127.0.0.1", 53))
probe = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
try:
    probe.connect(("2001:db8::1", 443))
except OSError:
    pass  # no route: the call was made all the same
"""


def unhex(text: str) -> bytes:
    return bytes.fromhex(text.replace("\\x", ""))


HOST_LABEL = re.compile(rb"[A-Za-z0-9_-]{1,63}")


def dns_query_name(data: bytes) -> str | None:
    """The name a DNS query asks for; None when ``data`` is not a query: a standard query's header (not a response,
    opcode 0, one question, no answer or authority records, at most one additional: EDNS), a name of host-name labels,
    then a type and class IN. (Looser, Chromium's own IPC messages between its processes passed for queries.)"""
    if len(data) < 17 or data[2] & 0xF8 or data[4:10] != b"\0\1\0\0\0\0" or data[10:12] not in (b"\0\0", b"\0\1"):
        return None
    labels, i = [], 12
    while i < len(data) and 0 < data[i] < 64:
        label = data[i + 1:i + 1 + data[i]]
        if not HOST_LABEL.fullmatch(label):
            return None
        labels.append(label.decode())
        i += 1 + data[i]
    if not labels or i >= len(data) or data[i] != 0 or data[i + 3:i + 5] != b"\0\1":
        return None
    return ".".join(labels)


def local(host: str) -> bool:
    address = ipaddress.ip_address(host.split("%")[0])
    mapped = getattr(address, "ipv4_mapped", None)
    return address.is_loopback or address.is_unspecified or bool(mapped and mapped.is_loopback)


def reached_out(log) -> list[str]:
    """What the traced processes tried outside this machine, one line each: a connection or a datagram to an address
    that is not loopback, anything to a port 53 (a resolver, local ones too), a DNS query in any payload, and a
    connection to a local name service (nscd, systemd-resolved)."""
    found = []
    for line in log.read_text(errors="replace").splitlines():
        call = CALL.match(line)
        if call is None:
            continue
        for port, address in INET.findall(line):
            host = unhex(address).decode() if address.startswith("\\x") else address
            if port == "53" or not local(host):
                found.append(f"{call[1]} {host} port {port}")
        found += [f"{call[1]} {name}" for path in UNIX.findall(line)
                  if "nscd" in (name := unhex(path).decode(errors="replace")) or "resolve" in name]
        if call[1] != "connect":
            found += [f"DNS query {name}" for blob in QUOTED.findall(line) if (name := dns_query_name(unhex(blob)))]
    return found


def traced(log, command: list[str], timeout_s: int = 600) -> subprocess.CompletedProcess:
    if shutil.which("strace") is None:
        pytest.fail("strace is not installed: apt-get install strace (.ci/setup installs it)")
    return subprocess.run([*STRACE, "-o", str(log), *command], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout_s)


@pytest.fixture(scope="module")
def printed_report(tmp_path_factory):
    """A report planned and printed by the command line (``report --html --pdf``), every process under strace."""
    folder = tmp_path_factory.mktemp("report")
    done = traced(folder / "strace.log", [
        sys.executable, "-m", "engine", "report", str(SCENARIOS / "article_mixed_8xa100.toml"),
        "--target", "interactive.ttft_p99_ms=1000", "--gpus", "H100-80G", "--requests", "500", "--seeds", "2",
        "--html", str(folder / "plan.html"), "--pdf", str(folder / "plan.pdf")])
    assert done.returncode == 0, done.stderr[-2000:]
    return folder


def printed_whole(path) -> bool:
    """The PDF's pages render, the first one not blank (tests/test_report.py reads their text)."""
    pdf = pdfium.PdfDocument(str(path))
    return len(pdf) >= 2 and pdf[0].render(scale=0.5).to_pil().convert("L").getextrema()[0] < 128


def test_the_strace_reading_sees_lookups_and_connections_outside(tmp_path):
    log = tmp_path / "strace.log"
    done = traced(log, [sys.executable, "-c", MONITOR_CHECK], timeout_s=60)
    assert done.returncode == 0, done.stderr
    assert reached_out(log) == ["sendto 127.0.0.1 port 53", "DNS query monitor.invalid", "sendmsg 127.0.0.1 port 53",
                                "DNS query monitor.invalid", "connect 2001:db8::1 port 443"]


def test_the_pdf_printer_reaches_nothing_outside_this_machine(printed_report):
    """Planning and printing (Chromium in a network namespace of its own where this machine allows one) try nothing
    outside: no lookup, no connection, no datagram. Where no namespace can be made, the switches alone leave only
    Chromium's IPv6 probe, which sends nothing (the next test checks the switches alone on every machine)."""
    assert printed_whole(printed_report / "plan.pdf")
    found = reached_out(printed_report / "strace.log")
    assert [f for f in found if network_namespace() or f != IPV6_PROBE] == [], found


def test_the_printers_switches_alone_look_nothing_up_and_send_nothing_out(printed_report, tmp_path):
    """The same report printed without the namespace (as where none can be made): no lookup, no connection but the
    IPv6 probe's (a route asked of the kernel; no packet leaves)."""
    script = ("import sys; from pathlib import Path; from engine.decide import pdf_printer; "
              "pdf_printer.network_namespace = lambda: (); "
              "pdf_printer.write_pdf(Path(sys.argv[1]).read_text(), Path(sys.argv[2]))")
    log, pdf = tmp_path / "strace.log", tmp_path / "plan.pdf"
    done = traced(log, [sys.executable, "-c", script, str(printed_report / "plan.html"), str(pdf)])
    assert done.returncode == 0, done.stderr[-2000:]
    assert printed_whole(pdf)
    found = reached_out(log)
    assert [f for f in found if f != IPV6_PROBE] == [], found
