"""What one server process lets in (ui.admission), on a fake server: sessions beyond the limit are refused at their
handshake and the next one is let in once one leaves; an upload beyond its visitor's or the process's share is
refused from its declared length alone, before its body is read; the files of visitors who left are dropped first."""

from __future__ import annotations

import asyncio
import dataclasses
from types import SimpleNamespace

import pytest

from engine.scenario.caps import DEFAULT_CAPS, MIB
from ui.admission import PAGE_RUNS_AT_ONCE, Admission, asks_for_a_run, declared_length

CAPS = dataclasses.replace(DEFAULT_CAPS, sessions_per_process=2, uploads_per_session_mib=10, uploads_held_mib=25)


class Files:
    """Streamlit's uploaded-file manager as the middleware reads it: files by session and id."""

    def __init__(self):
        self.file_storage: dict[str, dict[str, SimpleNamespace]] = {}

    def add(self, session: str, file_id: str, mib: float) -> None:
        self.file_storage.setdefault(session, {})[file_id] = SimpleNamespace(data=b"x" * int(mib * MIB))

    def remove_session_files(self, session: str) -> None:
        self.file_storage.pop(session, None)


class App:
    """The server behind the middleware: records what reached it; a websocket stays open until ``release``."""

    def __init__(self):
        self.reached, self.release = [], asyncio.Event()

    async def __call__(self, scope, receive, send):
        self.reached.append(scope["path"])
        if scope["type"] == "websocket":
            await self.release.wait()
        else:
            await receive()  # the body is read only by the server behind
            await send({"type": "http.response.start", "status": 204, "headers": []})
            await send({"type": "http.response.body", "body": b""})


def websocket(extensions: dict | None = None) -> dict:
    return {"type": "websocket", "path": "/_stcore/stream", "headers": [], "extensions": extensions or {}}


def upload(session: str, file_id: str, mib: float | None) -> dict:
    headers = [] if mib is None else [(b"content-length", str(int(mib * MIB)).encode())]
    return {"type": "http", "method": "PUT", "path": f"/_stcore/upload_file/{session}/{file_id}", "headers": headers}


async def call(middleware: Admission, scope: dict) -> tuple[list[dict], bool]:
    """What the middleware sent back, and whether the request's body was read."""
    sent, read = [], []

    async def receive():
        read.append(True)
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    await middleware(scope, receive, send)
    return sent, bool(read)


def status(sent: list[dict]) -> int:
    return next(m["status"] for m in sent if "status" in m)


def text(sent: list[dict]) -> str:
    return b"".join(m.get("body", b"") for m in sent).decode()


def test_sessions_beyond_the_limit_are_refused_at_the_handshake_until_one_leaves():
    async def scenario():
        app = App()
        middleware = Admission(app, CAPS, files=Files, active=lambda s: True)
        held = [asyncio.create_task(call(middleware, websocket())) for _ in range(2)]
        await asyncio.sleep(0.01)
        sent, _ = await call(middleware, websocket({"websocket.http.response": {}}))
        assert status(sent) == 503 and (b"retry-after", b"5") in sent[0]["headers"]
        sent, _ = await call(middleware, websocket())  # a server that cannot answer a handshake: closed unaccepted
        assert sent == [{"type": "websocket.close", "code": 1013}]
        assert len(app.reached) == 2
        app.release.set()
        await asyncio.gather(*held)
        assert middleware.sessions == 0
        app.release = asyncio.Event()
        later = asyncio.create_task(call(middleware, websocket()))
        await asyncio.sleep(0.01)
        assert len(app.reached) == 3, "a place freed is taken again"
        app.release.set()
        await later
    asyncio.run(scenario())


def test_an_upload_beyond_its_visitors_share_is_refused_before_its_body_is_read():
    files = Files()
    files.add("a", "trace", 6)
    middleware = Admission(App(), CAPS, files=lambda: files, active=lambda s: True)
    sent, read = asyncio.run(call(middleware, upload("a", "second", 5)))
    assert status(sent) == 413 and not read
    assert "11 MiB, more than the limit of 10 MiB a visitor may hold (uploads_per_session_mib)" in text(sent)
    sent, read = asyncio.run(call(middleware, upload("a", "trace", 9)))  # the same file again replaces itself
    assert status(sent) == 204 and read
    sent, read = asyncio.run(call(middleware, upload("b", "trace", 9)))  # another visitor has a share of their own
    assert status(sent) == 204 and read


def test_uploads_under_way_count_against_the_share():
    async def scenario():
        files, gate = Files(), asyncio.Event()

        class Slow(App):
            async def __call__(self, scope, receive, send):
                await gate.wait()
                await super().__call__(scope, receive, send)

        middleware = Admission(Slow(), CAPS, files=lambda: files, active=lambda s: True)
        first = asyncio.create_task(call(middleware, upload("a", "one", 6)))
        await asyncio.sleep(0.01)
        assert middleware.in_flight == {"a": 6 * MIB}
        sent, read = await call(middleware, upload("a", "two", 6))
        assert status(sent) == 413 and not read
        gate.set()
        await first
        assert middleware.in_flight == {}
    asyncio.run(scenario())


def test_the_process_share_drops_departed_visitors_files_first_then_refuses():
    files = Files()
    for session in "abc":
        files.add(session, "trace", 8)
    active = {"a", "b", "c", "d"}
    middleware = Admission(App(), CAPS, files=lambda: files, active=lambda s: s in active)
    sent, read = asyncio.run(call(middleware, upload("d", "trace", 2)))  # 26 MiB > 25 MiB, nobody has left
    assert status(sent) == 413 and not read and "limit (uploads_held_mib)" in text(sent)
    active.discard("b")
    sent, read = asyncio.run(call(middleware, upload("d", "trace", 2)))
    assert status(sent) == 204 and read
    assert set(files.file_storage) == {"a", "c"}, "the visitor who left lost their files; the others kept theirs"


@pytest.mark.parametrize("headers, length", [([], None), ([(b"content-length", b"12")], 12),
                                             ([(b"Content-Length", b" 7 ")], 7), ([(b"content-length", b"-1")], None),
                                             ([(b"content-length", b"1e9")], None),
                                             ([(b"content-length", b"9" * 40)], None)])
def test_only_a_plain_declared_length_counts(headers, length):
    assert declared_length({"headers": headers}) == length


def test_an_upload_that_does_not_declare_its_length_is_refused():
    sent, read = asyncio.run(call(Admission(App(), CAPS, files=Files, active=lambda s: True), upload("a", "f", None)))
    assert status(sent) == 411 and not read


def test_other_requests_pass_untouched():
    app = App()
    middleware = Admission(app, CAPS, files=Files, active=lambda s: True)
    for scope in ({"type": "http", "method": "GET", "path": "/_stcore/health", "headers": []},
                  {"type": "http", "method": "DELETE", "path": "/_stcore/upload_file/a/b", "headers": []},
                  {"type": "lifespan"}):
        asyncio.run(call(middleware, scope)) if scope["type"] != "lifespan" else None
    assert app.reached == ["/_stcore/health", "/_stcore/upload_file/a/b"]


def test_page_runs_start_at_their_pace_after_a_first_few_at_once():
    now = [100.0]
    middleware = Admission(App(), CAPS, files=Files, active=lambda s: True, clock=lambda: now[0])
    spacing_s = 1 / CAPS.page_runs_per_s
    waits = [middleware.run_wait_s() for _ in range(PAGE_RUNS_AT_ONCE + 3)]
    assert waits[:PAGE_RUNS_AT_ONCE] == pytest.approx([0.0] * PAGE_RUNS_AT_ONCE, abs=1e-9)
    assert waits[PAGE_RUNS_AT_ONCE:] == pytest.approx([spacing_s, 2 * spacing_s, 3 * spacing_s])
    now[0] += 60.0  # a quiet minute: the first few go at once again, no more
    assert [middleware.run_wait_s() for _ in range(PAGE_RUNS_AT_ONCE)] == pytest.approx([0.0] * PAGE_RUNS_AT_ONCE,
                                                                                        abs=1e-9)
    assert middleware.run_wait_s() == pytest.approx(spacing_s)


def test_only_a_sessions_ask_for_a_run_waits_its_turn():
    from streamlit.proto.BackMsg_pb2 import BackMsg

    rerun, heartbeat = BackMsg(), BackMsg()
    rerun.rerun_script.query_string = "s=x"
    heartbeat.app_heartbeat = True
    assert asks_for_a_run(rerun.SerializeToString())
    assert not asks_for_a_run(heartbeat.SerializeToString())
    assert not asks_for_a_run(b"\xff\xff not a message") and not asks_for_a_run(None)

    async def scenario():
        caps = dataclasses.replace(CAPS, page_runs_per_s=20)
        got = []

        class Reader(App):
            async def __call__(self, scope, receive, send):
                for _ in range(PAGE_RUNS_AT_ONCE + 2):
                    got.append((await receive()).get("bytes"))

        middleware = Admission(Reader(), caps, files=Files, active=lambda s: True)
        messages = iter([rerun.SerializeToString()] * (PAGE_RUNS_AT_ONCE + 1) + [heartbeat.SerializeToString()])

        async def receive():
            return {"type": "websocket.receive", "bytes": next(messages)}

        started = asyncio.get_running_loop().time()
        await middleware(websocket(), receive, lambda m: asyncio.sleep(0))
        return asyncio.get_running_loop().time() - started

    elapsed_s = asyncio.run(scenario())
    assert 0.04 <= elapsed_s < 0.5, "the eleventh run waited 1/20 s; the heartbeat after it did not wait"
