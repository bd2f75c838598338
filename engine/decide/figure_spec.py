"""Plotly figures written as plain dicts and wrapped once without validation.

Plotly's validating API (``go.Figure``, ``go.Scatter``, ``fig.update_layout``, ``make_subplots``) checks every
property as it is set: that took about half of a fully cached Lab page's server time. A builder here writes the
figure as the dict Plotly itself would hold (the property names of ``fig.to_dict()``: ``xaxis.title.text``, not
``xaxis_title``) and ``figure`` wraps it in one ``go.Figure(..., _validate=False)``, which Streamlit only
serialises. What the browser receives is unchanged: ``tests/test_figure_spec.py`` checks every builder's JSON
against the figure Plotly's validating API builds from the same spec.

The subplot grids (``subplot_layout``) are Plotly's own ``make_subplots`` layouts, computed once per shape and
copied.
"""

from __future__ import annotations

import copy
import functools

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots


def figure(data: list[dict], layout: dict) -> go.Figure:
    """The figure of traces ``data`` (each a dict with its ``type``) and ``layout``, without property checks."""
    return go.Figure({"data": data, "layout": layout}, _validate=False)


def array(values) -> np.ndarray | list:
    """A data array as Plotly's validators keep it: a pandas or numpy array as a numpy array (sent to the browser
    base64-encoded), anything else as a list."""
    if isinstance(values, (pd.Series, pd.Index)):
        return values.to_numpy()
    return values if isinstance(values, np.ndarray) else list(values)


def title(text: str) -> dict:
    """An axis's or a figure's title as Plotly stores it."""
    return {"text": text}


def axis_name(kind: str, index: int) -> str:
    """The layout key of the ``index``-th (1-based) x or y axis of a subplot grid: ``xaxis``, ``yaxis2``..."""
    return f"{kind}axis{index if index > 1 else ''}"


def axis_ref(kind: str, index: int) -> str:
    """How a trace or a shape names that axis: ``x``, ``y2``..."""
    return f"{kind}{index if index > 1 else ''}"


@functools.lru_cache(maxsize=32)
def _grid(rows: int, cols: int, shared_xaxes: bool, shared_yaxes: bool, vertical_spacing: float | None,
          titles: tuple[str, ...] | None) -> dict:
    spacing = {} if vertical_spacing is None else {"vertical_spacing": vertical_spacing}
    layout = make_subplots(rows=rows, cols=cols, shared_xaxes=shared_xaxes, shared_yaxes=shared_yaxes,
                           subplot_titles=titles, **spacing).to_dict()["layout"]
    layout.pop("template", None)  # ``figure`` adds the default template, as a new go.Figure does
    return layout


def subplot_layout(rows: int, cols: int, shared_xaxes: bool = False, shared_yaxes: bool = False,
                   vertical_spacing: float | None = None, titles: tuple[str, ...] | None = None) -> dict:
    """A fresh copy of ``make_subplots``'s layout for this grid (axes, domains, title annotations), computed once
    per grid: a builder adds its own keys to the copy."""
    return copy.deepcopy(_grid(rows, cols, shared_xaxes, shared_yaxes, vertical_spacing, titles))


def grid_trace(trace: dict, row: int, col: int, cols: int = 1) -> dict:
    """``trace`` placed in panel (``row``, ``col``) of a grid ``cols`` panels wide, as ``add_trace(row=, col=)``
    places it."""
    index = (row - 1) * cols + col
    trace["xaxis"], trace["yaxis"] = axis_ref("x", index), axis_ref("y", index)
    return trace
