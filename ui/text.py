"""Text from a scenario (class and scenario names, error lines that quote input) shown as plain text.

Streamlit renders Markdown in captions, messages, metric and widget labels, and Plotly renders a
subset of HTML in chart labels: a name such as ``![x](http://host/img)`` or ``<a href=...>`` would make
the browser fetch or link an outside address. Names and messages pass through these helpers wherever
they are shown.
"""

from __future__ import annotations

import html
import re

import streamlit as st

_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()<>#+\-.!|~$:&\"'=^])")


def plain(text: object) -> str:
    """``text`` escaped so that Streamlit's Markdown shows it as written (every Markdown, math, directive
    and emoji-shortcode character is backslash-escaped; line breaks become spaces)."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", " ".join(str(text).split()))


def chart_text(text: object) -> str:
    """``text`` for a Plotly label, legend or title: HTML special characters as entities."""
    return html.escape(str(text), quote=False)


def error(message: object) -> None:
    """One error line, shown as plain text."""
    st.error(plain(message))
