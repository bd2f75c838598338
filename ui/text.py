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
# GitHub-flavoured Markdown turns addresses in plain text into links (http://..., www...., a@b.c), escaped
# or not; an invisible word joiner inside each pattern keeps them text.
_AUTOLINK_PARTS = re.compile(r"(:|(?i:www)(?=\.)|(?=@))")
WORD_JOINER = "\u2060"


def plain(text: object) -> str:
    """``text`` so that Streamlit's Markdown shows it as written: every Markdown, math, directive and
    emoji-shortcode character backslash-escaped, a word joiner (invisible) after each ':', 'www' and before
    each '@' so that no address becomes a link, line breaks as spaces."""
    joined = _AUTOLINK_PARTS.sub(lambda m: m.group(0) + WORD_JOINER, " ".join(str(text).split()))
    return _MARKDOWN_SPECIAL.sub(r"\\\1", joined)


def chart_text(text: object) -> str:
    """``text`` for a Plotly label, legend or title: HTML special characters as entities."""
    return html.escape(str(text), quote=False)


def error(message: object) -> None:
    """One error line, shown as plain text."""
    st.error(plain(message))


def sentence(text: str) -> str:
    """A help text as a sentence: capital first letter, final full stop."""
    text = text.strip()
    return text[:1].upper() + text[1:] + ("" if text.endswith((".", "?", "!", ")")) else ".")
