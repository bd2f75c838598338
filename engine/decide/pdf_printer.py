"""The report's PDF printer: headless Chromium turns the report's one self-contained HTML page into a PDF, with no
network and within bounds.

No network. The page is a file:// page whose Plotly, charts and attachments are inline (data: URIs), so printing
needs nothing from outside; yet a plain headless Chromium calls Google as it starts. Seen with strace on Debian's
Chromium 156 with the switches this module used before: DNS queries for accounts.google.com (the account list every
profile asks for), update.googleapis.com (the on-device model manifest, fetched despite --disable-component-update)
and clients2.google.com (the network time), sent to the machine's resolver, and UDP sockets connected to
2001:4860:4860::8888 (Chromium's IPv6 probe, made before it resolves any host, a proxy's 127.0.0.1 too). So:

- where the machine allows it, Chromium runs in a network namespace of its own (``unshare --net``, or with
  ``--map-root-user`` for a user without root): no interface but a loopback that is down, nothing can leave. Only
  this stops the account list: no switch or preference turns it off, but a profile asks only once it sees a network;
- in every case its switches leave it nothing to reach: no host name resolves (no DNS query), every request would
  go to a proxy on a closed loopback port, and the services seen calling out at start are off.

Without a namespace (no ``unshare``, or a container that forbids it) the switches alone leave one trace, the
account list's IPv6 probe: connect() of a UDP socket to 2001:4860:4860::8888 port 443, which sends no packet.

Bounded. At most ``PRINTERS`` Chromiums print at once in one process; a print waits for a free one, and waiting and
printing together stay within ``PRINT_TIMEOUT_S`` (the error says how long it waited). When the time is up, Chromium
and every process it started are killed (it runs in a session of its own, killed as a group). One visitor prints
one PDF at a time (``VisitorPrints``).
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from ..scenario.errors import ScenarioError
from ..scenario.files import write_named

CHROMIUM_ENV = "SCHEDULER_LAB_CHROMIUM"  # the browser that prints the PDF, when not found on the PATH
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "chrome")
PRINT_TIMEOUT_S = 120  # one print's whole time: waiting for the prints before it, then printing
PRINTERS = 2  # Chromiums printing at once in one process (each holds a few hundred MiB and a core for seconds)
# Commands that run a program in a network namespace of its own, tried in order: as root, then as any user (a user
# namespace maps it to root inside; Chromium already runs with --no-sandbox).
NAMESPACES = (("unshare", "--net"), ("unshare", "--net", "--map-root-user"))
CLOSED_PORT = 9  # the proxy every request would go to: loopback's discard port, where nothing listens
NO_MODELS = "{}"  # an on-device model manifest that names none: the component updater has nothing to fetch

_printers = threading.BoundedSemaphore(PRINTERS)  # the process's printers, shared by every visitor and the CLI


def chromium() -> str | None:
    """The browser that prints the PDF: ``$SCHEDULER_LAB_CHROMIUM``, else the first of ``CHROMIUM_NAMES`` on the
    PATH; None when there is none."""
    named = os.environ.get(CHROMIUM_ENV)
    if named:
        return named if Path(named).exists() else None
    return next((found for name in CHROMIUM_NAMES if (found := shutil.which(name))), None)


@functools.cache
def network_namespace() -> tuple[str, ...]:
    """The command prefix that runs a program in a network namespace of its own here, () when none can be made
    (asked once per process: the machine's answer does not change while it runs)."""
    for prefix in NAMESPACES:
        if shutil.which(prefix[0]) is None:
            continue
        try:
            done = subprocess.run([*prefix, "true"], capture_output=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if done.returncode == 0:
            return prefix
    return ()


def switches(folder: Path) -> list[str]:
    """Chromium's switches: headless with a fresh profile in ``folder``, nothing to reach, the page printed whole."""
    no_models = folder / "no-models.json"
    no_models.write_text(NO_MODELS)
    return ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", f"--user-data-dir={folder / 'profile'}",
            # Nothing to reach: no host name resolves (no DNS query), a request would go to a closed loopback port.
            "--host-resolver-rules=MAP * ~NOTFOUND", f"--proxy-server=127.0.0.1:{CLOSED_PORT}",
            # Seen calling out at start, off: the network time (clients2.google.com) and the on-device model
            # manifest (update.googleapis.com); with them, features known to call out while browsing.
            "--disable-features=NetworkTimeServiceQuerying,OptimizationHints,MediaRouter,Translate,"
            "AutofillServerCommunication", f"--optimization-guide-manifest-override={no_models}",
            # The background services a profile may start.
            "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-extensions",
            "--disable-default-apps", "--disable-domain-reliability", "--disable-breakpad", "--no-pings",
            "--metrics-recording-only", "--password-store=basic",
            # The print: no header or footer, the charts drawn before it is taken.
            "--no-pdf-header-footer", "--virtual-time-budget=20000", "--run-all-compositor-stages-before-draw"]


def write_pdf(html_text: str, pdf_path: Path) -> None:
    """Print ``html_text`` to ``pdf_path`` with headless Chromium (the charts drawn as in the HTML); a
    ``ScenarioError`` naming the fix when no browser is found, no printer is free in time or printing fails."""
    write_named(pdf_path, printed(html_text, time.monotonic()), "--pdf")


def printed(html_text: str, started_s: float) -> bytes:
    """The PDF of ``html_text``, printed by the first free printer within ``PRINT_TIMEOUT_S`` of ``started_s`` (a
    ``time.monotonic()`` reading)."""
    browser = chromium()
    if browser is None:
        raise ScenarioError(f"the PDF is printed by Chromium, which was not found: install it (apt-get install "
                            f"chromium) or set {CHROMIUM_ENV} to its path")
    if not _printers.acquire(timeout=_left_s(started_s)):
        raise ScenarioError(f"every PDF printer of this server stayed busy for {PRINT_TIMEOUT_S} s; try again in a "
                            "minute, or print the HTML report from a browser")
    try:
        return _print(browser, html_text, started_s)
    finally:
        _printers.release()


def _left_s(started_s: float) -> float:
    return max(0.0, PRINT_TIMEOUT_S - (time.monotonic() - started_s))


def _print(browser: str, html_text: str, started_s: float) -> bytes:
    """Chromium's PDF of ``html_text``, in a network namespace where the machine allows one, else without (also
    when the namespace fails to start: the print never fails for want of one)."""
    waited_s = time.monotonic() - started_s
    with tempfile.TemporaryDirectory(prefix="scheduler-lab-report-") as name:
        folder = Path(name)
        page = folder / "report.html"
        page.write_text(html_text, encoding="utf-8")
        out, log = folder / "report.pdf", folder / "chromium.log"
        command = [browser, *switches(folder), f"--print-to-pdf={out}", page.as_uri()]
        prefix = network_namespace()
        if not prefix or (_launch([*prefix, *command], log, started_s, waited_s) != 0 and _unshare_failed(log)):
            _launch(command, log, started_s, waited_s)
        if not out.exists() or out.stat().st_size == 0:
            lines = log.read_text(errors="replace").strip().splitlines()
            raise ScenarioError(f"Chromium did not print the PDF ({(lines or ['no output'])[-1][:200]})")
        return out.read_bytes()


def _unshare_failed(log: Path) -> bool:
    """Whether ``unshare`` itself failed (its own message first), before Chromium started."""
    return log.read_text(errors="replace").startswith("unshare:")


def _launch(command: list[str], log: Path, started_s: float, waited_s: float) -> int:
    """Run ``command`` in a session of its own, its output in ``log``, within what is left of ``PRINT_TIMEOUT_S``;
    its exit status. When the time is up it is killed with every process it started (the session's group)."""
    with open(log, "wb") as output:
        try:
            process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=output, stderr=output,
                                       start_new_session=True)
        except OSError as exc:
            raise ScenarioError(f"Chromium could not be started ({exc.strerror or exc}); check {CHROMIUM_ENV} or "
                                "install chromium") from None
    try:
        return process.wait(timeout=_left_s(started_s))
    except subprocess.TimeoutExpired:
        try:
            os.killpg(process.pid, signal.SIGKILL)  # its group: it leads it (start_new_session), its children join
        except ProcessLookupError:
            pass
        process.wait()
        waited = f" ({waited_s:.0f} s of it waiting for the prints before it)" if waited_s >= 1 else ""
        raise ScenarioError(f"printing the PDF took more than {PRINT_TIMEOUT_S} s{waited}; print the HTML report "
                            "from a browser") from None


class VisitorPrints:
    """One visitor's PDFs, one at a time (a Streamlit session keeps one of these in its session state).

    A second request while the first prints waits for it rather than being refused: on the Planner page a refusal
    would reach the visitor only as Streamlit's generic download failure, while waiting costs no second Chromium,
    and a second click on the same report (the usual case: an impatient double click) gets the first one's file
    without printing again. The wait counts in the second request's ``PRINT_TIMEOUT_S``.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: tuple[str, bytes] = ("", b"")  # the last report's SHA-256 and its PDF

    def pdf(self, html_text: str) -> bytes:
        started_s = time.monotonic()
        digest = hashlib.sha256(html_text.encode()).hexdigest()
        if not self._lock.acquire(timeout=PRINT_TIMEOUT_S):
            raise ScenarioError(f"your previous PDF was still printing after {PRINT_TIMEOUT_S} s; print the HTML "
                                "report from a browser")
        try:
            if self._last[0] != digest:
                self._last = (digest, printed(html_text, started_s))
            return self._last[1]
        finally:
            self._lock.release()
