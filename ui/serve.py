"""The app on every core: N ``streamlit run app.py`` processes behind one address.

One Streamlit server is one Python interpreter, so a bigger machine does not serve a bigger room. This launcher
starts N servers on free local ports and answers on one address with a small reverse proxy (tornado, already
installed with Streamlit). It is sticky by browser: the first request without the ``scheduler_lab_backend`` cookie
goes to the least loaded process and gets the cookie; every later request of that browser (pages, the
``/_stcore/stream`` websocket, uploads, media) goes to the same process, so a session's uploads meet its websocket
and each process keeps its own caches. A process that dies is restarted; its browsers reconnect by themselves.

Usage: python -m ui.serve [--processes N] [--port 8501] [--address ADDRESS]
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import tornado.httpclient
import tornado.httpserver
import tornado.netutil
import tornado.web
import tornado.websocket

from ui.shared_summaries import SHARED_DIR_ENV
from ui.start import REQUEST_HEAD_BYTES

REPO = Path(__file__).resolve().parents[1]
COOKIE = "scheduler_lab_backend"
MIB_BYTES = 1024 * 1024
UPLOAD_OVERHEAD_BYTES = MIB_BYTES  # a multipart body is a little larger than its file (Streamlit allows 1 MiB)
DEFAULT_UPLOAD_MIB = 200  # Streamlit's server.maxUploadSize default
DEFAULT_MESSAGE_MIB = 200  # Streamlit's server.maxMessageSize default
HEALTHY_WITHIN_S = 120.0  # a server not healthy by then is killed and started again
HEALTH_POLL_S = 0.5
WATCH_EVERY_S = 1.0
PENDING_S = 30.0  # a new cookie counts as a session this long, until its browser opens the websocket
STOP_WITHIN_S = 15.0  # SIGTERM, then SIGKILL after this
PROXY_TIMEOUT_S = 600.0
BODY_CHUNKS_HELD = 4  # pieces of a request's body the proxy holds at once on their way to the backend (64 KiB each)
# Hop-by-hop headers (RFC 9110 7.6.1) belong to one connection and are never forwarded; Content-Length and
# Transfer-Encoding are recomputed by tornado for the body it actually sends.
HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
              "transfer-encoding", "upgrade", "proxy-connection", "content-length"}
# The websocket handshake headers a Streamlit server reads (its origin check, the cookies, the visitor's language).
WS_FORWARDED = ("Host", "Origin", "Cookie", "User-Agent", "Accept-Language", "Authorization")
UNSENDABLE_CLOSE_CODES = {1005, 1006, 1015}  # reserved: they report a close, they cannot be sent in one


def log(line: str) -> None:
    """One line on the launcher's output, at once (it is read by people and by the tests)."""
    print(line, flush=True)


def free_port() -> int:
    """A local TCP port nobody listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def streamlit_command(port: int) -> list[str]:
    """``streamlit run app.py`` (through ``ui.start``: no address lookups) on ``port`` of 127.0.0.1, headless,
    without usage statistics or a file watcher: how every app server of the project starts (this launcher's
    processes, the tests' and the benchmarks')."""
    return [sys.executable, "-m", "ui.start", "--server.headless=true", f"--server.port={port}",
            "--server.address=127.0.0.1", "--browser.gatherUsageStats=false", "--server.fileWatcherType=none"]


def usable_cores() -> int:
    """The cores this process may run on (its affinity, so ``taskset`` is respected), at least 1."""
    return max(1, len(os.sched_getaffinity(0)))


def streamlit_config() -> dict:
    """The app's ``.streamlit/config.toml`` (empty when there is none): the children read the same file."""
    path = REPO / ".streamlit" / "config.toml"
    return tomllib.loads(path.read_text()) if path.is_file() else {}


def server_option_mib(config: dict, name: str, default_mib: int) -> int:
    """A ``[server]`` size option in MiB, Streamlit's default when absent."""
    return int(config.get("server", {}).get(name, default_mib))


def _die_with_parent() -> None:
    """In the child before exec (Linux): SIGTERM when the launcher dies, even by SIGKILL, so no server is left."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


@dataclass
class Backend:
    """One ``streamlit run app.py`` process: its index (what the cookie names), port and load."""

    index: int
    port: int = 0
    process: subprocess.Popen | None = None
    ready: bool = False  # healthy and not being restarted: cookies naming it are honoured
    sessions: int = 0  # open websocket sessions through the proxy
    pending_s: list[float] = field(default_factory=list)  # when cookies were issued whose websocket is not open yet

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def load(self, now_s: float) -> int:
        """Open sessions plus fresh cookies: a browser asks for the page before it opens its websocket, so a
        room arriving at once would otherwise all land on the first process."""
        self.pending_s = [t for t in self.pending_s if now_s - t < PENDING_S]
        return self.sessions + len(self.pending_s)

    def cookie_issued(self) -> None:
        """A browser was just pinned here by a new cookie; it counts as a session until its websocket opens."""
        self.pending_s.append(time.monotonic())

    def session_opened(self) -> None:
        """A websocket opened: one more session, one fewer cookie waiting for its browser (counted once, not twice)."""
        self.sessions += 1
        if self.pending_s:
            self.pending_s.pop(0)

    def session_closed(self) -> None:
        self.sessions = max(0, self.sessions - 1)

    def start(self) -> None:
        """Start the server on a fresh free port (``streamlit_command``); output of the child's
        banner is dropped (its address is not the one to visit), its errors go to the launcher's stderr."""
        self.port, self.ready = free_port(), False
        self.process = subprocess.Popen(streamlit_command(self.port), cwd=REPO, stdout=subprocess.DEVNULL,
                                        start_new_session=True,
                                        preexec_fn=_die_with_parent if sys.platform == "linux" else None)

    def signal_group(self, signum: int) -> None:
        """Send ``signum`` to the server and anything it started (its own process group)."""
        if self.process is not None:
            try:
                os.killpg(self.process.pid, signum)
            except ProcessLookupError:
                pass


class Pool:
    """The backends: starts them, picks one for a new browser, restarts the ones that die, stops them all."""

    def __init__(self, processes: int):
        self.backends = [Backend(i) for i in range(processes)]
        self._restarting: set[int] = set()

    def by_cookie(self, value: str | None) -> Backend | None:
        """The live backend a cookie names; None for anything else (absent, not a small integer, out of range,
        restarting): the cookie comes from the browser and is never trusted further than that."""
        if value is None or not re.fullmatch(r"[0-9]{1,4}", value):
            return None
        index = int(value)
        if index >= len(self.backends) or not self.backends[index].ready:
            return None
        return self.backends[index]

    def pick(self) -> Backend | None:
        """The live backend with the fewest sessions (ties: the lowest index); None while none is live."""
        now_s = time.monotonic()
        live = [b for b in self.backends if b.ready]
        return min(live, key=lambda b: (b.load(now_s), b.index)) if live else None

    async def start_all(self) -> None:
        """Start every backend at once and wait until each is healthy; one line per backend."""
        for backend in self.backends:
            backend.start()
        await asyncio.gather(*(self._until_ready(b, "started") for b in self.backends))

    async def _until_ready(self, backend: Backend, verb: str) -> None:
        if not await wait_healthy(backend):
            raise RuntimeError(f"backend {backend.index} did not become healthy within {HEALTHY_WITHIN_S:.0f} s "
                               f"(exit code {backend.process.poll()}); see the output above")
        backend.ready = True
        log(f"backend {backend.index} {verb}: pid {backend.process.pid} on {backend.url}")

    async def watch(self) -> None:
        """Forever: restart each backend whose process has exited."""
        while True:
            await asyncio.sleep(WATCH_EVERY_S)
            for backend in self.backends:
                code = backend.process.poll()
                if code is not None and backend.index not in self._restarting:
                    log(f"backend {backend.index} (pid {backend.process.pid}) exited with code {code}; restarting")
                    self._restarting.add(backend.index)
                    asyncio.ensure_future(self._restart(backend))

    async def _restart(self, backend: Backend) -> None:
        """Start the backend again until it answers its health check (its old sessions reconnect elsewhere or here)."""
        backend.ready = False
        backend.signal_group(signal.SIGKILL)  # whatever the dead server had started
        try:
            while True:
                backend.start()
                try:
                    await self._until_ready(backend, "restarted")
                    return
                except RuntimeError as error:
                    log(str(error))
                    backend.signal_group(signal.SIGKILL)
        finally:
            self._restarting.discard(backend.index)

    def stop_all(self) -> None:
        """SIGTERM to every backend's group, then SIGKILL to any still running after STOP_WITHIN_S."""
        for backend in self.backends:
            backend.ready = False
            backend.signal_group(signal.SIGTERM)
        deadline_s = time.monotonic() + STOP_WITHIN_S
        for backend in self.backends:
            if backend.process is None:
                continue
            try:
                backend.process.wait(timeout=max(0.1, deadline_s - time.monotonic()))
            except subprocess.TimeoutExpired:
                backend.signal_group(signal.SIGKILL)
                backend.process.wait()


async def wait_healthy(backend: Backend) -> bool:
    """Poll ``/_stcore/health`` until it answers ``ok``; False if the process exits or HEALTHY_WITHIN_S passes."""
    client = tornado.httpclient.AsyncHTTPClient()
    deadline_s = time.monotonic() + HEALTHY_WITHIN_S
    while backend.process.poll() is None and time.monotonic() < deadline_s:
        try:
            response = await client.fetch(f"{backend.url}/_stcore/health", request_timeout=2, raise_error=False)
            if response.code == 200 and response.body.strip() == b"ok":
                return True
        except OSError:  # refused while the server starts
            pass
        await asyncio.sleep(HEALTH_POLL_S)
    return False


class Sticky:
    """What the HTTP and websocket handlers share: the backend of this request, chosen by the cookie."""

    pool: Pool

    def backend(self: tornado.web.RequestHandler) -> Backend | None:
        """The cookie's backend, or a newly picked one whose cookie is set on this response (HttpOnly, Lax)."""
        chosen = self.pool.by_cookie(self.get_cookie(COOKIE))
        if chosen is None:
            chosen = self.pool.pick()
            if chosen is not None:
                self.set_cookie(COOKIE, str(chosen.index), path="/", httponly=True, samesite="Lax")
                self._issued = True
        return chosen

    def forwarded_for(self: tornado.web.RequestHandler) -> str:
        """X-Forwarded-For with this hop's client added."""
        earlier = self.request.headers.get("X-Forwarded-For")
        return f"{earlier}, {self.request.remote_ip}" if earlier else str(self.request.remote_ip)


@tornado.web.stream_request_body
class HttpProxy(Sticky, tornado.web.RequestHandler):
    """Plain HTTP to the browser's backend: method, path, query, headers (less hop-by-hop) and body, and back.

    A request's body streams through, ``BODY_CHUNKS_HELD`` chunks at most held at a time: the backend gets the request
    as soon as its headers arrive (and, with ``Expect: 100-continue``, its body only once it asks for it), so an
    upload the backend refuses from its declared length (``ui.admission``) is answered without the proxy holding it;
    the rest of such a body is read and dropped. (Buffering whole bodies, ten 60 MiB uploads at once took the
    launcher from 30 to 1,588 MiB.)"""

    SUPPORTED_METHODS = ("GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH")

    def initialize(self, pool: Pool) -> None:
        self.pool, self._issued = pool, False
        self._body: asyncio.Queue[bytes | None] | None = None
        self._response: asyncio.Future | None = None

    def compute_etag(self) -> None:
        """No ETag of the proxy's own: the backend's headers pass through unchanged."""
        return None

    def prepare(self) -> None:
        """Choose the backend and send it the request now, its body to follow as it arrives."""
        backend = self.backend()
        if backend is None:
            self.send_error(503)
            return
        if self._issued:
            backend.cookie_issued()
        headers = {k: v for k, v in self.request.headers.get_all() if k.lower() not in HOP_BY_HOP}
        headers["X-Forwarded-For"] = self.forwarded_for()
        with_body = self.request.method not in ("GET", "HEAD")
        if with_body:
            self._body = asyncio.Queue(maxsize=BODY_CHUNKS_HELD)
            if "Content-Length" in self.request.headers:  # the body streams: its length is the browser's
                headers["Content-Length"] = self.request.headers["Content-Length"]
        request = tornado.httpclient.HTTPRequest(
            backend.url + self.request.uri, method=self.request.method, headers=headers,
            body_producer=self._produce if with_body else None, expect_100_continue=with_body,
            follow_redirects=False, decompress_response=False, allow_nonstandard_methods=True,
            request_timeout=PROXY_TIMEOUT_S)
        self._response = asyncio.ensure_future(
            tornado.httpclient.AsyncHTTPClient().fetch(request, raise_error=False))

    async def data_received(self, chunk: bytes) -> None:
        """A piece of the browser's body: on to the backend, or dropped once the backend has answered."""
        if self._body is None or self._response is None or self._response.done():
            return
        put = asyncio.ensure_future(self._body.put(chunk))
        await asyncio.wait([put, self._response], return_when=asyncio.FIRST_COMPLETED)
        put.cancel()

    async def _produce(self, write) -> None:
        """The request's body for the backend, chunk by chunk as the browser sends it."""
        while (chunk := await self._body.get()) is not None:
            await write(chunk)

    async def _forward(self) -> None:
        """The browser's request has arrived whole: relay the backend's answer."""
        if self._body is not None and not self._response.done():
            end = asyncio.ensure_future(self._body.put(None))
            await asyncio.wait([end, self._response], return_when=asyncio.FIRST_COMPLETED)
            end.cancel()
        try:
            response = await self._response
        except OSError:  # the backend went away mid-request: the watcher restarts it
            self.send_error(502)
            return
        self._relay(response)

    def _relay(self, response: tornado.httpclient.HTTPResponse) -> None:
        """Write the backend's status, headers and body as this response (the sticky cookie, if new, kept)."""
        if response.code == 599:  # tornado's code for no response at all
            self.send_error(502)
            return
        self.clear()  # tornado's own defaults out: the backend's headers are the response's (the new cookie stays)
        for name in ("Server", "Content-Type", "Date"):
            self.clear_header(name)
        self.set_status(response.code, response.reason)
        for name, value in response.headers.get_all():
            if name.lower() not in HOP_BY_HOP:
                self.add_header(name, value)
        if self.request.method == "HEAD" and "Content-Length" in response.headers:
            self.set_header("Content-Length", response.headers["Content-Length"])
        elif response.body and response.code not in (204, 304):
            self.write(response.body)

    get = head = post = put = delete = options = patch = _forward


class WebSocketProxy(Sticky, tornado.websocket.WebSocketHandler):
    """The ``/_stcore/stream`` websocket: opened to the browser's backend first (with the browser's subprotocols,
    which carry Streamlit's XSRF token and session id, and its cookies), then messages both ways."""

    def initialize(self, pool: Pool, max_message_bytes: int) -> None:
        self.pool, self._issued, self.max_message_bytes = pool, False, max_message_bytes
        self.upstream: tornado.websocket.WebSocketClientConnection | None = None
        self.chosen: Backend | None = None

    async def get(self, *args, **kwargs) -> None:
        """Connect upstream before accepting, so the browser's handshake succeeds only if the backend's does."""
        if self.request.headers.get("Upgrade", "").lower() != "websocket":
            await super().get(*args, **kwargs)  # tornado answers 400 to a plain GET
            return
        self.chosen = self.backend()
        if self.chosen is None:
            self.send_error(503)
            return
        try:
            self.upstream = await tornado.websocket.websocket_connect(
                self._upstream_request(), subprotocols=self._subprotocols(),
                max_message_size=self.max_message_bytes)
        except (OSError, tornado.httpclient.HTTPClientError, tornado.websocket.WebSocketError):
            self.send_error(502)
            return
        try:
            await super().get(*args, **kwargs)  # returns when the browser's connection has ended
        finally:
            self.upstream.close()

    def _subprotocols(self) -> list[str]:
        header = self.request.headers.get("Sec-WebSocket-Protocol", "")
        return [p.strip() for p in header.split(",") if p.strip()]

    def _upstream_request(self) -> tornado.httpclient.HTTPRequest:
        url = self.chosen.url.replace("http", "ws", 1) + self.request.uri
        headers = {k: self.request.headers[k] for k in WS_FORWARDED if k in self.request.headers}
        headers["X-Forwarded-For"] = self.forwarded_for()
        return tornado.httpclient.HTTPRequest(url, headers=headers, connect_timeout=10, request_timeout=PROXY_TIMEOUT_S)

    def select_subprotocol(self, subprotocols: list[str]) -> str | None:
        """The subprotocol the backend chose ("streamlit")."""
        return self.upstream.selected_subprotocol

    def check_origin(self, origin: str) -> bool:
        """The backend checks the origin against the Host it is sent (the browser's): one check, Streamlit's."""
        return True

    def open(self, *args, **kwargs) -> None:
        self.chosen.session_opened()
        asyncio.ensure_future(self._pump_down())

    async def _pump_down(self) -> None:
        """Backend to browser until the backend closes; then close the browser's side with the same code."""
        while True:
            message = await self.upstream.read_message()
            if message is None:
                break
            try:
                await self.write_message(message, binary=isinstance(message, bytes))
            except tornado.websocket.WebSocketClosedError:
                break
        code = self.upstream.close_code
        self.close(code if code not in UNSENDABLE_CLOSE_CODES else None, self.upstream.close_reason)

    async def on_message(self, message: str | bytes) -> None:
        """Browser to backend (awaited, so a slow backend slows the browser instead of filling memory)."""
        try:
            await self.upstream.write_message(message, binary=isinstance(message, bytes))
        except tornado.websocket.WebSocketClosedError:
            self.close()

    def on_close(self) -> None:
        if self.chosen is not None and self.upstream is not None:
            self.chosen.session_closed()
            code = self.close_code
            self.upstream.close(code if code not in (None, *UNSENDABLE_CLOSE_CODES) else None, self.close_reason)


def make_app(pool: Pool, max_message_bytes: int) -> tornado.web.Application:
    return tornado.web.Application([
        (r"/_stcore/stream", WebSocketProxy, {"pool": pool, "max_message_bytes": max_message_bytes}),
        (r"/.*", HttpProxy, {"pool": pool}),
    ], websocket_max_message_size=max_message_bytes)


async def serve(args: argparse.Namespace) -> None:
    """Bind the address (failing at once if taken), start the backends, proxy until cancelled, stop them all."""
    config = streamlit_config()
    body_bytes = server_option_mib(config, "maxUploadSize", DEFAULT_UPLOAD_MIB) * MIB_BYTES + UPLOAD_OVERHEAD_BYTES
    message_bytes = server_option_mib(config, "maxMessageSize", DEFAULT_MESSAGE_MIB) * MIB_BYTES
    sockets = tornado.netutil.bind_sockets(args.port, args.address)
    tornado.httpclient.AsyncHTTPClient.configure(None, max_body_size=body_bytes + message_bytes,
                                                 max_buffer_size=body_bytes + message_bytes, max_clients=256)
    # one folder of run summaries for every process (``ui.shared_summaries``), private to this user, gone after
    shared = tempfile.mkdtemp(prefix="scheduler-lab-summaries-")
    os.environ[SHARED_DIR_ENV] = shared
    log(f"run summaries shared in {shared}")
    pool = Pool(args.processes)
    task = asyncio.current_task()
    for signum in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(signum, task.cancel)
    try:
        await pool.start_all()
        server = tornado.httpserver.HTTPServer(make_app(pool, message_bytes), max_body_size=body_bytes,
                                               max_buffer_size=body_bytes, max_header_size=REQUEST_HEAD_BYTES)
        server.add_sockets(sockets)
        plural = "process" if args.processes == 1 else "processes"
        log(f"Scheduler Lab on http://{args.address}:{args.port} ({args.processes} {plural})")
        await pool.watch()
    finally:
        pool.stop_all()
        shutil.rmtree(shared, ignore_errors=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    config_address = streamlit_config().get("server", {}).get("address", "localhost")
    parser = argparse.ArgumentParser(prog="python -m ui.serve", description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=usable_cores(),
                        help="Streamlit server processes (default: the usable cores, %(default)s here)")
    parser.add_argument("--port", type=int, default=8501, help="the one port to serve on (default %(default)s)")
    parser.add_argument("--address", default=config_address,
                        help="the address to listen on (default: server.address of .streamlit/config.toml, "
                             "%(default)s)")
    args = parser.parse_args(argv)
    if not 1 <= args.processes <= 256:
        parser.error("--processes must be between 1 and 256")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        asyncio.run(serve(args))
    except asyncio.CancelledError:  # Ctrl-C or SIGTERM: the children are stopped already
        pass
    except RuntimeError as error:  # a server that never became healthy
        log(str(error))
        return 1
    except OSError as error:  # the address is taken or not this machine's
        log(f"cannot listen on {args.address}:{args.port}: {error.strerror}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
