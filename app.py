"""Scheduler Lab entry point: page config and navigation only.

Each page first draws the shared scenario sidebar (``ui.scenario_sidebar.render``), which also
reruns through this entry point whenever Streamlit started the page on its own.
"""

import streamlit as st

st.set_page_config(page_title="Scheduler Lab", page_icon=":material/schedule:", layout="wide")
st.navigation([
    st.Page("pages/lab.py", title="Scheduler Lab", icon=":material/tune:", default=True),
    st.Page("pages/workload.py", title="Workload", icon=":material/stacked_bar_chart:"),
    st.Page("pages/hardware.py", title="Hardware & Cost", icon=":material/memory:"),
    st.Page("pages/method.py", title="Method", icon=":material/menu_book:"),
]).run()
