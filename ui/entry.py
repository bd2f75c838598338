"""Every page runs through app.py's navigation, whichever address a visitor opened first."""

import streamlit as st


def through_app() -> None:
    """Rerun through app.py when Streamlit ran this page on its own (every page calls this first).

    With a ``pages/`` folder beside app.py, a fresh server's first request for a page URL runs that
    page directly (Streamlit's older multipage mode), skipping app.py's ``st.navigation``; Streamlit
    leaves that mode for good once ``st.navigation`` has run. Rerunning makes every entry path the same.
    """
    from streamlit.runtime.pages_manager import PagesManager

    if PagesManager.uses_pages_directory:
        PagesManager.uses_pages_directory = False
        st.rerun()
