"""Every page runs through app.py's navigation, whichever address a visitor opened first."""

import streamlit as st

from engine.scenario.link import QUERY_MAX_CHARS, QUERY_MAX_PARAMETERS, UNREAD_KEY


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


def watch_unread_link() -> None:
    """Reopen the page on ``?unread_link=characters-N`` (or ``parameters-N``) when the address it was opened with
    holds a link Streamlit did not read (a session's first run found no query parameter).

    Streamlit drops a query string longer than ``QUERY_MAX_CHARS`` or of more than ``QUERY_MAX_PARAMETERS``
    parameters whole, with a line in the server log only, and the address the browser sends (``st.context.url``)
    has no query: only the page knows the link. Its script reads the address of the page's load (the navigation
    entry: Streamlit may already have replaced the address bar's) and, beyond a limit, reopens the page on the note,
    which ``state.current`` turns into one line over the default scenario."""
    st.html(f"""<script>
(() => {{
  const loaded = performance.getEntriesByType("navigation")[0];
  const query = new URL(loaded ? loaded.name : window.location.href).search.slice(1);
  const parameters = query.split("&").length;
  const unread = query.length > {QUERY_MAX_CHARS} ? `characters-${{query.length}}`
    : parameters > {QUERY_MAX_PARAMETERS} ? `parameters-${{parameters}}` : "";
  if (unread) window.location.replace(`${{window.location.pathname}}?{UNREAD_KEY}=${{unread}}`);
}})();
</script>""", unsafe_allow_javascript=True)
