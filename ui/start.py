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

Usage: python -m ui.start [streamlit run options...]  (``app.py`` is the script; every option of ``streamlit run``
passes through, e.g. ``--server.port=8502``). ``ui.serve`` and the tests start every server this way.
"""

from __future__ import annotations

import sys

from streamlit import net_util
from streamlit.web import cli

APP_SCRIPT = "app.py"


def unknown_address() -> None:
    """This machine's address, as far as the server is concerned: not looked up (None: "could not tell")."""
    return None


def without_address_lookups() -> None:
    """Make Streamlit's address lookups answer "unknown" without touching the network (its origin check and its
    start-up banner call them through ``net_util``)."""
    net_util.get_internal_ip = unknown_address
    net_util.get_external_ip = unknown_address


def main(argv: list[str]) -> int:
    """Run ``streamlit run app.py`` with ``argv``'s options, the lookups off."""
    without_address_lookups()
    return cli.main(["run", APP_SCRIPT, *argv], prog_name="streamlit", standalone_mode=False) or 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
