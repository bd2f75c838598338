"""Widgets generated from the scenario's own field metadata (type, unit, range, choices, help).

``field_input`` renders one ``[server]``/``[policy]``/class key and returns the chosen value; labels
carry the unit, help comes from the config's help text, so the UI and the docs never disagree; choices and the
keys a help text names read in words (``engine.scenario.labels``).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Optional

import streamlit as st

from engine.scenario.config import Policy, field_bounds, field_label, field_meta
from engine.scenario.labels import CHOICE_WORDS, choice_label, key_words, own_choices
from engine.sim.policies import POLICY_LABELS
from ui.text import sentence


@functools.lru_cache(maxsize=None)
def field_help(cls: type, name: str) -> str | None:
    """The help of key ``name`` of ``cls`` as a sentence in the form's words (``labels.key_words``): the keys it
    names by their labels, its choices, and the step-time models and policies it lists by their words. Made once
    per key (every widget of every rerun asks for it)."""
    help_text = field_meta(cls, name)[1].get("help")
    if not help_text:
        return None
    listed = {**CHOICE_WORDS["step_model"], **(POLICY_LABELS if cls is Policy else {})}  # "(roofline; ...)"
    return sentence(key_words(help_text, own_choices(cls, name), listed))


def field_input(cls: type, name: str, value: Any, key: str, label: Optional[str] = None,
                options: Optional[list] = None, placeholder: Optional[str] = None) -> Any:
    """One input for ``cls.name`` showing ``value`` (the field's default when None is not allowed); an empty
    number input shows ``placeholder`` (what leaving it empty means). A value that is not among the choices is
    kept as one more choice, never replaced by the first: the scenario's validation names it, not the widget."""
    tp, meta, default = field_meta(cls, name)
    unit = meta.get("unit", "")
    text = (label or field_label(cls, name)) + (f" ({unit})" if unit else "")
    help_text = field_help(cls, name)
    if value is None and default is not dataclasses.MISSING:
        value = default
    if tp is bool:
        return st.toggle(text, value=bool(value), key=key, help=help_text)
    choices = options or meta.get("choices")
    if choices:
        choices = list(choices) + ([value] if value is not None and value not in choices else [])
        return st.selectbox(text, choices, index=0 if value is None else choices.index(value), key=key,
                            help=help_text, format_func=lambda choice: choice_label(cls, name, choice))
    low, high = field_bounds(meta)
    if tp is str:
        return st.text_input(text, value=value or "", key=key, help=help_text, max_chars=high)
    if tp is int:
        return st.number_input(text, value=None if value is None else int(value), step=1, key=key, help=help_text,
                               min_value=None if low is None else int(low),
                               max_value=None if high is None else int(high), placeholder=placeholder)
    return st.number_input(text, value=None if value is None else float(value), key=key, help=help_text,
                           min_value=None if low is None else float(low),
                           max_value=None if high is None else float(high), format="%g", placeholder=placeholder)
