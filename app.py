"""Scheduler Lab entry point: page config and navigation only.

Each page draws the shared scenario sidebar itself (``ui.scenario_sidebar.render``), so the page
works the same whether Streamlit runs it through this entry point or directly (as AppTest reruns do).
"""

import streamlit as st

st.set_page_config(page_title="Scheduler Lab", page_icon=":material/schedule:", layout="wide")
st.navigation([
    st.Page("pages/lab.py", title="Scheduler Lab", icon=":material/tune:", default=True),
    st.Page("pages/workload.py", title="Workload", icon=":material/stacked_bar_chart:"),
    st.Page("pages/method.py", title="Method", icon=":material/menu_book:"),
]).run()
