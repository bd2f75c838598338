"""Scheduler Lab entry point: page config and navigation only.

Each page first draws the shared scenario sidebar (``ui.scenario_sidebar.render``), which also
reruns through this entry point whenever Streamlit started the page on its own. Every page runs inside
``ui.guard.run_page``: an unexpected error is one line on the page, never a traceback.
"""

import streamlit as st

from ui import guard

st.set_page_config(page_title="Scheduler Lab", page_icon=":material/schedule:", layout="wide")
page = st.navigation([
    st.Page("pages/lab.py", title="Scheduler Lab", icon=":material/tune:", default=True),
    st.Page("pages/workload.py", title="Workload", icon=":material/stacked_bar_chart:"),
    st.Page("pages/hardware.py", title="Hardware & Cost", icon=":material/memory:"),
    st.Page("pages/method.py", title="Method", icon=":material/menu_book:"),
])
guard.run_page(page.run)
