"""What one app server process lets in: at most ``sessions_per_process`` sessions, and uploads within a visitor's
and the process's share, each refused before a byte of it is read.

One Streamlit process holds every session's state and every uploaded file in its memory, and every session's page
runs as a thread of the same interpreter. Without a bound, a burst of connections from one visitor becomes as many
page threads, and 24 uploads of 60 MiB nobody uses stayed in memory until their session was dropped minutes after
its visitor left. This ASGI middleware sits in front of Streamlit's own routes (``install``, called by
``ui.start`` before the server starts) and answers two kinds of request itself:

- a session's websocket (``/_stcore/stream``) beyond ``sessions_per_process`` open ones is refused at its handshake
  (HTTP 503, ``Retry-After``): the browser's page says it is connecting and tries again by itself;
- the page runs its sessions ask for (Streamlit's ``rerun_script`` message: a page opened or changed) start at most
  ``page_runs_per_s`` a second after a first ``PAGE_RUNS_AT_ONCE``, first come first served: each starts a script
  thread and costs the server's one event loop a few milliseconds, and 200 sessions asking at once kept it from the
  health check and every other visitor for 2-4 s (at 150 a second: under 0.5 s, and a visitor arriving amid 200
  waiting runs is seen within 2 s; 100 and 200 a second measured worse on one or the other). A session's next
  message waits behind its paced one, so each session holds at most one place in that line;
- an upload (``PUT /_stcore/upload_file/SESSION/FILE``) is refused (HTTP 413 or 411, one line saying why) from its
  declared length alone, before its body is read, when the files its session holds, its uploads under way and this
  one would pass ``uploads_per_session_mib``, or all sessions' would pass ``uploads_held_mib`` even once the files of
  sessions whose visitor has left are dropped (they are dropped first: a visitor who is still here keeps theirs).

The counts live in the middleware, on the server's event loop (one thread): no lock is needed for them.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from typing import Any, Awaitable, Callable

from streamlit.proto.BackMsg_pb2 import BackMsg

from engine.scenario.caps import DEFAULT_CAPS, MIB, Caps

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict]]
Send = Callable[[dict], Awaitable[None]]

SESSION_PATH = re.compile(r"/_stcore/stream$")
UPLOAD_PATH = re.compile(r"/_stcore/upload_file/([^/]+)/([^/]+)$")
RETRY_AFTER_S = 5  # what a refused session's browser is told to wait before it tries again
PAGE_RUNS_AT_ONCE = 10  # page runs that start at once after a quiet moment, before the pace holds


class Admission:
    """The middleware (module docstring): ``app`` is the rest of the server; ``caps`` its limits; ``files`` the
    server's uploaded-file manager and ``active`` whether a session's visitor is still connected (both read when a
    request comes, Streamlit's runtime by default)."""

    def __init__(self, app, caps: Caps = DEFAULT_CAPS, files: Callable[[], Any] | None = None,
                 active: Callable[[str], bool] | None = None, clock: Callable[[], float] = time.monotonic):
        self.app, self.caps = app, caps
        self._files, self._active, self._clock = files or _runtime_files, active or _runtime_active, clock
        self.sessions = 0
        self.in_flight: dict[str, int] = {}  # bytes of uploads under way, by session
        self._next_run_s = -float("inf")  # when the next page run may start (the pace's line)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] == "websocket" and SESSION_PATH.search(path):
            await self._session(scope, receive, send)
        elif scope["type"] == "http" and scope.get("method") == "PUT" and (found := UPLOAD_PATH.search(path)):
            await self._upload(found.group(1), found.group(2), scope, receive, send)
        else:
            await self.app(scope, receive, send)

    async def _session(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.sessions >= self.caps.sessions_per_process:
            await _deny_session(scope, send)
            return
        self.sessions += 1

        async def paced() -> dict:
            message = await receive()
            if message.get("type") == "websocket.receive" and asks_for_a_run(message.get("bytes")):
                wait_s = self.run_wait_s()
                if wait_s > 0:
                    await asyncio.sleep(wait_s)
            return message

        try:
            await self.app(scope, paced, send)
        finally:
            self.sessions -= 1

    def run_wait_s(self) -> float:
        """Take the next place in the line of page runs: how long to wait for it (0: start now). A token bucket of
        ``PAGE_RUNS_AT_ONCE`` places refilled at ``page_runs_per_s``."""
        now_s, spacing_s = self._clock(), 1.0 / self.caps.page_runs_per_s
        start_s = max(self._next_run_s, now_s - (PAGE_RUNS_AT_ONCE - 1) * spacing_s)
        self._next_run_s = start_s + spacing_s
        return max(0.0, start_s - now_s)

    async def _upload(self, session_id: str, file_id: str, scope: Scope, receive: Receive, send: Send) -> None:
        length = declared_length(scope)
        if length is None:
            await _plain(send, 411, "An upload must declare its length (Content-Length).")
            return
        refusal = self.refusal(session_id, file_id, length)
        if refusal:
            await _plain(send, 413, refusal)
            return
        self.in_flight[session_id] = self.in_flight.get(session_id, 0) + length
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight[session_id] -= length
            if not self.in_flight[session_id]:
                del self.in_flight[session_id]

    def refusal(self, session_id: str, file_id: str, length: int) -> str:
        """Why an upload of ``length`` bytes as ``file_id`` of ``session_id`` is refused ("" when it is not): its
        session's share, then the process's (after dropping the files of sessions whose visitor left)."""
        held = held_bytes(self._files())
        replaced = held.get((session_id, file_id), 0)  # a file uploaded again under its id replaces itself
        mine = sum(size for (sid, _), size in held.items() if sid == session_id) - replaced
        mine += self.in_flight.get(session_id, 0) + length
        if mine > self.caps.uploads_per_session_mib * MIB:
            return (f"This upload would make your uploaded files {mib_text(mine)}, more than the limit of "
                    f"{self.caps.uploads_per_session_mib:,} MiB a visitor may hold (uploads_per_session_mib): remove "
                    f"an uploaded file first.")
        if self._total(held) - replaced + length > self.caps.uploads_held_mib * MIB:
            self._drop_departed()
            held = held_bytes(self._files())
            if self._total(held) - held.get((session_id, file_id), 0) + length > self.caps.uploads_held_mib * MIB:
                return (f"This server holds {self.caps.uploads_held_mib:,} MiB of uploaded files, its limit "
                        f"(uploads_held_mib): try again in a few minutes.")
        return ""

    def _total(self, held: dict[tuple[str, str], int]) -> int:
        return sum(held.values()) + sum(self.in_flight.values())

    def _drop_departed(self) -> None:
        """Drop the uploaded files of every session whose visitor is no longer connected."""
        files = self._files()
        for session_id in {sid for sid, _ in held_bytes(files)}:
            if not self._active(session_id):
                files.remove_session_files(session_id)


def asks_for_a_run(data: bytes | None) -> bool:
    """Whether a session's message asks for a page run (a ``rerun_script`` back message); anything unreadable is
    left to Streamlit, which closes the connection."""
    if not data:
        return False
    try:
        return BackMsg.FromString(data).WhichOneof("type") == "rerun_script"
    except Exception:  # noqa: BLE001 - protobuf's DecodeError and kin: not ours to judge
        return False


def held_bytes(files) -> dict[tuple[str, str], int]:
    """Bytes of each uploaded file the manager holds, by (session, file id)."""
    with getattr(files, "_lock", contextlib.nullcontext()):
        return {(sid, fid): len(rec.data) for sid, kept in files.file_storage.items() for fid, rec in kept.items()}


def declared_length(scope: Scope) -> int | None:
    """The request's Content-Length, None when it has none or not a plain number."""
    for name, value in scope.get("headers", []):
        if name.lower() == b"content-length":
            text = value.decode("latin-1").strip()
            return int(text) if text.isdigit() and len(text) < 19 else None
    return None


def mib_text(size_bytes: int) -> str:
    return f"{size_bytes / MIB:,.0f} MiB"


async def _plain(send: Send, status: int, line: str) -> None:
    """Answer with ``status`` and ``line`` as plain text (the request's body is never read)."""
    body = line.encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                            (b"content-length", str(len(body)).encode()), (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})


async def _deny_session(scope: Scope, send: Send) -> None:
    """Refuse a websocket at its handshake: HTTP 503 with ``Retry-After`` where the server can answer a handshake
    with a response of its own, else a close before it is accepted (HTTP 403)."""
    if "websocket.http.response" not in scope.get("extensions", {}):
        await send({"type": "websocket.close", "code": 1013})
        return
    body = b"This server holds as many sessions as it may; the page tries again by itself."
    await send({"type": "websocket.http.response.start", "status": 503,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                            (b"retry-after", str(RETRY_AFTER_S).encode()),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "websocket.http.response.body", "body": body})


def _runtime_files():
    from streamlit import runtime
    return runtime.get_instance().uploaded_file_mgr


def _runtime_active(session_id: str) -> bool:
    from streamlit import runtime
    return runtime.get_instance().is_active_session(session_id)


def install() -> None:
    """Put ``Admission`` in front of Streamlit's routes in every app server this process starts (before it starts),
    after Streamlit's own path check."""
    from starlette.middleware import Middleware
    from streamlit.web.server.starlette import starlette_app

    streamlit_middleware = starlette_app.create_streamlit_middleware
    if getattr(streamlit_middleware, "admits", False):
        return

    def with_admission() -> list:
        first, *rest = streamlit_middleware()
        return [first, Middleware(Admission), *rest]

    with_admission.admits = True
    starlette_app.create_streamlit_middleware = with_admission
