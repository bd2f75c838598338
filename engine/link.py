"""A scenario or a page's view in a link: JSON, zlib-compressed, base64url, so that a copied address reopens the
same page (``ui.state`` keeps the scenario in ``?s=``, ``ui.view`` the view in ``?v=``), and a report links back
to its plan. Reading a link is bounded: its length, and its size after decompression (``caps``)."""

from __future__ import annotations

import base64
import binascii
import json
import zlib
from urllib.parse import urlencode

from .caps import DEFAULT_CAPS
from .errors import ScenarioError

SCENARIO_KEY = "s"
VIEW_KEY = "v"


def encode(data: dict) -> str:
    raw = json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(zlib.compress(raw, 9)).decode().rstrip("=")


def decode(link: str, what: str = "the link's scenario (?s=...)") -> dict:
    """The table in a link (``what`` names it in errors); ``ScenarioError`` when the text is not one, or is larger
    than the limits (``link_chars`` before, ``link_bytes`` after decompression: decompression stops there)."""
    caps = DEFAULT_CAPS
    caps.check("link_chars", what, link)
    try:
        inflater = zlib.decompressobj()
        raw = inflater.decompress(base64.urlsafe_b64decode(link + "=" * (-len(link) % 4)), caps.link_bytes)
        too_large = bool(inflater.unconsumed_tail)
        if not too_large and not inflater.eof:
            raise ValueError("truncated")
        data = None if too_large else json.loads(raw)
    except (binascii.Error, zlib.error, ValueError, RecursionError):
        raise ScenarioError(f"{what} is damaged; the default is shown") from None
    if too_large:
        raise ScenarioError(f"{what} decompresses to more than the limit of {caps.link_bytes:,} bytes "
                                   f"(link_bytes); the default is shown")
    if not isinstance(data, dict):
        raise ScenarioError(f"{what} is not a table; the default is shown")
    return data


def page_link(app_url: str, page: str, scenario: dict, view: dict | None = None) -> str:
    """The address of ``page`` of the app at ``app_url`` opened on ``scenario`` (and the page's ``view``)."""
    query = {SCENARIO_KEY: encode(scenario), **({VIEW_KEY: encode(view)} if view else {})}
    return f"{app_url.rstrip('/')}/{page}?{urlencode(query)}"
