"""Scheduler Lab entry point: page config and navigation only.

Each page first draws the shared scenario sidebar (``ui.scenario_sidebar.render``), which also
reruns through this entry point whenever Streamlit started the page on its own. Every page runs inside
``ui.guard.run_page``: an unexpected error is one line on the page, never a traceback; and in its turn
(``ui.turns``): when many sessions open pages at once, pages are computed a few at a time, first come first served.
The frame every page shares (settings, look, navigation) is drawn in the page's turn too: a page that waits shows
only where it stands, one message for the server to send (200 sessions arriving at once each drew theirs first,
and the server's event loop sent those messages instead of answering anyone else).
"""

import streamlit as st
from streamlit.navigation.page import StreamlitPage

from ui import guard, jobs, turns

PHONE_MAX_WIDTH_PX = 640  # below this width Streamlit shows the sidebar as a drawer over the page

# On a phone the sidebar is a drawer over the page: choosing a page in it closes it, as a phone's menu does. One
# listener per window, on the navigation's links only, so editing the scenario in the drawer leaves it open.
DRAWER_SCRIPT = f"""<script>
if (!window.schedulerLabDrawer) {{
  window.schedulerLabDrawer = true;
  document.addEventListener("click", (event) => {{
    if (window.innerWidth >= {PHONE_MAX_WIDTH_PX} || !event.target.closest('[data-testid="stSidebarNav"] a')) return;
    setTimeout(() => document.querySelector('[data-testid="stSidebarCollapseButton"] button')?.click(), 0);
  }}, true);
}}
</script>"""


def frame() -> StreamlitPage:
    """The frame every page shares (its settings, its look, the navigation); the page the navigation chose. Drawn in
    the page's turn: a page that waits for its turn shows only where it stands, which costs the server one message."""
    st.set_page_config(page_title="Scheduler Lab", page_icon=":material/schedule:", layout="wide")
    jobs.watch_server()  # every run stops at once when the server is asked to stop
    # One look for every page (the rest is .streamlit/config.toml's theme): card values a little smaller than
    # Streamlit's default, so that three class cards of two columns hold "49.2 s" or "no target" at 1,400 px.
    st.html("<style>[data-testid='stMetricValue'] {font-size: 1.75rem;}</style>")
    page = st.navigation([
        st.Page("pages/lab.py", title="Scheduler Lab", icon=":material/tune:", default=True),
        st.Page("pages/workload.py", title="Workload", icon=":material/stacked_bar_chart:"),
        st.Page("pages/hardware.py", title="Hardware & Cost", icon=":material/memory:"),
        st.Page("pages/planner.py", title="Planner", icon=":material/checklist:"),
        st.Page("pages/workshop.py", title="Workshop", icon=":material/school:"),
        st.Page("pages/article.py", title="The article, re-run", icon=":material/article:"),
        st.Page("pages/method.py", title="Method", icon=":material/menu_book:"),
    ])
    st.html(DRAWER_SCRIPT, unsafe_allow_javascript=True)
    return page


def run_page() -> None:
    """The page in its turn, as one job: what it started and did not wait for stops when it ends."""
    with jobs.page_run():
        turns.in_turn(lambda: frame().run())


guard.run_page(run_page)
