"""Every page runs inside ``run_page`` (and every fragment inside ``fragment``): an unexpected error is one
line on the page, never a traceback.

The traceback goes to the server log only (it names server paths); the browser gets the error's type
and a request to report it. Streamlit's own control flow (``st.rerun``, ``st.stop``, a rerun requested
by the user) uses ``BaseException`` subclasses and passes through untouched.
"""

from __future__ import annotations

import functools
import logging
from typing import Callable

import streamlit as st

from ui import text, view

LOG = logging.getLogger(__name__)


def run_page(body: Callable[[], None]) -> None:
    """Run ``body`` (a page); catch what it did not expect, log it and show one line."""
    try:
        body()
    except Exception as exc:  # noqa: BLE001 - the point of this function
        LOG.exception("page failed")
        text.error(f"This page stopped on an unexpected error ({type(exc).__name__}); the scenario is unchanged. "
                   "Please report it with the page link.")
    finally:
        view.remember()  # the view controls drawn so far go into the link, whatever stopped the page


def fragment(func: Callable) -> Callable:
    """``st.fragment`` whose body runs inside ``run_page`` (a fragment's own reruns bypass the page's guard)."""
    @functools.wraps(func)
    def guarded(*args, **kwargs) -> None:
        run_page(lambda: func(*args, **kwargs))

    return st.fragment(guarded)
