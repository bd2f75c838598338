"""A session of the app over Streamlit's own protocol, as the browser speaks it, without a browser.

A ``rerun_script`` back message (the page's query string, the widget values changed) goes up the
``/_stcore/stream`` websocket; forward messages come back until ``script_finished``. The server does exactly
the work a browser's session costs it, and nothing draws the page: the concurrency test and
``bench/bench_sessions.py`` measure the server alone with it.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Callable, TypeVar

from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from websockets.sync.client import connect

TIMEOUT_S = 600
INVISIBLE_ELEMENTS = ("empty", "html")  # a placeholder, and the style sheet every page starts with
T = TypeVar("T")


def rerun_message(query: str, page: str = "") -> BackMsg:
    """The back message asking for a script run of ``page`` (default: the app's default) at ``query``."""
    request = BackMsg()
    request.rerun_script.query_string = query
    request.rerun_script.page_name = page
    return request


class Session:
    """One session: ``run`` asks for a script run and waits for it; the sliders it was sent are kept by label,
    and the page's query string as the app last set it. ``headers`` go with the websocket's handshake (a
    ``Cookie``, as a browser sends behind ``python -m ui.serve``)."""

    def __init__(self, url: str, headers: dict[str, str] | None = None, open_timeout_s: float = TIMEOUT_S):
        self._open = contextlib.ExitStack()  # the websocket client wants to be closed as a context
        self.ws = self._open.enter_context(connect(url.replace("http", "ws", 1) + "/_stcore/stream",
                                                   subprotocols=["streamlit"], max_size=None,
                                                   open_timeout=open_timeout_s, additional_headers=headers))
        self.query_string, self.page, self.sliders, self.buttons, self.sent = "", "", {}, {}, {}
        self._drained_bytes = 0

    def close(self) -> None:
        self._open.close()

    def run(self, query: str | None = None, page: str | None = None, widgets: dict[str, float] | None = None,
            triggers: tuple[str, ...] = (), wait: bool = True) -> tuple[float, bytes]:
        """Run the page (``query``: its query string, default the last one the app set; ``page``: default the last
        one run; ``widgets``: slider
        values by widget id; ``triggers``: ids of buttons pressed): seconds until the run finished successfully, and
        every message received (without ``wait``: the request is sent and (0, b"") returned at once)."""
        self.page = self.page if page is None else page
        request = rerun_message(self.query_string if query is None else query, self.page)
        for widget_id, value in (widgets or {}).items():
            widget = request.rerun_script.widget_states.widgets.add()
            widget.id = widget_id
            widget.double_array_value.data.append(value)
        for widget_id in triggers:
            widget = request.rerun_script.widget_states.widgets.add()
            widget.id = widget_id
            widget.trigger_value = True
        started = time.monotonic()
        self.ws.send(request.SerializeToString())
        if not wait:
            return 0.0, b""
        received = []
        while True:
            raw = self.ws.recv(timeout=TIMEOUT_S)
            received.append(raw)
            message = ForwardMsg()
            message.ParseFromString(raw)
            kind = message.WhichOneof("type")
            if kind == "page_info_changed":
                self.query_string = message.page_info_changed.query_string
            elif kind == "delta" and message.delta.WhichOneof("type") == "new_element":
                element = message.delta.new_element
                if element.WhichOneof("type") == "slider":
                    self.sliders[element.slider.label] = element.slider
                elif element.WhichOneof("type") == "button":
                    self.buttons[element.button.label] = element.button.id
            elif kind == "script_finished":
                assert message.script_finished in (ForwardMsg.FINISHED_SUCCESSFULLY,
                                                   ForwardMsg.FINISHED_EARLY_FOR_RERUN), message.script_finished
                if message.script_finished == ForwardMsg.FINISHED_SUCCESSFULLY:
                    return time.monotonic() - started, b"".join(received)

    def drain(self) -> None:
        """Read (and count) whatever the server sends from now on, in the background, until the session closes: a
        session of a burst that asked for its page and does not wait for it, as an open browser tab reads."""
        def read() -> None:
            with contextlib.suppress(Exception):  # closed: the end of the reading
                while True:
                    self._drained_bytes += len(self.ws.recv())
        threading.Thread(target=read, daemon=True).start()

    def received_bytes(self) -> int:
        """Bytes read by ``drain`` so far."""
        return self._drained_bytes

    def press(self, label: str, wait: bool = True) -> float:
        """Press the button ``label`` of the page as last run: seconds until the page finished (0 without
        ``wait``)."""
        return self.run(triggers=(self.buttons[label],), wait=wait)[0]

    def step_slider(self, label: str) -> float:
        """Move a slider one step up, as the arrow key does in the browser: seconds until the page finished."""
        slider = self.sliders[label]
        value = self.sent.get(slider.id, list(slider.default)[0]) + slider.step
        self.sent[slider.id] = value
        return self.run(widgets={slider.id: value})[0]


def first_element(session: Session, query: str, timeout_s: float) -> float | None:
    """Ask for the page ``query`` and wait for its first element a visitor sees (a delta that draws something: the
    page, or the line saying it waits for its turn; not a placeholder or a style sheet): seconds until then, None when
    none came within ``timeout_s``."""
    started = time.monotonic()
    session.run(query, wait=False)
    while (left := timeout_s - (time.monotonic() - started)) > 0:
        try:
            raw = session.ws.recv(timeout=left)
        except TimeoutError:
            return None
        message = ForwardMsg()
        message.ParseFromString(raw)
        if message.WhichOneof("type") == "delta" and message.delta.WhichOneof("type") == "new_element" and \
                message.delta.new_element.WhichOneof("type") not in INVISIBLE_ELEMENTS:
            return time.monotonic() - started
    return None


def open_page(url: str, query: str = "", page: str = "",
              headers: dict[str, str] | None = None) -> tuple[float, bytes]:
    """One new session opening one page: (seconds until the script finished, every message it received)."""
    session = Session(url, headers)
    try:
        return session.run(query, page)
    finally:
        session.close()


def all_at_once(tasks: list[Callable[[], T]]) -> list[T]:
    """Run every task (a session's page) in its own thread at the same moment; their results in order."""
    results: list = [None] * len(tasks)
    threads = [threading.Thread(target=lambda i=i: results.__setitem__(i, tasks[i]())) for i in range(len(tasks))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert None not in results, "every session got its page"
    return results
