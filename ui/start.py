"""Start the app: ``streamlit run app.py`` in a process that never asks the network for its own address.

Streamlit checks the Origin of every WebSocket handshake from another site against this machine's addresses, and
finds them out on demand: the internal one by routing a UDP socket towards 8.8.8.8, the external one by an HTTP
request to checkip.amazonaws.com (one second's timeout, tried again on every handshake while it fails). Those run on
the server's event loop: on a machine without outbound access a handshake with a foreign Origin stalled every
visitor about two seconds, and a few of them froze the health check. This process answers both lookups with
"unknown" before the server starts, so a handshake from another site is refused at once and the server opens no
connection of its own. Same-origin visitors are unaffected (their Origin is the Host they asked for); behind a
reverse proxy whose public name differs from the Host it forwards, set ``browser.serverAddress`` to that name (see
docs/serving.md). Usage statistics are off in ``.streamlit/config.toml``.

It also closes doors a visitor could otherwise open (``harden``):

- the server runs headless whatever the machine or the options (``FORCED_OPTIONS``): it opens no browser of its own,
  and Streamlit then refuses ``install_skills``, a message that writes folders into the checkout;
- Streamlit's ``clear_cache`` message, which any visitor can send, is refused: it would empty every session's caches
  at once (the app keeps nothing shared in Streamlit's caches either: ``ui.runner``, ``ui.jobs``);
- ``ui.admission`` bounds the sessions and uploads the process takes;
- a request's line and headers may take ``REQUEST_HEAD_BYTES`` (uvicorn's default, 16 KiB, answered a link of more
  than that with a bare HTTP 400 once it arrived in pieces, as it does over a network; links of up to 65,536
  characters are valid, and Streamlit reads queries of up to 524,288);
- SIGTERM, SIGINT and SIGQUIT end the process within ``jobs.STOP_WITHIN_S`` whatever its pages are doing
  (``jobs.stop_soon``), not once every page thread has reached its next stop point.

Usage: python -m ui.start [streamlit run options...]  (``app.py`` is the script; every option of ``streamlit run``
passes through, e.g. ``--server.port=8502``). ``ui.serve`` and the tests start every server this way.
"""

from __future__ import annotations

import logging
import signal
import sys

from streamlit import net_util
from streamlit.runtime.app_session import AppSession
from streamlit.web import bootstrap, cli
from streamlit.web.server.starlette import starlette_server

from ui import admission, jobs

APP_SCRIPT = "app.py"
FORCED_OPTIONS = ("--server.headless=true",)  # after the caller's options: the last of a repeated option holds
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT)
REQUEST_HEAD_BYTES = 640 * 1024  # a request's line and headers: the longest query Streamlit reads, and room to spare
_LOG = logging.getLogger(__name__)


def unknown_address() -> None:
    """This machine's address, as far as the server is concerned: not looked up (None: "could not tell")."""
    return None


def without_address_lookups() -> None:
    """Make Streamlit's address lookups answer "unknown" without touching the network (its origin check and its
    start-up banner call them through ``net_util``)."""
    net_util.get_internal_ip = unknown_address
    net_util.get_external_ip = unknown_address


def refuse_cache_clearing() -> None:
    """Make every session ignore Streamlit's ``clear_cache`` message (hidden in the viewer's toolbar, still
    honoured): one line in the server log instead."""
    AppSession._handle_clear_cache_request = _cache_clearing_refused


def _cache_clearing_refused(session: AppSession) -> None:
    _LOG.warning("A visitor asked to clear the server's caches: refused (python -m ui.start)")


def stop_soon_on_signals() -> None:
    """Make the stop signals Streamlit handles also end the process soon (``jobs.stop_soon``), before Streamlit's
    own handler starts its orderly stop."""
    set_up = bootstrap._set_up_signal_handler
    if getattr(set_up, "stops_soon", False):
        return

    def with_stop_soon(server) -> None:
        set_up(server)
        for signum in STOP_SIGNALS:
            streamlit_handler = signal.getsignal(signum)

            def handler(number, frame, streamlit_handler=streamlit_handler) -> None:
                jobs.stop_soon()
                if callable(streamlit_handler):
                    streamlit_handler(number, frame)
            signal.signal(signum, handler)

    with_stop_soon.stops_soon = True
    bootstrap._set_up_signal_handler = with_stop_soon


def allow_long_links() -> None:
    """Let a request's line and headers take up to ``REQUEST_HEAD_BYTES`` in the server's HTTP parser."""
    kwargs = starlette_server._get_uvicorn_config_kwargs
    if getattr(kwargs, "long_links", False):
        return

    def with_room() -> dict:
        return {**kwargs(), "h11_max_incomplete_event_size": REQUEST_HEAD_BYTES}

    with_room.long_links = True
    starlette_server._get_uvicorn_config_kwargs = with_room


def harden() -> None:
    """Every change this module makes to Streamlit before its server starts (module docstring)."""
    without_address_lookups()
    refuse_cache_clearing()
    admission.install()
    allow_long_links()
    stop_soon_on_signals()


def main(argv: list[str]) -> int:
    """Run ``streamlit run app.py`` with ``argv``'s options, hardened (``harden``), headless."""
    harden()
    return cli.main(["run", APP_SCRIPT, *argv, *FORCED_OPTIONS], prog_name="streamlit", standalone_mode=False) or 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
