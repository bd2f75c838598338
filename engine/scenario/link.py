"""A scenario or a page's view in a link: JSON, zlib-compressed, base64url, so that a copied address reopens the
same page (``ui.state`` keeps the scenario in ``?s=``, ``ui.view`` the view in ``?v=``), and a report links back
to its plan. Reading a link is bounded: its length, and its size after decompression (``caps``); every key and text
it holds is Unicode text (``config.not_text``), so no page fails to show it."""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
import zlib
from typing import Iterator
from urllib.parse import urlencode, urlparse

from .caps import DEFAULT_CAPS
from .config import not_text
from .errors import ScenarioError, key_text

SCENARIO_KEY = "s"
VIEW_KEY = "v"
PUBLIC_URL_ENV = "SCHEDULER_LAB_PUBLIC_URL"  # the address reports link back to: the operator's setting
LOCAL_HOSTS = ("localhost", "127.0.0.1", "0.0.0.0", "::1")  # addresses only the machine itself can open
PATH_CHARS = 80  # the longest key an error line names in full
# Streamlit reads no query string (the part of an address after '?') longer than this or of more parameters: it drops
# it whole, with a line in the server's log only (streamlit.runtime.state.query_params); tests/test_safety_app.py
# checks that these are Streamlit's.
QUERY_MAX_CHARS = 512 * 1024
QUERY_MAX_PARAMETERS = 1000
UNREAD_KEY = "unread_link"  # what the page puts in the address in place of a link Streamlit did not read


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
    _check_texts(data, what)
    return data


def unread_link_line(marker: object) -> str:
    """The error line for ``?unread_link=characters-N`` (or ``parameters-N``), which the page puts in place of a link
    Streamlit did not read (``ui.entry.watch_unread_link``): it was too long, or had too many parameters, and the
    default scenario is shown; '' for any other value (a count within the limit included)."""
    found = re.fullmatch(r"(characters|parameters)-([0-9]{1,15})", marker) if isinstance(marker, str) else None
    if found is None:
        return ""
    count, limit = int(found.group(2)), QUERY_MAX_CHARS if found.group(1) == "characters" else QUERY_MAX_PARAMETERS
    if count <= limit:
        return ""
    what = "characters after its '?'" if found.group(1) == "characters" else "parameters"
    return (f"the link had {count:,} {what}, more than the {limit:,} the server reads, so it was not read; the "
            f"default scenario is shown")


def _children(node: dict | list) -> Iterator[tuple[str | int, object]]:
    """(step, child) of a table (each key too, as a child at its own step) or of a list."""
    if isinstance(node, dict):
        return ((key, child) for key, value in node.items() for child in (key, value))
    return enumerate(node)


def _path_text(steps: list[str | int]) -> str:
    """The dotted key of ``steps`` from the top table ('workload.classes[0].name'); its end only, after '...', when
    it is longer than ``PATH_CHARS`` (a link may nest a thousand lists deep)."""
    text = "".join(f"[{s}]" if isinstance(s, int) else f".{key_text(s)}" for s in steps)[1:]
    return text if len(text) <= PATH_CHARS else "..." + text[3 - PATH_CHARS:]


def _check_texts(data: dict, what: str) -> None:
    """``ScenarioError`` naming the first key or text of ``data`` (the link ``what``) that is not Unicode text: JSON
    allows a lone surrogate ("\\ud800"), which no page can show."""
    problem = first_not_text(data)
    if problem:
        raise ScenarioError(f"{what}: {problem}; the default is shown")


def first_not_text(data: dict | list) -> str:
    """The dotted key of the first key or text of JSON ``data`` that is not Unicode text, and why
    ('workload.name is not Unicode text (character 1 is a lone surrogate)'); '' when every one is. Depth first, one
    iterator per open table or list: memory grows with the depth only, whatever a hostile document holds."""
    stack: list[tuple[str | int | None, Iterator]] = [(None, _children(data))]
    while stack:
        item = next(stack[-1][1], None)
        if item is None:
            stack.pop()
            continue
        step, child = item
        if isinstance(child, str) and not_text(child):
            steps = [s for s, _ in stack[1:]] + [step]
            return f"{_path_text(steps)} {not_text(child)}"
        if isinstance(child, (dict, list)):
            stack.append((step, _children(child)))
    return ""


def public_address(seen: str | None = None) -> str | None:
    """The address a report links back to: ``$SCHEDULER_LAB_PUBLIC_URL`` when the operator set it, else ``seen``
    (where the visitor reached the app); None when that is missing or local to one machine (a customer could not
    open it), and the report then carries its scenario instead of a link."""
    address = (os.environ.get(PUBLIC_URL_ENV) or seen or "").strip()
    host = urlparse(address).hostname if address else None
    return None if not host or host in LOCAL_HOSTS or host.startswith("127.") else address.rstrip("/")


def page_link(app_url: str, page: str, scenario: dict, view: dict | None = None) -> str:
    """The address of ``page`` of the app at ``app_url`` opened on ``scenario`` (and the page's ``view``)."""
    query = {SCENARIO_KEY: encode(scenario), **({VIEW_KEY: encode(view)} if view else {})}
    return f"{app_url.rstrip('/')}/{page}?{urlencode(query)}"
