"""Opening a Dask client that cannot hang, from an address someone typed (``--scheduler``, the operator's
``$SCHEDULER_LAB_DASK_SCHEDULER``) or a worker count (``--workers``).

The address is checked before anything connects: ``tcp://HOST:PORT`` only, its length capped, its host name
resolved (``getaddrinfo`` has no time-out, so in a thread waited for until the deadline). The connection then ends
within ``connect_timeout_s + REPLY_GRACE_S`` (plus the time to close a failed client, ``CLOSE_TIMEOUT_S`` at most)
whatever the other end does: ``distributed`` bounds the TCP connection but not the wait for the scheduler's first
reply, so a listener that accepts and never speaks would hold ``Client(...)`` forever; here the client's start
(connection, handshake, first reply) and the wait for a first worker are cancelled on the client's own event loop
when the deadline passes. Every failure is one ``ScenarioError`` line, and a client that failed is closed at once,
while its event loop still runs, so that its destructor has nothing left to close (it would otherwise wait, then
print a traceback as the interpreter exits).

Imports ``distributed`` only when a client is opened, so importing this module costs nothing.
"""

from __future__ import annotations

import functools
import ipaddress
import logging
import re
import socket
import threading
import time
from typing import Any, NoReturn, Optional

from ..scenario.caps import DEFAULT_CAPS
from ..scenario.errors import ScenarioError, excerpt, printable

CONNECT_TIMEOUT_S = 20  # to reach a scheduler and see its first worker
REPLY_GRACE_S = 1  # beyond it, so that distributed's own connection time-out (which says why) comes first
CLOSE_TIMEOUT_S = 5  # to close a client
WORKERS_RANGE = (1, 256)  # worker processes of an embedded cluster
PORT_RANGE = (1, 65535)
SCHEDULER_OPTION = "--scheduler"
WORKERS_OPTION = "--workers"
ADDRESS_FORM = "tcp://HOST:PORT (e.g. tcp://10.0.0.5:8786, tcp://[::1]:8786)"
START_HINT = "start one there (dask scheduler, then dask worker ADDRESS) or leave the option out"
EMBEDDED_HINT = "use fewer --workers or leave the option out"
QUIET_HTTP = "127.0.0.1:0"  # where an embedded scheduler serves HTTP: loopback, any free port

_HOST_NAME = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?(\.[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}"
                        r"[A-Za-z0-9_])?)*\.?")  # labels of at most 63 characters, no hyphen at either end
_PORT = re.compile(r"[0-9]{1,5}")


def check_address(text: str, source: str = SCHEDULER_OPTION) -> str:
    """``text`` as a Dask scheduler address ``tcp://HOST:PORT`` (HOST a name, an IPv4 address or an IPv6 address
    in brackets), normalised (scheme in lower case, port without leading zeros); else one ``ScenarioError`` line
    naming ``source`` and the form expected. Checked before anything connects, so a typo costs no time-out."""
    host, port = _host_and_port(text, source)
    return f"tcp://{host}:{port}"


def _host_and_port(text: str, source: str) -> tuple[str, int]:
    """The host (IPv6 in brackets) and the port of the address ``text`` (see ``check_address``)."""
    limit = DEFAULT_CAPS.scheduler_address_chars
    if len(text) > limit:
        raise ScenarioError(f"{source} has {len(text):,} characters, more than the limit of {limit} "
                            f"(scheduler_address_chars); give the scheduler's address as {ADDRESS_FORM}")
    scheme, sep, rest = text.strip().partition("://")
    if not sep:
        _refuse(source, text, "no scheme")
    if scheme.lower() != "tcp":
        raise ScenarioError(f"{source} {excerpt(text)}: the scheme {excerpt(scheme + '://')} is not supported, only "
                            f"tcp:// (no tls, ucx or inproc); give {ADDRESS_FORM}")
    host, sep, port = rest.rpartition(":")
    if not sep:
        _refuse(source, text, "no port")
    return _host(source, text, host), _port(source, text, port)


def _host(source: str, text: str, host: str) -> str:
    """``host`` if it is a host name, an IPv4 address or ``[IPv6 address]``."""
    if host.startswith("[") and host.endswith("]"):
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            _refuse(source, text, f"{excerpt(host)} is not an IPv6 address")
        return host
    if not _HOST_NAME.fullmatch(host):
        _refuse(source, text, f"the host {excerpt(host)} is not a name, an IPv4 address or an [IPv6] address")
    return host


def _port(source: str, text: str, port: str) -> int:
    """``port`` as a number from 1 to 65535."""
    low, high = PORT_RANGE
    if not _PORT.fullmatch(port) or not low <= int(port) <= high:
        _refuse(source, text, f"the port {excerpt(port)} is not a number from {low} to {high}")
    return int(port)


def _refuse(source: str, text: str, why: str) -> NoReturn:
    """Raise the line for a malformed address: what it is, the form expected, and ``why`` not."""
    raise ScenarioError(f"{source} {excerpt(text)} is not an address of the form {ADDRESS_FORM}: {why}")


def check_workers(count: int, source: str = WORKERS_OPTION) -> int:
    """``count`` if it is a whole number of embedded worker processes within ``WORKERS_RANGE``; else one
    ``ScenarioError`` line naming ``source`` and the range (so the command line can check it before it starts)."""
    low, high = WORKERS_RANGE
    if isinstance(count, bool) or not isinstance(count, int) or not low <= count <= high:
        raise ScenarioError(f"{source} {excerpt(count)} must be a whole number from {low} to {high} (worker "
                            "processes of an embedded Dask cluster)")
    return count


def open_client(scheduler: Optional[str], local_workers: int, connect_timeout_s: float = CONNECT_TIMEOUT_S,
                source: str = SCHEDULER_OPTION) -> tuple[Any, Any, str]:
    """``(client, embedded cluster or None, where in words)``: a Dask client of the scheduler at ``scheduler``
    (named ``source`` in errors), else of an embedded cluster of ``local_workers`` one-thread worker processes
    started here, that sees at least one worker. Returns, or raises one ``ScenarioError`` line, within
    ``connect_timeout_s + REPLY_GRACE_S + CLOSE_TIMEOUT_S`` whatever the other end does (an embedded cluster also
    takes the time its processes need to start and stop); close the pair with ``close_quietly``."""
    if scheduler:
        deadline_s = time.monotonic() + connect_timeout_s
        host, port = _host_and_port(scheduler, source)
        _check_resolves(host.strip("[]"), source, deadline_s - time.monotonic())
        address = f"tcp://{host}:{port}"
        client = _client_with_a_worker(address, None, connect_timeout_s, deadline_s)
        return client, None, f"the Dask scheduler at {address}"
    local = _local_cluster(check_workers(local_workers))
    deadline_s = time.monotonic() + connect_timeout_s  # counted once its processes have started
    return _client_with_a_worker(local, local, connect_timeout_s, deadline_s), local, "an embedded Dask cluster"


def _check_resolves(host: str, source: str, timeout_s: float) -> None:
    """Raise one ``ScenarioError`` line when ``host`` does not resolve (a typo ends at once, not after the retries
    of a connection) or takes more than ``timeout_s`` to (the resolver thread is then left to finish)."""
    outcome: list[Optional[OSError]] = []

    def resolve() -> None:
        try:
            socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
            outcome.append(None)
        except OSError as exc:
            outcome.append(exc)

    thread = threading.Thread(target=resolve, name="resolve-dask-scheduler", daemon=True)
    thread.start()
    thread.join(max(timeout_s, 0.0))
    if not outcome:
        raise ScenarioError(f"{source}: the host name {excerpt(host)} did not resolve within {timeout_s:.3g} s; "
                            "check the name and this machine's DNS, or give an IP address")
    if outcome[0] is not None:
        raise ScenarioError(f"{source}: the host name {excerpt(host)} does not resolve "
                            f"({printable(str(outcome[0]))}); check its spelling, or give an IP address")


def _local_cluster(workers: int) -> Any:
    """An embedded cluster of ``workers`` one-thread worker processes, quiet: its scheduler's HTTP server (and
    dashboard, where bokeh is installed) on a free loopback port, since on Dask's usual 8787, taken by any other
    cluster, it would warn on stderr."""
    from distributed import LocalCluster
    try:
        return LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=QUIET_HTTP,
                            silence_logs=logging.ERROR)
    except Exception as exc:  # processes or ports this machine will not give: one line
        raise ScenarioError(f"could not start an embedded Dask cluster of {workers} workers "
                            f"({type(exc).__name__}); {EMBEDDED_HINT}") from None


def _client_with_a_worker(target: Any, local: Any, connect_timeout_s: float, deadline_s: float) -> Any:
    """A client of ``target`` (an address, or the embedded cluster ``local``) that sees a running worker before
    ``deadline_s + REPLY_GRACE_S`` (``time.monotonic``); else ``ScenarioError``, with the client and ``local``
    closed."""
    client = None
    try:
        left_s = max(deadline_s - time.monotonic(), 0.0)
        client = _bounded_client_class()(target, timeout=left_s, set_as_default=False)
        left_s = max(deadline_s + REPLY_GRACE_S - time.monotonic(), 0.0)
        client.sync(client._wait_for_workers, 1, callback_timeout=left_s)
    except BaseException as exc:  # whatever a stranger sent that broke the handshake, or an interruption
        close_quietly(client, local)
        if not isinstance(exc, Exception):
            raise
        if local is not None:
            raise ScenarioError(f"could not reach the embedded Dask cluster with a worker within {connect_timeout_s:g} "
                                f"s ({type(exc).__name__}); {EMBEDDED_HINT}") from None
        raise ScenarioError(f"could not reach the Dask scheduler at {excerpt(target)} with a worker within "
                            f"{connect_timeout_s:g} s ({_why(target, exc, client is not None, deadline_s)}); "
                            f"{START_HINT}") from None
    return client


def _why(address: str, exc: Exception, started: bool, deadline_s: float) -> str:
    """Why a client of ``address`` failed, in words: no worker (a client that ``started``), nobody listening, or no
    answer as a Dask scheduler. Whether anyone listens is asked with one plain TCP connection, given until
    ``deadline_s + REPLY_GRACE_S``: distributed keeps only the error of its last attempt, often cut short."""
    if started:
        return "no worker there"
    host, port = _host_and_port(address, SCHEDULER_OPTION)
    left_s = max(deadline_s + REPLY_GRACE_S - time.monotonic(), 0.0)
    try:
        with socket.create_connection((host.strip("[]"), port), timeout=left_s):
            pass
    except ConnectionRefusedError:
        return "connection refused: nothing listens at that port"
    except OSError:  # unreachable, or no answer in time
        pass
    return f"no answer as a Dask scheduler: {type(exc).__name__}"


@functools.cache
def _bounded_client_class() -> type:
    """``distributed.Client`` whose start (connection, handshake, first reply) is cancelled ``REPLY_GRACE_S`` after
    its ``timeout``, and which closes itself when its start fails, so that nothing is left for its destructor
    (made on first use: importing ``distributed`` takes a while)."""
    from distributed import Client

    class BoundedClient(Client):
        def start(self, **kwargs: Any) -> None:
            try:
                super().start(callback_timeout=self._timeout + REPLY_GRACE_S, **kwargs)
            except BaseException:
                _close_client(self)
                raise

    return BoundedClient


def close_quietly(client: Any, local: Any) -> None:
    """Close ``client`` (within ``CLOSE_TIMEOUT_S``, raising nothing) and then the embedded cluster ``local``
    (its worker processes stopped); either may be None. Prints nothing, and leaves neither destructor anything to
    close."""
    if client is not None:
        _close_client(client)
    if local is not None:
        local.close()


def _close_client(client: Any) -> None:
    """Close ``client`` within ``CLOSE_TIMEOUT_S``; one that does not close in time is marked closed anyway, since
    its destructor would try again as the interpreter exits, wait, and print a traceback."""
    try:
        client.close(timeout=CLOSE_TIMEOUT_S)
    except Exception:  # a close cut short: its connection goes with the process
        client.status = "closed"
